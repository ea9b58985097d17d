"""In what order a step's pulls reach a worker, measured, against the simulator's ``race``.

The simulator predicts vanilla TensorFlow (and every transfer a credit window does not hold)
with ``race``: the messages waiting for a channel go out one after another in a uniform random
order (``sim.engine``). This script checks the order against traced steps. A bench run is kept
with ``--traces DIR -o DIR/bench.json``. For each of its modes, the script reads every trace:
worker 0's, the other workers' (``MODE.worker-K``) and worker 0 alone (``MODE.alone``). In each
traced step it takes the pulls of at least ``MIN_BYTES`` to the worker, ordered by arrival
(start + duration).

Reported per run and mode:
- where the largest pull arrived (its rank from the last, 0 = last), and how often it was last,
  against what a uniform order gives (1/n of the steps);
- Kendall's tau between a pull's size and its rank of arrival. A uniform order gives 0 on
  average; +1 means every pull arrived in size order, the largest last;
- for a mode whose gates ordered the pulls: Kendall's tau between a pull's priority and its
  rank of arrival. The gates release every pull within milliseconds of the step's start, in
  priority order. ``race`` draws their order on the wire at random (tau 0 on average); +1 means
  they arrived in the order released;
- and that tau for the steps in which the worker asked for every pull before its gate let it go
  (its ``_Recv`` started before the gate ended: the processes share one clock) and for the
  others. A request that comes after the release finds its tensor waiting on the sender and is
  answered as it comes, in the order of the worker's requests, not of the gates.

    tfsched bench --model vgg16 --mode inference --ps 1 --workers 4 --bandwidth 1Gbit --steps 3 \\
        --rounds 1 --batch-size 397 --modes baseline,tio --trace-steps 1 --traces DIR -o DIR/bench.json
    python benchmarks/arrival_order.py DIR [DIR ...]

The results file (fifty-sixth session) has three such runs of VGG16, 1 PS x 4 workers at
1 Gbit/s:
- inference at batch 397 (``--trace-steps 1``);
- inference at 708 and training at 201 (``--trace-steps 2``, ``--batch-size 708`` or
  ``--mode train --batch-size 201``).
Their bench results are ``results/bench-vgg16-inference-s56-b397-traced.md``, ``...-b708-traced.md``
and ``results/bench-vgg16-train-s56-b201-traced.md``.

What the three runs found:
- **Vanilla TensorFlow.** The largest pull arrived last in 20 of 26 traced steps, where a uniform
  order puts it last in 1.8. It is VGG16's second dense kernel: 67 MB of inference's 135 MB,
  eight times the next pull. The other pulls came in no order of size (tau +0.12 to +0.27).
  The simulator draws the largest anywhere.
- **TIO.** The gates release the pulls in priority order. In inference they arrived in no order
  of priority (tau +0.28 and -0.02); in training mostly in it (+0.65).
- **A what-if of it.** A large message's HTTP/2 stream may yield to the others between its
  flow-control windows. ``sim.simulate(stream_window_bytes=...)`` models that, off by default.
  ``benchmarks/repredict.py`` predicted the three runs with it:
  ``results/vgg16-inference-s56-b397-traced-repredicted.md``, ``...-b708-...`` and
  ``results/vgg16-train-s56-b201-traced-repredicted.md``.

  | run | mode | now | 32 MiB | 16 MiB |
  |---|---|---|---|---|
  | inference at 397 | baseline | +27% | +7% | -5% |
  | inference at 397 | TIO | +17% | -2% | -11% |
  | inference at 708 | baseline | +1% | -8% | -16% |
  | inference at 708 | TIO | +7% | -6% | -12% |
  | training at 201 | baseline | -1% | -6% | -6% |
  | training at 201 | TIO | -0% | -6% | -6% |

  At 32 MiB the mean absolute error over the six predictions is 5.8% against 8.8%, and the
  largest is 8% against 27%. But the accurate ones move 5 to 9 points too fast. Three runs are
  too few to change every prediction on, and the bench keeps each message whole.

A run of ``tfsched bench --api tf2`` (one trace a mode, every worker's calls in it) is read too:
its TIO gates' priorities are those of the step function its pass dumped (``bench.tf2.solo_round``
runs TIO), and its TIO mode counts worker 0's calls alone beside the others'. Three such runs
(sixty-sixth session, ``results/arrival-order-tf2-s66.md``): VGG16 training on half-core hosts
(``tf2-vgg16-train-hosts``'s command with ``--traces DIR``, ``results/tf2-vgg16-train-hosts-s66.md``),
ResNet-50 training (``tf2-resnet50-train``'s command with ``--rounds 1 --traces DIR``,
``results/tf2-resnet50-train-s66.md``) and ResNet-50 inference (``tfsched bench --api tf2 --model
resnet50 --mode inference --workers 2 --bandwidth 1Gbit --batch-size 16 --steps 2 --rounds 1
--modes baseline,tio --traces DIR -o DIR/bench.json``, ``results/tf2-resnet50-inference-s66-arrival.md``).
What they found:
- **TIO.** In both training runs the pulls arrived in the order the gates released them: tau
  priority-arrival +0.96 to +1.00 in all 14 traced calls of each (VGG16's gates released every
  pull within 140 ms of the call's start). In inference at batch 16, in three of six calls
  (+0.97 to +1.00), not in the others (+0.28 to +0.50). So ``bench.tf2.predict_calls`` keeps
  the released pulls in the order released, where the session bench races them (its steps'
  +0.28, -0.02 and +0.65 above): ``benchmarks/repredict_tf2.py`` of the three runs, mean
  absolute error over their 11 modes 4.6% against 8.5% racing.
- **Vanilla TensorFlow.** As in the sessions' runs: VGG16's largest pull last in 9 of 12 calls
  (a uniform order: 0.8), size and arrival otherwise unrelated (tau +0.09; ResNet-50 +0.04 and
  +0.02).

The four TensorFlow 2 rows of BENCHMARKS.md, run with ``--traces DIR`` (sixty-seventh session,
``results/arrival-order-tf2.md``), say why inference keeps the order in only some calls. In
training the worker asked for every pull before its gate let it go in all 14 traced TIO calls of
ResNet-50 (tau +0.90 to +1.00) and in 13 of 14 of VGG16 on half-core hosts (+0.96 to +0.98; the
other +0.85). In VGG16 inference, 9 of 14 calls had every request in first (8 of them +0.96 to
+0.98) and 5 did not (-0.10 to +0.33): there the idle PS let a call's pulls go within 0.3 ms to
1.7 ms of each other (read from the traces' gate times; not in the results file), before some of
the worker's requests had started. The two-PS row's TIO
tied 28 of its 45 pulls (its tau says nothing; ``tfsched.ordering.tio.assembly_ops``). The
file's fifth run (modes baseline, tio and tao) is that row's command after the change
(``results/tf2-vgg16-inference-2ps-s67-tio.md``): TIO's tau +0.34, +0.76 in the 3 calls whose
requests all came first and +0.23 in the 11 others (late requests in 11 of 14 calls, where
the one-PS row had them in 5 of 14).

Writes ``benchmarks/results/arrival-order.json`` and ``.md`` (``arrival-order-tf2`` for runs of
TensorFlow 2's calls only).
"""

