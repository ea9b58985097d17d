"""``tfsched bench --api tf2``: TensorFlow 2's ParameterServerStrategy on the emulated cluster."""

import json
import os
import re
import shutil
import time

import pytest

from tests.cli.test_analyze import assert_one_line_error
from tests.helpers import BENCH_SEQ32, benchmark_script, cgroups_unavailable, cli
from tfsched.bench import netns

needs_namespaces = pytest.mark.skipif(
    netns.available() is not None, reason=f"no network namespaces here: {netns.available()}"
)


def _model_bytes(model: str) -> int:
    """What a worker pulls a step: every variable of the model, float32."""
    from tfsched.models.keras import keras_model

    built, _ = keras_model(model)
    return 4 * sum(v.shape.num_elements() for v in built.variables)


@pytest.mark.cluster
@pytest.mark.tf
@needs_namespaces
def test_a_tf2_bench_run_fills_every_field_from_real_calls(tmp_path, monkeypatch):
    from tfsched.bench import hostcpu
    from tfsched.enforce.api import link_sizes

    out, traces = tmp_path / "tf2.json", tmp_path / "traces"
    modes = ["baseline", "tio", "tao+pc"]
    cgroups = cgroups_unavailable() is None
    p = cli(
        *BENCH_SEQ32,
        "--api",
        "tf2",
        "--modes",
        ",".join(modes),
        "--traces",
        str(traces),
        # every task in a CPU cgroup of its own (bench.hostcpu), where this machine has them
        *(["--host-cores", "1"] if cgroups else []),
        "-o",
        str(out),
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    # TensorFlow's C++ start-up logs (the GPU probe's error on a machine without CUDA) stay off the terminal
    assert not re.search(r"^[EI]\d{4} ", p.stderr, re.M), p.stderr[-2000:]
    data = json.loads(out.read_text())
    from tfsched.enforce.build import current_build_id

    assert data["tfsched_build"] == current_build_id()  # the build its tasks loaded
    c = data["config"]
    assert (c["api"], c["model"], c["mode"], c["workers"], c["bandwidth"]) == (
        "tf2",
        "seq32",
        "train",
        2,
        "0.2 Gbit/s",
    )
    assert [r["mode"] for r in data["modes"]] == modes
    pulled_mb = _model_bytes("seq32") / 1e6
    for r in data["modes"]:
        assert r["steps"] == 2 * 3 and r["throughput_steps_per_s"] > 0  # 2 workers x 3 steps, 1 round
        assert r["per_round_vs_baseline"] == [pytest.approx(r["vs_baseline"])]
        assert [x["steps"] for x in r["rounds"]] == [6] and r["rounds"][0]["wall_s"] > 0
        t = r["traced"]
        assert t["calls"] == len(t["call_times_s"]) >= 1 and t["p95_s"] >= t["p50_s"] > 0
        # every variable pulled and its gradient pushed in a call, as the trace measured them
        assert t["pulled_mb"] == pytest.approx(pulled_mb, rel=1e-6)
        assert t["pushed_mb"] == pytest.approx(pulled_mb, rel=1e-6)
        assert 0 < t["pulls_done_s"] < max(t["call_times_s"])
        assert (traces / f"{r['mode']}.trace.json").exists() and t["trace"] == str(
            traces / f"{r['mode']}.trace.json"
        )
        # the machine's CPU over the round: the simulator's share of the cores comes from it, or
        # where each task had cores of its own from what the workers' own processes spent
        assert r["rounds"][0]["cpu_s"] > 0
        assert set(r["rounds"][0]["task_cpu_s"]) == {"ps:0", "worker:0", "worker:1"}
        assert min(r["rounds"][0]["task_cpu_s"].values()) >= 0
        # from the op times only where the bytes, as reckoned, took all the CPU a call spent
        # (Seq-32's bytes are most of its CPU, and a byte's cost is measured on the machine's CPU,
        # beside the other test of `pytest -n 2`: once in CI, as the session bench's test)
        took_all = r["predicted"]["ops_cpu_s_per_step"] <= 0
        assert r["predicted"]["slots_from"] in (
            ("the workers' CPU", "the machine's CPU") if cgroups else ("the machine's CPU",)
        ) + (("the op times",) if took_all else ()), r["predicted"]
        assert not (took_all and r["predicted"]["slots_from"] == "the machine's CPU"), r["predicted"]
        # the simulator laid the calls out as they ran: both workers at once on the one PS's link,
        # each call after its worker's last. Serialized (a worker waiting for the other) it would be
        # about half the measured throughput
        p = r["predicted"]
        assert p["call_s"] > 0 and p["machine_slots"] > 0 and abs(p["error"]) < 0.5, p
        # the simulated calls' last pull, beside the measured one: within the simulated call
        assert 0 < p["pulls_done_s"] < p["call_s"], p
        assert p["error"] == pytest.approx(p["steps_per_s"] / r["throughput_steps_per_s"] - 1)
    base, tio, tao = data["modes"]
    assert base["vs_baseline"] == 1.0 and base["knobs"] == {} and tio["knobs"]["credit"] == 0
    # what moving a byte and a message cost the machine, measured on worker 0's pulls alone: the
    # baseline's, as the session bench keeps them
    assert base["comm_cpu_s_per_byte"] > 0 and 0 < base["comm_cpu_s_per_message"] < 1
    send, recv = base["comm_cpu_shares"]
    assert 0 <= send and 0 <= recv and 0 < send + recv <= 1
    # and where a message's is spent: the PS's part and worker 0's, all of it
    send, recv = base["comm_cpu_message_shares"]
    assert 0 <= send and 0 <= recv and send + recv == pytest.approx(1, abs=1e-3)
    assert not any(k.startswith("comm_cpu") for r in (tio, tao) for k in r)
    # +pc sized for the busiest channel: here the one PS's every variable
    assert c["channel_params"] * 4 == _model_bytes("seq32")
    assert (tao["knobs"]["partition"], tao["knobs"]["credit"]) == link_sizes(0.2e9, c["channel_params"])
    # TAO ordered worker 0's step function from a traced round: every transfer matched
    s = c["schedules"]["tao"]
    assert s["transfers_total"] > 0 and s["transfers_matched"] == s["transfers_total"]
    assert json.loads((traces / "tao.schedule.json").read_text())["algorithm"] == "tao"
    # ordered and simulated from worker 0's steps traced alone: one worker's calls only
    from tfsched.tracing.trace import Trace

    solo = Trace.load(str(traces / "solo-round.trace.json"))
    assert {o.device.split("/device:")[0] for o in solo.ops if "/job:worker/" in o.device} == {
        "/job:worker/replica:0/task:0"
    }
    md = out.with_suffix(".md").read_text()
    assert all(f"| {m} |" in md for m in modes) and "asynchronous training" in md and "sim. error" in md
    assert f"Moving a byte cost the machine {base['comm_cpu_s_per_byte'] * 1e9:.2f} ns of CPU" in md
    # and what the simulated machine's share of the cores was reckoned from (results.slots_lines)
    assert f"reckoned from {base['predicted']['slots_from']}" in md
    assert out.with_suffix(".png").stat().st_size > 0
    if cgroups:  # recorded, said in the title, and every group gone with the cluster
        assert c["host_cores"] == 1 and "each host 1 core of its own" in md
        assert hostcpu.orphans(hostcpu.find_hierarchy()) == []
    # packed by benchmarks/keep_run.py (what a re-prediction reads) and predicted again from the
    # archive by repredict_tf2.py: the bench's own predictions
    keep = benchmark_script("keep_run")
    monkeypatch.setattr(keep, "RUNS", str(tmp_path / "runs"))
    shutil.copy(out, traces / "bench.json")
    keep.main([str(traces), "--name", "tf2"])
    where = keep.run_dir(str(tmp_path / "runs" / "tf2.tar.xz"))
    _, again = benchmark_script("repredict_tf2").repredict(os.path.join(where, "bench.json"), where)
    assert [r["predicted_simulated"]["steps_per_s"] for r in again] == pytest.approx(
        [r["predicted"]["steps_per_s"] for r in data["modes"]], rel=1e-9
    )


@pytest.mark.cluster
@pytest.mark.tf
def test_a_tf2_inference_bench_pulls_and_pushes_nothing(tmp_path):
    """With a setting ``tfsched tune --api tf2`` tuned for this run (mode tuned), on links shaped
    by relays (what a user without root runs): the coordinator hands every task one spec, whose
    relays pace each connection through the links of the task that opened it."""
    out, tuned = tmp_path / "inf.json", tmp_path / "tf2-tune.json"
    config = {"api": "tf2", "model": "seq32", "mode": "inference", "workers": 2, "ps": 1}
    config.update(bandwidth="0.2 Gbit/s", batch_size=4, algorithm="tio", host_credit=True)
    best = {"partition": 2**19, "credit": 2**20, "throughput_steps_per_s": 9.0}
    tuned.write_text(json.dumps({"schema": "tfsched.tune/1", "config": config, "best": best}))
    p = cli(
        *BENCH_SEQ32,
        "--api",
        "tf2",
        "--mode",
        "inference",
        "--modes",
        "baseline,tuned",
        "--tuned",
        str(tuned),
        "--shaped-loopback",
        "-o",
        str(out),
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["config"]["mode"] == "inference" and data["config"]["schedules"] == {}
    assert data["config"]["links"] == "relays"
    assert "0.2 Gbit/s, shaped by relays on loopback" in out.with_suffix(".md").read_text()
    # every step pulls the model through the PS's uplink of 25 MB/s: at most 3 steps a second
    # (unshaped loopback moves them many times faster)
    most = 25e6 / _model_bytes("seq32")
    assert all(0 < r["throughput_steps_per_s"] <= 1.1 * most for r in data["modes"]), data["modes"]
    # the tuned setting ran as the tuner measured it
    mode = "tio+p524288+c1048576+host"
    assert [r["mode"] for r in data["modes"]] == ["baseline", mode]
    assert data["config"]["tuned"] == {"file": str(tuned), "mode": mode}
    knobs = data["modes"][1]["knobs"]
    assert (knobs["partition"], knobs["credit"], knobs["host_credit"]) == (2**19, 2**20, True)
    assert f"`{mode}`: the best setting of `tfsched tune`" in out.with_suffix(".md").read_text()
    for r in data["modes"]:
        assert r["traced"]["pulled_mb"] == pytest.approx(_model_bytes("seq32") / 1e6, rel=1e-6)
        assert r["traced"]["pushed_mb"] == 0 and r["traced"]["trace"] is None  # no --traces: none kept
        assert r["predicted"]["steps_per_s"] > 0 and abs(r["predicted"]["error"]) < 0.5
    assert "inference" in out.with_suffix(".md").read_text()


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--trace-steps", "2"), "--trace-steps is not for --api tf2"),
        (("--ps-placement", "held", "--ps", "2"), "--ps-placement held is not for --api tf2"),
        (("--ps-placement", "round-robin,min-size"), "several --ps-placement need --ps 2 or more"),
        (("--modes", "baseline,tuned"), "mode tuned needs --tuned FILE"),
        (("--modes", "baseline,fifo"), "--modes"),
        (("--inter-op-threads", "4"), "--inter-op-threads is not for --api tf2: TensorFlow 2's calls"),
        (("--no-thread-spinning",), "--no-thread-spinning is for --api session: TensorFlow 2's calls"),
        (("--modes", "baseline,tio+pc+w1000"), "+wN modes are for --api session"),
        (("--modes", "baseline,layer+pc+ready+cross"), "+cross modes are for --api session"),
        (("--no-moving-averages",), "--no-moving-averages is for --api session: a TensorFlow 2 step"),
    ],
)
def test_bench_tf2_refuses_what_it_cannot_run_before_it_starts(tmp_path, args, needle):
    out = tmp_path / "b.json"
    start = time.monotonic()
    p = cli("bench", "--api", "tf2", "--model", "seq32", *args, "-o", str(out), timeout=120)
    assert_one_line_error(p, needle)
    assert time.monotonic() - start < 20 and not out.exists()


