"""Small hand-built PS graphs (as RawNode lists) shared by the pure-Python tests, and the CLI as
a user runs it."""

from __future__ import annotations

import subprocess
import sys

from tfsched.graph import CommGraph, RawNode, build_comm_graph
from tfsched.oracle import LinkModel, TimeOracle

PS = "/job:ps/replica:0/task:0/device:CPU:0"
PS1 = "/job:ps/replica:0/task:1/device:CPU:0"
W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"


def var(name: str, shape=(4,), device: str = PS) -> list[RawNode]:
    """A resource variable and its (unplaced) read, as replica_device_setter leaves them."""
    return [
        RawNode(name, "VarHandleOp", device, attrs={"dtype": "FLOAT", "shape": tuple(shape)}),
        RawNode(f"{name}/read", "ReadVariableOp", "", [name], attrs={"dtype": "FLOAT"}),
    ]


def op(name: str, inputs: list[str], device: str = W0, shape=(4,), op_type: str = "AddV2") -> RawNode:
    return RawNode(name, op_type, device, inputs, attrs={"T": "FLOAT"}, output_shapes=[tuple(shape)])


def chain_graph(n: int, sizes: list[int] | None = None) -> CommGraph:
    """Forward pass of a chain model: f_i needs pull_i and f_{i-1} (ByteScheduler Theorem 1)."""
    nodes: list[RawNode] = []
    for i in range(n):
        nodes += var(f"v{i}", (sizes[i] if sizes else 4,))
        inputs = [f"v{i}/read"] + ([f"f{i - 1}"] if i else [])
        nodes.append(op(f"f{i}", inputs))
    return build_comm_graph(nodes, fetches=[f"f{n - 1}"])


def oracle_with(
    op_times: dict[str, float], bandwidth_bps: float = 8e6, overhead_s: float = 0.0
) -> TimeOracle:
    return TimeOracle(op_times=op_times, link=LinkModel(bandwidth_bps=bandwidth_bps, overhead_s=overhead_s))


def cli(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """``tfsched ARGS`` in a process of its own, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "tfsched.cli", *args], capture_output=True, text=True, timeout=timeout
    )


# a short bench of Seq-32 on two workers at 200 Mbit/s: 3 steps, one round, batch 4
BENCH_SEQ32 = (
    "bench",
    *("--model", "seq32", "--workers", "2", "--bandwidth", "200Mbit"),
    *("--steps", "3", "--rounds", "1", "--batch-size", "4"),
)


def cgroups_unavailable() -> str | None:
    """Why this machine cannot cap a task's cores (``bench.hostcpu``), or None where it can."""
    from tfsched.bench import hostcpu
    from tfsched.errors import TfschedError

    try:
        hostcpu.find_hierarchy()
    except TfschedError as e:
        return str(e)
    return None
