"""Shaped links on loopback without root (``bench.relay``): the pacing, real sockets through the
relays, and a real cluster whose tasks reach each other only through them."""

import os
import select
import signal
import socket
import threading
import time

import pytest

from tests.helpers import BENCH_SEQ32, cli
from tfsched.bench.relay import Links, RelayedSpec


def test_a_chunk_waits_for_both_of_its_links():
    links = Links(8e6)  # 1 MB/s
    t0 = time.monotonic()
    a = links.reserve("w0", "ps", 100_000)  # w0's uplink and the PS's downlink: 0.1 s
    b = links.reserve("w1", "ps", 100_000)  # the PS's downlink is busy until a: after it
    c = links.reserve("ps", "w0", 100_000)  # the other direction: free (full duplex)
    d = links.reserve("w1", "w2", 100_000)  # w1's uplink is busy until b
    assert a - t0 == pytest.approx(0.1, abs=0.01)
    assert b - a == pytest.approx(0.1, abs=1e-6)
    assert c - t0 == pytest.approx(0.1, abs=0.01)
    assert d - b == pytest.approx(0.1, abs=1e-6)


def test_a_relay_reads_about_two_ms_of_its_link_at_a_time():
    from tfsched.bench.relay import chunk_bytes

    assert chunk_bytes(100e6) == chunk_bytes(200e6) == 64 * 1024  # never less
    assert chunk_bytes(1e9) == 256 * 1024  # 250 kB of link time, to the nearest power of two
    assert chunk_bytes(10e9) == chunk_bytes(100e9) == 1024 * 1024  # never more
    assert Links(1e9).chunk == 256 * 1024


RELAYS_UNDER_LIMITS = """
import resource, sys
from tfsched.bench.relay import RelayedSpec
from tfsched.errors import TfschedError
soft, hard = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
spec = {"ps": ["127.0.0.1:1"], "worker": [f"127.0.0.1:{2 + i}" for i in range(16)]}
try:
    relays = RelayedSpec(spec, 1e9)
except TfschedError as e:
    print("refused:", e)
else:
    print("relays", len(relays.relays), "soft", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    relays.close()
"""


@pytest.mark.parametrize("soft,hard", [(1024, 20000), (1024, 4096)])
def test_the_relays_have_the_open_files_they_need_or_refuse_before_they_start(soft, hard):
    """Relays are a listener each, and each connection two sockets and two pipes: at the common
    soft limit of 1,024, 16 workers' 306 relays started, and failed threads and a step once their
    connections came. The soft limit is raised as far as the relays need; where the hard limit
    is lower, one error before any relay starts."""
    import subprocess
    import sys

    from tfsched.bench.relay import FILES_BESIDE, FILES_PER_RELAY

    p = subprocess.run(
        [sys.executable, "-c", RELAYS_UNDER_LIMITS, str(soft), str(hard)], capture_output=True, text=True
    )
    assert p.returncode == 0, p.stderr[-2000:]
    need = FILES_PER_RELAY * 17 * 18 + FILES_BESIDE  # a relay to each of 17 tasks from 18 ways
    if hard >= need:
        assert p.stdout.split() == ["relays", "306", "soft", str(need)], p.stdout
    else:
        assert p.stdout.startswith(f"refused: the relays on loopback need about {need:,} open files"), (
            p.stdout
        )
        assert f"the hard limit, ulimit -Hn, is {hard:,}" in p.stdout


def test_the_drivers_side_is_unshaped():
    from tfsched.bench.relay import CLIENT

    links = Links(8e6, latency_s=0.005, unshaped=(CLIENT,))
    t0 = time.monotonic()
    a = links.reserve(CLIENT, "w0", 100_000)  # only w0's downlink: 0.1 s
    b = links.reserve(CLIENT, "w1", 100_000)  # the driver has no uplink to wait for
    c = links.reserve("w1", "w0", 100_000)  # w0's downlink is busy until a
    assert a - t0 == pytest.approx(0.1, abs=0.01) and b - t0 == pytest.approx(0.1, abs=0.01)
    assert c - a == pytest.approx(0.1, abs=1e-6)
    assert links.delay(CLIENT, "w0") == links.delay("w0", CLIENT) == 0.005 and links.delay("w1", "w0") == 0.01


