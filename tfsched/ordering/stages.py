"""Orders that per-step counters can enforce without deadlock.

Under TicTac's counters (§5.1) a transfer waits until every transfer ranked before it on its
channel was released. If one ranked before it can only become ready after it arrives
(a pull the worker needs, ranked behind a control edge from the PS's apply ops that waits for
the worker's pushes), the step deadlocks. The paper's PS model has every pull ready at the start
(§2.4), so it never meets this; real graphs do (``tf.group`` of the apply ops, BN statistics,
an embedding looked up on the PS with the worker's token ids).

The stage of a transfer is the largest number of transfers on any path into its source op.
Ordering each channel by (stage, algorithm's value) is deadlock-free, and tfsched did so until
the eighteenth session. It is also stricter than it needs to be: a transfer of a later stage
goes behind every transfer of the earlier stages on its channel, even those that do not lead
to it. The Transformer's embedding lookup runs on the PS on the token ids the worker pushes
(stage 1), so it was the last pull of its channel, behind every layer's weights, though the
forward pass needs it first.

``counter_safe`` keeps the algorithm's order wherever it can: each channel is taken in the
algorithm's order (stage breaks ties), and a transfer moves ahead of its place only when a
transfer ranked before it on some channel cannot be released without it. Every channel's order
is then the restriction of one order of all transfers in which each transfer comes after every
transfer it depends on, so no gate can wait, through the counters and the graph, for itself
(the stage order is one such order; that is why it was safe too). Where the algorithm's order
is already safe, as on every built-in model but the Transformer, nothing moves.
"""

from __future__ import annotations

from collections import defaultdict

from tfsched.graph.model import CommGraph, Transfer


def transfer_stages(graph: CommGraph) -> dict[Transfer, int]:
    """Stage of every transfer of ``graph`` (0: its source needs no transfer of this step)."""
    into: dict[tuple[str, str], list[Transfer]] = {}
    for t in graph.transfers:
        for c in t.consumers:
            into.setdefault((t.src_op, c), []).append(t)
    level: dict[str, int] = {}
    g = graph.graph
    for n in graph.topological_order():
        lv = 0
        for u in g.predecessors(n):
            crossing = into.get((u, n))
            lv = max(lv, level[u] + 1 if crossing else level[u])
        level[n] = lv
    return {t: level[t.src_op] for t in graph.transfers}


def transfer_ancestors(graph: CommGraph) -> dict[Transfer, int]:
    """Every transfer's ancestors: bit ``i`` set when its source op needs ``graph.transfers[i]``
    to have arrived (through any path, control edges included)."""
    into: dict[tuple[str, str], int] = defaultdict(int)
    for i, t in enumerate(graph.transfers):
        for c in t.consumers:
            into[(t.src_op, c)] |= 1 << i
    dep: dict[str, int] = {}
    g = graph.graph
    for n in graph.topological_order():
        d = 0
        for u in g.predecessors(n):
            d |= dep[u] | into.get((u, n), 0)
        dep[n] = d
    return {t: dep[t.src_op] for t in graph.transfers}


def counter_safe(graph: CommGraph, values: dict[Transfer, object]) -> dict[Transfer, int]:
    """Values whose per-channel order (``schedule.normalize``) counters enforce without deadlock,
    as close to ``values``' as that allows (see the module's docstring).

    Each channel's transfers are taken in order of (value, stage); a channel's next transfer is
    placed once everything it depends on is placed. When no channel's next transfer can be, the
    one that needs the fewest unplaced transfers is unblocked: of those it needs, one whose own
    needs are placed (one always is) is placed first, the earliest in its channel. Transfers
    ``values`` ties stay tied where they stay next to each other.
    """
    stage = transfer_stages(graph)
    ancestors = transfer_ancestors(graph)
    index = {t: i for i, t in enumerate(graph.transfers)}
    key = {t: (values[t], stage[t], index[t]) for t in values}
    queues: dict[tuple[str, str], list[Transfer]] = defaultdict(list)
    for t in sorted(values, key=key.__getitem__):
        queues[t.channel].append(t)
    position = {t: i for ts in queues.values() for i, t in enumerate(ts)}
    # Transfers outside ``values`` (none from ``order``) are taken as placed.
    placed = sum(1 << index[t] for t in graph.transfers if t not in values)
    out: dict[tuple[str, str], list[Transfer]] = defaultdict(list)
    head = dict.fromkeys(queues, 0)

    def place(t: Transfer) -> None:
        nonlocal placed
        placed |= 1 << index[t]
        out[t.channel].append(t)

    def missing(t: Transfer) -> int:
        return ancestors[t] & ~placed

    while True:
        moved = True
        while moved:
            moved = False
            for c, ts in queues.items():
                while head[c] < len(ts):
                    t = ts[head[c]]
                    if not placed >> index[t] & 1:
                        if missing(t):
                            break
                        place(t)
                        moved = True
                    head[c] += 1
        blocked = [ts[head[c]] for c, ts in queues.items() if head[c] < len(ts)]
        if not blocked:
            break
        target = min(blocked, key=lambda t: (missing(t).bit_count(), key[t]))
        needed = []
        need = missing(target)
        while need:
            low = need & -need
            needed.append(graph.transfers[low.bit_length() - 1])
            need ^= low
        place(min((t for t in needed if not missing(t)), key=lambda t: (position[t], index[t])))

    safe: dict[Transfer, int] = {}
    for ts in out.values():
        group = 0
        for i, t in enumerate(ts):
            if i and (values[t], stage[t]) != (values[ts[i - 1]], stage[ts[i - 1]]):
                group = i
            safe[t] = group
    return safe
