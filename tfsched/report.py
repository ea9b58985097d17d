"""Human-readable output of the commands (rich tables)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from tfsched.analysis import Analysis, least_acknowledged
from tfsched.graph.devices import short_task
from tfsched.sim.engine import DEFAULT_ACK_SHARE


def _bytes(n: int | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000.0
    return str(n)


def _outside_bounds(e: float) -> str | None:
    """What a traced step's E outside 0..1 says: the step is not between the predicted bounds,
    which are of the slowest worker's step. The times the prediction is made of do not explain
    it (op times traced under another load, say), or, shorter, the traced worker finished
    before the others (served first by one window per sending task); None within.

    >>> _outside_bounds(0.8) is None, _outside_bounds(1.04)[:67]
    (True, 'the traced step is shorter than the predicted lower bound (E 1.040)')
    """
    if 0 <= e <= 1:
        return None
    side = "shorter than the predicted lower bound" if e > 1 else "longer than the predicted upper bound"
    why = "the op times and links the prediction is made of do not explain it"
    if e > 1:
        why += ", or the traced worker finished before the others (the bounds are of the slowest)"
    return f"the traced step is {side} (E {e:.3f}): {why}"


# the advice for a variable that alone moves more than a PS's share
_PARTITION_IT = "partition it over the PS (tf.compat.v1.fixed_size_partitioner)"


def _ps_load_line(
    load: dict[str, int], largest: tuple[str, float] | None = None, planned: float | None = None
) -> str:
    """The bytes each PS exchanges a step, and a warning where the busiest carries more than 1.25
    times an even share: its link bounds the step. ``largest`` is the busiest PS's largest
    variable and the bytes it moves; where it alone moves more than an even share, no placement
    of whole variables can even the load, and the warning says to partition it. Else it points
    to ``--placement``, with ``planned``, the busiest PS's share under that plan.

    >>> _ps_load_line({"/job:ps/task:0": 3_000_000, "/job:ps/task:1": 2_000_000})
    'PS load, bytes a step: ps:0 3.0 MB (60%), ps:1 2.0 MB (40%)'
    >>> print(_ps_load_line({"/job:ps/task:0": 999_000, "/job:ps/task:1": 1_000}, ("w3", 9_000), 0.502))
    PS load, bytes a step: ps:0 999.0 KB (100%), ps:1 1.0 KB (0%); ps:0 carries 100% where an even spread would be 50%, and its link bounds the step: spread the variables by the bytes they move (--placement FILE writes a plan under which the busiest PS carries 50%, and tfsched.ps_strategy(FILE, ps_tasks) is replica_device_setter's ps_strategy for it; round-robin puts every kernel of layers that alternate kernel and bias on one PS)
    >>> print(_ps_load_line({"/job:ps/task:0": 800_000, "/job:ps/task:1": 200_000}, ("fc/kernel", 700_000)))
    PS load, bytes a step: ps:0 800.0 KB (80%), ps:1 200.0 KB (20%); ps:0 carries 80% where an even spread would be 50%, and its link bounds the step: its variable fc/kernel alone moves 70%, which no placement of whole variables evens; partition it over the PS (tf.compat.v1.fixed_size_partitioner)
    """
    total = sum(load.values())
    if not total:
        return "PS load, bytes a step: unknown (no transfer of a known size)"
    line = "PS load, bytes a step: " + ", ".join(
        f"{short_task(task)} {_bytes(n)} ({n / total:.0%})" for task, n in load.items()
    )
    busiest = max(load, key=load.get)
    share, even = load[busiest] / total, 1 / len(load)
    if share > 1.25 * even:
        line += (
            f"; {short_task(busiest)} carries {share:.0%} where an even spread would be {even:.0%}, and its "
        )
        if largest and largest[1] / total > even:
            line += (
                f"link bounds the step: its variable {largest[0]} alone moves {largest[1] / total:.0%}, "
                f"which no placement of whole variables evens; {_PARTITION_IT}"
            )
        else:
            under = f" under which the busiest PS carries {planned:.0%}," if planned is not None else ""
            line += (
                f"link bounds the step: spread the variables by the bytes they move (--placement FILE writes "
                f"a plan{under} and tfsched.ps_strategy(FILE, ps_tasks) is replica_device_setter's ps_strategy "
                "for it; round-robin puts every kernel of layers that alternate kernel and bias on one PS)"
            )
    return line


def _placement_line(placement, path: str) -> str:
    """What ``analyze --placement`` wrote: the bytes each PS would exchange a step, and the
    variable to partition where one alone moves more than a PS's share.

    >>> from tfsched.placement import Placement, plan_placement
    >>> moved = {"a": 500.0, "b": 300.0, "c": 200.0}
    >>> _placement_line(Placement(2, plan_placement(moved, 2), moved), "p.json")
    'placement over 2 PS written to p.json: ps:0 500 B (50%), ps:1 500 B (50%) a step'
    >>> moved = {"fc": 700.0, "b": 300.0}
    >>> print(_placement_line(Placement(2, plan_placement(moved, 2), moved), "p.json"))
    placement over 2 PS written to p.json: ps:0 700 B (70%), ps:1 300 B (30%) a step; variable fc alone moves 70%, which no placement of whole variables evens: partition it over the PS (tf.compat.v1.fixed_size_partitioner)
    """
    loads = placement.loads()
    total = sum(loads)
    line = f"placement over {placement.ps_tasks} PS written to {path}: " + ", ".join(
        f"ps:{i} {_bytes(n)} ({n / total if total else 0:.0%})" for i, n in enumerate(loads)
    )
    line += " a step"
    largest = max(placement.moved.items(), key=lambda kv: kv[1], default=None)
    if total and largest and largest[1] / total > 1 / placement.ps_tasks:
        line += (
            f"; variable {largest[0]} alone moves {largest[1] / total:.0%}, which no placement of whole "
            f"variables evens: {_PARTITION_IT}"
        )
    return line


def print_placement(placement, path: str, console: Console | None = None) -> None:
    # soft-wrapped: the terminal wraps it, never inside the path (which rich would fold at its width)
    (console or Console()).print(_placement_line(placement, path), soft_wrap=True)


def print_analysis(
    a: Analysis, *, limit: int | None = 12, output: str | None = None, console: Console | None = None
) -> None:
    console = console or Console()
    g, s, p = a.graph, a.schedule, a.prediction
    kinds = {k: sum(1 for t in g.transfers if t.kind == k) for k in ("pull", "push", "control")}
    console.print(
        f"[bold]{g.source}[/]: {len(g.graph)} ops in the step (fetches: {', '.join(g.fetches)}), "
        f"PS tasks: {len(g.ps_tasks)}, workers: {a.workers}; transfers: {kinds['pull']} pulls, "
        f"{kinds['push']} pushes, {kinds['control']} control"
        + (f"; {len(g.ungated)} of them left ungated, as the pass leaves them" if g.ungated else "")
    )
    if len(g.ps_tasks) > 1:
        from tfsched.placement import Placement

        busiest = max(g.ps_load, key=g.ps_load.get)
        planned = Placement.of_graph(g).loads()
        console.print(
            _ps_load_line(
                g.ps_load,
                next(iter(g.variable_load[busiest].items()), None),
                max(planned) / sum(planned) if sum(planned) else None,
            )
        )
    if a.trace_match is not None:
        console.print(f"times from the trace ({a.oracle.name}): {a.trace_match.line()}")
        console.print(f"links: {a.links}")
        laid = a.simulated_graph
        if laid["from"] == "ran":
            pass_out = (
                " (tfsched's gates, slices and credit taken out)" if a.traced and a.traced.scheduled else ""
            )
            console.print(
                f"predicted on the partition graphs the trace ran{pass_out}: {laid['transfers']} transfers"
                + (
                    f" (the saved graph's {laid['saved_transfers']}, before Grappler's rewrites)"
                    if laid["transfers"] != laid["saved_transfers"]
                    else ""
                )
                + ", with the schedule applied as the pass applies it"
            )
    for (sender, receiver), ts in s.channels().items():
        table = Table(
            title=f"{short_task(sender)} → {short_task(receiver)}  ({len(ts)} transfers, {s.algorithm}, {s.mode})",
            title_justify="left",
        )
        for col in ("priority", "kind", "tensor", "variable", "bytes"):
            table.add_column(col, justify="right" if col in ("priority", "bytes") else "left")
        shown = ts if limit is None else ts[:limit]
        for t in shown:
            rank = "ungated" if t in s.ungated else str(s.priorities[t])
            table.add_row(rank, t.kind, t.tensor, t.variable or "-", _bytes(t.bytes))
        if len(shown) < len(ts):
            table.add_row("…", "", f"{len(ts) - len(shown)} more (--all lists them)", "", "")
        console.print(table)
    if g.busiest_channel_params:
        sizes = a.sizes
        console.print(
            f"sizes for this graph and link (tfsched.enforce.link_sizes): partition {sizes['partition']:,}, "
            f"credit {sizes['credit']:,} parameters; the busiest channel carries "
            f"{sizes['busiest_channel_params']:,} a step"
        )
    title = "Predicted step time (simulated)" + ("" if a.traced is None else ", and the traced one")
    summary = Table(title=title, title_justify="left")
    summary.add_column("")
    summary.add_column("seconds", justify="right")
    summary.add_row("baseline (FIFO)", f"{p.baseline_s:.4f}")
    if p.priority_only_s is not None:
        summary.add_row(f"scheduled ({s.algorithm}, priority only)", f"{p.priority_only_s:.4f}")
    sized = ", ".join(f"{k} {v:,}" for k, v in (("partition", p.partition), ("credit", p.credit)) if v)
    said = [s.algorithm, sized + (" per sending task" if p.host_credit else "")]
    if p.host_order == "priority":  # implies host_credit
        said.append("its steps in lockstep")
    if p.credit and p.ack_share != DEFAULT_ACK_SHARE:
        said.append(f"ack from credit/{p.ack_share}")
    if p.credit and p.credit_return == "sent":
        said.append("credit returned when sent")
    if p.credit and p.ack_group > 1:
        said.append(f"one ack for up to {p.ack_group} slices")
    if p.credit and p.push_credit:
        said.append(f"pushes {p.push_credit:,}")
    if p.executor_threads:
        said.append(f"{p.executor_threads} inter-op thread{'s' * (p.executor_threads != 1)} a task")
    if p.cross_steps:
        said.append(f"{p.cross_steps} steps across the barrier, the gates serving the arrived by priority")
    summary.add_row(f"scheduled ({', '.join(filter(None, said))})", f"{p.scheduled_s:.4f}")
    summary.add_row("speedup", f"{p.baseline_s / p.scheduled_s:.3f}x" if p.scheduled_s > 0 else "-")
    summary.add_row("makespan lower bound", f"{p.lower_bound_s:.4f}")
    summary.add_row("makespan upper bound", f"{p.upper_bound_s:.4f}")
    summary.add_row(
        "ordering efficiency E (baseline → scheduled)", f"{p.baseline_efficiency:.3f} → {p.efficiency:.3f}"
    )
    summary.add_row("speedup bound S", f"{p.speedup_bound:.3f}")
    if p.floor_s > 0:
        behind = " behind the barrier" if p.cross_steps else ""
        summary.add_row(
            f"floor: no order{behind} is faster (dependencies and each resource)", f"{p.floor_s:.4f}"
        )
        summary.add_row(
            f"the most any order{behind} can gain over the baseline", f"{p.baseline_s / p.floor_s:.3f}x"
        )
    outside = None
    if a.traced is not None:
        t, e = a.traced, a.traced.efficiency(p)
        ran = "scheduled by tfsched" if t.scheduled else "vanilla TensorFlow"
        summary.add_row(f"traced step ({ran}, median of {t.steps})", f"{t.step_s:.4f}")
        summary.add_row("ordering efficiency E of the traced step", f"{e:.3f}")
        outside = _outside_bounds(e)
    console.print(summary)
    if p.floor_s > 0 and p.floor_by:
        console.print(f"the floor is set by {p.floor_by}")
    if p.credit and p.acknowledged == 0:
        console.print(
            f"the credit of {p.credit:,} acknowledges none of the {p.messages} messages of a step: each is "
            f"under the {least_acknowledged(p.credit, p.ack_share):,} parameters it "
            f"acknowledges (credit / {p.ack_share})"
            + (f", cut into equal slices of at most {p.partition:,}" if p.partition else "")
            + ", so it holds nothing: raise the partition, lower the credit or raise --ack-share"
        )
    if outside:
        console.print(outside)
    if output:
        console.print(f"schedule written to [bold]{output}[/]", soft_wrap=True)
