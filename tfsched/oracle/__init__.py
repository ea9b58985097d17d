"""Time estimates: per-op compute time and per-link transfer time (TicTac §3, §5)."""

from tfsched.oracle.compute import estimate_op_time
from tfsched.oracle.oracle import LinkModel, TimeOracle

__all__ = ["LinkModel", "TimeOracle", "estimate_op_time"]
