"""Timing-Independent Ordering (TicTac §4.3, Algorithm 3)."""

from __future__ import annotations

from tfsched.graph.model import CommGraph, Transfer, WorkerView
from tfsched.oracle.oracle import TimeOracle
from tfsched.ordering.properties import Properties

# Op types that put received tensors together or re-view them without computing on them: a
# partitioned variable's shards concatenated back into the whole, a read, a cast, a reshape.
ASSEMBLY_TYPES = frozenset(
    {"ConcatV2", "Concat", "Pack", "Identity", "IdentityN", "Snapshot", "ReadVariableOp", "Cast", "Reshape"}
)


def assembly_ops(graph: CommGraph, view: WorkerView) -> frozenset[str]:
    """The ops of ``view``'s task that only assemble what it receives: of an ``ASSEMBLY_TYPES``
    type, every input from another task, a ``Const`` or another such op. Among them the
    ``ConcatV2`` that puts a variable split over PS tasks back together (a ``ShardedVariable``
    of TensorFlow 2's ParameterServerStrategy, a partitioned variable of TensorFlow 1).

    >>> from tfsched.graph import RawNode, build_comm_graph
    >>> ps, w = "/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0"
    >>> g = build_comm_graph([RawNode("a", "VarHandleOp", ps, attrs={"dtype": "FLOAT", "shape": (4,)}),
    ...     RawNode("a/read", "ReadVariableOp", "", ["a"]), RawNode("axis", "Const", w),
    ...     RawNode("whole", "ConcatV2", w, ["a/read", "a/read", "axis"]),
    ...     RawNode("x", "Const", w), RawNode("y", "MatMul", w, ["x", "whole"])], fetches=["y"])
    >>> sorted(assembly_ops(g, g.worker_view(g.worker_tasks[0])))
    ['whole']
    """
    out: set[str] = set()
    for n in view.ops:
        if graph.op(n).type not in ASSEMBLY_TYPES:
            continue
        preds = [graph.op(u) for u in graph.graph.predecessors(n)]
        if preds and all(u.task != view.task or u.type == "Const" or u.name in out for u in preds):
            out.add(n)
    return frozenset(out)


def tio_order_values(view: WorkerView, assembly: frozenset[str] = frozenset()) -> list[float]:
    """``M+`` of every recv of ``view`` under the general time oracle (eq. 6).

    Algorithm 3: with every transfer costing 1 and compute 0, the comparator reduces to ``M+``,
    computed once with all recvs outstanding; recvs with equal ``M+`` share a priority (the
    partial order). A recv that no multi-recv op needs has ``M+ = inf`` and goes last, as in
    the paper.

    ``assembly`` (``assembly_ops``) take no part in ``M+``: where a variable is split over PS
    tasks, the ``ConcatV2`` that puts its shards together needs two recvs and nothing else, so
    in the paper's algorithm every split variable's ``M+`` is 2 (with a PS a shard, 1), as
    small as the first layer's, and TIO tied them all. What the shards are needed for is the op
    that computes with the whole; that is where their ``M+`` is now taken. Our extension: on
    the TensorFlow 2 bench's VGG16 inference on two PS with the variables split (sixty-seventh
    session, ``benchmarks/results/tf2-vgg16-inference-2ps-s67.md``), TIO gave 28 of its 45 pulls
    the first priority and made 0.991x; with this, 1.060x in the row's next run (``...-2ps.md``).
    """
    props = Properties.of(view, TimeOracle.general(), assembly)
    if not props.ids.size:
        return []
    _, m_plus = props.update()
    return (m_plus / 1e9).tolist()  # the general oracle's units: number of transfers


def tio_values(graph: CommGraph) -> dict[Transfer, float]:
    """TIO order value of every transfer of every worker.

    Pushes: with compute costing nothing every gradient is ready at once, so TIO cannot tell
    them apart; they all tie (priority 0), which leaves them in the order backward produces them.
    """
    values: dict[Transfer, float] = {}
    for task in graph.worker_tasks:
        view = graph.worker_view(task)
        for t, v in zip(view.recvs, tio_order_values(view, assembly_ops(graph, view)), strict=True):
            values[t] = v
        for t in view.sends:
            values[t] = 0.0
    return values
