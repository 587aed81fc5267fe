"""The audit's HTML report read back: what a reader sees of it, from the document as a browser
builds it (``chromium --headless --dump-dom``) or from the file as written.

:func:`problems` compares that with the result the report was made of: the table of checks
(each check's result and count) and the first counterexample (its trace's states as a table,
the ITF trace itself shown open), and says what is missing or different. A browser's DOM
differs from the file in ways that do not matter here (``<tbody>`` inserted, attributes
quoted), so the reading goes by elements, not by text.
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

import attrs

from tpx.audit.findings import CHECKS, Result

__all__ = ["Element", "parse", "problems"]

#: elements that have no end tag
_VOID = frozenset({"meta", "br", "hr", "img", "input", "link", "wbr", "col", "source"})


@attrs.define
class Element:
    tag: str
    attrib: dict[str, str]
    children: list[Element | str] = attrs.field(factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def all(self, tag: str) -> list[Element]:
        """The elements named *tag* under this one, in document order."""
        out: list[Element] = []
        for c in self.children:
            if isinstance(c, Element):
                if c.tag == tag:
                    out.append(c)
                out += c.all(tag)
        return out

    def classes(self) -> set[str]:
        return set(self.attrib.get("class", "").split())


class _Builder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Element("#document", {})
        self._open = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        el = Element(tag, {k: v or "" for k, v in attrs})
        self._open[-1].children.append(el)
        if tag not in _VOID:
            self._open.append(el)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._open[-1].children.append(Element(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag: str) -> None:
        for k in range(len(self._open) - 1, 0, -1):
            if self._open[k].tag == tag:
                del self._open[k:]
                return

    def handle_data(self, data: str) -> None:
        self._open[-1].children.append(data)


def parse(document: str) -> Element:
    """*document* as a tree of elements."""
    builder = _Builder()
    builder.feed(document)
    builder.close()
    return builder.root


def _rows(table: Element) -> list[list[str]]:
    """The table's rows of data cells (a header row has none)."""
    rows = [[td.text().strip() for td in tr.all("td")] for tr in table.all("tr")]
    return [r for r in rows if r]


def _checks_table(root: Element) -> Element | None:
    for table in root.all("table"):
        head = [th.text().strip() for th in table.all("th")]
        if head[:3] == ["check", "rule", "result"]:
            return table
    return None


def problems(document: str, result: Result) -> list[str]:
    """What a reader of *document* would not see of *result*: the table of checks (each
    check, its result and count) and the first counterexample (its message; its trace's
    states, one row each, and the ITF trace shown open). Empty: all of it is there."""
    root = parse(document)
    out: list[str] = []
    table = _checks_table(root)
    if table is None:
        return ["no table of checks"]
    shown = [(r[0], r[2], r[3]) for r in _rows(table) if len(r) >= 4]
    wanted = [(c.name, result.status(c), str(result.counts.get(c.name) or "")) for c in CHECKS]
    if shown != wanted:
        out.append(f"the table of checks shows {shown}, not {wanted}")
    failed = [c.name for c in CHECKS if c.name in result.failures]
    divs = [d for d in root.all("div") if "failure" in d.classes()]
    if [d.attrib.get("id") for d in divs] != failed:
        out.append(
            f"the counterexamples shown are {[d.attrib.get('id') for d in divs]}, not {failed}"
        )
    if not failed or not divs:
        return out
    first, div = result.failures[failed[0]], divs[0]
    if " ".join(first.message.split()) not in " ".join(div.text().split()):
        out.append(f"{failed[0]}: the first counterexample's message is not shown")
    out += _trace_problems(failed[0], first.trace, div)
    return out


def _trace_problems(check: str, trace: dict[str, Any] | None, div: Element) -> list[str]:
    if trace is None:  # the requests and answers are the counterexample
        return [] if div.all("pre") else [f"{check}: no request or answer shown"]
    out = []
    states = [t for t in div.all("table") if "states" in t.classes()]
    if not states or len(_rows(states[0])) != len(trace["states"]):
        out.append(f"{check}: the trace's {len(trace['states'])} states are not shown as rows")
    details = div.all("details")
    if not details or "open" not in details[0].attrib:
        out.append(f"{check}: the ITF trace is not shown open")
        return out
    pres = details[0].all("pre")
    try:
        shown = json.loads(pres[0].text()) if pres else None
    except json.JSONDecodeError:
        shown = None
    if shown != trace:
        out.append(f"{check}: the ITF trace shown is not the counterexample's")
    return out
