"""Link fits and per-op statistics from traces, on synthetic data with known answers."""

import pytest

from tfsched.errors import TfschedError
from tfsched.oracle import TimeOracle
from tfsched.oracle.fit import fit_link, link_fits, op_times, statistic_fn
from tfsched.tracing.trace import OpRecord, Trace, TransferRecord

PS = "/job:ps/replica:0/task:0/device:CPU:0"
W = "/job:worker/replica:0/task:0/device:CPU:0"


def test_fit_recovers_overhead_and_bandwidth():
    overhead, bw = 300e-6, 1e9
    sizes = [1_000, 50_000, 200_000, 1_000_000, 4_000_000]
    f = fit_link(sizes, [overhead + 8 * b / bw for b in sizes])
    assert f.model.overhead_s == pytest.approx(overhead, rel=1e-6)
    assert f.model.bandwidth_bps == pytest.approx(bw, rel=1e-6)
    assert f.r2 == pytest.approx(1.0) and f.rmse_s < 1e-12


def _sequential_trace(overhead, bw, sizes, steps=3, jitter=0.0):
    """Transfers requested together at t=0 and served one after another on one channel."""
    transfers = []
    for step in range(steps):
        t = 0.0
        for i, b in enumerate(sizes):
            service = (overhead + 8 * b / bw) * (1 + jitter * step)
            t += service
            transfers.append(TransferRecord(step, f"edge_{i}", f"v{i}/read:0", b, PS, W, 0.0, t * 1e6))
    ops = [OpRecord(s, W, "op", "MatMul", 0.0, 10.0 + s) for s in range(steps)]
    return Trace(steps=steps, ops=ops, transfers=transfers, step_times_us=[1e4] * steps)


def test_queueing_is_taken_out_before_fitting():
    # Each recorded duration includes the wait behind earlier transfers; the fit must not.
    trace = _sequential_trace(500e-6, 2e8, [10_000, 400_000, 20_000, 800_000, 5_000])
    fits, overall = link_fits(trace)
    f = fits[("/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0")]
    assert f.model.overhead_s == pytest.approx(500e-6, rel=1e-6)
    assert f.model.bandwidth_bps == pytest.approx(2e8, rel=1e-6)
    assert overall.model.bandwidth_bps == pytest.approx(2e8, rel=1e-6)


def test_min_statistic_is_tictacs():
    trace = _sequential_trace(500e-6, 2e8, [10_000, 400_000], steps=3, jitter=0.5)
    o = TimeOracle.from_trace(trace, "min")
    # min over steps: the fastest step's service times, and the op's shortest duration
    assert o.links[
        ("/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0")
    ].bandwidth_bps == pytest.approx(2e8, rel=1e-6)
    assert o.op_times["op"] == pytest.approx(10e-6)
    assert op_times(trace, "max")["op"] == pytest.approx(12e-6)
    assert op_times(trace, "median")["op"] == pytest.approx(11e-6)
    assert statistic_fn("p50")([1.0, 2.0, 3.0]) == pytest.approx(2.0)


def test_bad_statistic():
    with pytest.raises(TfschedError, match="unknown statistic"):
        statistic_fn("mode")


def test_compute_parallelism_is_op_time_over_busy_time():
    from tfsched.oracle.fit import compute_parallelism

    ops = []
    for step in range(3):
        # worker: two ops at a time for 10 us, then one alone for 10 us -> 30 us of ops in 20 us
        ops += [
            OpRecord(step, W, "a", "Conv2D", 0.0, 10.0),
            OpRecord(step, W, "b", "Conv2D", 0.0, 10.0),
            OpRecord(step, W, "c", "Conv2D", 10.0, 10.0),
            OpRecord(step, W, "g", "TfschedGate", 0.0, 500.0),  # waiting, not computing
            OpRecord(step, PS, "r", "ReadVariableOp", 0.0, 5.0),
            OpRecord(step, PS, "s", "ReadVariableOp", 7.0, 5.0),
        ]
    slots = compute_parallelism(Trace(steps=3, ops=ops))
    assert slots == {"/job:worker/replica:0/task:0": 1.5, "/job:ps/replica:0/task:0": 1.0}


