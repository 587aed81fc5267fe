"""``tpx audit`` (any Messages endpoint against the spec and the Messages API's rules), and
the conformance of ``tpx serve`` over HTTP to spec/TpxGateway.tla that it is built on.

Every behaviour of a small cfg and a minimum edge cover of the shipped one, replayed
through real ``tpx serve`` processes on loopback with one real HTTP client per
conversation and scripted fake upstreams, the spec's 13 variables checked after every
step from the clients and the bytes on both wires:

* :mod:`~tpx.audit.behaviours` -- the mirror's graph, cfgs, behaviours;
* :mod:`~tpx.audit.upstream`   -- the fake upstreams (both protocols);
* :mod:`~tpx.audit.harness`    -- the event loop, the ``tpx serve`` processes;
* :mod:`~tpx.audit.serve`      -- ``tpx serve`` counting its tail cache's hits;
* :mod:`~tpx.audit.claude_code` -- the recorded Claude Code turn (package data);
* :mod:`~tpx.audit.client`     -- one conversation's HTTP client;
* :mod:`~tpx.audit.sse`        -- event streams as a client reads them;
* :mod:`~tpx.audit.abstraction` -- the abstraction function;
* :mod:`~tpx.audit.replay`     -- the step driver and the judge;
* :mod:`~tpx.audit.checks`     -- the Messages API's rules on the bytes a client receives;
* :mod:`~tpx.audit.run`        -- ``tpx audit``: the replay aimed at a URL (gateway and
  pass-through modes);
* :mod:`~tpx.audit.scenarios`  -- the scenarios beyond the spec's behaviours;
* :mod:`~tpx.audit.lanes`      -- behaviours in flight together, outcomes in order;
* :mod:`~tpx.audit.traces`, :mod:`~tpx.audit.report`, :mod:`~tpx.audit.cli` -- the
  counterexamples' traces, the report, the command line.
"""
