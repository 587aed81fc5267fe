"""The TLC runner: run TLC 2.15 on the spec, read its verdicts, values, graphs and traces."""

from tpx.oracle.tlc.cfg import ModelConfig, load_cfg, parse_cfg, render_cfg, with_constants
from tpx.oracle.tlc.graph import StateGraph, dump_graph, parse_dot
from tpx.oracle.tlc.runner import (
    CheckResult,
    Progress,
    TLCCancelledError,
    ToolMessage,
    ToolOutputParser,
    TraceStep,
    Verdict,
    find_jar,
    find_java,
    interpret_output,
    parse_progress,
    parse_tool_output,
    run_model,
    run_tlc,
)
from tpx.oracle.tlc.simulation import simulate
from tpx.oracle.tlc.traces import TraceVerdict, check_traces
from tpx.oracle.tlc.values import TLAValueSyntaxError, format_value, parse_state, parse_value

__all__ = [
    "CheckResult",
    "ModelConfig",
    "Progress",
    "StateGraph",
    "TLAValueSyntaxError",
    "TLCCancelledError",
    "ToolMessage",
    "ToolOutputParser",
    "TraceStep",
    "TraceVerdict",
    "Verdict",
    "check_traces",
    "dump_graph",
    "find_jar",
    "find_java",
    "format_value",
    "interpret_output",
    "load_cfg",
    "parse_cfg",
    "parse_dot",
    "parse_progress",
    "parse_state",
    "parse_tool_output",
    "parse_value",
    "render_cfg",
    "run_model",
    "run_tlc",
    "simulate",
    "with_constants",
]
