"""A batch-size probe's processes forked from the zygote (``bench.zygote``) against each a process
of its own that imports TensorFlow again, as until the ninetieth session.

The probe of ``--batch-size auto`` (``models.batch._compute_time``): ``--copies`` processes that
build the model, warm up, and compute ``--steps`` steps at once, each way in turn, ``--repeats``
times: the call's wall time, and the mean step it measured, which forking should leave as it was.
The first forked call also starts the zygote (its import of TensorFlow), as a bench's first
cluster does.

    python benchmarks/probe_forks.py [--model seq32] [--batch 64] [--repeats 3] --name NAME

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

WAYS = ("own process", "forked")


def one_call(opts, forked: bool) -> dict:
    """One probe, its processes started ``forked`` or each as a process of its own."""
    from tfsched.bench.zygote import ENV_FLAG
    from tfsched.models.batch import _compute_time

    before = os.environ.get(ENV_FLAG)
    os.environ[ENV_FLAG] = "1" if forked else "0"
    try:
        start = time.perf_counter()
        step_s = _compute_time(opts.model, opts.mode, opts.batch, None, steps=opts.steps, copies=opts.copies)
        wall = time.perf_counter() - start
    finally:
        if before is None:
            os.environ.pop(ENV_FLAG, None)
        else:
            os.environ[ENV_FLAG] = before
    return {"way": WAYS[forked], "wall_s": round(wall, 3), "step_s": round(step_s, 6)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="seq32")
    p.add_argument("--mode", default="train", choices=("train", "inference"))
    p.add_argument("--batch", type=positive(int), default=64)
    p.add_argument("--steps", type=positive(int), default=3)
    p.add_argument("--copies", type=positive(int), default=2)
    p.add_argument("--repeats", type=positive(int), default=3)
    p.add_argument("--name", required=True)
    opts = p.parse_args()
    calls = [one_call(opts, forked) for _ in range(opts.repeats) for forked in (True, False)]

    def of(way: str, key: str) -> list[float]:
        return [c[key] for c in calls if c["way"] == way]

    lines = [
        f"# A batch-size probe's processes: forked from the zygote against a process each ({opts.name})",
        "",
        f"`python benchmarks/probe_forks.py --model {opts.model} --mode {opts.mode} --batch {opts.batch} "
        f"--steps {opts.steps} --copies {opts.copies} --repeats {opts.repeats} --name {opts.name}`, each way "
        f"{opts.repeats} times in turn, forked first; {machine()['cpus']} cores ({machine()['platform']}).",
        "",
        "| way | calls' wall (s) | mean step measured (s) |",
        "|---|---|---|",
        *(
            f"| {way} | {', '.join(f'{w:.2f}' for w in of(way, 'wall_s'))} "
            f"| {', '.join(f'{s:.4f}' for s in of(way, 'step_s'))} |"
            for way in WAYS
        ),
    ]
    # the first forked call started the zygote too: the calls after it are what a probe costs
    # once a bench has one
    forked_later = of(WAYS[1], "wall_s")[1:] or of(WAYS[1], "wall_s")
    own = statistics.mean(of(WAYS[0], "wall_s"))
    later = statistics.mean(forked_later)
    lines += [
        "",
        f"A probe took {own:.2f} s with a process each and {later:.2f} s forked once the zygote was up "
        f"({1 - later / own:.0%} less); the first forked call, which started the zygote, "
        f"{of(WAYS[1], 'wall_s')[0]:.2f} s. The mean step measured: "
        f"{statistics.mean(of(WAYS[0], 'step_s')):.4f} s and {statistics.mean(of(WAYS[1], 'step_s')):.4f} s.",
    ]
    write(opts.name, {"machine": machine(), "options": vars(opts), "calls": calls}, lines)


if __name__ == "__main__":
    main()
