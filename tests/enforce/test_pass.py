"""The Grappler pass on its own (TensorFlow's tf_optimizer), and enable()'s checks."""

import json
import re
import sys

import pytest

from tfsched.errors import TfschedError
from tfsched.models import build_graph
from tfsched.tracing.replay import GRAPH_TAG, untagged

pytestmark = pytest.mark.tf


def optimize(graph_def, fetch_names, config):
    """Run the meta optimizer as a session's master would: on the placed graph."""
    import tensorflow as tf
    from tensorflow.python.grappler import tf_optimizer

    from tfsched.graph.load import placed_graph_def

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(placed_graph_def(graph_def), name="")
        for name in fetch_names:
            tf.compat.v1.add_to_collection("train_op", g.get_operation_by_name(name))
        meta = tf.compat.v1.train.export_meta_graph(graph=g, clear_devices=False)
    return tf_optimizer.OptimizeGraph(config, meta)


def _step_of(graph_def, fetches):
    """What a session hands Grappler of a placed ``graph_def`` to run ``fetches``: the ops they
    need (data and control inputs), each colocated only with ops among them."""
    by_name = {n.name: n for n in graph_def.node}
    keep, todo = set(), [f.split(":")[0] for f in fetches]
    while todo:
        name = todo.pop()
        if name not in keep:
            keep.add(name)
            todo.extend(i.lstrip("^").split(":")[0] for i in by_name[name].input)
    step = type(graph_def)()
    step.versions.CopyFrom(graph_def.versions)
    step.library.CopyFrom(graph_def.library)
    step.node.extend(n for n in graph_def.node if n.name in keep)
    for n in step.node:
        if "_class" in n.attr:
            kept = [c for c in n.attr["_class"].list.s if c.decode().removeprefix("loc:@") in keep]
            del n.attr["_class"].list.s[:]
            n.attr["_class"].list.s.extend(kept)
    return step


def only_tfsched(**kwargs):
    import tensorflow as tf
    from tensorflow.core.protobuf import rewriter_config_pb2

    import tfsched

    cfg = tf.compat.v1.ConfigProto()
    rw = cfg.graph_options.rewrite_options
    off = rewriter_config_pb2.RewriterConfig.OFF
    for field in (
        "layout_optimizer",
        "constant_folding",
        "shape_optimization",
        "remapping",
        "arithmetic_optimization",
        "dependency_optimization",
        "loop_optimization",
        "function_optimization",
        "debug_stripper",
        "scoped_allocator_optimization",
        "pin_to_host_optimization",
        "implementation_selector",
        "auto_mixed_precision",
        "memory_optimization",
    ):
        setattr(rw, field, off)
    rw.min_graph_nodes = -1
    rw.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    rw.fail_on_optimizer_errors = True
    return tfsched.enable(cfg, strict=True, **kwargs)


def gates(gd):
    return sorted(
        (n.name, n.device, n.attr["priority"].i, n.attr["channel"].s)
        for n in gd.node
        if n.op == "TfschedGate"
    )


