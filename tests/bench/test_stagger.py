"""The straggler effect by phase, from every worker's traced step (bench.stagger)."""

import pytest

from tfsched.bench.stagger import PHASES, mean_spreads, phase_spreads, traced_spreads, worker_phases
from tfsched.errors import TfschedError

PS = "/job:ps/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"


def _metadata(nodes):
    """A RunMetadata whose step stats hold ``nodes``: (device, node name, label, start us, end us)."""
    from tensorflow.core.protobuf import config_pb2

    md = config_pb2.RunMetadata()
    devices = {}
    for device, name, label, start, end in nodes:
        if device not in devices:
            devices[device] = md.step_stats.dev_stats.add(device=device)
        devices[device].node_stats.add(
            node_name=name,
            timeline_label=label,
            all_start_micros=start,
            op_start_rel_micros=0,
            op_end_rel_micros=end - start,
            all_end_rel_micros=end - start,
        )
    return md


def _worker_step(task: int = 1, offset: int = 0):
    """Worker ``task``'s step, ``offset`` us later than worker 1's: a pull, a conv, a gradient
    pushed, and what the pass adds after them."""
    t = 1_000_000_000 + offset
    worker = f"/job:worker/replica:0/task:{task}/device:CPU:0"
    return _metadata(
        [
            (worker, "_SOURCE", "_SOURCE = NoOp()", t, t),
            (
                worker,
                "RecvTensor",
                f"[4.0MB] [1Mb/s] edge_3_conv/ReadVariableOp from {PS} to {worker}",
                t + 10,
                t + 400_000,
            ),
            (worker, "conv", "conv = Conv2D(x, conv/ReadVariableOp)", t + 400_000, t + 900_000),
            (worker, "grad", "grad = Conv2DBackpropFilter(x, y)", t + 900_000, t + 1_500_000),
            # the gate waits on the window past the last computation: no computing
            (
                worker,
                "grad/tfsched_gate_to_ps_0",
                "grad/tfsched_gate_to_ps_0 = TfschedGate(grad)",
                t + 1_500_000,
                t + 1_700_000,
            ),
            (
                PS,
                "RecvTensor",
                f"[4.0MB] [1Mb/s] edge_7_grad/tfsched_gate_to_ps_0 from {worker} to {PS}",
                t + 1_700_000,
                t + 2_000_000,
            ),
            # its acknowledgement comes back later, and is no tensor of the step
            (
                worker,
                "RecvTensor",
                f"[8B] [1Mb/s] edge_9_grad/tfsched_gate_to_ps_0/ack from {PS} to {worker}",
                t + 2_000_000,
                t + 2_100_000,
            ),
            (PS, "apply", "apply = ResourceApplyGradientDescent(w, lr, grad)", t + 2_000_000, t + 2_300_000),
            # the credit's sink, and the partitioner's constant that carries its control edge to
            # the PS, run when the acknowledgement is in: no computing either
            (
                worker,
                "tfsched_credit_sink_worker_1",
                "tfsched_credit_sink_worker_1 = NoOp()",
                t + 2_100_000,
                t + 2_100_000,
            ),
            (
                worker,
                "tfsched_credit_sink_worker_1/ctrl_S454",
                "tfsched_credit_sink_worker_1/ctrl_S454 = Const()",
                t + 2_100_000,
                t + 2_100_001,
            ),
        ]
    )


def test_a_workers_phases_come_from_its_own_transfers_and_computation():
    phases = worker_phases(_worker_step(), "/job:worker/replica:0/task:1")
    assert phases == pytest.approx(
        {"started": 1000.0, "pulled": 1000.4, "computed": 1001.5, "pushed": 1002.0, "ended": 1002.3}
    )
    # the step of another worker is refused, in one line
    with pytest.raises(TfschedError, match="no op on /job:worker/replica:0/task:0"):
        worker_phases(_worker_step(), "/job:worker/replica:0/task:0")


