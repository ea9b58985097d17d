"""The records of the communication graph: ops, transfers and the ``CommGraph`` itself.

Everything here is plain Python and networkx; ``tfsched.graph.load`` turns TensorFlow protos
into :class:`RawNode` records and ``tfsched.graph.build`` turns those into a :class:`CommGraph`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import networkx as nx

from tfsched.graph.devices import job_of, task_of

Shape = tuple[int, ...]  # -1 marks an unknown dimension
TransferKind = Literal["pull", "push", "control"]

# Bytes per element of TensorFlow's dtypes (names as in types.proto, without the DT_ prefix).
DTYPE_SIZES: dict[str, int] = {
    "FLOAT": 4,
    "DOUBLE": 8,
    "INT32": 4,
    "UINT8": 1,
    "INT16": 2,
    "INT8": 1,
    "COMPLEX64": 8,
    "INT64": 8,
    "BOOL": 1,
    "QINT8": 1,
    "QUINT8": 1,
    "QINT32": 4,
    "BFLOAT16": 2,
    "QINT16": 2,
    "QUINT16": 2,
    "UINT16": 2,
    "COMPLEX128": 16,
    "HALF": 2,
    "UINT32": 4,
    "UINT64": 8,
    "FLOAT8_E5M2": 1,
    "FLOAT8_E4M3FN": 1,
    "INT4": 1,
    "UINT4": 1,
}
# Dtypes that are valid but have no fixed element size (their transfers get bytes=None).
VARIABLE_SIZE_DTYPES = {"STRING", "RESOURCE", "VARIANT"}


@dataclass
class RawNode:
    """One NodeDef, stripped of protobuf: what building a ``CommGraph`` needs.

    ``inputs`` keeps TensorFlow's spelling (``op``, ``op:1``, ``^op`` for control inputs);
    ``output_dtypes`` are dtype names (``FLOAT``, ``RESOURCE``; a ``_REF`` suffix marks ref
    outputs) and ``output_shapes`` static shapes, each ``None`` where unknown.
    """

    name: str
    op: str
    device: str = ""
    inputs: list[str] = field(default_factory=list)
    colocate_with: list[str] = field(default_factory=list)  # from `_class: loc:@name`
    output_dtypes: list[str | None] | None = None
    output_shapes: list[Shape | None] | None = None
    attrs: dict = field(default_factory=dict)  # small scalar attrs (strides, padding, ...)


@dataclass
class Op:
    """An op of the graph with its device resolved to the full form."""

    name: str
    type: str
    device: str
    output_dtypes: list[str | None]
    output_shapes: list[Shape | None]
    attrs: dict = field(default_factory=dict)

    @property
    def task(self) -> str:
        return task_of(self.device)


@dataclass(frozen=True)
class Transfer:
    """One tensor (or control signal) that crosses from one task to another each step.

    There is one transfer per (source tensor, destination task), as TensorFlow's partitioner
    makes one ``_Send``/``_Recv`` pair per source tensor and receiving device.
    """

    tensor: str  # "op:index" for data, "^op" for a control edge
    src: str  # full device of the sender
    dst: str  # full device of the receiver
    kind: TransferKind
    bytes: int | None  # None when the static shape or the dtype size is unknown
    variable: str | None  # the variable a pull reads or a push updates
    consumers: tuple[str, ...] = ()  # ops on the receiving task that use it
    dtype: str | None = None
    shape: Shape | None = None
    # the variables a push updates when it updates several (``variable`` is None then): Grappler
    # merged their identical gradients into it (Par-32 training's 32 branches)
    updates: tuple[str, ...] = ()

    @property
    def src_task(self) -> str:
        return task_of(self.src)

    @property
    def dst_task(self) -> str:
        return task_of(self.dst)

    @property
    def channel(self) -> tuple[str, str]:
        """(sender task, receiver task): the unit a priority order is enforced on."""
        return (self.src_task, self.dst_task)

    @property
    def src_op(self) -> str:
        return self.tensor.lstrip("^").rsplit(":", 1)[0] if ":" in self.tensor else self.tensor.lstrip("^")

    @property
    def key(self) -> str:
        """What identifies this transfer across graph rewrites: the variable, else the tensor."""
        return f"{self.kind}:{self.variable}" if self.variable else f"{self.kind}:{self.tensor}"

    @property
    def keys(self) -> tuple[str, ...]:
        """The keys a schedule may name this transfer by: its own, then, for a push that updates
        several variables, theirs (it takes the most urgent of their priorities: the first of
        their updates needs it)."""
        return (self.key, *(f"push:{v}" for v in self.updates))

    def record(self, priority: int, gated: bool = True) -> dict:
        """The JSON record of the transfer with its priority (``analyze --json``, schedule files);
        ``gated``: False where the pass leaves it to TensorFlow (``CommGraph.ungated``)."""
        return {
            "tensor": self.tensor,
            "variable": self.variable,
            "kind": self.kind,
            "src": self.src,
            "dst": self.dst,
            "bytes": self.bytes,
            "priority": priority,
            "gated": gated,
        }


@dataclass
class WorkerView:
    """TicTac's worker partition (§2.4): the ops of one task, with incoming transfers as leaves.

    ``dep[op]`` is the op's communication dependency (§4.1) as a bitset over ``recvs``:
    bit ``i`` is set when the op transitively needs ``recvs[i]``.
    """

    task: str
    ops: list[str]  # ops on the task, in topological order
    recvs: list[Transfer]
    sends: list[Transfer]
    dep: dict[str, int]


@dataclass
class CommGraph:
    """Ops with resolved devices, their data and control edges, and the transfers between tasks.

    ``graph`` is a networkx DiGraph over op names; node attribute ``op`` holds the :class:`Op`,
    edge attribute ``tensors`` the set of ``"op:index"`` / ``"^op"`` strings the edge carries.
    Back edges of loops (from ``NextIteration``) are kept out of ``graph`` and listed in
    ``back_edges``, so that ``graph`` is a DAG.
    """

    graph: nx.DiGraph
    transfers: list[Transfer]
    fetches: list[str]
    ps_tasks: list[str]
    worker_tasks: list[str]
    back_edges: list[tuple[str, str]] = field(default_factory=list)
    source: str = ""
    # the transfers the enforcement pass leaves as TensorFlow makes them (``graph.gating``)
    ungated: frozenset[Transfer] = frozenset()

    def op(self, name: str) -> Op:
        return self.graph.nodes[name]["op"]

    @property
    def tasks(self) -> list[str]:
        return sorted({self.op(n).task for n in self.graph})

    def topological_order(self) -> list[str]:
        """Ops in a topological order that follows the file's order (computed once)."""
        return self._topo

    @cached_property
    def _topo(self) -> list[str]:
        return list(nx.topological_sort(self.graph))

    @cached_property
    def busiest_channel_params(self) -> int:
        """The most elements one channel (sender task, receiver task) carries in a step, as the
        pass counts them: over the transfers it gates whose size is known (``enforce.link_sizes``)."""
        per: dict[tuple[str, str], int] = {}
        for t in self.transfers:
            if t in self.ungated:
                continue
            size = DTYPE_SIZES.get((t.dtype or "").removesuffix("_REF"))
            if t.bytes and size:
                per[t.channel] = per.get(t.channel, 0) + t.bytes // size
        return max(per.values(), default=0)

    @cached_property
    def ps_load(self) -> dict[str, int]:
        """Bytes each PS task exchanges a step (its pulls and pushes, over the transfers whose
        size is known), in task order: how evenly the variables are spread, since the busiest
        PS's link bounds the step."""
        load = dict.fromkeys(self.ps_tasks, 0)
        for t in self.transfers:
            for task in {t.src_task, t.dst_task} & load.keys():
                load[task] += t.bytes or 0
        return load

    @cached_property
    def variable_load(self) -> dict[str, dict[str, float]]:
        """Bytes each variable's pulls and pushes move a step, per PS task (the PS side of its
        transfers), largest first; a push that updates several variables is shared among them,
        and a transfer that serves no variable is not counted.

        >>> from tfsched.graph import build_comm_graph, RawNode
        >>> g = build_comm_graph([
        ...     RawNode("w", "VarHandleOp", "/job:ps/task:0", attrs={"dtype": "FLOAT", "shape": (4, 4)}),
        ...     RawNode("r", "ReadVariableOp", "", ["w"], attrs={"dtype": "FLOAT"}),
        ...     RawNode("y", "MatMul", "/job:worker/task:0", ["r", "r"], attrs={"T": "FLOAT"}),
        ... ], fetches=["y"])
        >>> g.variable_load
        {'/job:ps/replica:0/task:0': {'w': 64.0}}
        """
        per: dict[str, dict[str, float]] = {task: {} for task in self.ps_tasks}
        for t in self.transfers:
            variables = [t.variable] if t.variable else list(t.updates)
            ps = t.src_task if t.src_task in per else t.dst_task
            for v in variables if ps in per else ():
                per[ps][v] = per[ps].get(v, 0) + (t.bytes or 0) / len(variables)
        return {task: dict(sorted(load.items(), key=lambda kv: -kv[1])) for task, load in per.items()}

    def transfers_to(self, task: str) -> list[Transfer]:
        return [t for t in self.transfers if t.dst_task == task]

    def transfers_from(self, task: str) -> list[Transfer]:
        return [t for t in self.transfers if t.src_task == task]

    def worker_view(self, task: str) -> WorkerView:
        """The partition of ``task`` with its incoming transfers as leaves (TicTac §2.4, §4.1)."""
        recvs = self.transfers_to(task)
        sends = self.transfers_from(task)
        bit: dict[tuple[str, str], int] = {}  # (source op, consumer) -> recv bits entering there
        for i, t in enumerate(recvs):
            for c in t.consumers:
                key = (t.src_op, c)
                bit[key] = bit.get(key, 0) | (1 << i)
        dep: dict[str, int] = {}
        ops = [n for n in self.topological_order() if self.op(n).task == task]
        g = self.graph
        for n in ops:
            d = 0
            for u in g.predecessors(n):
                if u in dep:
                    d |= dep[u]
                else:
                    d |= bit.get((u, n), 0)
            dep[n] = d
        return WorkerView(task=task, ops=ops, recvs=recvs, sends=sends, dep=dep)


def is_ps_job(device: str, ps_jobs: tuple[str, ...] = ("ps",)) -> bool:
    return job_of(device) in ps_jobs
