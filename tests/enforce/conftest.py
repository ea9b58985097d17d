import threading
import time

import numpy as np
import pytest

from tfsched.bench.local import LocalCluster


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(ps=2, workers=2) as c:
        yield c


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
