"""The benchmark's prediction inputs, on synthetic traces with known answers."""

import pytest

from tfsched.bench.predict import machine_slots, machine_slots_from_cpu, ops_cpu_s
from tfsched.tracing.trace import OpRecord, Trace, TransferRecord

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


def test_on_hosts_with_cores_of_their_own_a_task_keeps_its_lone_speed():
    # Half a core each on two cores: worker 0 alone and the four together ran their ops at the
    # same speed (each at its cap), which the ratio reads as four slots of a core each; a lone
    # op took at most half a core, so the machine does at least four of them at once, and each
    # task one (host_slots): its lone speed, not half of it.
    from tfsched.bench.predict import host_slots

    alone, together = _trace(1.0), _trace(1.0, steps=1)
    assert machine_slots(alone, together, workers=2) == pytest.approx(2.0)
    slots = machine_slots(alone, together, workers=2, host_cores=0.5, cores=2)
    assert slots == pytest.approx(4.0)
    assert host_slots(0.5, slots, 2) == pytest.approx(1.0)
    # more workers than the cap's least: the ratio stands
    assert machine_slots(alone, together, workers=6, host_cores=0.5, cores=2) == pytest.approx(6.0)


def test_machine_slots_from_the_cpu_the_baseline_spent():
    # Alone, every task's ops take 2 s a step (worker 1 s, the PS 1 s), and worker 0 moves
    # 1,000,000 bytes. Four workers on 2 cores spent 20 CPU s a step, 4 of them moving
    # 4,000,000 bytes at 1 us a byte: 16 CPU s for 8 s of lone ops, 2 CPU s per op-second,
    # so the 2 cores run one lone op at a time.
    alone = _trace(1.0, recv=False)
    alone.transfers = [TransferRecord(s, "e", "v:0", 1_000_000, PS, W, 0.0, 1.0) for s in range(2)]
    kw = {"comm_cpu_s_per_byte": 1e-6, "workers": 4, "cores": 2}
    assert machine_slots_from_cpu(alone, cpu_s_per_step=20.0, **kw) == pytest.approx(1.0)
    # the Tfsched gates and the receives wait, they are not work
    assert machine_slots_from_cpu(_trace(1.0), cpu_s_per_step=8.0, **{**kw, "comm_cpu_s_per_byte": 0.0}) == (
        pytest.approx(2.0)
    )
    # nothing measured, or the bytes took all of it: no estimate
    assert machine_slots_from_cpu(alone, cpu_s_per_step=0.0, **kw) is None
    assert machine_slots_from_cpu(alone, cpu_s_per_step=4.0, **kw) is None
    # what the results keep of it: the CPU a step left for the ops, none at 4 CPU s a step
    left = {"comm_cpu_s_per_byte": 1e-6, "workers": 4}
    assert ops_cpu_s(alone, cpu_s_per_step=20.0, **left) == pytest.approx(16.0)
    assert ops_cpu_s(alone, cpu_s_per_step=4.0, **left) == pytest.approx(0.0)


def test_machine_slots_from_the_op_seconds_the_simulator_runs():
    # The same machine (20 CPU s a step, 4 of them the bytes'), its lone ops counted as the
    # simulator runs them, 1.6 s a step where the trace's mean says 2 s: 16 CPU s did 4 x 1.6 s
    # of simulated ops, so the cores run 0.8 of them at once, not 1.0.
    alone = _trace(1.0, recv=False)
    alone.transfers = [TransferRecord(s, "e", "v:0", 1_000_000, PS, W, 0.0, 1.0) for s in range(2)]
    kw = {"comm_cpu_s_per_byte": 1e-6, "workers": 4, "cores": 2}
    assert machine_slots_from_cpu(alone, cpu_s_per_step=20.0, work_s=1.6, **kw) == pytest.approx(0.8)
    assert machine_slots_from_cpu(alone, cpu_s_per_step=20.0, work_s=None, **kw) == pytest.approx(1.0)
    assert machine_slots_from_cpu(alone, cpu_s_per_step=20.0, work_s=0.0, **kw) is None


