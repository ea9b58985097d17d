"""The POST_PARTITIONING pass (cc/transfers.cc): gates send their tensors and acknowledgements
return their credit on the thread that has them in hand, not after an inter-op thread is free."""

import pytest

from tests.enforce.conftest import assert_bitwise_equal, settled_stats, train
from tfsched.bench.local import LocalCluster
from tfsched.models import build_graph

pytestmark = [pytest.mark.tf, pytest.mark.cluster]

PUSH = 2_000_000  # parameters of each pushed tensor (8 MB): one is the whole window
PUSHES = 6
CHAIN = 60  # matrix products that hold the worker's one inter-op thread
STEPS = 5


def _config(**kwargs):
    import tfsched

    cfg = tfsched.enable(strict=True, **kwargs)
    cfg.graph_options.rewrite_options.fail_on_optimizer_errors = True
    return cfg


def _partition_graphs(target, built, config):
    import tensorflow as tf

    md = tf.compat.v1.RunMetadata()
    with tf.compat.v1.Session(target, graph=built.graph, config=config) as sess:
        sess.run(built.init_op)
        sess.run(
            built.train_op, options=tf.compat.v1.RunOptions(output_partition_graphs=True), run_metadata=md
        )
    return md.partition_graphs


def _marks(graphs):
    """(gates that send, and their _Send's tensor_name == theirs), acknowledgement _Recvs that return
    credit, credits marked as returned by them, and the nodes of each kind."""
    nodes = {n.name: n for g in graphs for n in g.node}
    consumers = {}
    for n in nodes.values():
        for i in n.input:
            consumers.setdefault(i.split(":")[0], []).append(n)
    gates = [n for n in nodes.values() if n.op == "TfschedGate"]
    credits = [n for n in nodes.values() if n.op == "TfschedCredit"]
    sending = []
    for g in gates:
        sends = [c for c in consumers.get(g.name, []) if c.op == "_Send"]
        if "_tfsched_send_tensor_name" in g.attr:
            assert len(sends) == 1 and sends[0].attr["_kernel"].s == b"tfsched_sent"
            assert g.attr["_tfsched_send_tensor_name"].s == sends[0].attr["tensor_name"].s
            assert (
                g.attr["_tfsched_send_send_device_incarnation"].i
                == sends[0].attr["send_device_incarnation"].i
            )
            sending.append(g)
        else:
            assert all("_kernel" not in s.attr for s in sends)
    recvs = [n for n in nodes.values() if n.op == "_Recv" and n.attr["_kernel"].s == b"tfsched_credit"]
    returned = [c for c in credits if "_tfsched_returned_by_recv" in c.attr]
    for c in returned:
        recv = nodes[c.input[0].split(":")[0]]
        assert recv.op == "_Recv" and recv.attr["_kernel"].s == b"tfsched_credit"
        assert recv.attr["_tfsched_channel"].s == c.attr["channel"].s
    return sending, recvs, returned, gates, credits


def test_gates_send_and_acknowledgements_return_credit_themselves(cluster):
    """Every gate's `_Send` and every acknowledgement's `_Recv` is marked (on the PS and the
    workers); training stays bitwise identical and every acknowledgement returns its credit once;
    ``inline_transfers=False`` leaves TensorFlow's."""
    target = cluster.target("worker", 0)
    vanilla = train(target, build_graph("seq32", ps_tasks=2), 6, _config(partition=0, credit=0))
    counts = {}
    for inline in (True, False):
        cfg = _config(partition=30_000, credit=40_000, ack_share=4, inline_transfers=inline)
        before = {d: settled_stats(target, d)["acked"] for d in ("/job:worker/task:0", "/job:ps/task:0")}
        assert_bitwise_equal(vanilla, train(target, build_graph("seq32", ps_tasks=2), 6, cfg))
        after = {d: settled_stats(target, d)["acked"] for d in before}
        sending, recvs, returned, gates, credits = _marks(
            _partition_graphs(target, build_graph("seq32", ps_tasks=2), cfg)
        )
        assert gates and credits
        if inline:
            assert len(sending) == len(gates) and len(recvs) == len(returned) == len(credits)
            assert {g.device.split("/")[1] for g in sending} == {"job:ps", "job:worker"}
        else:
            assert sending == recvs == returned == []
        counts[inline] = {d: after[d] - before[d] for d in before}
    # one credit return per acknowledgement either way (6 steps)
    assert counts[True] == counts[False] and all(v > 0 for v in counts[True].values())


@pytest.fixture(scope="module")
def one_thread():
    with LocalCluster(ps=1, workers=1, inter_op_threads=1) as c:
        yield c


def _busy_worker_steps(target, config):
    """A worker pushes PUSHES tensors under a window of one, while a chain of matrix products that
    starts with a scalar from the PS, within the first push, holds the worker's only inter-op
    thread. For each of STEPS steps: how long each gate waited
    after the acknowledgement that freed the window (ms), of those that waited during the chain,
    and the pushed sums."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:worker/task:0"):
            pushes = [tf.random.stateless_uniform([PUSH], seed=[i, 7]) for i in range(PUSHES)]
        with tf.device("/job:ps/task:0"):
            sums = [tf.reduce_sum(p, name=f"sum{i}") for i, p in enumerate(pushes)]
            trigger = tf.reduce_sum(tf.random.uniform([4]))  # stateful: not folded away
        with tf.device("/job:worker/task:0"):
            m = tf.random.stateless_uniform([600, 600], seed=[1, 2])
            x = tf.fill([600, 600], trigger * 1e-6)
            for k in range(CHAIN):
                x = tf.tanh(tf.matmul(x, m, name=f"product{k}") * 1e-3)
    opts = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)
    steps = []
    with tf.compat.v1.Session(target, graph=g, config=config) as sess:
        sess.run([sums, x])  # warm-up: kernels made, connections open
        for _ in range(STEPS):
            md = tf.compat.v1.RunMetadata()
            values, _ = sess.run([sums, x], options=opts, run_metadata=md)
            start, end = {}, {}
            for dev in md.step_stats.dev_stats:
                for ns in dev.node_stats:
                    start[ns.node_name] = ns.all_start_micros
                    end[ns.node_name] = ns.all_start_micros + ns.all_end_rel_micros
            # one push in flight at a time: the (i+1)-th gate to go waited for the i-th ack
            released = sorted(t for n, t in end.items() if n.endswith("tfsched_gate_to_ps_0"))
            acked = sorted(t for n, t in end.items() if n.endswith("tfsched_gate_to_ps_0/ack"))
            assert len(released) == len(acked) == PUSHES
            chain = (start["product0"], start[f"product{CHAIN - 1}"])
            steps.append(
                [
                    (gate - ack) / 1000
                    for ack, gate in zip(acked, released[1:], strict=False)
                    if ack < chain[1] and gate > chain[0]
                ]
            )
    return steps, values


def test_credit_comes_back_while_the_workers_thread_is_busy(one_thread):
    """With one inter-op thread on the worker, busy with a chain of kernels, a push goes as soon
    as the acknowledgement before it arrives; TensorFlow's `_Recv` -> TfschedCredit and gate ->
    `_Send` can wait for the chain to end (hundreds of ms here)."""
    target = one_thread.target("worker", 0)
    steps, _ = _busy_worker_steps(target, _config(credit=PUSH, ack_share=1))
    waits = [w for step in steps for w in step]
    assert waits, "no push waited during the chain in any step"
    assert max(waits) < 100, steps
    stats = settled_stats(target, "/job:worker/task:0")
    assert stats["live_steps"] == 0 and stats["timeouts"] == 0
