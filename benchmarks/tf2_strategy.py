"""TensorFlow 2's ParameterServerStrategy, vanilla against tfsched, on the emulated cluster.

The same cluster (1 PS and ``--workers`` workers, each task in its own network namespace, its
link shaped to ``--bandwidth`` each way, as ``tfsched bench``) serves every mode; the modes
alternate in rounds (baseline, tio, ..., baseline, ...). A round of a mode is one coordinator
process (the pass goes into a process's eager context, ``tfsched.enable_functions``): it builds
the model under the strategy, runs a warm-up step per worker, then times ``--steps`` steps per
worker scheduled with a ``ClusterCoordinator`` (asynchronous training: each worker pulls, computes
and pushes at its own pace). Throughput is the steps over the wall time from the first
``schedule`` to ``join``.

    python benchmarks/tf2_strategy.py --model vgg16 --workers 4 --bandwidth 1Gbit --batch-size 103 \\
        --steps 4 --rounds 3 --modes baseline,tio,tio+pc,tio+pc+host --name tf2-vgg16-train
    python benchmarks/tf2_strategy.py --loopback --model small --workers 2 --steps 3 --rounds 2

With ``--traces DIR``, one more round per mode runs inside a profiling window
(``tfsched.trace_functions``), untimed: its trace goes to ``DIR/MODE.trace.json`` (``tfsched viz``
draws it) and the Markdown gets each mode's call times (p50, p95) and how long a call waited for
its last pull.

Modes are ``tfsched bench``'s: baseline, tio, tao, layer, and ``+pc``, ``+pN``, ``+cN``,
``+host``, ``+aN``, ``+sent``. TIO orders each function from its own graph; for TAO and layer,
one untimed round of TIO runs first with ``enable_functions(dump_graphs=...)`` inside a profiling
window, and ``tfsched analyze`` orders worker 0's step function, as the pass got it, by that
trace (``--algorithm tao``) or by its layers (``layer``): the schedule every worker's step then
runs with (``enable_functions(schedule=..., algorithm=...)``). Writes
``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from types import SimpleNamespace

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, write  # noqa: E402

MODELS = ("vgg16", "resnet50", "small")


def build_model(keras, name: str, image: int):
    """The Keras model and its input shape (per example)."""
    if name == "small":
        layers = [keras.layers.Dense(256, activation="tanh") for _ in range(4)]
        model = keras.Sequential([*layers, keras.layers.Dense(10)])
        model.build((None, 256))
        return model, (256,)
    ctor = {"vgg16": keras.applications.VGG16, "resnet50": keras.applications.ResNet50}[name]
    shape = (image, image, 3)
    return ctor(weights=None, input_shape=shape, classes=10), shape


def coordinate(args: dict) -> dict:
    """One coordinator: warm-up, then ``steps`` timed steps per worker; its record."""
    import tensorflow as tf
    import tf_keras as keras

    import tfsched
    from tfsched.bench.local import free_port
    from tfsched.bench.run import parse_mode

    spec = parse_mode(args["mode"], args["bandwidth_bps"])
    if spec.algorithm is not None:
        kwargs = {}
        if spec.algorithm != "tio":  # made by schedule() before the rounds
            kwargs = {"schedule": args["schedules"][spec.algorithm], "algorithm": spec.algorithm}
        if args.get("dump_graphs"):
            kwargs["dump_graphs"] = args["dump_graphs"]
        if spec.credit:
            kwargs.update(partition=spec.partition, credit=spec.credit, host_credit=spec.host_credit)
            kwargs["credit_return"] = spec.credit_return
            if spec.ack_share is not None:
                kwargs["ack_share"] = spec.ack_share
        tfsched.enable_functions(**kwargs)
    cluster = dict(args["spec"], chief=[f"{args['driver_host']}:{free_port()}"])
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model, shape = build_model(keras, args["model"], args["image"])
        optimizer = keras.optimizers.SGD(0.01)
    batch = args["batch_size"]

    @tf.function
    def step():
        def replica():
            # made on the worker: no input crosses the links
            x = tf.random.stateless_uniform((batch, *shape), seed=[1, 2])
            y = tf.random.stateless_uniform((batch,), seed=[3, 4], maxval=10, dtype=tf.int32)
            with tf.GradientTape() as tape:
                logits = model(x, training=True)
                loss = tf.reduce_mean(
                    keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                )
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return strategy.run(replica)

    workers = len(args["spec"]["worker"])
    start = time.perf_counter()
    for _ in range(workers):
        coordinator.schedule(step)
    coordinator.join()
    # unless given: per timed step per worker, twice the warm-up (a step that also instantiated
    # the function), and 5 s
    window = args.get("window_s") or 2 * (time.perf_counter() - start) * args["steps"] + 5
    start = time.perf_counter()
    if args.get("trace"):  # the same steps inside a profiling window (tfsched.trace_functions)
        with tfsched.trace_functions(resolver, args["trace"], seconds=window, functions=[step]):
            for _ in range(workers * args["steps"]):
                coordinator.schedule(step)
            coordinator.join()
    else:
        for _ in range(workers * args["steps"]):
            coordinator.schedule(step)
        coordinator.join()
    wall = time.perf_counter() - start
    return {"mode": args["mode"], "steps": workers * args["steps"], "wall_s": wall}


def call_times(path: str) -> dict:
    """What a traced round's calls did (``--traces``): p50 and p95 of the calls' times, the
    median time from a call's start to its worker's last pull (every parameter arrived), and the
    median bytes a call pulled and pushed and control edges (empty tensors) it sent."""
    from tfsched.bench.run import percentile
    from tfsched.tracing.replay import scheduled_tensor
    from tfsched.tracing.trace import Trace

    trace = Trace.load(path)
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
    return {
        "calls": trace.steps,
        "p50_s": percentile(trace.step_times_us, 50) / 1e6,  # as tfsched bench's, by nearest rank
        "p95_s": percentile(trace.step_times_us, 95) / 1e6,
        "pulls_done_s": statistics.median(pulled) / 1e6,
        "pulled_mb": statistics.median(moved["pull"]) / 1e6,
        "pushed_mb": statistics.median(moved["push"]) / 1e6,
        "control_edges": statistics.median(moved["control"]),
    }


def schedule(args: dict, algorithms: list[str], out_dir: str) -> dict[str, str]:
    """For TAO and layer: one untimed round of TIO that dumps the functions' graphs and traces a
    step per worker, then ``tfsched analyze`` of worker 0's step function by that trace; the
    schedule file of each algorithm."""
    import re

    from tfsched.analysis import analyze

    graphs, trace = os.path.join(out_dir, "graphs"), os.path.join(out_dir, "schedule-round.trace.json")
    run_round(dict(args, dump_graphs=graphs, trace=trace, steps=1), "tio")
    step = [n for n in os.listdir(graphs) if re.fullmatch(r"__inference_step_\d+\.worker_0\.pb", n)]
    if len(step) != 1:
        raise SystemExit(
            f"tf2_strategy: {graphs} holds {len(step)} graphs of worker 0's step function, not one"
        )
    out = {}
    for algorithm in algorithms:
        result = analyze(os.path.join(graphs, step[0]), algorithm=algorithm, trace=trace)
        out[algorithm] = os.path.join(out_dir, f"{algorithm}.schedule.json")
        result.schedule.save(out[algorithm])
        m = result.trace_match
        print(
            f"{algorithm}: {out[algorithm]} from {step[0]} "
            f"({m.transfers_matched}/{m.transfers_total} transfers traced)",
            flush=True,
        )
    return out


def run_round(args: dict, mode: str) -> dict:
    from tfsched.bench.local import task_env

    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--coordinator", json.dumps(dict(args, mode=mode))],
        env=task_env(),
        capture_output=True,
        text=True,
        timeout=args["timeout_s"],
    )
    if done.returncode != 0:
        tail = done.stderr.strip().splitlines()[-1:] or ["(nothing on stderr)"]
        raise SystemExit(f"tf2_strategy: mode {mode}'s coordinator failed: {tail[0][:300]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--coordinator", help=argparse.SUPPRESS)
    ap.add_argument("--model", choices=MODELS, default="vgg16")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--bandwidth", default="1Gbit")
    ap.add_argument("--batch-size", type=int, default=103)
    ap.add_argument("--image-size", type=int, default=32)
    ap.add_argument("--steps", type=int, default=4, help="timed steps per worker per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--modes", default="baseline,tio,tio+pc,tio+pc+host")
    ap.add_argument("--loopback", action="store_true", help="every task on loopback, unshaped")
    ap.add_argument("--name", default=None)
    ap.add_argument(
        "--traces",
        metavar="DIR",
        help="after the timed rounds, one more round per mode inside a profiling window "
        "(tfsched.trace_functions): DIR/MODE.trace.json, and each mode's call times from it",
    )
    a = ap.parse_args(argv)
    if a.coordinator:
        print(json.dumps(coordinate(json.loads(a.coordinator))), flush=True)
        return 0

    from tfsched.bench.local import LocalCluster
    from tfsched.bench.netns import EmulatedCluster
    from tfsched.bench.results import cpu_description, paired_ratio_ci
    from tfsched.bench.run import parse_mode, parse_modes
    from tfsched.units import parse_bandwidth

    modes = parse_modes(a.modes)
    algorithms = sorted({parse_mode(m).algorithm for m in modes} - {None, "tio"})
    if "fifo" in algorithms:
        raise SystemExit("tf2_strategy: fifo is the analysis's reference order, not a mode to run")
    bandwidth_bps = None if a.loopback else parse_bandwidth(a.bandwidth)
    cluster = (
        LocalCluster(ps=1, workers=a.workers)
        if a.loopback
        else EmulatedCluster(ps=1, workers=a.workers, bandwidth_bps=bandwidth_bps)
    )
    name = a.name or f"tf2-{a.model}-{'loopback' if a.loopback else a.bandwidth}"
    rounds: dict[str, list[dict]] = {m: [] for m in modes}
    with cluster as c:
        args = {
            "spec": c.spec,
            "driver_host": getattr(c, "driver_host", "127.0.0.1"),
            "bandwidth_bps": bandwidth_bps,
            "model": a.model,
            "image": a.image_size,
            "batch_size": a.batch_size,
            "steps": a.steps,
            "timeout_s": 1800,
        }
        if algorithms:
            made = a.traces or tempfile.mkdtemp(prefix=f"tfsched-{name}-")  # the graphs, trace, schedules
            os.makedirs(made, exist_ok=True)
            args["schedules"] = schedule(args, algorithms, made)
        for r in range(a.rounds):
            for m in modes:
                rec = run_round(args, m)
                rounds[m].append(rec)
                print(f"round {r + 1}/{a.rounds} {m}: {rec['steps'] / rec['wall_s']:.3f} steps/s", flush=True)
        traced: dict[str, dict] = {}
        if a.traces:
            os.makedirs(a.traces, exist_ok=True)
            for m in modes:  # not timed: the window's end is waited for
                path = os.path.join(a.traces, f"{m}.trace.json")
                window = 1.5 * statistics.median(x["wall_s"] for x in rounds[m]) + 5
                run_round(dict(args, trace=path, window_s=window), m)
                traced[m] = dict(call_times(path), trace=path)
                print(f"traced {m}: {traced[m]['calls']} calls, p50 {traced[m]['p50_s']:.3f} s", flush=True)

    def as_result(m: str):
        return SimpleNamespace(rounds=[(x["steps"], x["wall_s"]) for x in rounds[m]])

    base = sum(x["steps"] for x in rounds["baseline"]) / sum(x["wall_s"] for x in rounds["baseline"])
    rows = []
    for m in modes:
        thr = sum(x["steps"] for x in rounds[m]) / sum(x["wall_s"] for x in rounds[m])
        per_round = [
            (x["steps"] / x["wall_s"]) / (b["steps"] / b["wall_s"])
            for x, b in zip(rounds[m], rounds["baseline"], strict=True)
        ]
        ci = paired_ratio_ci(as_result(m), as_result("baseline"))
        rows.append(
            {
                "mode": m,
                "steps_per_s": thr,
                "vs_baseline": thr / base,
                "vs_baseline_ci95": list(ci) if ci else None,
                "per_round_vs_baseline": per_round,
                "median_round_s": statistics.median(x["wall_s"] for x in rounds[m]),
                "rounds": rounds[m],
                "traced": traced.get(m),
            }
        )
    config = {
        "model": a.model,
        "workers": a.workers,
        "ps": 1,
        "bandwidth": "loopback" if a.loopback else a.bandwidth,
        "batch_size": a.batch_size,
        "image_size": a.image_size,
        "steps_per_worker": a.steps,
        "rounds": a.rounds,
        "modes": list(modes),
    }
    result = {"config": config, "machine": dict(machine(), processor=cpu_description()), "modes": rows}
    command = "python benchmarks/tf2_strategy.py " + " ".join(argv if argv is not None else sys.argv[1:])
    md = [
        f"**{a.model}** (TensorFlow 2 ParameterServerStrategy, asynchronous training, batch {a.batch_size}), "
        f"1 PS x {a.workers} workers, {config['bandwidth']}, {a.rounds} interleaved rounds of {a.steps} "
        "steps per worker; vs baseline: over all rounds (95% interval of the paired per-round ratios)",
        "",
        f"Processor: {result['machine']['processor']}.",
        "",
        f"```bash\n{command}\n```",
        "",
        "| mode | steps/s | vs baseline | per round |",
        "|---|---|---|---|",
    ]
    for row in rows:
        ci = row["vs_baseline_ci95"]
        interval = f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else ""
        per = ", ".join(f"{x:.2f}" for x in row["per_round_vs_baseline"])
        md.append(
            f"| {row['mode']} | {row['steps_per_s']:.3f} | {row['vs_baseline']:.3f}x{interval} | {per} |"
        )
    if traced:
        md += [
            "",
            "From one more round per mode, traced (`--traces`; every call that ran whole in the "
            "profiling window; a call is one worker's step, and with asynchronous training the "
            "workers' calls overlap):",
            "",
            "| mode | calls traced | p50 call (s) | p95 call (s) | p95/p50 | last pull, median (s) "
            "| MB pulled, pushed a call | control edges a call |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for m in modes:
            t = traced[m]
            md.append(
                f"| {m} | {t['calls']} | {t['p50_s']:.3f} | {t['p95_s']:.3f} | {t['p95_s'] / t['p50_s']:.3f} "
                f"| {t['pulls_done_s']:.3f} | {t['pulled_mb']:.2f}, {t['pushed_mb']:.2f} | {t['control_edges']:g} |"
            )
    write(name, result, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
