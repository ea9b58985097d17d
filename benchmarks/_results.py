"""Where benchmarks write their results: ``benchmarks/results/<name>.json`` and ``.md``."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import json
import os
import platform
import shutil
import tarfile
import tempfile

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
# kept bench runs packed with what a re-prediction reads (benchmarks/keep_run.py)
RUNS = os.path.join(RESULTS, "runs")
# the directory ``run_dir`` unpacked a packed run into -> the file it was given
UNPACKED: dict[str, str] = {}


def run_dir(text: str) -> str:
    """An argparse type: a bench run's ``--traces`` directory, or a run packed by
    ``benchmarks/keep_run.py`` (``results/runs/<name>.tar.xz``), unpacked into a directory of its
    own that goes when the script ends (``UNPACKED`` says what it came from). Either must hold the
    run's ``bench.json``."""
    if os.path.isdir(text):
        where = text
    elif os.path.isfile(text):
        try:
            with tarfile.open(text) as archive:
                where = tempfile.mkdtemp(prefix="tfsched-run-")
                atexit.register(shutil.rmtree, where, True)
                archive.extractall(where, filter="data")  # no path out of the directory, no device
                UNPACKED[where] = text
        except (tarfile.TarError, OSError) as e:
            raise argparse.ArgumentTypeError(f"{text}: not a packed bench run ({e})") from None
    else:
        raise argparse.ArgumentTypeError(f"{text}: no such directory or packed run")
    if not os.path.isfile(os.path.join(where, "bench.json")):
        raise argparse.ArgumentTypeError(f"{text}: no bench.json in it (a bench run's --traces directory?)")
    return where


@contextlib.contextmanager
def run_dir_errors():
    """A kept bench run that cannot be read (a TfschedError, a file missing or unreadable) ends the
    script with one error line."""
    from tfsched.errors import TfschedError

    try:
        yield
    except TfschedError as e:
        raise SystemExit(f"Error: {e}") from None
    except OSError as e:
        raise SystemExit(f"Error: {e.filename}: {e.strerror}") from None


def run_title(config: dict) -> str:
    """A kept bench run's model, mode, batch and cluster, as its Markdown summaries open."""
    from tfsched.bench.results import link_text

    api = "TensorFlow 2's asynchronous steps, " if config.get("api") == "tf2" else ""
    return (
        f"**{config['model']}** ({api}{config['mode']}, batch {config['batch_size']}), {config['ps']} PS x "
        f"{config['workers']} workers, {link_text(config)}"
    )


def run_dir_parser(description: str, written: str) -> argparse.ArgumentParser:
    """The arguments of a script that reads a kept bench run: its directory and ``--name``
    (``written``: the results files the name makes, for the help)."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument(
        "run_dir",
        type=run_dir,
        help="a bench run's --traces directory, with its bench.json, or a run packed by keep_run.py",
    )
    ap.add_argument("--name", required=True, help=written)
    return ap


def machine() -> dict:
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()}


def write(name: str, result: dict, markdown: list[str]) -> None:
    """Write the JSON record and the Markdown summary, and print the summary."""
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(RESULTS, f"{name}.md"), "w") as f:
        f.write("\n".join(markdown) + "\n")
    print("\n".join(markdown))


def positive(kind):
    """An argparse type: ``kind`` of the text, which must be above 0."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            value = None
        if value is None or not value > 0:
            raise argparse.ArgumentTypeError(f"must be a positive {kind.__name__}, got {text!r}")
        return value

    return parse


