"""`tpx check-trace --spec spec/TpxGateway.tla --exchange` on traces `tpx serve --trace-dir`
wrote: fixtures/serve-trace-dir holds 8 per-request traces of the gateway (the in-process SDK
against its FakeUpstream, both providers, one tool turn each with a 529 the SDK retried),
recorded as they are, caller-side ids and the seed exchange's ProviderFail; each first line
says what it is (``"#trace": "tpx serve exchange"``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tpx.cli import main

from .conftest import SPEC

FIXTURES = Path(__file__).parent / "fixtures" / "serve-trace-dir"


def files() -> list[str]:
    found = sorted(str(p) for p in FIXTURES.glob("*.jsonl"))
    assert len(found) == 8
    return found


def test_gateway_exchange_traces_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-trace", "--spec", str(SPEC), "--exchange", *files()]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 8
    assert all("ACCEPTED" in line for line in out)
    actions = {
        tuple(json.loads(line)["#action"] for line in Path(f).read_text().splitlines())
        for f in files()
    }
    assert actions == {
        ("Resume", "CallerSend", "ProviderReply", "Deliver"),
        ("Resume", "CallerSend", "ProviderFail"),
    }


def test_without_exchange_they_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    """Read as conversation traces they would look like gateway bugs (the seed exchange's
    discarding ProviderFail, caller ids beside wire ids): a usage error instead of a verdict."""
    assert main(["check-trace", "--spec", str(SPEC), *files()]) == 2
    captured = capsys.readouterr()
    assert "ACCEPTED" not in captured.out
    assert "REJECTED" not in captured.out
    assert "--exchange" in captured.err
    assert "exchange trace" in captured.err


def test_with_the_seed_spec_they_are_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-trace", *files()[:1]]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "--spec spec/TpxGateway.tla --exchange" in captured.err


def test_exchange_on_the_seed_spec_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-trace", "--exchange", *files()[:1]]) == 2
    assert "add --spec spec/TpxGateway.tla" in capsys.readouterr().err


def test_a_tampered_exchange_trace_is_rejected(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = next(
        f for f in files() if '"Deliver"' in Path(f).read_text() and "tpxr0" in Path(f).read_text()
    )
    lines = [json.loads(line) for line in Path(source).read_text().splitlines()]
    last = lines[-1]
    assert last["#action"] == "Deliver"
    if last["pending"]:
        last["pending"] = last["pending"][:1]  # an obligation dropped on the way back
    else:
        last["reqIds"] = []
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(e) + "\n" for e in lines))
    assert main(["check-trace", "--spec", str(SPEC), "--exchange", str(bad)]) == 1
    assert "REJECTED at step 4" in capsys.readouterr().out
