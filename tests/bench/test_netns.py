"""The emulated multi-host cluster: real namespaces, veths and tc, cleaned up afterwards."""

import os
import subprocess
import sys
import time

import pytest

from tests.helpers import BENCH_SEQ32, benchmark_script, cgroups_unavailable, cli
from tfsched.bench import hostcpu, netns
from tfsched.bench.predict import FIT_LOW
from tfsched.bench.stagger import PHASES

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.skipif(
        netns.available() is not None, reason=f"no network namespaces here: {netns.available()}"
    ),
]


CGROUPS = cgroups_unavailable() is None


def _leftovers(tag: str) -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    out += subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    out += subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if f"{netns.PREFIX}{tag}" in line]


@pytest.mark.tf
def test_cluster_starts_trains_and_leaves_nothing_behind():
    import tensorflow as tf

    from tfsched.models import build_graph

    with netns.EmulatedCluster(ps=1, workers=2, bandwidth_bps=1e9, vanilla=True) as c:
        tag = c._tag
        assert len(_leftovers(tag)) >= 3  # the namespaces exist while it runs
        built = build_graph("seq32")
        with tf.compat.v1.Session(c.target("worker", 0), graph=built.graph) as sess:
            sess.run(built.init_op)
            loss = sess.run([built.train_op, built.loss])[1]
        assert loss > 0
    assert _leftovers(tag) == []


@pytest.mark.tf
def test_a_dead_hosts_stand_in_answers_in_its_namespace_and_goes_with_the_cluster():
    """``bench.standin`` at a dead task's address on its host: the session whose master it was
    fails at once, where it waited for its run's deadline."""
    import tensorflow as tf

    from tfsched.models import build_graph

    with netns.EmulatedCluster(ps=1, workers=2, bandwidth_bps=1e9, vanilla=True) as c:
        tag = c._tag
        built = build_graph("seq32", worker_task=1)
        sess = tf.compat.v1.Session(c.target("worker", 1), graph=built.graph)
        sess.run(built.init_op)
        c.procs[("worker", 1)].kill()
        t = time.monotonic()
        with pytest.raises(tf.errors.FailedPreconditionError, match="/job:worker/task:1 at .* is gone"):
            sess.run(built.train_op, options=tf.compat.v1.RunOptions(timeout_in_ms=600_000))
        assert time.monotonic() - t < 15
        assert c.standing_in() == [("worker", 1)]
        standin = c._standins[("worker", 1)]
        with pytest.raises(tf.errors.FailedPreconditionError):
            sess.close()
    assert standin.poll() is not None
    assert _leftovers(tag) == []


def test_failure_while_starting_cleans_up(monkeypatch):
    def boom(self):
        raise RuntimeError("a task failed to start")

    monkeypatch.setattr(netns.EmulatedCluster, "_start", boom)
    c = netns.EmulatedCluster(ps=1, workers=1)
    with pytest.raises(RuntimeError):
        c.__enter__()
    assert _leftovers(c._tag) == []


RECEIVER = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5201)); s.listen(1)
print("listening", flush=True)
c, _ = s.accept(); total = 0; first = None
while True:
    b = c.recv(1 << 16)
    if not b: break
    if first is None: first = time.perf_counter()
    total += len(b)
