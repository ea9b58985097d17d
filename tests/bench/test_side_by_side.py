"""The bench's timing-aware modes order from a trace of the model on the cluster it runs on; a
cluster task that fails fails the run by name."""

import json
import os

import pytest

from tests.helpers import shadow_module


@pytest.mark.tf
def test_tao_orders_from_a_trace_of_worker_0_alone(tmp_path):
    from tfsched.analysis import analyze
    from tfsched.bench.run import SOLO_STEPS, local_side_by_side, mode_configs
    from tfsched.enforce.api import OPTIMIZER_NAME, schedule_priorities
    from tfsched.models import build_graph

    # TAO alone, without a baseline: the trace comes from a vanilla session of its own, which
    # also initializes the variables (no other session did).
    parts = []
    results = local_side_by_side(
        "seq32",
        workers=2,
        modes=("tao",),
        steps=2,
        rounds=1,
        batch_size=4,
        measure=False,
        done=lambda k, n: parts.append((k, n)),
    )
    assert parts == [(0, 1), (1, 1)]  # the progress bar: one mode, one round, nothing traced
    res = results["tao"]
    assert res.steps == 4 and res.throughput > 0
    trace = res.order_trace
    assert trace is not None and trace.steps == SOLO_STEPS and trace.meta["alone"]
    worker0 = [o for o in trace.ops if "/job:worker/replica:0/task:0/" in o.device]
    assert worker0 and not any("/job:worker/replica:0/task:1/" in o.device for o in trace.ops)
    assert trace.transfers  # the pulls it waited for

    # The pass gets the order `tfsched analyze --trace` gives with that trace; the other modes'
    # configs do not wait for one.
    built = build_graph("seq32", worker_task=0, ps_tasks=1, batch_size=4, mode="train")
    path = str(tmp_path / "seq32.pb")
    with open(path, "wb") as f:
        f.write(built.graph_def().SerializeToString())
    configs = mode_configs(("baseline", "tio", "tao", "tao+pc"), path, built.fetches)
    assert configs["baseline"] is None and not callable(configs["tio"])
    assert callable(configs["tao"]) and callable(configs["tao+pc"])
    config = configs["tao"](trace)
    (opt,) = [o for o in config.graph_options.rewrite_options.custom_optimizers if o.name == OPTIMIZER_NAME]
    given = [s.decode() for s in opt.parameter_map["priorities"].list.s]
    expected = schedule_priorities(
        analyze(
            path, fetches=built.fetches, algorithm="tao", trace=str(tmp_path / "seq32-tao.trace.json")
        ).schedule.to_json()
    )
    assert given and given == expected


@pytest.mark.tf
def test_modes_across_the_barrier_run_beside_the_baseline_and_are_predicted():
    """``cross`` and ``tio+ready+cross`` step across TensorFlow's barrier (two runs a step, the
    pass's gates on both), interleaved with the baseline; the simulator lays their steps out
    across the barrier from the baseline's trace. Their traced steps are each a step's two runs,
    every worker's: the pulls and the pushes, a step's records overlapping the next one's."""
    from tfsched.bench.run import local_side_by_side
    from tfsched.graph.devices import task_of

    results = local_side_by_side(
        "seq32",
        workers=2,
        modes=("baseline", "cross", "tio+ready+cross"),
        steps=3,
        rounds=2,
        batch_size=4,
        trace_steps=2,
    )
    for mode in ("cross", "tio+ready+cross"):
        res = results[mode]
        assert res.steps == 2 * 3 * 2 and res.throughput > 0
        assert len(res.iterations) == 3 * 2 and all(len(it) == 2 for it in res.iterations)
        # a step runs from the last worker's end of the step before (bench.run.steps_across): a
        # round's steps, each as long as its slowest part, add up to the round's wall time
        for k, (_, wall) in enumerate(res.rounds):
            parts = res.iterations[3 * k : 3 * k + 3]
            assert min(map(min, parts)) > 0
            assert sum(map(max, parts)) == pytest.approx(wall, rel=0.05, abs=0.05), (parts, wall)
        assert 0 <= res.straggler < 1 and res.to_json()["iterations_from"] == "last_end"
        assert res.measured["predicted_s"] > 0
        assert list(res.other_traces) == [1]
        for w, trace in [(0, res.trace), (1, res.other_traces[1])]:
            assert trace.steps == 2 and trace.meta["mode"] == mode and trace.meta["worker"] == w
            me = f"/job:worker/replica:0/task:{w}"
            for k in range(2):
                moved = [t for t in trace.transfers if t.step == k]
                assert any(task_of(t.dst) == me for t in moved)  # its pulls, in the compute run
                assert any(task_of(t.src) == me for t in moved)  # its pushes, in the apply run
            assert trace.step_starts_us[1] < trace.step_starts_us[0] + trace.step_times_us[0]
        assert set(res.stagger) >= {"pulled", "pushed"}, res.stagger
    assert results["baseline"].trace is not None
    assert results["tio+ready+cross"].knobs["cross"] and results["tio+ready+cross"].knobs["ready"]