@pytest.mark.parametrize("forked", [False, True], ids=["own-process", "forked"])
def test_a_coordinator_that_fails_or_hangs_is_one_error_naming_its_mode(forked, monkeypatch):
    """Forked from ``forked_coordinators()``'s zygote (as the bench's are), which has imported
    TensorFlow before the round's bound starts: a shorter one. Or, with the tasks' switch
    ``TFSCHED_FORKED_TASKS=0``, a process of its own though the block is in force."""
    from tfsched.bench import tf2
    from tfsched.bench.zygote import ENV_FLAG

    if not forked:
        monkeypatch.setenv(ENV_FLAG, "0")
    with tf2.forked_coordinators():
        assert (tf2._FORKS is not None) == forked
        _fails_and_hangs(bound_s=5 if forked else 20)


def _fails_and_hangs(bound_s: int) -> None:
    from tfsched.bench.local import free_port
    from tfsched.bench.tf2 import run_round
    from tfsched.errors import TfschedError

    with pytest.raises(TfschedError, match=r"^mode tio's coordinator failed: KeyError: 'bandwidth_bps'"):
        run_round({"spec": {}}, "tio", timeout_s=120)
    # a cluster nobody serves: the strategy waits for its tasks, the round's bound ends it
    args = {
        "spec": {"ps": [f"127.0.0.1:{free_port()}"], "worker": [f"127.0.0.1:{free_port()}"]},
        "driver_host": "127.0.0.1",
        "bandwidth_bps": None,
        "channel_params": 1,
        "model": "par32",
        "image_size": None,
        "batch_size": 2,
        "run_mode": "train",
        "ps_placement": "round-robin",
        "steps": 1,
    }
    start = time.monotonic()
    with pytest.raises(TfschedError, match=rf"^mode baseline's coordinator did not finish in {bound_s} s$"):
        run_round(args, "baseline", timeout_s=bound_s, dead_tasks=lambda: [])
    assert bound_s <= time.monotonic() - start < 2 * bound_s
    # a task of the cluster died: not started, or stopped as soon as the task is seen dead (it
    # held the run until the bound before the hundred-and-eleventh session)
    with pytest.raises(
        TfschedError,
        match=r"^mode baseline's coordinator did not start: a task of the cluster has died \(gone\)$",
    ):
        run_round(args, "baseline", timeout_s=bound_s, dead_tasks=lambda: ["gone"])
    start = time.monotonic()
    with pytest.raises(
        TfschedError, match=r"^mode baseline's coordinator stopped: a task of the cluster died \(gone\)$"
    ):
        run_round(args, "baseline", bound_s, lambda: ["gone"] if time.monotonic() > start + 1 else [])
    assert time.monotonic() - start < 1 + 10  # (its bound: 5 s forked, 20 s in a process of its own)


