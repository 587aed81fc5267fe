"""``tpx audit`` with several behaviours in flight (``--jobs N``) finds what it finds one
behaviour at a time: the same verdicts, counts and counterexamples, in the same order (the
report as written, less its time, each audit's own key prefix and the ids the endpoint
makes anew in every run)."""

from __future__ import annotations

import re

import orjson
import pytest

from tests.audit.test_audit import CASES, ORDERED, _gateway
from tpx.audit.findings import Result
from tpx.audit.harness import GATEWAY_KEY, Harness
from tpx.audit.replay import HttpReplayer
from tpx.audit.run import JOBS, AuditReplayer, audit_gateway

#: what ``tpx serve`` makes anew in every run: its signed tool ids, its request ids
OWN_IDS = re.compile(r"tpxr[0-9]+-[0-9a-f]+-[0-9a-f]+|req_tpx[0-9a-f]+")
#: an audit's own prefix of its conversations' keys (``a3b17c1``, ``a3scontextoverflow``)
AUDIT_TAG = re.compile(r"(?<![0-9])a[0-9]+(?=b[0-9]+c[0-9]|s[a-z])")


def found(result: Result) -> str:
    """The JSON report of *result*, less what differs between two runs by nature."""
    doc = result.as_json()
    doc.pop("seconds")
    text = orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()
    return AUDIT_TAG.sub("", OWN_IDS.sub("ID", text))


def _both(
    harness: Harness, bug: str | None, upstream: str, stop_on: str | None
) -> tuple[Result, Result]:
    gw = _gateway(harness, upstream, bug)
    try:
        one, many = (
            audit_gateway(
                harness, gw.url, GATEWAY_KEY, upstream=upstream, stop_on=stop_on, jobs=jobs
            )
            for jobs in (1, JOBS)
        )
    finally:
        if bug is not None:
            harness.stop_gateways(bug)
    return one, many


#: (seeded bug or None, the scripted upstream's API) audited whole in the slow runs
WHOLE = [
    (None, "messages"),
    ("results_reversed", "openai"),
    ("upstream_kept", "openai"),
    ("message_id_kept", "openai"),
    ("unissued_id", "messages"),
]


@pytest.mark.parametrize(
    ("bug", "upstream", "stop_on"),
    [
        pytest.param(None, "openai", None, id="tpx-serve"),
        pytest.param("results_reversed", "openai", "PairingInv", id="results_reversed-stop"),
        *(
            pytest.param(
                bug, upstream, None, id=f"{bug or 'tpx-serve'}-{upstream}", marks=pytest.mark.slow
            )
            for bug, upstream in WHOLE
        ),
    ],
)
def test_the_lanes_find_what_one_lane_finds(
    harness: Harness, bug: str | None, upstream: str, stop_on: str | None
) -> None:
    one, many = _both(harness, bug, upstream, stop_on)
    assert one.ok == (bug is None)
    assert many.behaviours == one.behaviours
    assert one.behaviours > (0 if stop_on else 500)
    assert found(many) == found(one)


@pytest.mark.slow
@pytest.mark.parametrize("bug", sorted(ORDERED))
def test_a_bug_of_the_order_of_requests_fails_its_check_in_lanes_too(
    harness: Harness, bug: str
) -> None:
    gw = _gateway(harness, "openai", bug)
    try:
        result = audit_gateway(harness, gw.url, GATEWAY_KEY, stop_on=CASES[bug], jobs=JOBS)
    finally:
        harness.stop_gateways(bug)
    assert CASES[bug] in result.failures


def test_keys_of_the_order_behaviours_start_in_are_caught(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Seeded bug: conversation keys drawn from one count as behaviours start (their
    numbers follow the order in time, which differs with lanes)."""
    monkeypatch.setattr(AuditReplayer, "_names", HttpReplayer._names)
    one, many = _both(harness, "results_reversed", "openai", "PairingInv")
    assert many.failures.keys() == one.failures.keys()
    assert found(many) != found(one)