from __future__ import annotations

import glob
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import bench_run, each_run, machine, run_title, write  # noqa: E402

MIN_BYTES = 100_000  # smaller pulls (biases, small kernels) take no time on the wire to speak of


def gate_priorities(trace) -> dict[str, int]:
    """The priority of each gate in the partition graphs ``trace`` ran (none: vanilla)."""
    from tfsched.tracing.replay import partition_graph_defs

    return {
        n.name: n.attr["priority"].i
        for g in partition_graph_defs(trace)
        for n in g.node
        if n.op == "TfschedGate"
    }


def function_priorities(run_dir: str) -> dict[str, int]:
    """A TensorFlow 2 run's gates' priorities, by the tensor each gate forwards: those of the step
    function the pass dumped for worker 0 (``bench.tf2.solo_round``, which runs TIO), so TIO's
    (every worker's calls gate the same tensors)."""
    from tfsched.graph.load import read_graph_file
    from tfsched.tracing.replay import scheduled_tensor

    out = {}
    for path in glob.glob(os.path.join(run_dir, "graphs", "*.gated.pb")):
        for n in read_graph_file(path).graph_def.node:
            if n.op == "TfschedGate":
                out[scheduled_tensor(f"{n.name}:0")] = n.attr["priority"].i
    return out


def step_arrivals(
    trace, by_tensor: dict[str, int] | None = None
) -> list[list[tuple[int, int | None, float, bool | None]]]:
    """Per (traced step, receiving worker): the pulls of at least ``MIN_BYTES``, as (bytes, its
    gate's priority or None, arrival in us, whether the worker asked for it before its gate let
    it go) in the order they arrived; None for the last where no gate's release is traced.
    ``by_tensor``: the priorities by the tensor a gate forwards (``function_priorities``), for a
    trace of TensorFlow 2's calls, which keeps no partition graphs.

    The worker asks when its ``_Recv`` starts (the transfer's start), the gate lets the tensor go
    when it ends: the processes share one clock, so the two compare."""
    from tfsched.tracing.replay import scheduled_tensor

    if by_tensor is None:  # a session's: its gates by name, the transfer's tensor their output
        priority, gate_of = gate_priorities(trace), lambda tensor: tensor.rsplit(":", 1)[0]
    else:
        priority, gate_of = by_tensor, scheduled_tensor
    released = {(o.step, o.node): o.start_us + o.duration_us for o in trace.ops if o.op == "TfschedGate"}
    by_step = defaultdict(list)
    for t in trace.transfers:
        if "/job:ps/" in t.src and "/job:worker/" in t.dst and t.bytes >= MIN_BYTES:
            gate = priority.get(gate_of(t.tensor))
            release = released.get((t.step, t.tensor.rsplit(":", 1)[0]))
            asked_first = None if release is None else t.start_us < release
            by_step[t.step, t.dst].append((t.bytes, gate, t.start_us + t.duration_us, asked_first))
    return [sorted(pulls, key=lambda p: p[2]) for _, pulls in sorted(by_step.items()) if len(pulls) > 1]


