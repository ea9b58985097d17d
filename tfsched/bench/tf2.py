"""TensorFlow 2's ParameterServerStrategy, vanilla against tfsched (``tfsched bench --api tf2``).

The same cluster (``--ps`` PS and ``--workers`` workers, each task its own host, its link shaped
each way, as the session bench's) serves every mode; the modes alternate in rounds (baseline,
tio, ..., baseline, ...). A round of a mode is one coordinator process, since the pass goes into
a process's eager context (``tfsched.enable_functions``), forked from one that has imported
TensorFlow (``forked_coordinators``, ``bench.zygote.Forks``): it builds the built-in model as a
Keras model (``tfsched.models.keras``) under the strategy, runs a warm-up step per worker, then times
``steps`` steps per worker scheduled with a ``ClusterCoordinator``: asynchronous training, each
worker pulls, computes and pushes at its own pace (``inference``: pulls and the forward pass).
Throughput is the steps over the wall time from the first ``schedule`` to ``join``; "vs
baseline" has a 95% interval from the paired rounds, as the session bench's.

After the timed rounds one more round per mode runs inside a profiling window
(``tfsched.trace_functions``), untimed: each mode's calls' times (p50, p95: a call is one worker's
step), how long a call waited for its last pull, and what a call moved, from its trace. Then one more
coordinator, worker 0 alone, measures what moving a byte and a message cost the machine
(``comm_costs``), which the prediction charges.

Before the rounds, one untimed round of TIO runs worker 0 alone (the other workers idle) with
``enable_functions(dump_graphs=...)`` inside a profiling window (``solo_round``). TIO orders each
function from its own graph; for TAO and layer, ``tfsched analyze`` orders worker 0's step
function, as the pass got it, by that trace (``tao``) or by its layers (``layer``): the schedule
every worker's step then runs with. The same graph and trace give the simulator's prediction of
each mode's calls (``predict_calls``), made after the rounds. ``+pc`` is sized as the
session bench sizes it, for the busiest channel (``enforce.link_sizes``): here the parameters of
the PS that holds the most, the strategy spreading the variables round-robin, whole or (``--ps-placement
min-size``) split by its ``variable_partitioner`` first (``channel_params``).

What the session bench reports beside these and this one does not: the straggler effect, the
synchronized steps' spread and E (asynchronous training has no synchronized step: no worker waits
for another, and TicTac's bounds are of one).
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from types import SimpleNamespace

from tfsched.enforce.build import current_build_id
from tfsched.errors import TfschedError
from tfsched.models.shards import MIN_SHARD_BYTES, min_size_partitioner, shard_sizes

FIRST_ROUND_TIMEOUT_S = 1800.0  # a coordinator round, before any has been timed
STEP_FUNCTION = re.compile(r"__inference_step_\d+\.worker_0\.pb")  # worker 0's step, as dumped


# How ``--api tf2`` spreads the variables over the PS: the strategy's own round-robin of whole
# variables, or every variable first split by TensorFlow 2's ``MinSizePartitioner`` (its shards then
# round-robin): the strategy's ``variable_partitioner``, as TensorFlow's guide sets it.
TF2_PS_PLACEMENTS = ("round-robin", "min-size")


def variable_partitioner(ps_placement: str, ps: int):
    """The strategy's ``variable_partitioner`` for ``ps_placement`` over ``ps`` PS (None: whole
    variables)."""
    if ps_placement not in TF2_PS_PLACEMENTS:
        raise TfschedError(
            f"unknown ps_placement {ps_placement!r} for --api tf2; expected one of {', '.join(TF2_PS_PLACEMENTS)}"
        )
    if ps_placement == "round-robin" or ps < 2:
        return None
    return min_size_partitioner(ps)


def channel_params(
    model: str, ps: int, image_size: int | None = None, ps_placement: str = "round-robin"
) -> int:
    """The parameters of the PS holding the most of ``model``'s variables, spread as
    ``ParameterServerStrategy`` spreads them with ``ps_placement``'s partitioner: each variable,
    or each of its shards, to the next PS round-robin in creation order. Every worker pulls them
    all each step, so it is the busiest channel's share.

    The variables are taken in the order they are made, which the strategy deals them out in, not
    in the model's (``model.variables`` follows its layers, sorted: ResNet-50 makes a block's
    shortcut convolution before the block's first, and lists it after)."""
    from tfsched.graph._tf import import_tensorflow
    from tfsched.models.keras import keras_model

    tf = import_tensorflow()  # without its start-up chatter on the user's stderr
    partitioner = variable_partitioner(ps_placement, ps)
    made_in_order = []

    def record(next_creator, **kwargs):
        made_in_order.append(next_creator(**kwargs))
        return made_in_order[-1]

    with tf.variable_creator_scope(record):
        built, _ = keras_model(model, image_size=image_size)
    holds = {id(v) for v in built.variables}  # not Keras's counters (scalars the model makes last)
    held, made = [0] * ps, 0
    for v in (v for v in made_in_order if id(v) in holds):
        for size in shard_sizes(v.shape, v.dtype, partitioner):
            held[made % ps] += size
            made += 1
    return max(held)