def test_annotate_refuses_an_unknown_work_measure():
    from tfsched.bench.predict import annotate
    from tfsched.errors import TfschedError

    with pytest.raises(TfschedError, match="work must be one of simulated, traced, got 'mean'"):
        annotate({}, graph_path="g.pb", fetches=[], workers=4, bandwidth_bps=None, work="mean")


def test_annotate_refuses_an_unknown_op_statistic():
    from tfsched.bench.predict import annotate
    from tfsched.errors import TfschedError

    with pytest.raises(TfschedError, match="unknown statistic 'fastest'; use min, median, mean"):
        annotate({}, graph_path="g.pb", fetches=[], workers=4, bandwidth_bps=None, op_statistic="fastest")


def test_the_links_share_fitted_to_the_measured_stagger():
    """Two workers (between-graph replicas) each pulling 1 MB over the PS's link and computing
    1 s: shared evenly, both steps end at 3 s; with worker 1's flow weighing w of worker 0's,
    worker 0's pull ends at (1 + w) s and its step at (2 + w) s. The fit finds the w a measured
    stagger implies."""
    from tests.helpers import chain_graph, oracle_with
    from tfsched.bench.predict import FIT_LOW, fit_worker_weight
    from tfsched.sim import build_sim_graph, simulate

    sg = build_sim_graph(chain_graph(1, [250_000]), oracle_with({"f0": 1.0}, bandwidth_bps=8e6), workers=2)
    tried = []

    def runs_of(w: float) -> list:
        tried.append(w)
        return [simulate(sg, "fifo", worker_weight=w)]

    assert fit_worker_weight(runs_of, [2.5, 3.0], tol=0.001) == pytest.approx(0.5, abs=0.001)
    assert fit_worker_weight(runs_of, [2.8, 3.0], tol=0.001) == pytest.approx(0.8, abs=0.001)
    # a latency in the measurement (the driver's call) shifts the simulated steps alike
    assert fit_worker_weight(runs_of, [2.7, 3.2], offset_s=0.2, tol=0.001) == pytest.approx(0.5, abs=0.001)
    # measured as even as the even share: no weight; more staggered than any tried: the lowest
    assert fit_worker_weight(runs_of, [3.0, 3.0]) == 1.0
    assert fit_worker_weight(runs_of, [1.0, 3.0]) == FIT_LOW
    assert fit_worker_weight(runs_of, [3.0]) == 1.0  # one worker: nothing to share
    assert all(FIT_LOW <= w <= 1.0 for w in tried)


def test_annotate_refuses_a_worker_weight_out_of_range():
    from tfsched.bench.predict import annotate
    from tfsched.errors import TfschedError

    for bad in (0.0, 1.5, "fitted"):
        with pytest.raises(TfschedError, match="worker_weight must be in"):
            annotate({}, graph_path="g.pb", fetches=[], workers=4, bandwidth_bps=None, worker_weight=bad)