def order_stats(steps: list[list[tuple[int, int | None, float, bool | None]]]) -> dict:
    """Where each step's largest pull arrived, and how its sizes (and its gates' priorities)
    correlate with the order; for gated steps, also split by whether the worker had asked for
    every pull before its gate let it go (``asked_first``)."""
    from scipy.stats import kendalltau

    from_last, taus, by_priority, uniform_last = [], [], [], 0.0
    asked = {True: [], False: []}  # the worker asked first for every pull or not -> priority taus
    for pulls in steps:
        sizes = [p[0] for p in pulls]
        largest = max(range(len(sizes)), key=sizes.__getitem__)
        from_last.append(len(sizes) - 1 - largest)
        uniform_last += 1 / len(sizes)
        taus.append(float(kendalltau(sizes, range(len(sizes))).statistic))
        if all(p[1] is not None for p in pulls):
            by_priority.append(float(kendalltau([p[1] for p in pulls], range(len(pulls))).statistic))
            if all(p[3] is not None for p in pulls):
                asked[all(p[3] for p in pulls)].append(by_priority[-1])
    return {
        "steps": len(steps),
        "pulls_per_step": statistics.mean(len(p) for p in steps),
        "largest_last": sum(r == 0 for r in from_last),
        "largest_last_if_uniform": uniform_last,
        "largest_rank_from_last": from_last,
        "tau_mean": statistics.mean(taus),
        "tau": taus,
        "priority_tau_mean": statistics.mean(by_priority) if by_priority else None,
        "priority_tau": by_priority,
        "priority_tau_asked_first": asked[True],
        "priority_tau_asked_late": asked[False],
    }


def compare(run_dir: str) -> dict:
    from tfsched.tracing.trace import Trace

    config, measured = bench_run(run_dir)
    tf2 = config.get("api") == "tf2"
    rows = []
    for mode in measured:
        if tf2:  # one trace a mode, every worker's calls
            paths, by_tensor = [os.path.join(run_dir, f"{mode}.trace.json")], {}
            if mode == "tio":  # its gates are the ones dumped, and worker 0 alone ran it too
                paths.append(os.path.join(run_dir, "solo-round.trace.json"))
                by_tensor = function_priorities(run_dir)
        else:
            paths = sorted(glob.glob(os.path.join(run_dir, f"{mode}.*trace.json")))
            by_tensor = None
        steps = [s for p in paths for s in step_arrivals(Trace.load(p), by_tensor)]
        if steps:
            rows.append({"mode": mode, "traces": len(paths), **order_stats(steps)})
    return {"config": config, "rows": rows}


def markdown(runs: list[dict]) -> list[str]:
    lines = [
        f"In what order a step's pulls of {MIN_BYTES // 1000} KB or more reached their worker, from the traced steps "
        "of every worker (and worker 0 alone), against a uniform random order (the simulator's "
        "`race`: 1/n of the steps have their largest pull last, and Kendall's tau between size "
        "and arrival is 0 on average).",
        "",
        "| run | mode | traced steps | pulls a step | largest pull last (uniform) | its rank from the last "
        "| tau size-arrival, mean (per step) | tau priority-arrival, mean (per step) "
        "| of those, asked before the gates: steps, tau mean | asked later: steps, tau mean |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]

    def group(taus: list[float]) -> str:
        return f"{len(taus)}, {statistics.mean(taus):+.2f}" if taus else "0"

    for run in runs:
        for r in run["rows"]:
            ranks = ", ".join(str(k) for k in r["largest_rank_from_last"])
            taus = ", ".join(f"{t:+.2f}" for t in r["tau"])
            ordered, first, late = "-", "-", "-"
            if r["priority_tau"]:
                each = ", ".join(f"{t:+.2f}" for t in r["priority_tau"])
                ordered = f"{r['priority_tau_mean']:+.2f} ({each})"
                first, late = group(r["priority_tau_asked_first"]), group(r["priority_tau_asked_late"])
            lines.append(
                f"| {run_title(run['config'])} | {r['mode']} | {r['steps']} | {r['pulls_per_step']:.0f} "
                f"| {r['largest_last']} ({r['largest_last_if_uniform']:.1f}) | {ranks} "
                f"| {r['tau_mean']:+.2f} ({taus}) | {ordered} | {first} | {late} |"
            )
    return lines


def main() -> None:
    runs = each_run(__doc__.splitlines()[0], compare)
    # runs of TensorFlow 2's calls only: a file of their own, beside the sessions' runs
    name = "arrival-order-tf2" if all(r["config"].get("api") == "tf2" for r in runs) else "arrival-order"
    write(name, {"machine": machine(), "min_bytes": MIN_BYTES, "runs": runs}, markdown(runs))


if __name__ == "__main__":
    main()
