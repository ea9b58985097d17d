"""How far apart two runs of the same training by two workers come out, across the barrier and not.

Two workers' steps of a built-in model on two PS (``bench.local.LocalCluster``, over gRPC), run
twice from the same initial values, then compared variable by variable:

* ``cross``: the steps cross TensorFlow's barrier (``tfsched.enforce.crossing``): each read waits
  for both workers' updates of its variable in the step before, so the runs differ by the order
  two updates of one step land in (a rounding), and what a rounding sets off;
* ``vanilla``: each worker runs its steps behind the barrier, both at once, as TensorFlow does
  between-graph: a read does not wait for the other worker's updates, so the runs differ by
  which updates each read saw.

For each pair of runs: the largest difference of any value, the variables that differ by more
than ``--atol`` (the JSON: by how many elements, at which places along the first axis), and of
those the largest share of how far the variable moved from its initial
value (the norm of the difference over the norm of the movement): what
``tests/enforce/test_crossing.py::test_two_workers_read_every_update_of_the_last_step`` bounds.
With an embedding, the rows the two workers look up in common, where TensorFlow's sparse
updates can lose an addition (``lost_updates.py``).

    python benchmarks/crossing_agreement.py --model transformer --steps 5 --seed 20 --pairs 4 --name NAME

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

WAYS = ("cross", "vanilla")
STEP_TIMEOUT_MS = 120_000  # a run that takes longer fails


def in_threads(work, n: int) -> None:
    """``work(w)`` for each of ``n`` workers at once; the first error is raised."""
    errors = []

    def run(w):
        try:
            work(w)
        except BaseException as e:  # noqa: BLE001 - raised below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"Error: a worker's steps failed: {errors[0]}")


def train(tf, targets, builts, steps: int, way: str) -> list:
    """Both workers' ``steps`` steps at once, after one initialization; the variables' values."""
    from tfsched.enforce.crossing import CrossingRunner

    options = tf.compat.v1.RunOptions(timeout_in_ms=STEP_TIMEOUT_MS)
    sessions = [tf.compat.v1.Session(t, graph=b.graph) for t, b in zip(targets, builts, strict=True)]
    try:
        sessions[0].run(builts[0].init_op)
        if way == "cross":
            runners = [
                CrossingRunner(s, b.crossing, options=options) for s, b in zip(sessions, builts, strict=True)
            ]
            for r in runners:
                r.prime()
            in_threads(lambda w: runners[w].run(steps), len(runners))
        else:
            in_threads(
                lambda w: [sessions[w].run(builts[w].train_op, options=options) for _ in range(steps)],
                len(sessions),
            )
        return sessions[0].run(builts[0].graph.get_collection("variables"))
    finally:
        for s in sessions:
            s.close()


def shared_rows(tf, targets, builts) -> list[int] | None:
    """The embedding rows both workers' steps look up (each step the same: the inputs are drawn
    with a fixed seed); None without an embedding."""
    rows = []
    for t, b in zip(targets, builts, strict=True):
        gathers = [op for op in b.graph.get_operations() if op.type == "ResourceGather"]
        if len(gathers) != 1:
            return None
        with tf.compat.v1.Session(t, graph=b.graph) as sess:
            rows.append(set(sess.run(gathers[0].inputs[1]).ravel().tolist()))
    return sorted(rows[0] & rows[1])


def compare(names, first, second, initial, atol: float) -> dict:
    """Two runs' values, variable by variable, against ``atol`` and the movement from ``initial``."""
    largest, apart = 0.0, {}
    for name, x, y, x0 in zip(names, first, second, initial, strict=True):
        x, y, x0 = (np.asarray(v, np.float64) for v in (x, y, x0))
        if not x.size:
            continue
        diff = float(np.abs(y - x).max())
        largest = max(largest, diff)
        if diff > atol:
            moved = float(np.linalg.norm(x - x0))
            where = np.abs(y - x) > atol
            apart[name] = {
                "max_abs": diff,
                "elements": int(np.count_nonzero(where)),
                "of": int(x.size),
                # along the first axis: a bias's units, a kernel's or an embedding's rows
                "first_axis": sorted(set(np.nonzero(where)[0].tolist()))[:8],
                "share_of_movement": float(np.linalg.norm(y - x)) / moved if moved else float("inf"),
            }
    return {"max_abs": largest, "apart": apart}


