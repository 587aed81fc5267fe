----------------------------- MODULE TpxGateway -----------------------------
(***************************************************************************)
(* The gateway (`tpx serve`): many conversations at once behind one        *)
(* boot-time provider selection. Each conversation c \in Convs runs the    *)
(* seed's exchange machine (TpxTransport.tla); only hasKey, hasToken and   *)
(* provider are shared, chosen once at boot. At most MaxInFlight           *)
(* exchanges are in flight (phase # "idle") at any time. Steps of          *)
(* different conversations interleave freely.                              *)
(*                                                                         *)
(* Tool ids are per conversation: the identity of a tool call is           *)
(* <<c, t>>, the conversation whose provider produced it and a local name  *)
(* t \in ToolIds (Ids(c)). NoCrossPairing says such an id never reaches    *)
(* another conversation's wire or obligations.                             *)
(*                                                                         *)
(* Where it differs from TpxTransport.tla, and why (all guarded by         *)
(* GatewayRetry; with GatewayRetry = FALSE every conversation's            *)
(* projection is a behaviour of TpxTransport: Refinement, checked with     *)
(* TpxGatewayRefinement.cfg):                                              *)
(*  1. The gateway keeps no state between requests: a conversation's       *)
(*     obligations (pending) are the tool_use ids of the last assistant    *)
(*     turn of the history the client sends. A failed exchange             *)
(*     (ProviderFail, ClientGone) therefore does NOT discard pending: the  *)
(*     history still holds the obligations. The seed discards them.        *)
(*  2. Retry (new): after a failed exchange the client re-sends the same   *)
(*     turn (the same tool_results, reqIds unchanged), as the SDKs and     *)
(*     Claude Code do on 429/5xx/a broken stream. RetryInv: after a        *)
(*     failure the obligations are still exactly what the failed request   *)
(*     answered, so the retry answers every one of them once. Hence a      *)
(*     Retry step reaches the very state a CallerSend would: the stateless *)
(*     gateway cannot tell a retried turn from a fresh one, and need not.  *)
(*  3. CallerAbort reads, in the gateway, as "the request is refused for   *)
(*     pairing": its tool_results do not answer the history's obligations  *)
(*     (one missing, unknown or duplicated), so the gateway answers 400    *)
(*     invalid_request_error before anything reaches the wire. The         *)
(*     exchange counts (turn + 1, lastOutcome = "err") but pending,        *)
(*     reqIds and the wire are unchanged: the obligations are the          *)
(*     history's, not the gateway's to discard, and the client may answer  *)
(*     them correctly afterwards (CallerSend). It is enabled with or       *)
(*     without obligations (an unknown id can be refused when pending is   *)
(*     empty); the seed requires pending # {} and discards pending.        *)
(*  4. ClientGone (new): the client disconnects mid-exchange (phase "req": *)
(*     a streamed reply is forwarded event by event and the spec's         *)
(*     ProviderReply is its terminal event, so a disconnect mid-stream is  *)
(*     in "req"). The exchange fails exactly as ProviderFail does. With    *)
(*     GatewayRetry = FALSE it is a seed ProviderFail step.                *)
(*  5. Halted stutters only when every conversation has spent its turns,   *)
(*     so deadlock checking covers the whole gateway.                      *)
(* Everything else is the seed's, per conversation, plus the InFlight      *)
(* guard on sends and the retryable bookkeeping (no seed variable).        *)
(*                                                                         *)
(* Checked (TpxGateway.cfg): TypeOK, ShapeInv, PairingInv, SelectionInv,   *)
(* BoundedInv per conversation (BoundedInv also bounds the requests in     *)
(* flight), NoCrossPairing, RetryInv; SelectionStable gateway-wide;        *)
(* deadlock freedom (TLC's default).                                       *)
(*                                                                         *)
(* Mirror: tpx/model/gateway/ (test_gateway_spec_table checks the lines)   *)
(*   line  spec                  mirror                                    *)
(*     88  CONSTANTS             state.py   Config                         *)
(*    101  VARIABLES             state.py   State, VARS                    *)
(*    119  Ids, AllIds           state.py   Config.Ids, Config.AllIds      *)
(*    123  Select                state.py   Config.Select                  *)
(*    126  NativeShape           state.py   Config.NativeShape             *)
(*    129  InFlight              state.py   InFlight                       *)
(*    131  Init                  actions.py Init                           *)
(*    146  CredsUnchanged        invariants.py CredsUnchanged              *)
(*    151  CallerSend            actions.py CallerSend                     *)
(*    169  CallerAbort           actions.py CallerAbort                    *)
(*    182  NoProvider            actions.py NoProvider                     *)
(*    193  ProviderReply         actions.py ProviderReply                  *)
(*    205  ProviderFail          actions.py ProviderFail                   *)
(*    217  ClientGone            actions.py ClientGone                     *)
(*    230  Retry                 actions.py Retry                          *)
(*    246  Deliver               actions.py Deliver                        *)
(*    258  Halted                actions.py Halted                         *)
(*    262  Next                  actions.py ACTIONS, Next                  *)
(*    278  TypeOK                invariants.py TypeOK                      *)
(*    294  ShapeInv              invariants.py ShapeInv                    *)
(*    296  PairingInv            invariants.py PairingInv                  *)
(*    303  SelectionInv          invariants.py SelectionInv                *)
(*    306  BoundedInv            invariants.py BoundedInv                  *)
(*    313  NoCrossPairing        invariants.py NoCrossPairing              *)
(*    319  RetryInv              invariants.py RetryInv                    *)
(*    323  SelectionStable       invariants.py SelectionStable             *)
(*    337  Refinement            (TLC only; the mirror: refinement.py)     *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets

CONSTANTS
    Convs,          \* conversations (model values)
    ToolIds,        \* local tool-id names; a tool call's id is <<c, t>>
    MaxTurns,       \* bound on exchanges per conversation
    MaxInFlight,    \* bound on exchanges in flight across the gateway
    GatewayRetry,   \* TRUE: the gateway; FALSE: the seed's semantics
    ANTHROPIC, TPX, NONE

Providers == {ANTHROPIC, TPX, NONE}
Shapes    == {"messages", "openai"}
Phases    == {"idle", "req", "resp"}
Outcomes  == {"none", "ok", "err"}

VARIABLES
    hasKey,       \* static API key present at boot (shared)
    hasToken,     \* OAuth bearer token present at boot (shared)
    provider,     \* provider chosen at boot, fixed, shared by all conversations
    turn,         \* [Convs -> Nat] completed exchanges
    phase,        \* [Convs -> Phases] where the conversation's exchange is
    pending,      \* [Convs -> ids] obligations: tool_use ids of the history's last assistant turn
    reqIds,       \* [Convs -> ids] tool_result ids in the conversation's last request
    wireShape,    \* [Convs -> Shapes] shape of the body on the conversation's wire
    wireIds,      \* [Convs -> ids] tool ids carried by that body
    emitted,      \* [Convs -> ids] ids the conversation's provider last emitted
    gotShape,     \* [Convs -> Shapes] shape of the last body handed to its client
    lastOutcome,  \* [Convs -> Outcomes] result of the conversation's last exchange
    retryable     \* [Convs -> BOOLEAN] its last exchange failed: the turn may be re-sent

vars == <<hasKey, hasToken, provider, turn, phase, pending, reqIds,
          wireShape, wireIds, emitted, gotShape, lastOutcome, retryable>>

Ids(c) == {<<c, t>> : t \in ToolIds}
AllIds == Convs \X ToolIds

\* Deterministic selection at boot: key wins, then token, then nothing.
Select(k, t) == IF k THEN ANTHROPIC ELSE IF t THEN TPX ELSE NONE

\* The protocol each provider speaks on the wire.
NativeShape(p) == IF p = TPX THEN "openai" ELSE "messages"

\* Exchanges in flight across the gateway.
InFlight == Cardinality({c \in Convs : phase[c] # "idle"})

Init ==
    /\ hasKey \in BOOLEAN
    /\ hasToken \in BOOLEAN
    /\ provider = Select(hasKey, hasToken)
    /\ turn = [c \in Convs |-> 0]
    /\ phase = [c \in Convs |-> "idle"]
    /\ pending = [c \in Convs |-> {}]
    /\ reqIds = [c \in Convs |-> {}]
    /\ wireShape = [c \in Convs |-> "messages"]
    /\ wireIds = [c \in Convs |-> {}]
    /\ emitted = [c \in Convs |-> {}]
    /\ gotShape = [c \in Convs |-> "messages"]
    /\ lastOutcome = [c \in Convs |-> "none"]
    /\ retryable = [c \in Convs |-> FALSE]

CredsUnchanged == UNCHANGED <<hasKey, hasToken, provider>>

\* The client answers every obligation of its history with exactly one
\* tool_result; the gateway frames the request natively (ANTHROPIC) or
\* translates it (TPX), carrying exactly the client's tool ids.
CallerSend(c) ==
    /\ phase[c] = "idle"
    /\ turn[c] < MaxTurns
    /\ provider # NONE
    /\ InFlight < MaxInFlight
    /\ reqIds' = [reqIds EXCEPT ![c] = pending[c]]
    /\ wireShape' = [wireShape EXCEPT ![c] = NativeShape(provider)]
    /\ wireIds' = [wireIds EXCEPT ![c] = pending[c]]
    /\ phase' = [phase EXCEPT ![c] = "req"]
    /\ retryable' = [retryable EXCEPT ![c] = FALSE]
    /\ UNCHANGED <<turn, pending, emitted, gotShape, lastOutcome>>
    /\ CredsUnchanged

\* Seed: the caller cannot produce tool results; the turn aborts and the
\* obligations are discarded. Gateway: the request is refused for pairing
\* (400 before the wire); the history keeps its obligations (difference 3).
\* (The guard is written with => because TLC branches on a disjunction in an
\* action and would generate the successor twice.)
CallerAbort(c) ==
    /\ phase[c] = "idle"
    /\ turn[c] < MaxTurns
    /\ provider # NONE
    /\ ~GatewayRetry => pending[c] # {}
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "err"]
    /\ pending' = IF GatewayRetry THEN pending ELSE [pending EXCEPT ![c] = {}]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ retryable' = [retryable EXCEPT ![c] = FALSE]
    /\ UNCHANGED <<phase, reqIds, wireShape, wireIds, emitted, gotShape>>
    /\ CredsUnchanged

\* No credentials were present at boot: every exchange fails at once (401).
NoProvider(c) ==
    /\ phase[c] = "idle"
    /\ turn[c] < MaxTurns
    /\ provider = NONE
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "err"]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ UNCHANGED <<phase, pending, reqIds, wireShape, wireIds, emitted, gotShape, retryable>>
    /\ CredsUnchanged

\* The conversation's provider replies in its native shape, emitting any
\* subset of the conversation's own tool ids.
ProviderReply(c) ==
    /\ phase[c] = "req"
    /\ \E ids \in SUBSET Ids(c) :
          /\ emitted' = [emitted EXCEPT ![c] = ids]
          /\ wireIds' = [wireIds EXCEPT ![c] = ids]
    /\ wireShape' = [wireShape EXCEPT ![c] = NativeShape(provider)]
    /\ phase' = [phase EXCEPT ![c] = "resp"]
    /\ UNCHANGED <<turn, pending, reqIds, gotShape, lastOutcome, retryable>>
    /\ CredsUnchanged

\* Network, TLS, HTTP or protocol failure: the exchange ends in an error.
\* Gateway: the obligations stay the history's (difference 1).
ProviderFail(c) ==
    /\ phase[c] = "req"
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "err"]
    /\ pending' = IF GatewayRetry THEN pending ELSE [pending EXCEPT ![c] = {}]
    /\ phase' = [phase EXCEPT ![c] = "idle"]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ retryable' = [retryable EXCEPT ![c] = GatewayRetry]
    /\ UNCHANGED <<reqIds, wireShape, wireIds, emitted, gotShape>>
    /\ CredsUnchanged

\* The client disconnects mid-exchange: the gateway closes the upstream
\* request and the exchange fails as ProviderFail does (difference 4).
ClientGone(c) ==
    /\ phase[c] = "req"
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "err"]
    /\ pending' = IF GatewayRetry THEN pending ELSE [pending EXCEPT ![c] = {}]
    /\ phase' = [phase EXCEPT ![c] = "idle"]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ retryable' = [retryable EXCEPT ![c] = GatewayRetry]
    /\ UNCHANGED <<reqIds, wireShape, wireIds, emitted, gotShape>>
    /\ CredsUnchanged

\* After a failed exchange the client re-sends the same turn: the same
\* tool_results (reqIds unchanged), which are the history's obligations
\* (difference 2). Disabled when GatewayRetry = FALSE.
Retry(c) ==
    /\ GatewayRetry
    /\ retryable[c]
    /\ phase[c] = "idle"
    /\ turn[c] < MaxTurns
    /\ InFlight < MaxInFlight
    /\ wireShape' = [wireShape EXCEPT ![c] = NativeShape(provider)]
    /\ wireIds' = [wireIds EXCEPT ![c] = reqIds[c]]
    /\ phase' = [phase EXCEPT ![c] = "req"]
    /\ retryable' = [retryable EXCEPT ![c] = FALSE]
    /\ UNCHANGED <<turn, pending, reqIds, emitted, gotShape, lastOutcome>>
    /\ CredsUnchanged

\* The gateway hands the client a Messages-shaped body; the reverse
\* translation is a bijection on tool ids, so the history's new
\* obligations are exactly the ids the provider emitted.
Deliver(c) ==
    /\ phase[c] = "resp"
    /\ gotShape' = [gotShape EXCEPT ![c] = IF wireShape[c] = "openai" THEN "messages"
                                                                     ELSE wireShape[c]]
    /\ pending' = [pending EXCEPT ![c] = wireIds[c]]
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "ok"]
    /\ phase' = [phase EXCEPT ![c] = "idle"]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ UNCHANGED <<reqIds, wireShape, wireIds, emitted, retryable>>
    /\ CredsUnchanged

\* Terminal self-loop once every conversation has spent its turns.
Halted ==
    /\ \A c \in Convs : phase[c] = "idle" /\ turn[c] = MaxTurns
    /\ UNCHANGED vars

Next ==
    \/ \E c \in Convs :
          \/ CallerSend(c)
          \/ CallerAbort(c)
          \/ NoProvider(c)
          \/ ProviderReply(c)
          \/ ProviderFail(c)
          \/ Deliver(c)
          \/ ClientGone(c)
          \/ Retry(c)
    \/ Halted

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------

TypeOK ==
    /\ hasKey \in BOOLEAN
    /\ hasToken \in BOOLEAN
    /\ provider \in Providers
    /\ turn \in [Convs -> 0..MaxTurns]
    /\ phase \in [Convs -> Phases]
    /\ pending \in [Convs -> SUBSET AllIds]
    /\ reqIds \in [Convs -> SUBSET AllIds]
    /\ wireShape \in [Convs -> Shapes]
    /\ wireIds \in [Convs -> SUBSET AllIds]
    /\ emitted \in [Convs -> SUBSET AllIds]
    /\ gotShape \in [Convs -> Shapes]
    /\ lastOutcome \in [Convs -> Outcomes]
    /\ retryable \in [Convs -> BOOLEAN]

\* The seed's invariants, per conversation.
ShapeInv == \A c \in Convs : gotShape[c] = "messages"

PairingInv ==
    \A c \in Convs :
        /\ (phase[c] = "req") => (wireIds[c] = reqIds[c] /\ reqIds[c] = pending[c])
        /\ (phase[c] = "resp") => (wireIds[c] = emitted[c])
        /\ (phase[c] = "idle" /\ lastOutcome[c] = "ok") => (pending[c] = emitted[c])

\* One selection for the whole gateway.
SelectionInv == provider = Select(hasKey, hasToken)

\* Bounded turns per conversation; bounded requests in flight.
BoundedInv ==
    /\ \A c \in Convs : turn[c] <= MaxTurns
    /\ InFlight <= MaxInFlight

\* Ids(d) are the ids d's provider emits (ProviderReply). None of them
\* ever appears on another conversation's wire, in its requests, in its
\* obligations or among what its provider was taken to emit.
NoCrossPairing ==
    \A c, d \in Convs :
        c # d => Ids(d) \cap (pending[c] \cup reqIds[c] \cup wireIds[c] \cup emitted[c]) = {}

\* After a failed exchange the history still holds exactly the obligations
\* the failed request answered, so Retry answers each of them once.
RetryInv == \A c \in Convs : retryable[c] => pending[c] = reqIds[c]

\* Credentials and the chosen provider never change after boot, on any
\* conversation's step.
SelectionStable == [][CredsUnchanged]_vars

\* With GatewayRetry = FALSE: each conversation's projection is a behaviour
\* of the seed (TpxGatewayRefinement.cfg).
Seed(c) == INSTANCE TpxTransport WITH
    ToolIds <- Ids(c),
    turn <- turn[c], phase <- phase[c], pending <- pending[c],
    reqIds <- reqIds[c], wireShape <- wireShape[c], wireIds <- wireIds[c],
    emitted <- emitted[c], gotShape <- gotShape[c], lastOutcome <- lastOutcome[c]

\* \A c \in Convs : Seed(c)!Spec, written so TLC 2.15 can check it (it
\* does not distribute \A over a temporal formula): Init is each
\* conversation's seed Init, and every gateway step is, for each
\* conversation, a seed step or a stutter of its projection.
Refinement ==
    /\ \A c \in Convs : Seed(c)!Init
    /\ [][\A c \in Convs : [Seed(c)!Next]_(Seed(c)!vars)]_vars

=============================================================================
