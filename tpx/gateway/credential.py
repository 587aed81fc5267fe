"""The upstream credential: static, or made by a command (re-run before expiry and after a
401, single-flight and backed off). Never rendered."""

from __future__ import annotations

import threading
import time
from typing import Any

from tpx.errors import UnauthorizedError
from tpx.gateway.token_command import TIMEOUT, run_token_command
from tpx.transport._config import _check_credential

__all__ = ["BACKOFF_FIRST", "BACKOFF_MAX", "Credential"]


#: Seconds between two runs of a token command after 401s: the first delay, the longest.
BACKOFF_FIRST = 1.0
BACKOFF_MAX = 60.0


class Credential:
    """The upstream credential: static, or made by a command (re-run before expiry).

    After an upstream 401, :meth:`refresh_after` runs the command once for every request
    the same token failed (single flight: the requests waiting meanwhile take the token
    that run made), and not again before a delay that doubles with each such run, from
    :data:`BACKOFF_FIRST` to :data:`BACKOFF_MAX` seconds (back to the first once a reply
    is not a 401: :meth:`worked`). A failed run waits the same delay before the next.

    Never rendered: ``repr`` shows only its kind.
    """

    __slots__ = (
        "_command",
        "_delay",
        "_expires",
        "_lock",
        "_next_run",
        "_timeout",
        "_ttl",
        "_value",
    )

    def __init__(
        self,
        value: str | None,
        *,
        command: str | None = None,
        ttl: float = 300.0,
        timeout: float = TIMEOUT,
    ) -> None:
        self._value = value
        self._command = command
        self._ttl = ttl
        self._timeout = timeout
        self._expires = time.monotonic() + ttl if command is not None else float("inf")
        self._lock = threading.Lock()
        self._delay = BACKOFF_FIRST
        self._next_run = 0.0  # monotonic: no 401-driven run before this

    @classmethod
    def from_command(cls, command: str, ttl: float, timeout: float = TIMEOUT) -> Credential:
        credential = cls(None, command=command, ttl=ttl, timeout=timeout)
        credential.refresh()
        return credential

    @property
    def refreshable(self) -> bool:
        return self._command is not None

    def __repr__(self) -> str:
        return f"<credential {'command' if self._command else 'static'}, redacted>"

    __str__ = __repr__

    def __reduce_ex__(self, protocol: Any) -> Any:
        raise TypeError("a credential cannot be pickled or copied")

    def value(self) -> str:
        """The current credential, re-running the command when it has expired (once for all
        the callers meeting the expiry together)."""
        if self._command is not None and time.monotonic() >= self._expires:
            with self._lock:
                now = time.monotonic()
                if now >= self._expires:  # nobody refreshed it meanwhile
                    if now < self._next_run:
                        raise UnauthorizedError(
                            "TPX_OAUTH_TOKEN_COMMAND failed a moment ago (not run again yet)"
                        )
                    try:
                        self._run()
                    except UnauthorizedError:
                        self._next_run = now + self._delay
                        self._delay = min(self._delay * 2, BACKOFF_MAX)
                        raise
        assert self._value is not None
        return self._value

    def stale(self) -> bool:
        return self._command is not None and time.monotonic() >= self._expires

    def refresh(self) -> str:
        """Run the token command again (no-op for a static credential)."""
        if self._command is None:
            assert self._value is not None
            return self._value
        with self._lock:
            return self._run()

    def refresh_after(self, refused: str) -> str | None:
        """A fresh token after the upstream refused *refused* (a 401): the token a run made
        since *refused* was sent (single flight), else a new run's; ``None`` while the
        backoff holds the next run off (the 401 stands). Raises UnauthorizedError when the
        run fails."""
        if self._command is None:
            return None
        with self._lock:
            if self._value != refused:  # another request's run replaced it meanwhile
                return self._value
            now = time.monotonic()
            if now < self._next_run:
                return None
            self._next_run = now + self._delay
            self._delay = min(self._delay * 2, BACKOFF_MAX)
            return self._run()

    def worked(self) -> None:
        """A reply that was not a 401: the backoff starts over."""
        if self._delay != BACKOFF_FIRST:
            self._delay = BACKOFF_FIRST

    def _run(self) -> str:
        """Run the command (the lock held): the new token."""
        assert self._command is not None
        token = run_token_command(self._command, timeout=self._timeout)
        _check_credential(token, None, "TPX_OAUTH_TOKEN_COMMAND", "token_command")
        self._value = token
        self._expires = time.monotonic() + self._ttl
        return token
