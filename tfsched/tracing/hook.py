"""``TraceHook``: trace chosen steps of a user's ``MonitoredTrainingSession`` loop."""

from __future__ import annotations

import tensorflow as tf

from tfsched.errors import TfschedError
from tfsched.io import check_writable
from tfsched.tracing.collector import add_step, warn_incomplete
from tfsched.tracing.rpclog import RpcLogging, task_addresses, tf_config_tasks
from tfsched.tracing.trace import Trace
from tfsched.units import is_steps


class TraceHook(tf.compat.v1.train.SessionRunHook):
    """Traces every ``every_n_steps``-th run, or the runs ``first <= i < last``, and writes the trace.

    Runs are counted from 0 as the hook sees them. Untraced runs get no options at all, so they
    run exactly as without the hook. The file is written when the session ends. ``tasks``: the
    cluster (a ``tf.train.ClusterSpec``, its dict, or every task's "host:port"), whose RPC
    logging is held on across each traced run so that every transfer is recorded (``rpclog``);
    by default the cluster of ``$TF_CONFIG`` if it is set (``rpclog.tf_config_tasks``), ``()``
    for none. Without it, transfers at the start of a run can go unrecorded: each run notes
    those it lacks (``collector.missing_transfers``), the oracle fits the complete runs, and the
    hook logs a warning when it writes the file.

    >>> hook = TraceHook("trace.json", every_n_steps=100, tasks=cluster_spec)  # doctest: +SKIP
    >>> with tf.compat.v1.train.MonitoredTrainingSession(master, hooks=[hook]) as sess: ...  # doctest: +SKIP
    """

    def __init__(
        self,
        output: str,
        *,
        every_n_steps: int | None = None,
        steps: tuple[int, int] | None = None,
        meta: dict | None = None,
        tasks=None,
    ) -> None:
        if (every_n_steps is None) == (steps is None):
            raise TfschedError("TraceHook: give either every_n_steps or steps=(first, last)")
        if every_n_steps is not None and not is_steps(every_n_steps):
            raise TfschedError(
                f"TraceHook: every_n_steps must be a positive whole number, got {every_n_steps!r}"
            )
        if steps is not None and not (
            isinstance(steps, (tuple, list))
            and len(steps) == 2
            and is_steps(steps[0], least=0)
            and is_steps(steps[1], least=0)
            and steps[0] < steps[1]
        ):
            raise TfschedError(
                f"TraceHook: steps must be (first, last), whole numbers with 0 <= first < last, got {steps!r}"
            )
        check_writable(output)  # now, not after the steps it traces
        self.output = output
        self._every = every_n_steps
        self._range = steps
        self._meta = dict(meta or {})
        self._tasks = tf_config_tasks() if tasks is None else task_addresses(tasks)
        self._logging: RpcLogging | None = None
        self._run = 0
        self._trace = Trace(steps=0, meta=self._meta)
        self.traced_runs: list[int] = []

    def _wanted(self, i: int) -> bool:
        if self._every is not None:
            return i % self._every == 0
        return self._range[0] <= i < self._range[1]

    def before_run(self, run_context):
        if not self._wanted(self._run):
            return None
        options = tf.compat.v1.RunOptions(
            trace_level=tf.compat.v1.RunOptions.FULL_TRACE, output_partition_graphs=True
        )
        self._logging_off()  # a traced run that raised never reached after_run
        self._logging = RpcLogging(self._tasks).__enter__()
        return tf.compat.v1.train.SessionRunArgs(fetches=None, options=options)

    def _logging_off(self) -> None:
        if self._logging is not None:
            self._logging.__exit__()
            self._logging = None

    def after_run(self, run_context, run_values):
        self._logging_off()
        if self._wanted(self._run) and run_values.run_metadata is not None:
            add_step(self._trace, run_values.run_metadata, run_context.session.graph)
            self.traced_runs.append(self._run)
        self._run += 1

    def end(self, session):
        self._logging_off()
        if self._trace.steps:
            self._trace.meta["traced_runs"] = self.traced_runs
            self._trace.save(self.output)
            warn_incomplete(self._trace, self.output, held=bool(self._tasks))
