"""Time and peak memory of ``tfsched analyze`` on Inception-v3's PS training graph with many
workers, this checkout against an earlier commit's, in the same run.

Each run is ``python -m tfsched.cli analyze GRAPH --fetch train --algorithm tao --workers N
--json -o FILE`` in a process of its own: its wall time, the peak resident memory of its
largest process (``ru_maxrss``), and the most its process tree held at once (its simulation
processes' too, since the hundred-and-sixteenth session's ``sim.pool``: their resident sets
summed every 50 ms). The two schedules written and the two ``--json`` outputs (the transfers,
their priorities and the whole prediction) must be the same, byte for byte.

    python benchmarks/analyze_scale.py --before 9907681 --name analyze_scale-s116 [--workers 8,32,64]

Writes ``benchmarks/results/NAME.json`` and ``.md`` (``analyze_scale-s115``: the floor's sums
in less memory, against 6b6ce9b; ``-s116``: the simulations side by side, against 9907681;
``-s120``: the max-min rounds past the flows' own links, against c4fe980).
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


def tree_rss(pid: int) -> int:
    """Bytes resident in ``pid`` and its descendants now (0 for what has ended)."""
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        try:
            with open(f"/proc/{p}/statm") as f:
                total += int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    stack += [int(c) for c in f.read().split()]
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total


def measure(code: str, graph: str, workers: int, out: str) -> dict:
    """One ``tfsched analyze`` run of the checkout at ``code``: seconds, the peak GiB of the
    largest process of its tree (the child's ``ru_maxrss`` from ``os.wait4``, which Linux gives
    as the most of its own and its reaped children's) and of the tree (sampled)."""
    t = time.perf_counter()
    with open(out + ".stdout", "wb") as stdout:
        p = subprocess.Popen(
            [sys.executable, "-m", "tfsched.cli", "analyze", graph, "--fetch", "train", "--algorithm", "tao"]
            + ["--workers", str(workers), "--json", "-o", out],
            stdout=stdout,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": code},
            cwd=code,
        )
    tree = 0
    while True:
        tree = max(tree, tree_rss(p.pid))
        pid, status, usage = os.wait4(p.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.05)
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode:
        raise SystemExit(f"tfsched analyze of {code} with {workers} workers failed ({p.returncode})")
    return {
        "seconds": round(time.perf_counter() - t, 1),
        "peak_gib": round(usage.ru_maxrss / 2**20, 2),
        "tree_peak_gib": round(tree / 2**30, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the commit to compare with")
    ap.add_argument("--workers", default="8,32,64")
    ap.add_argument("--name", default="analyze_scale", help="the results files' name")
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
            for key, end in (("same_schedule", ""), ("same_json", ".stdout")):
                row[key] = filecmp.cmp(
                    *(os.path.join(d, f"{n}-{w}.json{end}") for n in ("before", "after")), shallow=False
                )
            rows.append(row)
            print(row, flush=True)
    write(
        opts.name,
        {"machine": machine(), "before": opts.before, "rows": rows},
        [
            f"# `tfsched analyze` of Inception-v3 with many workers: {opts.before} against this checkout",
            "",
            "Peak GiB: the largest process's, then all its processes' at once (sampled every 50 ms).",
            "Same: the schedule file, and the whole `--json` output (transfers, priorities, prediction).",
            "",
            "| workers | before s | before peak GiB | after s | after peak GiB | same schedule, json |",
            "|---|---|---|---|---|---|",
            *(
                f"| {r['workers']} | {r['before']['seconds']} | {r['before']['peak_gib']}, "
                f"{r['before']['tree_peak_gib']} | {r['after']['seconds']} | {r['after']['peak_gib']}, "
                f"{r['after']['tree_peak_gib']} | {r['same_schedule']}, {r['same_json']} |"
                for r in rows
            ),
        ],
    )


if __name__ == "__main__":
    main()
