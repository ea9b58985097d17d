"""The bench's two ways of shaping the hosts' links, side by side on the same work.

``netns``: a network namespace per task, links shaped with ``tc`` (root needed; the bench's
rows). ``relays``: every task on loopback, its links shaped by relays in the driver process
(``tfsched.bench.relay``; what ``tfsched bench --shaped-loopback`` and ``tfsched demo`` use
without root). The same side-by-side run (vanilla TensorFlow and tfsched's modes interleaved in
rounds) goes once on each, alternating, so that drift hits both. The question: does a run on
the relays measure what the namespaces measure (the modes' ratios to the baseline, the step
times, the simulator's error), and what do the relays cost the driver in CPU?

    python benchmarks/relay_vs_netns.py                       # VGG16 as the demo runs it
    python benchmarks/relay_vs_netns.py --model mobilenet --workers 4 --batch-size 99
    python benchmarks/relay_vs_netns.py --latency 2ms --name latency2ms   # netem (where the kernel has it) against the relays' delay
    python benchmarks/relay_vs_netns.py --api tf2 --mode inference --workers 4 --batch-size 397 --name tf2-vgg16-inference

With ``--api tf2`` each run is ``tfsched bench --api tf2``'s (TensorFlow 2's coordinator, whose
tasks reach each other through one relay per task, ``RelayedSpec.shared_spec``): a step's time
is then one over the rounds' steps a second, and the prediction is the TensorFlow 2 bench's.

Writes ``benchmarks/results/relay_vs_netns[-NAME].{json,md}``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

from tfsched.bench import tf2  # noqa: E402
from tfsched.bench.netns import available, latency_unavailable  # noqa: E402
from tfsched.bench.results import cpu_description, ratio_text, summarize  # noqa: E402
from tfsched.bench.run import cluster_side_by_side, parse_modes  # noqa: E402
from tfsched.errors import TfschedError  # noqa: E402
from tfsched.models.build import MODELS  # noqa: E402
from tfsched.units import parse_bandwidth, parse_duration  # noqa: E402

LINKS = ("netns", "relays")


def one_run(args, links: str) -> dict:
    """One side-by-side run on ``links``: its summary (tfsched bench's JSON) and the driver's
    CPU seconds per step (the relays run in the driver; a synchronized step in a session's run,
    a worker's call in TensorFlow 2's)."""
    cpu0, wall0 = time.process_time(), time.monotonic()
    run = dict(
        workers=args.workers,
        ps=1,
        modes=args.modes,
        steps=args.steps,
        rounds=args.rounds,
        batch_size=args.batch_size,
        bandwidth_bps=args.bandwidth,
        latency_s=args.latency,
        relays=links == "relays",
        progress=lambda s: print(f"  [{links}] {s}", flush=True),
    )
    if args.api == "tf2":
        summary = tf2.side_by_side(args.model, run_mode=args.mode, **run)
        steps = sum(r["steps"] for r in summary["modes"])
    else:
        results = cluster_side_by_side(args.model, mode=args.mode, **run)
        steps = sum(len(r.iterations) for r in results.values())
        summary = summarize(results, {"model": args.model, "links": links})
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    return {
        "links": links,
        "wall_s": wall,
        "driver_cpu_s": cpu,
        "driver_cpu_s_per_step": cpu / steps if steps else 0.0,
        "modes": summary["modes"],
    }


def step_s(r: dict) -> float:
    """A row's step time: the slowest worker's (a session's run), or one over the steps a second
    of the coordinator's rounds (TensorFlow 2's)."""
    return r["iteration_mean_s"] if "iteration_mean_s" in r else 1 / r["throughput_steps_per_s"]


def predicted(r: dict) -> tuple[float, float]:
    """A row's simulated step time and its error against the measured, as ``step_s``."""
    if "predicted" in r:  # TensorFlow 2's: steps a second
        return 1 / r["predicted"]["steps_per_s"], -r["predicted"]["error"] / (1 + r["predicted"]["error"])
    return r.get("predicted_s", 0.0), r.get("prediction_error", 0.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--api", default="session", choices=("session", "tf2"))
    ap.add_argument("--mode", default="train", choices=("train", "inference"))
    ap.add_argument("--model", default="vgg16", choices=sorted(MODELS))
    ap.add_argument("--workers", type=positive(int), default=2)
    ap.add_argument("--bandwidth", default="1Gbit")
    ap.add_argument("--latency", default="0s", help="added per link, as tfsched bench's --latency")
    ap.add_argument("--batch-size", type=positive(int), default=4)
    ap.add_argument("--modes", default="baseline,tio,tao+pc+host")
    ap.add_argument("--steps", type=positive(int), default=3)
    ap.add_argument("--rounds", type=positive(int), default=3)
    ap.add_argument(
        "--alternations", type=positive(int), default=2, help="netns then relays, this many times"
    )
    ap.add_argument("--name", default="", help="results/relay_vs_netns-NAME")
    args = ap.parse_args()
    try:
        args.bandwidth = parse_bandwidth(args.bandwidth)
        args.latency = parse_duration(args.latency)
        args.modes = parse_modes(args.modes)  # with the baseline, which the ratios are to
        why = latency_unavailable() if args.latency else available()
        if why:
            raise TfschedError(f"the namespaces side cannot run here: {why}")
        runs = []
        for k in range(args.alternations):
            for links in LINKS:
                print(f"alternation {k + 1}/{args.alternations}: {links}", flush=True)
                runs.append({"alternation": k, **one_run(args, links)})
    except TfschedError as e:
        sys.exit(f"Error: {e}")

    def per_mode(links: str, mode: str, key: str) -> list[float]:
        return [
            key(r) if callable(key) else r[key]
            for run in runs
            if run["links"] == links
            for r in run["modes"]
            if r["mode"] == mode and (callable(key) or r.get(key) is not None)
        ]

    tf2_run = args.api == "tf2"
    step_what = "1 / steps a second" if tf2_run else "slowest worker"
    lines = [
        f"**{args.model}** ({args.mode}, batch {args.batch_size}), 1 PS x {args.workers} workers, "
        f"{args.bandwidth / 1e9:g} Gbit/s per host each way"
        + (f" with {args.latency * 1e3:g} ms per link" if args.latency else "")
        + f", {args.rounds} interleaved rounds of {args.steps} "
        + ("steps per worker (TensorFlow 2's coordinator)" if tf2_run else "synchronized steps")
        + f" per run, {args.alternations} alternations of the two "
        f"emulations. Processor: {cpu_description()}.",
        "",
        f"| alternation | links | mode | {step_what} (s) | vs baseline (95%) | simulated (s) | sim. error |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        for r in run["modes"]:
            sim, error = predicted(r)
            lines.append(
                f"| {run['alternation'] + 1} | {run['links']} | {r['mode']} | {step_s(r):.4f} "
                f"| {ratio_text(r)} | {sim:.4f} | {error:+.0%} |"
            )
    lines += [
        "",
        "Means over the alternations:",
        "",
        f"| mode | vs baseline, netns | vs baseline, relays | {step_what} (s), netns | relays |",
        "|---|---|---|---|---|",
    ]
    means = {}
    for mode in args.modes:
        row = {
            links: (
                statistics.fmean(per_mode(links, mode, "vs_baseline")),
                statistics.fmean(per_mode(links, mode, step_s)),
            )
            for links in LINKS
        }
        means[mode] = {links: {"vs_baseline": v, "iteration_mean_s": s} for links, (v, s) in row.items()}
        lines.append(
            f"| {mode} | {row['netns'][0]:.3f}x | {row['relays'][0]:.3f}x | {row['netns'][1]:.4f} "
            f"| {row['relays'][1]:.4f} |"
        )
    cpu = {
        links: statistics.fmean(run["driver_cpu_s_per_step"] for run in runs if run["links"] == links)
        for links in LINKS
    }
    lines += [
        "",
        f"The driver's CPU per {'step' if tf2_run else 'synchronized step'} (its "
        f"{'coordinators are processes of their own' if tf2_run else 'sessions'}, and on the relays side the relays): "
        f"{cpu['netns']:.3f} s with namespaces, {cpu['relays']:.3f} s with relays.",
    ]
    result = {
        "benchmark": "relay_vs_netns",
        "machine": machine(),
        "cpu": cpu_description(),
        "config": {
            "api": args.api,
            "mode": args.mode,
            "model": args.model,
            "workers": args.workers,
            "bandwidth_bps": args.bandwidth,
            "latency_s": args.latency,
            "batch_size": args.batch_size,
            "modes": list(args.modes),
            "steps": args.steps,
            "rounds": args.rounds,
            "alternations": args.alternations,
        },
        "runs": runs,
        "means": means,
        "driver_cpu_s_per_step": cpu,
    }
    write("relay_vs_netns" + (f"-{args.name}" if args.name else ""), result, lines)


if __name__ == "__main__":
    main()
