"""The POST_PARTITIONING pass (cc/transfers.cc): gates send their tensors and acknowledgements
return their credit on the thread that has them in hand, not after an inter-op thread is free."""

import pytest

from tests.enforce.conftest import assert_bitwise_equal, settled_stats, train
from tests.enforce.test_partition_credit import _config, _traced_step
from tfsched.bench.local import LocalCluster
from tfsched.models import build_graph
from tfsched.tracing.replay import untagged

pytestmark = [pytest.mark.tf, pytest.mark.cluster]

PUSH = 2_000_000  # parameters of each pushed tensor (8 MB): one is the whole window
PUSHES = 6
CHAIN = 60  # matrix products that hold the worker's one inter-op thread
STEPS = 5


def _label(node) -> bytes:
    """A node's kernel label (without adding one: a proto map's [] would)."""
    return node.attr["_kernel"].s if "_kernel" in node.attr else b""


def _marks(graphs):
    """Gates that send (their _Send's key theirs), acknowledgement _Recvs that return credit,
    credits marked as returned by them, acknowledged tensors' _Recvs that acknowledge (the ack's
    _Send's key theirs), and the gates, credits and acks."""
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
            assert len(sends) == 1 and _label(sends[0]) == b"tfsched_sent"
            assert g.attr["_tfsched_send_tensor_name"].s == sends[0].attr["tensor_name"].s
            assert (
                g.attr["_tfsched_send_send_device_incarnation"].i
                == sends[0].attr["send_device_incarnation"].i
            )
            sending.append(g)
        else:
            assert all("_kernel" not in s.attr for s in sends)
    recvs = [n for n in nodes.values() if n.op == "_Recv" and _label(n) == b"tfsched_credit"]
    returned = [c for c in credits if "_tfsched_returned_by_recv" in c.attr]
    for c in returned:
        recv = nodes[c.input[0].split(":")[0]]
        assert recv.op == "_Recv" and _label(recv) == b"tfsched_credit"
        assert recv.attr["_tfsched_channel"].s == c.attr["channel"].s
    acks = [n for n in nodes.values() if n.op == "TfschedAck"]
    acking = []  # acknowledged tensors' _Recvs that send the acknowledgement themselves
    for a in acks:
        recv = nodes[a.input[0].split(":")[0]]
        (send,) = [c for c in consumers[a.name] if c.op == "_Send"]
        if _label(recv) == b"tfsched_ack":
            assert _label(send) == b"tfsched_sent"
            assert recv.attr["_tfsched_ack_tensor_name"].s == send.attr["tensor_name"].s
            acking.append(recv)
        else:
            assert "_kernel" not in recv.attr and "_kernel" not in send.attr
    return sending, recvs, returned, acking, gates, credits, acks


def test_gates_send_and_acknowledgements_return_credit_themselves(cluster):
    """Every gate's `_Send`, every acknowledged tensor's `_Recv` and every acknowledgement's
    `_Recv` is marked (on the PS and the workers); training stays bitwise identical and every
    acknowledgement returns its credit once; ``inline_transfers=False`` leaves TensorFlow's."""
    target = cluster.target("worker", 0)
    vanilla = train(target, build_graph("seq32", ps_tasks=2), 6, _config(partition=0, credit=0))
    counts = {}
    for inline in (True, False):
        cfg = _config(partition=30_000, credit=40_000, ack_share=4, inline_transfers=inline)
        before = {d: settled_stats(target, d)["acked"] for d in ("/job:worker/task:0", "/job:ps/task:0")}
        assert_bitwise_equal(vanilla, train(target, build_graph("seq32", ps_tasks=2), 6, cfg))
        after = {d: settled_stats(target, d)["acked"] for d in before}
        graphs, _ = _traced_step(target, build_graph("seq32", ps_tasks=2), cfg, steps=1)
        sending, recvs, returned, acking, gates, credits, acks = _marks(graphs)
        assert gates and credits and len(acks) == len(credits)
        if inline:
            assert len(sending) == len(gates) and len(recvs) == len(returned) == len(credits)
            assert len(acking) == len(acks)
            assert {g.device.split("/")[1] for g in sending} == {"job:ps", "job:worker"}
        else:
            assert sending == recvs == returned == acking == []
        counts[inline] = {d: after[d] - before[d] for d in before}
    # one credit return per acknowledgement either way (6 steps)
    assert counts[True] == counts[False] and all(v > 0 for v in counts[True].values())


@pytest.fixture(scope="module")
def one_thread():
    with LocalCluster(ps=1, workers=1, inter_op_threads=1) as c:
        yield c


