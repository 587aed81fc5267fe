"""The Python mirror of spec/TpxTransport.tla.

Read it side by side with the spec:

* :mod:`tpx.oracle.model.state`      -- CONSTANTS (:class:`Config`), the 12 VARIABLES
  (:class:`State`),
  ``Select``, ``NativeShape``;
* :mod:`tpx.oracle.model.actions`    -- ``Init`` and the 7 actions, each a pure function yielding
  successor states; ``Next``;
* :mod:`tpx.oracle.model.invariants` -- ``TypeOK``, ``ShapeInv``, ``PairingInv``, ``SelectionInv``,
  ``BoundedInv`` (in :data:`INVARIANTS`) and ``SelectionStable`` on a step;
* :mod:`tpx.oracle.model.explore`    -- BFS explorer reporting TLC's figures;
* :mod:`tpx.oracle.model.packed`     -- the same exploration on bit-packed states (numpy), for
  speed;
* :mod:`tpx.oracle.model.fingerprint` / :mod:`tpx.oracle.model.registry` -- which spec the mirror
  mirrors
  (:data:`TRANSPORT`, shipped as ``tpx/oracle/specs/TpxTransport.tla``) and the check that a
  given spec and cfg are that one;
* :mod:`tpx.oracle.model.common`     -- what this mirror and the gateway's
  (:mod:`tpx.oracle.model.gateway`)
  share: the value domains, ``SUBSET``, the state plumbing, ``SelectionStable``.
"""

from tpx.oracle.model.actions import (
    ACTIONS,
    CallerAbort,
    CallerSend,
    Deliver,
    Halted,
    Init,
    Next,
    NoProvider,
    ProviderFail,
    ProviderReply,
)
from tpx.oracle.model.explore import ExploreResult, Graph, Verdict, explore
from tpx.oracle.model.invariants import (
    INVARIANTS,
    BoundedInv,
    CredsUnchanged,
    PairingInv,
    SelectionInv,
    SelectionStable,
    ShapeInv,
    TypeOK,
)
from tpx.oracle.model.registry import MirroredSpec, register
from tpx.oracle.model.state import VARS, Config, State

#: spec/TpxTransport.tla, as shipped in tpx/oracle/specs and implemented by this package.
TRANSPORT = register(
    MirroredSpec(
        "TpxTransport",
        invariants=tuple(name for name, _ in INVARIANTS),
        properties=("SelectionStable",),
    )
)

__all__ = [
    "ACTIONS",
    "INVARIANTS",
    "TRANSPORT",
    "VARS",
    "BoundedInv",
    "CallerAbort",
    "CallerSend",
    "Config",
    "CredsUnchanged",
    "Deliver",
    "ExploreResult",
    "Graph",
    "Halted",
    "Init",
    "Next",
    "NoProvider",
    "PairingInv",
    "ProviderFail",
    "ProviderReply",
    "SelectionInv",
    "SelectionStable",
    "ShapeInv",
    "State",
    "TypeOK",
    "Verdict",
    "explore",
]
