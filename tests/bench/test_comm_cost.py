"""What a byte and a message cost the machine (``bench.run.whole_and_cut_costs``), measured on a
machine whose CPU counters the test keeps: each call adds what the test says it costs."""

import pytest

from tfsched.bench import profile
from tfsched.bench import run as bench_run

MESSAGES = 32
CALL_S = 0.004  # a call's own cost, messages or not
MESSAGE_S = 1e-4
BYTE_S = 1e-9
EXTRA_BYTES = 500_000_000
SEND, RECV = 0.2, 0.6  # the sending PS's and the receiving worker's shares of a byte's CPU


@pytest.fixture
def machine(monkeypatch):
    """A machine where ``run(name)`` costs what the constants say, and the calls it saw."""
    cost = {
        "none": CALL_S,
        "cut": CALL_S + MESSAGES * MESSAGE_S,
        "whole": CALL_S + MESSAGES * MESSAGE_S + EXTRA_BYTES * BYTE_S,
    }
    state = {"busy": 0.0, "send": 0.0, "recv": 0.0, "calls": []}

    def run(name):
        state["calls"].append(name)
        state["busy"] += cost[name]
        if name == "whole":
            state["send"] += SEND * EXTRA_BYTES * BYTE_S
            state["recv"] += RECV * EXTRA_BYTES * BYTE_S

    monkeypatch.setattr(bench_run, "cpu_seconds", lambda: (state["busy"], 1e6 + state["busy"]))
    monkeypatch.setattr(profile, "task_cpu_s", lambda pids: state["send" if pids == [1] else "recv"])
    return run, state


def test_a_message_costs_what_the_cut_call_spends_past_an_empty_one(machine):
    run, state = machine
    per_byte, per_message, shares = bench_run.whole_and_cut_costs(
        run, {"send": [1], "recv": [2]}, extra_bytes=EXTRA_BYTES, messages=MESSAGES
    )
    assert per_byte == pytest.approx(BYTE_S)
    # the call's own cost is not the messages': all the cut's CPU over them would be 2.25 times it
    assert per_message == pytest.approx(MESSAGE_S)
    assert shares == pytest.approx((SEND, RECV))
    calls = state["calls"]
    # each warmed up alone, then the three in turn, the whole pulls until they took a CPU second
    steps = max(bench_run.COMM_STEPS, -(-bench_run.COMM_MIN_CPU_S // (EXTRA_BYTES * BYTE_S)))
    assert calls[:3] == ["none", "cut", "whole"] and calls.count("whole") == 1 + steps
    assert calls[3 : 3 + 3 * int(steps)] == ["none", "cut", "whole"] * int(steps)
    # then the cut and the empty call alone, in turn, until the cut took enough to tell them apart
    rest = calls[3 + 3 * int(steps) :]
    assert rest and rest == ["none", "cut"] * (len(rest) // 2)
    cut_s = CALL_S + MESSAGES * MESSAGE_S
    measured = calls.count("cut") - 1
    assert measured * cut_s >= bench_run.COMM_MIN_MESSAGE_CPU_S > (measured - 1) * cut_s


def test_the_calls_to_tell_a_message_apart_are_bounded(machine, monkeypatch):
    run, state = machine
    monkeypatch.setattr(bench_run, "COMM_MIN_MESSAGE_CPU_S", 1e9)  # never reached
    _, per_message, _ = bench_run.whole_and_cut_costs(
        run, {"send": [1], "recv": [2]}, extra_bytes=EXTRA_BYTES, messages=MESSAGES
    )
    assert state["calls"].count("cut") == 1 + bench_run.COMM_MAX_MESSAGE_STEPS
    assert per_message == pytest.approx(MESSAGE_S)


def test_no_cost_where_the_machine_cannot_be_read(machine, monkeypatch):
    run, state = machine
    monkeypatch.setattr(bench_run, "cpu_seconds", lambda: None)
    assert bench_run.whole_and_cut_costs(run, {"send": [], "recv": []}, extra_bytes=1, messages=1) == (
        0.0,
        0.0,
        None,
    )
    assert state["calls"] == ["none", "cut", "whole", "none"]  # warmed up, then one try


def test_a_pair_measured_in_part_counts_for_neither(machine, monkeypatch):
    """The machine stops being readable after the second extra pair's cut: the empty call before
    it is not counted without its cut, so a message still costs what it does."""
    run, state = machine
    steps = int(max(bench_run.COMM_STEPS, -(-bench_run.COMM_MIN_CPU_S // (EXTRA_BYTES * BYTE_S))))
    readable = bench_run.cpu_seconds

    def cpu_seconds():
        calls = state["calls"]
        return None if len(calls) == 3 + 3 * steps + 4 else readable()

    monkeypatch.setattr(bench_run, "cpu_seconds", cpu_seconds)
    per_byte, per_message, _ = bench_run.whole_and_cut_costs(
        run, {"send": [1], "recv": [2]}, extra_bytes=EXTRA_BYTES, messages=MESSAGES
    )
    assert state["calls"][-2:] == ["none", "cut"] and state["calls"].count("cut") == 1 + steps + 2
    assert per_byte == pytest.approx(BYTE_S) and per_message == pytest.approx(MESSAGE_S)