def coordinate(args: dict) -> dict:
    """One coordinator (its own process): warm-up, then ``steps`` timed steps per worker (worker 0
    alone with ``solo``). Its record: the steps, their wall time and the machine's busy CPU
    seconds over them (``cpu_s``, None without /proc/stat), and each task process's
    (``task_cpu_s``, "job:index" -> seconds; empty where they cannot be read)."""
    import tensorflow as tf
    import tf_keras as keras

    import tfsched
    from tfsched.bench.local import free_port
    from tfsched.bench.profile import task_processes, tasks_cpu_s
    from tfsched.bench.run import cpu_seconds, parse_mode
    from tfsched.models.keras import keras_model

    mode = parse_mode(args["mode"], args["bandwidth_bps"], args["channel_params"])
    if mode.algorithm is not None:
        kwargs = {}
        if mode.algorithm != "tio":  # made by solo_round() before the rounds
            kwargs = {"schedule": args["schedules"][mode.algorithm], "algorithm": mode.algorithm}
        if args.get("dump_graphs"):
            kwargs["dump_graphs"] = args["dump_graphs"]
        if mode.credit:
            kwargs.update(partition=mode.partition, credit=mode.credit, host_credit=mode.host_credit)
            kwargs["host_order"] = mode.host_order
            kwargs["credit_return"] = mode.credit_return
            if mode.ack_share is not None:
                kwargs["ack_share"] = mode.ack_share
            if mode.ack_group > 1:
                kwargs["ack_group"] = mode.ack_group
        tfsched.enable_functions(inline_transfers=mode.inline_transfers, **kwargs)
    spec = dict(args["spec"])
    if args.get("solo"):  # worker 0 alone, the other workers idle (left out of the coordinator's cluster)
        spec["worker"] = spec["worker"][:1]
    cluster = dict(spec, chief=[f"{args['driver_host']}:{free_port()}"])
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=variable_partitioner(args["ps_placement"], len(spec["ps"]))
    )
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    train = args["run_mode"] == "train"
    with strategy.scope():
        model, shape = keras_model(args["model"], image_size=args["image_size"])
        optimizer = keras.optimizers.SGD(0.01) if train else None
    if args.get("comm_cost"):
        return comm_cost_round(tf, coordinator, model.variables, args.get("driver_pid") or os.getppid())
    batch = args["batch_size"]

    @tf.function
    def step():
        def replica():
            # made on the worker: no input crosses the links
            x = tf.random.stateless_uniform((batch, *shape), seed=[1, 2])
            if not train:
                return tf.reduce_mean(model(x, training=False))
            y = tf.random.stateless_uniform((batch,), seed=[3, 4], maxval=10, dtype=tf.int32)
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(
                    keras.losses.sparse_categorical_crossentropy(y, model(x, training=True))
                )
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.run(replica)

    workers = len(spec["worker"])

    def run_steps(n: int) -> float:
        """``n`` calls of the step, scheduled at once and joined; their wall time."""
        start = time.perf_counter()
        for _ in range(n):
            coordinator.schedule(step)
        coordinator.join()
        return time.perf_counter() - start

    run_steps(workers)  # a step per worker, which also instantiates the function
    window = args.get("window_s")
    if args.get("trace") and not window:
        # per timed step per worker, twice a warm one's, and 5 s. Until the eighty-fifth session
        # twice the first one's, which also instantiated the function: Par-32's solo round of 2
        # steps on 2 PS then profiled a window of 13 s for 0.04 s of steps
        window = 2 * run_steps(workers) * args["steps"] + 5
    # the bench's task processes: the driver's children (this process's siblings; forked by
    # bench.zygote.Forks, it is the driver's child too)
    procs = task_processes(args.get("driver_pid") or os.getppid())
    cpu = cpu_seconds()  # the machine's, every task's: they all run on it
    tasks_at = tasks_cpu_s(procs)
    start = time.perf_counter()
    if args.get("trace"):  # the same steps inside a profiling window (tfsched.trace_functions)
        with tfsched.trace_functions(resolver, args["trace"], seconds=window, functions=[step]):
            run_steps(workers * args["steps"])
    else:
        run_steps(workers * args["steps"])
    wall = time.perf_counter() - start
    end, tasks_end = cpu_seconds(), tasks_cpu_s(procs)
    busy = round(end[0] - cpu[0], 3) if cpu and end else None
    task_cpu = {t: round(c - tasks_at[t], 3) for t, c in tasks_end.items() if t in tasks_at}
    return {
        "mode": args["mode"],
        "steps": workers * args["steps"],
        "wall_s": wall,
        "cpu_s": busy,
        "task_cpu_s": task_cpu,
    }


def comm_cost_round(tf, coordinator, variables, driver_pid: int) -> dict:
    """What moving a byte and a message costs the machine, as the session bench measures it
    (``bench.run._comm_cpu_costs``), with the coordinator's calls on worker 0 (a cluster of it
    alone, the bench's ``solo``): one function pulls each of the model's ``variables`` on a PS
    (a ``ShardedVariable``'s every shard) whole and keeps one element, the second cuts that
    element on the PS, the third makes as many values on the worker (no message); the extra CPU
    of the first over its extra bytes is the cost of a byte, the second's past the third's over
    its messages the cost of a message (``bench.run.whole_and_cut_costs``). Until the
    seventy-third session the coordinator's own cost of a call (0.6 to 2.5 ms a message, against
    the sessions' 0.1 ms) counted as its messages'. Its record: ``comm_cpu_s_per_byte``,
    ``comm_cpu_s_per_message``, ``comm_cpu_shares`` (the sending PS's and worker 0's shares of
    a byte's CPU, None where their processes cannot be read) and ``comm_cpu_message_shares``
    (theirs of a message's), all 0 or None where nothing is on a PS.

    ``driver_pid``: the bench's process, whose children the task processes are.

    Until the seventy-first session the TensorFlow 2 bench measured none of these, and its
    prediction left the bytes' CPU in the ops' share of the cores (``predict_calls``)."""
    from tfsched.bench.profile import task_processes
    from tfsched.bench.run import pull_ends, whole_and_cut_costs

    parts = [p for v in variables for p in getattr(v, "variables", [v])]  # a ShardedVariable's shards
    parts = [p for p in parts if "/job:ps" in p.device and p.shape.is_fully_defined()]
    nbytes = sum(p.shape.num_elements() * p.dtype.size for p in parts)
    small = sum(p.dtype.size for p in parts)
    record = {
        "mode": "comm-cost",
        "comm_cpu_s_per_byte": 0.0,
        "comm_cpu_s_per_message": 0.0,
        "comm_cpu_shares": None,
        "comm_cpu_message_shares": None,
    }
    if nbytes <= small:
        return record

    @tf.function
    def whole():
        return [tf.reshape(p, [-1])[:1] for p in parts]  # read on the PS, the whole tensor comes

    @tf.function
    def cut():
        kept = []
        for p in parts:
            with tf.device(p.device):
                first = tf.reshape(p, [-1])[:1]  # one element comes
            kept.append(tf.identity(first))
        return kept

    @tf.function
    def none():
        return [tf.identity(tf.zeros([1], p.dtype)) for p in parts]  # as many values, no message

    functions = {"whole": whole, "cut": cut, "none": none}

    def run(name: str) -> None:
        coordinator.schedule(functions[name])
        coordinator.join()

    per_byte, per_message, shares, message_shares = whole_and_cut_costs(
        run, pull_ends(task_processes(driver_pid)), extra_bytes=nbytes - small, messages=len(parts)
    )
    return dict(
        record,
        comm_cpu_s_per_byte=per_byte,
        comm_cpu_s_per_message=per_message,
        comm_cpu_shares=list(shares) if shares else None,
        comm_cpu_message_shares=list(message_shares) if message_shares else None,
    )