def test_credit_comes_back_while_the_workers_thread_is_busy(one_thread):
    """With one inter-op thread on the worker, busy with a chain of kernels, a push goes a round
    trip after the push before it reached the PS (``bench.busy``); TensorFlow's `_Recv` ->
    TfschedCredit and gate -> `_Send` wait for the chain to end (a median 486 ms in
    ``benchmarks/results/inline-transfers.md``, inline 7.4)."""
    from tfsched.bench.busy import busy_worker_steps

    target = one_thread.target("worker", 0)
    steps = busy_worker_steps(
        target, _config(credit=PUSH, ack_share=1), pushes=PUSHES, push=PUSH, chain=CHAIN, steps=STEPS
    )
    waits = [w for step in steps for w in step.waits_ms]
    assert waits, "no push waited during the chain in any step"
    assert max(waits) < 100, [s.waits_ms for s in steps]
    stats = settled_stats(target, "/job:worker/task:0")
    assert stats["live_steps"] == 0 and stats["timeouts"] == 0


def _runs_of_three_graphs(target, built, config, rounds):
    """In one session: a training step, the loss alone, and the model's second half fed its first
    half's output (its pulls are the other graphs', with other priorities), ``rounds`` times;
    returns what each run gave and the partition graphs of the last round's runs."""
    import tensorflow as tf

    tanh = [op.outputs[0] for op in built.graph.get_operations() if op.type == "Tanh"]
    half = tanh[len(tanh) // 2]
    config.operation_timeout_in_ms = 60_000  # a lost tensor fails the run instead of hanging it
    out, graphs = [], []
    with tf.compat.v1.Session(target, graph=built.graph, config=config) as sess:
        sess.run(built.init_op)
        fed = sess.run(half)
        for r in range(rounds):
            options = tf.compat.v1.RunOptions(output_partition_graphs=r == rounds - 1)
            for fetch, feed in ((built.train_op, None), (built.loss, None), (built.loss, {half: fed})):
                md = tf.compat.v1.RunMetadata()
                out.append(sess.run(fetch, feed_dict=feed, options=options, run_metadata=md))
                graphs.append(list(md.partition_graphs))
    return out, graphs[-3:]


@pytest.mark.parametrize("inline", [True, False], ids=["inline", "pool"])
def test_each_graph_of_a_session_runs_gates_of_its_own(cluster, inline):
    """TensorFlow keeps one kernel per session and node name for a stateful op, so before the pass
    tagged each gate's name with its graph, the loss run after a training step in the same session
    ran the training graph's gates: inline, they sent their tensors under the training
    graph's keys and the run hung (so did SyncReplicasOptimizer's local_step_init_op after its
    chief_init_op); on the pool, the fed half's gates waited for the training graph's priorities
    until their timeout. And the fed run gated the first half's pulls too, which it never makes, so
    the gates after them waited for their turn until their timeout. Now every run gives vanilla
    TensorFlow's values with no timeout."""
    import tensorflow as tf

    target = cluster.target("worker", 0)
    vanilla, _ = _runs_of_three_graphs(
        target, build_graph("seq32", ps_tasks=2), tf.compat.v1.ConfigProto(), 2
    )
    cfg = _config(partition=30_000, credit=40_000, ack_share=4, inline_transfers=inline, timeout_ms=5_000)
    before = settled_stats(target, "/job:ps/task:0")
    scheduled, graphs = _runs_of_three_graphs(target, build_graph("seq32", ps_tasks=2), cfg, 2)
    assert _bytes(scheduled) == _bytes(vanilla)
    after = settled_stats(target, "/job:ps/task:0")
    assert after["timeouts"] == before["timeouts"] and after["released"] > before["released"]
    # a kernel is shared by name only: gates of one name have the same attrs in every graph (the
    # send key too), and the gate of one tensor has a name in each graph
    attrs, bases = {}, {}
    for run in graphs:
        for n in (n for g in run for n in g.node if n.op == "TfschedGate"):
            attrs.setdefault(n.name, set()).add(
                tuple(sorted((k, v.SerializeToString()) for k, v in n.attr.items()))
            )
            bases.setdefault(untagged(n.name), set()).add(n.name)
    assert all(len(a) == 1 for a in attrs.values()), [n for n, a in attrs.items() if len(a) > 1]
    assert any(len(names) == 3 for names in bases.values()), bases


def _bytes(values):
    """Each run's result as its bytes (None for a training step's op)."""
    import numpy as np

    return [None if x is None else np.asarray(x).tobytes() for x in values]
