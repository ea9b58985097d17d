"""Gate overhead: per-gate cost, and a compute-bound training run with and without tfsched.

1. Per-gate cost: one process, a graph of N pass-through ops, run as Identity and as TfschedGate
   (priorities 0..N-1; N-1..0, so that nearly every gate waits for its turn; and all 0),
   interleaved; cost = the difference in wall time, and in the process's CPU time, / N.
2. Compute-bound run (issue target: within 1%): ResNet-50 on a local multi-process cluster on
   loopback without shaping, baseline and tio interleaved in rounds on the same cluster.

    python benchmarks/gate_overhead.py [--rounds 3] [--steps 5] [--image-size 224] [--batch-size 8]
    python benchmarks/gate_overhead.py --per-gate-only   # part 1 alone, printed (about a minute)
    python benchmarks/gate_overhead.py --libraries OLD.so,NEW.so [--ab-rounds 2]

``--libraries`` runs part 1 alone against each compiled library in turn (alternated, each in its
own process), to compare two builds of the gate in one run; it writes ``gate_overhead_ab``.

Writes ``benchmarks/results/gate_overhead.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, write  # noqa: E402


def per_gate_cost(n: int = 2000, reps: int = 30) -> dict:
    import tensorflow as tf

    from tfsched.enforce._loader import load_ops

    ops = load_ops()

    def graph(kind: str):
        # Each op passes its own variable's value, as a PS's gates pass each variable's read: the
        # reads finish one by one, so the gates arrive spread out, as they do in training (one
        # input for all made them arrive at once, and hid what a gate that waits costs).
        g = tf.Graph()
        with g.as_default():
            outs = []
            for i in range(n):
                x = tf.compat.v1.get_variable(
                    f"v{i}", [16], initializer=tf.zeros_initializer(), use_resource=True
                )
                x = x.read_value()
                if kind == "identity":
                    outs.append(tf.identity(x))
                else:
                    prio = {"ordered": i, "reversed": n - 1 - i}.get(kind, 0)
                    outs.append(
                        ops.tfsched_gate(x, channel="bench", priority=prio, channel_size=n, timeout_ms=60000)
                    )
            fetch = tf.group(*outs)
            init = tf.compat.v1.global_variables_initializer()
        return g, init, fetch

    runs, cpu = {}, {}
    sessions = {}
    for kind in ("identity", "ordered", "reversed", "unordered"):
        g, init, fetch = graph(kind)
        cfg = tf.compat.v1.ConfigProto()
        cfg.graph_options.rewrite_options.disable_meta_optimizer = True  # keep the n ops as they are
        sess = tf.compat.v1.Session(graph=g, config=cfg)
        sess.run(init)
        for _ in range(3):
            sess.run(fetch)
        sessions[kind] = (sess, fetch)
        runs[kind], cpu[kind] = [], []
    for _ in range(reps):
        for kind, (sess, fetch) in sessions.items():
            t, c = time.perf_counter(), time.process_time()
            sess.run(fetch)
            runs[kind].append(time.perf_counter() - t)
            cpu[kind].append(time.process_time() - c)
    for sess, _ in sessions.values():
        sess.close()
    med = {k: statistics.median(v) for k, v in runs.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    return {
        "ops_per_graph": n,
        "median_step_s": med,
        "median_step_cpu_s": med_cpu,
        "per_gate_us_ordered": (med["ordered"] - med["identity"]) / n * 1e6,
        "per_gate_us_reversed": (med["reversed"] - med["identity"]) / n * 1e6,
        "per_gate_us_all_priority_0": (med["unordered"] - med["identity"]) / n * 1e6,
        "per_gate_cpu_us": {
            k: (med_cpu[k] - med_cpu["identity"]) / n * 1e6 for k in med_cpu if k != "identity"
        },
    }


def per_gate_line(micro: dict) -> str:
    c = micro["per_gate_cpu_us"]
    return (
        f"Per-gate cost ({micro['ops_per_graph']} pass-through ops, one process, vs Identity; wall time, "
        f"and CPU time of the process): {micro['per_gate_us_ordered']:.2f} us ({c['ordered']:.2f} us CPU) "
        f"released in priority order, {micro['per_gate_us_reversed']:.2f} us ({c['reversed']:.2f} us CPU) "
        f"in reverse order (nearly every gate waits), {micro['per_gate_us_all_priority_0']:.2f} us "
        f"({c['unordered']:.2f} us CPU) all at priority 0."
    )


def compare_libraries(libraries: list[str], rounds: int) -> None:
    """Part 1 against each library, alternated over ``rounds``, each run in its own process."""
    runs: dict[str, list[dict]] = {lib: [] for lib in libraries}
    for _ in range(rounds):
        for lib in libraries:
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--library", lib],
                capture_output=True,
                text=True,
                timeout=1800,
                check=True,
            )
            runs[lib].append(json.loads(out.stdout.strip().splitlines()[-1]))
    md = ["# Gate overhead, two builds alternated", ""]
    md += ["| library | round | CPU per gate, in order (us) | in reverse order (us) | priority 0 (us) |"]
    md += ["|---|---|---|---|---|"]
    for lib, micros in runs.items():
        for i, m in enumerate(micros):
            c = m["per_gate_cpu_us"]
            md.append(
                f"| {os.path.basename(lib)} | {i + 1} | {c['ordered']:.2f} | {c['reversed']:.2f} | {c['unordered']:.2f} |"
            )
    write("gate_overhead_ab", {"benchmark": "gate_overhead_ab", "machine": machine(), "runs": runs}, md)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--image-size", type=int, default=224, help="224: compute-bound on this CPU")
    ap.add_argument("--per-gate-only", action="store_true", help="print part 1 and write nothing")
    ap.add_argument("--libraries", help="OLD.so,NEW.so: part 1 against each library, alternated")
    ap.add_argument("--ab-rounds", type=int, default=2)
    ap.add_argument("--library", help=argparse.SUPPRESS)  # a --libraries child: load this build
    args = ap.parse_args()

    if args.libraries:
        compare_libraries(args.libraries.split(","), args.ab_rounds)
        return
    if args.library:
        from tfsched.enforce import build

        build.build = lambda force=False: args.library
        print(json.dumps(per_gate_cost()))
        return
    micro = per_gate_cost()
    if args.per_gate_only:
        print(per_gate_line(micro))
        return

    from tfsched.bench.run import local_side_by_side

    runs = local_side_by_side(
        args.model,
        workers=1,
        ps=1,
        modes=("baseline", "tio"),
        steps=args.steps,
        rounds=args.rounds,
        batch_size=args.batch_size,
        image_size=args.image_size,
        progress=lambda s: print(s, flush=True),
    )
    base, tio = runs["baseline"].to_json(), runs["tio"].to_json()
    overhead = tio["mean_s"] / base["mean_s"] - 1.0
    result = {
        "benchmark": "gate_overhead",
        "machine": machine(),
        "per_gate": micro,
        "compute_bound": {
            "model": args.model,
            "batch_size": args.batch_size,
            "image_size": args.image_size,
            "workers": 1,
            "ps": 1,
            "link": "loopback, unshaped",
            "rounds": args.rounds,
            "steps_per_round": args.steps,
            "baseline": base,
            "tio": tio,
            "overhead_mean": overhead,
        },
        "target": {"overhead_max": 0.01, "met": overhead <= 0.01},
    }
    md = [
        "# Gate overhead",
        "",
        per_gate_line(micro),
        "",
        f"Compute-bound training ({args.model}, {args.image_size}x{args.image_size}, batch {args.batch_size}, "
        "1 PS + 1 worker processes, loopback, "
        f"{args.rounds} interleaved rounds of {args.steps} steps):",
        "",
        "| mode | mean step (s) | p50 (s) | p95 (s) |",
        "|---|---|---|---|",
        f"| baseline (vanilla TF) | {base['mean_s']:.4f} | {base['p50_s']:.4f} | {base['p95_s']:.4f} |",
        f"| tfsched tio | {tio['mean_s']:.4f} | {tio['p50_s']:.4f} | {tio['p95_s']:.4f} |",
        "",
        f"Overhead: {overhead * 100:+.2f}% (target: within 1%: {'met' if result['target']['met'] else 'NOT met'}).",
    ]
    write("gate_overhead", result, md)


if __name__ == "__main__":
    main()
