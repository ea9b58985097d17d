"""Where a step's CPU goes (bench.profile): the profile lines the samples up with the steps by
rank; on a real local cluster the sampler finds every task and the step log every step."""

import pytest

from tfsched.bench.profile import DRIVER, TaskCpuSampler, profile_by_rank, start_delays
from tfsched.bench.run import StepRecord
from tfsched.errors import TfschedError
from tfsched.tracing.trace import OpRecord, Trace, TransferRecord


def _samples(busy: dict[str, list[tuple[float, float, float]]], until: float, every: float = 0.005):
    """Cumulative CPU seconds of each process, sampled every ``every``: ``busy`` gives each
    process's (from, to, cores) spans."""

    def cpu(name, t):
        return sum(cores * max(0.0, min(t, b) - a) for a, b, cores in busy[name])

    n = int(round(until / every))
    return [(k * every, {name: cpu(name, k * every) for name in busy}) for k in range(n + 1)]


def test_profile_by_rank_lines_the_cpu_up_with_the_steps_worker_by_rank():
    # Two steps of mode "m", 2 workers: in the first worker 0 finishes first, in the second
    # worker 1 does; whoever finishes first used a core in the step's first 100 ms, the other
    # in the next 100 ms. The PS used half a core all along. A step of another mode is not "m"'s.
    records = [
        StepRecord("m", 0, 0, 0, 0.0, 0.1),
        StepRecord("m", 0, 0, 1, 0.0, 0.2),
        StepRecord("m", 0, 1, 1, 1.0, 1.1),
        StepRecord("m", 0, 1, 0, 1.0, 1.2),
        StepRecord("other", 0, 0, 0, 2.0, 2.5),
        StepRecord("other", 0, 0, 1, 2.0, 2.5),
    ]
    samples = _samples(
        {
            "worker:0": [(0.0, 0.1, 1.0), (1.1, 1.2, 1.0)],
            "worker:1": [(0.1, 0.2, 1.0), (1.0, 1.1, 1.0)],
            "ps:0": [(0.0, 3.0, 0.5)],
            DRIVER: [(2.0, 2.5, 2.0)],
        },
        until=3.0,
    )
    p = profile_by_rank(samples, records, "m", bin_s=0.05)
    assert p["steps"] == 2 and p["steps_in_bin"] == [2, 2, 2, 2]
    assert list(p["rows"]) == ["worker rank 0", "worker rank 1", DRIVER, "ps:0", "total"]
    assert p["rows"]["worker rank 0"] == pytest.approx([1, 1, 0, 0], abs=1e-9)
    assert p["rows"]["worker rank 1"] == pytest.approx([0, 0, 1, 1], abs=1e-9)
    assert p["rows"]["ps:0"] == pytest.approx([0.5] * 4)
    assert p["rows"][DRIVER] == pytest.approx([0] * 4, abs=1e-9)
    assert p["rows"]["total"] == pytest.approx([1.5] * 4)
    assert p["finish_by_rank_s"] == pytest.approx([0.1, 0.2])

    # Steps of different lengths: a bin counts the steps still running in it.
    records[1] = StepRecord("m", 0, 0, 1, 0.0, 0.3)
    p = profile_by_rank(samples, records, "m", bin_s=0.05)
    assert p["steps_in_bin"] == [2, 2, 2, 2, 1, 1]
    assert p["finish_by_rank_s"] == pytest.approx([0.1, 0.25])

    with pytest.raises(TfschedError, match="no timed step of mode 'x'"):
        profile_by_rank(samples, records, "x")
    with pytest.raises(TfschedError, match="no CPU samples during the steps of mode 'm'"):
        profile_by_rank(samples[:1], records, "m")
    with pytest.raises(TfschedError, match="positive time"):
        profile_by_rank(samples, records, "m", bin_s=0)


