"""benchmarks/handoff.py: the hand-offs of one tensor in flight, read from a traced step."""

import pytest

from tests.helpers import benchmark_script
from tfsched.tracing.trace import OpRecord, Trace, TransferRecord

PS = "/job:ps/replica:0/task:0/device:CPU:0"


def worker(k: int) -> str:
    return f"/job:worker/replica:0/task:{k}/device:CPU:0"


@pytest.fixture(scope="module")
def handoff():
    return benchmark_script("handoff")


def _pull(name: str, k: int, released_us: float, start_us: float, duration_us: float, nbytes: int):
    """A pull to worker ``k``: its gate on the PS (released at ``released_us``) and its transfer."""
    gate = f"{name}/tfsched_gate_to_worker_{k}"
    return (
        OpRecord(0, PS, gate, "TfschedGate", 0.0, released_us),
        TransferRecord(0, f"edge_{name}", f"{gate}:0", nbytes, PS, worker(k), start_us, duration_us),
    )


def test_a_handoff_runs_from_an_arrival_to_the_next_release_on_its_channel(handoff):
    big = 1 << 20
    pulls = [
        # worker 0: released at 0, 3 and 9 ms; the first two arrive at 2 and 5 ms
        _pull("a", 0, 0.0, 100.0, 1900.0, big),
        _pull("b", 0, 3000.0, 3100.0, 1900.0, big),
        _pull("c", 0, 9000.0, 9100.0, 1900.0, big),
        # under the pass's least counted tensor: not held, not counted
        _pull("small", 0, 2500.0, 2500.0, 10.0, 1024),
        # worker 1: the second released before the first arrived (-1 ms)
        _pull("a", 1, 0.0, 0.0, 4000.0, big),
        _pull("b", 1, 3000.0, 4000.0, 1000.0, big),
    ]
    trace = Trace(steps=1, ops=[g for g, _ in pulls], transfers=[t for _, t in pulls])
    gaps, spans = handoff.handoffs(trace, 8e9)
    assert sorted(gaps) == pytest.approx([-0.001, 0.001, 0.004])
    by_channel = {s["channel"]: s for s in spans}
    assert by_channel[f"{PS} -> {worker(0)}"]["pulls"] == 3
    assert by_channel[f"{PS} -> {worker(0)}"]["span_s"] == pytest.approx(0.011)
    assert by_channel[f"{PS} -> {worker(0)}"]["wire_s"] == pytest.approx(3 * big * 8 / 8e9)
    assert handoff.handoffs(trace, None)[1][0]["wire_s"] is None


def test_only_modes_that_hold_one_tensor_in_flight_are_measured(handoff):
    modes = [
        "baseline",
        "tio",
        "tio+c1+sent",
        "tao+c1+sent",
        "tio+c1",
        "tio+c40000000+sent",
        "tio+c1+a1+sent",
    ]
    assert handoff.held_modes(modes) == ["tio+c1+sent", "tao+c1+sent", "tio+c1+a1+sent"]
