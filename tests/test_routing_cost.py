"""benchmarks.routing_cost: every turn it times is closed (none left in flight: the gateway
never answers it 529), every routing rule's condition is evaluated, and nothing is written
where ``TPX_BENCH_DOC`` says nowhere."""

from __future__ import annotations

import sys

import pytest

from benchmarks import routing_cost
from tpx.gateway.core import Gateway


def test_the_routing_bench_leaves_no_turn_in_flight(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    made: list[Gateway] = []
    init = Gateway.__init__

    def keeping(self: Gateway, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(self)

    monkeypatch.setattr(Gateway, "__init__", keeping)
    monkeypatch.setenv("TPX_BENCH_DOC", "")
    monkeypatch.setattr(sys, "argv", ["routing_cost", "--rounds", "40"])
    routing_cost.main()
    out = capsys.readouterr().out
    assert "40 rounds" in out
    assert "table written" not in out
    assert len(made) == 2
    assert [gateway.in_flight for gateway in made] == [0, 0]
