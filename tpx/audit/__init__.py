"""Conformance of ``tpx serve`` over HTTP to spec/TpxGateway.tla.

Every behaviour of a small cfg and a minimum edge cover of the shipped one, replayed
through real ``tpx serve`` processes on loopback with one real HTTP client per
conversation and scripted fake upstreams, the spec's 13 variables checked after every
step from the clients and the bytes on both wires:

* :mod:`~conformance.gateway_http.behaviours` -- the mirror's graph, cfgs, behaviours;
* :mod:`~conformance.gateway_http.upstream`   -- the fake upstreams (both protocols);
* :mod:`~conformance.gateway_http.harness`    -- the event loop, the ``tpx serve`` processes;
* :mod:`~conformance.gateway_http.serve`      -- ``tpx serve`` with a seeded bug patched in;
* :mod:`~conformance.gateway_http.client`     -- one conversation's HTTP client;
* :mod:`~conformance.gateway_http.abstraction` -- the abstraction function;
* :mod:`~conformance.gateway_http.replay`     -- the step driver and the judge.
"""
