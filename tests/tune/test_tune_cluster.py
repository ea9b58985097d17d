"""Tuning on real clusters: a run completes and every worker ends on the best setting."""

import statistics

import pytest

from tests.helpers import cli
from tfsched.tune.search import ONE_IN_FLIGHT, Setting, Space

pytestmark = [pytest.mark.tf, pytest.mark.cluster]

# trials of one settling and two measured steps; two steps on the best; no run longer than 10 min
SHORT = {"settle": 1, "measure": 2, "final_steps": 2, "timeout_s": 600}


def test_tuning_run_applies_the_best_setting_on_every_worker():
    from tfsched.tune.run import tune_cluster

    r = tune_cluster("seq32", workers=2, ps=1, trials=3, confirm=1, **SHORT)
    # the first trial is ByteScheduler's setting for the link and model (loopback: the 1 Gbit/s
    # sizes; Seq-32's 2.1M parameters a channel cap the credit at a quarter of them, and the
    # partition at the credit, on the search's grid: 2^19); then the model's trials, then one
    # repeat of the leader
    import tensorflow as tf

    from tfsched.models import build_graph

    variables = build_graph("seq32").graph.get_collection(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES)
    quarter = sum(v.shape.num_elements() for v in variables) // 4
    first = r.history[0].setting
    assert first.partition == 2**19 and abs(first.credit - quarter) <= 1
    assert r.to_json()["config"]["defaults"] == {"partition": 2**19, "credit": first.credit}
    assert [t.confirm for t in r.history] == [False, False, False, True]
    leader = max(r.history[:3], key=lambda t: t.value).setting
    assert r.history[3].setting == leader
    means = {
        t.setting: statistics.mean(u.value for u in r.history if u.setting == t.setting) for t in r.history
    }
    # only the repeated leader can win: a setting measured once, early, is not compared with it
    assert r.best == leader and r.best_value == pytest.approx(means[r.best])
    assert r.best_value > 0
    assert r.to_json()["best"]["measurements"] == sum(t.setting == r.best for t in r.history)
    # the one leader's standing: the winner's mean over both its measurements
    assert r.to_json()["leaders"] == [{**leader.to_json(), "value": r.best_value, "measurements": 2}]
    assert set(r.applied) == {"/job:worker/task:0", "/job:worker/task:1"}
    for applied in r.applied.values():
        # the session in force was rewritten with the best partition; the task's gates use its credit
        assert applied["session_partition"] == r.best.partition
        assert applied["live_credit"] == r.best.credit
    assert len({(t.setting.partition, t.setting.credit) for t in r.history}) >= 2


def test_tuning_on_links_shaped_by_relays():
    """Without root: the tuner's cluster on loopback, each host's link shaped by relays; the
    model's forward passes (inference) tuned."""
    from tfsched.bench.relay import Links
    from tfsched.tune.run import tune_cluster

    seen = []
    reserve = Links.reserve

    def counted(self, src, dst, nbytes):
        seen.append((src, dst, nbytes))
        return reserve(self, src, dst, nbytes)

    Links.reserve = counted
    try:
        r = tune_cluster(
            "seq32",
            workers=2,
            ps=1,
            bandwidth_bps=200e6,
            latency_s=0.001,
            relays=True,
            run_mode="inference",
            trials=2,
            confirm=1,
            settle=1,
            measure=2,
            final_steps=2,
            timeout_s=600,
        )
    finally:
        Links.reserve = reserve
    config = r.to_json()["config"]
    assert config["bandwidth"] == "0.2 Gbit/s" and config["links"] == "relays" and config["latency"] == "1 ms"
    assert config["mode"] == "inference"
    assert set(r.applied) == {"/job:worker/task:0", "/job:worker/task:1"} and r.best_value > 0
    # the pulls went through the PS's uplink to both workers, and no gradient came back
    assert {(("ps", 0), ("worker", 0)), (("ps", 0), ("worker", 1))} <= {(src, dst) for src, dst, _ in seen}
    # (Seq-32's gradients are 8.4 MB a step; the workers send the PS requests and graphs only)
    assert sum(n for src, dst, n in seen if src[0] == "worker" and dst[0] == "ps") < 2e6
    # unshaped loopback has no latency to add: one error line, before any cluster starts
    p = cli("tune", "--loopback", "--latency", "1ms", timeout=60)
    assert p.returncode == 2 and "--loopback has neither" in p.stderr and "Traceback" not in p.stderr


