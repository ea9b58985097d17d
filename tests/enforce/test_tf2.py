"""TensorFlow 2: ParameterServerStrategy with a ClusterCoordinator, scheduled by
``tfsched.enable_functions`` on a real cluster (every task its own process, with the compiled op)."""

import json
import os
import re
import time

import pytest

from tfsched.bench.local import LocalCluster, task_env
from tfsched.bench.zygote import Forks
from tfsched.tracing.replay import GRAPH_TAG

pytestmark = [pytest.mark.tf, pytest.mark.cluster]

CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tf2_client.py")
CLIENT_IMPORTS = ("numpy", "tensorflow", "keras", "tfsched", "tfsched.bench.local")
_FORKS: dict[str, Forks] = {}


@pytest.fixture(scope="module", autouse=True)
def _client_forks():
    """The module's clients forked from one process that imported what a client imports
    (``bench.zygote.Forks``): a user's program once its imports are done, each a process of its
    own."""
    with Forks(CLIENT_IMPORTS, env=task_env(legacy_keras=False)) as forks:
        _FORKS["clients"] = forks
        yield
        _FORKS.clear()


def run_client(
    spec: dict,
    kwargs: dict | None,
    *,
    steps: int,
    layers: int = 4,
    width: int = 256,
    fail_at: int | None = None,
    fit: bool = False,
    connect: bool = False,
    trace: str | None = None,
    window: float = 8.0,
    conv: bool = False,
    bn: bool = False,
    tf_keras: bool = False,
    probe: bool = False,
    shards: int = 0,
    held: dict | None = None,
) -> dict:
    args = {"spec": spec, "kwargs": kwargs, "steps": steps, "layers": layers, "width": width}
    args.update(fail_at=fail_at, fit=fit, connect=connect, trace=trace, window=window, conv=conv, probe=probe)
    args.update(bn=bn, tf_keras=tf_keras, shards=shards, held=held)
    # a user's program: tf.keras is Keras 3, as the user has it (the forking process's environment)
    done = _FORKS["clients"].run([CLIENT, json.dumps(args)], 300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def one_worker():
    with LocalCluster(ps=1, workers=1) as c:
        yield c


def test_functions_train_bitwise_identical_each_call_ordered_apart(one_worker):
    """One worker (so that the updates' order is fixed): the same losses and variables, bit for
    bit, as vanilla, with TIO alone and with partitioning, credit and one window per task, in
    turn and in lockstep (what ``tune --api tf2 --host-order priority`` runs); every call of the
    step function had a gate state of its own on each task, all freed after."""
    steps = 12
    vanilla = run_client(one_worker.spec, None, steps=steps)
    window = {"partition": 20_000, "credit": 40_000, "host_credit": True}
    for kwargs in ({}, window, {**window, "host_order": "priority"}):
        scheduled = run_client(one_worker.spec, kwargs, steps=steps)
        assert scheduled["losses"] == vanilla["losses"], kwargs
        assert scheduled["variables"] == vanilla["variables"], kwargs
        ps, worker = scheduled["stats"]["/job:ps/task:0"], scheduled["stats"]["/job:worker/task:0"]
        for s in (ps, worker):
            # per call, not one state for all of them (TensorFlow 2 runs every call of a function
            # in one step container: the counters of the first call would order nothing after it)
            assert s["steps"] == steps, (kwargs, s)
            assert s["live_steps"] == 0 and s["timeouts"] == 0 and s["cancelled"] == 0, (kwargs, s)
        # the 10 variables' reads and their 10 gradients a call (more in slices)
        assert ps["released"] >= 10 * steps and worker["released"] >= 10 * steps
        assert ps["waited"] > 0
        if kwargs:
            assert ps["acked"] > 0 and worker["acked"] > 0  # the credit's acknowledgements came back


def test_keras_fit_trains_bitwise_identical(one_worker):
    """Keras's ``model.fit`` with the strategy (tf_keras) and one ``enable_functions`` call: the
    same losses and variables as vanilla, each of fit's steps a call ordered on its own."""
    steps = 12
    vanilla = run_client(one_worker.spec, None, steps=steps, fit=True)
    scheduled = run_client(one_worker.spec, {"partition": 20_000, "credit": 40_000}, steps=steps, fit=True)
    assert scheduled["losses"] == vanilla["losses"] and len(vanilla["losses"]) == 2
    assert scheduled["variables"] == vanilla["variables"]
    for s in scheduled["stats"].values():
        assert s["steps"] == steps and s["live_steps"] == 0 and s["timeouts"] == 0, s
        assert s["acked"] > 0  # the credit's acknowledgements came back
    assert scheduled["stats"]["/job:ps/task:0"]["waited"] > 0


def test_a_connected_clusters_functions_train_bitwise_identical(one_worker):
    """No strategy: the coordinator joins the cluster with ``experimental_connect_to_cluster``,
    holds the variables on the PS and runs its own function with the model on the worker. The
    pass gates the function's parts on both tasks: the same losses and variables as vanilla."""
    steps = 6
    vanilla = run_client(one_worker.spec, None, steps=steps, connect=True)
    for kwargs in ({}, {"partition": 20_000, "credit": 40_000}):
        scheduled = run_client(one_worker.spec, kwargs, steps=steps, connect=True)
        assert scheduled["losses"] == vanilla["losses"], kwargs
        assert scheduled["variables"] == vanilla["variables"], kwargs
        ps, worker = scheduled["stats"]["/job:ps/task:0"], scheduled["stats"]["/job:worker/task:0"]
        for s in (ps, worker):
            assert s["steps"] == steps and s["live_steps"] == 0 and s["timeouts"] == 0, (kwargs, s)
        # the 10 variables' reads on the PS, their gradients on the worker, a call
        assert ps["released"] >= 10 * steps and worker["released"] >= 10 * steps, (kwargs, ps, worker)


@pytest.mark.parametrize("shards", [0, 2])
def test_two_ps_one_state_per_call_on_the_worker(shards):
    """Two PS: the strategy spreads the variables over both, whole, or (``shards``, its
    ``variable_partitioner``) every variable split in two, a shard on each PS, read and updated
    as a ``ShardedVariable``. The worker's part of a call pushes to two tasks. It keeps one state
    per call there, none left after, and training is vanilla's bit for bit."""
    steps = 8
    with LocalCluster(ps=2, workers=1) as c:
        # tf_keras with shards: a Keras 3 variable cannot hold a ShardedVariable (it has no handle)
        keras = {"shards": shards, "tf_keras": shards > 0}
        vanilla = run_client(c.spec, None, steps=steps, **keras)
        scheduled = run_client(c.spec, {"partition": 20_000, "credit": 40_000}, steps=steps, **keras)
    assert scheduled["losses"] == vanilla["losses"] and scheduled["variables"] == vanilla["variables"]
    # the 4 hidden layers' and the output layer's kernel and bias: 10 variables, or 20 shards
    held = scheduled["held_by"]
    assert held == vanilla["held_by"] and len(held) == 10 * (shards or 1)
    assert held.count("/job:ps/replica:0/task:0") == held.count("/job:ps/replica:0/task:1"), held
    worker = scheduled["stats"]["/job:worker/task:0"]
    assert worker["steps"] == steps, worker
    for device, s in scheduled["stats"].items():
        assert s["live_steps"] == 0 and s["timeouts"] == 0, (device, s)
        assert s["released"] > 0, (device, s)  # both PS send, and the worker sends to both
    # each of a call's pulls and pushes went through a gate: a shard is a transfer of its own
    assert sum(s["released"] for s in scheduled["stats"].values()) >= 2 * len(held) * steps


def test_the_tf2_bench_knows_where_the_strategy_puts_a_built_in_models_parameters():
    """``tfsched bench --api tf2``'s busiest channel (``channel_params``, which sizes ``+pc``) is the
    largest share of the parameters a PS holds once a real strategy made the model: whole
    variables round-robin, or split by ``MinSizePartitioner`` first (``--ps-placement min-size``;
    the Transformer's embedding and feed-forward kernels are split, its biases and norms are not).
    ResNet-50 and Inception-v3 make their variables in another order than their
    ``model.variables`` lists them (a ResNet block's shortcut convolution first): the strategy
    deals them out in the order they are made."""
    from tfsched.bench.tf2 import channel_params

    placements = ("round-robin", "min-size")
    with LocalCluster(ps=2, workers=1) as c:
        held = {
            (m, p): run_client(c.spec, None, steps=0, held={"model": m, "ps_placement": p})["held"]
            for m in ("transformer", "resnet50", "inception_v3")
            for p in placements
        }
    for (model, placement), by_task in held.items():
        assert sorted(by_task) == ["/job:ps/replica:0/task:0", "/job:ps/replica:0/task:1"], by_task
        assert channel_params(model, 2, ps_placement=placement) == max(by_task.values()), (model, placement)
    # the same parameters, spread more evenly when split
    rr, split = (held["transformer", p] for p in placements)
    assert sum(split.values()) == sum(rr.values()) and max(split.values()) < max(rr.values())


def test_two_workers_calls_at_once_leave_no_state():
    """Two workers' calls on the one PS at once: each has its own state there, none is left."""
    steps = 10
    with LocalCluster(ps=1, workers=2) as c:
        out = run_client(
            c.spec, {"partition": 20_000, "credit": 40_000, "credit_return": "sent"}, steps=steps
        )
    ps = out["stats"]["/job:ps/task:0"]
    workers = [out["stats"][f"/job:worker/task:{i}"] for i in range(2)]
    assert ps["steps"] == steps and sum(w["steps"] for w in workers) == steps
    for s in (ps, *workers):
        assert s["live_steps"] == 0 and s["timeouts"] == 0, s
    assert len(out["losses"]) == steps


# Run beside another test under xdist it failed twice in three rehearsals: once a client hung for
# 300 s, once the worker counted no state of the failed call. The second was the test's: on a busy
# machine the call can fail before the worker's first gate runs (reproduced once in 14 runs beside
# two other TensorFlow 2 tests, fifty-second session), and the gates then go, cancelled, with no
# state; the test now allows it. The hang did not come back in those 14 runs; alone until it is
# understood. A candidate, fixed in the fifty-seventh session: a gate of the failed call cancelled
# while it passed from its channel to its shared window (this test's second setting has one) was
# parked there until its timeout, holding the window, so the next calls' gates waited for theirs
# (test_safety.py::test_a_gate_cancelled_on_its_way_to_its_window_does_not_wait_there). With
# that fix it passed 12 runs of 12 beside the file's other tests in another process (fifty-eighth
# session). It stays alone: a hang would fail CI, and running it alone costs CI only 25 s.
@pytest.mark.alone
def test_a_failed_call_frees_its_state_on_every_task():
    """A call that fails in its backward pass, on the worker, leaves no gate state on any task
    (TensorFlow 2 shares one step container among the calls: the state is freed when the call's
    cancellation manager fires, not after minutes of idling), and the cluster trains on as before."""
    with LocalCluster(ps=1, workers=1) as c:
        first = None
        for kwargs, fail_at in (({}, 3), ({"partition": 20_000, "credit": 40_000, "host_credit": True}, 0)):
            whole = run_client(c.spec, kwargs, steps=4)
            first = first or whole
            full = whole["stats"]["/job:worker/task:0"]["released"] / 4  # a whole call's gates there
            failed = run_client(c.spec, kwargs, steps=6, fail_at=fail_at)
            # the error came back at once, not after a gate's timeout (60 s)
            assert failed["error"] == "InvalidArgumentError" and failed["seconds"] < 30, failed
            worker = failed["stats"]["/job:worker/task:0"]
            # the failed call reached the worker's gates: it had a state there, and not all of its
            # pushes went (the calls after it may have started before the coordinator saw the
            # error); or, on a busy machine, it failed before its first gate there ran: no state was
            # made, and each gate that ran then let its tensor go at once, cancelled, or none ran
            # (seen once in a CI rehearsal: steps 3 at fail_at 3, nothing cancelled)
            if worker["cancelled"] == 0 and worker["steps"] > fail_at:
                assert worker["released"] < full * worker["steps"], failed
            else:
                assert worker["steps"] >= fail_at, failed
            for s in failed["stats"].values():
                assert s["live_steps"] == 0 and s["timeouts"] == 0, (kwargs, failed)
        again = run_client(c.spec, {}, steps=4)
    assert again["losses"] == first["losses"] and again["variables"] == first["variables"]
    assert all(s["live_steps"] == 0 for s in again["stats"].values())


def _by_source(transfers, src_job: str) -> dict:
    """Bytes a traced step moved from tasks of ``src_job``, per tensor of the graph (a gate's or
    a slice's counted as the tensor it forwards; the pass's acknowledgements and credit left out)."""
    from tfsched.tracing.replay import scheduled_tensor

    out: dict[str, int] = {}
    for t in transfers:
        source = scheduled_tensor(t.tensor)
        if f"/job:{src_job}/" in t.src and source:
            out[source] = out.get(source, 0) + t.bytes
    return out


@pytest.mark.parametrize(
    "kwargs", [None, {"partition": 20_000, "credit": 40_000}], ids=["vanilla", "partition-credit"]
)
def test_traced_calls_record_every_transfer_with_its_bytes(one_worker, tmp_path, kwargs):
    """``tfsched.trace_functions`` around a coordinator's calls (4 dense layers of 256, on 1 PS):
    each call that ran inside the window is a step, with ops on both tasks and, per step, every
    variable pulled and its gradient pushed with their bytes (summed over the slices where the
    pass partitions the 256 x 256 kernels into four), the pushes told apart by the output of the
    gradients' IdentityN they carry. Tracing changes no value: the losses are vanilla's bit for
    bit. ``tfsched viz`` draws the trace."""
    from click.testing import CliRunner

    from tfsched.cli import main
    from tfsched.tracing.trace import Trace

    path = str(tmp_path / "tf2.trace.json")
    began = time.time() * 1e6
    out = run_client(one_worker.spec, kwargs, steps=1, trace=path)
    ended = time.time() * 1e6
    vanilla = run_client(one_worker.spec, None, steps=len(out["losses"]))
    assert out["losses"] == vanilla["losses"]
    trace = Trace.load(path)
    assert 3 <= trace.steps < len(out["losses"]), (trace.steps, len(out["losses"]))
    assert trace.meta["api"] == "tf2-functions" and trace.meta["missing_transfers"] == {}
    # when each call began, on the wall clock (us since the epoch): inside the client's run, in
    # order, each after the one before it ended
    starts = trace.step_starts_us
    assert len(starts) == trace.steps and began < starts[0] and starts[-1] + trace.step_times_us[-1] < ended
    assert all(
        a + d <= b for a, d, b in zip(starts[:-1], trace.step_times_us[:-1], starts[1:], strict=True)
    ), starts
    variables = sorted([4 * 256 * 256] * 4 + [4 * 256] * 4 + [4 * 256 * 10, 4 * 10])
    ps, worker = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"
    for k in range(trace.steps):
        ops = [o for o in trace.ops if o.step == k]
        assert {o.device for o in ops} == {ps, worker}, k
        assert any(o.op == "AssignSubVariableOp" and o.device == ps for o in ops), k
        moved = [t for t in trace.transfers if t.step == k]
        assert {(t.src, t.dst) for t in moved} == {(ps, worker), (worker, ps)}, k
        for t in moved:
            assert 0 <= t.start_us <= t.start_us + t.duration_us <= trace.step_times_us[k] + 1, t
        pulls, pushes = _by_source(moved, "ps"), _by_source(moved, "worker")
        assert sorted(b for b in pulls.values() if b >= 40) == variables, (k, pulls)
        gradients = [b for t, b in pushes.items() if "IdentityN" in t]
        assert sorted(gradients) == variables, (k, pushes)
        slices = [
            t for t in moved if re.search(rf"/tfsched(_\d+)?_to_[^/]*_gate_\d+{GRAPH_TAG}:0$", t.tensor)
        ]
        if kwargs:
            assert any(o.op == "TfschedGate" for o in ops), k
            assert len(slices) == 2 * 4 * 4, (k, [t.tensor for t in slices])  # 4 kernels x 4 slices, each way
            assert {t.bytes for t in slices} == {4 * 256 * 256 // 4}, k
        else:
            assert not slices and not any(o.op == "TfschedGate" for o in ops), k
    chrome = str(tmp_path / "tf2.chrome.json")
    done = CliRunner().invoke(main, ["viz", path, "-o", chrome])
    assert done.exit_code == 0, done.output
    with open(chrome) as f:
        events = json.load(f)
    tracks = {e["args"]["name"] for e in events["traceEvents"] if e["name"] == "thread_name"}
    assert tracks >= {"compute CPU:0", f"recv from {ps[: -len('/device:CPU:0')]}"}, tracks
    drawn = [e for e in events["traceEvents"] if e["ph"] == "X" and e["cat"] == "transfer"]
    assert len(drawn) == len(trace.transfers), (len(drawn), len(trace.transfers))


@pytest.mark.parametrize("kwargs", [None, {}], ids=["vanilla", "tio"])
def test_a_traced_convolutions_kernel_is_pulled_once_beside_its_control_edge(one_worker, tmp_path, kwargs):
    """Two 3 x 3 convolutions of 16 channels: TensorFlow sends each kernel's read to the worker
    once, and sends its node a second time as a control edge (an empty tensor) to the
    gradient's ShapeN, which Grappler's constant folding left with only a control input. Both
    sends name the read as their source; the trace counts the kernel's bytes once, on the
    first (with TIO's gates, on the gate's), and names the other as TensorFlow names its empty
    tensor (``SRC/ctrl/_K``)."""
    from tfsched.tracing.trace import Trace

    path = str(tmp_path / "conv.trace.json")
    out = run_client(one_worker.spec, kwargs, steps=1, layers=2, width=16, conv=True, trace=path)
    assert len(out["losses"]) > 3
    trace = Trace.load(path)
    assert trace.steps >= 3
    kernels = {4 * 3 * 3 * 3 * 16, 4 * 3 * 3 * 16 * 16}
    variables = sorted([*kernels, 4 * 16, 4 * 16, 4 * 8 * 8 * 16 * 10, 4 * 10])
    for k in range(trace.steps):
        moved = [t for t in trace.transfers if t.step == k and "/job:ps/" in t.src]
        pulls = _by_source([t for t in moved if "/ctrl/_" not in t.tensor], "ps")
        assert sorted(b for b in pulls.values() if b >= 40) == variables, (k, pulls)
        controls = [t for t in moved if re.search(r"conv.*/ReadVariableOp/ctrl/_\d+:0$", t.tensor)]
        assert controls and all(t.bytes == 0 for t in controls), (k, [t.tensor for t in moved])
    assert not [t for t in trace.meta["unsized"] if "conv" in t], trace.meta["unsized"]


def test_a_traced_batch_normalizations_two_gradients_are_two_tensors_with_their_bytes(one_worker, tmp_path):
    """A batch normalization's gradient op sends two of its outputs to the PS (the scale's and
    the offset's gradients, 16 floats each), which the Python graph hands to the optimizer
    through identities that the instantiated function no longer has. Vanilla's trace names each
    by its own output, with its bytes, and neither as a control edge: before, both were taken
    for the op's first output (the activations' gradient, 8 x 8 x 8 x 16 floats), the second
    as a control edge."""
    from tfsched.tracing.trace import Trace

    path = str(tmp_path / "bn.trace.json")
    out = run_client(
        one_worker.spec, None, steps=1, layers=2, width=16, conv=True, bn=True, tf_keras=True, trace=path
    )
    assert len(out["losses"]) > 3
    trace = Trace.load(path)
    assert trace.steps >= 3
    for k in range(trace.steps):
        pushed = {t.tensor: t.bytes for t in trace.transfers if t.step == k and "/job:worker/" in t.src}
        bn = {t: b for t, b in pushed.items() if "FusedBatchNormGrad" in t}
        assert sorted(t.rpartition(":")[2] for t in bn) == ["1", "1", "2", "2"], (
            k,
            str(sorted(pushed.items())),
        )
        assert set(bn.values()) == {4 * 16}, (k, bn)
        # every trainable variable's gradient, once: 2 kernels and biases, 2 scales and offsets, the output's
        gradients = sorted(b for t, b in pushed.items() if b and "/ctrl/" not in t)
        kernels = [4 * 3 * 3 * 3 * 16, 4 * 3 * 3 * 16 * 16, 4 * 8 * 8 * 16 * 10]
        assert gradients == sorted([*kernels, 4 * 10, *[4 * 16] * 6]), (k, pushed)


def _tao_schedule(spec: dict, tmp_path) -> tuple[str, str, str]:
    """A TIO run that dumps the step function's graph (``dump_graphs``) while ``trace_functions``
    traces its calls, then ``tfsched analyze`` of worker 0's graph by that trace: the TAO
    schedule's path, the trace's and the graph's. Every transfer of the graph is matched (4
    dense layers and the output's kernels and biases, and the optimizer's step counter: 11
    each way)."""
    from click.testing import CliRunner

    from tfsched.cli import main

    graphs, trace = tmp_path / "graphs", str(tmp_path / "tf2.trace.json")
    run_client(spec, {"dump_graphs": str(graphs)}, steps=1, trace=trace)
    [graph] = [p for p in graphs.iterdir() if re.fullmatch(r"__inference_step_\d+\.worker_0\.pb", p.name)]
    sched = str(tmp_path / "tao.json")
    done = CliRunner().invoke(
        main, ["analyze", str(graph), "--trace", trace, "--algorithm", "tao", "-o", sched, "--json"]
    )
    assert done.exit_code == 0, done.output
    traced = json.loads(done.output)["traced"]
    assert traced["transfers_matched"] == traced["transfers_total"] == 22, traced
    return sched, trace, str(graph)


def _schedule_priorities(sched: str) -> dict:
    """(PS task, pull or push, tensor) -> priority, as the schedule orders worker 0's calls."""
    from tfsched.ordering.schedule import load_schedule

    out = {}
    for ch in load_schedule(sched)["channels"]:
        pull = "/job:ps/" in ch["sender"]
        for t in ch["transfers"]:
            if t["kind"] != "control":
                out[
                    (
                        ch["sender"] if pull else ch["receiver"],
                        "pull" if pull else "push",
                        t["key"].split(":", 1)[1],
                    )
                ] = t["priority"]
    assert len(set(out.values())) > 5  # an order, not all tied
    return out


def _gate_priorities(path) -> dict:
    """The same for the gates of a graph ``dump_graphs`` wrote as gated."""
    import tensorflow as tf

    gd = tf.compat.v1.GraphDef()
    gd.ParseFromString(path.read_bytes())
    out = {}
    for n in gd.node:
        if n.op == "TfschedGate":
            pull = n.device.startswith("/job:ps/")
            channel = n.attr["channel"].s.decode().split("->")
            tensor = n.input[0] if ":" in n.input[0] else n.input[0] + ":0"
            out[(channel[0] if pull else channel[1], "pull" if pull else "push", tensor)] = n.attr[
                "priority"
            ].i
    return out


def test_a_tao_schedule_from_a_functions_dumped_graph_and_trace_orders_its_calls(one_worker, tmp_path):
    """TAO for TensorFlow 2, end to end: the schedule from a function's dumped graph and its
    trace (``_tao_schedule``), given to ``enable_functions`` with ``strict``, orders the step's
    gates as written, bit for bit vanilla's training, and a second function it names nothing of
    (``probe``) is ordered by TIO, not failed."""
    from click.testing import CliRunner

    from tfsched.cli import main

    sched, trace, graph = _tao_schedule(one_worker.spec, tmp_path)
    # tfsched viz draws the trace beside the simulator's step of that graph, and gives each
    # transfer the schedule's priority (the gates' and slices' read as the tensors they forward)
    done = CliRunner().invoke(main, ["viz", trace, "--graph", graph, "-o", str(tmp_path / "step.png")])
    assert done.exit_code == 0 and (tmp_path / "step.png").stat().st_size > 0, done.output
    chrome = tmp_path / "step.chrome.json"
    done = CliRunner().invoke(main, ["viz", trace, "--schedule", sched, "-o", str(chrome)])
    assert done.exit_code == 0, done.output
    drawn = [e["args"] for e in json.loads(chrome.read_text())["traceEvents"] if e.get("cat") == "transfer"]
    data = [
        x for x in drawn if "/ctrl/_" not in x["tensor"] and "GroupCrossDeviceControlEdges" not in x["tensor"]
    ]
    assert data and all(x["priority"] is not None for x in data), [x for x in data if x["priority"] is None][
        :3
    ]
    gated = tmp_path / "gated"
    kwargs = {"schedule": sched, "algorithm": "tao", "strict": True, "dump_graphs": str(gated)}
    scheduled = run_client(one_worker.spec, kwargs, steps=8, probe=True)
    vanilla = run_client(one_worker.spec, None, steps=8, probe=True)
    for key in ("losses", "variables", "probe"):
        assert scheduled[key] == vanilla[key], key
    ps = scheduled["stats"]["/job:ps/task:0"]
    assert ps["timeouts"] == 0 and ps["live_steps"] == 0 and ps["released"] > 0, ps

    files = {p.name: p for p in gated.iterdir()}
    [step] = [n for n in files if re.fullmatch(r"__inference_step_\d+\.worker_0\.gated\.pb", n)]
    assert _gate_priorities(files[step]) == _schedule_priorities(sched)
    [other] = [n for n in files if n.startswith("__inference_probe_") and n.endswith(".gated.pb")]
    assert [key for key in _gate_priorities(files[other]) if "probe/" in key[2]]


def test_worker_0s_schedule_orders_every_workers_calls(tmp_path):
    """Two workers: the schedule made from worker 0's graph gives worker 1's gates the same
    priorities, each channel matched by its PS side (worker 1's tensors are named as worker
    0's), and neither worker's gates time out."""
    with LocalCluster(ps=1, workers=2) as c:
        sched, _, _ = _tao_schedule(c.spec, tmp_path)
        gated = tmp_path / "gated"
        kwargs = {"schedule": sched, "algorithm": "tao", "strict": True, "dump_graphs": str(gated)}
        out = run_client(c.spec, kwargs, steps=16)
    want = _schedule_priorities(sched)
    for w in (0, 1):
        [step] = [
            p
            for p in gated.iterdir()
            if re.fullmatch(rf"__inference_step_\d+\.worker_{w}\.gated\.pb", p.name)
        ]
        assert _gate_priorities(step) == want, w
    assert all(s["timeouts"] == 0 and s["live_steps"] == 0 for s in out["stats"].values()), out["stats"]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"schedule": "no-such-schedule.json"}, "no such schedule file"),
        ({"config": object()}, "takes no config"),
        ({"graph": object()}, "takes no graph"),
        ({"algorithm": "tao"}, "needs a schedule file"),
        ({"dump_graphs": 3}, "dump_graphs must be a directory's path"),
        ({"credit": -5}, "credit must be a whole number of parameters"),
        ({"host_credit": True}, "host_credit needs a credit"),
    ],
)
def test_enable_functions_refuses_what_functions_cannot_use(kwargs, words):
    """One TfschedError line, and the eager context's config is left as it was."""
    from tensorflow.python.eager import context

    from tfsched import TfschedError, enable_functions

    before = context.context()._config
    with pytest.raises(TfschedError, match=words):
        enable_functions(**kwargs)
    assert context.context()._config is before