def comm_costs(args: dict, timeout_s: float, dead_tasks=None, progress=None) -> dict:
    """``comm_cost_round`` in a coordinator of its own, worker 0 alone: the baseline row's
    ``comm_cpu_s_per_byte``, ``comm_cpu_s_per_message``, ``comm_cpu_shares`` and
    ``comm_cpu_message_shares`` where they were measured (a byte or a message that cost nothing
    measurable leaves its shares out). A round that fails is said to ``progress`` and leaves
    them out: the prediction then keeps the bytes' CPU in the ops' share, as before they were
    measured (the session bench's ``_comm_cpu_costs`` does the same). A round that fails because
    a task of the cluster died (``dead_tasks``) fails the run, naming what it measured and the
    task, as ``_comm_cpu_costs`` does (since the hundred-and-eleventh session; before, the run
    ended as if nothing had died)."""
    from tfsched.bench.local import dead_tasks_named

    try:
        rec = run_round(dict(args, comm_cost=True, solo=True), "baseline", timeout_s, dead_tasks)
    except TfschedError as e:
        if dead_tasks_named(dead_tasks):
            raise TfschedError(f"measuring what moving a byte costs the machine: {e}") from None
        if progress:
            progress(f"no cost of a byte: {e}")
        return {}
    kept = {k: rec[k] for k in ("comm_cpu_s_per_byte", "comm_cpu_s_per_message") if rec.get(k)}
    if rec.get("comm_cpu_shares") and kept.get("comm_cpu_s_per_byte"):
        kept["comm_cpu_shares"] = rec["comm_cpu_shares"]
    if rec.get("comm_cpu_message_shares") and kept.get("comm_cpu_s_per_message"):
        kept["comm_cpu_message_shares"] = rec["comm_cpu_message_shares"]
    return kept


def round_args(cluster, **run) -> dict:
    """What every coordinator of a run on ``cluster`` is given (``coordinate``'s ``args``): the
    cluster's tasks and the driver's host, and ``run``: ``bandwidth_bps``, ``channel_params``,
    ``model``, ``image_size``, ``batch_size``, ``run_mode``, ``ps_placement`` and ``steps``."""
    return {"spec": cluster.client_spec, "driver_host": cluster.driver_host, **run}


def round_timeout(walls: list[float]) -> float:
    """A round's bound once rounds have run (``walls``: their wall times): five times the longest,
    and two minutes; before any, ``FIRST_ROUND_TIMEOUT_S``."""
    return 5 * max(walls) + 120 if walls else FIRST_ROUND_TIMEOUT_S


_FORKS = None  # a bench.zygote.Forks while forked_coordinators() is in force
# what a coordinator imports: the forking process imports it once, before its first fork (the
# strategy's and the coordinator's modules, which TensorFlow loads on their first use)
COORDINATOR_IMPORTS = (
    "tensorflow",
    "tf_keras",
    "tensorflow.python.distribute.parameter_server_strategy_v2",
    "tensorflow.python.distribute.coordinator.cluster_coordinator",
    "tfsched.bench.tf2",
    "tfsched.bench.run",
    "tfsched.bench.profile",
    "tfsched.models.keras",
)


@contextlib.contextmanager
def forked_coordinators():
    """While in force, ``run_round`` forks each coordinator, ``python -m tfsched.bench.tf2``,
    from a zygote that has imported ``COORDINATOR_IMPORTS`` (``bench.zygote.Forks``), where each
    imported them again: 7 to 9 s of CPU a round on two cores. The zygote starts importing at
    once, beside whatever the caller does next (a cluster's start-up), and ends on leaving.
    Where the cluster's tasks are not forked (``TFSCHED_FORKED_TASKS=0``, or no subreaper here)
    neither are the coordinators."""
    from tfsched.bench.zygote import ENV_FLAG, Forks

    global _FORKS
    if _FORKS is not None or os.environ.get(ENV_FLAG, "1") == "0":  # the outer block's serves, or none
        yield
        return
    try:
        _FORKS = Forks(COORDINATOR_IMPORTS)
    except OSError:  # no prctl or subreaper here: processes of their own
        yield
        return
    try:
        yield
    finally:
        forks, _FORKS = _FORKS, None
        forks.close()


