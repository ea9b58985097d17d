"""Tracing real steps: FULL_TRACE step stats parsed into a :class:`Trace`.

TensorFlow's own timeline drops the edge name and byte count of RecvTensor events (TF-NOTES);
here they are read from the step stats directly: each receiving device gets entries with
``node_name == "RecvTensor"`` and a label ``[<size>] [<rate>] edge_<n>_<src node> from <src
device> to <dst device>``. Exact bytes come from the session graph's static shapes (the label
rounds large sizes, e.g. ``[0.2MB]``), the source tensor from the partition graphs' ``_Send``.
TensorFlow turns that RPC logging on in the other tasks with an asynchronous Logging request, so
a transfer at the very start of a step can end before it arrives and have no record: given the
tasks' addresses, ``collect`` holds logging on across its steps (``rpclog``). Without them a
step can come out short: each step is checked against its own partition graphs
(``missing_transfers``), and the oracle fits the complete ones (``Trace.complete_steps``).
"""

from __future__ import annotations

import base64
import logging
import re
import time

from tfsched.deadlines import deadline_ms, step_deadline_s
from tfsched.errors import TfschedError
from tfsched.graph.devices import task_of
from tfsched.graph.model import DTYPE_SIZES
from tfsched.tracing.trace import MISSING, OpRecord, Trace, TransferRecord
from tfsched.units import check_seconds, is_steps

_RECV = re.compile(
    r"^\[(?P<size>[0-9.]+)(?P<unit>B|KB|MB|GB)\] \[[^\]]*\] (?P<edge>\S+) from (?P<src>\S+) to (?P<dst>\S+)$"
)
_UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}
_OP = re.compile(r"^\S+ = (?P<op>[A-Za-z0-9_]+)\(")
log = logging.getLogger("tfsched.trace")


def _sends(partition_graphs) -> dict[str, str]:
    """Rendezvous edge name -> source tensor ("op:index"), from the partitions' _Send nodes."""
    out = {}
    for g in partition_graphs:
        for n in g.node:
            if n.op in ("_Send", "_HostSend") and n.input:
                name = n.attr["tensor_name"].s.decode()
                src = n.input[0]
                out[name] = src if ":" in src else f"{src}:0"
    return out


def crossing_edges(partition_graphs) -> set[str]:
    """The rendezvous edges a step sends between tasks (each a transfer a complete trace of the
    step records), without the dummies that carry control edges, the fetches the client takes
    and the sends between devices of one task (a GPU's, say), which no RPC carries."""
    out = set()
    for g in partition_graphs:
        by = {n.name: n for n in g.node}
        for n in g.node:
            if n.op not in ("_Send", "_HostSend") or not n.input or n.attr["client_terminated"].b:
                continue
            if task_of(n.attr["send_device"].s.decode()) == task_of(n.attr["recv_device"].s.decode()):
                continue
            src = by.get(n.input[0].split(":")[0])
            if (
                src is not None
                and src.op == "Const"
                and src.input
                and all(i.startswith("^") for i in src.input)
            ):
                continue
            out.add(n.attr["tensor_name"].s.decode())
    return out


def missing_in(run_metadata, transfers) -> list[str]:
    """The transfers one traced step's partition graphs send (``crossing_edges``) that its
    records (``transfers``, of that step) do not have."""
    return sorted(crossing_edges(run_metadata.partition_graphs) - {t.edge for t in transfers})


def missing_transfers(trace: Trace) -> dict[int, list[str]]:
    """Per traced step that lacks some: the transfers its partition graphs send that the trace
    did not record. A trace written since the twenty-eighth session keeps them (``meta``, each
    step checked against its own partition graphs: ``Trace.missing``); an older one is checked
    against the partition graphs it keeps, and a ``TraceHook`` file from before then, which
    keeps none, cannot tell (empty)."""
    if MISSING in trace.meta or not trace.partition_graphs:
        return trace.missing()
    from tfsched.tracing.replay import partition_graph_defs

    sent = crossing_edges(partition_graph_defs(trace))
    recorded: dict[int, set[str]] = {k: set() for k in range(trace.steps)}
    for t in trace.transfers:
        recorded.setdefault(t.step, set()).add(t.edge)
    return {k: sorted(sent - edges) for k, edges in recorded.items() if sent - edges}


def complete_steps(trace: Trace) -> Trace:
    """``Trace.complete_steps`` with ``missing_transfers``: an older trace is checked too."""
    return trace.complete_steps(missing_transfers(trace))


