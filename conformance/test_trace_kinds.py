"""Every trace ``tpx serve`` writes says what it is, and ``tpx check-trace`` read the wrong
way gives a usage error (exit 2, the right flags named), never ACCEPTED or REJECTED."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from conformance.gateway_core import GatewayRig
from tpx.cli import main
from tpx.oracle.tracecheck_gateway import CONVERSATION_TRACE, EXCHANGE_TRACE, trace_kind
from tpx.transport.exchange import Provider

ROOT = Path(__file__).parents[1]
GATEWAY = str(ROOT / "spec" / "TpxGateway.tla")


def _traces(tmp_path: Path, *, monitor: bool) -> list[str]:
    with GatewayRig(Provider.TPX, seed=1, trace_dir=tmp_path, monitor=monitor) as rig:
        for result in (rig.turn("reply", ids=("t1",)), rig.turn("reply", ids=())):
            assert result.problems == (), result
    files = sorted(tmp_path.iterdir())
    assert len(files) == 2
    return [str(f) for f in files]


@pytest.mark.parametrize(
    ("monitor", "kind", "right", "wrong"),
    [
        (
            False,
            EXCHANGE_TRACE,
            ["--spec", GATEWAY, "--exchange"],
            [["--spec", GATEWAY], [], ["--exchange"]],
        ),
        (
            True,
            CONVERSATION_TRACE,
            ["--spec", GATEWAY],
            [["--spec", GATEWAY, "--exchange"], [], ["--exchange"]],
        ),
    ],
    ids=["exchange", "conversation"],
)
def test_a_trace_read_the_wrong_way_is_a_usage_error(
    monitor: bool,
    kind: str,
    right: list[str],
    wrong: list[list[str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    files = _traces(tmp_path, monitor=monitor)
    assert {trace_kind(Path(f)) for f in files} == {kind}
    assert all("#trace" in orjson.loads(Path(f).read_bytes().splitlines()[0]) for f in files)
    capsys.readouterr()
    assert main(["check-trace", *right, *files]) == 0
    assert capsys.readouterr().out.count("ACCEPTED") == 2
    for flags in wrong:
        assert main(["check-trace", *flags, *files]) == 2, flags
        captured = capsys.readouterr()
        assert captured.out == "", flags  # no verdict at all
        assert captured.err.startswith("tpx: error: "), flags
        assert "--spec spec/TpxGateway.tla" in captured.err, flags


def test_an_unmarked_file_is_read_as_asked(tmp_path: Path) -> None:
    """Traces from elsewhere (no ``#trace``) are read the way the flags say."""
    plain = tmp_path / "t.jsonl"
    plain.write_bytes(b'{"#action": "Init", "turn": 0}\n')
    assert trace_kind(plain) is None
    assert trace_kind(tmp_path / "missing.jsonl") is None