def measure(opts) -> dict:
    from tfsched.bench.local import LocalCluster
    from tfsched.graph._tf import import_tensorflow
    from tfsched.models import build_graph

    tf = import_tensorflow()
    got: dict = {w: [] for w in opts.ways}

    def build(way):
        return [
            build_graph(
                opts.model,
                ps_tasks=2,
                worker_task=w,
                cross_workers=2 if way == "cross" else 0,
                batch_size=opts.batch_size,
                seed=opts.seed,
            )
            for w in range(2)
        ]

    with LocalCluster(ps=2, workers=2) as cluster:
        targets = [cluster.target("worker", w) for w in range(2)]
        builts = build(opts.ways[0])
        names = [v.op.name for v in builts[0].graph.get_collection("variables")]
        with tf.compat.v1.Session(targets[0], graph=builts[0].graph) as sess:
            sess.run(builts[0].init_op)
            initial = sess.run(builts[0].graph.get_collection("variables"))
        shared = shared_rows(tf, targets, builts)
        for _ in range(opts.pairs):
            for way in opts.ways:
                runs = []
                for _ in range(2):
                    builts = build(way)
                    if [v.op.name for v in builts[0].graph.get_collection("variables")] != names:
                        raise SystemExit(f"Error: {way}: its graph's variables are not those compared")
                    runs.append(train(tf, targets, builts, opts.steps, way))
                got[way].append(compare(names, *runs, initial, opts.atol))
    return {"variables": len(names), "shared_rows": shared, "pairs": got}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="transformer")
    p.add_argument("--steps", type=positive(int), default=5)
    p.add_argument("--batch-size", type=positive(int), default=2)
    p.add_argument("--seed", type=int, default=20)
    p.add_argument("--pairs", type=positive(int), default=4)
    p.add_argument("--atol", type=float, default=1e-6)
    p.add_argument("--ways", default=",".join(WAYS))
    p.add_argument("--name", required=True)
    opts = p.parse_args()
    opts.ways = opts.ways.split(",")
    if not opts.ways or any(w not in WAYS for w in opts.ways):
        p.error(f"--ways: a comma-separated list of {', '.join(WAYS)}")
    from tfsched.errors import TfschedError

    try:
        got = measure(opts)
    except TfschedError as e:  # an unknown model
        raise SystemExit(f"Error: {e}") from None
    shared = got["shared_rows"]
    lines = [
        f"# Two runs of two workers' training, compared ({opts.name})",
        "",
        f"`python benchmarks/crossing_agreement.py --model {opts.model} --steps {opts.steps} --batch-size "
        f"{opts.batch_size} --seed {opts.seed} --pairs {opts.pairs} --atol {opts.atol:g} --ways "
        f"{','.join(opts.ways)} --name {opts.name}`: two PS and two workers over gRPC, each pair of "
        f"runs from the same initial values; {machine()['cpus']} cores ({machine()['platform']}). "
        f"{got['variables']} variables"
        + ("." if shared is None else f"; the embedding rows both workers look up: {shared or 'none'}."),
        "",
        f"| way | pair | largest difference | variables apart by more than {opts.atol:g} | "
        "largest share of its movement (variable) |",
        "|---|---|---|---|---|",
    ]
    for way in opts.ways:
        for i, pair in enumerate(got["pairs"][way], 1):
            apart = pair["apart"]
            worst = max(apart, key=lambda n: apart[n]["share_of_movement"], default=None)
            share = f"{apart[worst]['share_of_movement']:.2g} (`{worst}`)" if worst else ""
            lines.append(f"| {way} | {i} | {pair['max_abs']:.3g} | {len(apart)} | {share} |")
    write(opts.name, {"machine": machine(), "options": vars(opts), **got}, lines)


if __name__ == "__main__":
    main()