def run_round(
    args: dict, mode: str, timeout_s: float, dead_tasks: Callable[[], list[str]] | None = None
) -> dict:
    """One coordinator process of ``mode``; its record. A coordinator that fails or outlives
    ``timeout_s`` is one TfschedError naming the mode, and the tasks that exited if any.
    Forked from ``forked_coordinators()``'s process while it is in force, else a process of its
    own.

    A task of the cluster that has died (``dead_tasks``, asked every ``zygote.STOP_POLL_S``)
    stops the coordinator and fails the round at once, naming it, and so does one that died
    while a round ran to its end. A coordinator waits for a dead worker to come back: until the
    hundred-and-eleventh session a round held the run until its bound (30 minutes for the first,
    ``FIRST_ROUND_TIMEOUT_S``), and a round that ended without a worker that died counted as
    the whole cluster's."""
    from tfsched.bench.local import task_env
    from tfsched.bench.zygote import wait_for

    def failed(why: str) -> TfschedError:
        dead = dead_tasks() if dead_tasks else []
        return TfschedError(f"mode {mode}'s coordinator {why}" + (f" ({'; '.join(dead)})" if dead else ""))

    def stop() -> bool:
        return bool(dead_tasks and dead_tasks())

    if stop():
        raise failed("did not start: a task of the cluster has died")
    argv = ["-m", "tfsched.bench.tf2", json.dumps(dict(args, mode=mode, driver_pid=os.getpid()))]
    try:
        if _FORKS is not None:
            done = _FORKS.run(argv, timeout_s, stop)
        else:
            with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
                proc = subprocess.Popen([sys.executable, *argv], env=task_env(), stdout=out, stderr=err)
                wait_for(proc, timeout_s, stop)
                out.seek(0)
                err.seek(0)
                done = subprocess.CompletedProcess(proc.args, proc.returncode, out.read(), err.read())
    except subprocess.TimeoutExpired:
        raise failed(f"did not finish in {timeout_s:.0f} s") from None
    if stop():
        raise failed("stopped: a task of the cluster died")
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(nothing on stderr)"]
        raise failed(f"failed: {tail[0][:300]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def call_times(path: str) -> dict:
    """What a traced round's calls did: every call's time, their p50 and p95, the median time
    from a call's start to its worker's last pull (every parameter arrived), and the median bytes
    a call pulled and pushed and control edges (empty tensors) it sent."""
    from tfsched.bench.run import percentile, spread
    from tfsched.tracing.replay import scheduled_tensor
    from tfsched.tracing.trace import Trace

    trace = Trace.load(path)
    if not trace.steps:
        raise TfschedError(f"{path}: no call ran whole in the profiling window")
    pulled = [0.0] * trace.steps
    moved = {"pull": [0] * trace.steps, "push": [0] * trace.steps, "control": [0] * trace.steps}
    for t in trace.transfers:
        pull = "/job:ps/" in t.src and "/job:worker/" in t.dst
        if "/ctrl/_" in t.tensor:  # a control edge's empty tensor (tracing.functions)
            moved["control"][t.step] += 1
        elif scheduled_tensor(t.tensor) and t.bytes:  # a parameter or gradient, not the pass's
            moved["pull" if pull else "push"][t.step] += t.bytes
            if pull:
                pulled[t.step] = max(pulled[t.step], t.start_us + t.duration_us)
    times = [t / 1e6 for t in trace.step_times_us]
    return {
        "calls": trace.steps,
        "p50_s": percentile(times, 50),  # by nearest rank, as the session bench's
        "p95_s": percentile(times, 95),
        "p95_over_p50": spread(times),
        "pulls_done_s": statistics.median(pulled) / 1e6,
        "pulled_mb": statistics.median(moved["pull"]) / 1e6,
        "pushed_mb": statistics.median(moved["push"]) / 1e6,
        "control_edges": statistics.median(moved["control"]),
        "call_times_s": [round(t, 6) for t in times],
    }


def step_graph(graphs: str) -> str:
    """Worker 0's step function among the graphs the pass dumped to ``graphs`` (one, or one
    TfschedError line)."""
    dumped = sorted(os.listdir(graphs)) if os.path.isdir(graphs) else []  # none: the pass wrote nothing
    step = [n for n in dumped if STEP_FUNCTION.fullmatch(n)]
    if len(step) != 1:
        raise TfschedError(f"{graphs} holds {len(step)} graphs of worker 0's step function, not one")
    return os.path.join(graphs, step[0])


def solo_round(args: dict, algorithms: list[str], out_dir: str, timeout_s: float, dead_tasks=None) -> dict:
    """One untimed round of TIO with worker 0 alone (the other workers idle), its functions'
    graphs dumped and ``SOLO_STEPS`` of its steps traced: the op times alone that TAO orders by
    and the simulator predicts from (as the session bench's traced steps of worker 0 alone).
    Then ``tfsched analyze`` orders worker 0's step function, as the pass got it, by that trace
    for each of ``algorithms``. Its step function's graph, the trace, and per algorithm its
    schedule file and how many transfers the trace matched."""
    from tfsched.analysis import analyze
    from tfsched.bench.run import SOLO_STEPS  # as many as the session bench traces alone

    graphs, trace = os.path.join(out_dir, "graphs"), os.path.join(out_dir, "solo-round.trace.json")
    run_round(
        dict(args, dump_graphs=graphs, trace=trace, steps=SOLO_STEPS, solo=True), "tio", timeout_s, dead_tasks
    )
    graph = step_graph(graphs)
    schedules = {}
    for algorithm in algorithms:
        result = analyze(graph, algorithm=algorithm, trace=trace)
        path = os.path.join(out_dir, f"{algorithm}.schedule.json")
        result.schedule.save(path)
        m = result.trace_match
        schedules[algorithm] = {
            "file": path,
            "graph": os.path.basename(graph),
            "transfers_matched": m.transfers_matched,
            "transfers_total": m.transfers_total,
        }
    return {"graph": graph, "trace": trace, "schedules": schedules}


def predict_calls(
    rows: list[dict],
    *,
    graph_path: str,
    solo_trace: str,
    baseline_trace: str,
    workers: int,
    steps: int,
    bandwidth_bps: float | None,
    latency_s: float,
    channel_params: int,
    work: str = "simulated",
    host_cores: float = 0.0,
    task_cpu: bool = True,
    race: bool = False,
    comm_cpu: bool = True,
) -> None:
    """The simulator's prediction of each mode's throughput, beside the measured one, for the
    rows of one placement of the variables (``MODE`` or ``MODE@PLACEMENT``; ``predict_placements``)
    (``row["predicted"]``: ``steps_per_s``, its ``error`` against the timed rounds', the mean
    simulated ``call_s``, the ``machine_slots`` and ``host_slots`` it ran with, what they were
    reckoned from, ``slots_from``, and the CPU a call left for the ops, ``ops_cpu_s_per_step``,
    as the session bench keeps them).

    Asynchronous training is laid out as it runs: each of the ``workers`` runs ``steps`` calls of
    worker 0's step function one after another, none waiting for another worker (the simulator's
    steps end at a barrier of their own worker's run only), all sharing the PS's links and, every
    task on this machine, its cores. As the session bench predicts (``bench.predict``): op times
    of worker 0 alone (``solo_round``), the links at their shaped rate with the fit's per-message
    overhead, and the work the machine does at once from the CPU the baseline's rounds spent a
    call less its bytes' (``predict.machine_slots_from_cpu``), the bytes' CPU on the cores while
    they move and each acknowledgement's as one more message, at the costs ``comm_costs``
    measured (``comm_cpu=False``: left in the ops' share, as until the seventy-first session, a
    what-if for ``benchmarks/repredict_tf2.py``). Each mode as its pass enforced it: its order made again from the same
    graph and trace, its partition and credit, the released tensors going in the order released
    (below). Inference calls have no gradients to push and are laid out the same way.

    The throughput, not the traced calls' times, is what the prediction is held to: a traced
    round runs under the profiler, which takes its share of the cores (VGG16 inference with one
    window per task: 5.52 s a call traced, 4.97 s a call from the timed rounds' throughput,
    ``benchmarks/results/tf2-vgg16-inference-s43.json``), and a round's calls end apart, so the mean
    call is not the round's time over its calls.

    Measured (forty-third session, ``benchmarks/results/tf2-vgg16-inference-s43.md`` and
    ``tf2-resnet50-train-s43.md``): VGG16 inference -13% to +1% of the measured steps/s, the modes at
    the cores' limit within 1%; ResNet-50 training -20% to -11%. The simulated workers start
    together and, being alike, stay in step: all pull at once, compute at once and push at once,
    where the real ones drift apart within a few calls and one's pulls share the PS's links with
    another's pushes (ResNet-50's baseline call: 6.05 s simulated, 4.71 s traced). Re-predicted
    with the forty-fourth session's channel (a message's overhead paid before it waits for the
    channel, ``sim.engine``): ResNet-50 training -9% to +4%, one window per task +4% (was -20%),
    VGG16 inference as before (``benchmarks/results/tf2-*-repredicted.md``).

    ``work``: what a call's ops cost in the machine's share of the cores: ``simulated``, the op
    times the simulator runs (each op's fastest traced time), or ``traced``, the trace's mean, as
    the session bench takes it (a what-if for ``benchmarks/repredict_tf2.py``). ``host_cores``:
    the cores of its own each task had (``predict.host_slots``); there the work comes from the
    CPU the baseline's workers' own processes spent a call where its rounds read it
    (``predict.machine_slots_from_task_cpu``, as the session bench's since the sixty-fifth
    session; ``task_cpu=False``: from the machine's, a what-if for
    ``benchmarks/repredict_tf2.py``).

    The pulls a gate releases together go in the order released (``race=False``), where the
    session bench races them (``predict.scheduled_runs``): TensorFlow 2's calls keep it
    (``benchmarks/arrival_order.py``, ``results/arrival-order-tf2-s66.md``; sixty-sixth session): in
    the traced calls of TIO, Kendall's tau between a pull's priority and its arrival was +0.96 to
    +1.00 in all 14 of VGG16 training on half-core hosts and all 14 of ResNet-50 training, and in
    three of six of ResNet-50 inference at batch 16 (+0.28 to +0.50 in the others), where a
    session's traced steps measured +0.28 and -0.02 in inference and +0.65 in training. Over the
    11 modes of those three runs the mean absolute error is 4.6% kept in order against 8.5%
    racing (TIO -4% and -8% against -14% and -20% in training, TAO -2% against -17%; ResNet-50
    inference's TIO +5% against -10%): ``results/tf2-vgg16-train-hosts-s66-repredicted.md``,
    ``tf2-resnet50-train-s66-repredicted.md``, ``tf2-resnet50-inference-s66-arrival-repredicted.md``
    (``race=True``: until then, a what-if for ``benchmarks/repredict_tf2.py``).

    A call keeps the order where the worker has asked for its pulls before the gates let them go,
    as in training, where the PS is busy with the workers' gradients; in inference the idle PS
    may let them go first, and a late request is answered as it comes (sixty-seventh session,
    ``results/arrival-order-tf2.md``: VGG16 inference's TIO kept the order in 8 of the 9 traced
    calls whose requests all came first, and in none of the 5 others). There TIO and TAO are
    predicted +14% and +20%, and -14% and -9% racing (``results/tf2-vgg16-inference-repredicted.md``).

    The bytes' CPU charged (seventy-first session, ``results/tf2-vgg16-inference-s71-repredicted.md``
    and ``tf2-resnet50-train-s71-repredicted.md``): the five modes' mean error 7.4% against 9.0%
    with it in the ops' share on VGG16 inference, 2.4% against 3.4% on ResNet-50 training.
    """
    import copy
    from dataclasses import replace

    from tfsched.analysis import PARAM_BYTES
    from tfsched.bench.predict import (
        check_work,
        host_slots,
        in_slots,
        machine_slots,
        machine_slots_from_cpu,
        machine_slots_from_task_cpu,
        ops_cpu_s,
        scheduled_runs,
    )
    from tfsched.bench.run import parse_mode, split_placed
    from tfsched.graph import load_comm_graph
    from tfsched.oracle.oracle import LinkModel, TimeOracle
    from tfsched.ordering import order
    from tfsched.sim import build_sim_graph, pulls_done, seeded_runs
    from tfsched.tracing.match import oracle_for
    from tfsched.tracing.trace import Trace

    check_work(work)
    graph = load_comm_graph(graph_path)
    alone = Trace.load(solo_trace)
    # the oracle analyze ordered TAO by (solo_round), and the simulator's: at the shaped rate, the
    # machine shared
    ordering = oracle_for(graph, alone, "min", fallback=TimeOracle.from_cost_model(graph, link=LinkModel()))
    oracle = copy.deepcopy(ordering)
    base = next(r for r in rows if split_placed(r["mode"])[0] == "baseline")
    # what moving a byte and a message cost the machine (comm_costs; 0: not measured, as in runs
    # before the seventy-first session, or left out with comm_cpu=False)
    per_byte = base.get("comm_cpu_s_per_byte", 0.0) if comm_cpu else 0.0
    per_message = base.get("comm_cpu_s_per_message", 0.0) if comm_cpu else 0.0
    if per_byte and base.get("comm_cpu_shares"):
        oracle.host_byte_shares = tuple(base["comm_cpu_shares"])
    cpu = [x.get("cpu_s") for x in base["rounds"]]
    per_call = sum(cpu) / base["steps"] if all(c is not None for c in cpu) else 0.0
    cores = os.cpu_count() or 1
    from_tasks = None
    spent = [x.get("task_cpu_s") for x in base["rounds"]]
    if host_cores and task_cpu and spent and all(spent):
        per_task: dict[str, float] = {}
        for x in spent:
            for t, c in x.items():
                per_task[t] = per_task.get(t, 0.0) + c
        calls = base["steps"] / workers  # each worker's calls over the rounds
        from_tasks = machine_slots_from_task_cpu(
            graph,
            oracle,
            {t: c / calls for t, c in per_task.items()},
            comm_cpu_s_per_byte=per_byte,
            shares=oracle.host_byte_shares,
            cores=cores,
        )
    from_cpu = from_tasks or machine_slots_from_cpu(
        alone,
        cpu_s_per_step=per_call * workers,
        comm_cpu_s_per_byte=per_byte,
        workers=workers,
        cores=cores,
        work_s=sum(oracle.compute(n) for n in graph.graph) if work == "simulated" else None,
    )
    oracle.machine_slots = from_cpu or machine_slots(
        alone, Trace.load(baseline_trace), workers, host_cores=host_cores, cores=cores
    )
    slots_from = "the workers' CPU" if from_tasks else "the machine's CPU" if from_cpu else "the op times"
    # the CPU a call left for the ops once the bytes had theirs: at most 0, the bytes took all of
    # it as reckoned (a toy model's, its byte's cost measured beside other load), and the
    # machine's slots came from the op times, as the session bench keeps it
    ops_cpu = ops_cpu_s(
        alone, cpu_s_per_step=per_call * workers, comm_cpu_s_per_byte=per_byte, workers=workers
    )
    oracle.host_slots = host_slots(host_cores, oracle.machine_slots, cores)
    # as the session bench's (bench.predict); an acknowledgement is one more message
    oracle.comm_slot_s_per_byte = in_slots(per_byte, oracle.machine_slots, cores)
    ack_slot_s = in_slots(per_message, oracle.machine_slots, cores)
    if bandwidth_bps:
        oracle.set_links(bandwidth_bps=bandwidth_bps)
    plain = build_sim_graph(graph, oracle, None, workers=workers, steps=steps)
    orders = {}  # algorithm -> its schedule, made once for all its modes
    for r in rows:
        spec = parse_mode(split_placed(r["mode"])[0], bandwidth_bps, channel_params)
        spec = replace(spec, partition=r["knobs"].get("partition", 0), credit=r["knobs"].get("credit", 0))
        sg = plain
        if spec.algorithm is None:
            runs = seeded_runs(plain, "random", latency_s=2 * latency_s, record=True)
        else:
            if spec.algorithm not in orders:
                orders[spec.algorithm] = order(graph, spec.algorithm, ordering)
            schedule = orders[spec.algorithm]
            sg = build_sim_graph(
                graph,
                oracle,
                schedule,
                workers=workers,
                steps=steps,
                partition_bytes=spec.partition * PARAM_BYTES or None,
            )
            runs = scheduled_runs(
                sg, schedule, spec, ack_slot_s=ack_slot_s, latency_s=2 * latency_s, record=True, race=race
            )
        # the coordinator's call and its answer cross the worker's link, as the session driver's
        driver_s = 2 * latency_s
        calls = [t + driver_s for run in runs for ts in run.step_times().values() for t in ts]
        # as the rounds are timed: every worker's calls, from the first call's start to the last's end
        rate = statistics.fmean(workers * steps / (run.makespan + steps * driver_s) for run in runs)
        done = [t for run in runs for t in pulls_done(sg, run)]
        r["predicted"] = {
            "steps_per_s": rate,
            "error": rate / r["throughput_steps_per_s"] - 1,
            "call_s": statistics.fmean(calls),
            # from a call's start to its worker's last pull, the median call's (``call_times``'
            # ``pulls_done_s``, measured)
            "pulls_done_s": statistics.median(done) if done else None,
            "machine_slots": oracle.machine_slots,
            "host_slots": oracle.host_slots,
            "slots_from": slots_from,
            "ops_cpu_s_per_step": ops_cpu,
        }


def _rows(modes, specs, rounds_of: dict[str, list[dict]], traced: dict[str, dict]) -> list[dict]:
    """Each mode's row of the summary: its rounds, throughput, ratio to the baseline (with the
    paired 95% interval), sizes in force and traced calls."""
    from tfsched.bench.results import paired_ratio_ci

    def as_rounds(m: str):
        return SimpleNamespace(rounds=[(x["steps"], x["wall_s"]) for x in rounds_of[m]])

    def rate(xs: list[dict]) -> float:
        return sum(x["steps"] for x in xs) / sum(x["wall_s"] for x in xs)

    base = rate(rounds_of["baseline"])
    rows = []
    for m in modes:
        ci = paired_ratio_ci(as_rounds(m), as_rounds("baseline")) if m != "baseline" else None
        s = specs[m]
        rows.append(
            {
                "mode": m,
                "steps": sum(x["steps"] for x in rounds_of[m]),
                "throughput_steps_per_s": rate(rounds_of[m]),
                "vs_baseline": rate(rounds_of[m]) / base,
                "vs_baseline_ci95": list(ci) if ci else None,
                "per_round_vs_baseline": [
                    (x["steps"] / x["wall_s"]) / (b["steps"] / b["wall_s"])
                    for x, b in zip(rounds_of[m], rounds_of["baseline"], strict=True)
                ],
                "rounds": rounds_of[m],
                "knobs": s.knobs if s.algorithm is not None else {},
                "traced": traced[m],
            }
        )
    return rows


def placement_dir(run_dir: str, placement: str, first: str) -> str:
    """Where a run keeps worker 0's solo round, dumped graphs and schedules for ``placement``:
    the run's directory for its ``first`` placement, ``at-PLACEMENT`` in it for another."""
    return run_dir if placement == first else os.path.join(run_dir, f"at-{placement}")


def predict_placements(
    rows: list[dict], run_dir: str, placements: tuple[str, ...], *, channel_params: dict[str, int], **run
) -> None:
    """``predict_calls`` for each of the run's ``placements``: its modes' rows (``MODE@PLACEMENT``
    but the first's) from its own graph, solo trace and traced baseline, as ``side_by_side`` keeps
    them in ``run_dir`` (``placement_dir``). ``run``: ``predict_calls``' other arguments."""
    from tfsched.bench.run import placed_mode, split_placed

    for p in placements:
        at = None if p == placements[0] else p
        here = placement_dir(run_dir, p, placements[0])
        graphs = os.path.join(here, "graphs")
        predict_calls(
            [r for r in rows if split_placed(r["mode"])[1] == at],
            graph_path=step_graph(graphs),
            solo_trace=os.path.join(here, "solo-round.trace.json"),
            baseline_trace=os.path.join(run_dir, f"{placed_mode('baseline', at)}.trace.json"),
            channel_params=channel_params[p],
            **run,
        )


def side_by_side(
    model: str,
    *,
    workers: int = 2,
    ps: int = 1,
    modes: tuple[str, ...] = ("baseline", "tio"),
    steps: int = 3,
    rounds: int = 2,
    batch_size: int = 4,
    image_size: int | None = None,
    bandwidth_bps: float | None = None,
    latency_s: float = 0.0,
    queue_s: float | None = None,
    relays: bool = False,
    run_mode: str = "train",
    ps_placement: str | tuple[str, ...] = "round-robin",
    traces_dir: str | None = None,
    progress: Callable[[str], None] | None = None,
    done: Callable[[int, int], None] | None = None,
    host_cores: float = 0.0,
) -> dict:
    """Every mode ``rounds`` times, interleaved, on one cluster; then a traced round of each. The
    run's summary (``write`` writes it): its config, and per mode its rounds, throughput, ratio
    to the baseline and what its traced calls did. ``ps_placement`` (``TF2_PS_PLACEMENTS``): whole
    variables round-robin over the PS, or split by ``MinSizePartitioner`` first; several (on two
    PS or more) run every mode on each in the same rounds, the first's modes under their names,
    the others' as ``MODE@PLACEMENT`` (the session bench's naming), each placement's ordered,
    sized and predicted from its own graph and solo round, every mode against the first's
    baseline. ``traces_dir``: where the traces, the dumped graphs and the schedules go once the
    run has succeeded (None: nowhere). ``relays`` and ``host_cores``: the links shaped by relays
    on loopback, not namespaces, and the cores of its own each task has (``bench.run.host_cluster``'s;
    the relays reach the coordinator's spec through ``LocalCluster.client_spec``)."""
    from tfsched.bench.netns import DEFAULT_QUEUE_S
    from tfsched.bench.results import cpu_description
    from tfsched.bench.run import crosses, host_cluster, parse_mode, placed_mode, split_placed

    if run_mode not in ("train", "inference"):
        raise TfschedError(f"unknown mode {run_mode!r}; expected train or inference")
    build = current_build_id()  # what the tasks started from this install load, not the sources at the end
    if "baseline" not in modes:
        raise TfschedError("the modes must include baseline")
    placements = (ps_placement,) if isinstance(ps_placement, str) else tuple(ps_placement)
    if not placements or len(set(placements)) != len(placements):
        raise TfschedError(f"expected distinct placements, got {', '.join(placements) or 'none'}")
    if len(placements) > 1 and ps < 2:
        raise TfschedError("several placements need two PS or more")
    first = placements[0]

    def at(p: str) -> str | None:
        return None if p == first else p

    crossing = [m for m in modes if crosses(m)]
    if crossing:  # a coordinator's calls are asynchronous training: no barrier between steps
        raise TfschedError(
            f"mode {crossing[0]!r} crosses a Session.run's barrier; TensorFlow 2's functions have none to cross"
        )
    algorithms = sorted({parse_mode(m).algorithm for m in modes} - {None, "tio"})
    if progress:
        progress(f"sizing {model}'s channels")
    params = {p: channel_params(model, ps, image_size, p) for p in placements}
    runs = [(placed_mode(m, at(p)), m, p) for p in placements for m in modes]  # (name, mode, placement)
    specs = {name: parse_mode(m, bandwidth_bps, params[p]) for name, m, p in runs}
    parts = len(placements) + rounds * len(runs) + len(runs) + 2
    finished = 0

    def tick(what: str | None = None) -> None:
        nonlocal finished
        if what is None:
            finished += 1
        elif progress:
            progress(what)
        if done:
            done(finished, parts)

    cluster = host_cluster(
        ps=ps,
        workers=workers,
        bandwidth_bps=bandwidth_bps,
        latency_s=latency_s,
        queue_s=DEFAULT_QUEUE_S if queue_s is None else queue_s,
        relays=relays,
        progress=progress,
        host_cores=host_cores,
    )
    # the run's traces, graphs and schedules, copied to traces_dir once it has succeeded: a run that
    # fails leaves nothing there
    made = tempfile.TemporaryDirectory(prefix="tfsched-bench-tf2-")
    out_dir = made.name

    def kept(path: str) -> str | None:
        """Where ``path`` of the run's directory is once the run is over (None: not kept)."""
        return os.path.join(traces_dir, os.path.relpath(path, out_dir)) if traces_dir else None

    rounds_of: dict[str, list[dict]] = {name: [] for name, _, _ in runs}
    traced: dict[str, dict] = {}
    made_schedules: dict[str, dict] = {}
    try:
        with forked_coordinators(), cluster as c:
            args = {
                p: round_args(
                    c,
                    bandwidth_bps=bandwidth_bps,
                    channel_params=params[p],
                    model=model,
                    image_size=image_size,
                    batch_size=batch_size,
                    run_mode=run_mode,
                    ps_placement=p,
                    steps=steps,
                )
                for p in placements
            }
            timeout = FIRST_ROUND_TIMEOUT_S
            ordered = f" and ordering it ({', '.join(algorithms)})" if algorithms else ""
            for p in placements:
                where = f", variables placed {p}" if len(placements) > 1 else ""
                tick(f"tracing worker 0's step function alone{ordered}{where}")
                here = placement_dir(out_dir, p, first)
                os.makedirs(here, exist_ok=True)
                made_schedules[p] = solo_round(args[p], algorithms, here, timeout, c.dead_tasks)["schedules"]
                args[p]["schedules"] = {a: s["file"] for a, s in made_schedules[p].items()}
                tick()
            for r in range(rounds):
                for name, m, p in runs:
                    tick(f"round {r + 1}/{rounds}: {name}")
                    rec = run_round(args[p], m, timeout, c.dead_tasks)
                    rounds_of[name].append(
                        {k: rec.get(k) for k in ("steps", "wall_s", "cpu_s", "task_cpu_s")}
                    )
                    timeout = round_timeout([x["wall_s"] for rs in rounds_of.values() for x in rs])
                    tick()
            for name, m, p in runs:  # untimed: the window's end is waited for
                tick(f"tracing a round of {name}")
                path = os.path.join(out_dir, f"{name}.trace.json")
                window = 1.5 * statistics.median(x["wall_s"] for x in rounds_of[name]) + 5
                run_round(dict(args[p], trace=path, window_s=window), m, timeout + window, c.dead_tasks)
                traced[name] = dict(call_times(path), trace=kept(path))
                tick()
            tick("measuring what moving a byte costs the machine")
            costs = comm_costs(args[first], timeout, c.dead_tasks, progress)
            tick()
        rows = _rows([name for name, _, _ in runs], specs, rounds_of, traced)
        for r in rows:  # the machine's, whatever PS holds a variable: every placement's baseline
            if split_placed(r["mode"])[0] == "baseline":
                r.update(costs)
        tick("simulating every mode's calls")
        predict_placements(
            rows,
            out_dir,
            placements,
            channel_params=params,
            workers=workers,
            steps=steps,
            bandwidth_bps=bandwidth_bps,
            latency_s=latency_s,
            host_cores=host_cores,
        )
        tick()
        if traces_dir:
            try:
                shutil.copytree(out_dir, traces_dir, dirs_exist_ok=True)
            except OSError as e:
                raise TfschedError(f"{traces_dir}: cannot write the run's traces ({e})") from None
    finally:
        made.cleanup()

    def schedules(p: str) -> dict:
        return {a: dict(s, file=kept(s["file"])) for a, s in made_schedules[p].items()}

    config = {
        "api": "tf2",
        "model": model,
        "mode": run_mode,
        "workers": workers,
        "ps": ps,
        # one placement as before; several: the first's modes under their names, MODE@P the others'
        "ps_placement": first if len(placements) == 1 else list(placements),
        "batch_size": batch_size,
        "image_size": image_size,
        "steps": steps,
        "rounds": rounds,
        "bandwidth": f"{bandwidth_bps / 1e9:g} Gbit/s" if bandwidth_bps else "loopback",
        "latency": f"{latency_s * 1e3:g} ms" if latency_s else None,
        "queue": None if queue_s is None or queue_s == DEFAULT_QUEUE_S else f"{queue_s * 1e3:g} ms",
        **({"host_cores": host_cores} if host_cores else {}),
        **({"links": "relays"} if relays and bandwidth_bps else {}),
        # the first placement's, as a run of one; every placement's in placements
        "channel_params": params[first],
        "schedules": schedules(first),
        **(
            {"placements": {p: {"channel_params": params[p], "schedules": schedules(p)} for p in placements}}
            if len(placements) > 1
            else {}
        ),
    }
    return {
        "benchmark": "tfsched bench --api tf2",
        "config": config,
        "machine": platform.platform(),
        "cpu": cpu_description(),
        "tfsched_build": build,
        "modes": rows,
    }


def _seconds(s: float | None) -> str:
    """Seconds to three places, or a dash where there is none.

    >>> _seconds(1.23456), _seconds(None)
    ('1.235', '-')
    """
    return "-" if s is None else f"{s:.3f}"


def markdown(summary: dict) -> str:
    """The run as a Markdown table: each mode's throughput against the baseline's, per round,
    and its traced calls."""
    from tfsched.bench.results import link_text, ratio_text, slots_lines, tuned_lines
    from tfsched.bench.run import split_placed

    c = summary["config"]
    link = link_text(c)
    what = "asynchronous training" if c["mode"] == "train" else "inference"
    spread = ""
    if c["ps"] > 1:  # runs before the option have no ps_placement: they were round-robin
        told = {
            "round-robin": "whole variables round-robin",
            "min-size": f"each variable split by MinSizePartitioner, a shard for each "
            f"{MIN_SHARD_BYTES // 1024} KiB begun and at most one per PS, the shards round-robin",
        }
        placed = c.get("ps_placement", "round-robin")
        if isinstance(placed, str):
            spread = f" ({told[placed]})"
        else:
            spread = f" ({told[placed[0]]}; MODE@P: " + "; ".join(f"{p}, {told[p]}" for p in placed[1:]) + ")"
    lines = [
        f"**{c['model']}** (TensorFlow 2 ParameterServerStrategy, {what}, batch {c['batch_size']}), "
        f"{c['ps']} PS{spread} x {c['workers']} workers, {link}, {c['rounds']} interleaved rounds of {c['steps']} steps "
        "per worker; vs baseline: over all rounds (95% interval of the paired per-round ratios)",
        "",
        f"Processor: {summary['cpu']}.",
        *(["", f"tfsched build: {summary['tfsched_build']}."] if summary.get("tfsched_build") else []),
        "",
        "| mode | steps/s | vs baseline | per round | p50 call (s) | p95 call (s) | p95/p50 "
        "| last pull, median (s) | MB pulled, pushed a call | control edges a call "
        "| simulated steps/s | sim. error | sim. last pull (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["modes"]:
        t = r["traced"]
        per = ", ".join(f"{x:.2f}" for x in r["per_round_vs_baseline"])
        lines.append(
            f"| {r['mode']} | {r['throughput_steps_per_s']:.3f} | {ratio_text(r)} | {per} | {t['p50_s']:.3f} "
            f"| {t['p95_s']:.3f} | {t['p95_over_p50']:.3f} | {t['pulls_done_s']:.3f} "
            f"| {t['pulled_mb']:.2f}, {t['pushed_mb']:.2f} | {t['control_edges']:g} "
            f"| {r['predicted']['steps_per_s']:.3f} | {r['predicted']['error']:+.0%} "
            f"| {_seconds(r['predicted'].get('pulls_done_s'))} |"
        )
    lines += [
        "",
        "Call times from one more round of each mode, traced (a call is one worker's step; every call "
        "that ran whole in the profiling window). The coordinator runs the calls asynchronously: no "
        "synchronized step, so no straggler effect and no E. Simulated: every worker running "
        f"{c['steps']} calls one after another, none waiting for another, from the op times of worker 0 "
        "traced alone before the rounds; its error is against the timed rounds' steps/s, and its last "
        "pull (the median call's, from the call's start) is beside the measured one.",
    ]
    placements = c.get("placements") or {None: c}  # a run of one placement: the config's own
    first = next(iter(placements))
    for p, at in placements.items():
        where = f" (variables placed {p})" if p is not None else ""
        schedules = at.get("schedules") or {}
        if schedules:
            s = next(iter(schedules.values()))  # one graph and trace for all of them
            lines += [
                "",
                f"{', '.join(schedules)}{where}: worker 0's step function ({s['graph']}) ordered by its "
                f"steps traced alone (a round of tio), {s['transfers_matched']} of its {s['transfers_total']} transfers traced.",
            ]
        at_p = None if p == first else p
        knobs = [
            r["knobs"] for r in summary["modes"] if "+pc" in r["mode"] and split_placed(r["mode"])[1] == at_p
        ]
        if knobs:
            k = knobs[0]
            lines += [
                "",
                f"`+pc`{where or ' here'}: partition {k['partition']:,}, credit {k['credit']:,} parameters.",
            ]
    # what the simulated machine's share of the cores was reckoned from, as the session bench says
    slots = slots_lines({"modes": [r["predicted"] for r in summary["modes"]]})
    return "\n".join(lines + slots + comm_cost_lines(summary) + tuned_lines(c)) + "\n"


def comm_cost_lines(summary: dict) -> list[str]:
    """What the run measured moving a byte and a message to cost the machine (``comm_costs``),
    which the simulator charges; nothing for a run that measured none.

    >>> base = {"mode": "baseline", "comm_cpu_s_per_byte": 1.1e-9, "comm_cpu_s_per_message": 2.5e-4,
    ...         "comm_cpu_shares": [0.3, 0.55], "comm_cpu_message_shares": [0.6, 0.4]}
    >>> print(comm_cost_lines({"modes": [base]})[1])
    Moving a byte cost the machine 1.10 ns of CPU and a message 0.250 ms (worker 0's pulls alone, each variable whole against one element of it; the PS spent 30% of a byte's CPU, worker 0 55%, the rest in no task's process; of a message's, the PS 60%, worker 0 40%). The simulator charges both.
    >>> comm_cost_lines({"modes": [{"mode": "baseline"}]})
    []
    """
    base = next((r for r in summary["modes"] if r.get("comm_cpu_s_per_message")), None)
    if base is None:
        return []
    text = (
        f"Moving a byte cost the machine {base.get('comm_cpu_s_per_byte', 0.0) * 1e9:.2f} ns of CPU and a message "
        f"{base['comm_cpu_s_per_message'] * 1e3:.3f} ms (worker 0's pulls alone, each variable whole against one "
        "element of it"
    )
    shares = base.get("comm_cpu_shares")
    if shares:
        text += (
            f"; the PS spent {shares[0]:.0%} of a byte's CPU, worker 0 {shares[1]:.0%}, "
            "the rest in no task's process"
        )
    parts = base.get("comm_cpu_message_shares")
    if parts:
        text += f"; of a message's, the PS {parts[0]:.0%}, worker 0 {parts[1]:.0%}"
    return ["", text + "). The simulator charges both."]


def plot(summary: dict, png_path: str) -> None:
    """Throughput per mode (bars, against baseline) and the traced calls' time CDF of every mode."""
    from tfsched.bench.results import plot_modes

    c = summary["config"]
    rows = summary["modes"]
    plot_modes(
        {r["mode"]: r["throughput_steps_per_s"] for r in rows},
        {r["mode"]: r["traced"]["call_times_s"] for r in rows},
        ("call time (s), traced round", "fraction of calls", "call-time CDF"),
        f"{c['model']} ({c['mode']}, TensorFlow 2), {c['ps']} PS x {c['workers']} workers, {c['bandwidth']}",
        png_path,
    )


def write(summary: dict, json_path: str) -> str:
    """``<name>.json``, ``<name>.md`` and ``<name>.png``; returns the Markdown path."""
    from tfsched.io import write_atomic

    stem = json_path[: -len(".json")] if json_path.endswith(".json") else json_path
    write_atomic(json_path, lambda f: json.dump(summary, f, indent=1))
    write_atomic(stem + ".md", lambda f: f.write(markdown(summary)))
    plot(summary, stem + ".png")
    return stem + ".md"


if __name__ == "__main__":  # a coordinator: python -m tfsched.bench.tf2 ARGS_JSON
    print(json.dumps(coordinate(json.loads(sys.argv[1]))), flush=True)
