"""Random PS graphs trained with tfsched and without on a real cluster: how many are bitwise the same.

The built-in models are chains and fans of layers; a random graph is not. Each step's workers read
a random set of variables (ref and resource, on two PS, vectors and matrices, some large enough to
be sliced) and build on them with conditionals, while loops, control dependencies, ops placed back
on a PS and another worker's tensors; one of four optimizers applies the gradients. Each graph is
trained three steps and run once for its loss alone (a pruned step) without tfsched, again
without it, and with tfsched (``--tfsched-runs`` times) under one of the pass's settings in turn
(``SETTINGS``, by seed). Its losses and final variables are compared byte for byte.

A graph is *same* when every tfsched run is TensorFlow's to the last bit. *vanilla differs* when
TensorFlow's own two runs differ (a read that races its variable's update: nothing to compare
with). Where a tfsched run is not TensorFlow's though TensorFlow's two agree, TensorFlow runs it
``--slow-tries`` times more on a cluster whose links add 2 ms (relays, ``bench.relay``),
``--traced-tries`` times with every step traced, and ``--one-slow-tries`` times on each cluster
whose links add 2 ms at one task alone (which changes the order tensors arrive in): *vanilla
varies* as soon as one of those is not its first result either (TensorFlow's own result depends
on when tensors arrive, which tfsched changes by design: ``benchmarks/recv_race.py``); else
*different*: a case to look into. *error*: a run failed.
``tests/enforce/test_random_graphs.py`` trains fourteen of them in CI.

    python benchmarks/random_graphs.py [--seeds 0:200] [--extended] [--tfsched-runs 1]
        [--slow-tries 12] [--traced-tries 8] [--one-slow-tries 4] --name NAME

Writes ``benchmarks/results/<name>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, write  # noqa: E402

# the pass's settings, one a graph in turn (``tfsched.enable``'s keywords)
SETTINGS = [
    {},
    {"partition": 1000},
    {"credit": 5000},
    {"partition": 500, "credit": 2000},
    {"ready": True},
    {"host_credit": True, "credit": 4000},
    {"inline_transfers": False},
    {"partition": 500, "credit": 2000, "ack_group": 4},
    {"credit": 3000, "credit_return": "sent"},
    {"partition": 700, "credit": 3000, "push_credit": 2000},
]
# where TensorFlow's own result is checked against timing: links of 1 Gbit/s that add 2 ms (every
# task's, or one task's)
SLOW_BPS = 1e9
SLOW_LATENCY_S = 0.002
TASKS = [("ps", 0), ("ps", 1), ("worker", 0), ("worker", 1)]  # the clusters' tasks
WIDTH = 8  # every tensor the workers build is a vector this long
STEPS = 3


# the op kinds a worker builds with; ``extended`` graphs also sum several tensors (an AddN,
# sent on as any tensor), sum received tensors on a PS and send the sum back, and read rows of a
# variable (a gather: its gradient is sparse, IndexedSlices, applied by a sparse update)
KINDS = ["add", "mul", "matmul", "cond", "while", "control", "on_ps", "fill"]
EXTENDED_KINDS = [*KINDS, "sum", "sum_on_ps", "gather"]


def random_graph(seed: int, tag: str, extended: bool = False):
    """A random PS training graph: (graph, train op, loss, init op, the variables' values, what it
    is). ``tag`` names its variables apart from other graphs' on the same cluster, whose PS
    keep ref variables by name. ``extended`` draws from ``EXTENDED_KINDS`` (the graphs of a seed
    without it stay those of the sessions before it)."""
    import tensorflow as tf

    rng = np.random.RandomState(seed)
    g = tf.Graph()
    with g.as_default():
        variables = []
        for k in range(rng.randint(1, 10)):
            shape = [int(rng.choice([WIDTH, 16, 64, 3000, 20000]))]
            if rng.rand() < 0.4:
                shape = [shape[0] // WIDTH, WIDTH]
            with tf.device(f"/job:ps/task:{rng.randint(2)}"):
                variables.append(
                    tf.compat.v1.get_variable(
                        f"{tag}_{seed}_v{k}",
                        shape,
                        initializer=tf.compat.v1.random_uniform_initializer(-1, 1, seed=k),
                        use_resource=bool(rng.rand() < 0.7),
                    )
                )
        matrices = [v for v in variables if v.shape.rank == 2 and v.shape[0] >= WIDTH]
        workers = int(rng.choice([1, 2]))
        outs, produced = [], []
        for w in range(workers):
            with tf.device(f"/job:worker/task:{w}"):
                pool = [
                    tf.reshape(variables[v], [-1])[:WIDTH]
                    for v in rng.permutation(len(variables))[: rng.randint(1, len(variables) + 1)]
                ]
                if produced and rng.rand() < 0.5:
                    pool.append(produced[rng.randint(len(produced))])  # another worker's tensor
                for _ in range(rng.randint(1, 12)):
                    kind = rng.choice(EXTENDED_KINDS if extended else KINDS)
                    a, b = pool[rng.randint(len(pool))], pool[rng.randint(len(pool))]
                    if kind == "add":
                        x = a + b
                    elif kind == "mul":
                        x = a * tf.tanh(b)
                    elif kind == "matmul" and matrices:
                        m = matrices[rng.randint(len(matrices))][:WIDTH]
                        x = tf.reshape(tf.matmul(tf.reshape(a, [1, WIDTH]), m), [WIDTH])
                    elif kind == "cond":
                        x = tf.cond(tf.reduce_sum(a) > 0, lambda a=a, b=b: a * 2.0 + b, lambda a=a: a - 1.0)
                    elif kind == "while":
                        _, x = tf.while_loop(
                            lambda i, y: i < 3, lambda i, y, b=b: (i + 1, y * 0.9 + b * 0.01), [0, a]
                        )
                    elif kind == "control":
                        with tf.control_dependencies([b]):
                            x = tf.identity(a) * 1.5
                    elif kind == "on_ps":  # a worker's tensor to a PS and back
                        with tf.device(f"/job:ps/task:{rng.randint(2)}"):
                            x = a * 3.0 - b
                    elif kind == "sum":
                        x = tf.add_n([pool[i] for i in rng.randint(len(pool), size=rng.randint(3, 6))])
                    elif kind == "sum_on_ps":  # received tensors summed on a PS, sent back
                        with tf.device(f"/job:ps/task:{rng.randint(2)}"):
                            x = tf.add_n([a, b, pool[rng.randint(len(pool))]]) * 0.5
                    elif kind == "gather":
                        v = variables[rng.randint(len(variables))]
                        rows = rng.randint(int(v.shape[0]), size=WIDTH if v.shape.rank == 1 else 1)
                        with tf.device(v.device):  # a gather goes with its variable
                            got = tf.gather(v, rows.tolist())
                        x = tf.reshape(got, [-1])[:WIDTH] * tf.tanh(a)
                    else:
                        x = tf.fill([WIDTH], tf.reduce_sum(a * b))
                    pool.append(x)
                # every tensor in the loss, so that each read comes before its variable's update
                outs.append(
                    tf.reduce_sum(tf.square(pool[-1])) + tf.add_n([tf.reduce_sum(p) * 0.01 for p in pool])
                )
                produced.append(pool[-1])
        loss = tf.add_n(outs)
        name = str(rng.choice(["sgd", "momentum", "adam", "adagrad"]))
        optimizer = {
            "sgd": lambda: tf.compat.v1.train.GradientDescentOptimizer(0.01),
            "momentum": lambda: tf.compat.v1.train.MomentumOptimizer(0.01, 0.9),
            "adam": lambda: tf.compat.v1.train.AdamOptimizer(0.01),
            "adagrad": lambda: tf.compat.v1.train.AdagradOptimizer(0.01),
        }[name]()
        train = optimizer.minimize(loss, colocate_gradients_with_ops=True)
        init = tf.compat.v1.global_variables_initializer()
        values = [v.read_value() for v in tf.compat.v1.global_variables()]  # slots too
    return g, train, loss, init, values, f"{len(variables)} variables, {workers} workers, {name}"


def trained(target, seed: int, config, tag: str, extended: bool = False, traced: bool = False):
    """(each step's loss, the final variables) as bytes, the gates the first step ran, and what
    the graph is. ``traced``: every step with ``FULL_TRACE``, which changes when ops run and
    tensors arrive (the step stats are not kept)."""
    import tensorflow as tf

    g, train, loss, init, values, what = random_graph(seed, tag, extended)
    level = tf.compat.v1.RunOptions.FULL_TRACE if traced else tf.compat.v1.RunOptions.NO_TRACE
    options = tf.compat.v1.RunOptions(timeout_in_ms=20_000, trace_level=level)
    first = tf.compat.v1.RunOptions(timeout_in_ms=20_000, trace_level=level, output_partition_graphs=True)
    first_md = tf.compat.v1.RunMetadata()

    def md(step: int):  # the first step's, else a throwaway one where traced
        return first_md if step == 0 else (tf.compat.v1.RunMetadata() if traced else None)

    with tf.compat.v1.Session(target, graph=g, config=config) as sess:
        sess.run(init, options=options, run_metadata=md(-1))
        losses = []
        for k in range(STEPS):
            _, x = sess.run([train, loss], options=first if k == 0 else options, run_metadata=md(k))
            losses.append(np.asarray(x).tobytes())
        pruned = sess.run(loss, options=options, run_metadata=md(-1))
        losses.append(np.asarray(pruned).tobytes())
        final = [np.asarray(x).tobytes() for x in sess.run(values, options=options, run_metadata=md(-1))]
    gates = sum(n.op == "TfschedGate" for pg in first_md.partition_graphs for n in pg.node)
    return (losses, final), gates, what


def strict():
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto()
    config.graph_options.rewrite_options.fail_on_optimizer_errors = True
    return config


def compare(target, seed: int, perturbed=None, extended: bool = False, runs: int = 1) -> tuple[str, int, str]:
    """(same | different | vanilla differs | vanilla varies, the gates tfsched's first step ran,
    what the graph is). tfsched trains the graph ``runs`` times: it is the same only if every run
    is TensorFlow's. Where one is not though TensorFlow's own two runs agree, TensorFlow trains it
    again where ``perturbed()`` says (its (target, traced) pairs, in turn: a cluster whose links
    add latency, with every step traced): *vanilla varies* as soon as one of those is not its
    first result either (TensorFlow's own result depends on when tensors arrive, which tfsched
    changes by design; ``benchmarks/recv_race.py`` shows one way)."""
    import tfsched

    vanilla, _, what = trained(target, seed, strict(), "vanilla", extended)
    again, _, _ = trained(target, seed, strict(), "again", extended)
    settings = SETTINGS[seed % len(SETTINGS)]
    config = tfsched.enable(strict(), strict=True, **settings)
    scheduled, gates, _ = trained(target, seed, config, "tfsched", extended)
    if vanilla != again:  # nothing to compare with: no more runs
        return "vanilla differs", gates, what
    if scheduled == vanilla and all(
        trained(target, seed, config, f"tfsched{k}", extended)[0] == vanilla for k in range(1, runs)
    ):
        return "same", gates, what
    for k, (where, traced) in enumerate(perturbed() if perturbed else ()):
        if trained(where, seed, strict(), f"perturbed{k}", extended, traced)[0] != vanilla:
            return "vanilla varies", gates, what
    return "different", gates, what


def _seeds(text: str) -> range:
    first, _, last = text.partition(":")
    try:
        seeds = range(int(first), int(last))
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be FIRST:END, got {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError(f"no seed in {text!r}")
    return seeds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=_seeds, default=_seeds("0:200"), help="FIRST:END (default 0:200)")
    parser.add_argument("--name", required=True, help="results/<name>.json and .md")
    parser.add_argument(
        "--tfsched-runs",
        type=positive(int),
        default=1,
        help="tfsched trains each graph this many times; the same only if every run is (default 1)",
    )
    parser.add_argument(
        "--slow-tries",
        type=int,
        default=12,
        help="where tfsched's result differs, TensorFlow's runs on links that add 2 ms (default 12)",
    )
    parser.add_argument(
        "--traced-tries",
        type=int,
        default=8,
        help="where tfsched's result differs, TensorFlow's runs with every step traced (default 8)",
    )
    parser.add_argument(
        "--one-slow-tries",
        type=int,
        default=4,
        help="where tfsched's result differs, TensorFlow's runs with one task's links slow, for "
        "each task (default 4)",
    )
    parser.add_argument(
        "--extended",
        action="store_true",
        help="graphs drawn from EXTENDED_KINDS: sums, sums on a PS, gathers",
    )
    opts = parser.parse_args()
    for flag in ("slow_tries", "traced_tries", "one_slow_tries"):
        if getattr(opts, flag) < 0:
            parser.error(f"--{flag.replace('_', '-')} must be 0 or more, got {getattr(opts, flag)}")

    from tfsched.bench.local import LocalCluster
    from tfsched.enforce.build import current_build_id
    from tfsched.errors import cause_line

    build = current_build_id()  # what the tasks load as they start, whatever the sources become
    graphs = []
    with contextlib.ExitStack() as stack:

        def slow_target(shaped=None) -> str:  # TensorFlow's own tasks, on links that add 2 ms
            return stack.enter_context(
                LocalCluster(
                    ps=2,
                    workers=2,
                    vanilla=True,
                    bandwidth_bps=SLOW_BPS,
                    latency_s=SLOW_LATENCY_S,
                    shaped=shaped,
                )
            ).target("worker", 0)

        target = stack.enter_context(LocalCluster(ps=2, workers=2)).target("worker", 0)
        slow = slow_target()
        one_slow = {}  # task -> a cluster whose links are slow at that task alone, once needed

        def one_slow_target(task) -> str:
            if task not in one_slow:
                one_slow[task] = slow_target(shaped=(task,))
            return one_slow[task]

        def perturbed():
            yield from ((slow, False) for _ in range(opts.slow_tries))
            yield from ((target, True) for _ in range(opts.traced_tries))
            for task in TASKS:
                yield from ((one_slow_target(task), False) for _ in range(opts.one_slow_tries))

        for seed in opts.seeds:
            started = time.monotonic()
            try:
                verdict, gates, what = compare(
                    target, seed, perturbed, extended=opts.extended, runs=opts.tfsched_runs
                )
            except Exception as e:  # noqa: BLE001 - a run that failed is a result too
                verdict, gates, what = "error", 0, cause_line(e)
            settings = SETTINGS[seed % len(SETTINGS)]
            graphs.append(
                {"seed": seed, "verdict": verdict, "gates": gates, "graph": what, "settings": settings}
            )
            print(
                f"seed {seed}: {verdict} ({what}; {gates} gates; {settings}; "
                f"{time.monotonic() - started:.1f} s)",
                flush=True,
            )
    counts = {
        v: sum(g["verdict"] == v for g in graphs)
        for v in ("same", "different", "vanilla differs", "vanilla varies", "error")
    }
    lines = [
        f"# Random PS graphs{' (extended)' if opts.extended else ''}, tfsched against TensorFlow "
        f"({len(graphs)} graphs, seeds {opts.seeds.start} to {opts.seeds.stop - 1})",
        "",
        f"`python benchmarks/random_graphs.py --seeds {opts.seeds.start}:{opts.seeds.stop}"
        f"{' --extended' if opts.extended else ''} --tfsched-runs {opts.tfsched_runs} "
        f"--slow-tries {opts.slow_tries} --traced-tries {opts.traced_tries} "
        f"--one-slow-tries {opts.one_slow_tries} --name {opts.name}`; "
        f"{machine()['cpus']} cores ({machine()['platform']}); tfsched build {build}.",
        "",
        "| verdict | graphs |",
        "|---|---|",
        *(f"| {v} | {k} |" for v, k in counts.items()),
        "",
        "Graphs not the same:",
        "",
        *(
            f"- seed {g['seed']}: {g['verdict']} ({g['graph']}; {g['gates']} gates; {g['settings']})"
            for g in graphs
            if g["verdict"] != "same"
        ),
    ]
    write(
        opts.name,
        {
            "machine": machine(),
            "tfsched_build": build,
            "options": {
                "seeds": [opts.seeds.start, opts.seeds.stop],
                "extended": opts.extended,
                "tfsched_runs": opts.tfsched_runs,
                "slow_tries": opts.slow_tries,
                "traced_tries": opts.traced_tries,
                "one_slow_tries": opts.one_slow_tries,
            },
            "counts": counts,
            "graphs": graphs,
        },
        lines,
    )


if __name__ == "__main__":
    main()
