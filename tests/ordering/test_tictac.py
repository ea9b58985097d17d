"""TIO and TAO on graphs from the TicTac paper, answers worked out by hand."""

from tests.helpers import PS, PS1, W0, chain_graph, op, oracle_with, var
from tfsched.graph import RawNode, build_comm_graph
from tfsched.ordering import order, tao_order, tio_order_values, transfer_stages
from tfsched.ordering.tio import assembly_ops
from tfsched.sim import simulate_schedule


def fig2a():
    # recv1 -> op1; op1 + recv2 -> op2   (TicTac Figure 2a)
    nodes = var("r1") + var("r2") + [op("op1", ["r1/read"]), op("op2", ["op1", "r2/read"])]
    return build_comm_graph(nodes, fetches=["op2"])


def fig4():
    # A and B feed one op; C joins after; D last (TicTac Figure 4 / Case 2).
    nodes = (
        var("A")
        + var("B")
        + var("C")
        + var("D")
        + [op("ab", ["A/read", "B/read"]), op("abc", ["ab", "C/read"]), op("abcd", ["abc", "D/read"])]
    )
    return build_comm_graph(nodes, fetches=["abcd"])


def _names(view, idx):
    return [view.recvs[i].variable for i in idx]


class TestTIO:
    def test_fig2a_ties(self):
        # Both recvs have M+ = 2 (op2 needs both): same priority, the partial order.
        g = fig2a()
        view = g.worker_view(g.worker_tasks[0])
        assert tio_order_values(view) == [2.0, 2.0]
        assert sorted(order(g, "tio").priorities.values()) == [0, 0]

    def test_fig4_partial_order(self):
        g = fig4()
        view = g.worker_view(g.worker_tasks[0])
        assert dict(zip([t.variable for t in view.recvs], tio_order_values(view), strict=True)) == {
            "A": 2,
            "B": 2,
            "C": 3,
            "D": 4,
        }
        prios = {t.variable: p for t, p in order(g, "tio").priorities.items()}
        assert prios == {"A": 0, "B": 0, "C": 2, "D": 3}

    def test_independent_pairs_tie(self):
        nodes = (
            var("a")
            + var("b")
            + var("c")
            + var("d")
            + [op("x", ["a/read", "b/read"]), op("y", ["c/read", "d/read"]), op("z", ["x", "y"])]
        )
        g = build_comm_graph(nodes, fetches=["z"])
        assert set(order(g, "tio").priorities.values()) == {0}

    def test_variables_split_over_two_ps_go_in_the_order_their_layers_use_them(self):
        # a chain of three layers, each variable split in two shards, one on each PS, put back
        # together on the worker (ConcatV2 with a Const axis) before its layer computes with it
        nodes = [op("x", [], op_type="Const"), op("axis", [], op_type="Const")]
        for i in range(3):
            nodes += var(f"k{i}/part_0") + var(f"k{i}/part_1", device=PS1)
            nodes.append(RawNode(f"k{i}", "ConcatV2", W0, [f"k{i}/part_0/read", f"k{i}/part_1/read", "axis"]))
            nodes.append(op(f"f{i}", [f"f{i - 1}" if i else "x", f"k{i}"], op_type="MatMul"))
        g = build_comm_graph(nodes, fetches=["f2"])
        prios = {t.variable: p for t, p in order(g, "tio").priorities.items()}
        for i in range(3):  # a layer's two shards tie, and go before the next layer's
            assert prios[f"k{i}/part_0"] == prios[f"k{i}/part_1"]
            if i:
                assert prios[f"k{i - 1}/part_0"] < prios[f"k{i}/part_0"]
        # the paper's M+, taken at the ConcatV2 too, ties every shard (what TIO did before)
        view = g.worker_view(g.worker_tasks[0])
        assert set(tio_order_values(view)) == {1.0}


