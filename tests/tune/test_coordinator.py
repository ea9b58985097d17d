"""The coordinator over real gRPC on loopback: protocol, rejections, and a coordinator that dies."""

import json

import grpc
import pytest

from tfsched.errors import TfschedError
from tfsched.tune.coordinator import SERVICE, Coordinator, CoordinatorClient
from tfsched.tune.search import RandomSearch, Setting, Space
from tfsched.tune.worker import Follower

TASKS = ["/job:worker/task:0", "/job:worker/task:1"]


@pytest.fixture
def coord():
    c = Coordinator(
        RandomSearch(Space(), seed=3), TASKS, host="127.0.0.1", allowed_hosts=["127.0.0.1"], trials=2
    )
    c.start()
    yield c
    c.stop()


def _raw(address, method, payload: bytes):
    with grpc.insecure_channel(address) as ch:
        return ch.unary_unary(f"/{SERVICE}/{method}")(payload, timeout=5)


def test_malformed_messages_are_rejected(coord):
    for payload in (
        b"not json",
        b"[1,2]",
        json.dumps({"task": TASKS[0]}).encode(),
        json.dumps({"task": TASKS[0], "step": "3"}).encode(),
        json.dumps({"task": TASKS[0], "step": -1}).encode(),
        json.dumps({"task": TASKS[0], "step": 1, "extra": 1}).encode(),
    ):
        with pytest.raises(grpc.RpcError) as e:
            _raw(coord.address, "Poll", payload)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert coord.rejected == 6


def test_reports_whose_times_are_not_finite_are_rejected(coord):
    """Python's JSON reads ``NaN`` and ``Infinity``: a report whose seconds were one (a worker's
    clock gone wrong, a message made by hand) made the trial's throughput NaN, which the search
    took as a measurement. Until the hundred-and-eighteenth session such seconds were taken (a
    NaN wait was refused already, as no share from 0 to 1)."""
    for seconds, waits in ((float("nan"), []), (float("inf"), []), (2.0, [float("nan")] * 2)):
        report = {"task": TASKS[0], "epoch": 0, "steps": 2, "seconds": seconds, "waits": waits}
        with pytest.raises(grpc.RpcError) as e:
            _raw(coord.address, "Report", json.dumps(report).encode())
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert coord.rejected == 3 and not coord.search.history


def test_unknown_task_is_rejected(coord):
    with pytest.raises(grpc.RpcError) as e:
        _raw(coord.address, "Poll", json.dumps({"task": "/job:worker/task:9", "step": 0}).encode())
    assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "unknown task" in e.value.details()


def test_calls_from_outside_the_cluster_are_rejected():
    # Listening on 127.0.0.2 and allowing only that address: a client connects from 127.0.0.1.
    c = Coordinator(RandomSearch(Space()), TASKS, host="127.0.0.2", allowed_hosts=[], trials=1)
    c.start()
    try:
        c.allowed = {"127.0.0.2"}
        with pytest.raises(grpc.RpcError) as e:
            _raw(c.address, "Poll", json.dumps({"task": TASKS[0], "step": 0}).encode())
        assert e.value.code() == grpc.StatusCode.PERMISSION_DENIED
    finally:
        c.stop()


def test_every_worker_gets_the_same_switch_step_and_the_best_comes_last(coord):
    clients = [CoordinatorClient(coord.address, t) for t in TASKS]
    first = [c.poll(0) for c in clients]
    assert first[0] == first[1] and first[0]["epoch"] == 0 and first[0]["apply_at"] == 0
    clients[0].poll(7)
    clients[1].poll(5)
    assert clients[0].report(0, 3, 1.5)["accepted"]
    assert clients[0].poll(8)["epoch"] == 0  # one worker reported: no decision yet
    assert not clients[0].report(5, 3, 1.0)["accepted"]  # a stale or unknown epoch counts for nothing
    assert clients[1].report(0, 3, 1.0)["accepted"]
    second = [c.poll(8) for c in clients]
    assert second[0] == second[1] and second[0]["epoch"] == 1
    assert second[0]["apply_at"] == 8 + coord.lead  # after the furthest step any worker polled
    clients[0].report(1, 3, 3.0)
    clients[1].report(1, 3, 3.0)
    final = clients[0].poll(12)
    values = [t.value for t in coord.search.history]
    assert values == [2.0 + 3.0, 1.0 + 1.0]  # steps/s summed over the workers
    assert final["final"] and Setting(final["partition"], final["credit"]) == coord.search.history[0].setting
    assert coord.done.is_set()
    for c in clients:
        c.close()


def _two_trials_and_leaders(seconds, **kw):
    """A coordinator of 2 trials and 2 leaders on ``TASKS``, each epoch reported by both workers
    as 2 steps in ``seconds[k]``; the coordinator, the settings announced and the final one."""
    c = Coordinator(
        RandomSearch(Space(), seed=3),
        TASKS,
        host="127.0.0.1",
        allowed_hosts=["127.0.0.1"],
        trials=2,
        confirm=2,
        **kw,
    )
    c.start()
    clients = [CoordinatorClient(c.address, t) for t in TASKS]
    try:
        epochs = []
        for both in seconds:
            m = clients[0].poll(len(epochs) * 5)
            epochs.append(m)
            assert not m["final"]
            for cl, sec in zip(clients, both, strict=True):
                assert cl.report(m["epoch"], 2, sec)["accepted"]
        final = clients[0].poll(99)
        assert final["final"] and c.done.is_set()
        return (
            c,
            [Setting(e["partition"], e["credit"]) for e in epochs],
            Setting(final["partition"], final["credit"]),
        )
    finally:
        for cl in clients:
            cl.close()
        c.stop()


