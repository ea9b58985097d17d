import threading
import time

import numpy as np
import pytest

from tfsched.bench.local import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(ps=2, workers=2) as c:
        yield c


def ungated_sums_graph(size=4096):
    """A PS and a worker: sums of three or more tensors sent to the PS, one the pass does not gate
    (``total``: it depends on a Switch's output) with operands sent away (``own``, ``inner``) and
    received (w's read), one of them (``inner``) a sum whose own operand is sent away (``mine``),
    and one the pass gates (``apart``). Returns (graph, the PS's ``out``, its update of v)."""
    import tensorflow as tf

    g = tf.Graph()
    with g.as_default():
        with g.device("/job:ps/task:0"):
            v, w, x = (
                tf.compat.v1.get_variable(
                    f"ungated_{name}", [size], initializer=tf.compat.v1.random_normal_initializer(seed=i)
                )
                for i, name in enumerate("vwx")
            )
        with g.device("/job:worker/task:0"):
            own, mine = tf.sin(v, name="own"), tf.tanh(v, name="mine")  # also sent to the PS
            pred = tf.compat.v1.placeholder_with_default(True, [], name="pred")
            _, live = tf.raw_ops.Switch(data=tf.cos(x, name="cx"), pred=pred, name="switch")
            cv, tx = tf.cos(v, name="cv"), tf.tanh(x, name="tx")
            inner = tf.add_n([tx, mine, cv], name="inner")  # sent to the PS, and an operand
            total = tf.add_n([live, own, w, inner], name="total")  # w: read on the PS
            apart = tf.add_n([tx, cv, tf.sin(x, name="sx")], name="apart")  # sent away gated
        with g.device("/job:ps/task:0"):
            out = tf.identity(total * 2.0 + own + mine + inner + apart, name="out")
            update = v.assign_sub(0.01 * out, name="update")
    return g, out, update


def train(target, built, steps, config=None, options=None, run_metadata=None):
    """Run init and ``steps`` training steps; returns (losses, final variable values)."""
    import tensorflow as tf

    losses = []
    with tf.compat.v1.Session(target, graph=built.graph, config=config) as sess:
        sess.run(built.init_op)
        for _ in range(steps):
            _, loss = sess.run([built.train_op, built.loss], options=options, run_metadata=run_metadata)
            losses.append(loss)
        values = sess.run(built.graph.get_collection("variables"))
    return losses, values


def assert_bitwise_equal(a, b):
    la, va = a
    lb, vb = b
    assert [np.float32(x).tobytes() for x in la] == [np.float32(x).tobytes() for x in lb]
    assert len(va) == len(vb)
    for x, y in zip(va, vb, strict=True):
        assert np.asarray(x).tobytes() == np.asarray(y).tobytes()


def within(seconds, fn):
    """Run fn in a thread; fail if it has not returned after ``seconds`` (a hang)."""
    box = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"still running after {seconds} s"
    return box


def settled_stats(target, device, timeout_s=20.0):
    """The gate counters of ``device`` once the steps that ran have freed their state, or after
    ``timeout_s``. A step's container on the PS is freed after the client's run returns (the
    master cleans it up asynchronously), so ``live_steps`` can read 1 for a moment just after."""
    from tfsched.enforce import stats

    deadline = time.monotonic() + timeout_s
    while True:
        s = stats(target, device)
        if s["live_steps"] == 0 or time.monotonic() > deadline:
            return s
        time.sleep(0.1)