class TestTAO:
    def test_variables_split_over_two_ps_go_in_the_order_their_layers_use_them(self):
        # three layers, each variable split in two shards, one on each PS, put back together on
        # the worker before its layer computes; the first layer's variable is the largest
        nodes = [op("x", [], op_type="Const"), op("axis", [], op_type="Const")]
        for i, size in enumerate((4000, 100, 1000)):
            nodes += var(f"k{i}/part_0", (size,)) + var(f"k{i}/part_1", (size,), device=PS1)
            nodes.append(RawNode(f"k{i}", "ConcatV2", W0, [f"k{i}/part_0/read", f"k{i}/part_1/read", "axis"]))
            nodes.append(op(f"f{i}", [f"f{i - 1}" if i else "x", f"k{i}"], op_type="MatMul"))
        g = build_comm_graph(nodes, fetches=["f2"])
        o = oracle_with({**{f"f{i}": 1e-3 for i in range(3)}, **{f"k{i}": 1e-4 for i in range(3)}})
        view = g.worker_view(g.worker_tasks[0])
        names = _names(view, tao_order(view, o, assembly_ops(g, view)))
        assert [n.split("/")[0] for n in names] == ["k0", "k0", "k1", "k1", "k2", "k2"]
        # the paper's M+, taken at the ConcatV2 too, is a shard's own time: the smallest layer first
        assert _names(view, tao_order(view, o))[0].startswith("k1/")
        prios = {t.variable: p for t, p in order(g, "tao", o).priorities.items()}
        assert prios["k0/part_0"] < prios["k1/part_0"] < prios["k2/part_0"]

    def test_fig2a_recv1_first(self):
        # P(recv1) = Time(op1) > 0 = P(recv2): eq. 5 puts recv1 first.
        g = fig2a()
        o = oracle_with({"op1": 1.0, "op2": 1.0})
        view = g.worker_view(g.worker_tasks[0])
        assert _names(view, tao_order(view, o)) == ["r1", "r2"]

    def test_fig4_order(self):
        g = fig4()
        o = oracle_with({"ab": 1.0, "abc": 1.0, "abcd": 1.0})
        view = g.worker_view(g.worker_tasks[0])
        assert _names(view, tao_order(view, o)) == ["A", "B", "C", "D"]

    def test_overlap_beats_graph_order(self):
        # big (slow) needed late, small needed first: TAO sends small first whatever the graph order.
        nodes = (
            var("big", (1_000_000,))
            + var("small", (10,))
            + [
                op("early", ["small/read"], shape=(10,)),
                op("late", ["early", "big/read"]),
            ]
        )
        g = build_comm_graph(nodes, fetches=["late"])
        o = oracle_with({"early": 0.5, "late": 0.01}, bandwidth_bps=8e6)
        prios = {t.variable: p for t, p in order(g, "tao", o).priorities.items()}
        assert prios == {"small": 0, "big": 1}
        fifo_first_big = simulate_schedule(g, o, order(g, "fifo", o)).step_time
        tao_time = simulate_schedule(g, o, order(g, "tao", o)).step_time
        # 4 MB at 8 Mbit/s = 4 s, 40 B = 40 us. Big first: 4 s + 40 us, then 0.5 + 0.01 of compute.
        assert abs(fifo_first_big - (4.0 + 40e-6 + 0.51)) < 1e-9
        # Small first: `early` runs while big is on the wire; only `late` is left after it.
        assert abs(tao_time - (40e-6 + 4.0 + 0.01)) < 1e-9


class TestStages:
    def test_control_edge_that_waits_for_pushes_goes_last(self):
        # PS apply depends on the worker's gradient; the worker's train op waits on the apply.
        nodes = (
            var("w")
            + var("v")
            + [
                op("y", ["w/read"]),
                op("z", ["y", "v/read"]),
                RawNode(
                    "apply",
                    "ResourceApplyGradientDescent",
                    PS,
                    ["w", "z"],
                    attrs={"T": "FLOAT"},
                    output_shapes=[],
                ),
                RawNode("train", "NoOp", W0, ["^apply", "^z"]),
            ]
        )
        g = build_comm_graph(nodes, fetches=["train"])
        stage = {t.tensor: s for t, s in transfer_stages(g).items()}
        assert stage == {"w/read:0": 0, "v/read:0": 0, "z:0": 1, "^apply": 2}
        for alg in ("tio", "tao"):
            s = order(g, alg)
            prios = {t.tensor: p for t, p in s.priorities.items()}
            assert prios["^apply"] == 2  # after both pulls on the PS -> worker channel
            # and the counter discipline finishes the step instead of deadlocking
            assert simulate_schedule(g, oracle_with({}), s).step_time > 0

    def test_a_pull_of_a_later_stage_goes_where_the_forward_pass_needs_it(self):
        # An embedding looked up on the PS with the ids the worker pushes: the lookup's pull is of
        # stage 1, but the first layer needs it with w1. Ordered by stage first, it went last.
        nodes = (
            var("E", (1000,))
            + var("w1")
            + var("w2")
            + var("w3")
            + [
                op("ids", []),
                op("lookup", ["E/read", "ids"], device=PS),
                op("x1", ["lookup", "w1/read"]),
                op("x2", ["x1", "w2/read"]),
                op("x3", ["x2", "w3/read"]),
            ]
        )
        g = build_comm_graph(nodes, fetches=["x3"])
        stage = {t.tensor: s for t, s in transfer_stages(g).items()}
        assert stage["lookup:0"] == 1 and stage["w1/read:0"] == 0
        o = oracle_with({"x1": 1e-3, "x2": 1e-3, "x3": 1e-3, "lookup": 1e-4})
        for alg in ("tio", "tao"):
            prios = {t.tensor: p for t, p in order(g, alg, o).priorities.items()}
            assert prios["lookup:0"] < prios["w2/read:0"] < prios["w3/read:0"], alg
            assert simulate_schedule(g, o, order(g, alg, o)).step_time > 0

    def test_random_graphs_never_deadlock_under_counters(self):
        # PS ops that need the worker's pushes feed later pulls, so transfers of several stages
        # share a channel; the values are random. Ranked by value alone, some of these steps
        # stall; ranked by counter_safe, none does, and each channel keeps the values' order
        # wherever no stall forces it.
        import random

        from tfsched.errors import TfschedError
        from tfsched.ordering import counter_safe
        from tfsched.ordering.schedule import schedule_for

        stalls = 0
        for seed in range(40):
            rng = random.Random(seed)
            nodes, worker, ps = [], [], []
            for i in range(rng.randint(2, 6)):
                nodes += var(f"v{i}")
                ps.append(f"v{i}/read")
            for j in range(rng.randint(3, 12)):
                if worker and rng.random() < 0.3:
                    nodes.append(op(f"p{j}", rng.sample(worker, 1) + rng.sample(ps, 1), device=PS))
                    ps.append(f"p{j}")
                else:
                    pool = rng.sample(ps, min(len(ps), rng.randint(1, 2)))
                    pool += rng.sample(worker, min(len(worker), rng.randint(0, 1)))
                    nodes.append(op(f"w{j}", pool))
                    worker.append(f"w{j}")
            g = build_comm_graph(nodes, fetches=worker)
            o = oracle_with({n: 1e-3 for n in worker})
            values = {t: rng.random() for t in g.transfers}
            try:
                simulate_schedule(g, o, schedule_for(g, "tio", values, "counter"))
            except TfschedError as e:
                assert "stalled" in str(e)
                stalls += 1
            safe = counter_safe(g, values)
            assert simulate_schedule(g, o, schedule_for(g, "tio", safe, "counter")).step_time > 0, seed
        assert stalls > 0  # the graphs do exercise the case