class _Sink:
    """A TCP server that reads everything sent to it and says when the last byte came."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.addr = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.received = 0
        self.last = 0.0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn):
        with conn:
            while data := conn.recv(1 << 16):
                with self.lock:
                    self.received += len(data)
                    self.last = time.monotonic()

    def wait_for(self, nbytes, timeout=30):
        deadline = time.monotonic() + timeout
        while self.received < nbytes and time.monotonic() < deadline:
            time.sleep(0.005)
        assert self.received == nbytes
        return self.last

    def close(self):
        self.sock.close()


def _send(port, nbytes):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"x" * nbytes)


def test_relays_pace_to_the_links_bandwidth_and_leave_nothing_behind():
    sinks = {"ps": _Sink(), "w0": _Sink()}
    spec = {"ps": [sinks["ps"].addr], "worker": [sinks["w0"].addr, "127.0.0.1:9"]}
    relays = RelayedSpec(spec, 100e6)  # 12.5 MB/s a link, each way
    try:
        # each task's spec: its own address, a relay for every other task
        mine = relays.spec_of("worker", 1)
        assert mine["worker"][1] == "127.0.0.1:9" and mine["ps"][0] != spec["ps"][0]
        to_ps = int(mine["ps"][0].split(":")[1])
        # one sender: 5 MB in 0.4 s (the check: within 10% of the set bandwidth)
        start = time.monotonic()
        _send(to_ps, 5_000_000)
        took = sinks["ps"].wait_for(5_000_000) - start
        assert took == pytest.approx(0.4, rel=0.1)
        # two hosts to one: they share its downlink (2 x 2.5 MB in 0.4 s); at the same time the
        # PS sends to worker 0 over the other direction of the links, in its own 0.2 s
        w0_to_ps = int(relays.spec_of("worker", 0)["ps"][0].split(":")[1])
        ps_to_w0 = int(relays.spec_of("ps", 0)["worker"][0].split(":")[1])
        # Never faster than the links allow, in any try; the slack above is for a loaded machine
        # (CI runs TensorFlow tests beside this one) and still tells the wrong models apart: an
        # unshared downlink would take 0.2 s for both, half duplex 0.6 s for both and 0.4 s back.
        # A try that the test beside it slowed past that (0.81 s for both once in a rehearsal) is
        # made again, up to three in all: a wrong model is slow or fast in every one.
        tries = []
        for k in range(3):
            start = time.monotonic()
            senders = [
                threading.Thread(target=_send, args=(port, n))
                for port, n in ((to_ps, 2_500_000), (w0_to_ps, 2_500_000), (ps_to_w0, 2_500_000))
            ]
            for t in senders:
                t.start()
            for t in senders:
                t.join()
            both = sinks["ps"].wait_for(5_000_000 * (k + 2)) - start
            back = sinks["w0"].wait_for(2_500_000 * (k + 1)) - start
            assert both >= 0.38 and back >= 0.19, (both, back)
            tries.append((both, back))
            if both < 0.5 and back < 0.3:
                break
        assert tries[-1][0] < 0.5 and tries[-1][1] < 0.3, tries
    finally:
        relays.close()
        for s in sinks.values():
            s.close()
    # closed: no relay listens any more, and their threads end
    with pytest.raises(OSError):
        _send(to_ps, 1)
    deadline = time.monotonic() + 5
    while (
        any(t.name.startswith("tfsched-relay") for t in threading.enumerate()) and time.monotonic() < deadline
    ):
        time.sleep(0.01)
    assert not [t.name for t in threading.enumerate() if t.name.startswith("tfsched-relay")]


def test_a_connection_is_told_apart_by_the_process_that_opened_it():
    """``/proc`` says which process holds a loopback connection's other end: this one, or a child."""
    import os
    import subprocess
    import sys

    from tfsched.bench.relay import loopback_socket_inode, socket_owner

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(2)
    port = listener.getsockname()[1]
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import socket, sys; s = socket.create_connection(('127.0.0.1', {port})); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
    )
    mine = socket.create_connection(("127.0.0.1", port))
    try:
        owners = []
        for _ in range(2):
            conn, (_, peer_port) = listener.accept()
            with conn:
                inode = loopback_socket_inode(peer_port, port)
                assert inode is not None
                owners.append(socket_owner(inode, [os.getpid(), child.pid]))
        # one is this process's, the other the child's (whichever connected first)
        assert sorted(owners) == sorted([os.getpid(), child.pid])
        assert socket_owner(inode, [os.getpid() + 10**7]) is None  # no such process
        assert loopback_socket_inode(port, port) is None  # no such connection
    finally:
        mine.close()
        child.stdin.close()
        child.wait(timeout=10)
        listener.close()