class TestPass:
    def test_gates_are_named_for_the_graph_they_gate(self):
        """TensorFlow shares a stateful op's kernel between the graphs of a session by node name:
        a gate's name ends with a fingerprint of the graph the pass gated, so a training step's
        graph and its loss's each run gate kernels of their own; the same graph, the same names."""
        built = build_graph("seq32", ps_tasks=2)
        train = gates(optimize(built.graph_def(), built.fetches, only_tfsched()))
        loss = gates(optimize(built.graph_def(), [built.loss.op.name], only_tfsched()))
        assert train == gates(optimize(built.graph_def(), built.fetches, only_tfsched()))

        def tags(gs):
            return {re.fullmatch(rf".+({GRAPH_TAG})", name).group(1) for name, *_ in gs}

        assert len(tags(train)) == len(tags(loss)) == 1 and tags(train) != tags(loss)
        # the loss's pulls are the training step's, under the other graph's tag
        assert {untagged(name) for name, *_ in loss} < {untagged(name) for name, *_ in train}

    def test_gates_every_transfer_on_the_sender(self):
        built = build_graph("seq32", ps_tasks=2)
        out = optimize(built.graph_def(), built.fetches, only_tfsched())
        gs = gates(out)
        assert len(gs) == 66
        for name, device, _prio, channel in gs:
            assert "tfsched_gate" in name
            assert device.startswith(("/job:ps/replica:0/task:", "/job:worker/replica:0/task:0/device:CPU:0"))
            assert channel.decode().startswith(device.split("/device:")[0] + "->")
        # priorities are competition ranks per channel
        by_channel = {}
        for _, _, prio, channel in gs:
            by_channel.setdefault(channel, []).append(prio)
        for prios in by_channel.values():
            assert min(prios) == 0 and max(prios) < len(prios)

    def test_the_pushes_take_a_window_of_their_own(self):
        """push_credit: the acknowledged gates of the worker's transfers to the PS (its pushes)
        take it as their credit, the PS's (its pulls) keep the credit; which are acknowledged
        stays the credit's choice (credit / ack_share)."""
        built = build_graph("seq32", ps_tasks=2)

        def credits(**kwargs):
            out = optimize(built.graph_def(), built.fetches, only_tfsched(**kwargs))
            by_sender = {}
            for n in sorted((n for n in out.node if n.op == "TfschedGate"), key=lambda n: n.name):
                sender = "ps" if n.device.startswith("/job:ps/") else "worker"
                by_sender.setdefault(sender, []).append(n.attr["credit"].i)
            return by_sender, sum(n.op == "TfschedAck" for n in out.node)

        (plain, plain_acks), (windowed, acks) = (
            credits(credit=160_000),
            credits(credit=160_000, push_credit=30_000),
        )
        assert plain_acks == acks == 2 * 32  # each weight (65,536 parameters) pulled and pushed
        assert windowed["ps"] == plain["ps"] and set(plain["ps"]) == {0, 160_000}
        assert set(plain["worker"]) == {0, 160_000}
        assert windowed["worker"] == [30_000 if c else 0 for c in plain["worker"]]

    def test_ready_serves_every_gate_by_priority_among_the_arrived(self):
        """enable(ready=True): no gate waits for its turn on a counter, pulls included (steps
        across the barrier: tfsched.enforce.crossing); by default every gate does."""
        import tfsched

        built = build_graph("seq32", ps_tasks=2)

        def ordered(**kwargs):
            out = optimize(built.graph_def(), built.fetches, only_tfsched(**kwargs))
            return {n.attr["ordered"].b for n in out.node if n.op == "TfschedGate"}

        assert ordered() == {True}
        assert ordered(ready=True) == {False}
        with pytest.raises(TfschedError, match="ready must be True or False"):
            tfsched.enable(ready="yes")

    def test_transfers_left_to_tensorflow_are_marked(self):
        """inline_transfers=False marks every gate, ack and credit for the POST_PARTITIONING
        pass to leave alone (cc/transfers.cc); the default marks none."""
        import tfsched

        built = build_graph("seq32", ps_tasks=2)

        def marked(**kwargs):
            out = optimize(built.graph_def(), built.fetches, only_tfsched(credit=160_000, **kwargs))
            nodes = [n for n in out.node if n.op in ("TfschedGate", "TfschedAck", "TfschedCredit")]
            return len(nodes), sum(n.attr["_tfsched_not_inline"].b for n in nodes)

        (total, inline), (total_off, off) = marked(), marked(inline_transfers=False)
        assert total == total_off > 0 and inline == 0 and off == total
        with pytest.raises(TfschedError, match="inline_transfers must be True or False"):
            tfsched.enable(inline_transfers="no")

    def test_a_timeout_past_the_gates_clock_is_refused(self):
        """The pass gives its gates its timeout; one past ``MAX_TIMEOUT_MS`` in a config made by
        hand (``enable`` refuses it) is the pass's error, not gates whose deadlines wrap round."""
        from tfsched.enforce.api import MAX_TIMEOUT_MS

        built = build_graph("seq32", ps_tasks=2)
        config = only_tfsched(timeout_ms=MAX_TIMEOUT_MS)
        gated = optimize(built.graph_def(), built.fetches, config)
        assert {n.attr["timeout_ms"].i for n in gated.node if n.op == "TfschedGate"} == {MAX_TIMEOUT_MS}
        for opt in config.graph_options.rewrite_options.custom_optimizers:
            opt.parameter_map["timeout_ms"].i = sys.maxsize
        with pytest.raises(
            Exception, match=re.escape(f"timeout_ms must be from 0 (no limit) to {MAX_TIMEOUT_MS}")
        ):
            optimize(built.graph_def(), built.fetches, config)

    def test_a_link_too_fast_to_size_is_refused(self):
        """The pass sizes a partition or credit of "auto" for its config's link; one faster than
        a petabit a second in a config made by hand (``enable`` refuses it) outgrew an int64 (1e30
        bit/s: a partition of 10^27) or was infinite in the config's float (1e300), and is now the
        pass's error."""
        from tfsched.enforce.api import MAX_SIZES_BANDWIDTH_BPS

        built = build_graph("seq32", ps_tasks=2)
        config = only_tfsched(partition="auto", credit="auto", bandwidth_bps=MAX_SIZES_BANDWIDTH_BPS)
        gated = optimize(built.graph_def(), built.fetches, config)
        assert gates(gated)  # the fastest it sizes for: gated, its tensors whole (sizes past them)
        for bandwidth in (1e30, 1e300):
            for opt in config.graph_options.rewrite_options.custom_optimizers:
                opt.parameter_map["sizes_bandwidth_bps"].f = bandwidth
            with pytest.raises(
                Exception, match=re.escape("sizes_bandwidth_bps must be from 0 (not known) to 1e15")
            ):
                optimize(built.graph_def(), built.fetches, config)

    def test_idempotent(self):
        built = build_graph("seq32", ps_tasks=2)
        cfg = only_tfsched()
        once = optimize(built.graph_def(), built.fetches, cfg)
        twice = optimize(once, built.fetches, cfg)
        assert gates(once) == gates(twice)
        assert len(once.node) == len(twice.node)

    def test_graph_without_crossing_edges_is_unchanged(self):
        import tensorflow as tf

        g = tf.Graph()
        with g.as_default(), g.device("/job:worker/task:0"):
            v = tf.compat.v1.get_variable("v", [4])
            out = tf.identity(v * 2.0 + 1.0, name="out")
            extra = tf.identity(out * 3.0, name="extra")
        gd = g.as_graph_def()
        cfg = only_tfsched()
        result = optimize(gd, [extra.op.name], cfg)
        # The same meta-optimizer run without tfsched (Grappler itself prunes to the fetches).
        del cfg.graph_options.rewrite_options.custom_optimizers[:]
        baseline = optimize(gd, [extra.op.name], cfg)
        assert gates(result) == []
        assert result == baseline

    def test_nothing_in_a_loop_or_a_branch_is_gated(self):
        """A loop's condition after its Merge (its LoopCond among them) is in the loop's frame:
        gated, a LoopCond sent to another task ran its gate once per iteration (found by a random
        graph, tests/enforce/test_random_graphs.py). A conditional's branch may be dead, and so
        may what follows a Merge inside it; what follows the conditional's Merge is live."""
        import tensorflow as tf
        from tensorflow.python.ops import control_flow_util

        g = tf.Graph()
        v1 = control_flow_util.ENABLE_CONTROL_FLOW_V2
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = False  # Switch, Merge, Enter, Exit, LoopCond
        try:
            with g.as_default():
                with g.device("/job:ps/task:0"):
                    v = tf.compat.v1.get_variable("v", [8])
                with g.device("/job:worker/task:0"):
                    x = tf.identity(v * 1.0, name="x")
                    limit = tf.identity(tf.reduce_sum(x), name="limit")

                def cond(i, y):
                    with tf.device("/job:worker/task:0"):  # the condition on one task
                        return tf.less(tf.cast(i, tf.float32), limit)

                def body(i, y):
                    with tf.device("/job:worker/task:1"):  # the body on another
                        return [i + 1, y * 0.9]

                with g.device("/job:worker/task:1"):
                    _, y = tf.compat.v1.while_loop(cond, body, [0, x], maximum_iterations=3)
                    inner = tf.cond(
                        tf.reduce_sum(y) > 0,
                        lambda: tf.cond(tf.reduce_sum(y) > 1, lambda: y * 2.0, lambda: y * 3.0) + 1.0,
                        lambda: y - 1.0,
                    )
                with g.device("/job:worker/task:0"):
                    out = tf.identity(inner * 2.0, name="out")
        finally:
            control_flow_util.ENABLE_CONTROL_FLOW_V2 = v1
        gd = optimize(g.as_graph_def(), [out.op.name], only_tfsched())
        ops = {n.name: n.op for n in gd.node}
        assert {"LoopCond", "Merge", "Exit", "Switch"} <= set(ops.values())
        gated = {n.input[0].split(":")[0] for n in gd.node if n.op == "TfschedGate"}
        in_loop = {name for name in gated if name.startswith("while/")}
        assert not in_loop, in_loop  # was {"while/Merge_1"}: a gate run once per iteration
        in_branch = {name for name in gated if name.startswith("cond/") and name != "cond/Merge"}
        assert not in_branch, in_branch
        # the pull, the value into the loop and the conditional's result (its Merge) are gated
        assert gated == {"ReadVariableOp", "mul", "cond/Merge"}, gated
        assert ops["ReadVariableOp"] == "ReadVariableOp" and ops["cond/Merge"] == "Merge"

    def test_a_sum_sent_away_keeps_tensorflows_order_of_adding(self):
        """AddN computes into an input whose buffer nobody else holds and adds from that one on;
        sent to another task, its output is NIC-compatible and takes over only an input received
        from or sent to another task. A gate in between leaves it unmarked: the pass makes a
        TfschedHold of the sum's other inputs, run after the sum, and the sum's gate waits for
        it. Two operands add the same in either order: no hold."""
        import tensorflow as tf

        g = tf.Graph()
        with g.as_default():
            with g.device("/job:ps/task:0"):
                v = tf.compat.v1.get_variable("v", [8])
            with g.device("/job:worker/task:0"):
                a, b, c = tf.sin(v, name="a"), tf.cos(v, name="b"), tf.tanh(v, name="c")
                total = tf.add_n([a, b, c, v], name="total")  # v: received from the PS
                pair = tf.add_n([a, c], name="pair")
            with g.device("/job:ps/task:0"):
                out = tf.identity(total * 2.0 + pair + b, name="out")  # b is sent to the PS too
        gd = optimize(g.as_graph_def(), [out.op.name], only_tfsched())
        nodes = {n.name: n for n in gd.node}
        holds = [n for n in gd.node if n.op == "TfschedHold"]
        assert len(holds) == 1, [n.name for n in holds]
        hold = holds[0]
        assert list(hold.input) == ["a", "c", "^total"]
        assert hold.device == nodes["total"].device and len(hold.attr["T"].list.type) == 2
        (gate,) = [n for n in gd.node if n.op == "TfschedGate" and n.input[0] == "total"]
        assert f"^{hold.name}" in gate.input
        assert not any(f"^{hold.name}" in n.input for n in gd.node if n.name != gate.name)

    def test_a_sum_sent_away_ungated_keeps_the_operands_it_could_take_over(self):
        """A sum the pass does not gate (it depends on a Switch's output) but TensorFlow sends to
        another task has a NIC-compatible output: it may take over only an operand received by a
        `_Recv` or sent away by a `_Send`. Gated on its way out (a gate, not a `_Send`) or cut on
        its way in (a TfschedConcat, not a `_Recv`), an operand no longer is, and the sum added
        otherwise than TensorFlow's. Those operands' transfers stay TensorFlow's; the others are
        gated (and cut) as before."""
        from tests.enforce.conftest import ungated_sums_graph

        g, out, _ = ungated_sums_graph()
        gd = optimize(g.as_graph_def(), [out.op.name], only_tfsched(partition=1024))
        nodes = {n.name: n for n in gd.node}

        def source(name):  # through the pass's split: the tensor a gate sends
            node = nodes[name.split(":")[0]]
            return source(node.input[0]) if node.op == "TfschedSplit" else node.name

        gated = {source(n.input[0]) for n in gd.node if n.op == "TfschedGate"}
        reads = {
            var: {n.name for n in gd.node if n.op == "ReadVariableOp" and n.input[0] == f"ungated_{var}"}
            for var in "vwx"
        }
        assert all(reads.values()), reads
        # total's operands: `own` and `inner` (sent to the PS), w's read (received, cut by the
        # partition); then inner's, sent away ungated now: `mine` (sent to the PS)
        assert not {"own", "inner", "mine"} & gated and not reads["w"] & gated, gated
        assert not any(nodes[i.split(":")[0]].op == "TfschedConcat" for i in nodes["total"].input)
        # the others are gated: x's and v's reads, and `apart` (a sum sent to the PS, held)
        assert reads["x"] | reads["v"] | {"apart"} <= gated, gated
        assert any(n.op == "TfschedSplit" for n in gd.node)  # the partition cut what it may
        assert any(n.op == "TfschedHold" and "^apart" in n.input for n in gd.node)

    def test_the_analysis_leaves_ungated_what_the_pass_leaves(self):
        """The transfers the analysis and the simulator leave to TensorFlow (``CommGraph.ungated``:
        control edges, small constants, refs and handles, tensors from loops and branches, the
        operands sums sent away ungated could take over) are the ones the pass does not gate, on
        random graphs with conditionals, loops and sums, on a built-in model and on the
        hand-built graph of sums sent away ungated: the pass's gates send exactly the rest. (Each
        graph is a step's, placed and pruned to its fetches as a session hands it to Grappler, and
        only the pass rewrites it, so that both see the same transfers.)"""
        from tests.enforce.conftest import ungated_sums_graph
        from tests.helpers import benchmark_script
        from tfsched.graph import build_comm_graph
        from tfsched.graph.load import nodes_from_graph_def, output_specs, placed_graph_def

        graphs = benchmark_script("random_graphs")
        cases = []
        for seed in range(16):
            g, train, *_ = graphs.random_graph(seed, "gating", extended=True)
            cases.append((g.as_graph_def(add_shapes=True), [train.name]))
        g, out, _ = ungated_sums_graph()
        cases.append((g.as_graph_def(add_shapes=True), [out.op.name]))
        built = build_graph("seq32", ps_tasks=2)
        cases.append((built.graph_def(), built.fetches))
        config = only_tfsched()
        config.graph_options.rewrite_options.disable_model_pruning = True  # it renames and bypasses
        in_flow = 0
        for saved, fetches in cases:
            gd = _step_of(placed_graph_def(saved), fetches)
            comm = build_comm_graph(nodes_from_graph_def(gd), fetches=fetches, output_specs=output_specs)
            analysed = {(t.tensor, t.dst_task) for t in comm.transfers if t not in comm.ungated}
            gated = {
                (
                    n.input[0] if ":" in n.input[0] else f"{n.input[0]}:0",
                    n.attr["channel"].s.decode().split("->")[1],
                )
                for n in optimize(gd, fetches, config).node
                if n.op == "TfschedGate"
            }
            assert analysed == gated, (fetches, analysed ^ gated)
            in_flow += sum(t.kind != "control" and (t.bytes or 0) > 64 for t in comm.ungated)
        assert in_flow > 0  # tensors from loops and branches, not only control edges and constants

    def test_iterations_changed_after_enable_are_named(self, capfd):
        """The pass gates on Grappler's last iteration, whose number enable() reads from the
        config. Set after it: more iterations fail a strict session with one line (the graph was
        gated before the last); fewer leave the graph ungated, and the log says so."""
        from tensorflow.core.protobuf import rewriter_config_pb2

        import tfsched

        iterations = rewriter_config_pb2.RewriterConfig
        built = build_graph("seq32", ps_tasks=1)
        more = only_tfsched()  # enable() read ONE
        more.graph_options.rewrite_options.meta_optimizer_iterations = iterations.TWO
        with pytest.raises(
            Exception, match="more times than the 1 iterations tfsched.enable.. was told of"
        ) as e:
            optimize(built.graph_def(), built.fetches, more)
        assert "set graph_options.rewrite_options.meta_optimizer_iterations before" in str(e.value)
        # a graph the pass did not gate (nothing crosses tasks): nothing gated early, no error
        import tensorflow as tf

        g = tf.Graph()
        with g.as_default(), g.device("/job:worker/task:0"):
            v = tf.compat.v1.get_variable("local", [8])
            out = tf.identity(tf.sin(v) * 2.0 + tf.cos(v), name="out")
        assert gates(optimize(g.as_graph_def(), [out.op.name], more)) == []

        fewer = only_tfsched()
        fewer.graph_options.rewrite_options.meta_optimizer_iterations = iterations.TWO
        tfsched.enable(fewer, strict=True)  # read TWO
        fewer.graph_options.rewrite_options.meta_optimizer_iterations = iterations.ONE
        capfd.readouterr()
        gd = optimize(built.graph_def(), built.fetches, fewer)
        assert gates(gd) == []
        assert "1 times, fewer than the 2 iterations tfsched.enable() was told of" in capfd.readouterr().err
        # as enable() was told: gated, nothing said
        fewer.graph_options.rewrite_options.meta_optimizer_iterations = iterations.TWO
        assert gates(optimize(built.graph_def(), built.fetches, fewer))
        assert "tfsched.enable() was told of" not in capfd.readouterr().err

    def test_the_pass_gates_the_graph_grappler_finished_with(self):
        """Grappler runs its optimizers again after the pass on every iteration but the last; they
        rewrote a gated graph otherwise than TensorFlow's own (random graph 133: two sums merged
        into one of seven operands, added in another order, without tfsched only). The pass gates
        on the last iteration: the graph is TensorFlow's own plus the pass's nodes."""
        import tfsched
        from tests.helpers import benchmark_script

        graphs = benchmark_script("random_graphs")
        g, train, loss, *_ = graphs.random_graph(133, "t")
        vanilla = optimize(g.as_graph_def(), [train.name], graphs.strict())
        gated = optimize(g.as_graph_def(), [train.name], tfsched.enable(graphs.strict(), strict=True))
        ours = {n.name: n for n in gated.node if n.op.startswith("Tfsched") or "tfsched" in n.name}
        assert any(n.op == "TfschedGate" for n in ours.values())

        def through(name):  # a gate's input for the gate: what TensorFlow's own graph reads
            node = ours.get(name.split(":")[0])
            return through(node.input[0]) if node is not None else name

        def own(gd):
            return {
                n.name: (n.op, [through(i) for i in n.input if not (i[0] == "^" and i[1:] in ours)])
                for n in gd.node
                if n.name not in ours
            }

        assert own(gated) == own(vanilla)

    def test_pruned_fetch_only_waits_for_present_transfers(self):
        # Fetch half of par32's branches: the pass sees (and ranks) only their transfers.
        built = build_graph("par32", ps_tasks=1)
        half = [f"MatMul_{i}" if i else "MatMul" for i in range(16)]
        g = built.graph
        names = [n for n in half if n in {op.name for op in g.get_operations()}]
        assert len(names) == 16
        out = optimize(built.graph_def(), names, only_tfsched())
        gs = gates(out)
        assert 16 <= len(gs) < 33
        assert max(p for _, _, p, _ in gs) < len(gs)

    def test_schedule_priorities_are_used(self, tmp_path):
        from tfsched.analysis import analyze

        built = build_graph("seq32", ps_tasks=1)
        path = tmp_path / "g.pb"
        path.write_bytes(built.graph_def().SerializeToString())
        sched = tmp_path / "layer.json"
        a = analyze(str(path), fetches=built.fetches, algorithm="layer")
        a.schedule.save(str(sched))
        out = optimize(built.graph_def(), built.fetches, only_tfsched(schedule=str(sched), algorithm="layer"))
        want = {(t.src_op, p) for t, p in a.schedule.priorities.items() if t.kind == "pull"}
        got = {
            (name.split("/tfsched_gate")[0], p) for name, dev, p, _ in gates(out) if dev.startswith("/job:ps")
        }
        assert got == want

    def test_a_sparse_gradients_values_do_not_go_ahead_of_the_other_pushes(self, tmp_path):
        # The embedding's gradient is an IndexedSlices: its indices and its values are two pushes
        # with one key (the variable). The values come at the end of the backward pass; ranked
        # by the indices' priority (known from the step's start) they went first, and under
        # per-step counters every other push waited for them. A schedule made on worker 0
        # applies to the other workers by key (by the PS's side), where that happened.
        from tfsched.analysis import analyze

        w0 = build_graph("transformer", worker_task=0, ps_tasks=1, batch_size=2)
        path = tmp_path / "w0.pb"
        path.write_bytes(w0.graph_def().SerializeToString())
        sched = tmp_path / "tio.json"
        analyze(str(path), fetches=w0.fetches, algorithm="tio").schedule.save(str(sched))
        doc = json.loads(sched.read_text())
        parts = [
            t["priority"]
            for ch in doc["channels"]
            for t in ch["transfers"]
            if t["key"] == "push:embedding/embeddings"
        ]
        assert len(parts) == 2 and len(set(parts)) == 2  # one key, two priorities: the case at hand
        for task in (0, 1):
            built = (
                w0 if task == 0 else build_graph("transformer", worker_task=task, ps_tasks=1, batch_size=2)
            )
            out = optimize(
                built.graph_def(), built.fetches, only_tfsched(schedule=str(sched), algorithm="tio")
            )
            pushes = {untagged(name): p for name, dev, p, _ in gates(out) if dev.startswith("/job:worker")}
            values = pushes["gradients/embedding/embedding_lookup_grad/Reshape/tfsched_gate_to_ps_0"]
            others = [
                p for name, p in pushes.items() if name.startswith("gradients/") and "embedding" not in name
            ]
            assert len(others) > 60
            assert values >= max(others), (task, values, max(others))

    def test_the_embedding_lookup_is_pulled_where_the_forward_pass_needs_it(self):
        # The lookup runs on the PS on the ids the worker pushes: a pull of a later dependency
        # stage than the layers' weights. Ordered by stage first (until the eighteenth session),
        # it was the last pull of its channel, behind every weight, though the first layer needs
        # it; now it goes right after the position table it is added to. The ids still go first.
        for task in (0, 1):
            built = build_graph("transformer", worker_task=task, ps_tasks=1, batch_size=2)
            gs = gates(optimize(built.graph_def(), built.fetches, only_tfsched()))
            pulls = {name.split("/tfsched_gate")[0]: p for name, dev, p, _ in gs if dev.startswith("/job:ps")}
            pushes = {
                name.split("/tfsched_gate")[0]: p for name, dev, p, _ in gs if dev.startswith("/job:worker")
            }
            assert len(pulls) > 60
            assert pulls["embedding/embedding_lookup"] <= 1 < sorted(pulls.values())[2], task
            assert pushes["Cast"] == 0, task  # the ids the lookup needs

    def test_a_split_variables_shards_are_pulled_where_its_layer_needs_them(self, tmp_path):
        # Three layers, each kernel split in two over two PS (a partitioned variable, put back
        # together by a ConcatV2 on the worker). TicTac's M+ taken at that ConcatV2 made every
        # shard as urgent as the first layer's (all tied); the pass's TIO, as tfsched.ordering's
        # (tio.assembly_ops), now ranks them by the layer that computes with them.
        import tensorflow as tf

        from tfsched.analysis import analyze

        g = tf.Graph()
        setter = tf.compat.v1.train.replica_device_setter(ps_tasks=2, worker_device="/job:worker/task:0")
        with g.as_default(), tf.compat.v1.device(setter):
            h = tf.ones([2, 8])
            for i in range(3):
                kernel = tf.compat.v1.get_variable(
                    f"k{i}", [8, 8], partitioner=tf.compat.v1.fixed_size_partitioner(2), use_resource=True
                )
                h = tf.matmul(h, kernel)
            tf.identity(h, name="out")
        pulls = {}
        for name, device, p, _ in gates(optimize(g.as_graph_def(), ["out"], only_tfsched())):
            # each shard's read, as the partitioned variable reads it: ReadVariableOp(_1)
            shard = re.match(r"(k\d)/ConcatPartitions/concat/ReadVariableOp(_1)?/", name)
            if device.startswith("/job:ps") and shard:
                pulls[f"{shard.group(1)}/part_{1 if shard.group(2) else 0}"] = p
        assert len(pulls) == 6
        for part in (0, 1):  # a channel's shards in the order of their layers
            assert pulls[f"k0/part_{part}"] < pulls[f"k1/part_{part}"] < pulls[f"k2/part_{part}"]
        # the same order as tfsched.ordering's TIO of the graph (analyze, the simulator)
        path = tmp_path / "split.pb"
        path.write_bytes(g.as_graph_def().SerializeToString())
        ours = analyze(str(path), fetches=["out"], algorithm="tio").schedule.priorities
        assert {t.variable: p for t, p in ours.items() if t.kind == "pull"} == pulls


