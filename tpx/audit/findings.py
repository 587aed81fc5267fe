"""What an audit finds: the checks, each failure's counterexample, the result.

A :class:`Failure` carries what a person needs to see the failure again: the steps taken
(the spec's actions, per conversation), the requests and answers on the client's side, the
requests and replies on the upstream side, and an ITF trace of the conversation the
failure is about, which ``tpx check-trace --spec spec/TpxGateway.tla`` reads and rejects
(:mod:`tpx.audit.traces`). Of several failures of one check, the result keeps the one with
the fewest steps (then the fewest bytes): the minimal counterexample the audit saw.
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["CHECKS", "CHECK_OF", "Check", "Failure", "Result", "check_named"]


@attrs.frozen
class Check:
    """One row of the report: *property* is the spec property its counterexamples' traces
    violate (``""``: the check is about no exchange of the spec, so no trace)."""

    name: str
    title: str
    property: str
    live: bool  # applies with a real model behind the URL (``--live``)


CHECKS: tuple[Check, ...] = (
    Check(
        "ShapeInv", "every body and stream event is of the Messages API's grammar", "ShapeInv", True
    ),
    Check("MessageId", "message ids are of the msg_ form", "ShapeInv", True),
    Check("Usage", "usage counts are whole and add up to the upstream's", "ShapeInv", True),
    Check(
        "PairingInv",
        "tool ids bound to their calls and results over every round; none duplicated, "
        "invented or lost; tool inputs are the calls' arguments",
        "PairingInv",
        True,
    ),
    Check(
        "Refusal",
        "tool_results that do not answer the calls: 400, never forwarded",
        "PairingInv",
        True,
    ),
    Check("OneRequest", "one upstream request per client request", "Next", False),
    Check(
        "Refinement",
        "every step is the spec's (turns forwarded, answered, delivered)",
        "Next",
        False,
    ),
    Check(
        "ErrorShape",
        "errors are Messages-shaped with the SDK's error types; retry-after kept",
        "ShapeInv",
        True,
    ),
    Check("Credential", "only the endpoint's own upstream credential goes upstream", "", False),
    Check(
        "PromptTooLong",
        "a context overflow is a 400 saying 'prompt is too long'",
        "ShapeInv",
        False,
    ),
    Check("RetrySafety", "the same body after a 529 succeeds", "Next", False),
    Check("CountTokens", "POST /v1/messages/count_tokens answers {input_tokens}", "", True),
    Check("Models", "GET /v1/models answers a page of models", "", True),
)


#: the replay's property -> the audit's check
CHECK_OF = {
    "TypeOK": "PairingInv",  # an id, call or result that names no call of the upstream
    "ShapeInv": "ShapeInv",
    "PairingInv": "PairingInv",
    "Binding": "PairingInv",
    "NoCrossPairing": "PairingInv",
    "RetryInv": "PairingInv",
    "OneRequest": "OneRequest",
    "Refusal": "Refusal",
    "ErrorShape": "ErrorShape",
    "Credential": "Credential",
}


def check_named(name: str) -> Check:
    return next(c for c in CHECKS if c.name == name)


@attrs.define
class Failure:
    check: str
    message: str
    #: where it was found: the behaviour (cfg, index, plain or streamed) or the scenario
    where: str
    #: the steps taken, ``Action(conversation)``, the failing one last
    steps: list[str]
    #: client side: per request ``{"conversation", "request", "status", "headers", "answer"}``
    exchanges: list[dict[str, Any]]
    #: upstream side: per request ``{"conversation", "path", "request", "status", "reply"}``
    upstream: list[dict[str, Any]]
    #: the ITF document of the failing conversation's trace (``None``: no spec exchange)
    trace: dict[str, Any] | None = None
    #: what ``tpx check-trace`` says of it (``REJECTED at step N (Property): ...``)
    verdict: str = ""
    #: the property check-trace named (``""``: accepted, or no trace)
    rejected_for: str = ""
    #: the spec property the trace is read for (the check's, or how this failure broke it)
    property: str = ""

    def size(self) -> tuple[int, int]:
        data = sum(len(str(e)) for e in self.exchanges) + sum(len(str(u)) for u in self.upstream)
        return len(self.steps), data

    def as_json(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.define
class Result:
    url: str
    mode: str  # "gateway" or "live"
    seconds: float = 0.0
    behaviours: int = 0
    requests: int = 0
    #: check name -> its minimal failure
    failures: dict[str, Failure] = attrs.field(factory=dict)
    #: check name -> how many times it failed
    counts: dict[str, int] = attrs.field(factory=dict)
    #: the checks that ran (the others are not applicable in this mode)
    ran: set[str] = attrs.field(factory=set)
    notes: list[str] = attrs.field(factory=list)

    def add(self, failure: Failure) -> None:
        self.counts[failure.check] = self.counts.get(failure.check, 0) + 1
        kept = self.failures.get(failure.check)
        if kept is None or failure.size() < kept.size():
            self.failures[failure.check] = failure

    def status(self, check: Check) -> str:
        if check.name in self.failures:
            return "fail"
        return "pass" if check.name in self.ran else "n/a"

    @property
    def ok(self) -> bool:
        return not self.failures

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Result:
        """A result again from its :meth:`as_json` (a JSON report)."""
        result = cls(doc["url"], doc["mode"], doc["seconds"], doc["behaviours"], doc["requests"])
        result.notes = list(doc.get("notes", ()))
        for check in doc["checks"]:
            if check["status"] != "n/a":
                result.ran.add(check["name"])
            if check["failures"]:
                result.counts[check["name"]] = check["failures"]
        for f in doc["failures"]:
            fields = {k: v for k, v in f.items() if k in attrs.fields_dict(Failure)}
            result.failures[f["check"]] = Failure(**fields)
        return result

    def as_json(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "mode": self.mode,
            "ok": self.ok,
            "seconds": round(self.seconds, 2),
            "behaviours": self.behaviours,
            "requests": self.requests,
            "checks": [
                {
                    "name": c.name,
                    "title": c.title,
                    "property": c.property,
                    "status": self.status(c),
                    "failures": self.counts.get(c.name, 0),
                }
                for c in CHECKS
            ],
            "failures": [
                self.failures[c.name].as_json() for c in CHECKS if c.name in self.failures
            ],
            "notes": self.notes,
        }