def test_shared_relays_pace_each_connection_through_the_links_of_the_task_that_opened_it():
    """TensorFlow 2's coordinator hands every task one cluster spec: the shared relays name them,
    and pace what a connection carries through the links of the task whose process opened it."""
    import os

    sinks = [_Sink(), _Sink()]
    spec = {"ps": [s.addr for s in sinks], "worker": ["127.0.0.1:9"]}
    me = {os.getpid(): ("worker", 0)}
    owner = {}
    relays = RelayedSpec(spec, 100e6, pids=lambda: owner)  # 12.5 MB/s a link, each way
    try:
        shared = relays.shared_spec
        assert shared == relays.shared_spec and set(shared) == {"ps", "worker"}
        assert all(a != b for a, b in zip(shared["ps"], spec["ps"], strict=True))
        ports = [int(a.split(":")[1]) for a in shared["ps"]]

        def to_both(nbytes: int, total: int) -> float:
            """This process sends ``nbytes`` to each PS at once; how long until each has ``total``.
            The connections stay open until then, as gRPC's do (a closed one has no process)."""
            conns = [socket.create_connection(("127.0.0.1", port)) for port in ports]
            try:
                start = time.monotonic()
                senders = [threading.Thread(target=c.sendall, args=(b"x" * nbytes,)) for c in conns]
                for t in senders:
                    t.start()
                for t in senders:
                    t.join()
                return max(s.wait_for(total) for s in sinks) - start
            finally:
                for c in conns:
                    c.close()

        # not a task: the driver, whose side is unshaped: each PS's downlink alone, 2.5 MB in 0.2 s
        driver = to_both(2_500_000, 2_500_000)
        # a task (this process as worker 0): both connections share its uplink, 0.4 s
        owner.update(me)
        task = to_both(2_500_000, 5_000_000)
        # the slack above is for a loaded machine, as in the test of the relays for each pair
        assert 0.19 <= driver < 0.3, driver
        assert 0.38 <= task < 0.5, task
    finally:
        relays.close()
        for s in sinks:
            s.close()


class _Echo(_Sink):
    """A TCP server that sends back what it reads."""

    def _read(self, conn):
        with conn:
            while data := conn.recv(1 << 16):
                conn.sendall(data)


def _round_trips(port: int, count: int = 3) -> list[float]:
    """The seconds each of ``count`` pings to an echo at ``port`` took to come back."""
    trips = []
    with socket.create_connection(("127.0.0.1", port)) as s:
        for _ in range(count):
            start = time.monotonic()
            s.sendall(b"ping")
            assert s.recv(16) == b"ping"
            trips.append(time.monotonic() - start)
    return trips


def test_relays_add_each_links_latency_and_keep_the_bandwidth():
    echo, sink = _Echo(), _Sink()
    spec = {"ps": [echo.addr], "worker": [sink.addr, "127.0.0.1:9"]}
    relays = RelayedSpec(spec, 100e6, latency_s=0.01)  # 12.5 MB/s and 10 ms a link, each way
    try:
        w1 = relays.spec_of("worker", 1)
        to_ps, to_w0 = (int(w1[job][0].split(":")[1]) for job in ("ps", "worker"))
        # a round trip crosses four links (w1's uplink, the PS's downlink, and back): 40 ms
        # (every trip takes the 40 ms; the quickest of three no more than 30 ms past them: a
        # loaded machine may hold up one trip's threads, as it may the session's steps below)
        trips = _round_trips(to_ps)
        assert min(trips) >= 0.04 and min(trips) < 0.04 + 0.03, trips
        # what is on the way is not waited for chunk by chunk: 5 MB take 0.4 s and 20 ms
        start = time.monotonic()
        _send(to_w0, 5_000_000)
        took = sink.wait_for(5_000_000) - start
        assert took == pytest.approx(0.42, rel=0.1)
    finally:
        relays.close()
        echo.close()
        sink.close()
    with pytest.raises(OSError):
        _send(to_ps, 1)


