"""Holding TensorFlow's RPC logging on in every task while steps are traced.

A traced step (``FULL_TRACE``) gets its transfers from the tasks' RPC logs, and the master turns
each task's logging on for the step with an asynchronous ``Logging`` request that races the step
itself (``MasterSession``'s ``SetRPCLogging``): a task that starts receiving before the request
arrives records none of those transfers. It happens: one CI run lost 33 of a Seq-32 step's
variable reads, all sent at the step's start; with both cores kept busy, 24 of 80 traced Seq-32
steps (1 PS, 2 workers) lost 535 and 689 transfers between them in two runs, and 6 and 4 of 80
on an idle machine (``benchmarks/trace_completeness.py``). Each task counts the requests that want logging
(``WorkerCacheLogger::SetLogging``), so one more request, sent and answered before the steps,
keeps logging on from their first byte to their last; the master's own requests change nothing
then: none of the 320 steps traced so in those runs lost any.

``WorkerService.Logging`` and its ``LoggingRequest`` are in TensorFlow's ``worker.proto``, which
the pip package does not ship as Python: the message is declared here with protobuf's descriptor
API, with ``worker.proto``'s field numbers.
"""

from __future__ import annotations

import functools
import os

from tfsched.errors import TfschedError

METHOD = "/tensorflow.WorkerService/Logging"
CALL_TIMEOUT_S = 30.0


@functools.cache
def logging_request_class():
    """``tensorflow.LoggingRequest`` (worker.proto), in a pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fd = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="tfsched/tensorflow_worker_logging.proto", package="tensorflow", syntax="proto3"
    )
    msg = proto.message_type.add(name="LoggingRequest")
    for name, number, label, kind in (
        ("enable_rpc_logging", 1, fd.LABEL_OPTIONAL, fd.TYPE_BOOL),
        ("clear", 2, fd.LABEL_OPTIONAL, fd.TYPE_BOOL),
        ("fetch_step_id", 3, fd.LABEL_REPEATED, fd.TYPE_INT64),
        ("disable_rpc_logging", 4, fd.LABEL_OPTIONAL, fd.TYPE_BOOL),
    ):
        msg.field.add(name=name, number=number, label=label, type=kind)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.LoggingRequest"))


def tf_config_tasks(environ=None) -> list[str]:
    """Every task's "host:port" of the cluster ``$TF_CONFIG`` describes (the usual way a PS job
    is told its cluster), [] without one; the evaluator, which is not in the training's cluster,
    left out. A ``$TF_CONFIG`` that is not such JSON is an error naming it.

    >>> tf_config_tasks({"TF_CONFIG": '{"cluster": {"ps": ["a:1"], "worker": ["b:2"]}}'})
    ['a:1', 'b:2']
    >>> tf_config_tasks({})
    []
    """
    import json

    raw = (os.environ if environ is None else environ).get("TF_CONFIG", "").strip()
    if not raw:
        return []
    try:
        cluster = json.loads(raw).get("cluster") or {}
        if not isinstance(cluster, dict):
            raise ValueError("its cluster is not a mapping of jobs")
        return task_addresses({job: tasks for job, tasks in cluster.items() if job != "evaluator"})
    except (ValueError, AttributeError, TypeError) as e:
        raise TfschedError(f"$TF_CONFIG: not a cluster description ({e})") from None


def task_addresses(tasks) -> list[str]:
    """Every task's "host:port" from a ``tf.train.ClusterSpec``, a cluster spec dict (job -> list
    of addresses, or index -> address) or addresses ("grpc://" allowed).

    >>> task_addresses({"ps": ["a:1"], "worker": {0: "b:2", 2: "c:3"}})
    ['a:1', 'b:2', 'c:3']
    >>> task_addresses(["grpc://a:1"])
    ['a:1']
    """
    if hasattr(tasks, "as_dict"):
        tasks = tasks.as_dict()
    if isinstance(tasks, dict):
        tasks = [a for job in tasks.values() for a in (job.values() if isinstance(job, dict) else job)]
    if isinstance(tasks, str):
        raise TfschedError(f"tasks: give a list of addresses or a cluster spec, not the string {tasks!r}")
    return [t.removeprefix("grpc://") for t in tasks]


class RpcLogging:
    """``with RpcLogging(cluster_spec):`` every task keeps RPC logging on inside (``tasks``: as
    ``task_addresses`` takes them).

    Entering waits until each task has answered (or fails with a line naming the task); leaving
    takes the request back, skipping a task that has gone away by then. Empty ``tasks``: nothing
    is sent. What the tasks logged meanwhile for steps nobody traced (other sessions' untraced
    steps) stays in their logs, which TensorFlow empties past 1,024 steps: clearing it here
    (``LoggingRequest.clear``) would also drop the logs of another session's traced step not yet
    fetched, as when every worker of a between-graph job traces the same step with its own hook.
    """

    def __init__(self, tasks, timeout_s: float = CALL_TIMEOUT_S) -> None:
        self.tasks = task_addresses(tasks)
        self.timeout_s = timeout_s
        self._on: list[str] = []

    def _call(self, task: str, request, *, wait: bool) -> None:
        import grpc

        with grpc.insecure_channel(task) as channel:
            call = channel.unary_unary(METHOD, request_serializer=lambda m: m.SerializeToString())
            call(request, timeout=self.timeout_s if wait else min(self.timeout_s, 5.0), wait_for_ready=wait)

    def __enter__(self) -> RpcLogging:
        import grpc

        request = logging_request_class()(enable_rpc_logging=True)
        for task in self.tasks:
            try:
                self._call(task, request, wait=True)
            except grpc.RpcError as e:
                self.__exit__()
                raise TfschedError(
                    f"could not turn RPC logging on in task {task}: {e.code().name} {e.details()}"
                ) from None
            self._on.append(task)
        return self

    def __exit__(self, *exc) -> None:
        import grpc

        request = logging_request_class()(disable_rpc_logging=True)
        for task in self._on:
            try:
                self._call(task, request, wait=False)
            except grpc.RpcError:
                pass  # the task has gone: nothing of it is left to turn off
        self._on = []
