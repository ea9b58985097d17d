"""Tracing real steps: per-op compute times and every cross-task transfer."""

from tfsched.tracing.trace import OpRecord, Trace, TransferRecord

__all__ = ["OpRecord", "Trace", "TraceHook", "TransferRecord", "collect"]


def __getattr__(name):
    if name == "TraceHook":  # imports TensorFlow: only when asked for
        from tfsched.tracing.hook import TraceHook

        return TraceHook
    raise AttributeError(name)


def collect(sess, fetches, **kwargs):
    """See :func:`tfsched.tracing.collector.collect`.

    The module is ``collector``, not ``collect``: importing a submodule sets the package's
    attribute of that name, and a submodule ``collect`` replaced this function with itself in
    every process that had imported it (the bench does, to parse its traces).
    """
    from tfsched.tracing.collector import collect as _collect

    return _collect(sess, fetches, **kwargs)
