"""``tfsched tune --api tf2``: trials of TensorFlow 2's ParameterServerStrategy on a real cluster."""

import ast
import json
import statistics

import pytest

from tests.cli.test_analyze import assert_one_line_error
from tests.helpers import cli


@pytest.mark.tf
@pytest.mark.cluster
def test_a_tf2_tuning_run_measures_each_setting_in_a_coordinator_of_its_own(tmp_path):
    """On links shaped by relays on loopback (``--shaped-loopback``), which reach the coordinators'
    cluster through ``LocalCluster.client_spec``: each task's connections are paced by its own
    links."""
    from tfsched.bench.run import tuned_mode
    from tfsched.bench.tf2 import channel_params
    from tfsched.enforce.api import link_sizes
    from tfsched.errors import TfschedError
    from tfsched.tune.run import read_tune_file
    from tfsched.tune.search import ONE_IN_FLIGHT, Setting, Space

    out = tmp_path / "tune.json"
    p = cli(
        "tune",
        *("--api", "tf2", "--model", "seq32", "--workers", "2", "--batch-size", "4"),
        *("--shaped-loopback", "--bandwidth", "1Gbit"),
        *("--trials", "2", "--confirm", "2", "--confirm-rounds", "2", "--measure", "1"),
        *("--credit-return", "sent", "-o", str(out)),
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    doc = read_tune_file(str(out))
    c, trials = doc["config"], doc["trials"]
    assert (c["api"], c["model"], c["mode"], c["workers"], c["bandwidth"]) == (
        "tf2",
        "seq32",
        "train",
        2,
        "1 Gbit/s",
    )
    assert c["links"] == "relays"
    # the first trial is ByteScheduler's setting for the strategy's busiest PS (all of Seq-32 on
    # the one PS), on the search's grid; then, with the credit returned when sent, one tensor in
    # flight; then both, the leader first, in two more rounds in turn: the winner's mean is its
    # repeats' alone
    params = channel_params("seq32", 1)
    space = Space()
    defaults = space.setting(space.params(Setting(*link_sizes(1e9, params))))
    assert c["channel_params"] == params and c["defaults"] == defaults.to_json()
    assert Setting.from_json(trials[0]) == defaults and Setting.from_json(trials[1]) == ONE_IN_FLIGHT
    assert c["credit_return"] == "sent"
    assert [t["confirm"] for t in trials] == [False, False, True, True, True, True]
    first, second = sorted(trials[:2], key=lambda t: t["value"], reverse=True)
    order = [Setting.from_json(t) for t in (first, second)]
    assert [Setting.from_json(t) for t in trials[2:]] == order * 2
    repeats = {s: [t["value"] for t in trials[2:] if Setting.from_json(t) == s] for s in order}
    won = max(order, key=lambda s: statistics.mean(repeats[s]))
    best = doc["best"]
    assert Setting.from_json(best) == won and best["measurements"] == 2
    assert best["repeats_only"] is True and c["confirm_rounds"] == 2
    assert best["throughput_steps_per_s"] == pytest.approx(statistics.mean(repeats[won]))
    assert "(mean of 2 repeats) over 2 trials and 4 repeats of the leaders" in p.stdout
    # how the leaders compared, best first, in the file and on the terminal
    assert [Setting.from_json(x) for x in doc["leaders"]] == sorted(
        order, key=lambda s: statistics.mean(repeats[s]), reverse=True
    )
    assert [x["value"] for x in doc["leaders"]] == pytest.approx(
        sorted((statistics.mean(v) for v in repeats.values()), reverse=True)
    )
    assert "leaders: " + won.describe() in p.stdout
    # vanilla TensorFlow before and after the trials, on the same cluster: a round each
    assert len(c["baseline_steps_per_s"]) == 2 and min(c["baseline_steps_per_s"]) > 0
    assert c["best_vs_baseline"] == pytest.approx(
        best["throughput_steps_per_s"] / statistics.mean(c["baseline_steps_per_s"])
    )
    assert len(c["round_s"]) == 2 + len(trials) and min(c["round_s"]) > 0
    # what a user's coordinator calls to train with it, said on the terminal and in the file
    call = ast.parse(c["enable"], mode="eval").body
    assert ast.unparse(call.func) == "tfsched.enable_functions"
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    assert kwargs == {
        **{k: v for k, v in best.items() if k in ("partition", "credit") and v},
        "credit_return": "sent",
    }
    assert f"in force with: {c['enable']}" in p.stdout and "x vanilla TensorFlow's steps/s" in p.stdout
    # bench --api tf2 --tuned runs it as tuned; the session bench, which it was not tuned for, refuses it
    where = {"model": "seq32", "workers": 2, "ps": 1, "bandwidth": "1 Gbit/s", "batch_size": 4}
    mode = tuned_mode(doc, str(out), **where, api="tf2")
    assert (
        mode == "tio" + (f"+p{best['partition']}" if best["partition"] else "") + f"+c{best['credit']}+sent"
    )
    with pytest.raises(TfschedError, match=r"tune.json: tuned for api tf2, not api session$"):
        tuned_mode(doc, str(out), **where)
    with pytest.raises(TfschedError, match=r"tune.json: tuned for mode train, not mode inference$"):
        tuned_mode(doc, str(out), **where, api="tf2", run_mode="inference")


@pytest.mark.parametrize(
    "args,needle",
    [
        (("--graph", "g.pb"), "--graph is not for --api tf2: a built-in model"),
        (("--fetch", "train"), "--fetch is not for --api tf2"),
        (("--sync",), "--sync is not for --api tf2: a coordinator's steps are asynchronous"),
        (("--settle", "2"), "--settle is not for --api tf2"),
        (("--prescreen", "2"), "--prescreen is not for --api tf2"),
        (
            ("--push-credit",),
            "--push-credit is not for --api tf2: a window on the pushes evens out synchronized workers",
        ),
        (("--objective", "balanced"), "--objective is not for --api tf2: a coordinator's steps are"),
        (("--ps", "2", "--ps-placement", "bytes"), "--ps-placement bytes is not for --api tf2"),
    ],
)
def test_tune_tf2_refuses_what_it_cannot_run_before_it_starts(tmp_path, args, needle):
    out = tmp_path / "t.json"
    p = cli("tune", "--api", "tf2", *args, "-o", str(out), timeout=120)
    assert_one_line_error(p, needle)
    assert not out.exists()


def test_the_session_tuner_refuses_options_that_do_not_go_together(tmp_path):
    out = tmp_path / "t.json"
    p = cli("tune", "--graph", "g.pb", "--fetch", "train", "--mode", "inference", "-o", str(out), timeout=120)
    assert_one_line_error(p, "--mode is a built-in model's: a saved graph runs its --fetch")
    p = cli("tune", "--host-order", "priority", "-o", str(out), timeout=120)
    assert_one_line_error(p, "--host-order orders --host-credit's window: give --host-credit too")
    # the pushes' window is searched for the straggler effect, which needs synchronized steps
    p = cli("tune", "--push-credit", "--sync", "-o", str(out), timeout=120)
    assert_one_line_error(
        p, "--push-credit evens out the workers, not the throughput: add --objective balanced"
    )
    p = cli("tune", "--objective", "balanced", "-o", str(out), timeout=120)
    assert_one_line_error(p, "--objective balanced weighs how long workers wait for each other: add --sync")
    assert not out.exists()


def test_a_session_tune_file_in_a_tf2_bench_is_one_error_naming_it(tmp_path):
    path = tmp_path / "session-tune.json"
    doc = {
        "schema": "tfsched.tune/1",
        "config": {"model": "seq32", "workers": 2, "ps": 1, "bandwidth": "loopback", "algorithm": "tio"},
        "best": {"partition": 0, "credit": 1_000_000},
    }
    path.write_text(json.dumps(doc))
    out = tmp_path / "b.json"
    p = cli(
        "bench",
        *("--api", "tf2", "--model", "seq32", "--workers", "2", "--loopback", "--batch-size", "4"),
        *("--modes", "baseline,tuned", "--tuned", str(path), "-o", str(out)),
        timeout=120,
    )
    assert_one_line_error(p, "session-tune.json: tuned for api session, not api tf2")
    assert not out.exists()


@pytest.mark.tf
@pytest.mark.parametrize("api", ["tf2", "session"])
def test_shaped_loopback_reaches_the_tuners_cluster(tmp_path, monkeypatch, api):
    """``tune --shaped-loopback`` asks ``host_cluster`` for relays with either API (TensorFlow 2's
    coordinator reaches them through ``LocalCluster.client_spec``); the cluster that would start
    is stopped there by an error, which leaves no file."""
    from click.testing import CliRunner

    from tfsched.bench import run
    from tfsched.cli import main
    from tfsched.errors import TfschedError

    asked = {}

    def host_cluster(**kwargs):
        asked.update(kwargs)
        raise TfschedError("no cluster in this test")

    monkeypatch.setattr(run, "host_cluster", host_cluster)
    out = tmp_path / "t.json"
    args = ["tune", "--api", api, "--model", "seq32", "--bandwidth", "200Mbit", "--shaped-loopback"]
    done = CliRunner().invoke(main, [*args, "--trials", "1", "-o", str(out)])
    assert done.exit_code == 1 and "no cluster in this test" in done.output, done.output
    assert asked["relays"] is True and asked["bandwidth_bps"] == 200e6 and not out.exists()


@pytest.mark.tf
def test_a_users_graph_the_tuner_cannot_run_is_named_by_its_own_path(tmp_path):
    """The tuner analyzes its own copy of a user's graph in a temporary directory: an error about
    it named that copy (`/tmp/tfsched-tune-.../graph.pb`), not the user's file. And a graph with no
    op on a PS is refused before the analysis, by `trace` too: its trace would have no transfer."""
    import tensorflow as tf

    def save(name: str, ps_variable: bool) -> str:
        g = tf.Graph()
        with g.as_default():
            if ps_variable:
                with tf.device("/job:ps/task:0"):  # on the PS, but not in the step
                    tf.compat.v1.Variable(1.0, name="unused")
            with tf.device("/job:worker/task:0"):
                tf.identity(tf.constant(2.0) * 3.0, name="y")
        path = tmp_path / name
        path.write_bytes(g.as_graph_def().SerializeToString())
        return str(path)

    out = tmp_path / "t.json"
    unused = save("unused-ps.pb", ps_variable=True)
    p = cli(
        "tune", "--graph", unused, "--fetch", "y", "--workers", "1", "--loopback", "-o", str(out), timeout=120
    )
    assert_one_line_error(
        p, f"Error: {unused}: no parameter server: no op of the step is placed on a job named ps"
    )
    assert "tfsched-tune-" not in p.stderr
    local = save("local.pb", ps_variable=False)
    tune = ("tune", "--graph", local, "--fetch", "y", "--workers", "1", "--loopback")
    trace = ("trace", "--graph", local, "--fetch", "y")  # its tasks are on loopback always
    for args in (tune, trace):
        p = cli(*args, "-o", str(out), timeout=120)
        assert_one_line_error(p, f"Error: {local}: no op is placed on a PS task (/job:ps)")
    assert not out.exists()
