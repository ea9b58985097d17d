"""``sim.metrics``: the sums the floor takes along the paths (``work_around``'s ``_carry``)."""

import networkx as nx
import numpy as np

from tfsched.sim.metrics import _carry, _weighed


def _dag(n: int, p: float, seed: int) -> nx.DiGraph:
    """A random DAG on nodes 0..n-1, its edges from lower to higher."""
    rng = np.random.default_rng(seed)
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from((i, j) for i in range(n) for j in range(i + 1, min(n, i + 40)) if rng.random() < p)
    return g


def test_carried_sums_are_each_nodes_ancestors_and_descendants_work():
    """Each node's sum is the work of the resource's nodes among its ancestors (walked forward)
    or its descendants (walked backward), as networkx finds them."""
    for seed in range(3):
        g = _dag(300, 0.08, seed)
        rng = np.random.default_rng(100 + seed)
        nodes = sorted(rng.choice(300, size=60, replace=False).tolist())
        work = rng.random(len(nodes))
        bit = {i: k for k, i in enumerate(nodes)}
        at = rng.random(300) < 0.5
        succ = [sorted(g.successors(i)) for i in range(300)]
        preds = [sorted(g.predecessors(i)) for i in range(300)]
        topo = list(nx.topological_sort(g))
        for walk, inward, outward, reach in (
            (topo, preds, succ, nx.ancestors),
            (topo[::-1], succ, preds, nx.descendants),
        ):
            out = np.zeros(300)
            _carry(walk, inward, outward, bit, at, work, out, batch=7)  # several batches
            for i in range(300):
                want = sum(work[k] for k, v in enumerate(nodes) if v in reach(g, i)) if at[i] else 0.0
                assert np.isclose(out[i], want, rtol=1e-12, atol=0), (i, out[i], want)


def test_carried_sets_are_dropped_once_taken():
    """A node's set is held until the nodes after it have taken it: along 20,000 parallel chains
    of 5 walked one after another, a few sets at once, not one a node."""
    chains, length = 20000, 5
    n = chains * length
    succ = [[i + 1] if (i + 1) % length else [] for i in range(n)]
    preds = [[i - 1] if i % length else [] for i in range(n)]
    nodes = list(range(0, n, length))  # each chain's head
    bit = {i: k for k, i in enumerate(nodes)}
    out = np.zeros(n)
    most = _carry(list(range(n)), preds, succ, bit, np.ones(n, dtype=bool), np.ones(len(nodes)), out)
    assert most == 1
    assert out.reshape(chains, length)[:, 1:].tolist() == [[1.0] * (length - 1)] * chains


def test_the_walk_goes_depth_first_and_holds_a_few_sets():
    """``_topological`` takes the node made ready last first: along 2,000 chains that start
    together, a walk holds one chain's set at a time, where breadth first it held one a chain.
    Each node still comes after its predecessors."""
    from tfsched.sim.metrics import _topological
    from tfsched.sim.model import COMPUTE, SimGraph

    chains, length = 2000, 5
    n = chains * length
    succ = [[i + 1] if (i + 1) % length else [] for i in range(n)]
    sg = SimGraph(kind=[COMPUTE] * n, succ=succ, npred=[1 if i % length else 0 for i in range(n)])
    topo = _topological(sg)
    place = {v: k for k, v in enumerate(topo)}
    assert sorted(topo) == list(range(n)) and all(place[i] < place[j] for i in range(n) for j in succ[i])
    preds = [[i - 1] if i % length else [] for i in range(n)]
    bit = {i: k for k, i in enumerate(range(0, n, length))}
    out = np.zeros(n)
    assert _carry(topo, preds, succ, bit, np.ones(n, dtype=bool), np.ones(chains), out) == 1
    assert sorted(set(out.tolist())) == [0.0, 1.0]


def test_weighed_sums_are_every_bytes_look_up_summed_to_the_last_bit():
    """``_weighed`` looks up only each set's span of bytes, and sums each row as when every
    byte was looked up (until the hundred-and-sixteenth session): the same floats exactly."""
    rng = np.random.default_rng(5)
    for m in (1, 9, 300, 5000):
        weight = rng.random(m) * 10.0 ** rng.integers(-6, 2, size=m)
        sets = [0, (1 << m) - 1]  # empty and full
        for _ in range(300):  # runs of bits: a node's ancestors on a resource
            b = 0
            for _ in range(int(rng.integers(1, 4))):
                lo = int(rng.integers(0, m))
                b |= ((1 << int(rng.integers(1, m - lo + 1))) - 1) << lo
            sets.append(b)
        sets += [int(rng.integers(0, 2**62)) & ((1 << m) - 1) for _ in range(50)]  # scattered
        nbytes = (m + 7) // 8
        padded = np.zeros(nbytes * 8)
        padded[:m] = weight
        bits = np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1, bitorder="little")
        table = padded.reshape(nbytes, 8) @ bits.T
        raw = np.frombuffer(b"".join(b.to_bytes(nbytes, "little") for b in sets), dtype=np.uint8)
        every = table[np.arange(nbytes), raw.reshape(len(sets), nbytes)].sum(axis=1)
        got = _weighed(sets, weight)
        assert got.tobytes() == every.tobytes(), m
        direct = [sum(weight[k] for k in range(m) if b >> k & 1) for b in sets]
        assert np.allclose(got, direct, rtol=1e-12, atol=0.0)