def test_a_cost_round_that_fails_is_said_and_leaves_the_costs_out():
    """The run goes on without them: the prediction keeps the bytes' CPU in the ops' share."""
    from tfsched.bench.tf2 import comm_costs

    said = []
    assert comm_costs({"spec": {}}, timeout_s=120, progress=said.append) == {}
    assert said == ["no cost of a byte: mode baseline's coordinator failed: KeyError: 'bandwidth_bps'"]


def test_a_cost_round_that_fails_on_a_dead_task_fails_the_run_by_name():
    """A task of the cluster died: the run has failed (until the hundred-and-eleventh session it
    ended with its rounds' results, as if nothing had died)."""
    from tfsched.bench.tf2 import comm_costs
    from tfsched.errors import TfschedError

    said = []
    with pytest.raises(TfschedError) as e:
        comm_costs({"spec": {}}, 120, lambda: ["/job:ps/task:0 killed by SIGKILL"], said.append)
    assert str(e.value) == (
        "measuring what moving a byte costs the machine: mode baseline's coordinator did not "
        "start: a task of the cluster has died (/job:ps/task:0 killed by SIGKILL)"
    )
    assert said == []


@pytest.mark.cluster
@pytest.mark.tf
@pytest.mark.parametrize(
    "job, when", [("worker", "tracing worker 0"), ("worker", "round 1/"), ("ps", "round 1/")]
)
def test_a_task_that_dies_stops_the_tf2_run_at_once_naming_it(job, when, monkeypatch):
    """A coordinator waits for a dead worker to come back: until the hundred-and-eleventh session
    worker 0 killed as its step function was traced alone held the run for the first round's
    bound (30 minutes; still running 300 s after the kill), and killed in the first round it held
    the next mode's round for two minutes. A dead PS failed the round at once already."""
    import signal
    import time

    from tfsched.bench import run, tf2
    from tfsched.errors import TfschedError

    killed, clusters = [], []
    real = run.host_cluster

    def host_cluster(*args, **kwargs):  # the run's own cluster (not a task another test left)
        clusters.append(real(*args, **kwargs))
        return clusters[-1]

    monkeypatch.setattr(run, "host_cluster", host_cluster)

    def progress(msg):  # the task dies as the phase starts, as a crashing host would
        if msg.startswith(when) and not killed:
            clusters[-1].procs[(job, 0)].send_signal(signal.SIGKILL)
            killed.append(time.monotonic())

    with pytest.raises(TfschedError) as e:
        tf2.side_by_side("par32", workers=1, modes=("baseline", "tio"), steps=2, rounds=1, progress=progress)
    assert killed and time.monotonic() - killed[0] < 30
    assert f"(/job:{job}/task:0 killed by SIGKILL" in str(e.value), e.value
    assert "\n" not in str(e.value)