def test_the_simulator_runs_as_many_ops_at_once_as_the_task_has_slots():
    from tests.helpers import op, var
    from tfsched.graph import build_comm_graph
    from tfsched.sim import simulate_schedule, step_bounds
    from tfsched.sim.model import build_sim_graph

    nodes = (
        var("w", (10,)) + [op(f"x{i}", ["w/read"]) for i in range(4)] + [op("y", [f"x{i}" for i in range(4)])]
    )
    g = build_comm_graph(nodes, fetches=["y"])
    times = {f"x{i}": 1.0 for i in range(4)}
    one = TimeOracle(op_times=times, default_op_s=0.0)
    two = TimeOracle(op_times=times, default_op_s=0.0, compute_slots={g.worker_tasks[0]: 2})
    t1, t2 = simulate_schedule(g, one).step_time, simulate_schedule(g, two).step_time
    assert t1 == pytest.approx(4.0, abs=0.01) and t2 == pytest.approx(2.0, abs=0.01)
    # A fractional capacity is shared: two ops at once, each at 0.75 -> 4 op-seconds in 8/3 s.
    frac = TimeOracle(op_times=times, default_op_s=0.0, compute_slots={g.worker_tasks[0]: 1.5})
    assert simulate_schedule(g, frac).step_time == pytest.approx(8 / 3, abs=0.01)
    # ... and an op alone runs at full speed: one op on capacity 1.5 takes its time.
    alone = TimeOracle(op_times={"x0": 1.0}, default_op_s=0.0, compute_slots={g.worker_tasks[0]: 1.5})
    assert simulate_schedule(g, alone).step_time == pytest.approx(1.0, abs=0.01)
    assert step_bounds(build_sim_graph(g, two)).lower == pytest.approx(2.0, abs=0.01)


def test_task_starts_are_each_tasks_first_op_over_steps():
    from tfsched.oracle.fit import task_starts

    ops = []
    for step, ps_first in enumerate((3000.0, 1000.0, 2000.0)):
        ops += [
            OpRecord(step, W, "c", "Const", 0.0, 1.0),
            OpRecord(step, W, "m", "MatMul", 5.0, 10.0),
            OpRecord(step, PS, "r", "ReadVariableOp", ps_first, 5.0),
            OpRecord(step, PS, "s", "ReadVariableOp", ps_first + 50.0, 5.0),
        ]
    trace = Trace(steps=3, ops=ops)
    w, ps = "/job:worker/replica:0/task:0", "/job:ps/replica:0/task:0"
    assert task_starts(trace, "min") == {w: 0.0, ps: pytest.approx(1e-3)}
    assert task_starts(trace, "mean")[ps] == pytest.approx(2e-3)
    assert TimeOracle.from_trace(_with_a_transfer(trace), "max").start(ps) == pytest.approx(3e-3)


def _with_a_transfer(trace: Trace) -> Trace:
    x = TransferRecord(0, "edge_1_r", "r:0", 4000, PS, W, 3005.0, 40.0)
    return Trace(steps=trace.steps, ops=trace.ops, transfers=[x])


