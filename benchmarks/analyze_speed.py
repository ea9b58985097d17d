"""How long ``tfsched analyze`` takes on the Inception-v3 PS training graph.

Target (issue: core): TAO under 3 s on this machine, whole command included. Measured in the
same run, as the baseline: the straightforward TAO (Algorithm 1 recomputed for every pick,
``tao_order_reference``) on the same worker partition.

    python benchmarks/analyze_speed.py [--repeat 3] [--reference-timeout 600]

Writes ``benchmarks/results/analyze_speed.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, write  # noqa: E402


def _reference(path: str, fetches: list[str], queue) -> None:
    from tfsched.graph import load_comm_graph
    from tfsched.oracle import TimeOracle
    from tfsched.ordering.tao import tao_order_reference

    g = load_comm_graph(path, fetches=fetches)
    view = g.worker_view(g.worker_tasks[0])
    oracle = TimeOracle.from_cost_model(g)
    t = time.perf_counter()
    order = tao_order_reference(view, oracle)
    queue.put((time.perf_counter() - t, order))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reference-timeout", type=float, default=600.0)
    args = ap.parse_args()

    from tfsched.graph import load_comm_graph
    from tfsched.models import build_graph
    from tfsched.oracle import TimeOracle
    from tfsched.ordering.tao import tao_order

    built = build_graph("inception_v3")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "inception_v3.pb")
        gd = built.graph_def()
        with open(path, "wb") as f:
            f.write(gd.SerializeToString())
        g = load_comm_graph(path, fetches=built.fetches)
        view = g.worker_view(g.worker_tasks[0])
        facts = {
            "graph_nodes": len(gd.node),
            "step_ops": len(g.graph),
            "pulls": sum(t.kind == "pull" for t in g.transfers),
            "pushes": sum(t.kind == "push" for t in g.transfers),
            "worker_recvs": len(view.recvs),
        }
        commands = {}
        for alg in ("tio", "tao"):
            times = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                p = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "tfsched.cli",
                        "analyze",
                        path,
                        "--fetch",
                        built.fetches[0],
                        "--algorithm",
                        alg,
                        "--json",
                    ],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                times.append(time.perf_counter() - t)
                json.loads(p.stdout)
            commands[alg] = {"runs_s": times, "median_s": statistics.median(times)}

        oracle = TimeOracle.from_cost_model(g)
        t = time.perf_counter()
        fast_order = tao_order(view, oracle)
        fast_s = time.perf_counter() - t

        queue = mp.get_context("spawn").Queue()
        proc = mp.get_context("spawn").Process(target=_reference, args=(path, built.fetches, queue))
        proc.start()
        proc.join(args.reference_timeout)
        if proc.is_alive():
            proc.terminate()
            reference = {"seconds": None, "note": f"did not finish within {args.reference_timeout:.0f} s"}
        else:
            ref_s, ref_order = queue.get()
            reference = {"seconds": ref_s, "same_order": ref_order == fast_order}

    result = {
        "benchmark": "analyze_speed",
        "machine": machine(),
        "graph": "inception_v3 PS training graph (tf_keras, 75x75 input, batch 4, 1 PS, 1 worker)",
        **facts,
        "analyze_command": commands,
        "tao_ordering_only": {"vectorized_s": fast_s, "straightforward_s": reference},
        "target": {"tao_command_s": 3.0, "met": commands["tao"]["median_s"] < 3.0},
    }
    ref_s = reference.get("seconds")
    md = [
        "# analyze speed: Inception-v3 PS training graph",
        "",
        f"{facts['graph_nodes']} nodes in the graph, {facts['step_ops']} in the training step, "
        f"{facts['pulls']} pulls, {facts['pushes']} pushes ({os.cpu_count()} CPUs).",
        "",
        "| what | seconds |",
        "|---|---|",
        f"| `tfsched analyze --algorithm tio` (whole command, median of {args.repeat}) | {commands['tio']['median_s']:.2f} |",
        f"| `tfsched analyze --algorithm tao` (whole command, median of {args.repeat}) | {commands['tao']['median_s']:.2f} |",
        f"| TAO ordering only, vectorized | {fast_s:.2f} |",
        f"| TAO ordering only, straightforward (baseline) | {f'{ref_s:.1f}' if ref_s is not None else reference['note']} |",
        "",
        f"Target: TAO command under 3 s: {'met' if result['target']['met'] else 'NOT met'}.",
    ]
    write("analyze_speed", result, md)


if __name__ == "__main__":
    main()