def _dumped(directory) -> dict:
    """The graphs ``dump_graphs`` wrote to ``directory``: file name -> GraphDef."""
    import tensorflow as tf

    out = {}
    for path in sorted(directory.iterdir()):
        gd = tf.compat.v1.GraphDef()
        gd.ParseFromString(path.read_bytes())
        out[path.name] = gd
    return out


class TestDumpGraphs:
    def test_the_graph_as_the_pass_got_it_and_as_gated(self, tmp_path):
        # What a user of TensorFlow 2 analyzes (a function's graph exists whole only here): the
        # placed graph the pass was given, which `tfsched analyze` reads as a saved graph, and
        # the graph it gated. A directory that is not there is made.
        from tfsched.analysis import analyze

        built = build_graph("seq32", ps_tasks=2)
        dump = tmp_path / "graphs" / "seq"
        out = optimize(built.graph_def(), built.fetches, only_tfsched(dump_graphs=str(dump)))
        files = _dumped(dump)
        [given] = [n for n in files if not n.endswith(".gated.pb")]
        assert given.endswith(".worker_0.pb") and set(files) == {given, given[: -len(".pb")] + ".gated.pb"}
        assert not [n for n in files[given].node if n.op == "TfschedGate"]
        assert all(n.device.startswith("/job:") for n in files[given].node)  # placed
        assert gates(files[given[: -len(".pb")] + ".gated.pb"]) == gates(out) and len(gates(out)) == 66
        (tmp_path / "given.pb").write_bytes(files[given].SerializeToString())
        dumped = analyze(str(tmp_path / "given.pb"), fetches=built.fetches)
        saved = analyze(_saved(built, tmp_path), fetches=built.fetches)
        assert len(dumped.graph.transfers) == len(saved.graph.transfers) > 60

        # a graph with nothing to gate is not written
        again = tmp_path / "none"
        import tensorflow as tf

        g = tf.Graph()
        with g.as_default(), g.device("/job:worker/task:0"):
            tf.identity(tf.compat.v1.get_variable("v", [4]) * 2.0, name="out")
        optimize(g.as_graph_def(), ["out"], only_tfsched(dump_graphs=str(again)))
        assert not again.exists() or not list(again.iterdir())

    def test_a_dump_directory_that_cannot_be_made_leaves_the_graph_gated(self, tmp_path):
        blocker = tmp_path / "file"
        blocker.write_text("not a directory")
        built = build_graph("seq32", ps_tasks=1)
        out = optimize(built.graph_def(), built.fetches, only_tfsched(dump_graphs=str(blocker / "sub")))
        plain = optimize(built.graph_def(), built.fetches, only_tfsched())
        assert gates(out) == gates(plain) and len(gates(out)) == 66
        assert blocker.read_text() == "not a directory"

    @pytest.mark.parametrize("value", [5, ""])
    def test_a_bad_directory_is_one_error(self, value):
        import tfsched

        with pytest.raises(TfschedError, match="dump_graphs must be a directory's path"):
            tfsched.enable(dump_graphs=value)