def test_the_simulator_starts_each_task_when_its_partition_is_dispatched():
    from tests.helpers import op, var
    from tfsched.graph import build_comm_graph
    from tfsched.sim import simulate_schedule

    g = build_comm_graph(var("w", (10,)) + [op("y", ["w/read"])], fetches=["y"])
    ps = next(t for t in g.tasks if "/job:ps" in t)
    plain = TimeOracle(op_times={"y": 1.0}, default_op_s=0.0)
    late = TimeOracle(op_times={"y": 1.0}, default_op_s=0.0, task_start_s={ps: 0.5})
    t0 = simulate_schedule(g, plain, workers=2).step_time
    # The PS reads the variable only once it has started: every worker's step waits for it.
    assert simulate_schedule(g, late, workers=2).step_time == pytest.approx(t0 + 0.5, abs=1e-6)
    assert simulate_schedule(g, late, workers=2, steps=3).step_time == pytest.approx(t0 + 0.5, abs=1e-6)
    # Every order pays the delay: it is in both of TicTac's bounds, and the step stays between them.
    from tfsched.sim import build_sim_graph, step_bounds

    plain_b, late_b = (
        step_bounds(build_sim_graph(g, plain, workers=2)),
        step_bounds(build_sim_graph(g, late, workers=2)),
    )
    assert late_b.upper == pytest.approx(plain_b.upper + 0.5)
    assert late_b.lower >= max(plain_b.lower, 0.5)  # the PS's channel cannot send before 0.5
    assert late_b.lower <= simulate_schedule(g, late, workers=2).step_time <= late_b.upper


W1 = "/job:worker/replica:0/task:1/device:CPU:0"


def _concurrent_trace(overhead, bw, periods, dst=W):
    """Each period: its messages requested together and in flight at once (gRPC runs a
    connection's RPCs concurrently); they finish in an order unrelated to size, the last one
    after ``messages * overhead + bytes / bw``. Periods are far apart; one per step each."""
    transfers, ops = [], []
    for step, sizes in enumerate(periods):
        t0 = 1000.0 * step
        total = (len(sizes) * overhead + 8 * sum(sizes) / bw) * 1e6
        # finish times spread evenly over the period, the largest message first
        for k, b in enumerate(sorted(sizes, reverse=True)):
            end = total * (k + 1) / len(sizes)
            transfers.append(
                TransferRecord(step, f"edge_{step}_{k}", f"v{step}_{k}/read:0", b, PS, dst, t0, end)
            )
        ops.append(OpRecord(step, W, "op", "MatMul", t0, 10.0))
    return Trace(steps=len(periods), ops=ops, transfers=transfers, step_times_us=[1e4] * len(periods))


def test_overlapping_messages_are_fitted_by_busy_period():
    # Per-message service times here say nothing about size (the largest finishes first);
    # the busy periods (messages, bytes) still hold the split.
    overhead, bw = 400e-6, 8e9
    periods = [[4_000_000, 100], [100, 100, 100], [2_000_000], [500_000, 100, 100, 100, 100]]
    fits, _ = link_fits(_concurrent_trace(overhead, bw, periods), "mean")
    f = fits[("/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0")]
    assert f.model.overhead_s == pytest.approx(overhead, rel=1e-6)
    assert f.model.bandwidth_bps == pytest.approx(bw, rel=1e-6)
    assert f.samples == len(periods) and f.r2 == pytest.approx(1.0)
    assert f.overhead_from == "periods"


def test_a_link_whose_periods_cannot_split_takes_the_overhead_of_all_links():
    # ps -> w0: the same four messages every step (pulls): messages and bytes are proportional.
    # ps -> w1: periods of varied shape. The overhead comes from w1's; w0's bandwidth from its
    # own busy time.
    overhead, bw = 300e-6, 4e9
    same = _concurrent_trace(overhead, bw, [[1_000_000, 1_000, 1_000, 1_000]] * 4)
    varied = _concurrent_trace(overhead, bw, [[1_000_000], [100] * 6, [3_000_000, 100], [100, 100]], dst=W1)
    trace = Trace(steps=4, ops=same.ops, transfers=same.transfers + varied.transfers)
    fits, _ = link_fits(trace, "mean")
    w0 = fits[("/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0")]
    assert w0.model.overhead_s == pytest.approx(overhead, rel=1e-6)
    assert w0.model.bandwidth_bps == pytest.approx(bw, rel=1e-6)
    assert w0.overhead_from == "every link's periods"


