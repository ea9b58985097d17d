import fcntl
import os

import pytest

from tfsched.bench.local import free_port  # noqa: F401  (tests import it from here)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(autouse=True)
def _alone_or_together(request, tmp_path_factory):
    """Under pytest-xdist (README's ``pytest -n 2``) a test marked ``alone`` runs with no other test
    at once: it holds the run's lock exclusively, every other test holds it shared. A test that
    waits for it alone holds the turnstile meanwhile, so tests that keep coming do not pass it
    (flock grants a shared lock to a newcomer while an exclusive one waits). One test at a time,
    as without xdist, there is nothing to wait for. The two files are in the run's base temporary
    directory, whose ``popen-gwN`` each worker's is, and which pytest removes in its time."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        yield
        return
    base = os.path.join(tmp_path_factory.getbasetemp().parent, f"tfsched-tests-{run}")
    alone = request.node.get_closest_marker("alone") is not None
    with open(base + ".turnstile", "a") as turnstile, open(base + ".lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def seq_graph_file(tmp_path_factory):
    """A small real PS training graph (TicTac's Seq-32), saved as binary and text GraphDef and as a MetaGraph."""
    import tensorflow as tf

    from tfsched.models import build_graph

    d = tmp_path_factory.mktemp("graphs")
    bg = build_graph("seq32", batch_size=2)
    gd = bg.graph_def()
    pb = d / "seq32.pb"
    pb.write_bytes(gd.SerializeToString())
    tf.io.write_graph(gd, str(d), "seq32.pbtxt", as_text=True)
    with bg.graph.as_default():
        tf.compat.v1.add_to_collection("train_op", bg.train_op)
        tf.compat.v1.train.export_meta_graph(str(d / "seq32.meta"))
    return {
        "pb": str(pb),
        "pbtxt": str(d / "seq32.pbtxt"),
        "meta": str(d / "seq32.meta"),
        "graph_def": gd,
        "dir": d,
        "fetches": bg.fetches,
    }


@pytest.fixture(scope="session")
def seq_saved_model(tmp_path_factory):
    """The graph of ``seq_graph_file`` exported as a TF1 SavedModel from a real session on a local
    PS cluster: meta graph ``train`` with its placement, ``serve`` without (Builder's default)."""
    import tensorflow as tf

    from tfsched.bench.local import LocalCluster
    from tfsched.models import build_graph

    export = tmp_path_factory.mktemp("savedmodel") / "export"
    bg = build_graph("seq32", batch_size=2)
    with LocalCluster(ps=1, workers=1, vanilla=True) as c, bg.graph.as_default():
        with tf.compat.v1.Session(c.target("worker", 0)) as sess:
            sess.run(bg.init_op)
            builder = tf.compat.v1.saved_model.Builder(str(export))
            builder.add_meta_graph_and_variables(sess, ["train"], clear_devices=False)
            builder.add_meta_graph(["serve"], clear_devices=True)
            builder.save()
    return export


@pytest.fixture
def entered_clusters(monkeypatch):
    """Every ``LocalCluster`` entered during the test, in order: a test reaches the cluster that
    a command starts inside (to kill one of its tasks) through it."""
    from tfsched.bench.local import LocalCluster

    clusters = []
    enter = LocalCluster.__enter__

    def keep(self):
        clusters.append(self)
        return enter(self)

    monkeypatch.setattr(LocalCluster, "__enter__", keep)
    return clusters