@pytest.mark.cluster
@pytest.mark.tf
def test_a_tf2_run_that_fails_leaves_nothing_in_its_traces_directory(tmp_path, monkeypatch):
    from tfsched.bench import tf2
    from tfsched.errors import TfschedError

    made = []
    real = tf2.run_round

    def run_round(args, mode, timeout_s, dead_tasks=None):
        made.append(os.path.dirname(args.get("trace") or args.get("dump_graphs") or ""))
        # the second mode's traced round fails (worker 0's solo round is a round of tio too)
        if args.get("trace") and mode == "tio" and not args.get("solo"):
            raise TfschedError(f"mode {mode}'s coordinator failed: as asked")
        return real(args, mode, timeout_s, dead_tasks)

    monkeypatch.setattr(tf2, "run_round", run_round)
    traces = tmp_path / "traces"
    with pytest.raises(TfschedError, match="as asked"):
        tf2.side_by_side(
            "par32", workers=1, modes=("baseline", "tio"), steps=1, rounds=1, traces_dir=str(traces)
        )
    assert not traces.exists()  # worker 0's solo round and the baseline's traced round were made, elsewhere
    dirs = {d for d in made if d}  # the run's own directory, gone too
    assert dirs and not any(os.path.exists(d) for d in dirs)


@pytest.mark.cluster
@pytest.mark.tf
def test_two_placements_run_in_the_same_rounds_each_from_its_own_graph(tmp_path, monkeypatch):
    """``--ps-placement round-robin,min-size``: every mode on each placement, interleaved."""
    from tfsched.bench import tf2

    ran = []
    real = tf2.run_round

    def run_round(args, mode, timeout_s, dead_tasks=None):
        ran.append((mode, args["ps_placement"], args["channel_params"], bool(args.get("solo"))))
        return real(args, mode, timeout_s, dead_tasks)

    monkeypatch.setattr(tf2, "run_round", run_round)
    traces = tmp_path / "traces"
    summary = tf2.side_by_side(
        "par32",
        workers=1,
        ps=2,
        modes=("baseline", "tao"),
        steps=1,
        rounds=1,
        ps_placement=("round-robin", "min-size"),
        traces_dir=str(traces),
    )
    rows = {r["mode"]: r for r in summary["modes"]}
    assert list(rows) == ["baseline", "tao", "baseline@min-size", "tao@min-size"]
    params = {p: tf2.channel_params("par32", 2, None, p) for p in ("round-robin", "min-size")}
    # each placement's solo round first, then the rounds interleaved, then a traced round of each,
    # then what a byte costs the machine, worker 0 alone, on the first placement
    assert [(m, p, solo) for m, p, _, solo in ran] == [
        ("tio", "round-robin", True),
        ("tio", "min-size", True),
        *[(m, p, False) for _ in range(2) for p in ("round-robin", "min-size") for m in ("baseline", "tao")],
        ("baseline", "round-robin", True),
    ]
    # the machine's, whatever PS holds a variable: both placements' baselines keep them
    costs = {k: v for k, v in rows["baseline"].items() if k.startswith("comm_cpu")}
    assert costs.get("comm_cpu_s_per_message", 0) > 0
    assert costs == {k: v for k, v in rows["baseline@min-size"].items() if k.startswith("comm_cpu")}
    assert all(n == params[p] for _, p, n, _ in ran)
    c = summary["config"]
    assert c["ps_placement"] == ["round-robin", "min-size"] and c["channel_params"] == params["round-robin"]
    for p, where in (("round-robin", traces), ("min-size", traces / "at-min-size")):
        at = c["placements"][p]
        assert at["channel_params"] == params[p]
        # TAO ordered each placement's step function from its own solo round, every transfer traced
        s = at["schedules"]["tao"]
        assert s["file"] == str(where / "tao.schedule.json") and os.path.exists(s["file"])
        assert s["transfers_matched"] == s["transfers_total"] > 0
        assert tf2.step_graph(str(where / "graphs")).startswith(str(where))
    for name, r in rows.items():
        assert (
            r["traced"]["trace"] == str(traces / f"{name}.trace.json") and r["predicted"]["steps_per_s"] > 0
        )
        assert r["knobs"] == {} if name.startswith("baseline") else r["knobs"]["credit"] == 0
    # every mode against the first placement's baseline
    assert rows["baseline"]["vs_baseline"] == 1.0
    assert rows["baseline@min-size"]["vs_baseline"] == pytest.approx(
        rows["baseline@min-size"]["throughput_steps_per_s"] / rows["baseline"]["throughput_steps_per_s"]
    )
    md = tf2.markdown(summary)
    assert "| tao@min-size |" in md and "MODE@P: min-size, each variable split by MinSizePartitioner" in md
    assert "tao (variables placed min-size): worker 0's step function" in md
