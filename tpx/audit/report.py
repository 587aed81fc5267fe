"""The audit's report: JSON for CI, one HTML file for people (no script, no network), and
each failure's ITF trace as a file ``tpx check-trace --spec spec/TpxGateway.tla`` reads.

:func:`write` picks the format by the file's suffix (``.html`` / ``.json``) and writes the
traces beside it, in ``<stem>.traces/<check>.itf.json``; :func:`summary` is the table as
text for the terminal.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from tpx.audit.findings import CHECKS, Failure, Result

__all__ = ["render_html", "summary", "write", "write_traces"]


def write_traces(result: Result, folder: Path) -> dict[str, Path]:
    """Each failure's trace as ``folder/<check>.itf.json``; check name -> path."""
    out: dict[str, Path] = {}
    for check, failure in result.failures.items():
        if failure.trace is None:
            continue
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{check}.itf.json"
        path.write_text(json.dumps(failure.trace, indent=1) + "\n", encoding="utf-8")
        out[check] = path
    return out


def write(result: Result, path: Path) -> dict[str, Path]:
    """The report at *path* (``.html`` or ``.json``) and the traces beside it."""
    traces = write_traces(result, path.with_name(path.stem + ".traces"))
    if path.suffix == ".html":
        path.write_text(render_html(result, traces), encoding="utf-8")
    else:
        doc = result.as_json()
        for failure in doc["failures"]:
            if failure["check"] in traces:
                failure["trace_file"] = str(traces[failure["check"]])
        path.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return traces


def summary(result: Result) -> str:
    """The table of checks as text."""
    width = max(len(c.name) for c in CHECKS)
    lines = [
        f"tpx audit {result.url} ({result.mode} mode): {result.behaviours} behaviours, "
        f"{result.requests} requests, {result.seconds:.1f} s"
    ]
    for check in CHECKS:
        status = result.status(check)
        line = f"  {check.name:<{width}}  {status:<4}  {check.title}"
        failure = result.failures.get(check.name)
        if failure is not None:
            line += f"\n  {'':<{width}}        {result.counts[check.name]} failure(s); first: "
            line += failure.message.splitlines()[0][:160]
        lines.append(line)
    lines.append("verdict: " + ("every check passes" if result.ok else "FAILED"))
    return "\n".join(lines)


_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #1c1c1c;
       padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; } h3 { font-size: 1.05em; }
