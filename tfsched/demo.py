"""``tfsched demo``: a built-in model's PS graph, analyzed with every algorithm."""

from __future__ import annotations

import os
import tempfile

from rich.console import Console
from rich.table import Table


def run_demo(*, model: str = "vgg16", bandwidth_bps: float = 1e9, workers: int = 2) -> dict[str, float]:
    """Build the graph, save it, analyze it as a user would; returns predicted step times."""
    from tfsched.analysis import analyze
    from tfsched.models import build_graph

    console = Console()
    with console.status(f"building the PS training graph of {model}"):
        built = build_graph(model)
        with tempfile.TemporaryDirectory(prefix="tfsched-demo-") as d:
            path = os.path.join(d, f"{model}.pb")
            with open(path, "wb") as f:
                f.write(built.graph_def().SerializeToString())
            results = {}
            for alg in ("fifo", "layer", "tio", "tao"):
                a = analyze(
                    path, fetches=built.fetches, algorithm=alg, bandwidth_bps=bandwidth_bps, workers=workers
                )
                results[alg] = a
    first = results["tao"]
    g = first.graph
    console.print(
        f"[bold]{model}[/]: {len(g.graph)} ops per step, {len(g.transfers)} transfers "
        f"({sum(t.bytes or 0 for t in g.transfers) / 1e6:.1f} MB), {workers} workers, "
        f"{bandwidth_bps / 1e9:g} Gbit/s per host"
    )
    table = Table(title="Predicted step time by ordering (simulator)", title_justify="left")
    for col in ("order", "gate mode", "step (s)", "vs baseline", "E"):
        table.add_column(col, justify="left" if col in ("order", "gate mode") else "right")
    base = results["tao"].prediction.baseline_s
    table.add_row(
        "baseline: FIFO, ties in random order",
        "none",
        f"{base:.4f}",
        "1.000x",
        f"{results['tao'].prediction.baseline_efficiency:.3f}",
    )
    labels = {
        "fifo": "FIFO, graph order",
        "layer": "layer (ByteScheduler)",
        "tio": "TIO (TicTac)",
        "tao": "TAO (TicTac)",
    }
    for alg, a in results.items():
        p = a.prediction
        table.add_row(
            labels[alg],
            a.schedule.mode,
            f"{p.scheduled_s:.4f}",
            f"{base / p.scheduled_s:.3f}x",
            f"{p.efficiency:.3f}",
        )
    console.print(table)
    console.print(
        f"speedup bound S = {first.prediction.speedup_bound:.3f} (TicTac §3.1: how much ordering could gain at most)"
    )
    return {alg: a.prediction.scheduled_s for alg, a in results.items()}
