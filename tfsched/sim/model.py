"""The simulator's input: a step as a DAG of compute ops and messages, built from a CommGraph.

Compute ops run on their task's compute resource; a message is one transfer, or one slice of
a partitioned transfer, sent on its channel. Consumers of a transfer wait for all its slices
(and, given a copy's cost, for the op on the receiver that puts them back together).
Between-graph replication (one worker in the graph, ``workers=N``) is simulated by copying the
worker's graph, PS side included, once per worker: each worker's run executes its own reads
and updates on the shared PS tasks.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from tfsched.errors import TfschedError
from tfsched.graph.model import CommGraph, Transfer
from tfsched.oracle.oracle import TimeOracle
from tfsched.ordering.schedule import Schedule

# DELAY: time that passes without using any resource (a task's dispatch at the start of a step).
COMPUTE, MESSAGE, BARRIER, DELAY = 0, 1, 2, 3
# What names the op that puts a cut transfer back together on its receiver (the tensor's name follows)
REASSEMBLY = "reassembly of "


@dataclass
class SimGraph:
    """Flat arrays over nodes; a node is a compute op, a message or a step barrier."""

    kind: list[int] = field(default_factory=list)
    name: list[str] = field(default_factory=list)
    resource: list[str] = field(default_factory=list)  # compute: task; message: "src->dst"
    duration: list[float] = field(default_factory=list)  # compute seconds
    nbytes: list[int] = field(default_factory=list)  # message bytes
    overhead: list[float] = field(default_factory=list)  # message per-message seconds
    bandwidth: list[float] = field(default_factory=list)  # message link bytes per second
    key: list[tuple] = field(default_factory=list)  # message: (priority, slice) on its gate channel
    gate: list[tuple] = field(default_factory=list)  # message: (src task, dst task, worker, step)
    worker: list[str] = field(default_factory=list)  # the worker run a node belongs to
    step: list[int] = field(default_factory=list)
    transfer: list[Transfer | None] = field(default_factory=list)
    succ: list[list[int]] = field(default_factory=list)
    npred: list[int] = field(default_factory=list)
    # compute resource -> its capacity (default 1): up to ceil(c) ops at once, sharing c
    capacity: dict[str, float] = field(default_factory=dict)
    # host link ("up:<task>" or "down:<task>") -> bytes per second it carries, where measured
    # (TimeOracle.host_bps); others carry the largest rate of their channels
    link_capacity: dict[str, float] = field(default_factory=dict)
    # ops' worth of work at once of the one machine every task runs on (an emulated cluster),
    # shared by all compute resources; None: each task has its own (TimeOracle.machine_slots)
    machine_slots: float | None = None
    # with machine_slots: slot-seconds of that machine a byte on the wire costs (both ends)
    comm_slot_s_per_byte: float = 0.0
    # with machine_slots: the most of that machine one task's ops take at once (its own cores,
    # bench.hostcpu); None: whatever the other tasks leave
    host_slots: float | None = None
    # with host_slots: each end's share of a byte's CPU comes out of its own task's (engine)
    host_bytes: bool = True
    # with host_bytes: the sender's and the receiver's shares of a byte's CPU (the rest, the
    # kernel's, is the machine's alone; TimeOracle.host_byte_shares)
    host_byte_shares: tuple[float, float] = (0.5, 0.5)
    # the transfers the pass leaves ungated (CommGraph.ungated): released when ready, whole, in
    # any policy (sim.engine.release_policies)
    ungated: frozenset[Transfer] = frozenset()

    def add(
        self,
        kind,
        name,
        resource,
        worker,
        step,
        *,
        duration=0.0,
        nbytes=0,
        overhead=0.0,
        bandwidth=math.inf,
        key=(),
        gate=(),
        transfer=None,
    ) -> int:
        self.kind.append(kind)
        self.name.append(name)
        self.resource.append(resource)
        self.duration.append(duration)
        self.nbytes.append(nbytes)
        self.overhead.append(overhead)
        self.bandwidth.append(bandwidth)
        self.key.append(key)
        self.gate.append(gate)
        self.worker.append(worker)
        self.step.append(step)
        self.transfer.append(transfer)
        self.succ.append([])
        self.npred.append(0)
        return len(self.kind) - 1

    def edge(self, a: int, b: int) -> None:
        self.succ[a].append(b)
        self.npred[b] += 1

    def __len__(self) -> int:
        return len(self.kind)


def _rename(device_or_task: str, old: str, new: str) -> str:
    return new + device_or_task[len(old) :] if device_or_task.startswith(old) else device_or_task


def slice_sizes(nbytes: int, partition_bytes: int | None) -> list[int]:
    """The slices the enforcement pass cuts a transfer into (cc/scheduler.cc ``Slicing``).

    As many slices as partitions are needed, of equal size rounded up to 64 bytes (so every slice
    of the sender's buffer stays aligned and needs no copy), the last one shorter.
    """
    if not partition_bytes or nbytes <= partition_bytes:
        return [nbytes]
    want = math.ceil(nbytes / partition_bytes)
    size = math.ceil(math.ceil(nbytes / want) / 64) * 64
    count = math.ceil(nbytes / size)
    return [min(size, nbytes - k * size) for k in range(count)]


def build_sim_graph(
    graph: CommGraph,
    oracle: TimeOracle,
    schedule: Schedule | None = None,
    *,
    workers: int | None = None,
    steps: int = 1,
    partition_bytes: int | None = None,
    cross_barrier: bool = False,
    synchronized: bool = False,
    copy_s_per_byte: float | None = None,
) -> SimGraph:
    """Lay out ``steps`` consecutive runs of every worker as one SimGraph.

    ``workers`` > the number of worker tasks in the graph replicates its single worker
    (between-graph replication). ``partition_bytes`` splits larger transfers into slices.

    Each run's next step waits for all of its last one: TensorFlow's global barrier, which a
    ``Session.run`` is; ``synchronized``, for all of every run's last one, as the bench starts
    its workers' steps together. ``cross_barrier`` lays the steps out as ByteScheduler's
    crossing of it (``../shared/papers/bytescheduler-sosp19.txt`` §3.4) would run them: a run's
    next step starts on its workers once their ops of the last have run (``synchronized``: once
    every run's workers' ops have), its messages and the PS's updates still under way; a
    variable's read on a PS waits for every run's update of it in the last step (synchronous
    training's only dependency between steps, ``variable_accesses``), and an update for every
    run's read of it in the same step, so that each read sees what it sees behind the barrier.
    With ``oracle.gate_op_s`` those waits are gates that cost their PS what tfsched's crossing
    runs there (``gated_variables``, ``GATE_OPS``): an improvement on laying the crossing out on
    the graph behind the barrier alone, which left the PS's share of the CPU uncharged.
    A what-if (``benchmarks/cross_barrier.py``): tfsched's enforcement keeps the barrier, as its
    pass cannot move a ``Session.run``'s end.

    ``copy_s_per_byte`` (default ``oracle.copy_s_per_byte``): a transfer cut into slices is put
    back together on its receiver (the pass's ``TfschedConcat``, cc/gate_ops.cc) by an op of that
    task lasting this long a byte, which its consumers wait for (``REASSEMBLY`` and the tensor's
    name; none at 0). Until the
    ninety-first session the consumers took the slices as they came: the copy was counted only
    in the bench's CPU floor, not in the step's path (VGG16's fc6, 411 MB, is about 40 ms a
    pull at 1e-10 s a byte).
    """
    wtasks = list(graph.worker_tasks)
    if workers is not None and workers != len(wtasks):
        if len(wtasks) != 1:
            raise TfschedError(
                f"--workers {workers} needs a one-worker graph to replicate; this graph has {len(wtasks)} workers"
            )
        base = wtasks[0]
        job = base.split("/")[1]
        clones = [(base, f"/{job}/replica:0/task:{k}") if k else (base, base) for k in range(workers)]
    else:
        clones = [(w, w) for w in wtasks] if len(wtasks) == 1 else [(None, None)]
    if partition_bytes is not None and partition_bytes <= 0:
        raise TfschedError(f"partition size must be positive, got {partition_bytes}")
    if copy_s_per_byte is None:
        copy_s_per_byte = oracle.copy_s_per_byte
    if not (math.isfinite(copy_s_per_byte) and copy_s_per_byte >= 0):
        raise TfschedError(
            f"a copy's seconds per byte must be a non-negative number, got {copy_s_per_byte!r}"
        )

    prio = schedule.priorities if schedule is not None else {}
    # Transfers that share their priority on their channel: their slices all take it (the pass's
    # ``tied``, cc/scheduler.cc); a transfer ranked alone has its slices one after the other.
    at_rank: dict[tuple, int] = defaultdict(int)
    for t, p in prio.items():
        at_rank[(t.src_task, t.dst_task, p)] += 1
    topo = graph.topological_order()
    g = graph.graph
    sg = SimGraph(
        machine_slots=oracle.machine_slots,
        comm_slot_s_per_byte=oracle.comm_slot_s_per_byte if oracle.machine_slots else 0.0,
        host_slots=oracle.host_slots if oracle.machine_slots else None,
        host_bytes=oracle.host_bytes,
        host_byte_shares=oracle.host_byte_shares,
        ungated=graph.ungated,
    )
    barriers: dict[tuple[str, int], int] = {}  # (worker run, step) -> its end-of-step node
    laid: dict[tuple[str, int], dict[str, int]] = {}  # (worker run, step) -> op name -> node
    on_ps = {n for n in topo if graph.op(n).task in graph.ps_tasks}
    accesses = variable_accesses(graph) if cross_barrier else {}
    if cross_barrier and steps > 1 and not accesses:
        # nothing would order one step's reads after the last one's updates
        raise TfschedError("crossing the barrier needs the graph's variables on its PS tasks; it has none")
    # the crossing's gates, each costing its PS ops (GATE_OPS): variable -> (its PS, read gate's
    # seconds or 0 where nothing reads it, update gate's seconds)
    gate_s: dict[str, tuple[str, float, float]] = {}
    if cross_barrier and oracle.gate_op_s > 0:
        read_ops, update_ops = GATE_OPS
        for v, (reads, _) in gated_variables(graph, accesses).items():
            gate_s[v] = (
                graph.op(v).task,
                read_ops * oracle.gate_op_s if reads else 0.0,
                update_ops * oracle.gate_op_s,
            )
    gates: dict[tuple[str, int], dict[str, tuple[int | None, int]]] = {}  # (run, step) -> v -> nodes
    delayed: dict[str, list[str]] = {}  # task with a dispatch delay -> its ops
    for n in topo:
        t0 = graph.op(n).task
        if oracle.start(t0) > 0:
            delayed.setdefault(t0, []).append(n)
    # In-graph replication: one run covers all workers, its steps are the graph's.
    for step in range(steps):
        for old, new in clones:
            run = new or "all"

            def task(x: str, old=old, new=new) -> str:
                return _rename(x, old, new) if old else x

            ids: dict[str, int] = {}
            for n in topo:
                op = graph.op(n)
                ids[n] = sg.add(COMPUTE, n, task(op.task), run, step, duration=oracle.compute(n))
                if oracle.slots(op.task) != 1:
                    sg.capacity[task(op.task)] = oracle.slots(op.task)
            for t0 in graph.tasks:
                for direction in ("up", "down"):
                    bps = oracle.host_link(t0, direction)
                    if bps:
                        sg.link_capacity[f"{direction}:{task(t0)}"] = bps / 8.0
            crossing: dict[tuple[str, str], list[int]] = {}  # (src op, consumer) -> message ids
            for t in graph.transfers:
                src, dst = task(t.src_task), task(t.dst_task)
                link = oracle.link_for(t.src_task, t.dst_task)
                nbytes = t.bytes or 0
                msgs = []
                p = prio.get(t, 0)
                tied = at_rank[(t.src_task, t.dst_task, p)] > 1
                cut = None if t in graph.ungated else partition_bytes  # the pass cuts what it gates
                for s, size in enumerate(slice_sizes(nbytes, cut)):
                    m = sg.add(
                        MESSAGE,
                        t.tensor,
                        f"{src}->{dst}",
                        run,
                        step,
                        nbytes=size,
                        overhead=link.overhead_s,
                        bandwidth=link.bandwidth_bps / 8.0,
                        key=(p, 0 if tied else s),
                        gate=(src, dst, run, step),
                        transfer=t,
                    )
                    sg.edge(ids[t.src_op], m)
                    msgs.append(m)
                if len(msgs) > 1 and copy_s_per_byte:
                    copy = sg.add(
                        COMPUTE, f"{REASSEMBLY}{t.tensor}", dst, run, step, duration=nbytes * copy_s_per_byte
                    )
                    for m in msgs:
                        sg.edge(m, copy)
                    msgs = [copy]
                for c in t.consumers:
                    crossing.setdefault((t.src_op, c), []).extend(msgs)
            for u, v in g.edges():
                if (u, v) in crossing:
                    for m in crossing[(u, v)]:
                        sg.edge(m, ids[v])
                elif graph.op(u).task == graph.op(v).task:
                    sg.edge(ids[u], ids[v])
            # A task runs nothing before its partition has started (oracle.task_start_s).
            firsts = []
            for t0, names in delayed.items():
                d = sg.add(DELAY, f"start of {task(t0)}", task(t0), run, step, duration=oracle.start(t0))
                for n in names:
                    sg.edge(d, ids[n])
                firsts.append(d)
            laid[(run, step)] = ids
            if gate_s:
                # a run's read of a gated variable waits in its gate, and so does its update
                gates[(run, step)] = at = {}
                for v, (ps, read_s, update_s) in gate_s.items():
                    reads, updates = accesses[v]
                    r = None
                    if read_s:
                        r = sg.add(COMPUTE, f"read gate of {v}", ps, run, step, duration=read_s)
                        for n in reads:
                            sg.edge(r, ids[n])
                    u = sg.add(COMPUTE, f"update gate of {v}", ps, run, step, duration=update_s)
                    for n in updates:
                        sg.edge(u, ids[n])
                    at[v] = (r, u)
            if step + 1 < steps:
                barrier = sg.add(BARRIER, f"end of step {step}", "", run, step)
                for n, i in ids.items():
                    if not (cross_barrier and n in on_ps):
                        sg.edge(i, barrier)
                barriers[(run, step)] = barrier
            prev = barriers.get((run, step - 1))
            if prev is None:
                continue
            if not cross_barrier:
                for i in [*ids.values(), *firsts]:
                    sg.edge(prev, i)
                continue
            # crossing the barrier: the workers' ops after the run's last step's on the workers, a
            # PS's after their own last (the variables' dependencies are added once all runs are laid)
            before = laid[(run, step - 1)]
            for n, i in ids.items():
                sg.edge(before[n] if n in on_ps else prev, i)
            for d, t0 in zip(firsts, delayed, strict=True):
                if t0 not in graph.ps_tasks:
                    sg.edge(prev, d)
        if synchronized and step + 1 < steps:
            # every run's next step after every run's step: one barrier, the bench's
            together = sg.add(BARRIER, f"end of step {step}, every run", "", "", step)
            for _, new in clones:
                sg.edge(barriers[(new or "all", step)], together)
                barriers[(new or "all", step)] = together
        if cross_barrier and (step or gate_s):
            runs = [new or "all" for _, new in clones]

            def every_run(names: list[str], k: int, runs=runs) -> list[int]:
                return [laid[(r, k)][n] for r in runs for n in names]

            for v, (reads, updates) in accesses.items():
                now_reads = every_run(reads, step)
                if v in gate_s:
                    # through the gates: a run's read gate opens on every run's last update, its
                    # update gate on every run's read of this step (the first step's too: the
                    # prime gives the read gates one step's tokens, the update gates none)
                    for r in runs:
                        read_gate, update_gate = gates[(r, step)][v]
                        if step and read_gate is not None:
                            for u in every_run(updates, step - 1):
                                sg.edge(u, read_gate)
                        for read in now_reads:
                            sg.edge(read, update_gate)
                    continue
                if not step:
                    continue
                last, now = every_run(updates, step - 1), every_run(updates, step)
                for read in now_reads:
                    for u in last:
                        sg.edge(u, read)
                    for u in now:
                        sg.edge(read, u)
    return sg


# The ops a worker's step runs on a variable's PS in tfsched's crossing
# (``enforce.crossing.cross_barrier_step``, cc/crossing.cc), at its read gate and at its update
# gate, whatever the workers: the compute run's wait on the variable's count of updates and its
# arrival at the count of reads; the apply run's wait on the count of reads (which passes the
# gradient through) and its arrival at the count of updates. Until the eighty-fourth session the
# gates were token queues, 2W+2 and 2W+3 ops (a token put in every worker's queue).
GATE_OPS = (2, 2)


def gated_variables(graph: CommGraph, accesses: dict | None = None) -> dict[str, tuple[list[str], list[str]]]:
    """The variables tfsched's crossing gates (``variable_accesses``' with an optimizer's
    update: a moving mean's assignment or a step counter's is not gated)."""
    accesses = variable_accesses(graph) if accesses is None else accesses
    return {
        v: (reads, updates)
        for v, (reads, updates) in accesses.items()
        if any(graph.op(u).type.startswith(OPTIMIZER_PREFIXES) for u in updates)
    }


# Ops that change a variable in place (a resource's or a ref's first input); any other op that
# takes the variable reads it.
UPDATE_PREFIXES = (
    "ResourceApply",
    "ResourceSparseApply",
    "Apply",
    "SparseApply",
    "Assign",
    "ResourceScatter",
    "Scatter",
)
VARIABLE_OPS = {"VarHandleOp", "VariableV2", "Variable"}
# an optimizer's update of a variable (what its gradient is applied by)
OPTIMIZER_PREFIXES = ("ResourceApply", "ResourceSparseApply", "Apply", "SparseApply")


def variable_accesses(graph: CommGraph) -> dict[str, tuple[list[str], list[str]]]:
    """Each variable on a PS task: the ops that read it and the ops that update it.

    >>> from tfsched.graph.model import CommGraph, Op
    >>> import networkx as nx
    >>> ps = "/job:ps/replica:0/task:0/device:CPU:0"
    >>> g = nx.DiGraph()
    >>> for name, kind in [("v", "VarHandleOp"), ("read", "ReadVariableOp"), ("sgd", "ResourceApplyGradientDescent")]:
    ...     g.add_node(name, op=Op(name, kind, ps, [], []))
    >>> g.add_edge("v", "read"); g.add_edge("v", "sgd")
    >>> variable_accesses(CommGraph(g, [], ["sgd"], ["/job:ps/replica:0/task:0"], []))
    {'v': (['read'], ['sgd'])}
    """
    g = graph.graph
    out = {}
    for n in graph.topological_order():
        op = graph.op(n)
        if op.type in VARIABLE_OPS and op.task in graph.ps_tasks:
            after = sorted(g.successors(n))
            updates = [m for m in after if graph.op(m).type.startswith(UPDATE_PREFIXES)]
            out[n] = ([m for m in after if m not in updates], updates)
    return out
