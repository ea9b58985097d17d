"""Time and peak memory of ``tfsched analyze`` on Inception-v3's PS training graph with many
workers, this checkout against an earlier commit's, in the same run.

Each run is ``python -m tfsched.cli analyze GRAPH --fetch train --algorithm tao --workers N -o
FILE`` in a process of its own: its wall time and its peak resident memory (``ru_maxrss`` of the
child). The two schedules written must be the same file, byte for byte.

    python benchmarks/analyze_scale.py --before 6b6ce9b [--workers 8,32,64]

Writes ``benchmarks/results/analyze_scale.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import filecmp
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, write  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(code: str, graph: str, workers: int, out: str) -> dict:
    """One ``tfsched analyze`` run of the checkout at ``code``: seconds and peak GiB (that
    child's own ``ru_maxrss``, from ``os.wait4``)."""
    t = time.perf_counter()
    p = subprocess.Popen(
        [sys.executable, "-m", "tfsched.cli", "analyze", graph, "--fetch", "train", "--algorithm", "tao"]
        + ["--workers", str(workers), "-o", out],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": code},
        cwd=code,
    )
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"tfsched analyze of {code} with {workers} workers failed ({p.returncode})")
    return {"seconds": round(time.perf_counter() - t, 1), "peak_gib": round(usage.ru_maxrss / 2**20, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the commit to compare with")
    ap.add_argument("--workers", default="8,32,64")
    opts = ap.parse_args()
    counts = [int(w) for w in opts.workers.split(",")]
    with tempfile.TemporaryDirectory(prefix="analyze-scale-") as d:
        old = os.path.join(d, "before")
        os.mkdir(old)
        subprocess.run(f"git -C {HERE} archive {opts.before} | tar -x -C {old}", shell=True, check=True)
        graph = os.path.join(d, "inception_v3.pb")
        subprocess.run(
            [sys.executable, "-c", "import sys; from tfsched.models import build_graph; "
             "open(sys.argv[1], 'wb').write(build_graph('inception_v3').graph_def().SerializeToString())", graph],
            check=True, capture_output=True, cwd=HERE,
        )  # fmt: skip
        rows = []
        for w in counts:
            row = {"workers": w}
            for name, code in (("before", old), ("after", HERE)):
                row[name] = measure(code, graph, w, os.path.join(d, f"{name}-{w}.json"))
            row["same_schedule"] = filecmp.cmp(
                *(os.path.join(d, f"{n}-{w}.json") for n in ("before", "after")), shallow=False
            )
            rows.append(row)
            print(row, flush=True)
    write(
        "analyze_scale",
        {"machine": machine(), "before": opts.before, "rows": rows},
        [
            f"# `tfsched analyze` of Inception-v3 with many workers: {opts.before} against this checkout",
            "",
            "| workers | before s | before peak GiB | after s | after peak GiB | same schedule |",
            "|---|---|---|---|---|---|",
            *(
                f"| {r['workers']} | {r['before']['seconds']} | {r['before']['peak_gib']} | "
                f"{r['after']['seconds']} | {r['after']['peak_gib']} | {r['same_schedule']} |"
                for r in rows
            ),
        ],
    )


if __name__ == "__main__":
    main()
