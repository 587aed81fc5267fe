--------------------------- MODULE TpxGatewayOverlap ---------------------------
(***************************************************************************)
(* Overlapping exchanges of one conversation (TpxGateway.tla, extended).   *)
(* While an exchange of conversation c is in flight, the client may send  *)
(* c a second request: the same history again (a timeout retry: the first *)
(* request is still running at the gateway) or a fork of the history (the  *)
(* history cut after one of its rounds, as an editor that rewinds the      *)
(* conversation sends it). The second exchange is the fork exchange of c:  *)
(* its variables are f*; TpxGateway's variables are the main exchange's    *)
(* and the conversation's history, which the fork's steps leave alone.     *)
(*                                                                         *)
(* What each exchange gets: the reply to its own request (OwnReplies). The *)
(* fork's provider emits ids of the same conversation, Ids(c): they may be *)
(* the very ids the main exchange's provider emitted, or ids of the        *)
(* history, and that is no cross-pairing: NoCrossPairing and               *)
(* ForkNoCrossPairing are judged per conversation (no id of another        *)
(* conversation on any of c's wires, replies or histories).                *)
(*                                                                         *)
(* ForkSend: a correct request of a fork of c's history while c's main     *)
(* exchange is in flight: the rounds Rounds(c) cut after round k, the      *)
(* request answering the calls of round k (k = 0: no round), or c's own    *)
(* history again (the request the main exchange sent). ForkReply: the     *)
(* provider's reply to the fork's request. ForkFail: the fork's exchange   *)
(* fails (provider error, client gone). ForkDeliver: the fork's client    *)
(* gets its reply. At most MaxForks forks per conversation.                *)
(*                                                                         *)
(* fgotFor[c] names the exchange whose request the reply handed to the     *)
(* fork's client answers ("fork": its own; "none": no reply yet, or the    *)
(* fork failed): a reply identity beyond its tool ids, since two replies   *)
(* of one conversation may carry the same ids.                             *)
(*                                                                         *)
(* Checked (TpxGatewayOverlap.cfg; TpxGatewayOverlapDeep.cfg, two turns   *)
(* instead of one): every invariant and property of TpxGateway.cfg, and   *)
(* OwnReplies, ForkPairingInv, ForkNoCrossPairing, ForkTypeOK; deadlock    *)
(* freedom.                                                                *)
(*                                                                         *)
(* Mirror: tpx/oracle/model/gateway/overlap.py (the lines are checked by   *)
(* test_gateway_overlap_mirror.py)                                         *)
(*   line  spec                  mirror                                    *)
(*     59  CONSTANTS             overlap.py  OverlapConfig                 *)
(*     62  VARIABLES             overlap.py  OverlapState                  *)
(*     72  forkVars              overlap.py  FORK_VARS, OVERLAP_VARS       *)
(*     76  RoundIds              overlap.py  RoundIds                      *)
(*     79  Whose                 overlap.py  Whose                         *)
(*     84  ForkRequests          overlap.py  ForkRequests                  *)
(*     89  OverlapInit           overlap.py  OverlapInit                   *)
(*    101  ForkSend              overlap.py  ForkSend                      *)
(*    117  ForkReply             overlap.py  ForkReply                     *)
(*    127  ForkFail              overlap.py  ForkFail                      *)
(*    136  ForkDeliver           overlap.py  ForkDeliver                   *)
(*    144  OverlapNext           overlap.py  OverlapNext, FORK_ACTIONS     *)
(*    171  ForkTypeOK            overlap.py  ForkTypeOK                    *)
(*    183  OwnReplies            overlap.py  OwnReplies                    *)
(*    189  ForkPairingInv        overlap.py  ForkPairingInv                *)
(*    197  ForkNoCrossPairing    overlap.py  ForkNoCrossPairing            *)
(***************************************************************************)
EXTENDS TpxGateway

CONSTANTS
    MaxForks        \* bound on fork exchanges per conversation

VARIABLES
    fphase,       \* [Convs -> Phases] where c's fork exchange is
    fres,         \* [Convs -> Seq(pairs)] the rounds the fork's request carried upstream
    fwire,        \* [Convs -> ids] tool ids on the fork's wire: the ids its request
                  \*   answers, then the ids of its reply
    femitted,     \* [Convs -> ids] ids the provider emitted for the fork's request
    fgot,         \* [Convs -> ids] tool_use ids of the reply handed to the fork's client
    fgotFor,      \* [Convs -> Whose] whose request that reply answers
    forks         \* [Convs -> 0..MaxForks] fork exchanges c started

forkVars == <<fphase, fres, fwire, femitted, fgot, fgotFor, forks>>
overlapVars == <<vars, forkVars>>

\* The ids a set of pairs binds, for one round.
RoundIds(r) == {p[1] : p \in r}

\* Whose request a reply answers: the main exchange's, the fork's, none.
Whose == {"none", "main", "fork"}

\* The correct requests of a fork of c's history: its rounds cut after
\* round k, answering the calls of round k (none for k = 0), or c's
\* history itself (the main exchange's request, sent again).
ForkRequests(c) ==
    {<<Rounds(c), pending[c]>>}
    \cup {<<SubSeq(Rounds(c), 1, k), RoundIds(Rounds(c)[k])>> : k \in 1..Len(Rounds(c))}
    \cup {<<<<>>, {}>>}

OverlapInit ==
    /\ Init
    /\ fphase = [c \in Convs |-> "idle"]
    /\ fres = [c \in Convs |-> <<>>]
    /\ fwire = [c \in Convs |-> {}]
    /\ femitted = [c \in Convs |-> {}]
    /\ fgot = [c \in Convs |-> {}]
    /\ fgotFor = [c \in Convs |-> "none"]
    /\ forks = [c \in Convs |-> 0]

\* A second request of c while c's main exchange is in flight: a new
\* exchange of the fork, nothing emitted for it or handed to its client yet.
ForkSend(c) ==
    /\ phase[c] # "idle"
    /\ fphase[c] = "idle"
    /\ forks[c] < MaxForks
    /\ Verifies(c)
    /\ \E r \in ForkRequests(c) :
          /\ fres' = [fres EXCEPT ![c] = r[1]]
          /\ fwire' = [fwire EXCEPT ![c] = r[2]]
    /\ fphase' = [fphase EXCEPT ![c] = "req"]
    /\ forks' = [forks EXCEPT ![c] = forks[c] + 1]
    /\ femitted' = [femitted EXCEPT ![c] = {}]
    /\ fgot' = [fgot EXCEPT ![c] = {}]
    /\ fgotFor' = [fgotFor EXCEPT ![c] = "none"]
    /\ UNCHANGED vars

\* The provider's reply to the fork's request: ids of c's own.
ForkReply(c) ==
    /\ fphase[c] = "req"
    /\ \E ids \in SUBSET Ids(c) :
          /\ femitted' = [femitted EXCEPT ![c] = ids]
          /\ fwire' = [fwire EXCEPT ![c] = ids]
    /\ fphase' = [fphase EXCEPT ![c] = "resp"]
    /\ UNCHANGED <<fres, fgot, fgotFor, forks>>
    /\ UNCHANGED vars

\* The fork's exchange fails: its client gets an error, no reply.
ForkFail(c) ==
    /\ fphase[c] = "req"
    /\ fphase' = [fphase EXCEPT ![c] = "idle"]
    /\ fgot' = [fgot EXCEPT ![c] = {}]
    /\ fgotFor' = [fgotFor EXCEPT ![c] = "none"]
    /\ UNCHANGED <<fres, fwire, femitted, forks>>
    /\ UNCHANGED vars

\* The fork's client gets the reply on the fork's wire: its own.
ForkDeliver(c) ==
    /\ fphase[c] = "resp"
    /\ fgot' = [fgot EXCEPT ![c] = fwire[c]]
    /\ fgotFor' = [fgotFor EXCEPT ![c] = "fork"]
    /\ fphase' = [fphase EXCEPT ![c] = "idle"]
    /\ UNCHANGED <<fres, fwire, femitted, forks>>
    /\ UNCHANGED vars

OverlapNext ==
    \/ \E c \in Convs :
          \/ CallerSend(c) /\ UNCHANGED forkVars
          \/ CallerAbort(c) /\ UNCHANGED forkVars
          \/ NoProvider(c) /\ UNCHANGED forkVars
          \/ ProviderReply(c) /\ UNCHANGED forkVars
          \/ ProviderFail(c) /\ UNCHANGED forkVars
          \/ Deliver(c) /\ UNCHANGED forkVars
          \/ ClientGone(c) /\ UNCHANGED forkVars
          \/ Retry(c) /\ UNCHANGED forkVars
          \/ PromptTooLong(c) /\ UNCHANGED forkVars
          \/ UpstreamAccept(c) /\ UNCHANGED forkVars
          \/ Resend(c) /\ UNCHANGED forkVars
          \/ Failover(c) /\ UNCHANGED forkVars
          \/ FirstByte(c) /\ UNCHANGED forkVars
          \/ ForkSend(c)
          \/ ForkReply(c)
          \/ ForkFail(c)
          \/ ForkDeliver(c)
    \/ Rotate /\ UNCHANGED forkVars
    \/ Recover /\ UNCHANGED forkVars
    \/ Halted /\ UNCHANGED forkVars

OverlapSpec == OverlapInit /\ [][OverlapNext]_overlapVars

-----------------------------------------------------------------------------

ForkTypeOK ==
    /\ fphase \in [Convs -> Phases]
    /\ fres \in [Convs -> Seq(SUBSET Pairs)]
    /\ fwire \in [Convs -> SUBSET AllIds]
    /\ femitted \in [Convs -> SUBSET AllIds]
    /\ fgot \in [Convs -> SUBSET AllIds]
    /\ fgotFor \in [Convs -> Whose]
    /\ forks \in [Convs -> 0..MaxForks]

\* Each exchange gets the reply to its own request: the reply handed to
\* the fork's client answers the fork's request and carries the ids its
\* provider emitted for it (the main exchange's: Deliver, by PairingInv).
OwnReplies ==
    \A c \in Convs : fgotFor[c] \in {"none", "fork"} /\ (fgotFor[c] = "fork" => fgot[c] = femitted[c])

\* The fork's request carries every round of the history it forked, each
\* result under the id of the call it answers, and answers ids of that
\* history; its reply on the wire carries the ids emitted for it.
ForkPairingInv ==
    \A c \in Convs :
        /\ Bound(AllRounds(fres[c]))
        /\ (fphase[c] = "req") => fwire[c] \subseteq Names(AllRounds(fres[c]))
        /\ (fphase[c] = "resp") => fwire[c] = femitted[c]

\* No id of another conversation on the fork's wire, in its rounds, in
\* the reply emitted for it or handed to its client.
ForkNoCrossPairing ==
    \A c, d \in Convs :
        c # d => Ids(d) \cap (fwire[c] \cup femitted[c] \cup fgot[c]
                              \cup Names(AllRounds(fres[c]))) = {}

=============================================================================