def test_inference_has_no_barrier_to_cross():
    from tfsched.bench.run import local_side_by_side
    from tfsched.errors import TfschedError

    with pytest.raises(TfschedError, match="crosses the barrier between training steps: inference has none"):
        local_side_by_side("seq32", mode="inference", modes=("baseline", "cross"))


@pytest.mark.tf
@pytest.mark.parametrize(
    "first, job, index, when, within_s",
    [
        ("baseline", "ps", 0, "round 2/", 55),
        ("cross", "ps", 0, "round 2/", 55),
        # worker 1 is its session's master: its step waits for it to come back (for good
        # without a deadline; 600 s, the bench's, before it was fitted to the steps), and so
        # does its session's close, which has a deadline too (``tfsched.deadlines``); since the
        # hundred-and-twelfth session a stand-in at its address fails both (``bench.standin``):
        # 10 s, where a step's deadline and the close's took 60 s and more
        ("baseline", "worker", 1, "round 2/", 45),
        # the same across the barrier, where a round's runs fit the rounds before (their
        # deadline was 600 s until the hundred-and-tenth session)
        ("cross", "worker", 1, "round 2/", 45),
        # its first run, which creates its session: that call waited for the master until its
        # deadline (30 s; 34 s in all before, 5 s with the stand-in; ``tfsched demo`` with worker
        # 1 killed as its first round began waited 632 s, a step's 600 s)
        ("baseline", "worker", 1, "round 1/", 25),
        # after the rounds, worker 0 traced alone: until the hundred-and-tenth session a dead PS
        # there was TensorFlow's traceback, and a dead worker 0 waited for the steps' 600 s
        ("baseline", "ps", 0, "tracing worker 0 alone", 55),
        ("baseline", "worker", 0, "tracing worker 0 alone", 45),
        # the last of the run's steps, the cost of a byte: until the hundred-and-eleventh session
        # a task that died there left the cost at 0 and the run ended as if nothing had
        ("baseline", "ps", 0, "measuring what moving a byte costs", 55),
    ],
)
def test_a_task_that_dies_mid_run_fails_the_run_by_name_and_never_hangs_it(first, job, index, when, within_s):
    import signal
    import time

    from tfsched.bench.local import LocalCluster
    from tfsched.bench.run import run_side_by_side
    from tfsched.errors import TfschedError
    from tfsched.models import build_graph

    def builder(w, cross=False):
        return build_graph(
            "seq32", worker_task=w, ps_tasks=1, batch_size=4, mode="train", cross_workers=2 if cross else 0
        )

    # vanilla both: what fails here is the harness's; with "cross" first, a run across the
    # barrier is what the PS's death interrupts (an apply run and the reads wait on it)
    configs = {first: None, "again": None}
    with LocalCluster(ps=1, workers=2) as cluster:
        victim = cluster.procs[(job, index)]

        def progress(msg):  # the task aborts as the phase starts, as a crashing task would
            if msg.startswith(when):
                victim.send_signal(signal.SIGABRT)

        t = time.monotonic()
        with pytest.raises(TfschedError) as e:
            run_side_by_side(
                [cluster.target("worker", w) for w in range(2)],
                builder,
                configs,
                steps=2,
                rounds=3,
                trace=not when.startswith("round"),
                progress=progress,
                dead_tasks=cluster.dead_tasks,
            )
        # the sessions to a dead PS neither hold the run nor take their bounded close's 60 s
        # (its tasks fail fast: bench.local.start_tasks); it took 70 s to 80 s before
        assert time.monotonic() - t < within_s
        name = f"/job:{job}/task:{index} killed by SIGABRT"
        assert name in str(e.value)
        if when.startswith("tracing"):  # one line: the phase, then the task
            assert str(e.value) == f"{when}: {first}: cluster task {name}"
        elif not when.startswith("round"):
            assert str(e.value) == f"{when} the machine: cluster task {name}"
        assert cluster.dead_tasks() == [name]
        log_dir = cluster.log_dir
    assert not os.path.exists(log_dir)  # the tasks' logs go with the cluster


