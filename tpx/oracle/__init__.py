"""The oracle: the specs, their Python mirrors, the TLC runner and the trace checkers.

* :mod:`tpx.oracle.model`      -- the Python mirrors of spec/TpxTransport.tla and
  spec/TpxGateway.tla
* :mod:`tpx.oracle.tlc`        -- the TLC runner (tla2tools.jar in a subprocess)
* :mod:`tpx.oracle.tracecheck` -- is a recorded trace a behaviour of the spec? (plus
  :mod:`tpx.oracle.tracecheck_gateway` for the gateway's traces)
* :mod:`tpx.oracle.itf`, :mod:`tpx.oracle.graphviz`, :mod:`tpx.oracle.values` -- traces in ITF,
  coverage pictures, TLA+ values in Python
* ``tpx/oracle/specs/`` -- the packaged copy of ``spec/``
"""
