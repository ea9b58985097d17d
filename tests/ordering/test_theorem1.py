"""ByteScheduler's Theorem 1 as a property, on chain models with every pull ready at the start.

Layer order reaches the minimum simulated step time over all n! orders; TAO finds it; TIO's
partial order never contradicts it.
"""

import itertools
import random

import pytest

from tests.helpers import chain_graph, oracle_with
from tfsched.ordering import order
from tfsched.ordering.schedule import Schedule
from tfsched.sim import build_sim_graph, simulate


def _step_time(g, o, perm) -> float:
    pulls = sorted(g.transfers, key=lambda t: int(t.variable[1:]))
    prios = {pulls[i]: rank for rank, i in enumerate(perm)}
    sg = build_sim_graph(g, o, Schedule("fifo", prios, mode="counter"))
    return simulate(sg, "counter").step_time


CASES = [(n, seed, overhead) for n in (3, 4, 5, 6) for seed in range(3) for overhead in (0.0, 300e-6)]
CASES += [(7, 0, 0.0), (7, 1, 300e-6)]


@pytest.mark.parametrize("n,seed,overhead", CASES)
def test_layer_order_is_optimal_and_tao_finds_it(n, seed, overhead):
    rng = random.Random(seed * 100 + n)
    sizes = [rng.randint(1, 2000) for _ in range(n)]
    g = chain_graph(n, sizes)
    o = oracle_with(
        {f"f{i}": rng.uniform(1e-4, 3e-3) for i in range(n)}, bandwidth_bps=8e6, overhead_s=overhead
    )

    times = {perm: _step_time(g, o, perm) for perm in itertools.permutations(range(n))}
    best = min(times.values())
    layer_time = times[tuple(range(n))]
    assert layer_time <= best + 1e-12

    layer = order(g, "layer", o)
    assert [t.variable for t in layer.channels()[next(iter(layer.channels()))]] == [f"v{i}" for i in range(n)]

    tao = order(g, "tao", o)
    tao_seq = [int(t.variable[1:]) for t in tao.channels()[next(iter(tao.channels()))]]
    assert times[tuple(tao_seq)] <= best + 1e-12

    tio = {int(t.variable[1:]): p for t, p in order(g, "tio").priorities.items()}
    assert all(tio[i] <= tio[j] for i in range(n) for j in range(i + 1, n)), tio
    # and the orders are not all equally good: the property has teeth
    assert max(times.values()) > best
