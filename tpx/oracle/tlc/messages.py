"""The ``-tool`` message parser: TLC's framed output as :class:`ToolMessage` trees.


``-tool`` framing: ``@!@!@STARTMSG <code>:<severity> @!@!@`` ... ``@!@!@ENDMSG
<code> @!@!@``; severity 0 none, 1 error, 3 warning, 4 state. Messages nest
(1000 wraps 5006 for a cfg syntax error, and the inner STARTMSG may follow text
on the same line). SANY's own error text (parse/semantic errors) is NOT framed:
it sits between 2220 and 2219.

"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Literal

import attrs

__all__ = ["Progress", "ToolMessage", "ToolOutputParser", "parse_progress", "parse_tool_output"]


@attrs.frozen
class ToolMessage:
    """One ``-tool`` message. ``text`` is its whole body (nested messages' text included)."""

    code: int
    severity: int
    text: str
    children: tuple[ToolMessage, ...] = ()

    def walk(self) -> Iterator[ToolMessage]:
        yield self
        for child in self.children:
            yield from child.walk()


_MARK = re.compile(r"@!@!@(?:STARTMSG (\d+):(\d+)|ENDMSG (\d+)) @!@!@")


class ToolOutputParser:
    """Incremental parser of ``-tool`` output: feed lines, get completed top-level messages."""

    def __init__(self) -> None:
        self._stack: list[tuple[int, int, list[str], list[ToolMessage]]] = []
        self.plain: list[str] = []
        """Lines printed outside any message (SANY errors, stack traces)."""

    def feed(self, line: str) -> list[ToolMessage]:
        done: list[ToolMessage] = []
        line = line.rstrip("\n")
        pos = 0
        for m in _MARK.finditer(line):
            self._text(line[pos : m.start()], partial=True)
            pos = m.end()
            if m.group(1) is not None:
                self._stack.append((int(m.group(1)), int(m.group(2)), [], []))
            elif self._stack and self._stack[-1][0] == int(m.group(3)):
                code, sev, parts, children = self._stack.pop()
                msg = ToolMessage(code, sev, "".join(parts).strip("\n"), tuple(children))
                if self._stack:
                    self._stack[-1][2].append(msg.text)
                    self._stack[-1][3].append(msg)
                else:
                    done.append(msg)
        rest = line[pos:]
        if pos == 0 or rest:
            self._text(rest + "\n", partial=False)
        return done

    def _text(self, text: str, *, partial: bool) -> None:
        if not text:
            return
        if self._stack:
            self._stack[-1][2].append(text)
        elif not partial or text.strip():
            self.plain.append(text.rstrip("\n"))


def parse_tool_output(text: str) -> tuple[list[ToolMessage], list[str]]:
    """All top-level messages and the unframed lines of a complete ``-tool`` output."""
    parser = ToolOutputParser()
    messages: list[ToolMessage] = []
    for line in text.splitlines():
        messages.extend(parser.feed(line))
    return messages, parser.plain


@attrs.frozen
class Progress:
    """A progress report (2200 during BFS, 2209 during simulation; -1 counts become None)."""

    code: int
    depth: int | None
    generated: int
    distinct: int | None
    left: int | None


VerdictKind = Literal["ok", "invariant", "action_property", "temporal", "deadlock", "error"]


_PROGRESS = re.compile(
    r"Progress\((-?\d+)\).*?: ([\d,]+) states generated.*?, (-?[\d,]+) distinct states found.*?"
    r"(-?[\d,]+) states left on queue"
)


def _int(text: str) -> int | None:
    n = int(text.replace(",", ""))
    return None if n < 0 else n


def parse_progress(msg: ToolMessage) -> Progress | None:
    m = _PROGRESS.search(msg.text)
    if m is None:
        return None
    generated = _int(m.group(2))
    return Progress(
        code=msg.code,
        depth=_int(m.group(1)),
        generated=generated or 0,
        distinct=_int(m.group(3)),
        left=_int(m.group(4)),
    )