print(total, time.perf_counter() - first, flush=True)
"""

SENDER = """
import socket, sys
c = socket.create_connection((sys.argv[1], 5201)); c.sendall(b"x" * int(sys.argv[2])); c.close()
"""


# the receiver is a Python process that a test beside it can keep from the cores: it read 14%
# and 18% low in a rehearsal of the eighty-eighth session (the first such failure), where the
# tests beside it had their clusters' tasks forked, so busier in their first seconds
@pytest.mark.alone
@pytest.mark.parametrize("rate", [50e6, 200e6])
def test_shaped_link_measures_its_bandwidth(rate):
    nbytes = int(rate / 8 * 1.5)  # 1.5 s of data
    with netns.EmulatedCluster(ps=1, workers=1, bandwidth_bps=rate, start_tasks=False) as c:
        (ns_a, addr_a), (ns_b, _) = c.hosts[("ps", 0)], c.hosts[("worker", 0)]
        rx = subprocess.Popen(
            ["ip", "netns", "exec", ns_a, sys.executable, "-c", RECEIVER, addr_a],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert rx.stdout.readline().strip() == "listening"
        t = time.perf_counter()
        subprocess.run(
            ["ip", "netns", "exec", ns_b, sys.executable, "-c", SENDER, addr_a, str(nbytes)],
            check=True,
            timeout=60,
        )
        total, seconds = rx.stdout.readline().split()
        rx.wait(timeout=30)
        assert int(total) == nbytes and time.perf_counter() - t < 30
    measured = nbytes * 8 / float(seconds)
    assert abs(measured - rate) / rate < 0.10, f"measured {measured / 1e6:.1f} Mbit/s for {rate / 1e6:.0f}"


def test_a_host_that_fails_half_built_is_removed_too(monkeypatch):
    shaped = []
    real = netns.shape

    def shape(dev, *args, **kw):
        if len(shaped) == 3:  # the second host's uplink: its namespace and veth exist already
            raise netns.TfschedError("network emulation: tc refused")
        shaped.append(dev)
        real(dev, *args, **kw)

    monkeypatch.setattr(netns, "shape", shape)
    c = netns.EmulatedCluster(ps=1, workers=1, bandwidth_bps=1e9, start_tasks=False)
    with pytest.raises(netns.TfschedError, match="tc refused"):
        c.__enter__()
    assert len(shaped) == 3 and c._tag and _leftovers(c._tag) == []


def _ours() -> list[str]:
    """This process's namespaces (another test's come and go beside them under ``pytest -n``)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return [ns for ns in listed if ns.startswith(f"{netns.PREFIX}{netns.run_tag()}")]


def test_latency_on_the_namespaces_links_or_one_clear_refusal():
    """netem adds the latency where the kernel has it; where it does not (this project's machine),
    the cluster says so and names the relays, which add it in user space, before making anything."""
    why = netns.latency_unavailable()
    if why is None:
        with netns.EmulatedCluster(
            ps=1, workers=1, bandwidth_bps=1e9, latency_s=0.005, start_tasks=False
        ) as c:
            ns, _ = c.hosts[("worker", 0)]
            uplink = subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"],
                capture_output=True,
                text=True,
            ).stdout
            qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
            downlinks = [line for line in qdiscs.splitlines() if f"{netns.PREFIX}{c._tag}h" in line]
        assert "netem" in uplink and "delay 5ms" in uplink and "qdisc tbf" in uplink
        assert sum("netem" in line and "delay 5ms" in line for line in downlinks) == 2
        return
    assert "netem" in why
    assert _ours() == []
    c = netns.EmulatedCluster(ps=1, workers=1, bandwidth_bps=1e9, latency_s=0.005, start_tasks=False)
    with pytest.raises(netns.TfschedError, match=r"cannot add latency .*netem.*--shaped-loopback"):
        c.__enter__()
    assert _ours() == []
    for command in ("bench", "tune"):  # at once: before a batch size is measured or a graph built
        p = cli(command, "--model", "seq32", "--latency", "1ms", timeout=60)
        assert p.returncode == 1 and p.stderr.count("\n") == 1, p.stderr
        assert "netem is missing" in p.stderr and "--shaped-loopback" in p.stderr


@pytest.mark.parametrize("queue_s, shown", [(None, "lat 400ms"), (0.01, "lat 10ms")])
def test_each_links_shaper_queues_what_was_asked(queue_s, shown):
    kw = {} if queue_s is None else {"queue_s": queue_s}
    with netns.EmulatedCluster(ps=1, workers=1, bandwidth_bps=100e6, start_tasks=False, **kw) as c:
        ns, _ = c.hosts[("worker", 0)]
        uplink = subprocess.run(
            ["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"], capture_output=True, text=True
        ).stdout
        qdiscs = subprocess.run(["tc", "qdisc", "show"], capture_output=True, text=True).stdout
        downlinks = [line for line in qdiscs.splitlines() if f"{netns.PREFIX}{c._tag}h" in line]
    assert "qdisc tbf" in uplink and shown in uplink
    assert len(downlinks) == 2 and all("qdisc tbf" in line and shown in line for line in downlinks)
    with pytest.raises(netns.TfschedError, match="queue must be a positive time"):
        with netns.EmulatedCluster(ps=1, workers=1, bandwidth_bps=100e6, start_tasks=False, queue_s=0):
            pass
    for bad, why in (
        (("--queue", "0ms"), "must be a positive time"),
        (("--queue", "5ms", "--loopback"), "--loopback has neither"),
        (("--latency", "1ms", "--loopback"), "--loopback has neither"),
        (("--queue", "5ms", "--shaped-loopback"), "--shaped-loopback's relays have none"),
        (("--loopback", "--shaped-loopback"), "choose one"),
    ):
        p = cli("bench", "--model", "seq32", *bad, timeout=60)
        assert p.returncode != 0 and why in p.stderr and "Traceback" not in p.stderr