@pytest.mark.tf
@pytest.mark.cluster
def test_the_graph_that_ran_is_what_grappler_made_of_the_saved_one(tmp_path):
    """Par-32 training: Grappler merges the 32 identical weight gradients (one input, one
    upstream gradient) into one MatMul, so the graph that ran pushes 2 tensors a step; laid out
    on the saved graph's 32 pushes, the bench's predictions were 46% to 73% slow."""
    from tfsched.graph import load_comm_graph
    from tfsched.models import build_graph
    from tfsched.ordering import carry_over, order
    from tfsched.tracing.replay import graph_that_ran
    from tfsched.tracing.run import trace_local

    built = build_graph("par32", mode="train", batch_size=4)
    path = tmp_path / "g.pb"
    path.write_bytes(built.graph_def().SerializeToString())
    saved = load_comm_graph(str(path), fetches=built.fetches)
    trace = trace_local(model="par32", steps=2, warmup=1)
    ran = graph_that_ran(trace, built.fetches)

    def pushes(g):
        return [t for t in g.transfers if t.kind == "push"]

    assert len(pushes(saved)) == 33 and 1 <= len(pushes(ran)) < 33
    # the pulls are the same variables, and every transfer the trace recorded is in it
    assert sorted(t.key for t in saved.transfers if t.kind == "pull") == sorted(
        t.key for t in ran.transfers if t.kind == "pull"
    )
    assert {t.tensor for t in trace.transfers} <= {t.tensor for t in ran.transfers}
    # a schedule made from the saved graph keeps its pulls' order on the graph that ran
    sched = order(saved, "tio")
    carried = carry_over(sched, ran)
    by_key = {t.key: p for t, p in sched.priorities.items() if t.kind == "pull"}
    pulls = sorted((t for t in ran.transfers if t.kind == "pull"), key=lambda t: carried.priorities[t])
    assert [by_key[t.key] for t in pulls] == sorted(by_key[t.key] for t in pulls)
    # `analyze --trace` predicts on it too: fewer messages than the saved graph's
    from tfsched.analysis import analyze, analyze_graph

    trace.save(str(tmp_path / "t.json"))
    a = analyze(str(path), fetches=built.fetches, algorithm="tao", workers=4, trace=str(tmp_path / "t.json"))
    assert a.simulated_graph == {"from": "ran", "transfers": len(ran.transfers), "saved_transfers": 65}
    on_saved = analyze_graph(a.graph, a.oracle, algorithm="tao", workers=4).prediction
    assert a.prediction.baseline_s < on_saved.baseline_s
    # and so does the picture of `viz --graph`: the simulated step pushes what the trace pushed
    from tfsched.viz.write import _prediction, write_visualization

    rows = _prediction(trace, str(path), built.fetches, 0, None)
    assert len(rows["ps:0 ← worker:0"]) == len(pushes(ran)) < 33
    write_visualization(trace, str(tmp_path / "step.png"), graph=str(path), fetches=built.fetches)
    assert (tmp_path / "step.png").read_bytes().startswith(b"\x89PNG")
    # a trace that ran with tfsched's pass has its gates in the partition graphs: a gate is the
    # Identity it stands in for, and one the step does not need goes with the rest
    # (tests/tracing/test_trace.py: a real trace of scheduled steps)
    import base64

    from tfsched.tracing.replay import partition_graph_defs

    gated = partition_graph_defs(trace)
    gated[0].node.add(name="tfsched/gate", op="TfschedGate", input=[gated[0].node[0].name])
    trace.partition_graphs = [base64.b64encode(g.SerializeToString()).decode() for g in gated]
    again = graph_that_ran(trace, built.fetches)
    assert "tfsched/gate" not in again.graph and set(again.graph) == set(ran.graph)
    assert again.transfers == ran.transfers
    # a trace without partition graphs (written before traces kept them) gives none
    trace.partition_graphs = []
    assert graph_that_ran(trace, built.fetches) is None


def test_a_step_puts_back_together_the_tensors_its_partition_cut_on_every_worker():
    """``reassembled_bytes``: the whole bytes of each transfer cut into more than one slice, for
    each worker and step laid out, over the steps; the transfers left whole count nothing."""
    from tests.helpers import oracle_with, training_chain
    from tfsched.bench.predict import reassembled_bytes
    from tfsched.ordering import order
    from tfsched.sim import build_sim_graph

    g = training_chain(3, nbytes=2_000_000)  # three 2 MB layers: each pulled and pushed
    o = oracle_with({}, bandwidth_bps=8e9, overhead_s=0.0)
    s = order(g, "tio")
    assert reassembled_bytes(build_sim_graph(g, o, s, workers=2)) == 0.0
    assert reassembled_bytes(build_sim_graph(g, o, s, workers=2, partition_bytes=4_000_000)) == 0.0
    # cut in two: every pull and every push of both workers, 3 x 2 x 2 transfers of 2 MB
    cut = build_sim_graph(g, o, s, workers=2, partition_bytes=1_000_000)
    assert reassembled_bytes(cut) == 3 * 2 * 2 * 2_000_000
    # two steps laid out: the same a step
    two = build_sim_graph(g, o, s, workers=2, partition_bytes=1_000_000, steps=2)
    assert reassembled_bytes(two, steps=2) == 3 * 2 * 2 * 2_000_000


