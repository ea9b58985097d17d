"""The PS communication graph: ops with resolved devices and the transfers between tasks."""

from __future__ import annotations

from tfsched.graph.build import build_comm_graph
from tfsched.graph.model import CommGraph, Op, RawNode, Transfer, WorkerView


def load_comm_graph(
    path: str,
    *,
    fetches: list[str] | None = None,
    fmt: str | None = None,
    default_device: str | None = None,
    ps_jobs: tuple[str, ...] = ("ps",),
    tag_set: str | None = None,
) -> CommGraph:
    """Read a graph file (GraphDef, MetaGraphDef, RunMetadata or SavedModel, whose meta graph
    ``tag_set`` chooses) and build its ``CommGraph``.

    >>> g = load_comm_graph("train.pbtxt", fetches=["train_op"])  # doctest: +SKIP
    """
    from tfsched.graph import load

    loaded = load.read_graph_file(path, fmt, tag_set)
    if not fetches and loaded.fetch_hints:
        fetches = loaded.fetch_hints

    def infer(names: set[str]) -> dict:
        if loaded.graph_def is None:
            return {}
        return load.infer_shapes_with_tensorflow(loaded.graph_def, names, path)

    return build_comm_graph(
        loaded.nodes,
        fetches=fetches,
        default_device=default_device,
        ps_jobs=ps_jobs,
        source=path,
        output_specs=load.output_specs,
        infer_shapes=infer,
    )


__all__ = ["CommGraph", "Op", "RawNode", "Transfer", "WorkerView", "build_comm_graph", "load_comm_graph"]