class TestFastTAOMatchesReference:
    """The vectorized TAO against the straightforward one on random DAGs with several PS tasks."""

    def test_random_dags(self):
        import random

        from tests.helpers import PS1
        from tfsched.ordering.tao import tao_order_reference
        from tfsched.ordering.tio import assembly_ops

        assembled = 0
        for seed in range(25):
            rng = random.Random(seed)
            n_vars, n_ops = rng.randint(2, 40), rng.randint(3, 60)
            nodes = []
            for i in range(n_vars):
                nodes += var(f"v{i}", (rng.randint(1, 5000),), device=PS if rng.random() < 0.6 else PS1)
            names = []
            for j in range(n_ops):
                k = rng.randint(1, 3)
                pool = [f"v{i}/read" for i in rng.sample(range(n_vars), min(k, n_vars))]
                pool += rng.sample(names, min(len(names), rng.randint(0, 2)))
                # some ops only put pulled tensors together (a split variable's ConcatV2)
                nodes.append(op(f"o{j}", pool, op_type="ConcatV2" if rng.random() < 0.3 else "AddV2"))
                names.append(f"o{j}")
            g = build_comm_graph(nodes, fetches=names)
            o = oracle_with(
                {nm: rng.choice([0.0, 1e-4, 2e-4, rng.uniform(0, 1e-3)]) for nm in names}, overhead_s=1e-4
            )
            view = g.worker_view(g.worker_tasks[0])
            assert tao_order(view, o) == tao_order_reference(view, o), seed
            assembly = assembly_ops(g, view)
            assembled += bool(assembly)
            assert tao_order(view, o, assembly) == tao_order_reference(view, o, assembly), seed
        assert assembled > 5  # the graphs do have ops that only assemble pulls


class TestCarryOver:
    """A schedule made from the saved graph, applied to the graph that ran, as the pass applies it."""

    def test_a_rewritten_graph_keeps_the_order_by_variable_and_puts_the_unnamed_last(self):
        from tfsched.graph import RawNode
        from tfsched.ordering import carry_over, normalize
        from tfsched.ordering.schedule import schedule_for

        saved = chain_graph(4)
        # the reverse of the chain's order, on purpose: carried over, not recomputed
        by_var = {t.variable: t for t in saved.transfers}
        sched = schedule_for(saved, "tao", {by_var[f"v{i}"]: 3 - i for i in range(4)}, "counter")
        # the graph that ran: other tensor names (Grappler's), the ops fused, and a pull the saved
        # graph does not have
        nodes: list[RawNode] = []
        for i in range(4):
            nodes += [
                RawNode(f"v{i}", "VarHandleOp", PS, attrs={"dtype": "FLOAT", "shape": (4,)}),
                RawNode(
                    f"v{i}/Read/ReadVariableOp", "ReadVariableOp", PS, [f"v{i}"], attrs={"dtype": "FLOAT"}
                ),
            ]
        nodes += var("extra")
        for i in range(4):
            inputs = [f"v{i}/Read/ReadVariableOp"] + ([f"fused{i - 1}"] if i else ["extra/read"])
            nodes.append(op(f"fused{i}", inputs))
        ran = build_comm_graph(nodes, fetches=["fused3"])
        carried = carry_over(sched, ran)
        got = {t.variable: p for t, p in carried.priorities.items()}
        assert got == {"v3": 0, "v2": 1, "v1": 2, "v0": 3, "extra": 4}
        assert carried.priorities == normalize(carried.priorities) and carried.algorithm == "tao"
        # recomputed on the graph that ran, the order would be the chain's: not what the pass got
        assert {t.variable: p for t, p in order(ran, "tio").priorities.items()}["v0"] < got["v0"]