def warn_incomplete(trace: Trace, source: str, *, held: bool = False) -> None:
    """Log one warning if traced steps miss transfers (``missing_transfers``); ``held``: RPC
    logging was held on in every task (``rpclog``), so the usual cause is ruled out."""
    missing = missing_transfers(trace)
    if missing:
        log.warning(
            "%s: %d of %d traced steps did not record %d transfers their partition graphs send%s; "
            "the oracle fits the complete steps.%s",
            source,
            len(missing),
            trace.steps,
            sum(map(len, missing.values())),
            "" if held else " (TensorFlow turned RPC logging on after they had started)",
            ""
            if held
            else " Give the tracer the cluster (tasks=, or $TF_CONFIG) to hold logging on in every task.",
        )


def _recv_consumers(partition_graphs) -> dict[str, tuple[str, ...]]:
    """Rendezvous edge name -> ops that consume the matching _Recv."""
    out: dict[str, tuple[str, ...]] = {}
    for g in partition_graphs:
        recvs = {n.name: n.attr["tensor_name"].s.decode() for n in g.node if n.op in ("_Recv", "_HostRecv")}
        users: dict[str, list[str]] = {}
        for n in g.node:
            for i in n.input:
                src = i.lstrip("^").split(":")[0]
                if src in recvs:
                    users.setdefault(recvs[src], []).append(n.name)
        out.update({edge: tuple(sorted(set(u))) for edge, u in users.items()})
    return out


def _tensor_bytes(graph, tensor: str) -> int | None:
    try:
        t = graph.get_tensor_by_name(tensor)
    except (KeyError, ValueError):
        return None
    if not t.shape.is_fully_defined():
        return None
    size = DTYPE_SIZES.get(
        t.dtype.base_dtype.name.upper().replace("FLOAT32", "FLOAT").replace("FLOAT64", "DOUBLE")
    )
    return size * t.shape.num_elements() if size else None


def _gate_bytes(partition_graphs, graph) -> dict[str, int]:
    """Bytes of what tfsched's gates send ("gate:0"), which the session graph does not have: a
    slice's from its TfschedSplit's attributes (``slice_elements`` each, the last one shorter),
    a whole tensor's gate the bytes of the tensor it forwards (``graph``'s static shape).

    The step stats' label rounds them (``[0.2MB]`` for a 256 KB tensor): a trace of scheduled
    steps read 209,715 bytes where the gate forwarded 262,144, and its transfers matched no
    tensor of the graph (``tracing.match``)."""
    from tensorflow.core.framework import types_pb2

    out: dict[str, int] = {}
    for g in partition_graphs:
        splits = {n.name: n for n in g.node if n.op == "TfschedSplit"}
        for n in g.node:
            if n.op != "TfschedGate" or not n.input:
                continue
            src, _, port = n.input[0].partition(":")
            split = splits.get(src)
            if split is None:
                nbytes = _tensor_bytes(graph, f"{src}:{port or 0}") if graph is not None else None
            else:
                a = split.attr
                each, i = a["slice_elements"].i, int(port or 0)
                size = DTYPE_SIZES.get(types_pb2.DataType.Name(a["T"].type).removeprefix("DT_"))
                nbytes = size * min(each, a["elements"].i - i * each) if size else None
            if nbytes:
                out[f"{n.name}:0"] = nbytes
    return out


def step_start_micros(run_metadata) -> int:
    """When a traced step began (its earliest op on any device; the machine's wall clock, us):
    what the times of ``parse_run_metadata``'s records are relative to."""
    stats = run_metadata.step_stats.dev_stats
    starts = [ns.all_start_micros for d in stats for ns in d.node_stats if ns.all_start_micros > 0]
    if not starts:
        raise TfschedError("the run metadata has no step stats: was the step run with FULL_TRACE?")
    return min(starts)


def parse_run_metadata(
    run_metadata, step: int, graph=None
) -> tuple[list[OpRecord], list[TransferRecord], float]:
    """Op and transfer records of one traced step, and the step's wall time (us)."""
    stats = run_metadata.step_stats.dev_stats
    t0 = step_start_micros(run_metadata)
    t1 = max(ns.all_start_micros + ns.all_end_rel_micros for d in stats for ns in d.node_stats)
    sends = _sends(run_metadata.partition_graphs)
    users = _recv_consumers(run_metadata.partition_graphs)
    gated = _gate_bytes(run_metadata.partition_graphs, graph)
    ops, transfers = [], []
    for d in stats:
        for ns in d.node_stats:
            if ns.node_name == "RecvTensor":
                m = _RECV.match(ns.timeline_label)
                if not m:
                    continue
                edge = m.group("edge")
                tensor = sends.get(edge) or f"{re.sub(r'^edge_[0-9]+_', '', edge)}:0"
                nbytes = _tensor_bytes(graph, tensor) if graph is not None else None
                nbytes = gated.get(tensor) if nbytes is None else nbytes
                if nbytes is None:
                    nbytes = int(float(m.group("size")) * _UNITS[m.group("unit")])
                transfers.append(
                    TransferRecord(
                        step=step,
                        edge=edge,
                        tensor=tensor,
                        bytes=nbytes,
                        src=m.group("src"),
                        dst=m.group("dst"),
                        start_us=float(ns.all_start_micros - t0),
                        duration_us=float(ns.all_end_rel_micros),
                        consumers=users.get(edge, ()),
                    )
                )
            elif ns.node_name not in ("_SOURCE", "_SINK"):
                m = _OP.match(ns.timeline_label)
                ops.append(
                    OpRecord(
                        step=step,
                        device=d.device,
                        node=ns.node_name,
                        op=m.group("op") if m else "",
                        start_us=float(ns.all_start_micros - t0),
                        duration_us=float(max(ns.op_end_rel_micros - ns.op_start_rel_micros, 0)),
                    )
                )
    return ops, transfers, float(t1 - t0)