def run_options(description: str, *, modes: str, steps: int, rounds: int, bandwidth_mbps: float):
    """A parser for a script that runs one small bench run each way (``tf2_rounds.py``,
    ``task_starts.py``): its model, cluster, modes and links, ``--repeats`` and ``--name``, with
    these defaults."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--model", default="seq32")
    p.add_argument("--workers", type=positive(int), default=2)
    p.add_argument("--modes", default=modes)
    p.add_argument("--steps", type=positive(int), default=steps)
    p.add_argument("--rounds", type=positive(int), default=rounds)
    p.add_argument("--batch-size", type=positive(int), default=4)
    p.add_argument("--bandwidth", type=float, default=bandwidth_mbps, help="Mbit/s per host; 0: loopback")
    p.add_argument("--repeats", type=positive(int), default=2)
    p.add_argument("--name", required=True)
    return p


def run_kwargs(opts) -> dict:
    """``run_options``' choices as the keywords of the bench's side-by-side runs (the model aside)."""
    return {
        "workers": opts.workers,
        "modes": tuple(opts.modes.split(",")),
        "steps": opts.steps,
        "rounds": opts.rounds,
        "batch_size": opts.batch_size,
        "bandwidth_bps": opts.bandwidth * 1e6 or None,
    }


@contextlib.contextmanager
def run_graph(config: dict, placement: str | None = None):
    """A bench run's saved graph, built as the run built it (its ``config``), in a temporary
    file: yields (path, the ``BuiltGraph``). ``placement``: the graph of the run's modes named
    ``MODE@placement``; None: of its first placement (its modes' plain names)."""
    from tfsched.models import build_graph

    placed = config.get("ps_placement", "bytes")  # a list where the run had several
    built = build_graph(
        config["model"],
        mode=config["mode"],
        batch_size=config["batch_size"],
        ps_tasks=config["ps"],
        ps_placement=placement or (placed if isinstance(placed, str) else placed[0]),
    )
    with tempfile.TemporaryDirectory(prefix="tfsched-run-graph-") as d:
        path = os.path.join(d, "graph.pb")
        with open(path, "wb") as f:
            f.write(built.graph_def().SerializeToString())
        yield path, built


def bench_run(run_dir: str) -> tuple[dict, dict[str, float]]:
    """A kept bench run's ``config`` and each mode's measured step (the slowest worker's mean;
    None in a run of TensorFlow 2's asynchronous calls, which has no step)."""
    with open(os.path.join(run_dir, "bench.json")) as f:
        doc = json.load(f)
    return doc["config"], {m["mode"]: m.get("iteration_mean_s") for m in doc["modes"]}


def each_run(description: str, compare) -> list:
    """``compare(dir)`` for each bench run directory on the command line (a ``--traces`` directory
    with its ``bench.json``); a bad one is one error line and exit 1."""
    from tfsched.errors import TfschedError

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("run_dirs", nargs="+", help="bench runs' --traces directories, each with its bench.json")
    args = ap.parse_args()
    try:
        return [compare(d) for d in args.run_dirs]
    except TfschedError as e:
        raise SystemExit(f"Error: {e}") from None
    except OSError as e:
        raise SystemExit(f"Error: {e.filename}: {e.strerror}") from None


def analyze_as_run(config: dict, graph_path: str, built, trace: str):
    """``tfsched analyze --algorithm tao --workers N --bandwidth B --trace TRACE`` of a bench run's
    saved graph, N and B as the run had them (``config``)."""
    from tfsched.analysis import analyze
    from tfsched.units import parse_bandwidth

    return analyze(
        graph_path,
        fetches=built.fetches,
        algorithm="tao",
        workers=config["workers"],
        bandwidth_bps=parse_bandwidth(config["bandwidth"]),
        trace=trace,
    )


def seq32_round(cluster, steps: int) -> dict:
    """The TensorFlow 2 bench's coordinator arguments (``bench.tf2.round_args``) for ``steps``
    steps per worker of Seq-32 training, batch 4, on a local ``cluster`` (no shaped links)."""
    from tfsched.bench.tf2 import channel_params, round_args

    return round_args(
        cluster,
        bandwidth_bps=None,
        channel_params=channel_params("seq32", 1),
        model="seq32",
        image_size=None,
        batch_size=4,
        run_mode="train",
        ps_placement="round-robin",
        steps=steps,
    )
