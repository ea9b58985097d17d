"""Where a traced TensorFlow 2 call ends: how long each part's ``ExecutorDoneCallback`` lasts,
and whether a call timed to the callbacks' ends would overlap the next.

``tfsched.trace_functions`` reads each task's profile; a call's part there ends with an
``ExecutorDoneCallback`` event, which lasts until the callback returns, after the part has sent
its result to its caller. This starts a local cluster (1 PS, 1 worker), runs the TensorFlow 2
bench's coordinator on it (Seq-32, training, tfsched's TIO with partitioning and credit)
inside a profiling window, with ``--hogs`` busy processes beside it, and reads the raw
callback events of every traced call. For each load it reports the callbacks' durations per
task, by how much the last part's callback outlasts the call's end (where the last part's
executor called back, ``tracing.functions.build_trace``), and how many calls would overlap the
next if each ended where its callbacks returned.

    python benchmarks/tf2_callback_spans.py [--hogs 0,2,4] [--steps 150]  # 100 steps: 18 minutes

Writes ``benchmarks/results/tf2-callback-spans.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import queue
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import machine, positive, seq32_round, write  # noqa: E402

MODE = "tio+p20000+c40000"
CHILD_TIMEOUT_S = 1800  # the coordinator's warm-up, profiling window and reading of the profile


def _hog() -> None:
    while True:
        pass


def _coordinate(args: dict, results) -> None:
    """The bench's coordinator, in a process of its own, with the profile's callback events
    recorded as ``read_task`` reads them: (task, call id, start us, end us) each."""
    import tfsched.tracing.functions as functions
    from tfsched.bench.tf2 import coordinate

    spans = []
    read_task = functions.read_task

    def recording(space, device):
        task = read_task(space, device)
        base = (task.started_ns or 0) * 1000
        for plane in space.planes:
            if plane.name == "/host:CPU":
                names = plane.event_metadata
                for line in plane.lines:
                    for e in line.events:
                        if names[e.metadata_id].name == "ExecutorDoneCallback":
                            sid = functions._stats(plane, e.stats).get("id")
                            start = base + line.timestamp_ns * 1000 + e.offset_ps
                            spans.append((device, sid, start / 1e6, (start + e.duration_ps) / 1e6))
        return task

    functions.read_task = recording
    coordinate(args)
    results.put(spans)


def _spans_of(child, results) -> list:
    """What the coordinator process ``child`` put on ``results``; one error line if it exits
    without it or outlives ``CHILD_TIMEOUT_S``."""
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while True:
        try:
            return results.get(timeout=5)
        except queue.Empty:
            if child.is_alive() and time.monotonic() < deadline:
                continue
            child.kill()
            child.join(10)
            why = f"exit code {child.exitcode}" if child.exitcode is not None else "no answer"
            raise SystemExit(f"Error: the coordinator ended without its callback spans ({why})") from None


def measure(hogs: int, steps: int) -> dict:
    from tfsched.bench.local import LocalCluster
    from tfsched.tracing.trace import Trace

    busy = [multiprocessing.Process(target=_hog, daemon=True) for _ in range(hogs)]
    for p in busy:
        p.start()
    try:
        with LocalCluster(ps=1, workers=1) as c, tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "trace.json")
            args = seq32_round(c, steps)
            args.update(mode=MODE, trace=path)
            ctx = multiprocessing.get_context("spawn")
            results = ctx.Queue()
            child = ctx.Process(target=_coordinate, args=(args, results))
            child.start()
            spans = _spans_of(child, results)
            child.join(60)
            trace = Trace.load(path)
    finally:
        for p in busy:
            p.terminate()
    return summarize(hogs, spans, trace)


def summarize(hogs: int, spans: list, trace) -> dict:
    """Per task, the callbacks' durations (us); per traced call, by how much its last callback's
    return outlasts its end, and the calls that would overlap the next ended there."""
    durations: dict[str, list[float]] = {}
    by_call: dict[int, list[tuple[float, float]]] = {}
    for device, sid, start, end in spans:
        durations.setdefault(device.split("/")[1], []).append(end - start)
        by_call.setdefault(sid, []).append((start, end))
    starts, times = trace.step_starts_us, trace.step_times_us
    ends = [s + d for s, d in zip(starts, times, strict=True)]
    # the traced calls, in order, matched to their call ids by their end: the latest callback start
    latest = {max(s for s, _ in v): max(e for _, e in v) for v in by_call.values()}
    returned = [latest[min(latest, key=lambda x: abs(x - e))] for e in ends]
    outlast = [r - e for r, e in zip(returned, ends, strict=True)]
    gaps = [b - e for e, b in zip(ends[:-1], starts[1:], strict=True)]
    overlap_then = sum(r > b for r, b in zip(returned[:-1], starts[1:], strict=True))

    def q(values, p):
        return (
            statistics.quantiles(values, n=100, method="inclusive")[p - 1] if len(values) > 1 else values[0]
        )

    return {
        "hogs": hogs,
        "calls": trace.steps,
        "callback_us": {
            task: {"p50": q(v, 50), "p99": q(v, 99), "max": max(v), "count": len(v)}
            for task, v in sorted(durations.items())
        },
        "outlast_us": {"p50": q(outlast, 50), "p99": q(outlast, 99), "max": max(outlast)},
        "least_gap_us": min(gaps) if gaps else None,
        "overlaps_now": sum(g < 0 for g in gaps),
        "overlaps_to_the_return": overlap_then,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hogs", default="0,2,4", help="busy processes beside the cluster, one run each")
    ap.add_argument("--steps", type=positive(int), default=150, help="traced calls per run")
    args = ap.parse_args()
    rows = [measure(int(h), args.steps) for h in args.hogs.split(",")]
    md = [
        f"Traced TensorFlow 2 calls' `ExecutorDoneCallback` events: Seq-32 training, 1 PS x 1 worker, "
        f"`{MODE}`, {args.steps} calls per run (us)",
        "",
        "| busy processes | calls | task | callback p50 | p99 | max |",
        "|---|---|---|---|---|---|",
        *(
            f"| {r['hogs']} | {r['calls']} | {task} | {c['p50']:.0f} | {c['p99']:.0f} | {c['max']:.0f} |"
            for r in rows
            for task, c in r["callback_us"].items()
        ),
        "",
        "| busy processes | last callback's return after the call's end: p50 | p99 | max "
        "| least gap to the next call | overlaps | overlaps, ended at the callbacks' return |",
        "|---|---|---|---|---|---|---|",
        *(
            f"| {r['hogs']} | {r['outlast_us']['p50']:.0f} | {r['outlast_us']['p99']:.0f} "
            f"| {r['outlast_us']['max']:.0f} | {r['least_gap_us']:.0f} | {r['overlaps_now']} "
            f"| {r['overlaps_to_the_return']} |"
            for r in rows
        ),
        "",
        "A call ends where its last part's executor called back (the start of that part's "
        "callback). Ended where the callbacks returned, a call would overlap the next as often "
        "as the last column says.",
        "",
        "```bash",
        f"python benchmarks/tf2_callback_spans.py --hogs {args.hogs} --steps {args.steps}",
        "```",
    ]
    write("tf2-callback-spans", {"machine": machine(), "mode": MODE, "steps": args.steps, "runs": rows}, md)


if __name__ == "__main__":
    main()