_GATE_COUNTS = """
from tests.enforce.test_pass import optimize, only_tfsched
from tfsched.models import build_graph

built = build_graph("seq32", ps_tasks=1)
out = optimize(built.graph_def(), built.fetches, only_tfsched(**{kwargs!r}))
print(*(sum(n.op == op for n in out.node) for op in ("TfschedGate", "TfschedCredit", "TfschedAck")))
"""


def seq32_through_the_pass(kwargs: dict) -> tuple[dict[str, int], str]:
    """Seq-32 (1 PS) through the pass alone with ``only_tfsched(**kwargs)``, in a process of its
    own with TensorFlow's log on: its gates, credits and acknowledgements by op, and the log."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run(
        [sys.executable, "-c", _GATE_COUNTS.format(kwargs=kwargs)],
        cwd=root,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    counts = map(int, p.stdout.split()[-3:])
    return dict(zip(("TfschedGate", "TfschedCredit", "TfschedAck"), counts, strict=True)), p.stderr


@pytest.mark.parametrize(
    "kwargs,credits",
    [
        # Seq-32's 64 weights, pulled and pushed, of 65,536 parameters: 4 slices of 16,384 each,
        # under the 20,000 a credit of 160,000 acknowledges (credit / 8)
        ({"partition": 20_000, "credit": 160_000}, 0),
        # with ack_share 16 the pass acknowledges 16,384 and more: every slice
        ({"partition": 20_000, "credit": 160_000, "ack_share": 16}, 4 * 64),
        # unpartitioned, the weights are acknowledged whole
        ({"credit": 160_000}, 64),
    ],
)
def test_a_credit_the_partition_leaves_nothing_to_acknowledge_is_warned_of(kwargs, credits):
    """A credit that acknowledges none of a graph's transfers because the partition cut every
    transfer big enough for it into slices under what it acknowledges holds nothing: the pass
    says so in TensorFlow's log, once for the graph, and gates the graph as asked."""
    counts, log = seq32_through_the_pass(kwargs)
    gated, acked = counts["TfschedGate"], counts["TfschedCredit"]
    assert acked == credits and gated >= 64 + (3 * 64 if "partition" in kwargs else 0)
    warnings = [line for line in log.splitlines() if "acknowledges none of its transfers" in line]
    if credits:
        assert not warnings, warnings
    else:
        assert len(warnings) == 1, log[-2000:]
        assert "64 were big enough, but cut into equal slices of at most 20000 parameters" in warnings[0]
        assert "each came out under the 20000 it acknowledges (credit / ack_share 8)" in warnings[0]