@pytest.mark.tf
def test_the_copy_of_a_cut_tensor_is_measured_on_the_pass_own_op():
    """``run.copy_cpu_s_per_byte`` times ``TfschedConcat`` itself: CPU per byte no core beats.
    Constant slices were folded by the optimizers into one tensor made once, a copy that cost
    next to nothing, which the lower bound catches: the slices are variables."""
    from tfsched.bench.run import copy_cpu_s_per_byte
    from tfsched.graph._tf import import_tensorflow

    per_byte = copy_cpu_s_per_byte(import_tensorflow())
    # one core copies at most some tens of GB/s, and at least a few hundred MB/s
    assert 1 / 60e9 < per_byte < 1 / 0.2e9


@pytest.mark.tf
@pytest.mark.cluster
def test_an_acknowledgement_is_measured_on_a_real_cluster():
    """``run.ack_cpu_s`` on a PS and a worker (processes, gRPC): the ends' CPU of slices that are
    acknowledged past the same slices whose credit comes back when sent, over the
    acknowledgements: something, and far under a step; nothing where the ends cannot be read.
    Once the PS has died: the task named where the cluster's dead tasks are known (the run has
    failed), else nothing measured."""
    import signal

    from tfsched.bench.local import LocalCluster
    from tfsched.bench.profile import task_processes
    from tfsched.bench.run import ack_cpu_s, pull_ends
    from tfsched.errors import TfschedError
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    with LocalCluster(ps=1, workers=1) as cluster:
        target = cluster.target("worker", 0)
        ends = pull_ends(cluster.task_pids())  # its own, not a task another test left behind
        assert all(ends.values()), ends
        # by name among this process's children, as a caller without the cluster finds them
        assert set(ends["send"]) <= set(pull_ends(task_processes())["send"])
        per_ack = ack_cpu_s(tf, target, ends, cluster.dead_tasks)
        assert ack_cpu_s(tf, target, {"send": [], "recv": ends["recv"]}) == 0.0
        cluster.procs[("ps", 0)].send_signal(signal.SIGKILL)
        with pytest.raises(TfschedError) as e:
            ack_cpu_s(tf, target, ends, cluster.dead_tasks)
        assert (
            str(e.value)
            == "measuring what an acknowledgement costs: cluster task /job:ps/task:0 killed by SIGKILL"
        )
        assert ack_cpu_s(tf, target, ends) == 0.0
    # an RPC and the ops around it: tens of microseconds at least, far under 20 ms
    assert 2e-5 < per_ack < 0.02, per_ack


@pytest.mark.parametrize(
    "mode, policy, acks",
    [
        ("tio+p250000+c1000000", "counter", 4),  # each of the four 1 MB slices its own
        ("tio+p250000+c1000000+g2", "counter", 2),  # two pairs
        ("tio+p250000+c1000000+g4", "counter", 1),  # one group of four: the window holds them
        ("tio+p250000+c500000+g4", "counter", 2),  # the window holds two
        ("tio+p250000+c1000000+g2", "ready", 4),  # order not kept: not grouped
    ],
)
def test_the_acknowledgements_a_mode_sends_count_its_groups(mode, policy, acks):
    """What a mode's CPU floor counts (``predict.acknowledgements``): one a group of slices under
    ``+gN``, as the pass puts them (cc/scheduler.cc)."""
    from tests.helpers import chain_graph, oracle_with
    from tfsched.bench.predict import acknowledgements
    from tfsched.bench.run import parse_mode
    from tfsched.ordering import order
    from tfsched.sim import build_sim_graph

    g = chain_graph(1, [1_000_000])  # one 4 MB pull
    sg = build_sim_graph(g, oracle_with({}, bandwidth_bps=8e6), order(g, "tio"), partition_bytes=1_000_000)
    assert acknowledgements(sg, parse_mode(mode), policy=policy) == acks
