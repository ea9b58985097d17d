"""Timing-Aware Ordering (TicTac §4.2, Algorithm 2)."""

from __future__ import annotations

from tfsched.graph.model import CommGraph, Transfer, WorkerView
from tfsched.oracle.oracle import TimeOracle
from tfsched.ordering.properties import Properties
from tfsched.ordering.tio import assembly_ops


def tao_order(view: WorkerView, oracle: TimeOracle, assembly: frozenset[str] = frozenset()) -> list[int]:
    """Indices into ``view.recvs`` in TAO order (first = highest priority).

    Each round updates the properties (Algorithm 1) and takes the minimum recv under the
    comparator. The comparator follows the paper's derivation (eq. 5):
    ``A < B  iff  min(P_B, M_A) < min(P_A, M_B)``, ties broken by the smaller ``M+``; the
    listing of Algorithm 2 swaps the two sides of that test, which contradicts eq. 5 and
    its makespan argument (with ``M_A + max(P_A, M_B) + P_B`` for A first), so eq. 5 is used.
    Remaining ties keep graph order.

    Speed (a tfsched improvement over the paper's straightforward version): ops with the same
    communication dependency are one row, properties are numpy reductions over
    (groups x outstanding recvs), and rows and columns leave the arrays as they stop mattering.
    An Inception-v3 worker (about 11,000 ops, 470 recvs) orders in well under a second.

    ``assembly`` (``tio.assembly_ops``) give ``P`` but take no ``M+``, as in TIO (our extension):
    where a variable is split over PS tasks, the ``ConcatV2`` that puts its shards together needs
    just them, so the paper's ``M+`` of a shard is the shard's own time, and with every ``P`` 0
    (each layer needs a weight and a bias) the comparator falls to ``M+``: a late layer's small
    shards went before an earlier layer's large ones. On the TensorFlow 2 bench's VGG16
    inference on two PS (sixty-eighth session, ``benchmarks/results/tf2-vgg16-inference-2ps.md``)
    fc1's shards went before block4_conv2's and block5_conv2's before block4_conv2's: 1.017x of
    vanilla's throughput; in layer order 1.130x (``...-2ps-s68-tao.md``).
    """
    props = Properties.of(view, oracle, assembly)
    order: list[int] = []
    while props.ids.size and not props.dead.all():
        p, m_plus = props.update()
        pl, ml, mpl = p.tolist(), props.recv_time.tolist(), m_plus.tolist()
        cols = props.outstanding
        best = cols[0]
        for a in cols[1:]:
            # Does a precede the best so far? (eq. 5, then M+)
            lhs, rhs = min(pl[best], ml[a]), min(pl[a], ml[best])
            if lhs < rhs or (lhs == rhs and mpl[a] < mpl[best]):
                best = a
        order.append(int(props.ids[best]))
        props.remove(best)
    return order


def tao_values(graph: CommGraph, oracle: TimeOracle) -> dict[Transfer, float]:
    """TAO position of every pull (per worker), and of every push by its expected ready time.

    Pushes (gradients to the PS) leave a worker as backward produces them; under per-step
    counters (TicTac §5.1) a push ordered before a gradient computed later would wait for it,
    so pushes are ordered by their expected ready time: an ASAP schedule of the worker's ops
    with pulls arriving one after another in TAO order on each channel.
    """
    values: dict[Transfer, float] = {}
    for task in graph.worker_tasks:
        view = graph.worker_view(task)
        order = tao_order(view, oracle, assembly_ops(graph, view))
        for pos, i in enumerate(order):
            values[view.recvs[i]] = float(pos)
        arrival: dict[Transfer, float] = {}
        clock: dict[str, float] = {}
        for i in order:
            t = view.recvs[i]
            clock[t.src_task] = clock.get(t.src_task, 0.0) + oracle.transfer(t)
            arrival[t] = clock[t.src_task]
        ready = expected_finish_times(graph, view, oracle, arrival)
        for t in view.sends:
            values[t] = ready.get(t.src_op, 0.0)
    return values


def expected_finish_times(
    graph: CommGraph, view: WorkerView, oracle: TimeOracle, arrival: dict[Transfer, float]
) -> dict[str, float]:
    """ASAP finish time of every op of the worker, given when each recv arrives."""
    at: dict[tuple[str, str], float] = {}
    for t, when in arrival.items():
        for c in t.consumers:
            at[(t.src_op, c)] = max(at.get((t.src_op, c), 0.0), when)
    finish: dict[str, float] = {}
    g = graph.graph
    for n in view.ops:
        start = 0.0
        for u in g.predecessors(n):
            start = max(start, finish[u] if u in finish else at.get((u, n), 0.0))
        finish[n] = start + oracle.compute(n)
    return finish


def tao_order_reference(
    view: WorkerView, oracle: TimeOracle, assembly: frozenset[str] = frozenset()
) -> list[int]:
    """The straightforward TAO: Algorithm 1 recomputed over every op for every pick.

    Kept as the reference the vectorized :func:`tao_order` is tested and benchmarked against;
    same comparator, same tie-breaking, same integer-nanosecond arithmetic.
    """
    n = len(view.recvs)
    ns = [round(oracle.transfer(t) * 1e9) for t in view.recvs]
    senders = sorted({t.src_task for t in view.recvs})
    chan = [senders.index(t.src_task) for t in view.recvs]
    ops = [(view.dep[op], round(oracle.compute(op) * 1e9), op in assembly) for op in view.ops if view.dep[op]]
    outstanding = list(range(n))
    order: list[int] = []
    while outstanding:
        mask = sum(1 << r for r in outstanding)
        p = dict.fromkeys(outstanding, 0)
        m_plus = dict.fromkeys(outstanding, float("inf"))
        for dep, t, assembles in ops:
            d = [r for r in outstanding if dep & mask & (1 << r)]
            if len(d) == 1:
                p[d[0]] += t
            elif len(d) > 1 and not assembles:
                per = [0] * len(senders)
                for r in d:
                    per[chan[r]] += ns[r]
                m = max(per)
                for r in d:
                    m_plus[r] = min(m_plus[r], m)
        best = outstanding[0]
        for a in outstanding[1:]:
            lhs, rhs = min(p[best], ns[a]), min(p[a], ns[best])
            if lhs < rhs or (lhs == rhs and m_plus[a] < m_plus[best]):
                best = a
        order.append(best)
        outstanding.remove(best)
    return order
