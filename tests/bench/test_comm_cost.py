"""What a byte and a message cost the machine (``bench.run.whole_and_cut_costs``), measured on a
machine whose CPU counters the test keeps: each call adds what the test says it costs."""

import pytest

from tfsched.bench import profile
from tfsched.bench import run as bench_run

MESSAGES = 32
CALL_S = 0.004  # a call's own cost, messages or not
WORKER_CALL_S = 0.002  # of which worker 0's process spends this
MESSAGE_S = 2e-4
SEND_M, RECV_M = (
    6e-5,
    1.2e-4,
)  # of which the PS's and worker 0's processes spend these (the rest the kernel's)
BYTE_S = 1e-9
EXTRA_BYTES = 500_000_000
SEND, RECV = 0.2, 0.6  # the sending PS's and the receiving worker's shares of a byte's CPU


@pytest.fixture
def machine(monkeypatch):
    """A machine where ``run(name)`` costs what the constants say, and the calls it saw;
    ``state["other"]`` is what anything else on the machine spends during each empty call."""
    state = {"busy": 0.0, "send": 0.0, "recv": 0.0, "calls": [], "other": 0.0}

    def run(name):
        state["calls"].append(name)
        state["busy"] += CALL_S + (name == "none") * state["other"]
        state["recv"] += WORKER_CALL_S
        if name != "none":
            state["busy"] += MESSAGES * MESSAGE_S
            state["send"] += MESSAGES * SEND_M
            state["recv"] += MESSAGES * RECV_M
        if name == "whole":
            state["busy"] += EXTRA_BYTES * BYTE_S
            state["send"] += SEND * EXTRA_BYTES * BYTE_S
            state["recv"] += RECV * EXTRA_BYTES * BYTE_S

    monkeypatch.setattr(bench_run, "cpu_seconds", lambda: (state["busy"], 1e6 + state["busy"]))
    monkeypatch.setattr(profile, "task_cpu_s", lambda pids: state["send" if pids == [1] else "recv"])
    return run, state


def test_a_message_costs_what_the_cut_call_spends_past_an_empty_one(machine):
    run, state = machine
    per_byte, per_message, shares, message_shares = bench_run.whole_and_cut_costs(
        run, {"send": [1], "recv": [2]}, extra_bytes=EXTRA_BYTES, messages=MESSAGES
    )
    assert per_byte == pytest.approx(BYTE_S)
    # the call's own cost is not the messages' (all the cut's CPU over them would be 1.6 times
    # what a message costs the machine); the ends' processes' is taken, past worker 0's part of
    # the call, the kernel's part outside them left out
    assert per_message == pytest.approx(SEND_M + RECV_M)
    assert shares == pytest.approx((SEND, RECV))
    # where a message's cost is spent: the PS's part and worker 0's, its part of the call left out
    total = SEND_M + RECV_M
    assert message_shares == pytest.approx((SEND_M / total, RECV_M / total), abs=1e-4)
    calls = state["calls"]
    # each warmed up alone, then the three in turn, the whole pulls until they took a CPU second
    steps = max(bench_run.COMM_STEPS, -(-bench_run.COMM_MIN_CPU_S // (EXTRA_BYTES * BYTE_S)))
    assert calls[:3] == ["none", "cut", "whole"] and calls.count("whole") == 1 + steps
    assert calls[3 : 3 + 3 * int(steps)] == ["none", "cut", "whole"] * int(steps)
    # then the cut and the empty call alone, in turn, until the cut took enough to tell them apart
    rest = calls[3 + 3 * int(steps) :]
    assert rest and rest == ["none", "cut"] * (len(rest) // 2)
    cut_s = WORKER_CALL_S + MESSAGES * (SEND_M + RECV_M)  # the ends' processes' CPU of a cut call
    measured = calls.count("cut") - 1
    assert measured * cut_s >= bench_run.COMM_MIN_MESSAGE_CPU_S > (measured - 1) * cut_s


def test_the_calls_to_tell_a_message_apart_are_bounded(machine, monkeypatch):
    run, state = machine
    monkeypatch.setattr(bench_run, "COMM_MIN_MESSAGE_CPU_S", 1e9)  # never reached
    _, per_message, _, _ = bench_run.whole_and_cut_costs(
        run, {"send": [1], "recv": [2]}, extra_bytes=EXTRA_BYTES, messages=MESSAGES
    )
    assert state["calls"].count("cut") == 1 + bench_run.COMM_MAX_MESSAGE_STEPS
    assert per_message == pytest.approx(SEND_M + RECV_M)


def test_no_cost_where_the_machine_cannot_be_read(machine, monkeypatch):
    run, state = machine
    monkeypatch.setattr(bench_run, "cpu_seconds", lambda: None)
    assert bench_run.whole_and_cut_costs(run, {"send": [], "recv": []}, extra_bytes=1, messages=1) == (
        0.0,
        0.0,
        None,
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
    per_byte, per_message, _, _ = bench_run.whole_and_cut_costs(
        run, {"send": [1], "recv": [2]}, extra_bytes=EXTRA_BYTES, messages=MESSAGES
    )
    assert state["calls"][-2:] == ["none", "cut"] and state["calls"].count("cut") == 1 + steps + 2
    assert per_byte == pytest.approx(BYTE_S) and per_message == pytest.approx(SEND_M + RECV_M)


def test_what_else_runs_on_the_machine_is_no_part_of_a_messages_cost(machine):
    """Another test's CPU during the empty calls (CI runs two at once) would leave a message
    nothing on the machine's counts; the ends' processes' do not hold it."""
    run, state = machine
    state["other"] = 0.01  # more than the cut's messages cost the machine
    ends = {"send": [1], "recv": [2]}
    per_byte, per_message, shares, message_shares = bench_run.whole_and_cut_costs(
        run, ends, extra_bytes=EXTRA_BYTES, messages=MESSAGES
    )
    assert per_message == pytest.approx(SEND_M + RECV_M)
    assert message_shares == pytest.approx((1 / 3, 2 / 3), abs=1e-4)
    # a byte's cost is the machine's: the load fell in no whole pull or cut one here
    assert per_byte == pytest.approx(BYTE_S) and shares == pytest.approx((SEND, RECV))
    # where the processes cannot be read, the machine's counts are all there is
    state["other"] = 0.0
    per_byte, per_message, shares, message_shares = bench_run.whole_and_cut_costs(
        run, {"send": [], "recv": [2]}, extra_bytes=EXTRA_BYTES, messages=MESSAGES
    )
    assert per_byte == pytest.approx(BYTE_S) and per_message == pytest.approx(MESSAGE_S)
    assert shares is None and message_shares is None
