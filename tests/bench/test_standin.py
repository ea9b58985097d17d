"""A task that dies gets a stand-in at its address (``bench.standin``): the calls that would wait
for it until their deadlines fail at once, on a real cluster, loopback or relayed."""

import socket
import time

import pytest

from tfsched.bench.standin import refusing_server

pytestmark = pytest.mark.cluster


def _bindable(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, int(port)))
        except OSError:
            return False
    return True


def _wait(predicate, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_stand_in_fails_every_call_unary_or_streamed_with_its_message():
    import grpc

    from tfsched.bench.local import free_port

    address = f"127.0.0.1:{free_port()}"
    server = refusing_server(address, "cluster task /job:ps/task:0 is gone (killed by SIGKILL)")
    try:
        with grpc.insecure_channel(address) as channel:
            unary = channel.unary_unary("/tensorflow.MasterService/RunStep")
            with pytest.raises(grpc.RpcError) as e:
                unary(b"\x01\x02", timeout=10)
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert e.value.details() == "cluster task /job:ps/task:0 is gone (killed by SIGKILL)"
            streamed = channel.stream_stream("/tensorflow.eager.EagerService/StreamingEnqueue")
            with pytest.raises(grpc.RpcError) as e:
                list(streamed(iter([b"a", b"b"]), timeout=10))
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        # a port taken is an error, not a stand-in that serves nothing
        with pytest.raises(RuntimeError, match="cannot listen"):
            refusing_server(address, "again")
    finally:
        server.stop(grace=None)


@pytest.mark.tf
@pytest.mark.parametrize("bandwidth_bps", [None, 1e9], ids=["loopback", "relayed"])
def test_a_session_whose_master_died_fails_at_once_and_its_address_is_freed_with_the_cluster(bandwidth_bps):
    import tensorflow as tf

    from tfsched.bench.local import LocalCluster
    from tfsched.models import build_graph

    with LocalCluster(ps=1, workers=2, bandwidth_bps=bandwidth_bps) as cluster:
        built = build_graph("seq32", worker_task=1)
        sess = tf.compat.v1.Session(cluster.target("worker", 1), graph=built.graph)
        sess.run(built.init_op)
        sess.run(built.train_op)
        assert cluster.standing_in() == []
        cluster.procs[("worker", 1)].kill()
        t = time.monotonic()
        # without the stand-in the run waits for its master until its deadline
        with pytest.raises(tf.errors.FailedPreconditionError) as e:
            sess.run(built.train_op, options=tf.compat.v1.RunOptions(timeout_in_ms=600_000))
        assert time.monotonic() - t < 15
        address = cluster.spec["worker"][1]
        assert f"cluster task /job:worker/task:1 at {address} is gone (killed by SIGKILL)" in str(e.value)
        assert cluster.standing_in() == [("worker", 1)]
        t = time.monotonic()
        with pytest.raises(tf.errors.FailedPreconditionError):
            sess.close()  # its close's own deadline is 30 s (deadlines.session_config)
        assert time.monotonic() - t < 5
        assert not _bindable(address)
        assert cluster.dead_tasks() == ["/job:worker/task:1 killed by SIGKILL"]  # still a death
    assert _bindable(address)  # the stand-in went with the cluster
    assert cluster.standing_in() == []


@pytest.mark.tf
def test_a_task_restarted_after_its_death_takes_its_address_back_from_its_stand_in():
    import tensorflow as tf

    from tfsched.bench.local import LocalCluster
    from tfsched.models import build_graph

    with LocalCluster(ps=1, workers=1) as cluster:
        cluster.procs[("ps", 0)].kill()
        assert _wait(lambda: cluster.standing_in() == [("ps", 0)], 15)
        cluster.restart("ps", 0)
        assert cluster.standing_in() == [] and cluster.dead_tasks() == []
        built = build_graph("seq32")
        with tf.compat.v1.Session(cluster.target("worker", 0), graph=built.graph) as sess:
            sess.run(built.init_op)
            assert sess.run([built.train_op, built.loss])[1] > 0
        time.sleep(1.5)  # a few of the watch's rounds: a live task has no stand-in
        assert cluster.standing_in() == []


@pytest.mark.tf
def test_a_stand_in_whose_port_was_held_a_while_starts_once_it_is_free():
    import tensorflow as tf

    from tfsched.bench.local import LocalCluster
    from tfsched.models import build_graph

    with LocalCluster(ps=1, workers=1) as cluster:
        built = build_graph("seq32")
        sess = tf.compat.v1.Session(cluster.target("worker", 0), graph=built.graph)
        sess.run(built.init_op)
        address = cluster.spec["worker"][0]
        host, port = address.rsplit(":", 1)
        cluster.kill("worker", 0)
        # its port held at once, before the watch's stand-in (a Python start) can take it
        with socket.socket() as holder:
            holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            holder.bind((host, int(port)))
            holder.listen()
            time.sleep(3)  # the stand-in's first tries fail
            assert cluster.standing_in() == []
        # tried again, 1 s after the first failure and twice as long each time: within 4 s
        freed = time.monotonic()
        assert _wait(lambda: cluster.standing_in() == [("worker", 0)], 15)
        assert time.monotonic() - freed < 8
        t = time.monotonic()
        with pytest.raises(tf.errors.FailedPreconditionError, match="is gone"):
            sess.run(built.train_op, options=tf.compat.v1.RunOptions(timeout_in_ms=600_000))
        assert time.monotonic() - t < 15
        with pytest.raises(tf.errors.FailedPreconditionError):
            sess.close()
