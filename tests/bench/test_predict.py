"""The benchmark's prediction inputs, on synthetic traces with known answers."""

import pytest

from tfsched.bench.predict import machine_slots
from tfsched.tracing.trace import OpRecord, Trace

W = "/job:worker/replica:0/task:0/device:CPU:0"
PS = "/job:ps/replica:0/task:0/device:CPU:0"


def _trace(op_seconds: float, steps: int = 2, parallel: int = 1, recv: bool = True) -> Trace:
    ops = []
    for step in range(steps):
        for k in range(parallel):  # ``parallel`` ops at once, each op_seconds / parallel long
            ops.append(OpRecord(step, W, f"conv{k}", "Conv2D", 0.0, op_seconds / parallel * 1e6))
        if recv:
            ops.append(OpRecord(step, W, "recv", "_Recv", 0.0, 5e6))  # waiting, not computing
        ops.append(OpRecord(step, W, "gate", "TfschedGate", 0.0, 5e6))
        ops.append(OpRecord(step, PS, "read", "ReadVariableOp", 0.0, 1e6))  # not the worker's
    return Trace(steps=steps, ops=ops)


def test_machine_slots_is_workers_times_alone_over_together():
    # Alone, worker 0 computes 1 s a step; with 4 workers at once, 2 s: the machine does the
    # work of two lone workers at once.
    assert machine_slots(_trace(1.0), _trace(2.0, steps=1), workers=4) == pytest.approx(2.0)
    # With no slowdown at all, four workers ran as if each had its own machine.
    assert machine_slots(_trace(1.0), _trace(1.0, steps=1), workers=4) == pytest.approx(4.0)


def test_machine_slots_is_at_least_what_worker_0_ran_alone():
    # Alone, two ops at a time; together, four times slower: 4 * 1/4 = 1 < 2.
    assert machine_slots(
        _trace(1.0, parallel=2, recv=False), _trace(4.0, steps=1), workers=4
    ) == pytest.approx(2.0)
