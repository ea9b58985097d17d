"""Pack a kept bench run with what a re-prediction reads, small enough for the repository.

A bench run with ``--traces DIR -o DIR/bench.json`` keeps every mode's traced steps, every
worker's (a MobileNet run of four modes: 56 MB). ``benchmarks/repredict.py`` and the scripts
built on it (``floor.py``, ``cross_barrier.py``) and ``cpu_on_bytes.py`` read only the run's
``bench.json``, its baseline's traced steps of worker 0, with the other workers and alone, and the
trace the timing-aware orders were made from: this packs those (each placement's) into one
xz-compressed tar (that MobileNet run: 2.2 MB), which those scripts take in place of the
directory. ``handoff.py`` and ``channel_overhead.py`` read every mode's traced steps: they need
the directory. Of a ``--api tf2`` run (since the eighty-seventh session), what
``repredict_tf2.py`` reads: the baseline's traced round, worker 0's solo round and the step
function's graph it ran, each placement's.

    python benchmarks/keep_run.py DIR --name NAME

Writes ``benchmarks/results/runs/<name>.tar.xz``.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _results import RUNS, run_dir  # noqa: E402

# what a re-prediction reads of a kept run (``repredict.repredict``, ``bench_run``): each
# placement's baseline and the trace its timing-aware orders came from
KEPT = ("bench.json", "baseline*.trace.json", "order*.alone.trace.json")
# of a ``--api tf2`` run (``repredict_tf2.py``, ``bench.tf2.predict_placements``): each placement's
# traced baseline round, and in its directory (the run's, ``at-PLACEMENT`` for another) worker 0's
# solo round and its step function as the pass got it
KEPT_TF2 = ("bench.json", "baseline*.trace.json")
KEPT_TF2_PLACEMENT = ("solo-round.trace.json",)


def tf2_run(where: str) -> bool:
    """Whether the run in ``where`` is a ``--api tf2`` run (its ``bench.json`` says so); a
    ``bench.json`` that does not parse is refused (ValueError), not packed."""
    with open(os.path.join(where, "bench.json")) as f:
        doc = json.load(f)
    return isinstance(doc, dict) and isinstance(doc.get("config"), dict) and doc["config"].get("api") == "tf2"


def kept_files(where: str) -> list[str]:
    """The files of the run directory ``where`` that a re-prediction reads (paths in it)."""
    names = sorted(os.listdir(where))
    if not tf2_run(where):
        return [n for n in names if any(fnmatch.fnmatch(n, p) for p in KEPT) and ".worker-" not in n]
    from tfsched.bench.tf2 import STEP_FUNCTION

    kept = [n for n in names if any(fnmatch.fnmatch(n, p) for p in KEPT_TF2)]
    placements = [n for n in names if n.startswith("at-") and os.path.isdir(os.path.join(where, n))]
    for here in ["", *placements]:
        kept += [
            os.path.join(here, n) for n in KEPT_TF2_PLACEMENT if os.path.isfile(os.path.join(where, here, n))
        ]
        graphs = os.path.join(where, here, "graphs")
        if os.path.isdir(graphs):
            kept += [
                os.path.join(here, "graphs", n)
                for n in sorted(os.listdir(graphs))
                if STEP_FUNCTION.fullmatch(n)
            ]
    return kept


def pack(where: str, out: str) -> list[str]:
    """The run in ``where`` packed into ``out`` (written whole or not at all); the names packed."""
    names = kept_files(where)
    if not any(fnmatch.fnmatch(n, "baseline*.trace.json") for n in names):
        raise SystemExit(f"error: {where}: no baseline's traced steps (a run without --traces?)")
    if tf2_run(where) and not (
        "solo-round.trace.json" in names and any(os.path.dirname(n) == "graphs" for n in names)
    ):
        raise SystemExit(f"error: {where}: no solo round of worker 0 with its step function's graph")
    os.makedirs(os.path.dirname(out) or ".", exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out) or ".", suffix=".part")
    os.close(fd)
    try:
        with tarfile.open(tmp, "w:xz", preset=9) as archive:
            for n in names:
                archive.add(os.path.join(where, n), arcname=n)
        os.chmod(tmp, 0o644)  # mkstemp's is the owner's alone
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return names


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=run_dir, help="a bench run's --traces directory, with its bench.json")
    ap.add_argument("--name", required=True, help="results/runs/<name>.tar.xz")
    args = ap.parse_args(argv)
    out = os.path.join(RUNS, f"{args.name}.tar.xz")
    try:
        names = pack(args.run_dir, out)
    except (OSError, ValueError) as e:
        raise SystemExit(f"error: {args.run_dir}: {e}") from None
    print(f"{out}: {', '.join(names)} ({os.path.getsize(out) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
