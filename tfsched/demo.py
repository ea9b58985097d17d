"""``tfsched demo``: a built-in model, analyzed offline, then trained on a real local cluster
(PS and workers as separate processes) with and without tfsched, side by side.

The cluster's hosts have links of the bandwidth the analysis predicts for: emulated with
namespaces and ``tc`` where this process may (root, iproute2), else shaped by relays in user
space (``bench.relay``), so that the measured and the predicted step are of the same cluster.
Until the twenty-fifth session the demo trained on unshaped loopback, where the link is several
times faster than the one predicted for and there is little for an order to win."""

from __future__ import annotations

import os
import tempfile

from rich.console import Console
from rich.table import Table

# vanilla TensorFlow; TicTac's TIO; TAO with ByteScheduler's partitioning and a credit window per
# sending task; the same across TensorFlow's barrier (tfsched.enforce.crossing), served by
# priority among the transfers arrived, as the crossing needs
DEMO_MODES = ("baseline", "tio", "tao+pc+host", "tao+pc+host+ready+cross")


def run_demo(
    *,
    model: str = "vgg16",
    bandwidth_bps: float = 1e9,
    workers: int = 2,
    steps: int = 3,
    rounds: int = 2,
    modes: tuple[str, ...] = DEMO_MODES,
    train: bool = True,
    batch_size: int = 4,
    shaped: bool = True,
) -> dict:
    """Returns the predicted step times and, when ``train``, the measured ones (on links of
    ``bandwidth_bps``, or with ``shaped=False`` on loopback as it is)."""
    from tfsched.analysis import analyze_graph
    from tfsched.graph import load_comm_graph
    from tfsched.models import build_graph
    from tfsched.oracle import LinkModel, TimeOracle
    from tfsched.units import check_link_times

    check_link_times(bandwidth_bps)  # before the graph is built

    console = Console()
    if not console.is_terminal:  # a file or a pipe (Rich's 80 columns): the tables' rows whole
        console = Console(width=max(console.width, 110))
    with console.status(f"building the PS training graph of {model}"):
        built = build_graph(model, batch_size=batch_size)
        with tempfile.TemporaryDirectory(prefix="tfsched-demo-") as d:
            path = os.path.join(d, f"{model}.pb")
            with open(path, "wb") as f:
                f.write(built.graph_def().SerializeToString())
            graph = load_comm_graph(path, fetches=built.fetches)  # once, for every algorithm
    oracle = TimeOracle.from_cost_model(graph, link=LinkModel(bandwidth_bps=bandwidth_bps))
    results = {
        alg: analyze_graph(graph, oracle, algorithm=alg, workers=workers)
        for alg in ("fifo", "layer", "tio", "tao")
    }
    first = results["tao"]
    g = first.graph
    console.print(
        f"[bold]{model}[/]: {len(g.graph)} ops per step, {len(g.transfers)} transfers "
        f"({sum(t.bytes or 0 for t in g.transfers) / 1e6:.1f} MB), {workers} workers, "
        f"{bandwidth_bps / 1e9:g} Gbit/s per host"
    )
    table = Table(title="1. Predicted step time by ordering (simulator)", title_justify="left")
    for col in ("order", "gate mode", "step (s)", "vs baseline", "E"):
        table.add_column(col, justify="left" if col in ("order", "gate mode") else "right")
    base = first.prediction.baseline_s
    table.add_row(
        "baseline: FIFO, ties in random order",
        "none",
        f"{base:.4f}",
        "1.000x",
        f"{first.prediction.baseline_efficiency:.3f}",
    )
    labels = {
        "fifo": "FIFO, graph order",
        "layer": "layer (ByteScheduler)",
        "tio": "TIO (TicTac)",
        "tao": "TAO (TicTac)",
    }
    # the modes to measure that partition and credit (ByteScheduler), sized as the bench sizes them
    from tfsched.bench.run import parse_mode

    specs = {m: parse_mode(m, bandwidth_bps, graph.busiest_channel_params) for m in modes}
    for m, spec in specs.items():
        if spec.algorithm is not None and (spec.partition or spec.credit or spec.cross):
            results[m] = analyze_graph(
                graph,
                oracle,
                algorithm=spec.algorithm,
                workers=workers,
                partition=spec.partition,
                credit=spec.credit,
                host_credit=spec.host_credit,
                host_order=spec.host_order,
                ack_share=spec.effective_ack_share,
                credit_return=spec.credit_return,
                push_credit=spec.push_credit,
                # as a round of the training below lays them out (bench.predict)
                cross_steps=steps if spec.cross else 0,
            )
            labels[m] = (
                labels[spec.algorithm].split(" (")[0]
                + (
                    f", partition {spec.partition:,}, credit {spec.credit:,}"
                    if spec.partition or spec.credit
                    else ""
                )
                + (" (one window per sending task)" if spec.host_credit else "")
                + (", in lockstep" if spec.host_order == "priority" else "")
                + (f", pushes {spec.push_credit:,}" if spec.push_credit else "")
                + (", across the barrier" if spec.cross else "")
            )
    for alg, a in results.items():
        p = a.prediction
        table.add_row(
            labels[alg],
            "ready" if alg in specs and specs[alg].ready else a.schedule.mode,
            f"{p.scheduled_s:.4f}",
            f"{base / p.scheduled_s:.3f}x",
            f"{p.efficiency:.3f}",
        )
    console.print(table)
    console.print(
        f"speedup bound S = {first.prediction.speedup_bound:.3f} (TicTac §3.1: the most ordering could gain)"
    )
    if first.prediction.floor_s > 0:
        console.print(
            f"floor = {first.prediction.floor_s:.4f} s: no order"
            + (" behind the barrier" if any(spec.cross for spec in specs.values()) else "")
            + " steps faster, at most "
            f"{base / first.prediction.floor_s:.3f}x the baseline (the dependencies and each resource)"
        )
    out = {"predicted": {alg: a.prediction.scheduled_s for alg, a in results.items()}}
    if not train:
        return out

    from tfsched.bench.netns import available
    from tfsched.bench.run import cluster_side_by_side

    relays = shaped and available() is not None
    if not shaped:
        where = "on loopback, unshaped"
    elif relays:
        where = f"on loopback, each with a {bandwidth_bps / 1e9:g} Gbit/s link shaped by relays in user space"
    else:
        where = f"each in its own network namespace, its link shaped to {bandwidth_bps / 1e9:g} Gbit/s"
    from tfsched.progress import progress_bar

    with progress_bar(console, "training on a local cluster") as (say, done):
        measured = cluster_side_by_side(
            model,
            workers=workers,
            ps=1,
            modes=modes,
            steps=steps,
            rounds=rounds,
            batch_size=batch_size,
            bandwidth_bps=bandwidth_bps if shaped else None,
            relays=relays,
            progress=say,
            done=done,
        )
    table = Table(
        title=f"2. Measured on a local cluster: 1 PS + {workers} worker processes {where}, "
        f"{rounds} interleaved rounds of {steps} steps per worker",
        title_justify="left",
    )
    for col in ("mode", "mean (s)", "p95 (s)", "steps/s", "vs base", "slowest (s)", "sim. (s)"):
        # the numbers whole, the mode's name wrapped where the terminal is narrow
        table.add_column(
            col,
            justify="left" if col == "mode" else "right",
            no_wrap=col != "mode",
            overflow="fold" if col == "mode" else "ellipsis",
        )
    b = measured["baseline"].throughput
    for mode, r in measured.items():
        j = r.to_json()
        table.add_row(
            "vanilla TensorFlow" if mode == "baseline" else f"tfsched {mode}",
            f"{j['mean_s']:.4f}",
            f"{j['p95_s']:.4f}",
            f"{r.throughput:.2f}",
            f"{r.throughput / b:.3f}x" if b else "-",
            f"{r.training_step_s:.4f}" + ("*" if specs[mode].cross else ""),
            f"{j['predicted_s']:.4f}" if j.get("predicted_s") else "-",
        )
    console.print(table)
    in_turn = [m for m in measured if specs[m].host_credit and specs[m].host_order == "steps"]
    console.print(
        "straggler effect (TicTac's: how long the first worker to finish a step waits for the last, "
        "over the step): "
        + ", ".join(f"{'vanilla' if m == 'baseline' else m} {r.straggler:.3f}" for m, r in measured.items())
        + (
            f" ({', '.join(in_turn)} {'serve' if len(in_turn) > 1 else 'serves'} the workers in turn: "
            f"{'they stagger' if len(in_turn) > 1 else 'it staggers'} them by design)"
            if in_turn
            else ""
        )
    )
    console.print(
        "slowest: the mean of each step's slowest worker, which the simulator (sim.) predicts"
        + (
            " (*: across the barrier a step runs from the last worker's end of the step before to the "
            "last one's end of its own, and the step is the rounds' wall time over their steps)"
            if any(specs[m].cross for m in measured)
            else ""
        )
        + ". All tasks share this machine's cores, so numbers vary from run to run; `tfsched bench` "
        "and benchmarks/ have repeated, interleaved measurements."
    )
    from tfsched.bench.results import cpu_floor_lines

    # a mode the simulator stepped faster than the baseline's CPU allows on these cores
    held = cpu_floor_lines({"modes": [r.to_json() for r in measured.values()], "cores": os.cpu_count()})
    for line in held[1:]:  # after the blank line a Markdown table's reader gets
        console.print(line)
    base_step = measured["baseline"].training_step_s if "baseline" in measured else 0.0
    full = {m: r.steady_step_s for m, r in measured.items() if r.steady_step_s}
    if full:
        # each round starts and ends the crossing's pipeline empty, which a long training does once
        console.print(
            "once the pipeline is full (a round's steps but its first, which no step before it "
            "overlaps, and its last, which no run after it shares the machine with): "
            + ", ".join(
                f"{m} {s:.4f} s" + (f" ({base_step / s:.3f}x the vanilla step)" if base_step else "")
                for m, s in full.items()
            )
        )
    out["measured"] = {mode: r.to_json() for mode, r in measured.items()}
    return out
