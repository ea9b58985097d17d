"""Whether a server's inter-op threads are the ones TensorFlow 2's functions run on.

A session's steps run on the server's inter-op pool (``tf.distribute.Server``'s config,
``inter_op_parallelism_threads``; ``tfsched bench --inter-op-threads``), whose threads
TensorFlow names ``tf_Compute``. For each thread count, this starts a local cluster (1 PS, 1
worker) whose servers were given it, counts each task's ``tf_Compute`` threads, runs one round
of the TensorFlow 2 bench's coordinator on it (``ParameterServerStrategy``, Seq-32, vanilla
TensorFlow) and counts them again. If the functions ran on the server's pool, nothing would be
added, or what is added would follow the count given.

    python benchmarks/tf2_threads.py [--threads 2,5]

Writes ``benchmarks/results/tf2-threads.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, seq32_round, write  # noqa: E402

STEPS = 4


def compute_threads(pid: int) -> int:
    """The threads of process ``pid`` that TensorFlow named ``tf_Compute`` (its thread pools')."""
    count = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/comm") as f:
                count += f.read().strip() == "tf_Compute"
        except OSError:  # a thread that ended meanwhile
            pass
    return count


def measure(threads: int) -> dict:
    from tfsched.bench.local import LocalCluster
    from tfsched.bench.tf2 import FIRST_ROUND_TIMEOUT_S, run_round

    with LocalCluster(ps=1, workers=1, inter_op_threads=threads) as c:
        before = {f"{job}:{k}": compute_threads(p.pid) for (job, k), p in c.procs.items()}
        args = seq32_round(c, STEPS)
        run_round(args, "baseline", FIRST_ROUND_TIMEOUT_S)
        after = {f"{job}:{k}": compute_threads(p.pid) for (job, k), p in c.procs.items()}
    return {"inter_op_threads": threads, "before": before, "after": after}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="2,5", help="the servers' inter-op threads, one cluster each")
    counts = [int(x) for x in ap.parse_args().threads.split(",")]
    rows = [measure(n) for n in counts]
    md = [
        f"TensorFlow 2's functions and the server's inter-op threads: `tf_Compute` threads of each task "
        f"before and after a coordinator's round of {STEPS} Seq-32 steps per worker (1 PS, 1 worker)",
        "",
        "| inter-op threads given | task | before | after | added |",
        "|---|---|---|---|---|",
        *(
            f"| {r['inter_op_threads']} | {task} | {r['before'][task]} | {r['after'][task]} "
            f"| {r['after'][task] - r['before'][task]} |"
            for r in rows
            for task in r["before"]
        ),
        "",
        "Before: the server's pool, as it was given. Added: the pools TensorFlow 2's calls made.",
    ]
    write("tf2-threads", {"machine": machine(), "steps": STEPS, "runs": rows}, md)


if __name__ == "__main__":
    main()
