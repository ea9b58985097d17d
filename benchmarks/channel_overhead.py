"""A kept bench run predicted again with every message's overhead set, beside the trace's fit.

Until the forty-fourth session the simulator served a channel's messages one after another,
each paying its per-message overhead (fitted to worker 0's baseline traced alone) before its
bytes flowed. Where one channel carries a host's link at a time (one window per sending task),
that overhead set the link's rate; where several run at once, they hid it. (Since then a message
pays it before it waits for the channel, ``sim.engine``; this run is what showed the need.) This
re-predicts the run (``repredict``) with
the fit's overhead and with each of ``--overheads``, and shows what the traces say of the
channels from the PS to worker 0: the fit (worker 0 alone), and every busy period above 1 MB
in each mode's traced steps (how fast one channel ran).

    python benchmarks/channel_overhead.py DIR --name overhead-vgg16-train-2ps-held --overheads 0.3,5

``DIR``: a ``tfsched bench --traces DIR -o DIR/bench.json`` run. Writes ``results/<name>.{md,json}``.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, run_dir_errors, run_dir_parser, run_title, write  # noqa: E402
from repredict import repredict  # noqa: E402


def channels(run_dir: str, modes: list[str]) -> tuple[list[dict], list[dict]]:
    """The fitted links into worker 0 from its baseline alone, and each mode's busy periods (>1 MB)
    on those links (and the baseline's alone), from the traces the run kept."""
    from tfsched.oracle.fit import _busy_periods, link_fits
    from tfsched.tracing.trace import Trace

    def name(task: str) -> str:
        return "/".join(p for p in task.split("/") if p.startswith(("job:", "task:")))

    fits, _ = link_fits(Trace.load(os.path.join(run_dir, "baseline.alone.trace.json")))
    fitted = [
        {"link": f"{name(s)} -> {name(d)}", "overhead_ms": f.model.overhead_s * 1e3,
         "bandwidth_gbps": f.model.bandwidth_bps / 1e9, "overhead_from": f.overhead_from}
        for (s, d), f in fits.items() if "/job:ps/" in s
    ]  # fmt: skip
    periods = []
    traces = [(mode, f"{mode}.trace.json") for mode in modes] + [
        ("baseline alone", "baseline.alone.trace.json")
    ]
    for mode, file in traces:
        for (s, d), ps in _busy_periods(Trace.load(os.path.join(run_dir, file))).items():
            for p in ps:
                if "/job:ps/" in s and p.bytes > 1e6 and p.seconds > 0:
                    periods.append(
                        {"mode": mode, "link": f"{name(s)} -> {name(d)}", "seconds": p.seconds,
                         "messages": p.messages, "mb": p.bytes / 1e6, "gbps": 8 * p.bytes / p.seconds / 1e9}
                    )  # fmt: skip
    return fitted, periods


def ranks(xs) -> str:
    return ", ".join(f"{x:.2f}" for x in xs) if xs else "-"


def main() -> None:
    ap = run_dir_parser(__doc__.splitlines()[0], "results/<name>.{json,md}")
    ap.add_argument("--overheads", default="0.3,5", help="per-message overheads to try, ms, comma-separated")
    args = ap.parse_args()
    try:
        with run_dir_errors():
            overheads = [float(x) / 1e3 for x in args.overheads.split(",") if x.strip()]
            config, fit_rows = repredict(args.run_dir)
            tried = {o: repredict(args.run_dir, overhead_s=o)[1] for o in overheads}
            fitted, periods = channels(args.run_dir, [r["mode"] for r in fit_rows])
    except ValueError:
        raise SystemExit(f"Error: --overheads must be numbers of ms, got {args.overheads!r}") from None
    md = [
        run_title(config)
        + (f", variables placed {config['ps_placement']}" if config.get("ps_placement") else "")
        + f" (`python benchmarks/channel_overhead.py DIR --name {args.name} --overheads {args.overheads}`)",
        "",
        "Each mode's slowest worker (mean) and its workers' finishes by rank (s), measured and "
        "predicted with the fitted overheads and with each overhead tried:",
        "",
        "| mode | measured | predicted (fit) | "
        + " | ".join(f"predicted ({o * 1e3:g} ms)" for o in overheads)
        + " |",
        "|---|---|---|" + "---|" * len(overheads),
    ]
    for i, r in enumerate(fit_rows):
        cells = [
            f"{r['measured_s']:.3f} ({ranks(r['finish_by_rank_s'])})",
            f"{r['predicted_now_s']:.3f} ({ranks(r['predicted_finish_by_rank_now_s'])})",
            *(
                f"{t[i]['predicted_now_s']:.3f} ({ranks(t[i]['predicted_finish_by_rank_now_s'])})"
                for t in tried.values()
            ),
        ]
        md.append(f"| {r['mode']} | " + " | ".join(cells) + " |")
    md += ["", "Links from the PS, fitted to worker 0's baseline steps alone:", "",
           "| link | overhead (ms) | bandwidth (Gbit/s) | overhead from |", "|---|---|---|---|"]  # fmt: skip
    md += [
        f"| {f['link']} | {f['overhead_ms']:.2f} | {f['bandwidth_gbps']:.3f} | {f['overhead_from']} |"
        for f in fitted
    ]
    md += ["", "Busy periods above 1 MB from the PS to worker 0, in each mode's traced steps (and alone):", "",
           "| mode | link | seconds | messages | MB | Gbit/s |", "|---|---|---|---|---|---|"]  # fmt: skip
    md += [
        f"| {p['mode']} | {p['link']} | {p['seconds']:.3f} | {p['messages']} | {p['mb']:.1f} | {p['gbps']:.2f} |"
        for p in periods
    ]
    result = {
        "config": config,
        "machine": machine(),
        "fit": fit_rows,
        "overheads_s": {str(o): rows for o, rows in tried.items()},
        "fitted_links": fitted,
        "busy_periods": periods,
    }
    write(args.name, result, md)


if __name__ == "__main__":
    main()
