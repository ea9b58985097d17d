"""Trace visualization: Chrome trace event JSON (Perfetto, chrome://tracing)."""

from tfsched.viz.chrome import chrome_trace

__all__ = ["chrome_trace"]