def test_after_the_budget_the_leaders_run_again_and_the_best_mean_wins():
    # 2 steps per report: trial 1 measures 2 + 2 steps/s, trial 2 2 + 1; the repeats: trial 1
    # 0.5 + 0.5 (its first run was luck), trial 2 2 + 2
    c, announced, final = _two_trials_and_leaders([(1.0, 1.0), (1.0, 2.0), (4.0, 4.0), (1.0, 1.0)])
    first, second = announced[:2]
    # the repeats went to the leaders, best first
    assert announced[2:] == [first, second]
    assert [t.confirm for t in c.search.history] == [False, False, True, True]
    # trial 1: mean of 4 and 1; trial 2: mean of 3 and 4 -> trial 2 wins on its mean
    assert final == second


def test_leaders_measured_again_in_rounds_win_on_their_repeats():
    # 2 steps per report: trial 1 measures 5 + 5 steps/s (luck), trial 2 2 + 2; then in turn
    # trial 1 1 + 1, trial 2 2 + 2, trial 1 1 + 1, trial 2 2 + 2
    seconds = [(0.4, 0.4), (1.0, 1.0)] + [(2.0, 2.0), (1.0, 1.0)] * 2
    c, announced, final = _two_trials_and_leaders(seconds, confirm_rounds=2)
    first, second = announced[:2]
    assert announced[2:] == [first, second] * 2
    assert [t.confirm for t in c.search.history] == [False, False, True, True, True, True]
    # over every measurement trial 1 leads (the mean of 10, 2 and 2, 4.67, against 4); over
    # the repeats trial 2 does (4 against 2)
    assert final == second and c.best().value == pytest.approx(4.0)
    with pytest.raises(TfschedError, match="confirm rounds must be at least 1"):
        Coordinator(
            RandomSearch(Space()), TASKS, host="127.0.0.1", allowed_hosts=[], trials=1, confirm_rounds=0
        )


def test_workers_keep_their_setting_when_the_coordinator_dies(coord):
    f = Follower(CoordinatorClient(coord.address, TASKS[0], timeout_s=0.5), settle=0, measure=2)
    applied = f.before_step()
    assert applied is not None and f.setting == applied
    f.after_step(0.1)
    coord.stop()
    for _ in range(5):  # every step goes on; nothing changes, nothing raises
        assert f.before_step() is None
        f.after_step(0.1)
    assert f.setting == applied and f.lost >= 1 and f.step == 6


def test_the_balanced_objective_weighs_the_throughput_by_how_long_workers_wait():
    from tfsched.tune.search import PUSH_CREDIT_LOG2

    space = Space(push_credit_log2=PUSH_CREDIT_LOG2)
    c = Coordinator(
        RandomSearch(space, seed=3),
        TASKS,
        host="127.0.0.1",
        allowed_hosts=["127.0.0.1"],
        trials=2,
        objective="balanced",
    )
    c.start()
    clients = [CoordinatorClient(c.address, t) for t in TASKS]
    try:
        m = clients[0].poll(0)
        assert m["push_credit"] > 0  # the pushes' window goes out with the setting
        # one wait a step, or none: anything else is malformed
        for bad in ([0.1], [0.1, -0.2], [0.1, "x"], [0.1, 1.5]):
            with pytest.raises(grpc.RpcError) as e:
                _raw(
                    c.address,
                    "Report",
                    json.dumps(
                        {"task": TASKS[0], "epoch": 0, "steps": 2, "seconds": 2.0, "waits": bad}
                    ).encode(),
                )
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert c.rejected == 4 and not c.search.history
        # two synchronized steps of 1 s each: worker 1 waited 0.4 s and 0.2 s for worker 0
        assert clients[0].report(0, 2, 2.0, [0.0, 0.0])["accepted"]
        assert clients[1].report(0, 2, 2.0, [0.4, 0.2])["accepted"]
        t = c.search.history[0]
        assert t.measured["throughput_steps_per_s"] == pytest.approx(2.0)
        assert t.measured["straggler"] == pytest.approx(0.3)
        assert t.value == pytest.approx(2.0 * (1 - 0.3))
        assert t.to_json()["straggler"] == pytest.approx(0.3)
        # as fast, the workers together: it wins
        m = clients[0].poll(5)
        for cl in clients:
            assert cl.report(m["epoch"], 2, 2.0, [0.02, 0.02])["accepted"]
        final = clients[0].poll(9)
        assert final["final"] and Setting.from_json(final) == c.search.history[1].setting
    finally:
        for cl in clients:
            cl.close()
        c.stop()
    with pytest.raises(TfschedError, match="unknown objective 'fast'"):
        Coordinator(
            RandomSearch(Space()), TASKS, host="127.0.0.1", allowed_hosts=[], trials=1, objective="fast"
        )