def test_a_task_left_unshaped_adds_no_latency_of_its_own():
    from tfsched.bench.local import LocalCluster
    from tfsched.errors import TfschedError

    echo, sink = _Echo(), _Sink()
    spec = {"ps": [echo.addr], "worker": [sink.addr, "127.0.0.1:9"]}
    relays = RelayedSpec(spec, 100e6, latency_s=0.01, unshaped=[("ps", 0)])  # the workers' alone
    try:
        to_ps = int(relays.spec_of("worker", 1)["ps"][0].split(":")[1])
        # a round trip crosses worker 1's uplink and downlink alone: 20 ms, not 40
        trips = _round_trips(to_ps)
        assert min(trips) >= 0.02 and min(trips) < 0.02 + 0.015, trips
    finally:
        relays.close()
        echo.close()
        sink.close()
    with pytest.raises(TfschedError, match="shaped must name tasks of the cluster"):
        LocalCluster(ps=1, workers=1, bandwidth_bps=1e9, shaped=[("ps", 1)]).__enter__()
    with pytest.raises(TfschedError, match="shaped must name tasks of the cluster"):
        LocalCluster(ps=1, workers=1, shaped=[("ps", 0)]).__enter__()


def test_a_delayed_relay_holds_at_most_a_links_worth():
    from tfsched.bench.relay import _InFlight

    held = _InFlight(limit=10)
    held.put(1.0, b"x" * 10)
    blocked = threading.Thread(target=held.put, args=(2.0, b"y"))
    blocked.start()
    blocked.join(0.1)
    assert blocked.is_alive()  # full: the reader waits, and its sender feels the back pressure
    assert held.get() == (1.0, b"x" * 10)
    blocked.join(1)
    assert not blocked.is_alive() and held.get() == (2.0, b"y")
    held.put(3.0, b"z" * 10)
    held.close()  # the writer has gone: the reader must not wait for room
    held.put(0.0, None)
    assert held.get() == (3.0, b"z" * 10) and held.get() == (0.0, None)


@pytest.mark.tf
@pytest.mark.cluster
def test_a_local_cluster_through_relays():
    import numpy as np
    import tensorflow as tf

    from tfsched.bench.local import LocalCluster

    with LocalCluster(ps=1, workers=2, bandwidth_bps=100e6, vanilla=True) as c:
        assert c.relays is not None
        # the driver reaches the worker through a relay, not at the task's own address
        assert c.target("worker", 0) != f"grpc://{c.spec['worker'][0]}"
        g = tf.Graph()
        with g.as_default():
            with tf.device("/job:ps/task:0"):
                v = tf.compat.v1.get_variable("v", initializer=tf.range(2_500_000, dtype=tf.float32))  # 10 MB
            outs = []
            for w in range(2):
                with tf.device(f"/job:worker/task:{w}"):
                    outs.append(tf.reduce_max(v * 2.0))  # a scalar back to the client
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(c.target("worker", 0), graph=g) as sess:
            sess.run(init)
            sess.run(outs[1])  # connections made
            start = time.perf_counter()
            alone = sess.run(outs[1])
            one = time.perf_counter() - start
            start = time.perf_counter()
            both = sess.run(outs)
            two = time.perf_counter() - start
        # worker 1 pulls 10 MB over the PS's uplink at 12.5 MB/s; two workers share that uplink
        assert 0.8 * 0.9 < one < 0.8 * 1.5
        assert 1.6 * 0.9 < two < 1.6 * 1.5
        assert alone == both[0] == both[1] == np.float32(2 * 2_499_999)
    assert c.relays is None
    # with latency: a worker's pull of a scalar from the PS is a request and an answer, each
    # across two links of 20 ms; the driver's run call and its answer cross the worker's link
    # (another 40 ms)
    with LocalCluster(ps=1, workers=1, bandwidth_bps=1e9, latency_s=0.02, vanilla=True) as c:
        g = tf.Graph()
        with g.as_default():
            with tf.device("/job:ps/task:0"):
                v = tf.compat.v1.get_variable("v", initializer=3.0)
            with tf.device("/job:worker/task:0"):
                out = v * 2.0
            init = tf.compat.v1.global_variables_initializer()
        with tf.compat.v1.Session(c.target("worker", 0), graph=g) as sess:
            sess.run(init)
            sess.run(out)
            took = []
            for _ in range(3):
                start = time.perf_counter()
                assert sess.run(out) == 6.0
                took.append(time.perf_counter() - start)
        assert 0.12 <= min(took) < 0.12 + 0.05
    with pytest.raises(Exception, match="latency is a positive time on shaped links"):
        LocalCluster(ps=1, workers=1, latency_s=0.02).__enter__()


