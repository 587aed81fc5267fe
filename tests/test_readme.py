"""The README and docs/ say what the code does: every example runs as written.

Conventions (docs/README.md, "How the examples are kept true"): ```python blocks run from the
repository root; ```sh blocks run with ``bash -e`` in a scratch folder linking the repository's
files (a ```json block preceded by ``<!-- file: NAME -->`` is written there first); ```console
blocks are not run, but their ``tpx`` flags and ``make`` targets must exist. The README's quick
start with the scripted upstream is run as processes; its figures, links and layout are checked.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import subprocess
import textwrap
import time
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import httpx2
import orjson
import pytest

from benchmarks import report
from benchmarks.gateway_latency import gateway_table
from tests.e2e import cluster_figures
from tests.e2e.procs import SCRUB, free_port

ROOT = Path(__file__).parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
#: docs pages that are written alongside these and may not be in this checkout yet; a link to
#: one of them is checked like any other as soon as the file exists
PENDING = {"specs.md", "conformance-http.md", "threat-model.md", "limits.md", "upstream.md"}

FENCE = re.compile(r"^[ \t]*```([\w.+-]*)\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)
FILE_NOTE = re.compile(r"<!-- file: ([\w.-]+) -->\s*$")


def _blocks(page: Path) -> list[tuple[str, str, str | None]]:
    """(language, code, file name from a preceding ``<!-- file: NAME -->``) per fence."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        note = FILE_NOTE.search(before)
        out.append((m.group(1), textwrap.dedent(m.group(2)), note.group(1) if note else None))
    return out


def _of(kind: str) -> list[tuple[Path, int, str]]:
    return [
        (page, i, code)
        for page in PAGES
        for i, (lang, code, _) in enumerate(_blocks(page))
        if lang == kind
    ]


def _id(item: tuple[Path, int, str]) -> str:
    return f"{item[0].relative_to(ROOT)}[{item[1]}]"


PYTHON = _of("python")
SHELL = _of("sh")
#: fences that would hide a command or an example from the tests below: a shell command goes in
#: ```sh (run) or ```console (not run), Python in ```python
UNCHECKED_FENCES = {"", "bash", "shell", "zsh", "py", "python3", "pycon"}


def test_no_example_hides_in_an_unchecked_fence() -> None:
    for page in PAGES:
        for lang, _, _ in _blocks(page):
            assert lang not in UNCHECKED_FENCES, (
                f"{page.name}: a ```{lang} block; use sh, console, python, json, toml or text"
            )


def test_there_are_examples() -> None:
    readme = [item for item in PYTHON if item[0] == README]
    assert len(readme) >= 2
    assert len(PYTHON) >= 10
    assert len(SHELL) >= 2


@pytest.mark.tlc
@pytest.mark.parametrize("item", PYTHON, ids=_id)
def test_python_example_runs(item: tuple[Path, int, str], monkeypatch: pytest.MonkeyPatch) -> None:
    page, index, source = item
    monkeypatch.chdir(ROOT)
    for name in SCRUB:
        monkeypatch.delenv(name, raising=False)
    code = compile(source, f"{page.relative_to(ROOT)}[python block {index}]", "exec")
    exec(code, {"__name__": f"example_{page.stem}_{index}"})
    assert os.getcwd() == str(ROOT)


def _scratch(tmp_path: Path, page: Path) -> Path:
    """A folder holding a link to every top-level entry of the repository (so relative paths
    such as ``.venv/bin/tpx`` and ``spec/`` resolve) plus the page's named files."""
    for entry in ROOT.iterdir():
        if entry.name not in (".git", ".pytest_cache", ".mypy_cache", ".ruff_cache"):
            (tmp_path / entry.name).symlink_to(entry)
    for lang, code, name in _blocks(page):
        if name is not None:
            assert lang == "json", f"{page.name}: <!-- file: {name} --> before a ```{lang} block"
            (tmp_path / name).write_text(code)
    return tmp_path


