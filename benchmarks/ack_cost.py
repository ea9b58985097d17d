"""What an acknowledgement costs the machine, past the message it acknowledges.

A PS and one worker (``bench.local.LocalCluster``, each a process, on loopback as it is); each
step the worker pulls one variable of ``--params`` float32 parameters and sums it. Four ways,
each ``--steps`` steps a round, in a random order every round, ``--rounds`` rounds:

* ``whole``: without tfsched's pass (the variable in one message);
* ``cut``: the pass's partition of ``--partition`` parameters (ByteScheduler's 1,000,000), no
  credit: the slices go as their gates release them and ``TfschedConcat`` puts them together;
* ``acked``: the same with ByteScheduler's credit (``--credit``): every slice is acknowledged,
  the receiver sending a scalar back that gives the slice's credit back to the PS;
* ``sent``: the same credit returned once the PS's transport is done with the slice
  (``enable(credit_return="sent")``): no acknowledgement.

For each: the CPU seconds the two task processes spent a step and their threads' context
switches a step (``/proc/PID/task/*/status``). ``acked`` over ``sent``, over the acknowledgements
a step (the gates' ``acked`` counter), is what one costs, where the bench measures a message
among many sent at once (``bench.run``'s ``comm_cpu_s_per_message``). The bench measures the
``acked`` against ``sent`` part on its own cluster with small slices (``bench.run.ack_cpu_s``)
for its CPU floor; this shows the rest beside it, and the context switches.

    python benchmarks/ack_cost.py [--params 16000000] [--steps 20] [--rounds 12] --name NAME

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

WAYS = ("whole", "cut", "acked", "sent")
STEP_TIMEOUT_MS = 120_000  # a step that takes longer fails
PS, WORKER = "/job:ps/replica:0/task:0/device:CPU:0", "/job:worker/replica:0/task:0/device:CPU:0"


def switches(pids: list[int]) -> int:
    """The voluntary and involuntary context switches of every thread of ``pids`` so far."""
    n = 0
    for pid in pids:
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for t in threads:
            try:
                with open(f"/proc/{pid}/task/{t}/status") as f:
                    n += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
            except OSError:  # a thread that ended meanwhile
                pass
    return n


def configs(tf, opts) -> dict:
    import tfsched

    cut = {"partition": opts.partition, "strict": True}
    configs = {
        "whole": tf.compat.v1.ConfigProto(),
        "cut": tfsched.enable(**cut),
        "acked": tfsched.enable(credit=opts.credit, **cut),
        "sent": tfsched.enable(credit=opts.credit, credit_return="sent", **cut),
    }
    for config in configs.values():
        config.operation_timeout_in_ms = STEP_TIMEOUT_MS  # no step waits forever
    return configs


def measure(opts) -> dict:
    from tfsched.bench.local import LocalCluster
    from tfsched.bench.profile import task_cpu_s
    from tfsched.enforce import stats
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    tf1 = tf.compat.v1
    graph = tf1.Graph()
    with graph.as_default():
        with tf1.device(PS):
            v = tf1.get_variable("v", [opts.params], initializer=tf1.ones_initializer())
        with tf1.device(WORKER):
            total = tf.reduce_sum(tf.identity(v))
        init = tf1.global_variables_initializer()
    rows: dict[str, list[dict]] = {w: [] for w in WAYS}
    acks_per_step = None
    with LocalCluster(ps=1, workers=1) as cluster:
        target = cluster.target("worker", 0)
        pids = list(cluster.task_pids())  # its PS and worker
        sessions = {w: tf1.Session(target, graph=graph, config=c) for w, c in configs(tf, opts).items()}
        try:
            sessions["whole"].run(init)
            values = {w: s.run(total) for w, s in sessions.items()}  # each sets up its graph
            if len(set(values.values())) != 1:
                raise SystemExit(f"the ways summed the variable differently: {values}")
            for s in sessions.values():
                for _ in range(3):
                    s.run(total)
            before = stats(target, PS)["acked"]
            for _ in range(opts.steps):
                sessions["acked"].run(total)
            acks_per_step = (stats(target, PS)["acked"] - before) / opts.steps
            rng = random.Random(opts.seed)
            for _ in range(opts.rounds):
                order = list(WAYS)
                rng.shuffle(order)
                for w in order:
                    cpu, ctx, wall = task_cpu_s(pids), switches(pids), time.perf_counter()
                    for _ in range(opts.steps):
                        sessions[w].run(total)
                    rows[w].append(
                        {
                            "cpu_s": (task_cpu_s(pids) - cpu) / opts.steps,
                            "switches": (switches(pids) - ctx) / opts.steps,
                            "wall_s": (time.perf_counter() - wall) / opts.steps,
                        }
                    )
        finally:
            for s in sessions.values():
                s.close()
    return {"rounds": rows, "acks_per_step": acks_per_step}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", type=positive(int), default=16_000_000)
    p.add_argument("--partition", type=positive(int), default=1_000_000)
    p.add_argument("--credit", type=positive(int), default=4_000_000)
    p.add_argument("--steps", type=positive(int), default=20)
    p.add_argument("--rounds", type=positive(int), default=12)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--name", required=True)
    opts = p.parse_args()
    got = measure(opts)
    rows, acks = got["rounds"], got["acks_per_step"]

    def med(way: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[way])

    def paired(a: str, b: str, key: str) -> list[float]:  # round by round: the machine's drift cancels
        return [x[key] - y[key] for x, y in zip(rows[a], rows[b], strict=True)]

    ack_cpu = statistics.median(paired("acked", "sent", "cpu_s"))
    ack_ctx = statistics.median(paired("acked", "sent", "switches"))
    slices = -(-opts.params // opts.partition)
    lines = [
        f"# What an acknowledgement costs ({opts.name})",
        "",
        f"`python benchmarks/ack_cost.py --params {opts.params} --partition {opts.partition} --credit "
        f"{opts.credit} --steps {opts.steps} --rounds {opts.rounds} --seed {opts.seed} --name {opts.name}`: "
        f"a PS and a worker on loopback, the worker pulling {opts.params:,} parameters a step "
        f"({slices} slices cut); {machine()['cpus']} cores ({machine()['platform']}). Medians over the "
        f"rounds of the task processes' CPU and their threads' context switches a step.",
        "",
        "| way | CPU ms a step | context switches a step | wall ms a step |",
        "|---|---|---|---|",
        *(
            f"| {w} | {med(w, 'cpu_s') * 1e3:.1f} | {med(w, 'switches'):.0f} | {med(w, 'wall_s') * 1e3:.1f} |"
            for w in WAYS
        ),
        "",
        f"The gates acknowledged {acks:g} slices a step. Round by round, `acked` spent a median "
        f"{ack_cpu * 1e3:.2f} ms of CPU and {ack_ctx:.0f} context switches a step more than `sent`"
        + (
            f": {ack_cpu / acks * 1e3:.3f} ms and {ack_ctx / acks:.1f} switches an acknowledgement."
            if acks
            else "."
        ),
        f"`cut` over `whole` (its {slices - 1} more messages and the copy of the slices back into one "
        f"tensor): {statistics.median(paired('cut', 'whole', 'cpu_s')) * 1e3:.2f} ms a step.",
    ]
    write(
        opts.name,
        {
            "machine": machine(),
            "options": vars(opts),
            "acks_per_step": acks,
            "ack_cpu_s": ack_cpu / acks if acks else None,
            "ack_switches": ack_ctx / acks if acks else None,
            "rounds": rows,
        },
        lines,
    )


if __name__ == "__main__":
    main()