def test_a_task_that_cannot_start_says_why_in_one_line(tmp_path):
    from tfsched.bench.local import start_tasks, stop_processes, wait_ready
    from tfsched.errors import TfschedError

    procs = start_tasks({"ps": ["127.0.0.1:notaport"]}, vanilla=True, log_dir=str(tmp_path))
    try:
        with pytest.raises(TfschedError) as e:
            wait_ready(procs, 120, str(tmp_path))
    finally:
        stop_processes(procs.values())
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("cluster task /job:ps/task:0 did not start (exit code 1): ")
    assert 'Could not parse port for local server from "127.0.0.1:notaport"' in msg


@pytest.mark.cluster
def test_a_file_in_the_working_directory_does_not_shadow_a_tasks_modules(tmp_path, monkeypatch):
    """``python -m`` puts the working directory first on the path: a user's ``concurrent.py``
    there replaced the standard library's in every task (TensorFlow imports
    ``concurrent.futures``). Here the file fails on import, so a task that imported it would not
    start; a shadow that started a cluster of its own once did so in every task, without end."""
    from tfsched.bench.local import LocalCluster

    (tmp_path / "concurrent.py").write_text("raise SystemExit('the working directory shadowed a module')\n")
    monkeypatch.chdir(tmp_path)
    with LocalCluster(ps=1, workers=1, vanilla=True, start_timeout_s=120) as c:
        assert not c.dead_tasks()


