"""The live monitor's id maps (``tpx serve --monitor``, TPX): ``unsigned`` and ``to_wire``
skip verifying an id that cannot be signed, and must say exactly what verifying says."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given
from hypothesis import strategies as st

from tpx.gateway.metrics import Metrics
from tpx.gateway.monitoring import LiveMonitor
from tpx.transport.translate.ids import (
    sign_caller_id,
    to_caller_id,
    verify_signed_id,
    wire_id,
)

from .conftest import make_settings

SECRET = b"test-secret"  # make_settings' TPX secret
NONCES = ["0123456789ab", "ffffffffffff", "a0b1c2d3e4f5", "000000000000", "9abcdef01234"]


def _maps() -> tuple[Callable[[str], str], Callable[[str], str]]:
    live = LiveMonitor(make_settings("TPX", monitor=True), Metrics())
    assert live._unsigned is not None
    to_wire = live.monitor._to_wire
    assert to_wire is not None
    return live._unsigned, to_wire


UNSIGNED, TO_WIRE = _maps()


def _agree(i: str) -> None:
    verified = verify_signed_id(i, SECRET) or i
    assert UNSIGNED(i) == verified
    assert TO_WIRE(i) == wire_id(verified)


def _ids() -> list[str]:
    """Ids of every form: signed (right, forged, another key's), unsigned, legacy, foreign."""
    out = ["", "-", "call_0", "toolu_01-abc", "tpx", "tpxr0_call", "tpxr0-_x", "a" * 40]
    for position, foreign in enumerate(["call_0", "call-1", "", "x/y", "toolu_01ABC"]):
        caller = to_caller_id(foreign, position, NONCES[position])
        signed = sign_caller_id(caller, SECRET)
        forged = signed[: signed.index("-", 6) + 1] + "0" * 20 + signed[signed.index("_") :]
        other = sign_caller_id(caller, b"another-secret")
        out += [caller, signed, forged, other, signed + "-", "x" + signed, signed[:-1]]
        out.append(to_caller_id(foreign, position))  # legacy: no nonce
    return out


def test_the_shortcut_agrees_with_verifying() -> None:
    for i in _ids():
        _agree(i)


def test_a_signed_id_is_unsigned_and_mapped_to_its_wire_id() -> None:
    caller = to_caller_id("call_7", 0, NONCES[0])
    signed = sign_caller_id(caller, SECRET)
    assert UNSIGNED(signed) == caller != signed
    assert TO_WIRE(signed) == "call_7" == TO_WIRE(caller)


@given(st.text(alphabet="tpxrbn0123456789abcdef-_", max_size=60))
def test_the_shortcut_agrees_on_any_id(i: str) -> None:
    _agree(i)


@given(st.integers(0, 30), st.text(alphabet="abcdef0123456789-_", min_size=0, max_size=24))
def test_the_shortcut_agrees_near_signed_ids(position: int, tail: str) -> None:
    signed = sign_caller_id(to_caller_id("call_0", position, NONCES[position % 5]), SECRET)
    k = signed.index("-")
    for i in (signed, signed[: k + 13] + tail, signed[: k + 14] + tail, signed + tail):
        _agree(i)