def test_start_delays_are_per_step_from_the_steps_first_op():
    w = "/job:worker/replica:0/task:0"
    ps = "/job:ps/replica:0/task:0"
    ops, transfers = [], []
    for step, (t0, ps_at, pull_at) in enumerate([(1000.0, 1005.0, 1010.0), (9000.0, 9030.0, 9040.0)]):
        ops.append(OpRecord(step, f"{w}/device:CPU:0", "a", "MatMul", t0, 10.0))
        ops.append(OpRecord(step, f"{ps}/device:CPU:0", "read", "ReadVariableOp", ps_at, 1.0))
        transfers.append(
            TransferRecord(step, "e0", "v:0", 100, f"{ps}/device:CPU:0", f"{w}/device:CPU:0", t0, 1)
        )
        transfers.append(
            TransferRecord(
                step, "e1", "big:0", 300_000, f"{ps}/device:CPU:0", f"{w}/device:CPU:0", pull_at, 5
            )
        )
    d = start_delays(Trace(steps=2, ops=ops, transfers=transfers))
    assert d[w] == [0.0, 0.0]
    assert d[ps] == pytest.approx([5e-6, 30e-6])
    assert d["first large pull"] == pytest.approx([10e-6, 40e-6])  # the small one is not large


@pytest.mark.tf
def test_the_sampler_and_the_step_log_on_a_real_local_cluster():
    from tfsched.bench.run import local_side_by_side

    log: list[StepRecord] = []
    parts = []
    with TaskCpuSampler(interval_s=0.005) as sampler:
        results = local_side_by_side(
            "seq32",
            workers=2,
            modes=("baseline",),
            steps=3,
            rounds=2,
            batch_size=4,
            trace_steps=2,
            step_log=log,
            done=lambda k, n: parts.append((k, n)),
        )
    # the progress bar: two rounds, then the traced steps
    assert parts == [(0, 3), (1, 3), (2, 3), (3, 3)]
    res = results["baseline"]
    # every worker's part of every timed step, as long as the step the bench timed
    assert sorted((r.round, r.step, r.worker) for r in log) == [
        (r, k, w) for r in range(2) for k in range(3) for w in range(2)
    ]
    assert all(r.mode == "baseline" and r.end > r.start for r in log)
    assert sorted(r.end - r.start for r in log) == pytest.approx(sorted(res.step_times), abs=0.005)

    # the sampler found the three tasks (and counted this process apart from itself)
    names = set().union(*(row for _, row in sampler.samples))
    assert names == {"ps:0", "worker:0", "worker:1", DRIVER}
    used = {n: max(row.get(n, 0.0) for _, row in sampler.samples) for n in names}  # the tasks exit at the end
    assert used["worker:0"] > 0 and used["worker:1"] > 0 and used["ps:0"] > 0
    assert sampler.own_cpu_s > 0

    p = profile_by_rank(sampler.samples, log, "baseline", bin_s=0.01)
    assert p["steps"] == 6 and set(p["rows"]) == {"worker rank 0", "worker rank 1", "ps:0", DRIVER, "total"}
    assert all(v >= 0 for row in p["rows"].values() for v in row)
    assert p["finish_by_rank_s"][-1] == pytest.approx(
        sum(res.iteration_times) / len(res.iteration_times), abs=0.005
    )

    # two traced steps, and the workers by rank, measured and simulated
    assert res.trace.steps == 2 and len(start_delays(res.trace)["/job:ps/replica:0/task:0"]) == 2
    m = res.measured
    assert m["finish_by_rank_s"] == pytest.approx(p["finish_by_rank_s"], abs=0.005)
    assert len(m["predicted_finish_by_rank_s"]) == 2
    assert m["predicted_finish_by_rank_s"][0] <= m["predicted_finish_by_rank_s"][1]
    assert m["predicted_finish_by_rank_s"][1] == pytest.approx(m["simulated_s"])


@pytest.mark.tf
def test_traced_steps_must_be_positive():
    from tfsched.bench.run import run_side_by_side

    with pytest.raises(TfschedError, match="steps, rounds and traced steps must be positive"):
        run_side_by_side([], None, {"baseline": None}, trace=True, trace_steps=0)
