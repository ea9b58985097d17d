"""Where a synchronized step's time goes on the emulated cluster: the cores, task by task.

Runs the bench's modes interleaved on the emulated cluster (as ``tfsched bench`` does) while
``bench.profile.TaskCpuSampler`` reads every task process's CPU every few milliseconds, then
reports for each mode:

* the workers' step times by rank (the first to finish first), measured and simulated
  (``finish_by_rank_s``, ``predicted_finish_by_rank_s``);
* the cores each process used, bin by bin from the step's start, the workers ranked by when
  they finished (``bench.profile.profile_by_rank``);
* from ``--trace-steps`` traced steps of worker 0: when the PS ran its first op of the step and
  when the first large pull began (``bench.profile.start_delays``), beside the start the
  simulator takes for every mode (the baseline's, traced alone).

    python benchmarks/cpu_profile.py --model mobilenet --batch-size 99 --name mobilenet-train

Writes ``benchmarks/results/cpu-profile-<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

from tfsched.errors import TfschedError  # noqa: E402


def _cores(v: float) -> str:
    return f"{v:.1f}"


def run(args) -> tuple[dict, list[str]]:
    from tfsched.bench.profile import TaskCpuSampler, profile_by_rank, start_delays
    from tfsched.bench.results import paired_ratio_ci
    from tfsched.bench.run import cluster_side_by_side, parse_modes
    from tfsched.oracle.fit import task_starts
    from tfsched.units import parse_bandwidth, parse_duration

    modes = parse_modes(args.modes)
    log: list = []
    with TaskCpuSampler(interval_s=args.interval_ms / 1e3) as sampler:
        results = cluster_side_by_side(
            args.model,
            workers=args.workers,
            ps=args.ps,
            modes=modes,
            steps=args.steps,
            rounds=args.rounds,
            batch_size=args.batch_size,
            bandwidth_bps=parse_bandwidth(args.bandwidth),
            queue_s=parse_duration(args.queue),
            mode=args.mode,
            trace_steps=args.trace_steps,
            step_log=log,
            progress=lambda msg: print(msg, file=sys.stderr, flush=True),
        )
    base = results.get("baseline")
    sim_start = task_starts(base.solo_trace, "min") if base is not None and base.solo_trace else {}
    out = {"modes": {}}
    md = [
        f"**{args.model}** ({args.mode}, batch {args.batch_size}), {args.ps} PS x {args.workers} workers, "
        f"{args.bandwidth} (links queueing {args.queue}), {args.rounds} interleaved rounds of "
        f"{args.steps} synchronized steps; every task's CPU sampled every {args.interval_ms:g} ms "
        f"(the sampler took {sampler.own_cpu_s:.1f} CPU seconds, not counted)",
        "",
        "Throughput against the baseline's (95% interval of the paired per-round ratios), and the "
        "step times by rank (the first worker to finish first), measured and simulated, seconds:",
        "",
        "| mode | vs baseline | measured | simulated |",
        "|---|---|---|---|",
    ]
    for mode, res in results.items():
        m = res.measured
        ratio, ci = res.throughput / base.throughput, paired_ratio_ci(res, base)
        vs = f"{ratio:.3f}x" + (f" ({ci[0]:.2f}-{ci[1]:.2f})" if ci else "")
        md.append(
            f"| {mode} | {vs} | {', '.join(f'{t:.3f}' for t in m.get('finish_by_rank_s', []))} "
            f"| {', '.join(f'{t:.3f}' for t in m.get('predicted_finish_by_rank_s', []))} |"
        )
    md += [
        "",
        "When worker 0's traced steps began their parts (ms from the step's first op; mean, and the "
        f"range over {args.trace_steps} steps); the simulator starts every mode as the baseline alone:",
        "",
        "| mode | the PS's first op | the first pull of 200 KB or more |",
        "|---|---|---|",
    ]
    ps_task = "/job:ps/replica:0/task:0"
    for mode, res in results.items():
        delays = start_delays(res.trace) if res.trace is not None else {}
        cells = []
        for key in (ps_task, "first large pull"):
            xs = delays.get(key, [])
            cells.append(
                f"{statistics.fmean(xs) * 1e3:.1f} ({min(xs) * 1e3:.1f} to {max(xs) * 1e3:.1f})"
                if xs
                else "-"
            )
        md.append(f"| {mode} | {cells[0]} | {cells[1]} |")
        profile = profile_by_rank(sampler.samples, log, mode, bin_s=args.bin_ms / 1e3)
        out["modes"][mode] = {"result": res.to_json(), "start_delays_s": delays, "profile": profile}
    if ps_task in sim_start:
        md += ["", f"The simulator's start of the PS: {sim_start[ps_task] * 1e3:.1f} ms."]
    for mode, entry in out["modes"].items():
        p = entry["profile"]
        n = len(p["steps_in_bin"])
        md += [
            "",
            f"`{mode}`: cores in use, per {args.bin_ms:g} ms from the step's start (mean over "
            f"{p['steps']} steps; the last row: how many steps were still running)",
            "",
            "| process | " + " | ".join(f"{b * args.bin_ms:g}" for b in range(n)) + " |",
            "|---|" + "---|" * n,
            *(f"| {row} | " + " | ".join(_cores(v) for v in vals) + " |" for row, vals in p["rows"].items()),
            "| steps | " + " | ".join(str(c) for c in p["steps_in_bin"]) + " |",
        ]
    config = {k: v for k, v in vars(args).items() if k != "name"}
    return {"config": config, "machine": machine(), **out}, md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mobilenet")
    ap.add_argument("--mode", choices=("train", "inference"), default="train")
    ap.add_argument("--workers", type=positive(int), default=4)
    ap.add_argument("--ps", type=positive(int), default=1)
    ap.add_argument("--bandwidth", default="1Gbit")
    ap.add_argument(
        "--queue", default="400ms", help="the most of the link's time each shaper queues (the bench's)"
    )
    ap.add_argument("--batch-size", type=positive(int), required=True)
    ap.add_argument("--modes", default="baseline,tao+pc,tao+pc+host")
    ap.add_argument("--steps", type=positive(int), default=5)
    ap.add_argument("--rounds", type=positive(int), default=6)
    ap.add_argument("--trace-steps", type=positive(int), default=8)
    ap.add_argument("--interval-ms", type=positive(float), default=5.0)
    ap.add_argument("--bin-ms", type=positive(float), default=25.0)
    ap.add_argument("--name", required=True, help="results/cpu-profile-<name>.{json,md}")
    args = ap.parse_args()
    try:
        result, md = run(args)
    except TfschedError as e:
        raise SystemExit(f"Error: {e}") from None
    write(f"cpu-profile-{args.name}", result, md)


if __name__ == "__main__":
    main()
