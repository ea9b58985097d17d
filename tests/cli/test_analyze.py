"""``tfsched analyze`` as a user runs it: a real process, real graph files."""

import json
import os
import re
import subprocess
import sys

import pytest

from tests.helpers import shadow_module, small_simulation_processes

pytestmark = pytest.mark.tf


def run(*args, cwd=None, env=None):
    return subprocess.run(
        [sys.executable, "-m", "tfsched.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
    )


def assert_one_line_error(p, *needles):
    assert p.returncode != 0
    lines = [line for line in p.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("Error: ") and "Traceback" not in p.stderr
    for n in needles:
        assert n in lines[0], lines[0]


def predicted(base, credit, option, values):
    """``base`` run with ``--credit credit --json`` and, for each of ``values``, ``option value``
    (None: without it): value -> the prediction."""
    out = {}
    for v in values:
        p = run(*base, "--credit", credit, "--json", *(() if v is None else (option, str(v))))
        assert p.returncode == 0, p.stderr
        out[v] = json.loads(p.stdout)["prediction"]
    return out


class TestAnalyze:
    def test_json_shape(self, seq_graph_file):
        p = run("analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "tao", "--json")
        assert p.returncode == 0, p.stderr
        out = json.loads(p.stdout)  # exactly one JSON object
        assert set(out) == {"algorithm", "transfers", "prediction", "sizes", "ps_load"}
        # one PS: every byte of the step goes through it
        assert out["ps_load"] == {"/job:ps/replica:0/task:0": sum(t["bytes"] for t in out["transfers"])}
        assert out["algorithm"] == "tao"
        assert set(out["prediction"]) == {
            "baseline_s",
            "scheduled_s",
            "lower_bound_s",
            "upper_bound_s",
            "efficiency",
            "speedup_bound",
            "floor_s",
            "floor_by",
            "simulated_graph",
        }
        n = len(out["transfers"])  # without a trace, the prediction lays out the saved graph
        assert out["prediction"]["simulated_graph"] == {"from": "saved", "transfers": n, "saved_transfers": n}
        kinds = {t["kind"] for t in out["transfers"]}
        assert {"pull", "push"} <= kinds
        pulls = [t for t in out["transfers"] if t["kind"] == "pull"]
        assert len(pulls) == 33 and all(t["bytes"] > 0 and t["variable"] for t in pulls)
        assert all(t["src"].startswith("/job:ps/replica:0/task:0/device:") for t in pulls)
        pr = out["prediction"]
        assert pr["lower_bound_s"] <= pr["scheduled_s"] <= pr["upper_bound_s"]
        # no order is faster than the floor, which counts the dependencies TicTac's bound does not
        assert pr["lower_bound_s"] <= pr["floor_s"] <= min(pr["scheduled_s"], pr["baseline_s"]) + 1e-9
        assert re.match(
            r"(the (uplink|downlink) of |the channel |the longest path|.*'s compute)", pr["floor_by"]
        )
        # priorities are 0..n-1 per channel
        by_channel = {}
        for t in out["transfers"]:
            by_channel.setdefault((t["src"], t["dst"]), []).append(t["priority"])
        for prios in by_channel.values():
            assert min(prios) == 0 and max(prios) < len(prios)

    def test_formats_agree_and_schedule_is_written(self, seq_graph_file, tmp_path):
        outs = []
        for key in ("pb", "pbtxt", "meta"):
            args = ["analyze", seq_graph_file[key], "--json", "--algorithm", "tio"]
            if key != "meta":  # the MetaGraph's train_op collection names the fetch
                args += ["--fetch", "train"]
            p = run(*args)
            assert p.returncode == 0, p.stderr
            outs.append(json.loads(p.stdout)["transfers"])
        assert outs[0] == outs[1] == outs[2]
        sched = tmp_path / "s.json"
        p = run("analyze", seq_graph_file["pb"], "--fetch", "train", "-o", str(sched))
        assert p.returncode == 0 and "Predicted step time" in p.stdout
        # what no order can beat, and what sets it
        assert "floor: no order is faster" in p.stdout and "the most any order can gain" in p.stdout
        assert re.search(r"^the floor is set by .+: [\d.]+ s", p.stdout, re.M), p.stdout
        data = json.loads(sched.read_text())
        assert data["schema"] == "tfsched.schedule/1" and data["mode"] == "counter"
        from tfsched.ordering import load_schedule

        assert load_schedule(str(sched))["graph"]["transfers"] == len(outs[0])

    def test_sizes_for_the_graph_and_link(self, seq_graph_file):
        # the busiest channel's elements, from the gated transfers listed (as the pass counts
        # them: not the learning rate, a scalar constant it leaves ungated); ByteScheduler's
        # credit (4,000,000) is over a quarter of them, so the credit is that quarter
        p = run("analyze", seq_graph_file["pb"], "--fetch", "train", "--json")
        listed = json.loads(p.stdout)["transfers"]
        assert [t["tensor"] for t in listed if not t["gated"]] == ["train/learning_rate:0"]
        per_channel = {}
        for t in filter(lambda t: t["gated"], listed):
            per_channel[(t["src"], t["dst"])] = per_channel.get((t["src"], t["dst"]), 0) + t["bytes"] // 4
        credit = max(per_channel.values()) // 4
        assert 16_384 < credit < 1_000_000
        assert json.loads(p.stdout)["sizes"] == {
            "partition": credit,
            "credit": credit,
            "busiest_channel_params": max(per_channel.values()),
        }
        p = run("analyze", seq_graph_file["pb"], "--fetch", "train", "--bandwidth", "1Gbit")
        assert p.returncode == 0, p.stderr
        assert (
            f"partition {credit:,}, credit {credit:,} parameters; the busiest channel carries "
            f"{max(per_channel.values()):,} a step"
        ) in " ".join(p.stdout.split())
        p = run("analyze", seq_graph_file["pb"], "--fetch", "train", "--bandwidth", "10Gbit")
        assert f"partition {credit * 10:,}, credit {credit * 10:,} parameters" in " ".join(p.stdout.split())
        # and the prediction with them: --partition auto --credit auto
        p = run(
            "analyze", seq_graph_file["pb"], "--fetch", "train", "--partition", "auto", "--credit", "auto"
        )
        assert p.returncode == 0, p.stderr
        assert f"partition {credit:,}, credit {credit:,})" in " ".join(p.stdout.split())
        for bad in ("lots", "-5"):
            assert_one_line_error(run("analyze", seq_graph_file["pb"], "--credit", bad), "--credit", bad)

    def test_credit_per_sending_task(self, seq_graph_file):
        base = ["analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "tao", "--workers", "2"]
        p = run(*base, "--credit", "100000", "--host-credit", "--json")
        assert p.returncode == 0, p.stderr
        pr = json.loads(p.stdout)["prediction"]
        assert pr["host_credit"] is True and pr["credit"] == 100000
        assert pr["lower_bound_s"] <= pr["scheduled_s"] <= pr["upper_bound_s"]
        text = run(*base, "--credit", "100000", "--host-credit")
        assert text.returncode == 0 and "credit 100,000 per sending task" in text.stdout
        assert_one_line_error(run(*base, "--host-credit"), "--host-credit needs --credit")
        # the window in lockstep: predicted on its own, said in the table, refused without the window
        p = run(*base, "--credit", "100000", "--host-credit", "--host-order", "priority", "--json")
        assert p.returncode == 0, p.stderr
        lockstep = json.loads(p.stdout)["prediction"]
        assert lockstep["host_order"] == "priority" and pr["host_order"] == "steps"
        # the pulls of both workers end together: neither computes while the other pulls, as
        # when they are served in turn (slower here, where that overlap is most of the gain)
        assert (
            lockstep["scheduled_s"] > pr["scheduled_s"] and lockstep["lower_bound_s"] == pr["lower_bound_s"]
        )
        text = run(*base, "--credit", "100000", "--host-credit", "--host-order", "priority")
        assert text.returncode == 0 and "lockstep" in text.stdout  # the table's row (wrapped in its cell)
        assert_one_line_error(
            run(*base, "--credit", "100000", "--host-order", "priority"), "--host-credit too"
        )
        assert_one_line_error(run(*base, "--host-order", "fair"), "--host-order")

    def test_acknowledgement_share(self, seq_graph_file):
        base = ["analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "tao", "--workers", "2"]
        shares = predicted(base, "1000000", "--ack-share", (None, 8, 100))
        assert shares[None] == shares[8] and shares[8]["ack_share"] == 8 and shares[100]["ack_share"] == 100
        # Seq-32's 64 weights (65,536 parameters, pulled and pushed) are under an eighth of the
        # credit (125,000) and over a hundredth (16,384 at least): the window counts none, or them
        assert (shares[8]["acknowledged"], shares[100]["acknowledged"]) == (0, 64)
        assert shares[8]["messages"] == shares[100]["messages"] > 64
        text = run(*base, "--credit", "1000000", "--ack-share", "100")
        assert text.returncode == 0 and "ack from credit/100" in text.stdout
        assert "acknowledges none" not in text.stdout
        text = " ".join(run(*base, "--credit", "1000000").stdout.split())
        assert (
            f"the credit of 1,000,000 acknowledges none of the {shares[8]['messages']} messages of a step: "
            "each is under the 125,000 parameters it acknowledges (credit / 8), so it holds nothing"
        ) in text
        assert_one_line_error(run(*base, "--ack-share", "4"), "--ack-share needs --credit")

    def test_acknowledgement_groups(self, seq_graph_file):
        base = ["analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "tao", "--workers", "2"]
        base += ["--partition", "20000"]  # each 65,536-parameter weight in four slices of 16,384
        groups = predicted(base, str(4 * 16_384), "--ack-group", (None, 1, 2))
        assert [groups[g]["ack_group"] for g in groups] == [1, 1, 2]
        assert groups[None] == groups[1]
        assert groups[2]["lower_bound_s"] <= groups[2]["scheduled_s"] <= groups[2]["upper_bound_s"]
        # a terminal wide enough that the row's label does not wrap in its cell
        text = run(*base, "--credit", str(4 * 16_384), "--ack-group", "2", env={"COLUMNS": "200"})
        assert text.returncode == 0 and "one ack for up to 2 slices" in text.stdout
        assert_one_line_error(run(*base, "--ack-group", "2"), "--ack-group needs --credit")
        assert_one_line_error(
            run(*base, "--credit", "65536", "--credit-return", "sent", "--ack-group", "2"),
            "--ack-group needs --credit",
        )
        assert_one_line_error(run(*base, "--credit", "65536", "--ack-group", "0"), "--ack-group")

    def test_inter_op_threads(self, seq_graph_file):
        base = ["analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "tao", "--workers", "2"]
        preds = predicted(base, "100000", "--inter-op-threads", (None, 1, 2))
        assert [preds[t]["executor_threads"] for t in preds] == [None, 1, 2]
        # Without a trace each task's ops hold one thread at a time: with one, an acknowledgement's
        # ops wait behind the ops ready before them; with two, the spare one runs them at once
        assert preds[1]["scheduled_s"] > preds[None]["scheduled_s"] == preds[2]["scheduled_s"]
        assert preds[1]["baseline_s"] == preds[None]["baseline_s"]
        text = run(*base, "--credit", "100000", "--inter-op-threads", "1")
        assert text.returncode == 0 and "1 inter-op thread a task" in text.stdout
        assert_one_line_error(run(*base, "--inter-op-threads", "2"), "--inter-op-threads needs --credit")
        assert_one_line_error(
            run(*base, "--credit", "100000", "--inter-op-threads", "0"), "--inter-op-threads"
        )

    def test_a_window_for_the_pushes(self, seq_graph_file):
        base = ["analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "tao", "--workers", "2"]
        preds = predicted(base, "100000", "--push-credit", (None, 1_000_000))
        assert [preds[w]["push_credit"] for w in preds] == [0, 1_000_000]
        # Seq-32's weights (65,536 parameters) go one at a time under the credit of 100,000; a
        # window of 1,000,000 lets a worker push them all at once, while the PS's pulls keep the credit
        assert preds[1_000_000]["scheduled_s"] < preds[None]["scheduled_s"]
        assert preds[1_000_000]["baseline_s"] == preds[None]["baseline_s"]
        assert preds[1_000_000]["acknowledged"] == preds[None]["acknowledged"] == 64
        text = run(*base, "--credit", "100000", "--push-credit", "1000000")
        assert text.returncode == 0 and "credit 100,000, pushes 1,000,000" in " ".join(text.stdout.split())
        assert_one_line_error(run(*base, "--push-credit", "20000"), "--push-credit needs --credit")

    def test_steps_across_the_barrier(self, seq_graph_file):
        base = ["analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "layer", "--workers", "2"]
        preds = predicted(base, "100000", "--cross-steps", (None, 3))
        assert "cross_steps" not in preds[None] and preds[3]["cross_steps"] == 3
        # the next step's pulls go while this one's pushes run; vanilla TensorFlow stays behind
        assert preds[3]["scheduled_s"] < preds[None]["scheduled_s"]
        assert preds[3]["baseline_s"] == preds[None]["baseline_s"]
        assert preds[3]["floor_s"] == preds[None]["floor_s"]
        # the table's rows, as rich wraps them in their cells
        text = " ".join(run(*base, "--cross-steps", "3").stdout.split())
        assert "scheduled (layer, 3 steps across the barrier, the gates" in text
        assert "floor: no order behind the barrier is faster" in text
        assert_one_line_error(run(*base, "--cross-steps", "0"), "--cross-steps")

    def test_simulations_in_processes_of_their_own_predict_the_same(self, seq_graph_file):
        base = ["analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "tao", "--workers", "2"]
        for extra in (
            [],
            ["--credit", "100000"],
            ["--algorithm", "layer", "--credit", "100000", "--cross-steps", "3"],
        ):
            here, apart = (run(*base, *extra, "--json", "--jobs", j) for j in ("1", "2"))
            assert here.returncode == 0 and here.stdout == apart.stdout, (extra, here.stderr, apart.stderr)
        assert_one_line_error(run(*base, "--jobs", "0"), "--jobs")

    def test_credit_returned_when_sent(self, seq_graph_file):
        base = ["analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "tao", "--workers", "2"]
        preds = predicted(base, "100000", "--credit-return", ("ack", "sent"))
        assert [preds[how]["credit_return"] for how in preds] == ["ack", "sent"]
        # no acknowledgement's overhead between a window's transfers
        assert preds["sent"]["scheduled_s"] < preds["ack"]["scheduled_s"]
        assert preds["sent"]["baseline_s"] == preds["ack"]["baseline_s"]
        text = run(*base, "--credit", "100000", "--credit-return", "sent")
        assert text.returncode == 0 and "credit returned when sent" in text.stdout
        assert_one_line_error(run(*base, "--credit-return", "sent"), "--credit-return needs --credit")
        from tfsched.cli import CREDIT_RETURN_CHOICES, HOST_ORDER_CHOICES
        from tfsched.sim.engine import CREDIT_RETURNS, HOST_ORDERS

        assert CREDIT_RETURN_CHOICES == CREDIT_RETURNS and HOST_ORDER_CHOICES == HOST_ORDERS

    def test_saved_model(self, seq_graph_file, seq_saved_model, tmp_path):
        from google.protobuf import text_format
        from tensorflow.core.protobuf import saved_model_pb2

        want = json.loads(run("analyze", seq_graph_file["pb"], "--fetch", "train", "--json").stdout)[
            "transfers"
        ]
        # the export directory, its file, a tag set, the text form: the train meta graph, whose
        # train_op collection names the fetch
        text_dir = tmp_path / "text"
        text_dir.mkdir()
        sm = saved_model_pb2.SavedModel()
        sm.ParseFromString((seq_saved_model / "saved_model.pb").read_bytes())
        (text_dir / "saved_model.pbtxt").write_text(text_format.MessageToString(sm))
        for args in (
            [str(seq_saved_model)],
            [str(seq_saved_model / "saved_model.pb")],
            [str(seq_saved_model), "--tag-set", "train", "--format", "savedmodel"],
            [str(text_dir)],
        ):
            p = run("analyze", *args, "--json")
            assert p.returncode == 0, (args, p.stderr)
            assert json.loads(p.stdout)["transfers"] == want, args

    @pytest.mark.cluster
    def test_saved_model_traced_on_a_local_cluster(self, seq_saved_model, tmp_path):
        from tfsched.tracing.trace import Trace

        out = tmp_path / "t.json"
        p = run("trace", "--graph", str(seq_saved_model), "--init", "init", "--steps", "2", "-o", str(out))
        assert p.returncode == 0, p.stderr
        trace = Trace.load(str(out))
        assert trace.meta["graph"] == str(seq_saved_model) and trace.meta["fetches"] == ["train"]
        # the pulls and pushes the analysis finds in the export are the ones that crossed (a tiny
        # one at a step's start can go unrecorded: tests/tracing/test_trace.py)
        from tfsched.analysis import analyze

        m = analyze(str(seq_saved_model), algorithm="tao", trace=str(out)).trace_match
        assert m.transfers_total == 67 and m.transfers_matched >= m.transfers_total - 2
        # the prediction lays out what the trace ran, and says so
        p = run("analyze", str(seq_saved_model), "--algorithm", "tao", "--trace", str(out))
        assert p.returncode == 0, p.stderr
        said = " ".join(p.stdout.split())
        assert "predicted on the partition graphs the trace ran:" in said
        assert "traced step (vanilla TensorFlow, median of 2)" in said  # beside the prediction
        p = run("analyze", str(seq_saved_model), "--algorithm", "tao", "--trace", str(out), "--json")
        got = json.loads(p.stdout)
        assert got["prediction"]["simulated_graph"]["from"] == "ran"
        assert got["traced"]["steps"] == 2 and got["traced"]["scheduled"] is False

    @pytest.mark.cluster
    def test_tracing_a_graph_without_its_initializer(self, seq_graph_file, tmp_path):
        """A user's graph whose variables nothing initialized: one line that says so and what to
        do (it was TensorFlow's traceback of a hundred lines)."""
        out = tmp_path / "t.json"
        p = run("trace", "--graph", seq_graph_file["pb"], "--fetch", "train", "--steps", "1", "-o", str(out))
        assert_one_line_error(p, "seq32.pb: a step failed: variable", "is not initialized", "(--init OP)")
        assert not out.exists()

    @pytest.mark.cluster
    def test_a_saved_graph_runs_on_the_tasks_its_ops_are_placed_on(self, tmp_path):
        """A saved graph on two PS ran on one unless --ps 2 was given, and failed its first run
        ("was explicitly assigned to /job:ps/task:1"). trace and tune now start as many PS as its
        ops are placed on, and say at once when fewer are given."""
        from tfsched.models import build_graph
        from tfsched.tracing.trace import Trace

        graph = tmp_path / "two-ps.pb"
        graph.write_bytes(build_graph("seq32", ps_tasks=2, batch_size=2).graph_def().SerializeToString())
        out, saved = tmp_path / "t.json", ("--graph", str(graph), "--fetch", "train", "--init", "init")
        p = run("trace", *saved, "--steps", "1", "-o", str(out))
        assert p.returncode == 0, p.stderr[-2000:]
        trace = Trace.load(str(out))
        assert (trace.meta["ps"], trace.meta["workers"]) == (2, 1)
        assert {t.src.split("/device:")[0] for t in trace.transfers if t.src.startswith("/job:ps")} == {
            "/job:ps/replica:0/task:0",
            "/job:ps/replica:0/task:1",
        }
        for command, extra in (("trace", ()), ("tune", ("--workers", "1", "--loopback"))):
            p = run(command, *saved, "--ps", "1", *extra, "-o", str(tmp_path / "x.json"))
            assert_one_line_error(
                p, "two-ps.pb: its ops are placed on 2 ps tasks (up to /job:ps/task:1); give --ps 2"
            )
        assert not (tmp_path / "x.json").exists()

    def test_help_has_examples(self):
        for cmd in ("analyze", "demo"):
            p = run(cmd, "--help")
            assert p.returncode == 0 and "Example" in p.stdout


@pytest.mark.parametrize(
    ("model", "placement", "busiest", "advice"),
    [
        (
            "transformer",
            "round-robin",
            r"9\d%",
            r"spread the variables by the bytes they move \(--placement FILE writes a plan under which the busiest PS "
            r"carries 5\d%",
        ),
        ("alexnet", "bytes", r"6\d%", r"its variable dense_1/kernel alone moves 6\d%, .* partition it"),
        ("alexnet", "min-size", None, None),
        ("seq32", "bytes", None, None),
    ],
)
def test_a_ps_that_carries_most_of_the_bytes_is_named(tmp_path, model, placement, busiest, advice):
    # Two PS. The Transformer spread round-robin has every kernel on the first (5.2M parameters
    # against 27,658): analyze names it and says to spread by bytes. AlexNet spread by bytes
    # moved still has one PS carry its 16.8M-parameter dense layer, more than half the bytes:
    # analyze says to partition it; split as TensorFlow 2's MinSizePartitioner splits it, its
    # shards on both PS, no PS carries more than its share. Seq-32's equal layers alternate, half
    # each: no warning.
    from tfsched.models import build_graph

    built = build_graph(model, batch_size=2, ps_tasks=2, ps_placement=placement)
    path = tmp_path / "g.pb"
    path.write_bytes(built.graph_def().SerializeToString())
    p = run("analyze", str(path), "--fetch", "train", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    load = out["ps_load"]
    assert list(load) == ["/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"]
    assert sum(load.values()) == sum(t["bytes"] for t in out["transfers"])  # each touches one PS
    assert (max(load.values()) > 0.625 * sum(load.values())) is (busiest is not None)
    text = run("analyze", str(path), "--fetch", "train")
    assert text.returncode == 0, text.stderr
    said = " ".join(text.stdout.split())  # as one line, however the console wrapped it
    assert "PS load, bytes a step: ps:0" in said
    warning = re.search(
        r"ps:\d carries (\d+%) where an even spread would be 50%, and its link bounds the step: (.*)", said
    )
    assert (warning is not None) is (busiest is not None), said
    if warning:
        assert re.fullmatch(busiest, warning[1]), said
        assert re.search(advice, warning[2]), said


def test_analyze_says_what_it_does_on_a_terminal_and_nothing_elsewhere(seq_graph_file, tmp_path):
    """On a terminal, a status line says what runs now, from reading the graph to bounding the
    step (tens of workers take minutes, and it said nothing); piped, stderr stays empty."""
    import pty
    import select
    import time

    from tfsched.analysis import analyze

    said = []
    analyze(seq_graph_file["pb"], fetches=["train"], algorithm="tao", workers=2, progress=said.append)
    assert [s.split(" ")[0] for s in said] == ["reading", "ordering", "simulating", "simulating", "bounding"]
    assert said[0] == f"reading {seq_graph_file['pb']}" and "(TAO)" in said[1], said
    # the simulations in two processes of their own while this one bounds the step
    apart = []
    analyze(
        seq_graph_file["pb"], fetches=["train"], algorithm="tao", workers=2, progress=apart.append, jobs=2
    )
    assert [s.split(" ")[0] for s in apart] == ["reading", "ordering", "simulating", "bounding", "waiting"]
    assert apart[2].endswith("and vanilla TensorFlow (the transfers in no order): 6 runs in 2 processes"), (
        apart
    )

    args = ("analyze", seq_graph_file["pb"], "--fetch", "train", "--algorithm", "tao", "--workers", "2")
    theirs, ours = pty.openpty()
    shown, deadline, p = b"", time.monotonic() + 120, None
    try:
        with open(tmp_path / "out", "wb") as out:
            p = subprocess.Popen(
                [sys.executable, "-m", "tfsched.cli", *args],
                stdout=out,
                stderr=ours,
                env={**os.environ, "TERM": "xterm", "COLUMNS": "200"},
            )
        os.close(ours)
        while time.monotonic() < deadline:
            if not select.select([theirs], [], [], 1.0)[0]:
                continue
            try:
                chunk = os.read(theirs, 65536)
            except OSError:  # EIO: the process closed its end
                break
            if not chunk:
                break
            shown += chunk
        p.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(theirs)
        if p is not None:
            p.kill()  # (once it has ended: nothing)
    assert p.returncode == 0 and "Predicted step time" in (tmp_path / "out").read_text()
    status = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", shown.decode(errors="replace"))
    # the first and the last (a status is redrawn a few times a second: Seq-32's steps between
    # them come and go unseen, and the last is drawn once more as it ends)
    for text in (f"reading {seq_graph_file['pb']}", said[-1]):
        assert f"analyze: {text}" in status, status[-2000:]
    piped = run(*args)
    assert piped.returncode == 0 and piped.stderr == "", piped.stderr


def test_stderr_stays_quiet_when_tensorflow_infers_the_shapes(seq_graph_file, tmp_path):
    """A graph saved without ``_output_shapes`` has TensorFlow import it to infer them: its C++
    start-up chatter (six lines: absl's, oneDNN's, the CUDA probe's) reached analyze's stderr
    until the thirty-third session, whatever the log level."""
    import os

    gd = type(seq_graph_file["graph_def"])()
    gd.CopyFrom(seq_graph_file["graph_def"])
    for n in gd.node:
        if "_output_shapes" in n.attr:
            del n.attr["_output_shapes"]
    path = tmp_path / "noshapes.pb"
    path.write_bytes(gd.SerializeToString())
    env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    p = subprocess.run(
        [sys.executable, "-m", "tfsched.cli", "analyze", str(path), "--fetch", "train"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0 and "Predicted step time" in p.stdout, p.stderr
    assert p.stderr == ""


class TestBadInput:
    def test_missing_file(self, tmp_path):
        assert_one_line_error(run("analyze", str(tmp_path / "nope.pb")), "nope.pb", "no such file")

    def test_truncated_pb(self, seq_graph_file, tmp_path):
        data = open(seq_graph_file["pb"], "rb").read()
        bad = tmp_path / "cut.pb"
        bad.write_bytes(data[: len(data) // 2])
        assert_one_line_error(run("analyze", str(bad)), "cut.pb", "truncated, corrupt")

    def test_text_that_is_not_a_graph(self, tmp_path):
        bad = tmp_path / "notes.pbtxt"
        bad.write_text("these are my notes, not a graph\n")
        assert_one_line_error(run("analyze", str(bad)), "notes.pbtxt", "not a TensorFlow")

    def test_a_tfsched_file_given_as_the_graph(self, seq_graph_file, tmp_path):
        """A trace or schedule where the graph goes says what it is and where it goes (was the
        protobuf parser's complaint about the file's first characters)."""
        sched = tmp_path / "s.json"
        assert run("analyze", seq_graph_file["pb"], "-o", str(sched)).returncode == 0
        assert_one_line_error(
            run("analyze", str(sched)), "s.json", "a tfsched schedule file", "tfsched.enable"
        )
        trace = tmp_path / "t.json"
        trace.write_text(json.dumps({"schema": "tfsched.trace/1", "steps": 0}))
        assert_one_line_error(run("analyze", str(trace)), "t.json", "a tfsched trace file", "--trace")
        other = tmp_path / "o.json"
        other.write_text(json.dumps({"schema": "not ours"}))
        p = run("analyze", str(other))
        assert_one_line_error(p, "o.json", "truncated, corrupt")
        assert "a tfsched" not in p.stderr

    def test_a_trace_of_tensorflow_2_calls(self, seq_graph_file, tmp_path):
        """A ``tfsched.trace_functions`` trace beside a session's graph: analyze says what it is
        and which graph it needs, the function's as ``enable_functions(dump_graphs=...)`` wrote it
        (was: it matches 0 transfers, as a trace of another model)."""
        from tfsched.tracing.trace import FUNCTIONS_API, OpRecord, Trace

        trace = Trace(
            steps=1, ops=[OpRecord(0, "/job:ps/replica:0/task:0/device:CPU:0", "a", "Add", 0.0, 1.0)]
        )
        trace.step_times_us, trace.meta = [2.0], {"api": FUNCTIONS_API}
        trace.save(str(tmp_path / "calls.json"))
        p = run("analyze", seq_graph_file["pb"], "--fetch", "train", "--trace", str(tmp_path / "calls.json"))
        assert_one_line_error(
            p, "calls.json", "TensorFlow 2 function calls", "not a function's graph", "dump_graphs"
        )
        p = run(
            "viz",
            str(tmp_path / "calls.json"),
            "-o",
            str(tmp_path / "x.png"),
            "--graph",
            seq_graph_file["pb"],
        )
        assert_one_line_error(p, "calls.json", "TensorFlow 2 function calls")
        assert not (tmp_path / "x.png").exists()

    def test_fetch_not_in_graph(self, seq_graph_file):
        assert_one_line_error(
            run("analyze", seq_graph_file["pb"], "--fetch", "no_such_op"), "no_such_op", "not in the graph"
        )

    def test_graph_without_ps(self, tmp_path):
        import tensorflow as tf

        g = tf.Graph()
        with g.as_default(), g.device("/job:worker/task:0"):
            v = tf.compat.v1.get_variable("v", [3])
            tf.identity(v * 2.0, name="out")
        path = tmp_path / "local.pb"
        path.write_bytes(g.as_graph_def().SerializeToString())
        assert_one_line_error(run("analyze", str(path), "--fetch", "out"), "local.pb", "no parameter server")

    def test_unknown_dtype(self, seq_graph_file, tmp_path):
        gd = type(seq_graph_file["graph_def"])()
        gd.CopyFrom(seq_graph_file["graph_def"])
        victim = next(n for n in gd.node if "dtype" in n.attr)
        victim.attr["dtype"].type = 777
        path = tmp_path / "baddtype.pb"
        path.write_bytes(gd.SerializeToString())
        assert_one_line_error(run("analyze", str(path)), "baddtype.pb", victim.name, "unknown dtype 777")

    def test_cycle(self, seq_graph_file, tmp_path):
        gd = type(seq_graph_file["graph_def"])()
        gd.CopyFrom(seq_graph_file["graph_def"])
        by = {n.name: n for n in gd.node}
        a = next(n for n in gd.node if n.op == "MatMul")
        consumer = next(n for n in gd.node if any(i.split(":")[0] == a.name for i in n.input))
        a.input.append(consumer.name)  # a -> consumer -> a
        assert consumer.name in by
        path = tmp_path / "cycle.pb"
        path.write_bytes(gd.SerializeToString())
        assert_one_line_error(run("analyze", str(path)), "cycle.pb", "cycle outside control flow")

    def test_a_node_placed_on_no_device(self, seq_graph_file, tmp_path):
        """A device string that is none ('/job:ps/task:x'): analyze named neither the file nor the
        node (the default job was sought among every node's device first), and trace and tune gave
        TensorFlow's ValueError and its traceback from importing the graph."""
        gd = type(seq_graph_file["graph_def"])()
        gd.CopyFrom(seq_graph_file["graph_def"])
        victim = next(n for n in gd.node if n.device.startswith("/job:ps"))
        victim.device = "/job:ps/task:x"
        path = tmp_path / "baddevice.pb"
        path.write_bytes(gd.SerializeToString())
        assert_one_line_error(
            run("analyze", str(path), "--fetch", "train"),
            f"baddevice.pb: node '{victim.name}': cannot parse device string '/job:ps/task:x'",
        )
        for command, extra in (("trace", ()), ("tune", ("--workers", "1", "--loopback"))):
            p = run(command, "--graph", str(path), "--fetch", "train", *extra, "-o", str(tmp_path / "x.json"))
            assert_one_line_error(p, "baddevice.pb: TensorFlow cannot import the graph")
        assert not (tmp_path / "x.json").exists()

    def test_saved_model_without_the_meta_graph_asked_for(self, seq_graph_file, seq_saved_model, tmp_path):
        from tensorflow.core.protobuf import saved_model_pb2

        where = str(seq_saved_model / "saved_model.pb")
        assert_one_line_error(
            run("analyze", str(seq_saved_model), "--tag-set", "serve,gpu"),
            where,
            "no meta graph tagged gpu,serve (its tag sets: train; serve)",
        )
        # the serving graph was saved without devices: nothing says what the PS holds
        assert_one_line_error(
            run("analyze", str(seq_saved_model), "--tag-set", "serve"), "no parameter server", "no devices"
        )
        # neither of two meta graphs is the training one: the user must choose
        sm = saved_model_pb2.SavedModel()
        sm.ParseFromString((seq_saved_model / "saved_model.pb").read_bytes())
        sm.meta_graphs[0].meta_info_def.tags[:] = ["eval"]
        two = tmp_path / "two"
        two.mkdir()
        (two / "saved_model.pb").write_bytes(sm.SerializeToString())
        assert_one_line_error(
            run("analyze", str(two)),
            str(two / "saved_model.pb"),
            "2 meta graphs (tag sets: eval; serve)",
            "--tag-set",
        )
        assert_one_line_error(run("analyze", str(tmp_path)), str(tmp_path), "without saved_model.pb")
        assert_one_line_error(
            run("analyze", str(seq_saved_model), "--format", "graphdef"), "is a directory, not a graph file"
        )
        assert_one_line_error(
            run("analyze", seq_graph_file["pb"], "--tag-set", "train"),
            "seq32.pb",
            "a tag set chooses a SavedModel's meta graph; this is a GraphDef",
        )
        (two / "saved_model.pb").write_bytes(sm.SerializeToString()[:100])
        assert_one_line_error(run("analyze", str(two)), "saved_model.pb", "truncated, corrupt")

    def test_workers_of_an_in_graph_replicated_graph(self, tmp_path):
        from tfsched.models import build_graph

        path = tmp_path / "ig2.pb"
        path.write_bytes(build_graph("seq32", in_graph_workers=2).graph_def().SerializeToString())
        p = run("analyze", str(path), "--fetch", "train", "--workers", "4")
        assert_one_line_error(
            p, "ig2.pb: --workers 4 replicates a one-worker graph", "this one has 2 workers"
        )
        assert run("analyze", str(path), "--fetch", "train", "--workers", "2").returncode == 0

    def test_bad_option_value(self, seq_graph_file):
        assert_one_line_error(run("analyze", seq_graph_file["pb"], "--bandwidth", "fast"), "--bandwidth")
        assert_one_line_error(run("analyze", seq_graph_file["pb"], "--algorithm", "magic"), "magic")
        # a link no prediction can sum (1e-300 bit/s was the simulator's OverflowError)
        for option, value, needle in (
            ("--bandwidth", "1e-300bit", "must be at least 1 bit/s"),
            ("--bandwidth", "0", "must be at least 1 bit/s"),
            ("--overhead", "1e300s", "must be from 0 to a day (86400s)"),
        ):
            assert_one_line_error(run("analyze", seq_graph_file["pb"], option, value), option, needle)
        # an empty or spelled-as-a-device PS job (taken until the thirty-first session: with no
        # task on it, a fallback made the variables' holders the PS)
        for job in ("", "/job:ps", "ps:0"):
            p = run("analyze", seq_graph_file["pb"], "--ps-job", job)
            assert_one_line_error(p, f"a PS job must be a job name such as 'ps', got {job!r}")

    def test_an_option_that_would_be_ignored_is_an_error(self, seq_graph_file, tmp_path, monkeypatch):
        # each error comes before any work: before TensorFlow is imported (a trace's and a tuning's
        # came after it, 22 s and 11 s here beside another test)
        said = shadow_module(tmp_path / "shadow", "tensorflow", monkeypatch)
        shadowed = subprocess.run([sys.executable, "-c", "import tensorflow"], capture_output=True, text=True)
        assert said in shadowed.stderr  # the shadow works
        assert_one_line_error(
            run("analyze", seq_graph_file["pb"], "--statistic", "median"), "--statistic needs --trace"
        )
        out = tmp_path / "t.json"
        for cmd in ("trace", "tune"):
            for extra in (("--fetch", "train"), ("--init", "init"), ("--tag-set", "train")):
                p = run(cmd, "--model", "seq32", *extra, "-o", str(out))
                assert_one_line_error(p, "go with --graph; a built-in model has its own")
        p = run("tune", "--model", "seq32", "--graph", seq_graph_file["pb"], "-o", str(out))
        assert_one_line_error(p, "give either --model or --graph")
        # a saved graph has its variables placed already: a placement for it would be ignored
        for cmd in ("trace", "tune"):
            p = run(
                cmd,
                "--graph",
                seq_graph_file["pb"],
                "--fetch",
                "train",
                "--ps-placement",
                "held",
                "-o",
                str(out),
            )
            assert_one_line_error(p, "--ps-placement places a built-in model's variables")
            p = run(cmd, "--model", "seq32", "--ps", "2", "--ps-placement", "even", "-o", str(out))
            assert_one_line_error(
                p, "--ps-placement", "'even' is not one of 'bytes', 'held', 'round-robin', 'min-size'"
            )
        assert_one_line_error(run("tune", "--partition", "1000", "-o", str(out)), "add it")
        # a seed the Bayesian search cannot take (it was numpy's traceback, after the graphs)
        for seed in ("-1", str(2**32)):
            p = run("tune", "--model", "seq32", "--loopback", "--seed", seed, "-o", str(out))
            assert_one_line_error(p, "--seed", "is not in the range 0<=x<=4294967295")
        # more kernels at a time than ConfigProto's int32 holds (each task refused it as it started)
        p = run("bench", "--model", "seq32", "--inter-op-threads", str(2**31), "-o", str(out))
        assert_one_line_error(p, "--inter-op-threads", "is not in the range 0<=x<=2147483647")
        # a fixed partition no int64 holds (it was a worker's failure, once the cluster ran)
        p = run("tune", "--credit-only", "--partition", str(2**64), "--loopback", "-o", str(out))
        assert_one_line_error(p, "the fixed partition must be a whole number of parameters")
        # bench takes several placements, each once, on 2 PS or more (before any cluster starts)
        bench = ("bench", "--model", "seq32", "--loopback", "--batch-size", "2", "-o", str(out))
        p = run(*bench, "--ps", "2", "--ps-placement", "bytes,even")
        assert_one_line_error(p, "--ps-placement", "'even' is not one of bytes, held, round-robin, min-size")
        p = run(*bench, "--ps", "2", "--ps-placement", "held,held")
        assert_one_line_error(
            p, "--ps-placement", "expected distinct placements, comma-separated (got 'held,held')"
        )
        p = run(*bench, "--ps-placement", "bytes,held")
        assert_one_line_error(p, "several --ps-placement need --ps 2 or more")
        assert not out.exists()

    @pytest.mark.parametrize(
        "kwargs,message",
        [
            (dict(partition="big"), "partition must be a number of parameters (>= 0) or 'auto', got 'big'"),
            (dict(credit=-5), "credit must be a number of parameters (>= 0) or 'auto', got -5"),
            (dict(workers=0), "workers must be a positive number, got 0"),
            (dict(statistic="median"), "statistic needs a trace"),
            (dict(executor_threads=2), "executor_threads needs a credit"),
            (dict(push_credit=20_000), "push_credit needs a credit"),
            (
                dict(credit=1000, push_credit=-1),
                "push_credit must be a positive number of parameters, got -1",
            ),
            (
                dict(credit=1000, executor_threads=0),
                "executor_threads must be a positive number of threads, got 0",
            ),
            (dict(jobs=0), "jobs must be a positive number of processes, got 0"),
            (dict(bandwidth_bps=1e-300), "a bandwidth must be at least 1 bit/s, got 1e-300"),
            (dict(overhead_s=1e300), "an overhead must be from 0 to a day (86400 s), got 1e+300 s"),
        ],
    )
    def test_the_library_call_checks_its_arguments(self, seq_graph_file, kwargs, message):
        """As the CLI's options are checked (a string partition was a TypeError, a negative
        credit was reported in bytes, workers=0 and a statistic without a trace were taken)."""
        from tfsched.analysis import analyze
        from tfsched.errors import TfschedError

        with pytest.raises(TfschedError, match=re.escape(message)):
            analyze(seq_graph_file["pb"], fetches=["train"], **kwargs)

    def test_a_file_descriptor_is_not_a_path(self, seq_graph_file, tmp_path):
        """A path given in Python must be a str or an os.PathLike. ``open`` takes an int for a
        file descriptor: a schedule, trace or placement read "from" 3 closed the caller's
        descriptor 3 when done (and a graph was an AttributeError, a pathlib.Path one too)."""
        import pathlib

        from tfsched.analysis import analyze
        from tfsched.errors import TfschedError
        from tfsched.io import check_writable, write_atomic
        from tfsched.ordering.schedule import load_schedule
        from tfsched.placement import load_placement
        from tfsched.tracing.trace import Trace
        from tfsched.tune.run import read_tune_file

        r, w = os.pipe()
        os.write(w, b'{"schema": "tfsched.schedule/1"}')
        calls = {
            "graph": lambda p: analyze(p, fetches=["train"]),
            "schedule": load_schedule,
            "trace": Trace.load,
            "placement": load_placement,
            "tune result": read_tune_file,
            "result": check_writable,
        }
        try:
            for what, call in calls.items():
                with pytest.raises(TfschedError, match=re.escape(f"a {what} file must be a path")):
                    call(r)
                os.fstat(r)  # still the caller's
            with pytest.raises(TfschedError, match="a result file must be a path"):
                write_atomic(w, lambda f: f.write("x"))
            os.fstat(w)
        finally:
            os.close(r)
            os.close(w)
        assert analyze(pathlib.Path(seq_graph_file["pb"]), fetches=["train"]).schedule.priorities
        assert not list(tmp_path.iterdir())  # nothing written

    def test_running_out_of_memory_is_one_error_line(self, seq_graph_file, tmp_path):
        """More workers than memory holds was a traceback from deep in the simulator or the
        bounds (numpy's or Python's MemoryError); it is one line that says what ran out, with
        nothing written. The process gets 100 MiB more than it has mapped once TensorFlow is in:
        with 500 MiB, 3,000 workers sometimes fitted (and simulated for hours), and where the
        small allocations had used up the room, a finalizer's report of its own MemoryError came
        before the line, or the process hung as it unwound (2 of 28 runs of 30,000 workers)."""
        out = tmp_path / "s.json"
        code = (
            "import resource, sys, tfsched.cli\n"
            "from tfsched.graph._tf import import_tensorflow\n"
            "import_tensorflow()\n"
            "vm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmSize:'))\n"
            "resource.setrlimit(resource.RLIMIT_AS, ((vm + 100 * 1024) * 1024, resource.RLIM_INFINITY))\n"
            "sys.argv = ['tfsched', 'analyze', sys.argv[1], '--workers', '30000', '--jobs', '1',"
            " '-o', sys.argv[2]]\n"
            "tfsched.cli.main()\n"
        )
        p = subprocess.run(
            [sys.executable, "-c", code, seq_graph_file["pb"], str(out)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        )
        assert_one_line_error(p, "out of memory", "fewer --workers")
        assert not out.exists()

    def test_a_simulation_process_out_of_memory_is_one_error_line(
        self, seq_graph_file, tmp_path, monkeypatch
    ):
        """With ``--jobs 2`` the simulations run in processes of their own; one that ran out of
        memory was "a simulation process failed: MemoryError", without what to do."""
        small_simulation_processes(tmp_path, monkeypatch, room_mib=16)
        out = tmp_path / "s.json"
        p = run("analyze", seq_graph_file["pb"], "--workers", "200", "--jobs", "2", "-o", str(out))
        assert_one_line_error(p, "out of memory in a simulation process; ask for less", "fewer --workers")
        assert not out.exists()

    def test_only_a_finalizers_memory_error_goes_unreported(self):
        """The hook that quiets finalizers out of memory passes every other report on, and a
        second ``main()`` in one process does not wrap it again."""
        from types import SimpleNamespace

        from tfsched.cli import _quiet_out_of_memory

        reported = []
        hook = _quiet_out_of_memory(reported.append)
        assert _quiet_out_of_memory(hook) is hook
        for error in (MemoryError(), ValueError("x"), MemoryError("Unable to allocate"), OSError()):
            hook(SimpleNamespace(exc_value=error))
        assert [type(r.exc_value) for r in reported] == [ValueError, OSError]

    def test_output_not_written_on_error(self, tmp_path):
        out = tmp_path / "s.json"
        p = run("analyze", str(tmp_path / "missing.pb"), "-o", str(out))
        assert p.returncode != 0 and not out.exists()


@pytest.mark.parametrize(
    "args,needles",
    [
        # each of these runs for a minute or more before it writes (the batch-size probe of
        # VGG16, 3,000 traced steps, tuning trials): a bad output path must stop it first
        (("bench", "--model", "vgg16", "--loopback", "-o", "{missing}/b.json"), ("cannot write",)),
        (
            ("bench", "--model", "vgg16", "--loopback", "--traces", "{file}/t", "-o", "{tmp}/b.json"),
            ("cannot make a directory there", "is a file"),
        ),
        (("trace", "--model", "seq32", "--steps", "3000", "-o", "{missing}/t.json"), ("cannot write",)),
        (("tune", "--model", "seq32", "--loopback", "-o", "{missing}/t.json"), ("cannot write",)),
        # ... and so must a share of cores no emulated host could have
        *(
            ((cmd, "--model", "vgg16", "--host-cores", "99", "-o", "{tmp}/x.json"), ("--host-cores", needle))
            for cmd in ("bench", "tune")
            for needle in ["cores per host must be from 0.05 to this machine's"]
        ),
    ],
)
def test_a_long_run_refuses_an_output_it_cannot_write_before_it_starts(tmp_path, args, needles):
    import time

    (tmp_path / "f").write_text("a file")
    paths = {"missing": str(tmp_path / "no" / "such"), "file": str(tmp_path / "f"), "tmp": str(tmp_path)}
    start = time.monotonic()
    p = run(*(a.format(**paths) for a in args))
    assert_one_line_error(p, *needles)
    assert time.monotonic() - start < 20, "it ran before it checked"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["f"]  # nothing written or made


@pytest.mark.cluster
def test_demo_trains_on_a_local_cluster():
    p = run("demo", "--model", "seq32", "--steps", "2", "--rounds", "1", "--modes", "baseline,tio")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Predicted step time" in p.stdout and "Measured on a local cluster" in p.stdout
    assert "vanilla" in p.stdout and "tfsched tio" in p.stdout
    # TensorFlow's C++ error logs (the GPU probe's on a machine without CUDA) stay off the terminal
    assert not re.search(r"^E\d{4} ", p.stderr, re.M), p.stderr[-2000:]


def test_demo_predicts_a_window_for_the_pushes():
    p = run("demo", "--model", "seq32", "--no-train", "--modes", "baseline,tio+pc,tio+pc+w20000")
    assert p.returncode == 0, p.stderr[-2000:]
    # the table's first column, its rows' wrapped lines joined
    labels = " ".join(" ".join(line.split("│")[1].split()) for line in p.stdout.splitlines() if "│" in line)
    assert "TIO, partition 524,928, credit 524,928, pushes 20,000" in labels
    # what no order can beat, and so the most any order could gain over the baseline
    m = re.search(
        r"^floor = ([\d.]+) s: no order steps faster, at most ([\d.]+)x the baseline", p.stdout, re.M
    )
    assert m and float(m[1]) > 0 and float(m[2]) >= 1.0, p.stdout


def test_demo_predicts_its_fastest_mode_across_the_barrier():
    """By default the demo runs TAO, partitioned under a window per sending task, across the
    barrier too: predicted across it (its gates serving by priority among the arrived), faster
    than the same mode behind it."""
    p = run("demo", "--model", "seq32", "--no-train")
    assert p.returncode == 0, p.stderr[-2000:]
    rows = []  # each row's cells, its first column's wrapped lines joined
    for line in p.stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) == 5 and cells[2]:
            rows.append(cells)
        elif len(cells) == 5 and rows:
            rows[-1][0] += f" {cells[0]}"
    rows = {cells[0]: cells for cells in rows}
    crossed = [k for k in rows if k.endswith("across the barrier")]
    behind = [k for k in rows if k.startswith("TAO, partition") and k not in crossed]
    assert len(crossed) == 1 and len(behind) == 1, rows
    assert rows[crossed[0]][1] == "ready"
    assert float(rows[crossed[0]][2]) < float(rows[behind[0]][2])
    # the floor is of the steps behind the barrier, which the crossing can pass
    assert "no order behind the barrier steps faster" in " ".join(p.stdout.split())


def test_demo_rejects_bad_modes():
    assert_one_line_error(run("demo", "--modes", "tio,warp"), "--modes")
    assert_one_line_error(run("demo", "--no-train", "--steps", "3"), "--steps is for the training")
    assert_one_line_error(
        run("demo", "--no-train", "--rounds", "1", "--loopback"),
        "--rounds and --loopback are for the training",
    )
