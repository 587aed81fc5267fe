"""The Python mirror of spec/TpxGateway.tla (the gateway: many conversations, one selection).

Read it side by side with the spec (its header table maps spec lines to these names):

* :mod:`tpx.oracle.model.gateway.state`      -- CONSTANTS (:class:`Config`), the 26 VARIABLES
  (:class:`State`), ``Ids``, ``AllIds``, ``Select``, ``NativeShape``, ``InFlight`` and the
  binding's operators (``Keys``, ``Bound``, ``Rounds``, ``Verifies``, ``WrongOf``, ...);
* :mod:`tpx.oracle.model.gateway.actions`    -- ``Init``, the 13 per-conversation actions,
  ``Rotate``, ``Recover`` and ``Halted``, each a pure function yielding successor states;
  ``Next``;
* :mod:`tpx.oracle.model.gateway.invariants` -- ``TypeOK`` ... ``NoDuplicateDelivery`` (in
  :data:`INVARIANTS`) and ``SelectionStable``, ``RefusesOnlyWrong``, ``SendsOnlyCorrect``,
  ``FailoverBeforeFirstByte`` on a step;
* :mod:`tpx.oracle.model.gateway.explore`    -- BFS explorer reporting TLC's figures;
* :mod:`tpx.oracle.model.gateway.refinement` -- the projection onto the seed and the refinement
  check;
* :mod:`tpx.oracle.model.gateway.conversation` -- the spec read on one conversation (the
  monitor's compact step);
* :mod:`tpx.oracle.model.gateway.monitor`    -- the online monitor for a running gateway
  (:mod:`tpx.oracle.model.gateway.events`: what it reads and records).

The value domains, ``SUBSET``, the state plumbing and ``SelectionStable`` are the seed
mirror's (:mod:`tpx.oracle.model.common`).

:data:`GATEWAY` registers the module with :mod:`tpx.oracle.model.registry` (shipped as
``tpx/oracle/specs/TpxGateway.tla`` with its cfgs), so ``tpx explore`` / ``tpx check-trace`` run
this mirror only on that exact spec and only the checks its cfg names.
"""

from tpx.oracle.model.gateway.actions import (
    ACTIONS,
    CallerAbort,
    CallerSend,
    ClientGone,
    Deliver,
    Failover,
    FirstByte,
    Halted,
    Init,
    Next,
    NoProvider,
    PromptTooLong,
    ProviderFail,
    ProviderReply,
    Recover,
    Resend,
    Retry,
    Rotate,
    Steps,
    UpstreamAccept,
)
from tpx.oracle.model.gateway.explore import explore
from tpx.oracle.model.gateway.invariants import (
    INVARIANTS,
    PROPERTIES,
    BoundedInv,
    CredsUnchanged,
    FailoverBeforeFirstByte,
    NoCrossPairing,
    NoDuplicateDelivery,
    OneGeneration,
    PairingInv,
    RefusesOnlyWrong,
    RetryInv,
    SelectionInv,
    SelectionStable,
    SendsOnlyCorrect,
    ShapeInv,
    TypeOK,
)
from tpx.oracle.model.gateway.state import EXCEPT, PER_CONVERSATION, VARS, Config, InFlight, State
from tpx.oracle.model.registry import MirroredSpec, register

#: spec/TpxGateway.tla, as shipped in tpx/oracle/specs and implemented by this package
#: (``Refinement`` and ``RefinementUpToErrors`` are :mod:`tpx.oracle.model.gateway.refinement`,
#: run as step properties).
GATEWAY = register(
    MirroredSpec(
        "TpxGateway",
        invariants=tuple(name for name, _ in INVARIANTS),
        properties=(*(name for name, _ in PROPERTIES), "Refinement", "RefinementUpToErrors"),
    )
)

__all__ = [
    "ACTIONS",
    "EXCEPT",
    "GATEWAY",
    "INVARIANTS",
    "PER_CONVERSATION",
    "PROPERTIES",
    "VARS",
    "BoundedInv",
    "CallerAbort",
    "CallerSend",
    "ClientGone",
    "Config",
    "CredsUnchanged",
    "Deliver",
    "Failover",
    "FailoverBeforeFirstByte",
    "FirstByte",
    "Halted",
    "InFlight",
    "Init",
    "Next",
    "NoCrossPairing",
    "NoDuplicateDelivery",
    "NoProvider",
    "OneGeneration",
    "PairingInv",
    "PromptTooLong",
    "ProviderFail",
    "ProviderReply",
    "Recover",
    "RefusesOnlyWrong",
    "Resend",
    "Retry",
    "RetryInv",
    "Rotate",
    "SelectionInv",
    "SelectionStable",
    "SendsOnlyCorrect",
    "ShapeInv",
    "State",
    "Steps",
    "TypeOK",
    "UpstreamAccept",
    "explore",
]
