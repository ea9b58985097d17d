"""Where benchmarks write their results: ``benchmarks/results/<name>.json`` and ``.md``."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import tempfile

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


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


@contextlib.contextmanager
def run_graph(config: dict):
    """A bench run's saved graph, built as the run built it (its ``config``), in a temporary
    file: yields (path, the ``BuiltGraph``)."""
    from tfsched.models import build_graph

    built = build_graph(
        config["model"], mode=config["mode"], batch_size=config["batch_size"], ps_tasks=config["ps"]
    )
    with tempfile.TemporaryDirectory(prefix="tfsched-run-graph-") as d:
        path = os.path.join(d, "graph.pb")
        with open(path, "wb") as f:
            f.write(built.graph_def().SerializeToString())
        yield path, built
