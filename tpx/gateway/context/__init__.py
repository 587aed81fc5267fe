"""The context-window contract of the gateway (TPX provider).

* :mod:`.window`: each upstream model's window (config, discovered, default);
* :mod:`.discover`: asking the upstream for its windows, per profile (I/O, in the shell);
* :mod:`.counting`: the token count ``count_tokens``, the preflight and the log agree on;
* :mod:`.placement`: with ``[[upstreams]]``, the upstream of its route a request fits;
* :mod:`.preflight`: the pure decision: send, clamp ``max_tokens``, or refuse
  ``prompt is too long: N tokens > M maximum`` before the wire;
* :mod:`.config`: the ``[context]`` table;
* :mod:`.aliases`: the ``claude-...`` names ``GET /v1/models`` lists for Claude Code's picker.

Rewriting an upstream's own context error into the Messages wording is
:mod:`tpx.transport.translate.overflow` (its forms are profile data).
"""
