----------------------------- MODULE TpxGateway -----------------------------
(***************************************************************************)
(* The gateway (`tpx serve`): many conversations at once behind one        *)
(* boot-time provider selection. Each conversation c \in Convs runs the    *)
(* seed's exchange machine (TpxTransport.tla); only hasKey, hasToken,      *)
(* provider and the id-signing keys are shared. At most MaxInFlight        *)
(* exchanges are in flight (phase # "idle") at any time. Steps of          *)
(* different conversations interleave freely.                              *)
(*                                                                         *)
(* Tool ids are per conversation: the identity of a tool call is           *)
(* <<c, t>>, the conversation whose provider produced it and a local name  *)
(* t \in ToolIds (Ids(c)). A call is named by the id its provider emitted  *)
(* it under, so the binding is a set of pairs: calls[c] holds <<id, call>> *)
(* for each tool_use the client was handed, a round of tool_results holds  *)
(* <<id, answered call>>; a translation that moves an id onto another      *)
(* call or a result onto another id makes a pair off the diagonal          *)
(* (Bound). hist[c] is the history's answered rounds, wireRes[c] the       *)
(* rounds the last request carried upstream, so a request that drops an    *)
(* earlier round's results differs from the history on the wire.           *)
(* NoCrossPairing says an id of one conversation, as an id or as a call,   *)
(* never reaches another conversation's wire, history or obligations.      *)
(*                                                                         *)
(* Where it differs from TpxTransport.tla, and why (1-4 guarded by         *)
(* GatewayRetry):                                                          *)
(*  1. The gateway keeps no state between requests: a conversation's       *)
(*     obligations (pending, calls) are the tool_use ids of the last       *)
(*     assistant turn of the history the client sends. A failed exchange   *)
(*     (ProviderFail, ClientGone) therefore does NOT discard them: the     *)
(*     history still holds the obligations. The seed discards them.        *)
(*  2. Retry (new): after a failed exchange the client re-sends the same   *)
(*     turn (the same tool_results, reqIds unchanged), as the SDKs and     *)
(*     Claude Code do on 429/5xx/a broken stream. RetryInv: after a        *)
(*     failure the obligations are still exactly what the failed request   *)
(*     answered, so the retry answers every one of them once. A Retry step *)
(*     reaches the very state a CallerSend would: the stateless gateway    *)
(*     cannot tell a retried turn from a fresh one, and need not.          *)
(*  3. The client's request is a choice: correct (CallerSend: every        *)
(*     obligation answered once, every earlier round kept, every id        *)
(*     verifying) or wrong (CallerAbort, request'[c] \in WrongOf(c): an    *)
(*     obligation missing or duplicated, an id that is no obligation, or   *)
(*     a history signed by a retired key). Only a wrong one is refused,    *)
(*     400 invalid_request_error before anything reaches the wire          *)
(*     (RefusesOnlyWrong: a correct request is never refused). The         *)
(*     exchange counts (turn + 1, lastOutcome = "err") but the obligations *)
(*     and the wire are unchanged: the client may answer correctly after.  *)
(*     "unknown" is possible with nothing pending; the seed requires       *)
(*     pending # {} and discards pending.                                  *)
(*  4. ClientGone (new): the client disconnects mid-exchange (phase "req": *)
(*     a streamed reply is forwarded event by event and the spec's         *)
(*     ProviderReply is its terminal event, so a disconnect mid-stream is  *)
(*     in "req"). The exchange fails exactly as ProviderFail does. With    *)
(*     GatewayRetry = FALSE it is a seed ProviderFail step.                *)
(*  5. Rotate (new, TPX: the ids it hands out are signed): new ids are     *)
(*     signed with the current key, keys oldest..key verify, an older one  *)
(*     is retired. A conversation whose history holds an id of a retired   *)
(*     key can only send wrong requests (Verifies).                        *)
(*  6. Halted stutters only when every conversation has spent its turns,   *)
(*     so deadlock checking covers the whole gateway.                      *)
(*  7. PromptTooLong (new, Preflight = TRUE): a correct request too long   *)
(*     for the upstream's window is refused before the wire (400 "prompt   *)
(*     is too long"), request'[c] = "long"; only a wrong or a too-long     *)
(*     request is refused, only a correct one that fits is sent.           *)
(*  8. Upstream attempts (new, UpstreamSteps = TRUE): a request's first    *)
(*     attempt goes to a healthy upstream (up); UpstreamAccept: it reached *)
(*     the upstream, which may be generating (gens + 1); Resend: a reused  *)
(*     pooled connection failed before anything was written, so the same  *)
(*     upstream gets it again; Failover: before any byte of a reply        *)
(*     reached the client, a connect error or the upstream's own 429, 529  *)
(*     or 5xx moves it to another healthy upstream, the failed one cools   *)
(*     down (health) until Recover; FirstByte: the reply's first byte is   *)
(*     forwarded (fwd + 1). ProviderReply needs an attempt that reached.   *)
(*     With UpstreamSteps = FALSE none of these steps exist and upVars     *)
(*     keep their initial values: the exchange is the seed's.              *)
(* Everything else is the seed's, per conversation, plus the InFlight      *)
(* guard on sends and the bookkeeping of the binding and the keys (no seed *)
(* variable).                                                              *)
(*                                                                         *)
(* Checked (TpxGateway.cfg, the larger TpxGatewayDeep.cfg, and           *)
(* TpxGatewayFailover.cfg with 7 and 8 on): TypeOK, ShapeInv, PairingInv,  *)
(* SelectionInv, BoundedInv per conversation (BoundedInv also bounds the   *)
(* requests in flight), NoCrossPairing, RetryInv, OneGeneration,           *)
(* NoDuplicateDelivery; SelectionStable (the provider kind never changes,  *)
(* failover included), RefusesOnlyWrong, SendsOnlyCorrect and              *)
(* FailoverBeforeFirstByte on every step; deadlock freedom.                *)
(* Refinement: with GatewayRetry = FALSE (TpxGatewayRefinement*.cfg, one   *)
(* key) every conversation's projection is a behaviour of the seed. With   *)
(* GatewayRetry = TRUE it is not (a failure keeps the obligations, a       *)
(* refusal may come with nothing pending); what holds, and is checked on   *)
(* the GatewayRetry = TRUE cfgs, is RefinementUpToErrors: every step of    *)
(* every conversation is a seed step of its projection, or an error step   *)
(* (turn + 1, "err", idle) that keeps the obligations and leaves the wire  *)
(* as it was. (Retry is a seed CallerSend of the projection; PromptTooLong *)
(* is such an error step; the upstream steps of 8 are stutters of it.)     *)
(*                                                                         *)
(* Mirror: tpx/oracle/model/gateway/ (test_gateway_spec_table checks the lines)   *)
(*   line  spec                  mirror                                    *)
(*    148  CONSTANTS             state.py   Config                         *)
(*    168  VARIABLES             state.py   State, VARS                    *)
(*    207  Ids, AllIds           state.py   Config.Ids, Config.AllIds      *)
(*    212  Select                state.py   Config.Select                  *)
(*    215  NativeShape           state.py   Config.NativeShape             *)
(*    218  InFlight              state.py   InFlight                       *)
(*    221  Keys, Names           state.py   Keys, Names                    *)
(*    225  Bound                 state.py   Bound                          *)
(*    227  AllRounds             state.py   AllRounds                      *)
(*    232  Rounds                state.py   Rounds                         *)
(*    235  Verifies              state.py   Verifies                       *)
(*    240  WrongOf               state.py   WrongOf                        *)
(*    246  Healthy, Route        state.py   Healthy, Route                 *)
(*    251  NewRequest            actions.py NewRequest                     *)
(*    259  Init                  actions.py Init                           *)
(*    287  CredsUnchanged        invariants.py CredsUnchanged              *)
(*    295  CallerSend            actions.py CallerSend                     *)
(*    318  CallerAbort           actions.py CallerAbort, CallerAbortWith   *)
(*    334  NoProvider            actions.py NoProvider                     *)
(*    346  ProviderReply         actions.py ProviderReply                  *)
(*    360  ProviderFail          actions.py ProviderFail                   *)
(*    374  ClientGone            actions.py ClientGone                     *)
(*    390  Retry                 actions.py Retry                          *)
(*    413  Deliver               actions.py Deliver                        *)
(*    432  Rotate                actions.py Rotate                         *)
(*    446  PromptTooLong         actions.py PromptTooLong                  *)
(*    463  UpstreamAccept        actions.py UpstreamAccept                 *)
(*    478  Resend                actions.py Resend                         *)
(*    495  Failover              actions.py Failover                       *)
(*    512  FirstByte             actions.py FirstByte                      *)
(*    524  Recover               actions.py Recover                        *)
(*    532  Halted                actions.py Halted                         *)
(*    536  Next                  actions.py ACTIONS, Next                  *)
(*    559  TypeOK                invariants.py TypeOK                      *)
(*    588  ShapeInv              invariants.py ShapeInv                    *)
(*    596  PairingInv            invariants.py PairingInv                  *)
(*    606  SelectionInv          invariants.py SelectionInv                *)
(*    609  BoundedInv            invariants.py BoundedInv                  *)
(*    617  NoCrossPairing        invariants.py NoCrossPairing              *)
(*    625  RetryInv              invariants.py RetryInv                    *)
(*    629  OneGeneration         invariants.py OneGeneration               *)
(*    633  NoDuplicateDelivery   invariants.py NoDuplicateDelivery         *)
(*    637  SelectionStable       invariants.py SelectionStable             *)
(*    642  RefusesOnlyWrong      invariants.py RefusesOnlyWrong            *)
(*    650  SendsOnlyCorrect      invariants.py SendsOnlyCorrect            *)
(*    656  FailoverBeforeFirstByte  invariants.py FailoverBeforeFirstByte  *)
(*    671  Refinement            (TLC only; the mirror: refinement.py)     *)
(*    689  RefinementUpToErrors  (TLC only; the mirror: refinement.py)     *)
(***************************************************************************)
EXTENDS Naturals, FiniteSets, Sequences

CONSTANTS
    Convs,          \* conversations (model values)
    ToolIds,        \* local tool-id names; a tool call's id is <<c, t>>
    MaxTurns,       \* bound on exchanges per conversation
    MaxInFlight,    \* bound on exchanges in flight across the gateway
    MaxKeys,        \* id-signing keys the gateway goes through (Rotate)
    GatewayRetry,   \* TRUE: the gateway; FALSE: the seed's semantics
    Preflight,      \* TRUE: a request may be too long for the upstream's window
    UpstreamSteps,  \* TRUE: an exchange's attempts, upstreams and first byte are steps
    Upstreams,      \* the upstream deployments (model values) behind the provider
    MaxAttempts,    \* bound on upstream attempts per client request
    ANTHROPIC, TPX, NONE

Providers == {ANTHROPIC, TPX, NONE}
Shapes    == {"messages", "openai"}
Phases    == {"idle", "req", "resp"}
Outcomes  == {"none", "ok", "err"}
Wrong     == {"missing", "unknown", "duplicated", "retired"}
Requests  == {"none", "ok", "long"} \cup Wrong

VARIABLES
    hasKey,       \* static API key present at boot (shared)
    hasToken,     \* OAuth bearer token present at boot (shared)
    provider,     \* provider chosen at boot, fixed, shared by all conversations
    key,          \* the key new ids are signed with (shared)
    oldest,       \* the oldest key still accepted: keys oldest..key verify (shared)
    turn,         \* [Convs -> Nat] completed exchanges
    phase,        \* [Convs -> Phases] where the conversation's exchange is
    pending,      \* [Convs -> ids] obligations: tool_use ids of the history's last assistant turn
    reqIds,       \* [Convs -> ids] tool_result ids in the conversation's last request
    wireShape,    \* [Convs -> Shapes] shape of the body on the conversation's wire
    wireIds,      \* [Convs -> ids] tool ids carried by that body
    emitted,      \* [Convs -> ids] ids the conversation's provider last emitted
    gotShape,     \* [Convs -> Shapes] shape of the last body handed to its client
    lastOutcome,  \* [Convs -> Outcomes] result of the conversation's last exchange
    retryable,    \* [Convs -> BOOLEAN] its last exchange failed: the turn may be re-sent
    calls,        \* [Convs -> pairs] <<id, call>>: the id the client holds on each call
                  \*   of the history's last assistant turn
    hist,         \* [Convs -> Seq(pairs)] the history's answered rounds, oldest first:
                  \*   each the <<id, answered call>> pairs of one user turn's tool_results
    wireRes,      \* [Convs -> Seq(pairs)] the rounds of tool_results the conversation's
                  \*   last request carried upstream
    request,      \* [Convs -> Requests] what the client's last request was
    signedBy,     \* [Convs -> 0..MaxKeys] the oldest key that signed an id of the
                  \*   history (0: none)
    up,           \* [Convs -> Upstreams \cup {NONE}] the upstream of the current attempt
    health,       \* [Upstreams -> BOOLEAN] the upstream is in use (not cooling down; shared)
    attempts,     \* [Convs -> 0..MaxAttempts] attempts of the current client request
    reached,      \* [Convs -> BOOLEAN] the current attempt's request reached its upstream
    gens,         \* [Convs -> Nat] generations the current client request started
    fwd           \* [Convs -> Nat] replies whose first byte reached the client for the
                  \*   current client request

vars == <<hasKey, hasToken, provider, key, oldest, turn, phase, pending, reqIds,
          wireShape, wireIds, emitted, gotShape, lastOutcome, retryable,
          calls, hist, wireRes, request, signedBy, up, health, attempts, reached, gens, fwd>>

upVars == <<up, health, attempts, reached, gens, fwd>>

Ids(c) == {<<c, t>> : t \in ToolIds}
AllIds == Convs \X ToolIds
Pairs == AllIds \X AllIds

\* Deterministic selection at boot: key wins, then token, then nothing.
Select(k, t) == IF k THEN ANTHROPIC ELSE IF t THEN TPX ELSE NONE

\* The protocol each provider speaks on the wire.
NativeShape(p) == IF p = TPX THEN "openai" ELSE "messages"

\* Exchanges in flight across the gateway.
InFlight == Cardinality({c \in Convs : phase[c] # "idle"})

\* The ids of a set of pairs, and every name a set of pairs mentions.
Keys(P) == {p[1] : p \in P}
Names(P) == {p[1] : p \in P} \cup {p[2] : p \in P}
\* Every pair binds an id to its own call: the id names that call, the
\* result under that id answers that call.
Bound(P) == \A p \in P : p[1] = p[2]
\* The pairs of every round of a sequence of rounds.
AllRounds(s) == UNION {s[r] : r \in 1..Len(s)}

\* The rounds a correct request of c carries: the history's, then the
\* answers to the last assistant turn's calls (a round only when it has
\* calls). The client answers each call under the id it was handed for it.
Rounds(c) == IF calls[c] = {} THEN hist[c] ELSE Append(hist[c], calls[c])

\* Every id of c's history verifies: signed by a key still accepted.
Verifies(c) == signedBy[c] = 0 \/ signedBy[c] >= oldest

\* The wrong requests c's client can send: a history signed by a retired
\* key is always wrong; otherwise a tool_result for an id that is no
\* obligation, and with obligations one missing or one duplicated.
WrongOf(c) ==
    IF ~Verifies(c) THEN {"retired"}
    ELSE {"unknown"} \cup (IF pending[c] # {} THEN {"missing", "duplicated"} ELSE {})

\* The upstreams a new request may go to: the healthy ones (all when none
\* is); with UpstreamSteps = FALSE the upstream is not modelled (NONE).
Healthy == IF \E u \in Upstreams : health[u] THEN {u \in Upstreams : health[u]} ELSE Upstreams
Route(c) == IF UpstreamSteps THEN Healthy ELSE {up[c]}

\* A new client request (CallerSend, Retry): its first attempt, to an
\* upstream of the route; nothing reached, generated or forwarded yet.
NewRequest(c) ==
    /\ \E u \in Route(c) : up' = [up EXCEPT ![c] = u]
    /\ attempts' = [attempts EXCEPT ![c] = IF UpstreamSteps THEN 1 ELSE 0]
    /\ reached' = [reached EXCEPT ![c] = FALSE]
    /\ gens' = [gens EXCEPT ![c] = 0]
    /\ fwd' = [fwd EXCEPT ![c] = 0]
    /\ UNCHANGED health

Init ==
    /\ hasKey \in BOOLEAN
    /\ hasToken \in BOOLEAN
    /\ provider = Select(hasKey, hasToken)
    /\ key = 1
    /\ oldest = 1
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
    /\ calls = [c \in Convs |-> {}]
    /\ hist = [c \in Convs |-> <<>>]
    /\ wireRes = [c \in Convs |-> <<>>]
    /\ request = [c \in Convs |-> "none"]
    /\ signedBy = [c \in Convs |-> 0]
    /\ up = [c \in Convs |-> NONE]
    /\ health = [u \in Upstreams |-> TRUE]
    /\ attempts = [c \in Convs |-> 0]
    /\ reached = [c \in Convs |-> FALSE]
    /\ gens = [c \in Convs |-> 0]
    /\ fwd = [c \in Convs |-> 0]

CredsUnchanged == UNCHANGED <<hasKey, hasToken, provider>>
KeysUnchanged == UNCHANGED <<key, oldest>>
UpUnchanged == UNCHANGED upVars

\* The client sends a correct request: every obligation of its history
\* answered by exactly one tool_result, every earlier round's results
\* kept, every id verifying. The gateway frames it natively (ANTHROPIC)
\* or translates it (TPX), carrying exactly the client's rounds.
CallerSend(c) ==
    /\ phase[c] = "idle"
    /\ turn[c] < MaxTurns
    /\ provider # NONE
    /\ InFlight < MaxInFlight
    /\ Verifies(c)
    /\ reqIds' = [reqIds EXCEPT ![c] = pending[c]]
    /\ wireShape' = [wireShape EXCEPT ![c] = NativeShape(provider)]
    /\ wireIds' = [wireIds EXCEPT ![c] = pending[c]]
    /\ wireRes' = [wireRes EXCEPT ![c] = Rounds(c)]
    /\ request' = [request EXCEPT ![c] = "ok"]
    /\ phase' = [phase EXCEPT ![c] = "req"]
    /\ retryable' = [retryable EXCEPT ![c] = FALSE]
    /\ NewRequest(c)
    /\ UNCHANGED <<turn, pending, emitted, gotShape, lastOutcome, calls, hist, signedBy>>
    /\ CredsUnchanged /\ KeysUnchanged

\* Seed: the caller cannot produce tool results; the turn aborts and the
\* obligations are discarded. Gateway: the client sent a wrong request
\* (request' names how) and it is refused (400 before the wire); the
\* history keeps its obligations (difference 3).
\* (The guard is written with => because TLC branches on a disjunction in an
\* action and would generate the successor twice.)
CallerAbort(c) ==
    /\ phase[c] = "idle"
    /\ turn[c] < MaxTurns
    /\ provider # NONE
    /\ ~GatewayRetry => pending[c] # {}
    /\ \E r \in WrongOf(c) : request' = [request EXCEPT ![c] = r]
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "err"]
    /\ pending' = IF GatewayRetry THEN pending ELSE [pending EXCEPT ![c] = {}]
    /\ calls' = IF GatewayRetry THEN calls ELSE [calls EXCEPT ![c] = {}]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ retryable' = [retryable EXCEPT ![c] = FALSE]
    /\ UNCHANGED <<phase, reqIds, wireShape, wireIds, emitted, gotShape, hist, wireRes,
                   signedBy>>
    /\ CredsUnchanged /\ KeysUnchanged /\ UpUnchanged

\* No credentials were present at boot: every exchange fails at once (401).
NoProvider(c) ==
    /\ phase[c] = "idle"
    /\ turn[c] < MaxTurns
    /\ provider = NONE
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "err"]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ UNCHANGED <<phase, pending, reqIds, wireShape, wireIds, emitted, gotShape, retryable,
                   calls, hist, wireRes, request, signedBy>>
    /\ CredsUnchanged /\ KeysUnchanged /\ UpUnchanged

\* The conversation's provider replies in its native shape, emitting any
\* subset of the conversation's own tool ids, call t under id t.
ProviderReply(c) ==
    /\ phase[c] = "req"
    /\ UpstreamSteps => reached[c]
    /\ \E ids \in SUBSET Ids(c) :
          /\ emitted' = [emitted EXCEPT ![c] = ids]
          /\ wireIds' = [wireIds EXCEPT ![c] = ids]
    /\ wireShape' = [wireShape EXCEPT ![c] = NativeShape(provider)]
    /\ phase' = [phase EXCEPT ![c] = "resp"]
    /\ UNCHANGED <<turn, pending, reqIds, gotShape, lastOutcome, retryable,
                   calls, hist, wireRes, request, signedBy>>
    /\ CredsUnchanged /\ KeysUnchanged /\ UpUnchanged

\* Network, TLS, HTTP or protocol failure: the exchange ends in an error.
\* Gateway: the obligations stay the history's (difference 1).
ProviderFail(c) ==
    /\ phase[c] = "req"
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "err"]
    /\ pending' = IF GatewayRetry THEN pending ELSE [pending EXCEPT ![c] = {}]
    /\ calls' = IF GatewayRetry THEN calls ELSE [calls EXCEPT ![c] = {}]
    /\ phase' = [phase EXCEPT ![c] = "idle"]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ retryable' = [retryable EXCEPT ![c] = GatewayRetry]
    /\ UNCHANGED <<reqIds, wireShape, wireIds, emitted, gotShape, hist, wireRes, request,
                   signedBy>>
    /\ CredsUnchanged /\ KeysUnchanged /\ UpUnchanged

\* The client disconnects mid-exchange: the gateway closes the upstream
\* request and the exchange fails as ProviderFail does (difference 4).
ClientGone(c) ==
    /\ phase[c] = "req"
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "err"]
    /\ pending' = IF GatewayRetry THEN pending ELSE [pending EXCEPT ![c] = {}]
    /\ calls' = IF GatewayRetry THEN calls ELSE [calls EXCEPT ![c] = {}]
    /\ phase' = [phase EXCEPT ![c] = "idle"]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ retryable' = [retryable EXCEPT ![c] = GatewayRetry]
    /\ UNCHANGED <<reqIds, wireShape, wireIds, emitted, gotShape, hist, wireRes, request,
                   signedBy>>
    /\ CredsUnchanged /\ KeysUnchanged /\ UpUnchanged

\* After a failed exchange the client re-sends the same turn: the same
\* tool_results (reqIds unchanged), which are the history's obligations
\* (difference 2); its ids must still verify. Disabled when
\* GatewayRetry = FALSE.
Retry(c) ==
    /\ GatewayRetry
    /\ retryable[c]
    /\ phase[c] = "idle"
    /\ turn[c] < MaxTurns
    /\ InFlight < MaxInFlight
    /\ Verifies(c)
    /\ wireShape' = [wireShape EXCEPT ![c] = NativeShape(provider)]
    /\ wireIds' = [wireIds EXCEPT ![c] = reqIds[c]]
    /\ wireRes' = [wireRes EXCEPT ![c] = Rounds(c)]
    /\ request' = [request EXCEPT ![c] = "ok"]
    /\ phase' = [phase EXCEPT ![c] = "req"]
    /\ retryable' = [retryable EXCEPT ![c] = FALSE]
    /\ NewRequest(c)
    /\ UNCHANGED <<turn, pending, reqIds, emitted, gotShape, lastOutcome, calls, hist,
                   signedBy>>
    /\ CredsUnchanged /\ KeysUnchanged

\* The gateway hands the client a Messages-shaped body; the reverse
\* translation is a bijection on tool ids that keeps each id on its call,
\* so the history's new obligations are exactly the ids the provider
\* emitted, each on its own call, and the request's rounds are now the
\* history's. TPX signs the ids it hands out with the current key.
Deliver(c) ==
    /\ phase[c] = "resp"
    /\ gotShape' = [gotShape EXCEPT ![c] = IF wireShape[c] = "openai" THEN "messages"
                                                                     ELSE wireShape[c]]
    /\ pending' = [pending EXCEPT ![c] = wireIds[c]]
    /\ calls' = [calls EXCEPT ![c] = {<<i, i>> : i \in wireIds[c]}]
    /\ hist' = [hist EXCEPT ![c] = wireRes[c]]
    /\ signedBy' = [signedBy EXCEPT ![c] =
                      IF provider = TPX /\ wireIds[c] # {} /\ signedBy[c] = 0 THEN key
                                                                            ELSE signedBy[c]]
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "ok"]
    /\ phase' = [phase EXCEPT ![c] = "idle"]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ UNCHANGED <<reqIds, wireShape, wireIds, emitted, retryable, wireRes, request>>
    /\ CredsUnchanged /\ KeysUnchanged /\ UpUnchanged

\* The gateway's id secret rotates (TPX signs ids): new ids are signed with
\* the next key; the keys from `oldest' on still verify, any older one
\* is retired.
Rotate ==
    /\ provider = TPX
    /\ key < MaxKeys
    /\ key' = key + 1
    /\ oldest' \in oldest..(key + 1)
    /\ UNCHANGED <<turn, phase, pending, reqIds, wireShape, wireIds, emitted, gotShape,
                   lastOutcome, retryable, calls, hist, wireRes, request, signedBy>>
    /\ CredsUnchanged /\ UpUnchanged

\* The request is correct but too long for the upstream's window (its
\* input plus max_tokens): the preflight refuses it, 400 invalid_request_error
\* "prompt is too long", before anything reaches the wire (the client then
\* compacts its history). An error step that keeps the obligations; enabled
\* only when Preflight says a request may be too long.
PromptTooLong(c) ==
    /\ Preflight
    /\ phase[c] = "idle"
    /\ turn[c] < MaxTurns
    /\ provider # NONE
    /\ Verifies(c)
    /\ request' = [request EXCEPT ![c] = "long"]
    /\ lastOutcome' = [lastOutcome EXCEPT ![c] = "err"]
    /\ turn' = [turn EXCEPT ![c] = turn[c] + 1]
    /\ retryable' = [retryable EXCEPT ![c] = FALSE]
    /\ UNCHANGED <<phase, pending, reqIds, wireShape, wireIds, emitted, gotShape, calls, hist,
                   wireRes, signedBy>>
    /\ CredsUnchanged /\ KeysUnchanged /\ UpUnchanged

\* The current attempt's request reached its upstream (its bytes were
\* written): from here on the upstream may be generating, so this attempt
\* is a generation of the client's request.
UpstreamAccept(c) ==
    /\ UpstreamSteps
    /\ phase[c] = "req"
    /\ ~reached[c]
    /\ reached' = [reached EXCEPT ![c] = TRUE]
    /\ gens' = [gens EXCEPT ![c] = gens[c] + 1]
    /\ UNCHANGED <<turn, phase, pending, reqIds, wireShape, wireIds, emitted, gotShape,
                   lastOutcome, retryable, calls, hist, wireRes, request, signedBy,
                   up, health, attempts, fwd>>
    /\ CredsUnchanged /\ KeysUnchanged

\* A reused pooled connection failed before the request was written: the
\* request is sent again, to the same upstream, on a fresh connection (a
\* new attempt: nothing of it written yet). Enabled only while nothing of
\* the request reached the upstream.
Resend(c) ==
    /\ UpstreamSteps
    /\ phase[c] = "req"
    /\ ~reached[c]
    /\ attempts[c] < MaxAttempts
    /\ attempts' = [attempts EXCEPT ![c] = attempts[c] + 1]
    /\ reached' = [reached EXCEPT ![c] = FALSE]
    /\ UNCHANGED <<turn, phase, pending, reqIds, wireShape, wireIds, emitted, gotShape,
                   lastOutcome, retryable, calls, hist, wireRes, request, signedBy,
                   up, health, gens, fwd>>
    /\ CredsUnchanged /\ KeysUnchanged

\* The current attempt failed before any byte of a reply reached the client
\* (a connect error, or the upstream's own 429, 529 or 5xx: it generated
\* nothing) and the request moves to another healthy upstream; the failed one
\* cools down. An attempt that reached its upstream and failed this way is no
\* generation. The provider kind (the boot selection) does not change.
Failover(c) ==
    /\ UpstreamSteps
    /\ phase[c] = "req"
    /\ fwd[c] = 0
    /\ attempts[c] < MaxAttempts
    /\ \E u \in Upstreams \ {up[c]} : health[u] /\ up' = [up EXCEPT ![c] = u]
    /\ health' = [health EXCEPT ![up[c]] = FALSE]
    /\ attempts' = [attempts EXCEPT ![c] = attempts[c] + 1]
    /\ reached' = [reached EXCEPT ![c] = FALSE]
    /\ gens' = [gens EXCEPT ![c] = IF reached[c] THEN gens[c] - 1 ELSE gens[c]]
    /\ UNCHANGED <<turn, phase, pending, reqIds, wireShape, wireIds, emitted, gotShape,
                   lastOutcome, retryable, calls, hist, wireRes, request, signedBy, fwd>>
    /\ CredsUnchanged /\ KeysUnchanged

\* The first byte of the upstream's reply is forwarded to the client (a
\* stream's first event); from here on the exchange ends in Deliver or an
\* error, never on another upstream.
FirstByte(c) ==
    /\ UpstreamSteps
    /\ phase[c] = "req"
    /\ reached[c]
    /\ fwd[c] = 0
    /\ fwd' = [fwd EXCEPT ![c] = fwd[c] + 1]
    /\ UNCHANGED <<turn, phase, pending, reqIds, wireShape, wireIds, emitted, gotShape,
                   lastOutcome, retryable, calls, hist, wireRes, request, signedBy,
                   up, health, attempts, reached, gens>>
    /\ CredsUnchanged /\ KeysUnchanged

\* A cooling-down upstream passes its recovery probe and is used again.
Recover ==
    /\ \E u \in Upstreams : ~health[u] /\ health' = [health EXCEPT ![u] = TRUE]
    /\ UNCHANGED <<turn, phase, pending, reqIds, wireShape, wireIds, emitted, gotShape,
                   lastOutcome, retryable, calls, hist, wireRes, request, signedBy,
                   up, attempts, reached, gens, fwd>>
    /\ CredsUnchanged /\ KeysUnchanged

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
          \/ PromptTooLong(c)
          \/ UpstreamAccept(c)
          \/ Resend(c)
          \/ Failover(c)
          \/ FirstByte(c)
    \/ Rotate
    \/ Recover
    \/ Halted

Spec == Init /\ [][Next]_vars

-----------------------------------------------------------------------------

TypeOK ==
    /\ hasKey \in BOOLEAN
    /\ hasToken \in BOOLEAN
    /\ provider \in Providers
    /\ key \in 1..MaxKeys
    /\ oldest \in 1..key
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
    /\ calls \in [Convs -> SUBSET Pairs]
    /\ hist \in [Convs -> Seq(SUBSET Pairs)]
    /\ wireRes \in [Convs -> Seq(SUBSET Pairs)]
    /\ request \in [Convs -> Requests]
    /\ signedBy \in [Convs -> 0..MaxKeys]
    /\ up \in [Convs -> Upstreams \cup {NONE}]
    /\ health \in [Upstreams -> BOOLEAN]
    /\ attempts \in [Convs -> 0..MaxAttempts]
    /\ reached \in [Convs -> BOOLEAN]
    /\ gens \in [Convs -> Nat]
    /\ fwd \in [Convs -> Nat]

\* The seed's invariants, per conversation.
ShapeInv == \A c \in Convs : gotShape[c] = "messages"

\* Ids bound to calls and results, over every round: the obligations are
\* the ids of the calls the client holds, each id on its own call; every
\* result of every round answers the call its id names; a request in
\* flight carries upstream every round of the history and the answers to
\* the last one, and exactly the obligations' ids; a reply on the wire
\* carries the emitted ids, and once delivered they are the obligations.
PairingInv ==
    \A c \in Convs :
        /\ pending[c] = Keys(calls[c])
        /\ Bound(calls[c]) /\ Bound(AllRounds(hist[c])) /\ Bound(AllRounds(wireRes[c]))
        /\ (phase[c] = "req") => /\ wireIds[c] = reqIds[c] /\ reqIds[c] = pending[c]
                                 /\ wireRes[c] = Rounds(c)
        /\ (phase[c] = "resp") => (wireIds[c] = emitted[c])
        /\ (phase[c] = "idle" /\ lastOutcome[c] = "ok") => (pending[c] = emitted[c])

\* One selection for the whole gateway.
SelectionInv == provider = Select(hasKey, hasToken)

\* Bounded turns per conversation; bounded requests in flight.
BoundedInv ==
    /\ \A c \in Convs : turn[c] <= MaxTurns
    /\ InFlight <= MaxInFlight

\* Ids(d) are the ids d's provider emits (ProviderReply). None of them,
\* as an id or as the call an id names or a result answers, ever appears
\* on another conversation's wire, in its requests, its history, its
\* obligations or among what its provider was taken to emit.
NoCrossPairing ==
    \A c, d \in Convs :
        c # d => Ids(d) \cap (pending[c] \cup reqIds[c] \cup wireIds[c] \cup emitted[c]
                              \cup Names(calls[c]) \cup Names(AllRounds(hist[c]))
                              \cup Names(AllRounds(wireRes[c]))) = {}

\* After a failed exchange the history still holds exactly the obligations
\* the failed request answered, so Retry answers each of them once.
RetryInv == \A c \in Convs : retryable[c] => pending[c] = reqIds[c]

\* At most one generation per client request: a request is sent again
\* (Resend) or elsewhere (Failover) only when no generation of it is running.
OneGeneration == \A c \in Convs : gens[c] <= 1

\* The client never gets two replies to one request: at most one reply's
\* first byte is forwarded per client request (so no tool_use twice).
NoDuplicateDelivery == \A c \in Convs : fwd[c] <= 1

\* Credentials and the chosen provider never change after boot, on any
\* conversation's step.
SelectionStable == [][CredsUnchanged]_vars

\* A correct request that fits is never refused: a step that counts an
\* exchange of c without it leaving the idle phase under a provider (a
\* refusal, 400) refuses a wrong or a too-long request.
RefusesOnlyWrong ==
    [][\A c \in Convs :
          (phase[c] = "idle" /\ (hasKey \/ hasToken) /\ turn'[c] = turn[c] + 1)
              => request'[c] \in Wrong \cup {"long"}]_vars

\* Only a correct request that fits reaches the upstream: a step that puts
\* c's exchange in flight sends a correct request ("ok": not too long) whose
\* ids all verify.
SendsOnlyCorrect ==
    [][\A c \in Convs :
          (phase[c] = "idle" /\ phase'[c] = "req") => (request'[c] = "ok" /\ Verifies(c))]_vars

\* A request moves to another upstream only before the first byte of a
\* reply reached its client.
FailoverBeforeFirstByte ==
    [][\A c \in Convs : (phase[c] = "req" /\ up'[c] # up[c]) => fwd[c] = 0]_vars

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

\* An error step of c that keeps its obligations: the exchange counts as
\* an error, c is idle, and nothing the seed sees of c but turn and
\* lastOutcome changes (the seed's ProviderFail and CallerAbort, pending
\* kept).
KeepsObligations(c) ==
    /\ phase'[c] = "idle"
    /\ lastOutcome'[c] = "err"
    /\ turn'[c] = turn[c] + 1
    /\ UNCHANGED <<pending[c], reqIds[c], wireShape[c], wireIds[c], emitted[c], gotShape[c]>>
    /\ CredsUnchanged

\* With GatewayRetry = TRUE (TpxGateway*.cfg): every step is, for each
\* conversation, a seed step, a stutter of its projection, or an error that
\* keeps the obligations.
RefinementUpToErrors ==
    /\ \A c \in Convs : Seed(c)!Init
    /\ [][\A c \in Convs : [Seed(c)!Next]_(Seed(c)!vars) \/ KeepsObligations(c)]_vars

=============================================================================
