"""``count_tokens`` answered by the upstream's tokenizer endpoint (:mod:`.tokenizer`): a
:class:`~tpx.gateway.turn.Forward` whose reply becomes ``{"input_tokens": N}``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import orjson

from tpx.errors import ModelError
from tpx.gateway.context.tokenizer import TokenizerEndpoint
from tpx.gateway.turn import Forward, Host
from tpx.gateway.wire import Response, json_response

__all__ = ["Tokenized"]


class Tokenized(Forward):
    """``count_tokens`` answered by the upstream's tokenizer (the estimate when it fails: worked
    out only then, so a request the endpoint counts is counted once)."""

    def __init__(
        self,
        gateway: Host,
        request_id: str,
        endpoint: TokenizerEndpoint,
        body: Mapping[str, Any],
        model: str | None,
        estimate: Callable[[], int],
    ) -> None:
        super().__init__(gateway, request_id, endpoint.call(body, model))
        self.endpoint = endpoint
        self.body = body
        self.estimate = estimate

    def respond(self, status: int, headers: Mapping[str, str], body: bytes) -> Response:
        count = self.endpoint.read(status, body, self.body)
        return self._answer(self.estimate() if count is None else count)

    def failed(self, error: ModelError) -> Response:
        return self._answer(self.estimate())

    def _answer(self, count: int) -> Response:
        response = json_response(200, orjson.dumps({"input_tokens": count}), self.request_id)
        self.gateway.count("count_tokens", response.status)
        return response