def test_a_link_traced_with_few_messages_a_step_takes_the_fit_of_all_links():
    # ps -> w0: many messages a step, an exact fit. w0 -> ps: one 100-byte message a step seen
    # taking 2 ms (the trace missed the link's other messages, or it waited): alone it would
    # put most of 2 ms on every message of that link in the simulator.
    overhead, bw = 300e-6, 4e9
    pulls = _concurrent_trace(
        overhead, bw, [[1_000_000, 100, 100], [100] * 6, [3_000_000, 100, 100, 100]] * 2
    )
    pushes = [TransferRecord(step, f"push_{step}", "g:0", 100, W, PS, 0.0, 2000.0) for step in range(6)]
    trace = Trace(steps=6, ops=pulls.ops, transfers=pulls.transfers + pushes)
    fits, overall = link_fits(trace, "mean")
    ps, w0 = (d.rsplit("/device", 1)[0] for d in (PS, W))
    assert fits[(w0, ps)] == overall
    assert fits[(w0, ps)].model.overhead_s < 1e-3
    assert fits[(ps, w0)].model.overhead_s == pytest.approx(overhead, rel=1e-6)
    # Three messages a step are enough for a link's own fit.
    pushes3 = [
        TransferRecord(step, f"push_{step}_{k}", f"g{k}:0", 100, W, PS, 0.0, 2000.0 * (k + 1) / 3)
        for step in range(6)
        for k in range(3)
    ]
    fits3, overall3 = link_fits(Trace(steps=6, ops=pulls.ops, transfers=pulls.transfers + pushes3), "mean")
    assert fits3[(w0, ps)] != overall3


def test_channels_that_ran_at_once_do_not_share_the_host_link_again():
    from tests.helpers import op, var
    from tfsched.graph import build_comm_graph
    from tfsched.oracle.fit import host_rates
    from tfsched.sim import simulate_schedule

    # The PS sent to both workers at once, each channel at 1e9 bit/s: its uplink carried 2e9.
    sizes = [[1_000_000]] * 3
    a, b = _concurrent_trace(0.0, 1e9, sizes), _concurrent_trace(0.0, 1e9, sizes, dst=W1)
    trace = Trace(steps=3, ops=a.ops, transfers=a.transfers + b.transfers)
    fits, _ = link_fits(trace)
    ps, w0, w1 = (d.rsplit("/device", 1)[0] for d in (PS, W, W1))
    rates = host_rates(trace, fits)
    assert rates[(ps, "up")] == pytest.approx(2e9, rel=1e-6)
    assert rates[(w0, "down")] == pytest.approx(1e9, rel=1e-6)
    # One worker's trace: the host link is the channel's rate.
    assert host_rates(a, link_fits(a)[0])[(ps, "up")] == pytest.approx(1e9, rel=1e-6)

    # Simulated: two workers pulling 1 MB each at once take 8 ms with the measured host link,
    # 16 ms when the uplink is only as fast as one channel (a shaped NIC).
    g = build_comm_graph(var("w", (250_000,)) + [op("y", ["w/read"])], fetches=["y"])
    oracle = TimeOracle.from_trace(trace, "min")
    oracle.links = {(ps, w0): fits[(ps, w0)].model}
    oracle.link = fits[(ps, w0)].model
    measured = simulate_schedule(g, oracle, workers=2).step_time
    oracle.host_bps = {}
    shaped = simulate_schedule(g, oracle, workers=2).step_time
    assert measured == pytest.approx(8e-3, rel=0.01)
    assert shaped == pytest.approx(16e-3, rel=0.01)