table { border-collapse: collapse; width: 100%; }
th, td { border: 1px solid #ccc; padding: .35em .6em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
.pass { color: #176a21; font-weight: bold; } .fail { color: #b00020; font-weight: bold; }
.na { color: #777; }
pre { background: #f7f7f7; border: 1px solid #ddd; padding: .6em; overflow-x: auto;
      white-space: pre-wrap; word-break: break-all; font-size: 13px; }
.failure { border-left: 4px solid #b00020; padding-left: 1em; margin: 1.5em 0; }
code { background: #f2f2f2; padding: 0 .2em; }
table.states { font-size: 13px; margin: .5em 0 1em; }
table.states tr.last td { background: #fde8ea; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _exchange_html(failure: Failure) -> str:
    parts = ["<h4>Client requests and answers</h4>"]
    for k, ex in enumerate(failure.exchanges):
        head = f"request {k}" + (f" of {ex['conversation']}" if ex["conversation"] else "")
        parts.append(
            f"<p><b>{_e(head)}</b></p><pre>{_e(ex['request'])}</pre>"
            f"<p>answer: <b>{_e(ex['status'])}</b> {_e(ex.get('headers') or '')}</p>"
            f"<pre>{_e(ex['answer'])}</pre>"
        )
    if failure.upstream:
        parts.append("<h4>Upstream (the scripted OpenAI-compatible server) wire</h4>")
        for up in failure.upstream:
            by = (
                "started by no client request"
                if up["client_request"] is None
                else f"for client request {up['client_request']}"
            )
            parts.append(
                f"<p><b>#{_e(up['seq'])} {_e(up['path'])}</b> ({_e(up['conversation'])}, "
                f"{_e(by)})</p><pre>{_e(up['request'])}</pre>"
                f"<p>reply: <b>{_e(up['status'])}</b></p><pre>{_e(up['reply'])}</pre>"
            )
    return "".join(parts)


def _value(v: Any) -> str:
    """An ITF value as TLA+ writes it, short."""
    if isinstance(v, dict) and "#bigint" in v:
        return str(v["#bigint"])
    if isinstance(v, dict) and "#set" in v:
        return "{" + ", ".join(_value(x) for x in v["#set"]) + "}"
    if isinstance(v, dict) and "#tup" in v:
        return "<<" + ", ".join(_value(x) for x in v["#tup"]) + ">>"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    return str(v)


def _states_html(trace: dict[str, Any]) -> str:
    """The trace's states as a table, one row per step, the last (the rejected one) marked."""
    names = [n for n in trace["vars"] if n not in ("provider", "hasKey", "hasToken")]
    head = "".join(f"<th>{_e(n)}</th>" for n in ["step", "action", *names])
    rows = []
    for k, state in enumerate(trace["states"]):
        cells = [str(k + 1), str(state.get("#meta", {}).get("action", ""))]
        cells += [_value(state[n]) for n in names]
        css = ' class="last"' if k == len(trace["states"]) - 1 else ""
        rows.append(f"<tr{css}>" + "".join(f"<td>{_e(c)}</td>" for c in cells) + "</tr>")
    return f'<table class="states"><tr>{head}</tr>{"".join(rows)}</table>'


def render_html(result: Result, traces: dict[str, Path] | None = None) -> str:
    """The report as one HTML document (inline style, no script, no external resource)."""
    traces = traces or {}
    rows = []
    for check in CHECKS:
        status = result.status(check)
        css = {"pass": "pass", "fail": "fail"}.get(status, "na")
        link = f'<a href="#{_e(check.name)}">fail</a>' if status == "fail" else status
        count = result.counts.get(check.name, 0)
        rows.append(
            f"<tr><td><code>{_e(check.name)}</code></td><td>{_e(check.title)}</td>"
            f'<td class="{css}">{link}</td><td>{count or ""}</td>'
            f"<td>{_e(check.property or '-')}</td></tr>"
        )
    failures = []
    for n, check in enumerate(c for c in CHECKS if c.name in result.failures):
        f = result.failures[check.name]
        trace = ""
        if f.trace is not None:
            where = traces.get(check.name)
            command = (
                f"tpx check-trace --spec spec/TpxGateway.tla {where}" if where is not None else ""
            )
            trace = (
                f"<h4>ITF trace ({len(f.trace['states'])} states)</h4>"
                f"<p>check-trace: <b>{_e(f.verdict)}</b></p>"
                + (f"<p><code>{_e(command)}</code></p>" if command else "")
                + _states_html(f.trace)
                + f"<details{' open' if n == 0 else ''}><summary>the trace (ITF)</summary>"
                f"<pre>{_e(json.dumps(f.trace))}</pre></details>"
            )
        else:
            trace = "<p>No trace: the check is about no exchange of the spec.</p>"
        failures.append(
            f'<div class="failure" id="{_e(check.name)}"><h3>{_e(check.name)}: '
            f"{_e(check.title)}</h3><p>{_e(f.message)}</p>"
            f"<p>where: {_e(f.where)}; {result.counts[check.name]} failure(s) of this check, "
            f"the smallest shown</p>"
            f"<p>steps: <code>{_e(' → '.join(f.steps) or '-')}</code></p>"
            f"{trace}{_exchange_html(f)}</div>"
        )
    verdict = "every check passes" if result.ok else f"{len(result.failures)} check(s) fail"
    notes = "".join(f"<li>{_e(n)}</li>" for n in result.notes)
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>tpx audit: {_e(result.url)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>tpx audit of <code>{_e(result.url)}</code></h1>"
        f"<p>{_e(result.mode)} mode: {result.behaviours} behaviours of the gateway spec, "
        f"{result.requests} requests, {result.seconds:.1f} s. Verdict: <b>{_e(verdict)}</b>.</p>"
        "<h2>Checks</h2><table><tr><th>check</th><th>rule</th><th>result</th>"
        "<th>failures</th><th>trace property</th></tr>"
        + "".join(rows)
        + "</table>"
        + (f"<ul>{notes}</ul>" if notes else "")
        + ("<h2>Counterexamples</h2>" + "".join(failures) if failures else "")
        + "</body></html>\n"
    )