@pytest.mark.tf
@pytest.mark.cluster
def test_bench_on_shaped_loopback(tmp_path):
    """What a user without root runs: the bench's hosts on loopback, their links shaped by relays."""
    import json

    out = tmp_path / "bench.json"
    p = cli(
        *BENCH_SEQ32,
        "--modes",
        "baseline,tao+pc+host",
        "--shaped-loopback",
        "--latency",
        "1ms",
        "-o",
        str(out),
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["config"]["links"] == "relays" and data["config"]["bandwidth"] == "0.2 Gbit/s"
    assert data["config"]["latency"] == "1 ms"
    assert "0.2 Gbit/s, 1 ms latency, shaped by relays on loopback" in out.with_suffix(".md").read_text()
    for r in data["modes"]:
        assert r["steps"] == 6 and r["throughput_steps_per_s"] > 0 and r["predicted_s"] > 0
        # seq32 pulls 8.4 MB to each worker a step: 16.8 MB over the PS's uplink of 25 MB/s
        # take 0.67 s at least (unshaped loopback moves them in a few ms)
        assert r["iteration_mean_s"] > 0.67


@pytest.mark.tf
@pytest.mark.cluster
def test_demo_trains_on_relayed_links_where_namespaces_cannot_be_made(monkeypatch, capsys):
    from tfsched.bench import netns
    from tfsched.demo import run_demo

    monkeypatch.setattr(netns, "available", lambda: "network namespaces need root")
    modes = ("baseline", "tao+pc+host", "tao+pc+host+ready+cross")
    out = run_demo(model="seq32", bandwidth_bps=200e6, steps=3, rounds=1, modes=modes)
    said = capsys.readouterr().out
    # the lines as rich folds them to the terminal's width, unfolded
    flat = " ".join(said.split())
    assert "0.2 Gbit/s link shaped by relays in user space" in flat
    # TicTac's straggler effect of each mode, and why one window per task has more
    for mode, r in out["measured"].items():
        assert f"{'vanilla' if mode == 'baseline' else mode} {r['straggler']:.3f}" in flat
    assert "tao+pc+host, tao+pc+host+ready+cross serve the workers in turn: they stagger them" in flat
    assert set(out["measured"]) == set(modes) and "tao+pc+host" in out["predicted"]
    # across the barrier, the round's middle step (no pipeline to fill before it or empty after)
    crossed = out["measured"]["tao+pc+host+ready+cross"]
    assert crossed["steady_step_s"] == pytest.approx(max(crossed["iterations"][1]))
    assert "once the pipeline is full (a round's steps but its first" in flat
    assert f"tao+pc+host+ready+cross {crossed['steady_step_s']:.4f} s (" in flat
    # the same links as the prediction's: the measured step is the predicted one's order of size
    for mode, r in out["measured"].items():
        assert 0.5 < r["iteration_mean_s"] / r["predicted_s"] < 2.0, mode


def test_namespaces_are_tried_before_they_are_said_to_be_available(monkeypatch):
    """Root and iproute2 are not enough (a container may deny namespaces): the check makes one."""
    from tfsched.bench import netns

    monkeypatch.setattr(netns.os, "geteuid", lambda: 0)
    monkeypatch.setattr(netns.shutil, "which", lambda name: f"/sbin/{name}")
    calls = []

    def denied(*args, ns=None, check=True):
        calls.append(args)
        if args[:3] == ("ip", "netns", "add"):
            raise netns.TfschedError("network emulation: `ip netns add x` failed: Operation not permitted")

    monkeypatch.setattr(netns, "_ip", denied)
    netns.available.cache_clear()
    try:
        assert netns.available() == "`ip netns add x` failed: Operation not permitted"
        assert len(calls) == 1  # nothing made, nothing to remove
    finally:
        netns.available.cache_clear()


@pytest.mark.skipif(os.geteuid() != 0, reason="drops root's privileges to a user's (needs root)")
def test_a_user_without_root_is_told_namespaces_need_root_not_that_iproute2_is_missing():
    """A user's PATH has no sbin, where ip and tc are: the check for root comes first, so a user
    is not told to install what is installed. Run for real, in a child that became nobody with a
    user's PATH."""
    from tfsched.bench import netns

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: nobody, with a user's PATH; says what the check says
        try:
            signal.alarm(30)  # ends it, should anything hang
            os.close(read)
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            os.environ["PATH"] = "/usr/bin:/bin"
            netns.available.cache_clear()
            os.write(write, (netns.available() or "available").encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        assert select.select([f], [], [], 60)[0], "the child said nothing in 60 s"
        said = f.read()
    os.waitpid(pid, 0)
    assert said == "network namespaces need root"
