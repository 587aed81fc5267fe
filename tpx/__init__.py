"""tpx: a Messages <-> Chat Completions transport mechanically tied to its TLA+ spec."""

__version__ = "0.1.0"