def test_a_link_tc_cannot_shape_as_asked_is_refused_before_anything_is_made():
    """tc takes a rate under a kilobit, or a queue of more bytes than tbf's 32 bits, without a
    word and shapes another link: at 100 Gbit/s the 400 ms queue came out at 56.4 ms, at 8 bit/s
    the burst at 57 bytes (no packet passes). The edges that hold are shaped as asked; past them,
    one error, and no namespace is made."""
    from tfsched.units import LINK_BPS_RANGE

    def uplink(**kw) -> str:
        with netns.EmulatedCluster(ps=1, workers=1, start_tasks=False, **kw) as c:
            ns, _ = c.hosts[("worker", 0)]
            return subprocess.run(
                ["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"],
                capture_output=True,
                text=True,
            ).stdout

    assert "rate 1Kbit burst 32Kb lat 400ms" in uplink(bandwidth_bps=LINK_BPS_RANGE[0])
    # the longest queue a gigabit link holds, as the refusal below says it
    with pytest.raises(netns.TfschedError, match="at this bandwidth it holds at most 34.3 s"):
        netns.check_shaping(1e9, 35.0)
    assert "rate 1Gbit burst 500000b lat 34.3s" in uplink(bandwidth_bps=1e9, queue_s=34.3)

    assert _ours() == []
    for kw, why in (
        (dict(bandwidth_bps=100e9), "more than tc's tbf holds"),
        (dict(bandwidth_bps=1e9, queue_s=35.0), "more than tc's tbf holds"),
        (dict(bandwidth_bps=999.0), "an emulated link is shaped to 1 kbit/s to 8 Tbit/s, got 999 bit/s"),
    ):
        with pytest.raises(netns.TfschedError, match=why):
            uplink(**kw)
    assert _ours() == []
    # from the commands: one line, at once (bench before its batch size is measured, tune before a
    # graph is built, demo before its analysis)
    for command, args, why in (
        ("bench", ("--bandwidth", "100Gbit"), "Invalid value for --bandwidth: a link's queue of 0.4 s"),
        ("bench", ("--queue", "35s"), "Invalid value for --bandwidth with --queue: a link's queue of 35 s"),
        ("bench", ("--bandwidth", "1bit", "--shaped-loopback"), "shaped to 1 kbit/s to 8 Tbit/s"),
        ("tune", ("--bandwidth", "100Gbit"), "more than tc's tbf holds"),
        ("demo", ("--bandwidth", "1bit"), "shaped to 1 kbit/s to 8 Tbit/s, got 1 bit/s"),
    ):
        p = cli(command, "--model", "seq32", *args, timeout=30)
        assert p.returncode == 2 and p.stderr.count("\n") == 1 and why in p.stderr, p.stderr
    # a run's hosts share a /24: a 254th task's address (10.213.<n>.256) failed once 253 were made
    p = cli("bench", "--model", "seq32", "--workers", "253", "--batch-size", "2", timeout=60)
    assert (
        p.returncode == 1
        and "Error: the emulated hosts share one /24 subnet: at most 253 tasks, got 254" in p.stderr
    )
    assert _ours() == []
    # a prediction takes any bandwidth: only a shaped link is bounded
    p = cli("demo", "--model", "seq32", "--bandwidth", "1bit", "--no-train", timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.tf
def test_bench_tuned_mode_needs_a_tune_file_of_this_run(tmp_path):
    tune = _tune_file(tmp_path, partition=0, credit=9)
    out = tmp_path / "bench.json"
    for args, why in (
        (("--modes", "baseline,tuned"), "mode tuned needs --tuned FILE"),
        (("--tuned", str(tune)), "add it to --modes"),
        (
            ("--modes", "baseline,tuned", "--tuned", str(tune), "--workers", "4"),
            f"{tune}: tuned for workers 2",
        ),
        (("--modes", "baseline,tuned", "--tuned", str(tmp_path / "none.json")), "cannot read"),
        (
            (
                "--modes",
                "baseline,tuned,tio+c9",
                "--tuned",
                str(tune),
                "--workers",
                "2",
                "--batch-size",
                "4",
                "--bandwidth",
                "200Mbit",
            ),
            "listed too",
        ),
    ):
        p = cli("bench", "--model", "seq32", *args, "-o", str(out), timeout=60)
        lines = [line for line in p.stderr.splitlines() if line.strip()]
        assert p.returncode != 0 and len(lines) == 1 and why in lines[0], p.stderr[-2000:]
        assert not out.exists()


def test_a_push_window_that_would_hold_none_of_the_models_pushes_is_refused_before_the_run(tmp_path):
    """Seq-32's 32 weight gradients are 65,536 parameters: under +p20000 each is cut into four
    slices of 16,384, all under the 20,000 that a credit of 160,000 acknowledges (credit / 8), as
    are its two small pushes, so a +wN window there would count nothing; with +a16 (16,384 and
    more: the pass acknowledges nothing smaller) it counts the slices."""
    from tfsched.bench.run import acknowledged_pushes, parse_mode
    from tfsched.graph import load_comm_graph
    from tfsched.models import build_graph

    built = build_graph("seq32", batch_size=4)
    path = tmp_path / "seq32.pb"
    path.write_bytes(built.graph_def().SerializeToString())
    graph = load_comm_graph(str(path), fetches=built.fetches)
    sizes = sorted(t.bytes for t in graph.transfers if t.kind == "push")
    assert sizes == [4, 4 * 2_560] + [4 * 65_536] * 32, sizes
    assert acknowledged_pushes(graph, parse_mode("tio+p20000+c160000+w20000")) == 0
    assert acknowledged_pushes(graph, parse_mode("tio+p20000+c160000+a16+w20000")) == 4 * 32
    assert acknowledged_pushes(graph, parse_mode("tio+c160000+w20000")) == 32

    out = tmp_path / "bench.json"
    start = time.monotonic()
    p = cli(*BENCH_SEQ32, "--modes", "baseline,tio+p20000+c160000+w20000", "-o", str(out), timeout=120)
    lines = [line for line in p.stderr.splitlines() if line.strip()]
    assert p.returncode != 0 and len(lines) == 1, p.stderr[-2000:]
    assert "+w20000 would hold no push of seq32" in lines[0] and "Traceback" not in p.stderr, lines
    assert "once cut into +p20000 slices" in lines[0]
    assert not out.exists() and not out.with_suffix(".md").exists()
    assert time.monotonic() - start < 60  # before any cluster was started


def _tune_file(where, *, partition: int, credit: int, host_cores: float = 0):
    """What ``tfsched tune -o`` writes for the 3-step bench run below (tio, 2 workers, 200 Mbit/s;
    on hosts of ``host_cores`` cores of their own, if any)."""
    import json

    config = {"model": "seq32", "graph": None, "workers": 2, "ps": 1, "bandwidth": "0.2 Gbit/s"}
    if host_cores:
        config["host_cores"] = host_cores
    doc = {
        "schema": "tfsched.tune/1",
        "config": {**config, "algorithm": "tio", "host_credit": False, "batch_size": 4},
        "best": {"partition": partition, "credit": credit},
    }
    path = where / "tune.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.tf
def test_bench_command_writes_every_field(tmp_path, monkeypatch):
    import json

    # the results inside the traces directory the run makes, as benchmarks/repredict.py reads them
    out = tmp_path / "traces" / "bench.json"
    p = cli(
        *BENCH_SEQ32,
        "--modes",
        "baseline,tio,tuned,tao",
        # a tuner's best setting on this run: tio with partition 20,000 and credit 40,000
        "--tuned",
        str(_tune_file(tmp_path, partition=20_000, credit=40_000, host_cores=1 if CGROUPS else 0)),
        "--queue",
        "50ms",
        # every task in a CPU cgroup of its own (bench.hostcpu), where this machine has them
        *(["--host-cores", "1"] if CGROUPS else []),
        "--traces",
        str(tmp_path / "traces"),
        "--trace-steps",
        "2",
        "-o",
        str(out),
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["config"]["bandwidth"] == "0.2 Gbit/s" and data["config"]["workers"] == 2
    from tfsched.enforce.build import current_build_id

    assert data["tfsched_build"] == current_build_id()  # the build its tasks loaded
    assert data["config"]["trace_steps"] == 2
    if CGROUPS:
        md = out.with_suffix(".md").read_text()
        assert (
            data["config"]["host_cores"] == 1
            and "1 PS x 2 workers, 0.2 Gbit/s, links queueing at most 50 ms, each host 1 core of its own"
            in md
        )
        assert "Every task had 1 core of its own" in md and "At the cores' limit" not in md
    # the machine's share of the cores, reckoned from the lone trace's mean op seconds, and each
    # task's part of it where it had cores of its own (predict.annotate)
    base = data["modes"][0]
    assert base["ops_work"] == "traced" and base["machine_slots"] > 0
    cores = os.cpu_count()
    assert base["host_slots"] == (pytest.approx(base["machine_slots"] / cores) if CGROUPS else None)
    # where each task had cores of its own, from what the workers' own processes spent, if the
    # ticks of their CPU counted more than their bytes took (predict.machine_slots_from_task_cpu);
    # from the op times only where the bytes, as reckoned, took all the machine's CPU too (a toy
    # model's bytes are most of its CPU: once in CI, predict.ops_cpu_s)
    took_all = base["ops_cpu_s_per_step"] <= 0
    assert base["slots_from"] in (
        ("the workers' CPU", "the machine's CPU") if CGROUPS else ("the machine's CPU",)
    ) + (("the op times",) if took_all else ()), base
    assert not (took_all and base["slots_from"] == "the machine's CPU"), base
    # and the table's reader is told (bench.results.slots_lines)
    table = out.with_suffix(".md").read_text()
    assert f"ran {base['machine_slots']:.2f} lone-worker ops at once" in table
    assert f"reckoned from {base['slots_from']}" in table
    for r in data["modes"]:
        # every task's process's CPU over the timed rounds, part of the machine's: the kernel
        # samples the machine's in 10 ms ticks and scales a process's to its exact run time, so
        # over 3 short steps they agree only to a few ticks (one run: 1.35 s against 1.30 s)
        per_task = r["task_cpu_s_per_step"]
        assert set(per_task) == {"ps:0", "worker:0", "worker:1"} and min(per_task.values()) >= 0, r
        assert sum(per_task.values()) <= 1.15 * r["cpu_s_per_step"] + 0.03, r
    assert (
        data["config"]["queue"] == "50 ms"
        and "links queueing at most 50 ms" in out.with_suffix(".md").read_text()
    )
    assert [r["mode"] for r in data["modes"]] == ["baseline", "tio", "tio+p20000+c40000", "tao"]
    assert data["config"]["tuned"] == {"file": str(tmp_path / "tune.json"), "mode": "tio+p20000+c40000"}
    for r in data["modes"]:
        for key in (
            "steps",
            "throughput_steps_per_s",
            "vs_baseline",
            "p50_s",
            "p95_s",
            "mean_s",
            "iteration_mean_s",
            "p95_over_p50",
            "iteration_p95_over_p50",
            "straggler",
            "efficiency_E",
            "lower_bound_s",
            "upper_bound_s",
            "floor_s",
            "predicted_s",
            "prediction_error",
            "finish_by_rank_s",
            "predicted_finish_by_rank_s",
            "worker_weight",
        ):
            assert r[key] is not None, key
        # the two workers by when they finished, measured and simulated; the last is the step
        assert len(r["finish_by_rank_s"]) == 2 and r["finish_by_rank_s"][0] <= r["finish_by_rank_s"][1]
        assert r["predicted_finish_by_rank_s"][-1] == pytest.approx(r["simulated_s"])
        # the prediction: the simulator's step, or the CPU a baseline step spent over the cores
        # where that is longer (predict.machine_cpu_floor), with the messages a mode adds at the
        # measured CPU of one: Seq-32's tensors of 65,536 parameters cut into slices of 20,000,
        # each acknowledged; an order alone adds none. And the bytes of the tensors it cut, each
        # put back together whole, at the measured CPU of copying one (run.copy_cpu_s_per_byte)
        base = data["modes"][0]
        cut = r["mode"] == "tio+p20000+c40000"
        assert (r["added_messages"] > 0) == cut and (r["reassembled_bytes"] > 0) == cut, r["mode"]
        assert r["reassembled_bytes"] % (65_536 * 4) == 0, r["reassembled_bytes"]
        assert 0 < base["copy_cpu_s_per_byte"] < 1e-8
        # every slice acknowledged, each at what the bench measured one to cost alone
        # (run.ack_cpu_s; an acknowledgement at least a message, predict.machine_cpu_floor)
        assert (r["acknowledgements"] > 0) == cut and r["acknowledgements"] <= r["added_messages"]
        assert 0 <= base.get("ack_cpu_s", 0.0) < 0.05
        per_ack = max(0.0, base.get("ack_cpu_s", 0.0) - base["comm_cpu_s_per_message"])
        assert r["cpu_floor_s"] == pytest.approx(
            (
                base["cpu_s_per_step"]
                + r["added_messages"] * base["comm_cpu_s_per_message"]
                + r["acknowledgements"] * per_ack
                + r["reassembled_bytes"] * base["copy_cpu_s_per_byte"]
            )
            / os.cpu_count()
        )
        assert r["predicted_s"] == pytest.approx(max(r["simulated_s"], r["cpu_floor_s"]))
        assert r["steps"] == 6 and r["throughput_steps_per_s"] > 0 and r["p95_s"] >= r["p50_s"] > 0
        assert 0 <= r["straggler"] < 1 and r["lower_bound_s"] <= r["upper_bound_s"]
        # no simulated order beats the floor (the driver's call included, as in every prediction)
        assert r["floor_s"] <= r["predicted_s"] + 1e-9 and r["floor_by"]
        # the prediction is compared with the slowest worker of each synchronized step
        assert len(r["iterations"]) == 3 and all(len(it) == 2 for it in r["iterations"])
        assert r["iteration_mean_s"] == pytest.approx(sum(max(it) for it in r["iterations"]) / 3, rel=1e-4)
        assert r["iteration_mean_s"] >= r["mean_s"]
        assert r["predicted_s"] == pytest.approx(r["iteration_mean_s"] * (1 + r["prediction_error"]))
        # the machine's CPU over the timed rounds: some per step, never more than it had
        assert r["cpu_s_per_step"] > 0 and 0 < r["cpu_busy"] <= 1
        # every worker of the traced steps: how far apart they reached each phase (bench.stagger)
        assert set(r["stagger"]) == set(PHASES) and all(0 <= r["stagger"][p] < 1 for p in PHASES), r
    # what moving a byte costs the machine, measured once with the baseline
    assert data["modes"][0]["comm_cpu_s_per_byte"] > 0 and "comm_cpu_s_per_byte" not in data["modes"][1]
    assert 0 < data["modes"][0]["comm_cpu_s_per_message"] < 1
    # and the shares of it the sending PS's process and the receiving worker's spent
    send, recv = data["modes"][0]["comm_cpu_shares"]
    assert 0 <= send and 0 <= recv and 0 < send + recv <= 1 and "comm_cpu_shares" not in data["modes"][1]
    # and where a message's is spent: the PS's part and worker 0's, all of it
    send, recv = data["modes"][0]["comm_cpu_message_shares"]
    assert 0 <= send and 0 <= recv and send + recv == pytest.approx(1, abs=1e-3)
    # the sizes in force are in the file
    assert "partition" not in data["modes"][0]
    assert (data["modes"][2]["partition"], data["modes"][2]["credit"]) == (20_000, 40_000)
    md = out.with_suffix(".md").read_text()
    # the simulated links shared as unequally as the baseline's workers staggered, for every mode
    base = data["modes"][0]
    assert {r["worker_weight"] for r in data["modes"]} == {base["worker_weight"]}
    assert FIT_LOW <= base["worker_weight"] <= 1 and f"w = {base['worker_weight']:.2f} (1: evenly)" in md
    if FIT_LOW < base["worker_weight"] < 1:  # fitted, not at an end: the simulated stagger is the measured
        measured, simulated = (
            base[k][0] / base[k][1] for k in ("finish_by_rank_s", "predicted_finish_by_rank_s")
        )
        # to the bisection's step, or a step of the seeded runs' stagger where their order changes
        assert simulated == pytest.approx(measured, abs=0.1)
    assert f"`tio+p20000+c40000`: the best setting of `tfsched tune` ({tmp_path / 'tune.json'})." in md
    assert "| baseline |" in md and "| tio |" in md
    assert "| mode | last parameter in | computed | last gradient out | step ended |" in md
    # TAO ordered from op times traced on this cluster, and says so
    assert data["modes"][3]["ordered_from"] and not any("ordered_from" in r for r in data["modes"][:3])
    assert "TAO ordered from worker 0's op times, traced alone before the rounds." in md
    # the simulator laid out the partition graphs the traced baseline ran
    laid = data["modes"][0]["simulated_graph"]
    assert (
        laid["from"] == "ran"
        and laid["transfers"] > 0
        and all(r["simulated_graph"] == laid for r in data["modes"])
    )
    assert f"Simulated on the partition graphs the traced baseline ran ({laid['transfers']} transfers" in md
    png = out.with_suffix(".png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    from tfsched.tracing.trace import Trace

    # every traced step of a trace recorded the same transfers: none lost at a step's start
    written = sorted((tmp_path / "traces").glob("*.trace.json"))
    assert {f.name for f in written} >= {"baseline.trace.json", "tao.trace.json", "baseline.alone.trace.json"}
    for f in written:
        t = Trace.load(str(f))
        edges = [sorted(x.edge for x in t.transfers if x.step == k) for k in range(t.steps)]
        assert edges[0] and all(e == edges[0] for e in edges), f.name
    # --traces: every mode's traced steps (--trace-steps), self-contained, and viewable.
    for mode in ("baseline", "tio", "tio+p20000+c40000", "tao"):
        trace = Trace.load(str(tmp_path / "traces" / f"{mode}.trace.json"))
        assert trace.meta["mode"] == mode and trace.meta["model"] == "seq32"
        assert trace.partition_graphs and trace.transfers and trace.steps == 2
        assert len(trace.step_times_us) == 2 and {t.step for t in trace.transfers} == {0, 1}
        # ... and worker 1's of the same steps, its own transfers
        other = Trace.load(str(tmp_path / "traces" / f"{mode}.worker-1.trace.json"))
        assert other.meta["mode"] == mode and other.meta["worker"] == 1 and other.steps == 2
        assert {t.dst for t in other.transfers if "/job:worker" in t.dst} == {
            "/job:worker/replica:0/task:1/device:CPU:0"
        }
    # The baseline's worker 0 alone, the op times the prediction uses.
    alone = Trace.load(str(tmp_path / "traces" / "baseline.alone.trace.json"))
    assert alone.meta["alone"] and alone.steps == 2 and len(alone.step_times_us) == 2
    assert {o.step for o in alone.ops} == {0, 1}
    # ... and the op times TAO's order came from, traced before the rounds
    ordered = Trace.load(str(tmp_path / "traces" / "order.alone.trace.json"))
    assert ordered.meta["alone"] and ordered.steps == 2 and ordered.ops and ordered.meta["model"] == "seq32"
    # The scheduled run's graph carries the gates: its trace shows them.
    assert any(o.op == "TfschedGate" for o in trace.ops)
    view = tmp_path / "tio.chrome.json"
    v = cli("viz", str(tmp_path / "traces" / "tio.trace.json"), "-o", str(view), timeout=300)
    assert v.returncode == 0, v.stderr[-2000:]
    assert json.loads(view.read_text())["traceEvents"]
    # both workers' traced steps on one time axis: the same steps, each worker a process
    both = [str(tmp_path / "traces" / f"tio{w}.trace.json") for w in ("", ".worker-1")]
    v = cli("viz", *both, "-o", str(view), timeout=300)
    assert v.returncode == 0, v.stderr[-2000:]
    events = json.loads(view.read_text())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert set(names.values()) >= {
        "worker:0",
        "worker:1",
        "ps:0 in worker:0's step",
        "ps:0 in worker:1's step",
    }
    # each worker's step 0 overlaps the other's (the bench's steps are the workers' together)
    step0 = {
        w: (min(e["ts"] for e in mine), max(e["ts"] + e["dur"] for e in mine))
        for w in ("worker:0", "worker:1")
        for mine in [
            [e for e in events if e["ph"] == "X" and names[e["pid"]] == w and e["args"]["step"] == 0]
        ]
    }
    assert step0["worker:0"][0] < step0["worker:1"][1] and step0["worker:1"][0] < step0["worker:0"][1], step0
    # ... and from the saved traces, where the workers part, as the bench measured it
    from tfsched.bench.stagger import spreads_line

    measured = next(r for r in data["modes"] if r["mode"] == "tio")["stagger"]
    assert spreads_line(measured) in v.stdout, (v.stdout, measured)
    # the what-if of crossing TensorFlow's barrier reads the same kept run (benchmarks/cross_barrier.py),
    # the variables found on the PS of the graph that ran: every mode's steady step both ways
    _, crossing = benchmark_script("cross_barrier").crossing_rows(str(tmp_path / "traces"), 3)
    assert [r["mode"] for r in crossing] == [r["mode"] for r in data["modes"]]
    for r in crossing:
        assert min(r["first_s"], r["barrier_s"], r["crossing_s"], r["projected_s"]) > 0, r
        # behind the barrier the steps start together: a further step takes about what the first did
        assert r["barrier_s"] == pytest.approx(r["first_s"], rel=0.2), r
        # a queue of the ready messages on every channel, for the modes that have gates
        assert (r["crossing_ready_s"] is None) == (r["mode"] == "baseline"), r
    # the same kept run predicted again, its baseline's CPU a step over the cores (the floor) set
    # above every simulated step: every mode is predicted at it
    from tfsched.bench import predict

    floor = 2 * max(r["simulated_s"] for r in data["modes"])
    monkeypatch.setattr(predict, "machine_cpu_floor", lambda *args, **kwargs: floor)
    _, held = benchmark_script("repredict").repredict(str(tmp_path / "traces"))
    assert [r["predicted_now_s"] for r in held] == pytest.approx([floor] * len(held))
    # the bench's process is gone, and nothing of its is left (a concurrent run's, live, may be)
    assert netns.orphans("netns") == [] and netns.orphans("link") == []
    if CGROUPS:  # ... nor of its capped groups
        assert hostcpu.orphans(hostcpu.find_hierarchy()) == []


def test_a_killed_runs_namespaces_and_bridge_go_with_the_next_run():
    """What a run killed by SIGKILL left is removed when the next run starts; what belongs to a
    live process (pid 1's tag here) is kept."""
    import os

    live = {int(p) % 100000 for p in os.listdir("/proc") if p.isdigit()}
    dead = f"{next(t for t in range(99999, 0, -1) if t not in live):05d}"
    kept = "00001"  # init's tag: a run of a live process
    made = [f"{netns.PREFIX}{dead}t0", f"{netns.PREFIX}{kept}t0"]
    bridge = f"{netns.PREFIX}{dead}br"
    try:
        # Under `pytest -n 2` a cluster the other worker starts reaps the dead run's leftovers too
        # (as this run's start will): made again until they are all there (ninetieth session,
        # where the count below once failed so)
        for _ in range(5):
            for ns in made:
                subprocess.run(["ip", "netns", "add", ns], capture_output=True)
            added = subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], capture_output=True)
            if added.returncode == 0:
                subprocess.run(["ip", "addr", "add", "10.213.251.254/24", "dev", bridge], check=True)
            if len(_leftovers(dead)) == 2:
                break
        assert len(_leftovers(dead)) == 2 and len(_leftovers(kept)) == 1
        with netns.EmulatedCluster(ps=1, workers=1, bandwidth_bps=1e9, start_tasks=False) as c:
            assert c._tag not in (dead, kept)
            assert _leftovers(dead) == []  # the dead run's, gone
            assert len(_leftovers(kept)) == 1  # the live one's, kept
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        subprocess.run(["ip", "link", "del", f"{netns.PREFIX}{dead}br"], capture_output=True)


def test_a_run_takes_a_subnet_no_live_run_holds():
    """Two runs at once whose pids agree modulo 250 get subnets of their own: a bridge holding the
    first choice's address (another run's) moves this run to the next one free."""
    import os

    def held() -> str:
        return subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout

    pid = os.getpid()
    first = int(netns._subnet(pid).rsplit(".", 1)[1])
    # pid modulo 250, unless a concurrent run holds that (then a later one)
    assert f"inet 10.213.{first}.254/" not in held() and (
        first == pid % 250 or f"10.213.{pid % 250}.254/" in held()
    )
    bridge = f"{netns.PREFIX}00001sn"  # init's tag: a live run's, which no run reaps
    try:
        subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
        subprocess.run(["ip", "addr", "add", f"10.213.{first}.254/24", "dev", bridge], check=True)
        second = int(netns._subnet(pid).rsplit(".", 1)[1])
        assert second != first and f"inet 10.213.{second}.254/" not in held()
        with netns.EmulatedCluster(ps=1, workers=1, bandwidth_bps=1e9, start_tasks=False) as c:
            assert c.driver_host == f"10.213.{second}.254"
    finally:
        subprocess.run(["ip", "link", "del", bridge], capture_output=True)
