"""What redaction costs per MB of text, and what the gateway's log line costs for a huge field.

Run: ``python -m benchmarks.redaction_cost [--mb 1]`` (prints one line per text kind: the
CPU time :func:`tpx.errors.redact` takes per MB with the gateway's usual secrets, then the
CPU time of one ``Gateway.log`` call whose ``model`` field is 30 MB).

The texts are the worst cases for a redactor that searches every position: plain letters
(every 8-character window is looked up), ``...`` everywhere (every cut marker is checked),
5 characters of the gateway key over and over (the prefilter hits at every position; then
each followed by ``...``: every marker ends a secret's start), and 8-character runs of the
upstream token (every window is a hit and is replaced).
"""

from __future__ import annotations

import argparse
import functools
import logging
import time
from collections.abc import Callable

from tpx.errors import redact, secret_forms

TOKEN = "sk-proj-" + "Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7jKl0nOp3rSt6vWx9z"
GATEWAY_KEY = "gw-key-0123456789abcdef"
THINKING = "0123456789abcdef" * 4
FORMS = secret_forms((GATEWAY_KEY, TOKEN, THINKING))


def texts(size: int) -> dict[str, str]:
    def fill(unit: str) -> str:
        return (unit * (size // len(unit) + 1))[:size]

    return {
        "letters": fill("abcdefghijklmnopqrstuvwxyz"),
        "cut markers": fill("ab..."),
        "5 chars of the key": fill(GATEWAY_KEY[:5] + " "),
        "5 chars of the key, cut": fill(GATEWAY_KEY[:5] + "..."),
        "8-char runs of the token": fill(TOKEN[8:16] + " "),
    }


def cpu(call: Callable[[], object]) -> float:
    began = time.thread_time()
    call()
    return time.thread_time() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=1.0, help="size of each text in MB")
    parser.add_argument("--log-mb", type=float, default=30.0, help="size of the logged field")
    args = parser.parse_args()
    size = int(args.mb * 1_000_000)
    redact("warm up", FORMS)
    for name, text in texts(size).items():
        seconds = cpu(functools.partial(redact, text, FORMS))
        print(f"redact, {name:26s} {seconds / args.mb * 1000:10.1f} ms CPU per MB")
    try:
        from tests.gateway.conftest import make_settings
        from tpx.gateway.core import Gateway
        from tpx.gateway.settings import Credential
    except ImportError:  # run from the repository's root
        return
    settings = make_settings("TPX", credential=Credential(TOKEN), gateway_key=GATEWAY_KEY)
    gateway = Gateway(settings)
    logging.getLogger("tpx.gateway").addHandler(logging.NullHandler())
    logging.getLogger("tpx.gateway").setLevel(logging.INFO)
    logging.getLogger("tpx.gateway").propagate = False
    model = texts(int(args.log_mb * 1_000_000))["5 chars of the key, cut"]
    record = {"request_id": "req_1", "endpoint": "messages", "model": model}
    seconds = cpu(lambda: gateway.log(dict(record), failed=True))
    print(f"Gateway.log, a {args.log_mb:g} MB model field {seconds * 1000:10.1f} ms CPU")


if __name__ == "__main__":
    main()
