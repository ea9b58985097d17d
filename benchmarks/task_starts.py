"""The session bench's cluster tasks forked from one process that imported TensorFlow
(``bench.zygote``, the eighty-eighth session) against each a process of its own that imports it
(``TFSCHED_FORKED_TASKS=0``, as before).

The same run of ``bench.run.cluster_side_by_side`` (Seq-32, a PS and two workers, 1 Gbit/s
links by default), made each way in turn, ``--repeats`` times, in this one process. Each forked
run starts with no zygote, as a ``tfsched bench`` run does, so its first start includes the
zygote's import. For each run: how long the cluster took to serve, the CPU its task processes
(and the zygote) had spent by then, the run's wall time, and each mode's measured throughput,
which forking should leave as it was. Then, each way, ``--starts`` more clusters of the same
size started and stopped one after another: what every later cluster of one process (the
tests' processes) costs.

    python benchmarks/task_starts.py [--model seq32] [--repeats 2] [--starts 5] --name NAME

Writes ``benchmarks/results/<name>.json`` and ``.md``. Needs root for the namespaces (without
it, ``--bandwidth 0``: loopback, unshaped).
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, run_kwargs, run_options, write  # noqa: E402

WAYS = ("own process", "forked")


@contextlib.contextmanager
def timed_starts(forked: bool):
    """Tasks started ``forked`` or not, from no zygote (as a process of its own starts); yields
    the list each ``TaskHandles.start_all`` is timed into meanwhile: its wall time, and the CPU
    its tasks and this process's zygote had spent once every task served."""
    from tfsched.bench import local, zygote
    from tfsched.bench.profile import task_cpu_s

    zygote.close_zygote()
    os.environ[zygote.ENV_FLAG] = "1" if forked else "0"
    real = local.TaskHandles.start_all
    starts: list[dict] = []

    def start_all(self, *args, **kwargs):
        start = time.perf_counter()
        real(self, *args, **kwargs)
        zyg = zygote._ZYGOTE
        starts.append(
            {
                "wall_s": round(time.perf_counter() - start, 3),
                "tasks_cpu_s": round(task_cpu_s([p.pid for p in self.procs.values()]), 2),
                "zygote_cpu_s": round(task_cpu_s([zyg.proc.pid]), 2) if zyg is not None else 0.0,
            }
        )

    local.TaskHandles.start_all = start_all
    try:
        yield starts
    finally:
        local.TaskHandles.start_all = real


def one_run(opts, forked: bool) -> dict:
    from tfsched.bench.run import cluster_side_by_side

    with timed_starts(forked) as starts:
        start = time.perf_counter()
        results = cluster_side_by_side(opts.model, **run_kwargs(opts), measure=False)
        wall = time.perf_counter() - start
    return {
        "way": WAYS[forked],
        "wall_s": round(wall, 2),
        "start": starts[0],
        "throughput_steps_per_s": {m: round(r.throughput, 3) for m, r in results.items()},
    }


def later_starts(opts, forked: bool) -> list[dict]:
    """``opts.starts`` clusters started and stopped in turn, after one that made the zygote."""
    from tfsched.bench.run import host_cluster

    with timed_starts(forked) as starts:
        for _ in range(opts.starts + 1):
            with host_cluster(ps=1, workers=opts.workers, bandwidth_bps=opts.bandwidth * 1e6 or None):
                pass
    return starts[1:]


def main() -> None:
    p = run_options(
        __doc__.split("\n\n")[0], modes="baseline,tao+pc", steps=10, rounds=2, bandwidth_mbps=1000.0
    )
    p.add_argument("--starts", type=positive(int), default=5)
    opts = p.parse_args()
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # as the tfsched command runs (bench.local)
    runs = [one_run(opts, forked) for _ in range(opts.repeats) for forked in (False, True)]
    later = {way: later_starts(opts, forked) for forked, way in enumerate(WAYS)}

    def mean(xs) -> float:
        return statistics.mean(xs) if xs else 0.0

    lines = [
        f"# The session bench's tasks forked from one zygote against a process each ({opts.name})",
        "",
        f"`python benchmarks/task_starts.py --model {opts.model} --workers {opts.workers} --modes {opts.modes} "
        f"--steps {opts.steps} --rounds {opts.rounds} --batch-size {opts.batch_size} "
        f"--bandwidth {opts.bandwidth:g} --repeats {opts.repeats} --starts {opts.starts} --name {opts.name}`, "
        f"each way {opts.repeats} times in turn; {machine()['cpus']} cores ({machine()['platform']}). "
        f"A cluster: 1 PS and {opts.workers} workers.",
        "",
        "| run | way | cluster served after (s) | tasks' CPU by then (s) | zygote's CPU (s) | run's wall (s) | "
        + " | ".join(f"{m} (steps/s)" for m in runs[0]["throughput_steps_per_s"])
        + " |",
        "|---|---|---|---|---|---|" + "---|" * len(runs[0]["throughput_steps_per_s"]),
    ]
    for k, run in enumerate(runs, 1):
        s = run["start"]
        lines.append(
            f"| {k} | {run['way']} | {s['wall_s']:.2f} | {s['tasks_cpu_s']:.2f} | {s['zygote_cpu_s']:.2f} | "
            f"{run['wall_s']:.1f} | "
            + " | ".join(f"{v:.2f}" for v in run["throughput_steps_per_s"].values())
            + " |"
        )
    first = {way: mean([r["start"]["wall_s"] for r in runs if r["way"] == way]) for way in WAYS}
    lines += [
        "",
        f"A run's cluster served after {first[WAYS[0]]:.2f} s with a process each and {first[WAYS[1]]:.2f} s "
        "forked (the zygote's import included).",
        "",
        f"Then {opts.starts} more clusters each way, one after another in this process (the zygote made once):",
        "",
        "| way | served after (s), each | mean (s) | tasks' CPU by then, mean (s) |",
        "|---|---|---|---|",
    ]
    for way, starts in later.items():
        lines.append(
            f"| {way} | {', '.join(format(s['wall_s'], '.2f') for s in starts)} | "
            f"{mean([s['wall_s'] for s in starts]):.2f} | "
            f"{mean([s['tasks_cpu_s'] for s in starts]):.2f} |"
        )
    write(
        opts.name, {"machine": machine(), "options": vars(opts), "runs": runs, "later_starts": later}, lines
    )


if __name__ == "__main__":
    main()