@pytest.mark.cluster
def test_tfsched_processes_import_tensorflow_without_keras_3(tmp_path, monkeypatch, seq_graph_file):
    """``import tensorflow`` loads Keras 3 where it is installed (with scikit-learn, which the
    tuner's Bayesian optimization installs): 2.5 s of every process's start on this machine.
    tfsched's task processes and the ``tfsched`` command use tf_keras and set
    ``TF_USE_LEGACY_KERAS`` (``bench.local.LEGACY_KERAS``), under which TensorFlow imports no
    Keras. A ``keras`` on the path that ends whatever imports it tells them apart."""
    import subprocess
    import sys

    from tfsched.bench.local import LocalCluster, task_env

    said = shadow_module(tmp_path / "shadow", "keras", monkeypatch)
    monkeypatch.delenv("TF_USE_LEGACY_KERAS", raising=False)
    # a process that stands for a user's program: TensorFlow imports Keras 3 there
    p = subprocess.run(
        [sys.executable, "-c", "import tensorflow"],
        env=task_env(legacy_keras=False),
        capture_output=True,
        text=True,
    )
    assert p.returncode != 0 and said in p.stderr, p.stderr[-2000:]
    # tfsched's tasks (each loads its ops) and the tfsched command do not
    with LocalCluster(ps=1, workers=1, start_timeout_s=120) as c:
        assert not c.dead_tasks()
    p = subprocess.run(
        [sys.executable, "-m", "tfsched.cli", "analyze", seq_graph_file["pb"], "--fetch", "train", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0 and len(json.loads(p.stdout)["transfers"]) > 0, p.stderr[-2000:]


@pytest.mark.cluster
@pytest.mark.parametrize(
    "vanilla,forked", [(True, True), (False, True), (False, False)], ids=["vanilla", "forked", "own-process"]
)
def test_the_tasks_end_with_a_launcher_killed_by_sigkill(tmp_path, monkeypatch, vanilla, forked):
    """SIGKILL runs no cleanup in the launcher: its tasks must go by themselves (each serves
    until its stdin, held by the launcher, ends), forked by its zygote (``bench.zygote``, which
    goes too) or each a process of its own (``TFSCHED_FORKED_TASKS=0``). The task logs it left
    are removed by the next cluster's start (``fresh_log_dir``)."""
    import signal
    import subprocess
    import sys
    import tempfile
    import time

    from tfsched.bench.local import LOG_PREFIX, fresh_log_dir

    script = (
        "import time\n"
        "from tfsched.bench.local import LocalCluster\n"
        "from tfsched.bench import zygote\n"
        f"c = LocalCluster(ps=1, workers=2, vanilla={vanilla}).__enter__()\n"
        "print(' '.join(type(p).__name__ for p in c.procs.values()), flush=True)\n"
        "print(' '.join(str(p.pid) for p in c.procs.values()), flush=True)\n"
        "print(zygote._ZYGOTE.proc.pid if zygote._ZYGOTE else '', flush=True)\n"
        "time.sleep(600)\n"
    )

    def alive(pid):
        try:  # a zombie is gone but for its parent's wait; init reaps it soon
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    env = dict(os.environ, TFSCHED_FORKED_TASKS="1" if forked else "0", TMPDIR=str(tmp_path))
    launcher = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
    pids = []
    try:
        kinds = launcher.stdout.readline().split()
        assert kinds == ["ForkedTask" if forked else "Popen"] * 3
        pids = [int(x) for x in launcher.stdout.readline().split()]
        assert len(pids) == 3
        zygote = launcher.stdout.readline().strip()
        assert bool(zygote) == forked
        pids += [int(zygote)] if forked else []  # the zygote goes with the launcher too

        assert all(map(alive, pids))  # they serve while the launcher lives
        time.sleep(1)
        assert all(map(alive, pids))
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(timeout=10)
        deadline = time.monotonic() + 15
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [p for p in pids if alive(p)], "tasks outlived their launcher"
        (left,) = tmp_path.glob(LOG_PREFIX + "*")
        assert sorted(f.name for f in left.iterdir()) == ["ps0.log", "worker0.log", "worker1.log"]
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        fresh = fresh_log_dir()
        assert not left.exists() and os.listdir(tmp_path) == [os.path.basename(fresh)]
    finally:
        launcher.kill()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.tf
def test_placements_share_one_run_each_on_its_own_graph():
    """``ps_placement=("bytes", "held")``: every mode runs on both placements in the same rounds,
    the second's as MODE@held; each placement's steps, TAO order and prediction are of its own
    graph (Seq-32 on 2 PS: 10 of its 34 variables are on the other PS under held)."""
    import tensorflow as tf

    from tfsched.bench.results import markdown, summarize
    from tfsched.bench.run import local_side_by_side
    from tfsched.models import build_graph

    results = local_side_by_side(
        "seq32",
        workers=2,
        ps=2,
        modes=("baseline", "tao"),
        steps=2,
        rounds=1,
        batch_size=4,
        ps_placement=("bytes", "held"),
    )
    assert list(results) == ["baseline", "baseline@held", "tao", "tao@held"]

    def ps_of(placement):
        """variable read -> the PS task its variable is on, in the placement's graph (a read
        runs where its variable is)"""
        g = build_graph("seq32", ps_tasks=2, batch_size=4, ps_placement=placement).graph
        return {
            op.name: tf.DeviceSpec.from_string(op.inputs[0].op.device).task
            for op in g.get_operations()
            if op.type == "ReadVariableOp" and "/job:ps" in op.inputs[0].op.device
        }

    def pulled_from(trace):
        """op -> the PS task a pull of its tensor came from (through its gate), in the traced steps"""
        return {
            t.tensor.split(":")[0].split("/tfsched_gate_to_")[0]: tf.DeviceSpec.from_string(t.src).task
            for t in trace.transfers
            if "/job:ps/" in t.src
        }

    where = {p: ps_of(p) for p in ("bytes", "held")}
    moved = [op for op in where["bytes"] if where["bytes"][op] != where["held"].get(op)]
    assert len(moved) >= 10
    for name, placement in (
        ("baseline", "bytes"),
        ("baseline@held", "held"),
        ("tao", "bytes"),
        ("tao@held", "held"),
    ):
        res = results[name]
        assert res.steps == 4 and res.throughput > 0
        for trace in (res.trace, res.order_trace, res.solo_trace):
            if trace is None:
                continue
            pulls = pulled_from(trace)
            seen = [v for v in moved if v in pulls]
            assert seen, (name, sorted(pulls))  # the trace pulls variables the placements differ on
            assert {v: pulls[v] for v in seen} == {v: where[placement][v] for v in seen}, name
        assert res.measured["predicted_s"] > 0, name
    # ordered from a trace of its own placement's graph; both baselines traced alone
    assert results["tao"].order_trace is not results["tao@held"].order_trace
    assert results["baseline"].solo_trace.meta["mode"] == "baseline"
    assert results["baseline@held"].solo_trace.meta["mode"] == "baseline@held"
    assert results["tao@held"].order_trace.meta["mode"] == "baseline@held"
    # what a byte costs the machine: measured once, given to the other placement
    assert results["baseline@held"].comm_cpu_s_per_byte == results["baseline"].comm_cpu_s_per_byte
    assert results["baseline@held"].comm_cpu_shares == results["baseline"].comm_cpu_shares
    # each task's process's CPU, over each mode's own rounds
    tasks = {"ps:0", "ps:1", "worker:0", "worker:1"}
    assert all(set(res.task_cpu_s) == tasks for res in results.values()), results
    assert all(s >= 0 for res in results.values() for s in res.task_cpu_s.values())

    summary = summarize(results, {"model": "seq32", "mode": "train", "workers": 2, "ps": 2,
                                  "ps_placement": ["bytes", "held"], "rounds": 1, "steps": 2,
                                  "bandwidth": "loopback"})  # fmt: skip
    rows = {r["mode"]: r for r in summary["modes"]}
    held = results["tao@held"].throughput / results["baseline@held"].throughput
    assert rows["tao@held"]["vs_placement_baseline"] == pytest.approx(held)
    assert "vs_placement_baseline" not in rows["tao"] and "vs_placement_baseline" not in rows["baseline@held"]
    assert rows["baseline@held"]["vs_baseline"] == pytest.approx(
        results["baseline@held"].throughput / results["baseline"].throughput
    )
    text = markdown(summary)
    assert "2 PS (variables placed bytes; as MODE@held held) x 2 workers" in text
    assert "x of baseline@held |" in text.split("| tao@held |")[1].split("\n")[0]


def _config_lines(cluster) -> dict:
    """(job, index) -> the config lines each task of a running cluster logged as it started."""
    from tfsched.bench.server import CONFIG_LINE

    lines = {}
    for job, index in cluster.procs:
        with open(os.path.join(cluster.log_dir, f"{job}{index}.log")) as f:
            lines[(job, index)] = [line.strip() for line in f if line.startswith(CONFIG_LINE)]
    return lines


@pytest.mark.tf
def test_a_push_window_holds_the_workers_pushes_and_not_the_pulls(tmp_path):
    """A mode's ``+wN`` is ``enable(push_credit=N)`` (``mode_configs``): under it the workers'
    pushes stay within the window (Seq-32's 65,536-parameter gradients in slices of 16,384: one
    slice at a time under 20,000), the PS's pulls within the credit, several slices at once; the
    mode without it pushes several at once too. The tasks run the executor threads they were
    given."""
    from tfsched.bench.local import LocalCluster
    from tfsched.bench.run import mode_configs, parse_mode, run_side_by_side
    from tfsched.enforce.api import set_credit, stats
    from tfsched.models import build_graph

    def builder(w):
        return build_graph("seq32", worker_task=w, ps_tasks=1, batch_size=4, mode="train")

    plain, windowed = "tio+p20000+c100000", "tio+p20000+c100000+w20000"
    assert parse_mode(windowed).push_credit == 20_000 and parse_mode(plain).push_credit == 0
    graph_path = tmp_path / "seq32.pb"
    graph_path.write_bytes(builder(0).graph_def().SerializeToString())
    configs = mode_configs(
        ("baseline", plain, windowed, f"{windowed}+pool"), str(graph_path), builder(0).fetches
    )
    assert configs["baseline"] is None
    for mode, window, inline in (
        (plain, 0, True),
        (windowed, 20_000, True),
        (f"{windowed}+pool", 20_000, False),
    ):
        (opt,) = configs[mode].graph_options.rewrite_options.custom_optimizers
        assert opt.parameter_map["push_credit"].i == window and opt.parameter_map["credit"].i == 100_000
        assert opt.parameter_map["inline_transfers"].b == inline

    peaks = {}
    with LocalCluster(ps=1, workers=2, inter_op_threads=5) as cluster:
        targets = [cluster.target("worker", w) for w in range(2)]
        devices = ["/job:ps/task:0", "/job:worker/task:0", "/job:worker/task:1"]
        # each task's executor runs the threads it was given (TensorFlow names them tf_Compute;
        # counted before any step, which starts the intra-op pool's under the same name)
        for proc in cluster.procs.values():
            names = [
                open(f"/proc/{proc.pid}/task/{t}/comm").read().strip()
                for t in os.listdir(f"/proc/{proc.pid}/task")
            ]
            assert names.count("tf_Compute") == 5
        for (said,) in _config_lines(cluster).values():  # what each task started with, and nothing else
            assert "inter_op_parallelism_threads: 5" in said and "spinning" not in said
        for mode in (plain, windowed):
            set_credit(targets[0], 0, devices)  # resets the peak counters
            results = run_side_by_side(
                targets, builder, {"baseline": None, mode: configs[mode]}, steps=2, rounds=1
            )
            assert all(r.steps == 4 for r in results.values())
            peaks[mode] = {d: stats(targets[0], d)["peak_in_flight"] for d in devices}
    pushed = {mode: [peaks[mode][d] for d in devices[1:]] for mode in peaks}
    assert all(0 < p <= 20_000 for p in pushed[windowed])  # under the window, one slice at a time
    assert max(pushed[plain]) > 20_000  # several slices at once under the credit
    assert 20_000 < peaks[windowed]["/job:ps/task:0"] <= 100_000  # the pulls keep the credit


@pytest.mark.cluster
def test_the_default_batch_size_is_the_balance_measured_for_the_run(tmp_path):
    """``tfsched bench`` without ``--batch-size`` (its default, ``auto``) measures the batch whose
    compute balances the model's bytes over the PS's link (``models.batch``) for the run's workers,
    PS tasks and bandwidth, says so, runs every mode at it and records the balance beside it."""
    from tests.helpers import cli
    from tfsched.models.batch import MAX_BATCH, MIN_BATCH, REFINE_ROUNDS, param_bytes

    out = tmp_path / "bench.json"
    run = ("bench", "--model", "seq32", "--workers", "2", "--ps", "2", "--bandwidth", "5Gbit", "--loopback")
    run += ("--steps", "2", "--rounds", "1", "-o", str(out))
    p = cli(*run, "--modes", "baseline,tio", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    config = json.loads(out.read_text())["config"]
    balance = config["batch_balance"]
    assert config["batch_size"] == balance["batch_size"]
    assert MIN_BATCH <= balance["batch_size"] <= MAX_BATCH
    # two workers' bytes over two PS tasks' links of 5 Gbit/s each: the options reached the balance
    assert balance["comm_s"] == pytest.approx(param_bytes("seq32", None) * 2 / (2 * 5e9 / 8), rel=1e-9)
    assert balance["compute_per_example_s"] > 0 and balance["compute_fixed_s"] >= 0
    measured = balance["measured"]
    if balance["compute_fixed_s"] >= balance["comm_s"]:  # no batch balances it: the smallest
        assert balance["batch_size"] == MIN_BATCH and not measured
    else:  # measured at the batches solved for, the last one run unless the rounds ran out
        assert measured and all(m["compute_s"] > 0 for m in measured)
        assert measured[-1]["batch_size"] == balance["batch_size"] or len(measured) == REFINE_ROUNDS
    assert f"batch size {balance['batch_size']}: communication" in p.stderr
    assert f"batch {balance['batch_size']}" in out.with_suffix(".md").read_text()

    # a batch size given is taken as it is, and nothing is measured for it
    p = cli(*run, "--modes", "baseline", "--batch-size", "3", timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    config = json.loads(out.read_text())["config"]
    assert config["batch_size"] == 3 and config["batch_balance"] is None
    assert "communication" not in p.stderr


@pytest.mark.tf
def test_tasks_whose_idle_threads_do_not_spin_train_as_the_others(tmp_path):
    """``thread_spinning=False`` (bench ``--no-thread-spinning``) starts every task with
    ``experimental.disable_thread_spinning``, the config a server's thread pools are made from,
    and vanilla TensorFlow and a scheduled mode both train on such tasks; a cluster started
    without it gives its tasks TensorFlow's defaults."""
    from tfsched.bench.local import LocalCluster
    from tfsched.bench.run import mode_configs, run_side_by_side
    from tfsched.bench.server import CONFIG_LINE
    from tfsched.models import build_graph

    def builder(w):
        return build_graph("seq32", worker_task=w, ps_tasks=1, batch_size=4, mode="train")

    graph_path = tmp_path / "seq32.pb"
    graph_path.write_bytes(builder(0).graph_def().SerializeToString())
    configs = mode_configs(("baseline", "tio+pc"), str(graph_path), builder(0).fetches)

    with LocalCluster(ps=1, workers=2, thread_spinning=False) as cluster:
        lines = _config_lines(cluster)
        assert len(lines) == 3
        assert all(
            found == [CONFIG_LINE + "experimental { disable_thread_spinning: true }"]
            for found in lines.values()
        )
        targets = [cluster.target("worker", w) for w in range(2)]
        results = run_side_by_side(targets, builder, configs, steps=2, rounds=1)
        assert {m: r.steps for m, r in results.items()} == {"baseline": 4, "tio+pc": 4}
    with LocalCluster(ps=1, workers=1) as cluster:
        assert _config_lines(cluster) == {("ps", 0): [], ("worker", 0): []}