def test_an_inference_step_has_no_push():
    md = _metadata(
        [
            (W1, "RecvTensor", f"[4.0MB] [1Mb/s] edge_3_conv/ReadVariableOp from {PS} to {W1}", 10, 400_000),
            (W1, "conv", "conv = Conv2D(x, conv/ReadVariableOp)", 400_000, 900_000),
        ]
    )
    phases = worker_phases(md, "/job:worker/replica:0/task:1")
    assert phases["pushed"] is None and phases["computed"] == pytest.approx(0.9)
    steps = [{0: phases, 1: dict(phases, computed=1.0, ended=1.0)}]
    assert mean_spreads(steps)["pushed"] is None
    assert mean_spreads(steps)["computed"] == pytest.approx(0.1 / (1.0 - 10e-6))


def test_spreads_are_over_each_steps_own_time_and_averaged():
    early = {"started": 0.0, "pulled": 1.0, "computed": 2.0, "pushed": 3.0, "ended": 4.0}
    late = {p: t + 0.4 for p, t in early.items()}
    # two workers 0.4 s apart in every phase of a 4.4 s step: each spread 0.4 / 4.4
    assert phase_spreads({0: early, 1: late}) == pytest.approx({p: 0.4 / 4.4 for p in PHASES})
    # a step whose workers end together but pulled 1 s apart, in a 4 s step
    together = dict(early, pulled=2.0)
    second = phase_spreads({0: early, 1: together})
    assert second["pulled"] == pytest.approx(0.25) and second["ended"] == 0.0
    means = mean_spreads([{0: early, 1: late}, {0: early, 1: together}, {0: early}])
    assert means["pulled"] == pytest.approx((0.4 / 4.4 + 0.25) / 2)
    assert means["ended"] == pytest.approx(0.4 / 4.4 / 2)
    assert mean_spreads([{0: early}]) == {p: None for p in PHASES}


def test_traced_steps_are_spread_by_worker_task():
    # worker 0 a second behind worker 1 in every phase of a 2.3 s step: 1 / 3.3 each
    steps = {0: {0: _worker_step(task=0, offset=1_000_000), 1: _worker_step()}}
    assert traced_spreads(steps) == pytest.approx({p: 1.0 / 3.3 for p in PHASES})
    # each worker's metadata is read for its own task: one that is not there is one error line
    with pytest.raises(TfschedError, match="no op on /job:worker/replica:0/task:0"):
        traced_spreads({0: {0: _worker_step(), 1: _worker_step()}})


def test_saved_traces_of_the_same_steps_spread_as_their_metadata(tmp_path):
    """tfsched viz W0 W1: the traces the bench (or a TraceHook on each worker) saved give the
    spreads the bench measured from the same steps' metadata."""
    from tfsched.bench.stagger import trace_spreads
    from tfsched.tracing.collector import trace_of
    from tfsched.tracing.trace import Trace

    steps = {
        0: {0: _worker_step(task=0, offset=1_000_000), 1: _worker_step()},
        1: {0: _worker_step(task=0, offset=2_000_000), 1: _worker_step(offset=2_500_000)},
    }
    traces = []
    for w in (0, 1):
        trace_of([steps[k][w] for k in (0, 1)], None, {"worker": w}).save(str(tmp_path / f"w{w}.json"))
        traces.append(Trace.load(str(tmp_path / f"w{w}.json")))
    tasks = [f"/job:worker/replica:0/task:{w}" for w in (0, 1)]
    assert trace_spreads(traces, tasks) == pytest.approx(traced_spreads(steps))
    # the second step: worker 1 half a second behind in a 2.8 s step
    assert trace_spreads([t.only_steps([1]) for t in traces], tasks) == pytest.approx(
        {p: 0.5 / 2.8 for p in PHASES}
    )
    with pytest.raises(
        TfschedError, match=r"w1\.json: traced step 0 has no op on /job:worker/replica:0/task:0"
    ):
        trace_spreads(traces, tasks[:1] * 2)