def collect(
    sess,
    fetches,
    *,
    steps: int,
    warmup: int = 1,
    feed_dict=None,
    meta: dict | None = None,
    tasks=None,
    timeout_s: float | None = None,
) -> Trace:
    """Run ``warmup`` untraced and ``steps`` traced steps of ``fetches``; returns the Trace.

    ``tasks``: the cluster (a ``tf.train.ClusterSpec``, its dict, or every task's "host:port"),
    whose RPC logging is held on across the traced steps so that every transfer is recorded
    (``rpclog``); by default the cluster of ``$TF_CONFIG`` if it is set, ``()`` for none.

    ``timeout_s``: each step's deadline (``RunOptions.timeout_in_ms``; none by default, as the
    session's own runs); a traced step's is shorter once the warm-up steps have shown what a
    step takes (``step_deadline_s``), so that a dead task ends the trace soon.

    A fetch (a tensor, op or variable, anywhere in ``fetches``) of a graph other than the
    session's is a TfschedError that names it, before any step runs.
    """
    import tensorflow as tf

    from tfsched.tracing.rpclog import RpcLogging, tf_config_tasks

    if not is_steps(steps):
        raise TfschedError(f"steps must be a positive whole number, got {steps!r}")
    if not is_steps(warmup, least=0):
        raise TfschedError(f"warmup must be a whole number, not negative, got {warmup!r}")
    if timeout_s is not None:
        check_seconds(timeout_s, "timeout_s")
    tasks = tf_config_tasks() if tasks is None else tasks
    for fetch in tf.nest.flatten(fetches):
        if getattr(fetch, "graph", sess.graph) is not sess.graph:
            raise TfschedError(f"fetch {getattr(fetch, 'name', fetch)!r} is not in the session's graph")
    warm = tf.compat.v1.RunOptions(timeout_in_ms=deadline_ms(timeout_s))
    slowest = 0.0
    for _ in range(warmup):
        started = time.perf_counter()
        sess.run(fetches, feed_dict=feed_dict, options=warm)
        slowest = max(slowest, time.perf_counter() - started)
    options = tf.compat.v1.RunOptions(
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
        output_partition_graphs=True,
        timeout_in_ms=deadline_ms(step_deadline_s(timeout_s, slowest if warmup else None)),
    )
    mds = []
    with RpcLogging(tasks) as logging_held:
        for _ in range(steps):
            mds.append(tf.compat.v1.RunMetadata())
            sess.run(fetches, feed_dict=feed_dict, options=options, run_metadata=mds[-1])
    trace = trace_of(mds, sess.graph, dict(meta or {}))
    warn_incomplete(trace, "collect", held=bool(logging_held.tasks))
    return trace


def trace_of(metadata: list, graph, meta: dict) -> Trace:
    """A self-contained Trace of traced steps of one session (their ``RunMetadata``, in order),
    with the first step's partition graphs, which ``tfsched viz`` and ``analyze --trace`` read,
    and each step's unrecorded transfers (``missing_transfers``)."""
    trace = Trace(steps=0, meta=dict(meta))
    for md in metadata:
        add_step(trace, md, graph)
    return trace


def add_step(trace: Trace, run_metadata, graph) -> None:
    """Append one traced step (its ``RunMetadata``) to ``trace``: its records, its wall time
    and when it began, what it did not record (against its own partition graphs), and the
    partition graphs if the trace has none yet."""
    step = trace.steps
    ops, transfers, wall_us = parse_run_metadata(run_metadata, step, graph)
    trace.ops.extend(ops)
    trace.transfers.extend(transfers)
    trace.step_times_us.append(wall_us)
    trace.step_starts_us.append(float(step_start_micros(run_metadata)))
    trace.steps += 1
    if not trace.partition_graphs:
        trace.partition_graphs = [
            base64.b64encode(g.SerializeToString()).decode() for g in run_metadata.partition_graphs
        ]
    noted = trace.meta.setdefault(MISSING, {})  # present, even empty: the steps were checked
    missing = missing_in(run_metadata, transfers)
    if missing:
        noted[str(step)] = missing