def test_a_step_of_messages_in_flight_together_keeps_the_default_overhead():
    # One step, its pulls in flight at once (TAO's gates all open at the start): one busy period,
    # which cannot split overhead from bandwidth, and service times that are gaps between
    # completions (the largest message first). A line through them would put most of the busy
    # time on each message; the default overhead is kept, and the busy time sets the bandwidth.
    from tfsched.oracle.fit import DEFAULT
    from tfsched.oracle.oracle import DEFAULT_OVERHEAD_S

    sizes = [8_000_000, 400_000, 20_000, 2_000, 500, 100]
    overhead, bw = 1e-3, 1e9
    fits, overall = link_fits(_concurrent_trace(overhead, bw, [sizes]))
    f = fits[("/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0")]
    assert f.model.overhead_s == DEFAULT_OVERHEAD_S and overall.model.overhead_s == DEFAULT_OVERHEAD_S
    assert f.overhead_from == DEFAULT
    busy = len(sizes) * overhead + 8 * sum(sizes) / bw
    assert f.model.time(sum(sizes)) + (len(sizes) - 1) * f.model.overhead_s == pytest.approx(busy)
    # the same messages queued one after another: their service times hold the line
    queued = link_fits(_sequential_trace(overhead, bw, sizes, steps=1))[1]
    assert queued.model.overhead_s == pytest.approx(overhead, rel=1e-6)
    assert queued.overhead_from == "service times"


def test_a_line_that_explains_little_keeps_an_overhead_that_is_a_modest_share():
    # Services that say nothing of size (R^2 about 0), 0.75 ms on each of 4 messages: kept where
    # the channel was busy 10 ms a step (30% on overhead: a busy machine's messages can cost
    # that), the default where it was busy 3.2 ms (94%: the gaps of messages in flight together).
    from tfsched.oracle.fit import DEFAULT, MIN_SERVICE_R2, _Period, _service_fit, fit_link
    from tfsched.oracle.oracle import DEFAULT_OVERHEAD_S

    sizes, services = [100, 200, 300, 400], [1e-3, 0.5e-3, 0.5e-3, 1e-3]
    assert fit_link(sizes, services).r2 < MIN_SERVICE_R2
    kept, source = _service_fit(sizes, services, [_Period(0, 10e-3, 4, 1000)], min)
    assert source == "service times" and kept.overhead_s == pytest.approx(0.75e-3, rel=1e-6)
    unsplit, source = _service_fit(sizes, services, [_Period(0, 3.2e-3, 4, 1000)], min)
    assert source == DEFAULT and unsplit.overhead_s == DEFAULT_OVERHEAD_S


def test_an_untraced_producer_flows_from_its_send():
    # TensorFlow 2's calls: the PS's GroupCrossDeviceControlEdges identity, an empty tensor to
    # the worker once the PS's part of the call is done, is requested at the call's start and
    # arrives at its end; the profiler leaves its Identity out but traces its _Send
    # ("SRC/_N-1" for the receive "SRC/_N"). From its request it would make each step's pulls
    # one busy period of the whole call, and the fit put that time on every pull.
    overhead, bw = 400e-6, 8e9
    pulls = _concurrent_trace(
        overhead, bw, [[4_000_000, 100], [100, 100, 100], [2_000_000], [500_000] + [100] * 4]
    )
    done_us = 500_000.0  # the PS's part of each call ends here, long after its pulls
    control = "GroupCrossDeviceControlEdges_0/Identity_3"
    empties = [
        TransferRecord(s, f"{control}/_9", f"{control}:0", 0, PS, W, 1000.0 * s, done_us + overhead * 1e6)
        for s in range(pulls.steps)
    ]
    sends = [
        OpRecord(s, PS, f"{control}/_8", "_Send", 1000.0 * s + done_us, 30.0) for s in range(pulls.steps)
    ]
    link = ("/job:ps/replica:0/task:0", "/job:worker/replica:0/task:0")

    def fitted(ops):
        return link_fits(Trace(steps=pulls.steps, ops=ops, transfers=pulls.transfers + empties), "mean")[0][
            link
        ]

    f = fitted(pulls.ops + sends)
    assert f.model.overhead_s == pytest.approx(overhead, rel=1e-6)
    assert f.model.bandwidth_bps == pytest.approx(bw, rel=1e-6)
    assert f.overhead_from == "periods"
    # without the send the empty tensor flows from its request: each step is one period of the call
    assert fitted(pulls.ops).model.overhead_s > 10 * overhead