@pytest.mark.parametrize("partition,warned", [(256, True), (20_000, False)])
def test_a_partition_that_makes_thousands_of_slices_is_warned_of(partition, warned):
    """Seq-32's 64 weights of 65,536 parameters, pulled and pushed, cut by 256 are 16,384 slices
    (and its two small transfers a few more), each a gate and a message: the pass gates them as
    asked and says in TensorFlow's log, once, why the steps will be slow (on a local cluster,
    cut by 1,000 Seq-32 stepped in 0.35 s against 0.03 s uncut, by 16 in 20 s). By 20,000 they
    are 256 slices, and nothing is said."""
    counts, log = seq32_through_the_pass({"partition": partition})
    weights = 64 * -(-65_536 // partition)
    warnings = [line for line in log.splitlines() if "slices, each gated and sent as a message" in line]
    if warned:
        assert len(warnings) == 1, log[-2000:]
        said = re.search(
            rf"the partition of {partition} parameters cuts (\d+) of its transfers into (\d+) slices",
            warnings[0],
        )
        assert said, warnings[0]
        cut, slices = map(int, said.groups())
        assert 64 <= cut <= 66 and weights <= slices < weights + 64 and counts["TfschedGate"] >= slices
        assert "A partition of 'auto' sizes it for the graph and the link." in warnings[0]
    else:
        assert not warnings, warnings
        assert counts["TfschedGate"] >= weights


def _saved(built, tmp_path) -> str:
    path = tmp_path / "saved.pb"
    path.write_bytes(built.graph_def().SerializeToString())
    return str(path)


def test_a_function_the_schedule_names_nothing_of_is_ordered_by_tio(tmp_path):
    # Under enable_functions the pass rewrites every function a worker instantiates, and a
    # schedule is made for one of them: another (an evaluation's) is ordered by TIO. A
    # session's graph the schedule names nothing of is still an error (strict: it fails).
    from tfsched.analysis import analyze

    par = build_graph("par32", ps_tasks=1)
    sched = tmp_path / "par.json"
    analyze(_saved(par, tmp_path), fetches=par.fetches).schedule.save(str(sched))
    seq = build_graph("seq32", ps_tasks=1)
    config = only_tfsched(schedule=str(sched))
    with pytest.raises(Exception, match="the schedule matches none of the"):
        optimize(seq.graph_def(), seq.fetches, config)
    for opt in config.graph_options.rewrite_options.custom_optimizers:
        opt.parameter_map["functions"].b = True  # as enable_functions sets it
    tio = gates(optimize(seq.graph_def(), seq.fetches, only_tfsched()))
    assert gates(optimize(seq.graph_def(), seq.fetches, config)) == tio and len(tio) == 66


def _pushes_graph(merged: bool):
    """Three PS variables a, b, c updated from worker 0: a and b by one gradient tensor when
    ``merged`` (what Grappler makes of Par-32's identical gradients), by two otherwise."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            a, b, c = (tf.compat.v1.get_variable(n, [64, 64], use_resource=False) for n in "abc")
        with tf.device("/job:worker/task:0"):
            x = tf.random.stateless_uniform([64, 64], seed=[1, 2])
            ga = tf.multiply(x, 2.0, name="ga")
            gb = ga if merged else tf.multiply(x, 2.5, name="gb")
            gc = tf.multiply(x, 3.0, name="gc")
        train = tf.compat.v1.train.GradientDescentOptimizer(0.1).apply_gradients(
            [(ga, a), (gb, b), (gc, c)], name="train"
        )
    return g.as_graph_def(add_shapes=True), [train.name]


@pytest.mark.parametrize(
    ("order", "merged_first"),
    [({"a": 0, "c": 1, "b": 2}, True), ({"b": 0, "c": 1, "a": 2}, True), ({"c": 0, "a": 1, "b": 2}, False)],
)
def test_a_merged_push_takes_the_most_urgent_of_its_variables_priorities(tmp_path, order, merged_first):
    # The schedule is made on the saved graph, where a and b have gradients of their own; the
    # graph that runs pushes one tensor for both. The pass and the simulator's carry_over give
    # it the smaller of a's and b's priorities (before the thirty-fourth session neither
    # matched it, and it went after every named push).
    from tfsched.analysis import analyze
    from tfsched.graph import build_comm_graph
    from tfsched.graph.load import nodes_from_graph_def
    from tfsched.ordering import carry_over

    saved, fetches = _pushes_graph(merged=False)
    path = tmp_path / "saved.pb"
    path.write_bytes(saved.SerializeToString())
    schedule = analyze(str(path), fetches=fetches, algorithm="tio").schedule
    pushes = {t.variable: t for t in schedule.priorities if t.kind == "push"}
    assert set(pushes) == {"a", "b", "c", None}  # and the learning rate, feeding all three
    for var, t in pushes.items():
        schedule.priorities[t] = order.get(var, 3)
    sched = tmp_path / "tio.json"
    schedule.save(str(sched))

    ran, _ = _pushes_graph(merged=True)
    ran_graph = build_comm_graph(nodes_from_graph_def(ran, "ran"), fetches=fetches)
    merged = [t for t in ran_graph.transfers if t.tensor == "ga:0"]
    assert [(t.variable, t.updates) for t in merged] == [(None, ("a", "b"))]
    carried = carry_over(schedule, ran_graph).priorities
    by_tensor = {t.tensor: p for t, p in carried.items()}
    assert (by_tensor["ga:0"] < by_tensor["gc:0"]) is merged_first, carried

    out = optimize(ran, fetches, only_tfsched(schedule=str(sched), algorithm="tio"))
    gated = {
        name.split("/tfsched_gate")[0]: p for name, dev, p, _ in gates(out) if dev.startswith("/job:worker")
    }
    assert set(gated) == {"ga", "gc"}
    assert (gated["ga"] < gated["gc"]) is merged_first, gated


class TestEnableChecks:
    def test_missing_schedule(self, tmp_path):
        import tfsched

        with pytest.raises(TfschedError, match="no such schedule file"):
            tfsched.enable(schedule=str(tmp_path / "nope.json"))

    def test_negative_timeout(self):
        import tfsched

        with pytest.raises(TfschedError, match="timeout_ms must be a whole number of milliseconds from 0"):
            tfsched.enable(timeout_ms=-5)

    def test_tao_needs_a_schedule(self):
        import tfsched

        with pytest.raises(TfschedError, match="needs a schedule file"):
            tfsched.enable(algorithm="tao")

    @pytest.mark.parametrize(
        "kwargs,message",
        [
            (dict(config={"graph_options": {}}), "config must be a tf.compat.v1.ConfigProto, got dict"),
            (dict(fetches=["train"]), "give graph= too"),
            (dict(ps_job=""), "ps_job must be a job name"),
            (dict(ps_job="/job:ps"), "ps_job must be a job name"),
            (dict(algorithm="magic"), "unknown algorithm 'magic'; choose one of tio, tao, layer, fifo"),
            (dict(strict="yes"), "strict must be True or False"),
            (dict(push_credit=20_000), "push_credit needs a credit"),
            (
                dict(credit=80_000, push_credit=0),
                "push_credit must be a whole number of parameters (1 to 2**63-1), got 0",
            ),
            (
                dict(credit=80_000, push_credit=True),
                "push_credit must be a whole number of parameters (1 to 2**63-1), got True",
            ),
            (
                dict(credit=80_000, push_credit="1e6"),
                "push_credit must be a whole number of parameters (1 to 2**63-1), got '1e6'",
            ),
            # what an int64 does not hold was protobuf's ValueError; a gate's deadline of
            # sys.maxsize ms wrapped round to the past (test_a_timeout_past_the_gates_clock_is_refused)
            (dict(partition=2**63), "partition must be a whole number of parameters (0 to 2**63-1)"),
            (dict(credit=2**63), "credit must be a whole number of parameters (0 to 2**63-1)"),
            (dict(credit=10, ack_share=2**63), "ack_share must be a whole number from 1 to 2**63-1"),
            (dict(credit=10, ack_group=2**63), "ack_group must be a whole number of slices (1 to 2**63-1)"),
            (dict(timeout_ms=sys.maxsize), "to 1e+12 (about 31.7 years), got 9223372036854775807"),
            (dict(timeout_ms=10**12 + 1), "to 1e+12 (about 31.7 years), got 1000000000001"),
            # an int was taken for a file descriptor: read, then closed (test_a_file_descriptor_is_not_a_path)
            (dict(schedule=3), "a schedule file must be a path (a str or os.PathLike), got 3"),
            # a link faster than a petabit made sizes past an int64 (test_a_link_too_fast_to_size_is_refused)
            (dict(partition="auto", bandwidth_bps=1e300), "at most 1e15 (a petabit a second), got 1e+300"),
        ],
    )
    def test_a_wrong_argument_is_one_error(self, kwargs, message):
        import tfsched

        with pytest.raises(TfschedError, match=re.escape(message)):
            tfsched.enable(**kwargs)

    def test_not_a_schedule(self, tmp_path):
        import tfsched

        bad = tmp_path / "s.json"
        bad.write_text(json.dumps({"schema": "something/else"}))
        with pytest.raises(TfschedError, match="not a tfsched.schedule/1 file"):
            tfsched.enable(schedule=str(bad))

    @pytest.mark.parametrize(
        "edit,message",
        [
            (lambda d: d.update(channels="x"), "channels must be a list of channel objects"),
            (lambda d: d["channels"][0].update(sender=3), "sender and receiver must be task names"),
            (lambda d: d["channels"][0].update(transfers={}), "transfers must be a list of transfer objects"),
            (lambda d: d["channels"][0]["transfers"][1].pop("tensor"), "transfer 1: bad or missing tensor"),
            (
                lambda d: d["channels"][0]["transfers"][0].update(dst=5, kind="both"),
                "bad or missing dst, kind",
            ),
            (lambda d: d["channels"][0]["transfers"][0].update(bytes=-4), "transfer 0: bad or missing bytes"),
            (lambda d: d["channels"][0]["transfers"][0].update(priority=True), "priorities must be 0..n-1"),
            (
                lambda d: d.update(graph="g.pb"),
                "graph must be an object whose fetches are a list of op names",
            ),
            (lambda d: d["graph"].update(fetches=5), "graph must be an object whose fetches are a list"),
            (lambda d: d.update(partition="big"), "partition must be null or a number of parameters"),
        ],
    )
    def test_a_hand_edited_schedule_is_one_error(self, tmp_path, edit, message):
        """Each field the pass and viz read is checked when the file is read (these were a
        KeyError or AttributeError traceback, or taken to the pass as given)."""
        import tfsched
        from tfsched.analysis import analyze

        par = build_graph("par32")
        path = tmp_path / "par.pb"
        path.write_bytes(par.graph_def().SerializeToString())
        sched = tmp_path / "s.json"
        analyze(str(path), fetches=par.fetches).schedule.save(str(sched))
        tfsched.enable(schedule=str(sched))  # as written: fine
        doc = json.loads(sched.read_text())
        edit(doc)
        sched.write_text(json.dumps(doc))
        with pytest.raises(TfschedError, match=re.escape(message)) as e:
            tfsched.enable(schedule=str(sched))
        assert str(e.value).startswith(str(sched))

    def test_schedule_for_another_graph(self, tmp_path):
        import tfsched
        from tfsched.analysis import analyze

        par = build_graph("par32")
        path = tmp_path / "par.pb"
        path.write_bytes(par.graph_def().SerializeToString())
        sched = tmp_path / "par.json"
        analyze(str(path), fetches=par.fetches).schedule.save(str(sched))
        seq = build_graph("seq32")
        with pytest.raises(TfschedError, match=r"matches \d+ of the \d+ transfers of this graph"):
            tfsched.enable(schedule=str(sched), graph=seq.graph, fetches=seq.fetches)
        # and the right graph passes
        tfsched.enable(schedule=str(sched), graph=par.graph, fetches=par.fetches)

    def test_the_graph_and_fetches_are_taken_as_a_session_takes_them(self, tmp_path):
        """``fetches``: a name, an op or tensor, or a list of them, as ``Session.run`` takes
        them; a name was read letter by letter and an op was an AttributeError. A graph of
        another kind is one line, and the errors about the graph say which one it is."""
        import tfsched
        from tfsched.analysis import analyze

        par, seq = build_graph("par32"), build_graph("seq32")
        path = tmp_path / "par.pb"
        path.write_bytes(par.graph_def().SerializeToString())
        sched = tmp_path / "par.json"
        analyze(str(path), fetches=par.fetches).schedule.save(str(sched))
        (name,) = par.fetches
        op = par.graph.get_operation_by_name(name)
        seq_fetch = seq.graph.get_operation_by_name(seq.fetches[0])
        for fetches in (name, op, [op], (name,)):
            tfsched.enable(schedule=str(sched), graph=par.graph, fetches=fetches)
            with pytest.raises(TfschedError, match=r"matches \d+ of the \d+ transfers"):
                tfsched.enable(
                    schedule=str(sched),
                    graph=seq.graph,
                    fetches=seq_fetch if fetches is op else seq.fetches[0],
                )
        for graph, fetches, message in (
            ("par.pb", None, "graph must be a tf.Graph or a GraphDef, got str"),
            (
                par.graph,
                [3],
                "fetches must be op or tensor names, tf.Operations or tf.Tensors (or a list of them), got 3",
            ),
            (par.graph, "nope", f"the graph checked against {sched}: fetch 'nope' is not in the graph"),
            (type(par.graph_def())(), None, f"the graph checked against {sched}: the graph has no nodes"),
        ):
            with pytest.raises(TfschedError) as e:
                tfsched.enable(schedule=str(sched), graph=graph, fetches=fetches)
            assert str(e.value) == message
        with pytest.raises(TfschedError, match="graph must be a tf.Graph"):  # checked with no schedule too
            tfsched.enable(graph=3)
