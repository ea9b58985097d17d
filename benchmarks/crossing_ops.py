"""What a step across TensorFlow's barrier adds to each task's work: ops and messages.

The simulator lays the crossing out on the graph behind the barrier (``sim.build_sim_graph``'s
``cross_barrier``), with that graph's ops and transfers, and charges the crossing's gates
(``tfsched.enforce.crossing``) the ops it counts for them (``sim.model.GATE_OPS``). This counts
what the crossing runs:

1. Ops a step runs on each task, from a worker's graph as the bench builds it for ``--workers``
   workers (``build_graph(cross_workers=N)``): the ancestors of the training op behind the
   barrier, and of the compute and apply runs across it, by task and type, and what the
   crossing adds. A gate's queue op runs where its variable lives.
2. Messages one step sends between tasks (``_Send`` ops whose receiver is on another task), and
   each task's ops, from the partition graphs of a real step on a local cluster of 1 PS and 1
   worker (what TensorFlow ran, after Grappler's rewrites), behind the barrier and across it
   (both runs).

3. With ``--cpu-steps N``, the PS's CPU a step behind the barrier and across it, ``--workers``
   workers stepping at once on a local cluster (batch 2), over N steps.

    python benchmarks/crossing_ops.py [--model mobilenet] [--workers 4] [--cpu-steps N] [--name NAME]

Writes ``benchmarks/results/<name>.json`` and ``.md`` (default name: crossing-ops-<model>).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402


def _task(device: str) -> str:
    """``/job:ps/replica:0/task:0/device:CPU:0`` -> ``ps:0``; an op placed nowhere yet (the
    client's, or a constant the placer puts beside its consumer) -> ``unplaced``."""
    parts = dict(p.split(":", 1) for p in device.strip("/").split("/") if ":" in p)
    return f"{parts['job']}:{parts.get('task', '0')}" if "job" in parts else "unplaced"


def step_ops(fetches) -> list:
    """The ops a step runs: every ancestor of ``fetches`` (each run's, once)."""
    from tfsched.enforce.crossing import _run_ancestors

    return sorted(_run_ancestors([getattr(f, "op", f) for f in fetches]), key=lambda op: op.name)


def by_task(ops) -> dict[str, Counter]:
    """``ops``' types, by task."""
    out: dict[str, Counter] = {}
    for op in ops:
        out.setdefault(_task(op.device), Counter())[op.type] += 1
    return dict(sorted(out.items()))


def messages(model: str) -> dict:
    """One real step's messages between tasks (``_Send`` ops whose receiver is on another task)
    and each task's ops, from the partition graphs TensorFlow ran (after Grappler's rewrites),
    behind the barrier and across it (1 PS, 1 worker)."""
    import tensorflow as tf

    from tfsched.bench.local import LocalCluster
    from tfsched.enforce.crossing import CrossingRunner
    from tfsched.models import build_graph

    def sends(mds) -> dict:
        """The messages between tasks, and each task's ops, in ``mds``' partition graphs."""
        n, ops = 0, Counter()
        for md in mds:
            for g in md.partition_graphs:
                for node in g.node:
                    ops[_task(node.device)] += 1
                    if node.op in ("_Send", "_HostSend"):
                        src, dst = (_task(node.attr[k].s.decode()) for k in ("send_device", "recv_device"))
                        n += src != dst
        return {"messages": n, "ops": dict(sorted(ops.items()))}

    options = tf.compat.v1.RunOptions(output_partition_graphs=True, timeout_in_ms=120_000)
    with LocalCluster(ps=1, workers=1) as cluster:
        target = cluster.target("worker", 0)
        behind = build_graph(model, batch_size=2)
        with tf.compat.v1.Session(target, graph=behind.graph) as sess:
            sess.run(behind.init_op)
            md = tf.compat.v1.RunMetadata()
            sess.run(behind.train_op, options=options, run_metadata=md)
        across = build_graph(model, batch_size=2, cross_workers=1)
        with tf.compat.v1.Session(target, graph=across.graph) as sess:
            sess.run(across.init_op)
            runner = CrossingRunner(sess, across.crossing, options=options)
            runner.prime()
            mds: list = []
            runner.run(1, run_metadata=mds)
    return {"behind": sends([md]), "across": sends(mds)}


def ps_cpu(model: str, workers: int, steps: int) -> dict:
    """The PS's CPU seconds a step (every worker's), behind the barrier and across it, on a
    local cluster of 1 PS and ``workers`` workers, each worker's steps on a thread of its own
    (between-graph replication, batch 2), after two steps' warm-up: what the gates' ops cost
    the PS."""
    import threading

    import tensorflow as tf

    from tfsched.bench.local import LocalCluster
    from tfsched.bench.profile import task_cpu_s
    from tfsched.enforce.crossing import CrossingRunner
    from tfsched.models import build_graph

    options = tf.compat.v1.RunOptions(timeout_in_ms=300_000)
    out = {}
    with LocalCluster(ps=1, workers=workers) as cluster:
        pid = cluster.procs[("ps", 0)].pid
        for how in ("behind", "across"):
            builts = [
                build_graph(
                    model, batch_size=2, worker_task=w, cross_workers=workers if how == "across" else 0
                )
                for w in range(workers)
            ]
            sessions = [
                tf.compat.v1.Session(cluster.target("worker", w), graph=b.graph) for w, b in enumerate(builts)
            ]
            try:
                sessions[0].run(builts[0].init_op)
                if how == "across":
                    runners = [
                        CrossingRunner(s, b.crossing, options=options)
                        for s, b in zip(sessions, builts, strict=True)
                    ]
                    for r in runners:
                        r.prime()
                    work = [lambda n, r=r: r.run(n) for r in runners]
                else:
                    work = [
                        lambda n, s=s, b=b: [s.run(b.train_op, options=options) for _ in range(n)]
                        for s, b in zip(sessions, builts, strict=True)
                    ]

                def together(n: int, work=work) -> None:
                    errors = []

                    def each(fn) -> None:
                        try:
                            fn(n)
                        except BaseException as e:  # noqa: BLE001 - raised below
                            errors.append(e)

                    threads = [threading.Thread(target=each, args=(fn,)) for fn in work]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
                    if errors:
                        raise errors[0]

                together(2)
                before = task_cpu_s([pid])
                together(steps)
                out[how] = (task_cpu_s([pid]) - before) / steps
            finally:
                for s in sessions:
                    s.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="mobilenet")
    ap.add_argument("--workers", type=positive(int), default=4)
    ap.add_argument("--name")
    ap.add_argument(
        "--cpu-steps",
        type=positive(int),
        help="also the PS's CPU a step over this many steps, behind and across",
    )
    args = ap.parse_args()
    from tfsched.models import build_graph

    behind = build_graph(args.model, batch_size=2)
    across = build_graph(args.model, batch_size=2, cross_workers=args.workers)
    step = across.crossing
    ops = {
        "behind": by_task(step_ops([behind.train_op])),
        "across": by_task(step_ops([step.compute_op, step.apply_op])),  # both runs of a step
    }
    tasks = sorted(set(ops["behind"]) | set(ops["across"]))
    added = {t: ops["across"].get(t, Counter()) - ops["behind"].get(t, Counter()) for t in tasks}
    sent = messages(args.model)
    variables = len(step.variables)
    result = {
        "benchmark": "crossing_ops",
        "machine": machine(),
        "model": args.model,
        "workers": args.workers,
        "variables": variables,
        "ops": {run: {t: dict(c) for t, c in by.items()} for run, by in ops.items()},
        "added": {t: dict(c.most_common()) for t, c in added.items()},
        "messages_one_worker": sent,
    }
    if args.cpu_steps:
        result["ps_cpu_s_per_step"] = ps_cpu(args.model, args.workers, args.cpu_steps)
    total = {run: {t: sum(c.values()) for t, c in by.items()} for run, by in ops.items()}
    ps = sum(added.get("ps:0", Counter()).values())
    md = [
        f"# What a step across the barrier adds: {args.model}, worker 0's graph for {args.workers} workers",
        "",
        f"{variables} variables with a gradient. Ops one worker's step runs on each task, behind the barrier "
        "(its training op) and across it (its compute and apply runs), from `build_graph(cross_workers=N)`:",
        "",
        "| | " + " | ".join(tasks) + " |",
        "|---|" + "---|" * len(tasks),
        *(f"| {run} | " + " | ".join(str(total[run].get(t, 0)) for t in tasks) + " |" for run in total),
        "",
        f"Across the barrier each worker's step runs {ps} more ops on the PS, {ps / variables:.1f} a variable, "
        f"so {args.workers} workers {args.workers * ps} more a step. By type: "
        + ", ".join(f"{k} {v}" for k, v in added.get("ps:0", Counter()).most_common())
        + ".",
        "",
        "One real step of 1 PS x 1 worker, from the partition graphs TensorFlow ran (after Grappler's "
        f"rewrites; both runs across the barrier): {sent['behind']['messages']} messages between the tasks "
        f"behind the barrier, {sent['across']['messages']} across it; ops on the PS "
        f"{sent['behind']['ops'].get('ps:0', 0)} and {sent['across']['ops'].get('ps:0', 0)}, on the worker "
        f"{sent['behind']['ops'].get('worker:0', 0)} and {sent['across']['ops'].get('worker:0', 0)}.",
    ]
    if args.cpu_steps:
        cpu = result["ps_cpu_s_per_step"]
        md += [
            "",
            f"The PS's CPU a step of {args.workers} workers (1 PS x {args.workers} workers on this machine, batch 2, "
            f"{args.cpu_steps} steps after two): {cpu['behind']:.4f} s behind the barrier, {cpu['across']:.4f} s "
            f"across it ({cpu['across'] - cpu['behind']:+.4f} s).",
        ]
    write(args.name or f"crossing-ops-{args.model}", result, md)


if __name__ == "__main__":
    main()