@pytest.mark.tlc
@pytest.mark.parametrize("item", SHELL, ids=_id)
def test_shell_example_runs(item: tuple[Path, int, str], tmp_path: Path) -> None:
    page, _, code = item
    env = {k: v for k, v in os.environ.items() if k not in SCRUB}
    done = subprocess.run(
        ["bash", "-e", "-c", code],
        cwd=_scratch(tmp_path, page),
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"


def test_json_blocks_parse() -> None:
    for page in PAGES:
        for _, code, name in (b for b in _blocks(page) if b[0] == "json"):
            if name is not None and name.endswith(".jsonl"):
                for line in code.splitlines():
                    assert isinstance(orjson.loads(line), dict)
            else:
                orjson.loads(code)


def test_toml_blocks_are_gateway_settings(tmp_path: Path) -> None:
    from tpx.gateway.settings import load_settings

    seen = 0
    for page in PAGES:
        for lang, code, _ in _blocks(page):
            if lang != "toml":
                continue
            seen += 1
            path = tmp_path / f"{page.stem}-{seen}.toml"
            path.write_text(code)
            data = tomllib.loads(code)
            env = {"TPX_OAUTH_TOKEN": "unused"}
            for upstream in data.get("upstreams", []):  # the credentials they name
                if "token_env" in upstream:
                    env[upstream["token_env"]] = "unused"
            if "base_url" not in data.get("upstream", {}):
                env["TPX_BASE_URL"] = "http://127.0.0.1:8000/v1"
            settings = load_settings(env=env, config_file=path)
            for key, value in data.get("limits", {}).items():
                assert getattr(settings.limits, key) == value
            assert len(settings.routes) == len(data.get("models", []))
            if "model" in data.get("upstream", {}):
                assert settings.model == data["upstream"]["model"]
            if "upstreams" in data:
                assert settings.routing is not None
                assert len(settings.routing.upstreams) == len(data["upstreams"])
                assert len(settings.routing.rules) == len(data.get("routes", []))
    assert seen >= 1


# -- claims about the command line: flags and make targets ---------------------------------

TPX_COMMAND = re.compile(r"\btpx (tlc|explore|check-trace|graph|serve)\b([^`|#\n]*)")
MAKE_TARGET = re.compile(r"(?<![\w-])make ([a-z][\w-]*)")


@cache
def _help(sub: str) -> str:
    """``tpx SUB --help``, from the parser itself."""
    from tpx.cli import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    text: str = commands.choices[sub].format_help()
    return text


def _code_texts(page: Path) -> Iterator[str]:
    """Every code block's text and every inline code span of *page*."""
    text = page.read_text(encoding="utf-8")
    for m in FENCE.finditer(text):
        yield m.group(2).replace("\\\n", " ")
    for span in re.findall(r"`([^`]+)`", FENCE.sub("", text)):  # a span may cross a line
        yield span.replace("\n", " ")


def _flag_problems(page: Path) -> tuple[list[str], int]:
    """`tpx SUB --flag` named in *page* whose SUB has no such flag; and how many were named."""
    problems, seen = [], 0
    for text in _code_texts(page):
        for sub, rest in TPX_COMMAND.findall(text):
            for flag in re.findall(r"(?<![\w-])--[a-z][\w-]*", rest):
                seen += 1
                if not re.search(rf"(?<![\w-]){flag}\b", _help(sub)):
                    problems.append(f"{page.name}: `tpx {sub} {flag}`: no {flag} in its --help")
    return problems, seen


def _target_problems(page: Path) -> tuple[list[str], set[str]]:
    """`make TARGET` named in *page* that the Makefile does not define; and the targets named."""
    makefile = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    problems, seen = [], set()
    for text in _code_texts(page):
        for target in MAKE_TARGET.findall(text):
            seen.add(target)
            if target not in targets:
                problems.append(f"{page.name}: `make {target}` is not a Makefile target")
    return problems, seen


def test_every_tpx_flag_shown_exists() -> None:
    results = [_flag_problems(page) for page in PAGES]
    assert [p for problems, _ in results for p in problems] == []
    assert sum(seen for _, seen in results) >= 20


def test_every_make_target_shown_exists() -> None:
    results = [_target_problems(page) for page in PAGES]
    assert [p for problems, _ in results for p in problems] == []
    assert {"tlc", "test", "e2e", "bench"} <= set().union(*(seen for _, seen in results))


def test_the_setup_commands_are_in_the_readme() -> None:
    text = README.read_text()
    assert "make tlc" in text
    assert "make test" in text
    assert len(text.splitlines()) <= 300


def test_the_readme_figures_are_the_mirrors() -> None:
    from tpx.oracle.model import Config, explore

    (block,) = [c for lang, c, _ in _blocks(README) if lang == "console" and "tlc: spec/" in c]
    quoted = {
        k: int(v)
        for k, v in re.findall(r"^\s+(initial|generated|distinct|depth)\s+(\d+)$", block, re.M)
    }
    result = explore(Config.from_cfg(ROOT / "spec/TpxTransport.cfg"))
    assert result.verdict.kind == "ok"
    assert quoted == {
        "initial": result.initial,
        "generated": result.generated,
        "distinct": result.distinct,
        "depth": result.depth,
    }


# -- links and layout -------------------------------------------------------------------------


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return {_slug(h) for h in re.findall(r"^#+ (.+)$", text, re.M)}


def _link_problems(page: Path) -> tuple[list[str], int]:
    """Relative links of *page* to a file or heading that is not there; and how many resolved."""
    problems, checked = [], 0
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            if dest.name not in PENDING or dest.parent != ROOT / "docs":
                problems.append(f"{page.name}: link to {target}, which does not exist")
            continue
        checked += 1
        if anchor and anchor not in _anchors(dest):
            problems.append(f"{page.name}: no heading #{anchor} in {path}")
    return problems, checked


def test_links_point_to_what_exists() -> None:
    results = [_link_problems(page) for page in PAGES]
    assert [p for problems, _ in results for p in problems] == []
    assert sum(checked for _, checked in results) >= 30


def _path_problems(page: Path) -> tuple[list[str], int]:
    """Paths in inline code that start in one of the repository's folders and are not there
    (globs and placeholders aside); and how many were named."""
    roots = ("spec/", "tpx/", "tests/", "conformance/", "benchmarks/", "docs/", ".ci/")
    problems, named = [], 0
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    for span in re.findall(r"`([^`]+)`", text):
        for token in re.findall(r"(?<![\w./-])((?:[\w.-]+/)+[\w.*<>-]*)", span):
            path = token.split("::")[0]
            if not path.startswith(roots) or any(c in path for c in "*<>"):
                continue
            named += 1
            if not (ROOT / path).exists():
                problems.append(f"{page.name}: `{path}` does not exist")
    return problems, named


def test_every_repository_path_named_exists() -> None:
    results = [_path_problems(page) for page in PAGES]
    assert [p for problems, _ in results for p in problems] == []
    assert sum(named for _, named in results) >= 60


def test_the_docs_index_names_the_files_of_each_folder() -> None:
    """In docs/README.md's "Where things are", a row for a folder names files that it holds."""
    text = (ROOT / "docs" / "README.md").read_text()
    section = text.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    named = 0
    for row in re.findall(r"^\| `([\w/]+/)`[^|]*\| (.*) \|$", section, re.M):
        folder, cells = row
        for name in re.findall(r"`([\w]+\.py)`", cells):
            named += 1
            assert (ROOT / folder / name).is_file(), f"docs/README.md: no {folder}{name}"
    assert named >= 40


def _layout() -> list[str]:
    """The README's layout block as paths (an indented entry lies under the one above)."""
    text = README.read_text()
    section = text.split("## Layout", 1)[1]
    (block,) = [m.group(2) for m in FENCE.finditer(section)][:1]
    paths: list[str] = []
    parent = ""
    for line in block.splitlines():
        m = re.match(r"( *)(\S+/)\s", line + " ")
        if not m:
            continue
        if m.group(1):
            paths.append(parent + m.group(2))
        else:
            parent = m.group(2)
            paths.append(parent)
    return paths


def test_the_layout_matches_the_tree() -> None:
    listed = _layout()
    for path in listed:
        assert (ROOT / path).is_dir(), f"README layout: {path} is not a folder"
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    top = {p.split("/")[0] + "/" for p in tracked if "/" in p and not p.startswith(".")}
    top.add("docs/")
    assert top <= set(listed), f"not in the README's layout: {sorted(top - set(listed))}"
    packages = {
        "tpx/" + p.split("/")[1] + "/"
        for p in tracked
        if p.startswith("tpx/") and p.count("/") >= 2
    }
    assert packages <= set(listed), f"not in the layout: {sorted(packages - set(listed))}"


# -- the README's first quick start, as processes ---------------------------------------------


def _quick_start() -> list[str]:
    """The commands of the README's no-model-server block, continuation lines joined."""
    (block,) = [
        c for lang, c, _ in _blocks(README) if lang == "console" and "tests.e2e.fake_openai" in c
    ]
    joined = block.replace("\\\n", " ")
    return [line[2:].strip() for line in joined.splitlines() if line.startswith("$ ")]


def _command(line: str, ports: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    for old, new in ports.items():
        line = line.replace(old, new)
    words = shlex.split(line.removesuffix("&").strip())
    env: dict[str, str] = {}
    while words and re.match(r"[A-Z_]+=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


@contextlib.contextmanager
def _started(env: dict[str, str], argv: list[str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    base = {k: v for k, v in os.environ.items() if k not in SCRUB}
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env={**base, **env}, stdout=out, stderr=out)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _wait_for(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text()}"
        try:
            if httpx2.get(url, timeout=1).status_code < 500:
                return
        except httpx2.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"{url} did not answer within 60 s:\n{log.read_text()}")


def test_the_quick_start_with_the_scripted_upstream(tmp_path: Path) -> None:
    fake, serve, curl = _quick_start()
    ports = {"9000": str(free_port()), "8082": str(free_port())}
    fake_env, fake_argv = _command(fake, ports)
    serve_env, serve_argv = _command(serve, ports)
    assert fake_argv[:3] == [".venv/bin/python", "-m", "tests.e2e.fake_openai"]
    assert serve_argv[:2] == [".venv/bin/tpx", "serve"]
    assert "TPX_MODEL" in serve_env
    assert "TPX_OAUTH_TOKEN" in serve_env
    words = shlex.split(curl.replace("8082", ports["8082"]))
    assert words[0] == "curl"
    url = next(w for w in words if w.startswith("http://"))
    headers = dict(words[i + 1].split(": ", 1) for i, w in enumerate(words) if w == "-H")
    body = words[words.index("-d") + 1]
    fake_log, serve_log = tmp_path / "fake.log", tmp_path / "serve.log"
    fake_argv[0] = str(ROOT / fake_argv[0])
    serve_argv[0] = str(ROOT / serve_argv[0])
    with (
        _started(fake_env, fake_argv, fake_log) as up,
        _started(serve_env, serve_argv, serve_log) as gw,
    ):
        _wait_for(f"http://127.0.0.1:{ports['9000']}/_ledger", up, fake_log)
        _wait_for(f"http://127.0.0.1:{ports['8082']}/healthz", gw, serve_log)
        reply = httpx2.post(url, content=body, headers=headers, timeout=30)
        assert reply.status_code == 200, reply.text
        message = reply.json()
        assert message["type"] == "message"
        assert message["stop_reason"] == "tool_use"
        (tool,) = [b for b in message["content"] if b["type"] == "tool_use"]
        assert tool["name"] == "Bash"
        assert tool["id"].startswith("tpxr0-")
        ledger = httpx2.get(f"http://127.0.0.1:{ports['9000']}/_ledger", timeout=10).json()
        assert ledger["requests"] == 1
        assert ledger["violation_count"] == 0
        sent = orjson.loads(body)
        assert sent["model"].startswith("claude-")  # TPX_MODEL is what went upstream
    log = serve_log.read_text()
    assert f'"upstream_model":"{serve_env["TPX_MODEL"]}"' in log.replace(": ", ":")


# -- the benchmark tables: written between markers, with the machine and the date ------------


def test_performance_doc_has_one_place_per_benchmark_table() -> None:
    homes = {name: report.HOMES.get(name, report.DOC) for name in report.SECTIONS}
    for doc in {report.DOC, *report.HOMES.values()}:
        text = doc.read_text()
        opened = re.findall(r"<!-- bench:([\w-]+) -->", text)
        closed = re.findall(r"<!-- /bench:([\w-]+) -->", text)
        assert sorted(opened) == sorted(closed) == sorted(n for n, d in homes.items() if d == doc)


def test_a_section_goes_to_its_home_document(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(report.ENV, raising=False)
    assert report.target(None, "context-counts") == ROOT / "docs" / "context.md"
    assert report.target(None, "context-summary") == ROOT / "README.md"
    assert report.target(None, "routing") == report.DOC
    monkeypatch.setenv(report.ENV, "")
    assert report.target(None, "context-counts") is None


def test_every_other_section_has_one_place_in_its_document() -> None:
    for name, doc in report.HOMES.items():
        text = doc.read_text()
        assert text.count(f"<!-- bench:{name} -->") == 1, (name, doc)
        assert text.count(f"<!-- /bench:{name} -->") == 1, (name, doc)
        assert report.target(name=name) == doc


def test_the_load_cluster_figures_go_into_both_documents(tmp_path: Path) -> None:
    run = cluster_figures.ClusterRun(
        conversations=1000,
        turns=4000,
        served=(1877, 346, 1877),
        victim=1,
        killed_at=14.8,
        seconds=57.5,
        failed={"529": 100, "APIConnectionError": 2},
        injected=100,
        upstream_requests=4100,
        lost=0,
        cross_paired=0,
    )
    upstreams, readme = tmp_path / "upstreams.md", tmp_path / "README.md"
    upstreams.write_text("a\n<!-- bench:load-cluster -->\n<!-- /bench:load-cluster -->\nb\n")
    readme.write_text(
        "<!-- bench:load-cluster-summary -->\nold\n<!-- /bench:load-cluster-summary -->\n"
    )
    cluster_figures.write(run, upstreams, readme)
    table = upstreams.read_text()
    assert "Written by `make load-cluster` on " in table
    assert "(part of" not in table
    assert "load average" in table
    assert (
        "| exchanges per replica (3 behind HAProxy) | 1877, 346 (killed at 14.8 s), 1877 |" in table
    )
    assert "| failed attempts of the killed replica, sent again | 2 APIConnectionError |" in table
    assert "| **conversations lost** | **0** |" in table
    summary = readme.read_text()
    assert "old" not in summary
    assert "1,000 conversations (4,000 turns) through HAProxy to 3 replicas in 58 s" in summary
    assert "the 2 requests it had in flight were answered on the others when sent again" in summary
    assert "the 4000 turns, the 100 injected 529s and 0 the killed replica had sent on" in table


def test_a_table_replaces_only_its_section(tmp_path: Path) -> None:
    doc = tmp_path / "perf.md"
    doc.write_text(
        "# t\n<!-- bench:monitor -->\nold\n<!-- /bench:monitor -->\nkept\n"
        "<!-- bench:gateway -->\nalso kept\n<!-- /bench:gateway -->\n"
    )
    table = report.markdown_table(("a", "b"), [(1, 2)])
    report.write_section("monitor", "cmd --x", table, notes=["n1"], doc=doc, when="W", host="H")
    text = doc.read_text()
    assert "old" not in text
    assert "also kept" in text
    assert "\nkept\n" in text
    assert "Written by `cmd --x` (part of `make bench`) on W; machine: H." in text
    assert report.render("cmd", "t", when="W", host="H", part_of=None).startswith(
        "Written by `cmd` on W; machine: H."
    )
    assert "| a | b |\n|---|---|\n| 1 | 2 |\n\n- n1\n<!-- /bench:monitor -->" in text
    report.write_section("monitor", "cmd --y", table, doc=doc, when="W2", host="H")
    assert doc.read_text().count("Written by") == 1
    assert "cmd --y" in doc.read_text()


def test_the_machine_line_names_the_cores_and_python() -> None:
    line = report.machine()
    assert f"{os.cpu_count()} cores" in line
    assert "load average" in line
    assert re.search(r"Python \d+\.\d+\.\d+", line)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC", report.now())


def test_a_missing_place_is_an_error_and_an_empty_target_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    doc = tmp_path / "perf.md"
    doc.write_text("no markers\n")
    with pytest.raises(report.ReportError, match="expected one"):
        report.write_section("monitor", "cmd", "t", doc=doc)
    with pytest.raises(report.ReportError, match="unknown section"):
        report.write_section("nope", "cmd", "t", doc=doc)
    with pytest.raises(ValueError, match="cells"):
        report.markdown_table(("a", "b"), [(1,)])
    monkeypatch.setenv(report.ENV, "")
    assert report.write_section("monitor", "cmd", "t") is None
    monkeypatch.setenv(report.ENV, str(doc))
    assert report.target() == doc
    monkeypatch.delenv(report.ENV)
    assert report.target() == report.DOC


def test_rows_accumulate_within_one_run(tmp_path: Path) -> None:
    doc = tmp_path / "perf.md"
    doc.write_text("<!-- bench:explore -->\n<!-- /bench:explore -->\n")
    rows = report.Rows("explore", "cmd", ("x", "y"))
    rows.add(1, 2, doc=doc)
    rows.add(3, 4, doc=doc)
    assert "| 1 | 2 |\n| 3 | 4 |" in doc.read_text()


def test_the_gateway_table_of_a_small_run() -> None:
    ms = 1e-3
    results = {
        "direct": {"plain": [1 * ms, 2 * ms, 3 * ms], "ttfb": [1 * ms, 1 * ms, 1 * ms]},
        "tpx": {"plain": [2 * ms, 3 * ms, 4 * ms], "ttfb": [1.5 * ms, 1.5 * ms, 1.5 * ms]},
        "litellm": {"plain": [12 * ms, 12 * ms, 13 * ms], "ttfb": [6 * ms, 6 * ms, 6 * ms]},
    }
    cpu = {"direct": 0.3, "tpx": 1.1, "litellm": 30.0}
    table, notes = gateway_table(results, 500.0, cpu, 0.4, 0.2, 76_000, 3)
    lines = table.splitlines()
    assert lines[2].startswith("| `direct` | 2.00 ms |  |  | 1.00 ms |")
    assert lines[3] == (
        "| `tpx` | 3.00 ms | **+1.00** | +1.00 | 1.50 ms | **+0.50** | +0.50 | 1.10 |"
    )
    assert "500 req/s" in notes[1]
    assert "LiteLLM / tpx added p50 latency (non-streaming): 10.0x." in notes
    assert "LiteLLM / tpx added p50 latency (first byte): 10.0x." in notes


# -- the documents speak to their readers, not about their making ---------------------------

HISTORY = re.compile(
    r"\b[Ss]top [0-9]+\b|this[ ]stop|\bbranch [a-z]+[0-9]+\b"
    r"|branch (latency|survivors|monitor|tail|reqbuild)[0-9]*\b|\b[Ii]ssue #?[0-9]+\b"
)
TEXT_SUFFIXES = {".py", ".md", ".tla", ".cfg", ".toml", ".sh", ".ini"}
NOT_OURS = {
    ".git",
    ".venv",
    ".cache",
    "node_modules",
    "__pycache__",
    ".hypothesis",
    ".pytest_cache",
}


def _repository_texts() -> list[Path]:
    """Every text file of the repository (code, comments, specs, docs), not what tools made."""
    found = []
    for path in ROOT.rglob("*"):
        rel = path.relative_to(ROOT)
        if any(part in NOT_OURS or part.startswith(".venv") for part in rel.parts[:-1]):
            continue
        if path.is_file() and (path.suffix in TEXT_SUFFIXES or path.name in {"Makefile", "run"}):
            found.append(path)
    return found


def _history_problems(page: Path) -> list[str]:
    text = page.read_text(encoding="utf-8")
    return [
        f"{page.name}:{n}: {line}"
        for n, line in enumerate(text.splitlines(), 1)
        if HISTORY.search(line)
    ]


def test_no_development_record_in_the_documents() -> None:
    pages = [*PAGES, ROOT / "conformance" / "mutate" / "RESULTS.md"]
    assert [p for page in pages for p in _history_problems(page)] == []


def test_no_development_record_in_code_or_comments() -> None:
    texts = _repository_texts()
    assert ROOT / "tpx" / "gateway" / "core.py" in texts
    assert ROOT / "spec" / "TpxGateway.tla" in texts
    assert [p for text in texts for p in _history_problems(text)] == []


def test_the_checks_catch_a_broken_page(tmp_path: Path) -> None:
    """Seeded bugs: a page with a flag, a target, a link, a path and wording that are wrong."""
    page = tmp_path / "broken.md"
    page.write_text(
        "# Broken\n\nRun `tpx serve --no-such-flag` or `make no-such-target`; see\n"
        "[x](nowhere.md), [y](broken.md#no-such-heading) and `tpx/no_such_module.py`.\n"
        "This " + "stop" + " 9 note.\n"
        "\n```console\n$ .venv/bin/tpx check-trace --no-such-option FILE\n```\n"
    )
    flags, _ = _flag_problems(page)
    assert sorted(flags) == [
        "broken.md: `tpx check-trace --no-such-option`: no --no-such-option in its --help",
        "broken.md: `tpx serve --no-such-flag`: no --no-such-flag in its --help",
    ]
    targets, _ = _target_problems(page)
    assert targets == ["broken.md: `make no-such-target` is not a Makefile target"]
    links, _ = _link_problems(page)
    assert links == [
        "broken.md: link to nowhere.md, which does not exist",
        "broken.md: no heading #no-such-heading in broken.md",
    ]
    paths, _ = _path_problems(page)
    assert paths == ["broken.md: `tpx/no_such_module.py` does not exist"]
    assert len(_history_problems(page)) == 1


def test_the_audit_timing_table_and_the_peers_cpu_row(tmp_path: Path) -> None:
    from conformance import audit_peers, audit_timing
    from tpx.audit.findings import Result

    timings = [
        audit_timing.Timing("gateway", 8, 536, 1327, 8.25, 5.04, 1.52),
        audit_timing.Timing("pass-through", 1, 536, 1327, 8.9, 4.0, 1.4),
    ]
    text = audit_timing.table(timings)
    assert "| gateway | 8 | 536 | 1327 | **8.2** | 5.0 | 1.5 |" in text
    assert "| pass-through (`--messages-upstream`) | 1 | 536 | 1327 | **8.9** | 4.0 | 1.4 |" in text
    results = {"tpx": Result("u", "gateway"), "ccr": Result("v", "gateway")}
    assert "CPU ms per request" not in audit_peers.table(results)
    row = audit_peers.table(results, cpu={"tpx": 1.234}).splitlines()[-1]
    assert row == "| the endpoint's CPU ms per request | 1.2 | - |"