def test_tuning_one_window_per_task_with_a_timing_aware_order():
    """The window per task in lockstep (tfsched tune --host-credit --host-order priority), its
    credit set live on the gates of synchronous steps."""
    from tfsched.tune.run import tune_cluster

    r = tune_cluster(
        "seq32",
        workers=2,
        ps=1,
        algorithm="tao",
        host_credit=True,
        host_order="priority",
        ack_share=32,
        credit_return="sent",
        sync=True,  # tfsched tune --sync: the workers' steps start together
        prescreen_keep=2,
        trials=4,
        confirm=0,
        **SHORT,
    )
    doc = r.to_json()
    assert doc["config"]["host_credit"] is True and doc["config"]["algorithm"] == "tao"
    assert doc["config"]["host_order"] == "priority"
    assert doc["config"]["ack_share"] == 32 and doc["config"]["credit_return"] == "sent"
    # ``tfsched bench --tuned`` runs the best setting as it was tuned
    from tfsched.bench.run import parse_mode, tuned_mode

    where = {"model": "seq32", "workers": 2, "ps": 1, "bandwidth": "loopback", "batch_size": 4}
    assert doc["config"]["batch_size"] == 4 and doc["config"]["sync"] is True
    # its +aN acknowledges from where the tuner's pass did (the search's smallest credit / 32)
    assert doc["config"]["acknowledged_from"] == 16_384
    share = -(-r.best.credit // 16_384)
    # no +p where the best setting cuts nothing (one tensor in flight can win: CI saw it)
    cut = f"+p{r.best.partition}" if r.best.partition else ""
    assert tuned_mode(doc, "tune.json", **where) == f"tao{cut}+c{r.best.credit}+lockstep+a{share}+sent"
    # after the defaults, one tensor in flight (credit returned when sent), then the two
    # settings the simulator (with one window per task) liked best
    assert r.history[1].setting == ONE_IN_FLIGHT and r.history[1].value > 0
    assert len(r.prescreened) == 2 and all(p["predicted_step_s"] > 0 for p in r.prescreened)
    assert [(t.setting.partition, t.setting.credit) for t in r.history[2:]] == [
        (p["partition"], p["credit"]) for p in r.prescreened
    ]
    # the bench runs it as tuned: no partition, credit 1, and what enable(credit=1) acknowledges
    one = {**doc, "best": ONE_IN_FLIGHT.to_json()}
    assert tuned_mode(one, "tune.json", **where) == "tao+c1+lockstep+a1+sent"
    assert parse_mode("tao+c1+lockstep+a1+sent").credit == 1
    for applied in r.applied.values():
        assert applied["live_credit"] == r.best.credit


def test_tuning_the_pushes_window_for_the_straggler_effect():
    """tfsched tune --push-credit --objective balanced --sync: a third knob, set live on each
    worker's own gates, the PS's keeping the credit; each trial weighed by how long the workers
    waited for each other."""
    from tfsched.bench.run import parse_mode, tuned_mode
    from tfsched.tune.run import tune_cluster
    from tfsched.tune.search import PUSH_CREDIT_LOG2

    r = tune_cluster(
        "seq32",
        workers=2,
        ps=1,
        host_credit=True,
        host_order="priority",
        space=Space(push_credit_log2=PUSH_CREDIT_LOG2),
        objective="balanced",
        sync=True,
        prescreen_keep=1,
        trials=3,
        confirm=1,
        **SHORT,
    )
    doc = r.to_json()
    assert doc["config"]["objective"] == "balanced" and doc["config"]["push_credit_log2"] == [16.0, 24.0]
    # the defaults first, their pushes in the credit's window; then the simulator's best of its
    # 5x5x5 grid, then the model's
    assert r.history[0].setting.push_credit == r.history[0].setting.credit
    assert r.history[1].setting == Setting.from_json(r.prescreened[0])
    assert all(t.setting.push_credit > 0 for t in r.history)
    for t in doc["trials"]:
        assert 0 <= t["straggler"] < 1 and t["throughput_steps_per_s"] > 0
        assert t["value"] == pytest.approx(t["throughput_steps_per_s"] * (1 - t["straggler"]))
    assert doc["best"]["value"] == pytest.approx(r.best_value)
    assert 0 <= doc["best"]["straggler"] < 1 and doc["best"]["push_credit"] == r.best.push_credit
    # in force at the end: the workers' gates hold the pushes' window, the PS's the credit
    for applied in r.applied.values():
        assert applied["push_credit"] == r.best.push_credit
        assert applied["live_credit"] == r.best.push_credit
    # the bench runs it with a window that counts what the tuner's counted
    where = {"model": "seq32", "workers": 2, "ps": 1, "bandwidth": "loopback", "batch_size": 4}
    spec = parse_mode(tuned_mode(doc, "tune.json", **where))
    assert (spec.partition, spec.credit, spec.push_credit) == (
        r.best.partition,
        r.best.credit,
        r.best.push_credit,
    )
    assert spec.host_order == "priority"
    from tfsched.analysis import least_acknowledged

    assert least_acknowledged(spec.credit, spec.ack_share) <= doc["config"]["acknowledged_from"]


def test_credit_hook_tunes_credit_inside_monitored_training_session():
    import tensorflow as tf

    import tfsched
    from tfsched.bench.local import LocalCluster
    from tfsched.models import build_graph
    from tfsched.tune.coordinator import Coordinator
    from tfsched.tune.search import BayesSearch
    from tfsched.tune.worker import credit_tune_hook

    task = "/job:worker/task:0"
    with LocalCluster(ps=1, workers=1) as cluster:
        target = cluster.target("worker", 0)
        coord = Coordinator(
            BayesSearch(Space(partition=20_000), seed=0),
            [task],
            host="127.0.0.1",
            allowed_hosts=["127.0.0.1"],
            trials=3,
        )
        coord.start()
        seen = []
        try:
            built = build_graph("seq32", ps_tasks=1)
            with built.graph.as_default():
                hook = credit_tune_hook(
                    coord.address, task, target, [task, "/job:ps/task:0"], settle=0, measure=2
                )
                config = tfsched.enable(partition=20_000, credit=tfsched.enforce.DEFAULT_CREDIT)
                with tf.compat.v1.train.MonitoredTrainingSession(
                    master=target, is_chief=True, hooks=[hook], config=config
                ) as sess:
                    for _ in range(12):
                        sess.run(built.train_op)
                        seen.append(hook.follower.setting)
            ps_credit = tfsched.enforce.stats(target, "/job:ps/task:0")["live_credit"]
        finally:
            coord.stop()
    assert coord.done.is_set()
    assert hook.follower.final and hook.follower.setting == coord.search.best().setting
    assert ps_credit == coord.search.best().setting.credit
    assert len({s.credit for s in seen if s}) >= 2  # it changed while training ran


def test_synchronous_steps_last_as_long_as_the_slowest_worker():
    # Two tuned sessions on a real cluster; worker 1 has extra work in every step. Free, the fast
    # worker measures its own steps; with the step barrier (tfsched tune --sync) both measure
    # the slow worker's, as the bench's synchronized steps do.
    import threading

    import tensorflow as tf

    from tfsched.bench.local import LocalCluster
    from tfsched.models import build_graph
    from tfsched.tune.worker import TunedSession

    class Client:  # the coordinator, in process: one setting from step 0; the reports kept
        def __init__(self):
            self.per_step: list[float] = []
            self.waits: list[list[float]] = []

        def poll(self, step):
            return {"epoch": 0, "apply_at": 0, "partition": 0, "credit": 1 << 20, "final": False}

        def report(self, epoch, steps, seconds, waits):
            self.per_step.append(seconds / steps)
            self.waits.append(list(waits))
            return {"accepted": True}

        def close(self):
            pass

    graphs = []
    for w in range(2):
        b = build_graph("seq32", worker_task=w, ps_tasks=1)
        fetches = [b.train_op]
        if w == 1:
            with b.graph.as_default(), tf.device("/job:worker/task:1"):
                # about as long again as the step: with 20 (a third of it) worker 0, slowed by
                # the same work on the two cores, came out at 0.73 of worker 1 once
                x = tf.random.stateless_uniform([600, 600], seed=[1, 2])
                for _ in range(60):
                    x = tf.matmul(x, x) / 600.0
                fetches.append(x.op)
        graphs.append((b, fetches))

    def measure(cluster, barrier) -> list[float]:
        clients = [Client(), Client()]
        sessions = [
            TunedSession(
                cluster.target("worker", w),
                graphs[w][0].graph,
                client=clients[w],
                devices=[f"/job:worker/task:{w}", "/job:ps/task:0"],
                settle=1,
                measure=4,
                step_barrier=barrier,
                barrier_timeout_s=120,
            )
            for w in range(2)
        ]

        def loop(w):
            for _ in range(6):
                sessions[w].run(graphs[w][1])

        threads = [threading.Thread(target=loop, args=(w,)) for w in range(2)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
        finally:
            # a session left open on a cluster that is then stopped holds the process at exit
            for s in sessions:
                s.close()
        assert all(len(c.per_step) == 1 for c in clients)
        measure.waits = [c.waits[0] for c in clients]
        return [c.per_step[0] for c in clients]

    with LocalCluster(ps=1, workers=2) as cluster:
        with tf.compat.v1.Session(cluster.target("worker", 0), graph=graphs[0][0].graph) as s0:
            s0.run(graphs[0][0].init_op)
        fast, slow = measure(cluster, None)
        assert fast < 0.7 * slow  # the extra work shows
        assert measure.waits == [[], []]  # free: nobody waits for anybody
        fast, slow = measure(cluster, threading.Barrier(2))
        assert fast == pytest.approx(slow, rel=0.2)
        # synchronized: each measured step, the fast worker waited for the slow one at its end
        # (the balanced objective's straggler effect, a share of the step), and the slow one
        # hardly at all
        waits_fast, waits_slow = measure.waits
        assert len(waits_fast) == len(waits_slow) == 4
        assert all(1 > f > 0.2 > s >= 0 for f, s in zip(waits_fast, waits_slow, strict=True))


@pytest.mark.timeout(300)  # a regression waits for the tuning's own deadline
def test_a_dead_worker_ends_the_tuning_naming_it(entered_clusters):
    """Worker 1 is the master of its own tuned sessions. Killed mid-tuning, its step waits for it
    to come back, for good without a deadline: the tuning could only end when its budget ran
    out (``timeout_s``), and then blamed the trials. A step's deadline fits the steps run so
    far, and since the hundred-and-twelfth session the stand-in at the dead task's address
    fails its calls at once (``bench.standin``): the run fails soon, naming the task that died."""
    import threading
    import time

    from tfsched.deadlines import SESSION_CALL_TIMEOUT_S, STEP_FLOOR_S
    from tfsched.errors import TfschedError
    from tfsched.tune.run import tune_cluster

    clusters = entered_clusters
    killer = []

    def kill_worker_1_at_the_first_trial(message: str) -> None:
        if message.startswith("trial") and not killer:
            killer.append(threading.Thread(target=clusters[0].kill, args=("worker", 1)))
            killer[0].start()

    started = time.monotonic()
    with pytest.raises(TfschedError) as e:
        tune_cluster(
            "seq32", workers=2, ps=1, trials=50, confirm=0, progress=kill_worker_1_at_the_first_trial, **SHORT
        )
    took = time.monotonic() - started
    killer[0].join(30)
    assert str(e.value).startswith("tuning: cluster task /job:worker/task:1 killed by SIGKILL"), e.value
    # the start and the trial, and neither a step's deadline (Seq-32's steps are short: the
    # floor) nor the closes' of worker 1's sessions, which it took before the stand-in (10 s
    # now, 61 s in all before, from `tfsched tune`'s kill to its error)
    assert took < STEP_FLOOR_S + SESSION_CALL_TIMEOUT_S - 10, took
