"""tfsched: communication scheduling for parameter-server TensorFlow training.

The core (``tfsched.graph``, ``tfsched.oracle``, ``tfsched.ordering``, ``tfsched.sim``) works on
plain Python and networkx objects; TensorFlow is imported only at the edges.
"""

from tfsched.errors import TfschedError

__version__ = "0.1.0"


def enable(config=None, **kwargs):
    """Turn the scheduling pass on in a session config (see :func:`tfsched.enforce.api.enable`)."""
    from tfsched.enforce.api import enable as _enable

    return _enable(config, **kwargs)


def enable_functions(**kwargs):
    """Turn the pass on for this process's tf.functions, TensorFlow 2's ParameterServerStrategy
    (see :func:`tfsched.enforce.api.enable_functions`)."""
    from tfsched.enforce.api import enable_functions as _enable_functions

    return _enable_functions(**kwargs)


def start_server(cluster, job_name, task_index, **kwargs):
    """A tf.distribute.Server with tfsched loaded (see :func:`tfsched.enforce.api.start_server`)."""
    from tfsched.enforce.api import start_server as _start_server

    return _start_server(cluster, job_name, task_index, **kwargs)


def check_cluster(cluster, **kwargs):
    """Task -> build of tfsched's library, once every task of the cluster has it loaded, the
    same build as this process (``wait_s``: waiting that long for tasks that are starting);
    else one TfschedError line naming each task that has not (see
    :func:`tfsched.enforce.check.check_cluster`)."""
    from tfsched.enforce.check import check_cluster as _check_cluster

    return _check_cluster(cluster, **kwargs)


def trace_functions(cluster, path=None, *, seconds, functions=(), **kwargs):
    """Profile a TensorFlow 2 cluster while a ``with`` block's steps run; per-op times and every
    transfer of the calls, as ``tfsched trace`` records a session's steps (see
    :class:`tfsched.tracing.functions.FunctionTracer`)."""
    from tfsched.tracing.functions import FunctionTracer

    return FunctionTracer(cluster, path, seconds=seconds, functions=functions, **kwargs)


def ps_strategy(path: str, ps_tasks: int):
    """``replica_device_setter``'s ``ps_strategy`` from a placement file (``tfsched analyze
    GRAPH --placement FILE``): each variable to the PS the plan gives it, so that the PS exchange
    about the same bytes a step (see :mod:`tfsched.placement`). ``ps_tasks`` is the setter's;
    a plan made for another number is one TfschedError line."""
    from tfsched.placement import load_placement

    return load_placement(path, ps_tasks)


__all__ = [
    "TfschedError",
    "__version__",
    "check_cluster",
    "enable",
    "enable_functions",
    "ps_strategy",
    "start_server",
    "trace_functions",
]
