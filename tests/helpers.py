"""Small hand-built PS graphs (as RawNode lists) shared by the pure-Python tests, and the CLI as
a user runs it."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from tfsched.graph import CommGraph, RawNode, build_comm_graph
from tfsched.oracle import LinkModel, TimeOracle

PS = "/job:ps/replica:0/task:0/device:CPU:0"
PS1 = "/job:ps/replica:0/task:1/device:CPU:0"
W0 = "/job:worker/replica:0/task:0/device:CPU:0"
W1 = "/job:worker/replica:0/task:1/device:CPU:0"


def benchmark_script(name: str):
    """``benchmarks/<name>.py`` loaded as a module (it puts ``benchmarks/`` on the path, for its
    ``_results``)."""
    path = Path(__file__).resolve().parents[1] / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


def training_chain(n: int, nbytes: int = 1_000_000) -> CommGraph:
    """A chain of ``n`` layers trained on one worker: f_i needs pull_i and f_{i-1}; g_i needs
    the last forward op and g_{i+1}; the PS applies g_i to v_i."""
    nodes = []
    for i in range(n):
        nodes += var(f"v{i}", (nbytes // 4,))
        nodes.append(op(f"f{i}", [f"v{i}/read"] + ([f"f{i - 1}"] if i else [])))
    for i in reversed(range(n)):
        nodes.append(op(f"g{i}", [f"f{n - 1}"] + ([f"g{i + 1}"] if i < n - 1 else []), shape=(nbytes // 4,)))
        nodes.append(
            RawNode(
                f"apply{i}",
                "ResourceApplyGradientDescent",
                PS,
                [f"v{i}", f"g{i}"],
                attrs={"T": "FLOAT"},
                output_shapes=[],
            )
        )
    return build_comm_graph(nodes, fetches=[f"apply{i}" for i in range(n)])


def random_training_case(seed: int) -> tuple[CommGraph, TimeOracle, int]:
    """A ``training_chain`` of random layer sizes and op times, its oracle (a link of 1 or 10
    MB/s, overheads or none; on odd seeds a shared machine, some with cores of their own; on
    every third the PS's links measured slower than its channels, and where the tasks have cores
    of their own the ends' shares of a byte's CPU uneven) and two or three workers: the
    floor's random cases (``test_engine``, ``benchmarks/floor_random.py``)."""
    import random

    rng = random.Random(seed)
    n = rng.randint(2, 5)
    g = training_chain(n, nbytes=rng.choice([40_000, 400_000, 1_000_000]))
    times = {f"f{i}": rng.uniform(0.01, 0.3) for i in range(n)}
    times |= {f"g{i}": rng.uniform(0.01, 0.6) for i in range(n)}
    o = oracle_with(times, bandwidth_bps=rng.choice([8e6, 8e7]), overhead_s=rng.choice([0.0, 0.002]))
    if seed % 2:
        o.machine_slots = rng.uniform(0.5, 2.0)
        o.host_slots = rng.choice([None, o.machine_slots / 3])
    workers = rng.choice([2, 3])
    # drawn last, so the earlier cases stay as they were: on every third seed the PS's links
    # measured slower than its channels, and the bytes' CPU on a shared machine
    if seed % 3 == 0:
        ps = g.ps_tasks[0]
        o.host_bps = {(ps, d): o.link.bandwidth_bps * rng.uniform(0.4, 1.0) for d in ("up", "down")}
        if o.machine_slots:
            o.comm_slot_s_per_byte = rng.choice([1e-9, 1e-7, 1e-6])
    if o.host_slots and o.comm_slot_s_per_byte:  # the ends' shares of a byte's CPU, uneven
        o.host_byte_shares = (rng.uniform(0.2, 0.5), rng.uniform(0.4, 0.7))
    return g, o, workers


def simulated_orders(sg) -> list:
    """``sg`` simulated under every policy (two seeds each, racing), and one window per task
    in both of its orders: the runs no floor may be over."""
    from tfsched.sim import simulate

    runs = [simulate(sg, p, seed=k, race=True) for p in ("fifo", "random", "counter") for k in range(2)]
    for host_order in ("steps", "priority"):
        runs.append(simulate(sg, "counter", credit_bytes=200_000, host_credit=True, host_order=host_order))
    return runs


def oracle_with(
    op_times: dict[str, float], bandwidth_bps: float = 8e6, overhead_s: float = 0.0
) -> TimeOracle:
    return TimeOracle(op_times=op_times, link=LinkModel(bandwidth_bps=bandwidth_bps, overhead_s=overhead_s))


def cli(*args: str, timeout: float) -> subprocess.CompletedProcess:
    """``tfsched ARGS`` in a process of its own, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "tfsched.cli", *args], capture_output=True, text=True, timeout=timeout
    )


def shadow_module(where: Path, name: str, monkeypatch) -> str:
    """A package ``name`` first on the path of every process started from now on (PYTHONPATH)
    that ends the process that imports it, saying so: what those processes import, told apart
    from outside. Returns what it says."""
    said = f"{name} was imported"
    (where / name).mkdir(parents=True)
    (where / name / "__init__.py").write_text(f"raise SystemExit({said!r})\n")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(where), os.environ.get("PYTHONPATH")) if p)
    )
    return said


def small_simulation_processes(where: Path, monkeypatch, room_mib: int = 16) -> None:
    """Every simulation process (``python -m tfsched.sim.pool``) started from now on gets
    ``room_mib`` MiB of address space more than it has mapped once it has imported what it runs
    (``RLIMIT_AS``), through a ``sitecustomize`` first on the path (PYTHONPATH); other processes,
    a ``tfsched`` command among them, are left as they are."""
    (where / "sitecustomize.py").write_text(
        "import resource\n"
        "if b'tfsched.sim.pool' in open('/proc/self/cmdline', 'rb').read():\n"
        "    import tfsched.sim.pool\n"
        "    vm = next(int(l.split()[1]) for l in open('/proc/self/status') if l.startswith('VmSize:'))\n"
        f"    room = (vm + {room_mib} * 1024) * 1024\n"
        "    resource.setrlimit(resource.RLIMIT_AS, (room, resource.RLIM_INFINITY))\n"
    )
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(p for p in (str(where), os.environ.get("PYTHONPATH")) if p)
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
