"""Building a :class:`CommGraph` from raw nodes: placement, pruning, transfers.

Placement follows TensorFlow's placer (``common_runtime/placer.cc`` and
``colocation_graph.cc``) closely enough to find the same transfers in a saved graph:

1. colocation groups from ``_class: loc:@name`` and from resource / ref edges (an op that
   consumes a resource handle runs where the resource lives);
2. a group takes the device its members request, the resource owner's first;
3. an unplaced group of one generator (no inputs, one consumer) goes to its consumer
   (heuristic A), a metadata op (``Shape``, ``Size``, ...) to its input (heuristic B), and
   anything else to the session's default device (the task the client talks to);
4. partial devices are completed from the default device.

As in TensorFlow, placement is done on the whole graph, then the graph is pruned to the fetches.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable

import networkx as nx

from tfsched.errors import TfschedError
from tfsched.graph.devices import DeviceSpec, check_job_name, job_of, parse_device, task_of
from tfsched.graph.gating import LOOP_BACK_OPS, small_const, ungated_transfers
from tfsched.graph.model import (
    DTYPE_SIZES,
    VARIABLE_SIZE_DTYPES,
    CommGraph,
    Op,
    RawNode,
    Shape,
    Transfer,
)

VARIABLE_OPS = frozenset({"VarHandleOp", "VariableV2", "Variable", "_VarHandlesOp", "AutoReloadVariable"})
# Ops that forward their first input unchanged: followed when looking for the variable behind a tensor.
FORWARDING_OPS = frozenset(
    {
        "Identity",
        "RefIdentity",
        "Snapshot",
        "Enter",
        "RefEnter",
        "Switch",
        "RefSwitch",
        "ReadVariableOp",
        "StopGradient",
    }
)
UPDATE_OPS = frozenset(
    {
        "Assign",
        "AssignAdd",
        "AssignSub",
        "AssignVariableOp",
        "AssignAddVariableOp",
        "AssignSubVariableOp",
        "ScatterAdd",
        "ScatterSub",
        "ScatterUpdate",
        "ResourceScatterAdd",
        "ResourceScatterSub",
        "ResourceScatterUpdate",
    }
)
UPDATE_PREFIXES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")
# SyncReplicasOptimizer's synchronous training: a worker pushes each gradient into a conditional
# accumulator on the PS (input 0 the accumulator, 1 the worker's local step), whose mean the
# chief's own step applies to the variable. That step is outside a worker's fetches (and outside
# the graph the pass is given), so the push is known by the accumulator's name, which
# SyncReplicasOptimizer makes from the variable's: ``<variable>:0/grad_accum``. The pass
# (cc/scheduler.cc, AccumulatedVariable) reads it the same way.
ACCUMULATOR_APPLY_OPS = frozenset(
    {"AccumulatorApplyGradient", "ResourceAccumulatorApplyGradient", "SparseAccumulatorApplyGradient"}
)
ACCUMULATOR_SUFFIX = "/grad_accum"
# Functional ops take resource handles as arguments without being colocated with them (they are
# lowered or run as functions on their own device); seen on ResNet-50's BatchNorm `If`, whose four
# variables TensorFlow keeps on different PS tasks.
FUNCTIONAL_OPS = frozenset(
    {
        "If",
        "StatelessIf",
        "While",
        "StatelessWhile",
        "Case",
        "StatelessCase",
        "PartitionedCall",
        "StatefulPartitionedCall",
    }
)
METADATA_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})
# Sinks that are not part of a training step: initializers, savers, summaries.
_NOT_A_STEP = re.compile(
    r"(^|/)(init(_\d+)?|init_all_tables|save(_\d+)?|report_uninitialized\w*|\w*[Ii]nitializer\w*)($|/)"
)

# Ops whose outputs all have the type of one attr; checked against TensorFlow's registry in the
# tests. Anything else asks the registry (tfsched.graph.load.output_specs).
_ALL_OUTPUTS_OF = {
    "ReadVariableOp": "dtype",
    "Const": "dtype",
    "Placeholder": "dtype",
    "VariableV2": "dtype",
    "Identity": "T",
    "Snapshot": "T",
    "MatMul": "T",
    "Conv2D": "T",
    "Conv2DBackpropFilter": "T",
    "Conv2DBackpropInput": "T",
    "BiasAdd": "T",
    "BiasAddGrad": "T",
    "AddN": "T",
    "AddV2": "T",
    "Add": "T",
    "Mul": "T",
    "Sub": "T",
    "Relu": "T",
    "ReluGrad": "T",
    "Reshape": "T",
    "Sum": "T",
    "Mean": "T",
    "Tile": "T",
    "Transpose": "T",
    "ConcatV2": "T",
    "Pack": "T",
    "Neg": "T",
    "RealDiv": "T",
    "DepthwiseConv2dNativeBackpropFilter": "T",
    "Square": "T",
    "Sqrt": "T",
    "Rsqrt": "T",
}

OutputSpecs = Callable[[str], "list[tuple[str | None, str, str, str]] | None"]
ShapeInference = Callable[[set[str]], dict[str, list]]


# What a graph saved without its placement is told (a TF2 SavedModel, clear_devices=True).
NO_DEVICES = "the graph has no devices: save it with its placement (clear_devices=False)"


def _split_input(inp: str) -> tuple[str, int, bool]:
    """``"a:1"`` -> ("a", 1, False); ``"^a"`` -> ("a", -1, True)."""
    if inp.startswith("^"):
        return inp[1:], -1, True
    name, sep, idx = inp.rpartition(":")
    if sep and idx.isdigit():
        return name, int(idx), False
    return inp, 0, False


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        root = x
        while self.parent.get(root, root) != root:
            root = self.parent[root]
        while self.parent.get(x, x) != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


def _is_resource_output(node: RawNode, index: int) -> bool:
    if node.op in VARIABLE_OPS:
        return True
    t = node.attrs.get("T", node.attrs.get("dtype"))
    return isinstance(t, str) and (t == "RESOURCE" or t.endswith("_REF"))


def _device_of(name: str, node: RawNode, source: str) -> DeviceSpec:
    """``node``'s device as given; one error naming the file and the node if it is no device."""
    try:
        return parse_device(node.device)
    except TfschedError as e:
        raise TfschedError(f"{source}: node {name!r}: {e}") from None


def place(
    nodes: dict[str, RawNode],
    inputs: dict[str, list[tuple[str, int, bool]]],
    consumers: dict[str, list[str]],
    default_device: str,
    source: str,
) -> dict[str, str]:
    """Resolve every node's device to the full form, as TensorFlow's placer would."""
    default = parse_device(default_device)
    uf = _UnionFind()
    for name, node in nodes.items():
        for other in node.colocate_with:
            if other in nodes:
                uf.union(other, name)
        for src, idx, ctrl in inputs[name]:
            if not ctrl and node.op not in FUNCTIONAL_OPS and _is_resource_output(nodes[src], idx):
                uf.union(src, name)

    members: dict[str, list[str]] = defaultdict(list)
    for name in nodes:
        members[uf.find(name)].append(name)

    specs = {name: _device_of(name, node, source) for name, node in nodes.items()}

    group_spec: dict[str, DeviceSpec] = {}
    for root, names in members.items():
        # The resource owner's request wins, as in TensorFlow ("resource ops run where the resource is").
        ordered = sorted(names, key=lambda n: nodes[n].op not in VARIABLE_OPS)
        merged = DeviceSpec()
        for n in ordered:
            if not specs[n].is_empty:
                merged = merged.merged(specs[n]) if not merged.is_empty else specs[n]
        group_spec[root] = merged

    device: dict[str, str] = {}
    second_pass = []
    for name in nodes:
        spec = group_spec[uf.find(name)]
        if spec.is_empty:
            second_pass.append(name)
        else:
            device[name] = spec.merged(default).full()
    for name in second_pass:
        node = nodes[name]
        data_inputs = [i for i in inputs[name] if not i[2]]
        target = None
        if not inputs[name] and len(consumers[name]) == 1 and not _is_resource_output(node, 0):
            target = consumers[name][0]  # heuristic A: a generator goes with its only consumer
        elif node.op in METADATA_OPS and data_inputs:
            target = data_inputs[0][0]  # heuristic B: metadata ops go with their input
        if target is not None and target in device:
            device[name] = device[target]
        else:
            device[name] = default.full()
    return device


def _default_fetches(nodes: dict[str, RawNode], consumers: dict[str, list[str]]) -> list[str]:
    """The graph's sinks that look like a step: not initializers or savers, not lone constants,
    placeholders or empty NoOps."""
    sinks = [n for n in nodes if not consumers[n] and not _NOT_A_STEP.search(n)]
    lone = {"Const", "Placeholder", "NoOp"}
    return [n for n in sinks if nodes[n].op not in lone or (nodes[n].op == "NoOp" and nodes[n].inputs)]


def _tensor_bytes(dtype: str | None, shape: Shape | None) -> int | None:
    if dtype is None or shape is None or any(d < 0 for d in shape):
        return None
    size = DTYPE_SIZES.get(dtype.removesuffix("_REF"))
    if size is None:
        return None
    return size * math.prod(shape)


def build_comm_graph(
    raw_nodes: Iterable[RawNode],
    *,
    fetches: list[str] | None = None,
    default_device: str | None = None,
    ps_jobs: tuple[str, ...] = ("ps",),
    source: str = "<graph>",
    output_specs: OutputSpecs | None = None,
    infer_shapes: ShapeInference | None = None,
) -> CommGraph:
    """Build the communication graph of one training step.

    Parameters
    ----------
    raw_nodes : the graph's nodes (see :mod:`tfsched.graph.load`).
    fetches : op or tensor names the step runs (``train_op``, ``loss:0``); default: the graph's
        sinks that are not initializers or savers.
    default_device : where TensorFlow puts unplaced ops: the task the client connects to.
        Default: task 0 of the first non-PS job in the graph.
    ps_jobs : job names of parameter servers.
    output_specs : op type -> output arg specs (TensorFlow's registry), for output dtypes.
    infer_shapes : names -> output shapes, for transfer sources saved without ``_output_shapes``.

    Examples
    --------
    >>> from tfsched.graph.model import RawNode
    >>> g = build_comm_graph([
    ...     RawNode("w", "VarHandleOp", "/job:ps/task:0", attrs={"dtype": "FLOAT", "shape": (4, 4)}),
    ...     RawNode("r", "ReadVariableOp", "", ["w"], attrs={"dtype": "FLOAT"}),
    ...     RawNode("y", "MatMul", "/job:worker/task:0", ["r", "r"], attrs={"T": "FLOAT"}),
    ... ], fetches=["y"])
    >>> [(t.tensor, t.kind, t.bytes, t.variable) for t in g.transfers]
    [('r:0', 'pull', 64, 'w')]
    """
    if not ps_jobs:
        raise TfschedError("ps_jobs must name at least one job of parameter servers")
    for job in ps_jobs:
        check_job_name(job, "a PS job")
    nodes: dict[str, RawNode] = {}
    for rn in raw_nodes:
        if rn.name in nodes:
            raise TfschedError(f"{source}: node name {rn.name!r} appears twice")
        nodes[rn.name] = rn
    if not nodes:
        raise TfschedError(f"{source}: the graph has no nodes")

    inputs: dict[str, list[tuple[str, int, bool]]] = {}
    consumers: dict[str, list[str]] = defaultdict(list)
    for name, rn in nodes.items():
        parsed = []
        for inp in rn.inputs:
            src, idx, ctrl = _split_input(inp)
            if src not in nodes:
                raise TfschedError(f"{source}: node {name!r} has input {inp!r}, which is not in the graph")
            parsed.append((src, idx, ctrl))
            consumers[src].append(name)
        inputs[name] = parsed

    # The DAG check: loops are legal only through NextIteration (TensorFlow's while loops).
    dag = nx.DiGraph()
    dag.add_nodes_from(nodes)
    back_edges = []
    for name, ins in inputs.items():
        for src, _, _ in ins:
            if nodes[src].op in LOOP_BACK_OPS:
                back_edges.append((src, name))
            else:
                dag.add_edge(src, name)
    if not nx.is_directed_acyclic_graph(dag):
        cycle = nx.find_cycle(dag)
        path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
        raise TfschedError(f"{source}: the graph has a cycle outside control flow: {path}")

    if default_device is None:
        jobs = sorted(
            {_device_of(name, n, source).job for name, n in nodes.items() if n.device} - {None} - set(ps_jobs)
        )
        default_device = f"/job:{jobs[0] if jobs else 'worker'}/replica:0/task:0/device:CPU:0"
    devices = place(nodes, inputs, consumers, default_device, source)

    # Prune to what the fetches need (data and control inputs, as TensorFlow's pruning does).
    if fetches:
        fetch_ops = []
        for f in fetches:
            op = _split_input(f)[0]
            if op not in nodes:
                raise TfschedError(f"{source}: fetch {f!r} is not in the graph")
            fetch_ops.append(op)
    else:
        fetch_ops = _default_fetches(nodes, consumers)
        if not fetch_ops:
            raise TfschedError(f"{source}: cannot tell what a step runs; name it with --fetch")
    keep: set[str] = set()
    stack = list(fetch_ops)
    while stack:
        n = stack.pop()
        if n in keep:
            continue
        keep.add(n)
        stack.extend(src for src, _, _ in inputs[n] if src not in keep)

    g = nx.DiGraph()
    for name in nodes:  # graph order, so that topological sorts follow the file
        if name in keep:
            rn = nodes[name]
            n_out = len(rn.output_shapes) if rn.output_shapes is not None else 0
            g.add_node(
                name,
                op=Op(
                    name=name,
                    type=rn.op,
                    device=devices[name],
                    output_dtypes=[None] * n_out,
                    output_shapes=list(rn.output_shapes) if rn.output_shapes is not None else [],
                    attrs=rn.attrs,
                ),
            )
    kept_back = []
    for name in g:
        for src, idx, ctrl in inputs[name]:
            if (src, name) in back_edges:
                kept_back.append((src, name))
                continue
            tensor = f"^{src}" if ctrl else f"{src}:{idx}"
            if g.has_edge(src, name):
                g.edges[src, name]["tensors"].add(tensor)
            else:
                g.add_edge(src, name, tensors={tensor})

    tasks = {task_of(devices[n]) for n in g}
    ps_tasks = sorted(t for t in tasks if job_of(t) in ps_jobs)
    holders = {task_of(devices[n]) for n in g if nodes[n].op in VARIABLE_OPS}
    if not ps_tasks and holders and holders != tasks:
        ps_tasks = sorted(holders)
    if not ps_tasks:
        jobs = ", ".join(sorted({t.split("/")[1] for t in tasks}))
        # e.g. a SavedModel exported with clear_devices=True, the serving default
        bare = f"; {NO_DEVICES}" if not any(nodes[n].device for n in g) else ""
        raise TfschedError(
            f"{source}: no parameter server: no op of the step is placed on a job named "
            f"{' or '.join(ps_jobs)} (jobs found: {jobs}){bare}"
        )
    stateful = {task_of(devices[n]) for n in g if nodes[n].op in VARIABLE_OPS or "Table" in nodes[n].op}
    if holders and not stateful & set(ps_tasks):
        # the PS named hold no variable (nor a table: an embedding's) where others hold some: the
        # roles would come out swapped, a worker's reads taken for pushes (--ps-job worker, a
        # probe), not an error
        where = ", ".join(sorted({job_of(t) for t in holders}))
        raise TfschedError(
            f"{source}: no variable of the step is on the parameter servers' job "
            f"{' or '.join(ps_jobs)} but on {where}: name the job that holds them with --ps-job"
        )
    worker_tasks = sorted(tasks - set(ps_tasks))

    transfers = _find_transfers(g, nodes, inputs, set(ps_tasks), source, output_specs, infer_shapes)
    order = list(nx.topological_sort(g))
    ungated = ungated_transfers(transfers, nodes, inputs, order, lambda n: g.nodes[n]["op"].task)
    return CommGraph(
        graph=g,
        transfers=transfers,
        fetches=fetch_ops,
        ps_tasks=ps_tasks,
        worker_tasks=worker_tasks,
        back_edges=kept_back,
        source=source,
        ungated=ungated,
    )


# Reads of some rows of a variable (embedding lookups on the PS): their pull is that variable's.
GATHER_OPS = frozenset({"ResourceGather", "ResourceGatherNd", "Gather", "GatherV2", "GatherNd"})


def _variable_behind(g: nx.DiGraph, name: str, inputs) -> str | None:
    seen = set()
    while name not in seen:
        seen.add(name)
        op = g.nodes[name]["op"] if name in g else None
        if op is None:
            return None
        if op.type in VARIABLE_OPS:
            return name
        if op.type not in FORWARDING_OPS and op.type not in GATHER_OPS:
            return None
        data = [src for src, _, ctrl in inputs[name] if not ctrl]
        if not data:
            return None
        name = data[0]
    return None


def _variables_updated_by(
    g: nx.DiGraph, start: Iterable[str], task: str, inputs, depth: int = 8
) -> tuple[str, ...]:
    """The variables that the update ops nearest to ``start`` on ``task`` write, sorted.

    Several where one tensor feeds several updates: a learning rate feeding every apply op, or
    a gradient Grappler merged with the identical gradients of other variables.
    """
    frontier = sorted(set(start))
    seen: set[str] = set()
    for _ in range(depth):
        found = set()
        nxt = []
        for n in frontier:
            if n in seen:
                continue
            seen.add(n)
            op = g.nodes[n]["op"]
            if op.task != task:
                continue
            if op.type in UPDATE_OPS or op.type.startswith(UPDATE_PREFIXES):
                data = [src for src, _, ctrl in inputs[n] if not ctrl]
                var = _variable_behind(g, data[0], inputs) if data else None
                if var is not None:
                    found.add(var)
                    continue
            nxt.extend(g.successors(n))
        if found:
            return tuple(sorted(found))
        frontier = nxt
    return ()


def _accumulated_variable(
    tensor: str, cons: list[str], nodes: dict[str, RawNode], inputs, successors=None
) -> str | None:
    """The variable a gradient pushed into SyncReplicasOptimizer's accumulator updates: the one
    the accumulator is named for, where the tensor is only that, on the PS: the apply op's
    gradient (input 2 on; input 1 is the worker's local step), directly or through a Cast or
    Identity (the optimizer casts a sparse gradient's indices to int64 there). A tensor the PS
    also uses otherwise (the rows of an embedding's lookup, which Grappler may send once for
    both) is no variable's. ``successors``: of a node, in the graph.

    >>> nodes = {n.name: n for n in [
    ...     RawNode("w", "VarHandleOp", "/job:ps/task:0"),
    ...     RawNode("acc", "ResourceConditionalAccumulator", "/job:ps/task:0",
    ...             attrs={"shared_name": "w:0/grad_accum"}),
    ...     RawNode("step", "ReadVariableOp", "/job:worker/task:0"),
    ...     RawNode("grad", "MatMul", "/job:worker/task:0"),
    ...     RawNode("apply", "ResourceAccumulatorApplyGradient", "/job:ps/task:0", ["acc", "step", "grad"]),
    ... ]}
    >>> inputs = {n: [(i, 0, False) for i in r.inputs] for n, r in nodes.items()}
    >>> _accumulated_variable("grad:0", ["apply"], nodes, inputs), _accumulated_variable("step:0", ["apply"], nodes, inputs)
    ('w', None)
    """
    uses = []  # (the tensor an op on the PS takes, the op), a Cast or Identity looked through
    for c in cons:
        if nodes[c].op not in ("Cast", "Identity"):
            uses.append((tensor, c))
            continue
        data = [
            n for n in (successors or (lambda _: ()))(c) if any(s == c and not k for s, _, k in inputs[n])
        ]
        if not data:
            return None
        uses += [(f"{c}:0", n) for n in data]
    found = None
    for fed, c in uses:
        data = [f"{s}:{i}" for s, i, ctrl in inputs[c] if not ctrl]
        if nodes[c].op not in ACCUMULATOR_APPLY_OPS or fed not in data[2:]:
            return None
        shared = str(nodes[data[0].rsplit(":", 1)[0]].attrs.get("shared_name") or "")
        var = (
            shared[: -len(ACCUMULATOR_SUFFIX)].rsplit(":", 1)[0]
            if shared.endswith(ACCUMULATOR_SUFFIX)
            else ""
        )
        if var not in nodes or nodes[var].op not in VARIABLE_OPS:
            return None
        found = found or var
    return found


def _replicated_constants(g: nx.DiGraph, nodes: dict[str, RawNode]) -> set[str]:
    """Constants that TensorFlow copies to each consuming device instead of sending them.

    ``ReplicateConstantsPass`` (``common_runtime/replicate_constants_pass.cc``, after placement):
    a CPU ``Const`` of at most 16 elements with more than one out edge, no control successor,
    and consumers on more than one device is replicated onto each of those devices.
    """
    out = set()
    for n in g:
        op = g.nodes[n]["op"]
        if op.type != "Const" or "/device:CPU:" not in op.device:
            continue
        if not small_const(nodes[n]):
            continue
        uses = [t for _, _, d in g.out_edges(n, data=True) for t in d["tensors"]]
        if len(uses) <= 1 or any(t.startswith("^") for t in uses):
            continue
        if len({g.nodes[v]["op"].device for v in g.successors(n)}) > 1:
            out.add(n)
    return out


def _find_transfers(g, nodes, inputs, ps_tasks, source, output_specs, infer_shapes) -> list[Transfer]:
    crossing: dict[tuple[str, str], list[str]] = {}  # (tensor, destination task) -> consumers
    replicated = _replicated_constants(g, nodes)
    for u, v, data in g.edges(data=True):
        tu, tv = g.nodes[u]["op"].task, g.nodes[v]["op"].task
        if tu != tv and u not in replicated:
            for tensor in data["tensors"]:
                crossing.setdefault((tensor, tv), []).append(v)

    # Shapes: `_output_shapes` first, then the variable's own shape for reads, then TensorFlow.
    def shape_of(op_name: str, idx: int) -> Shape | None:
        op = g.nodes[op_name]["op"]
        if idx < len(op.output_shapes) and op.output_shapes[idx] is not None:
            return op.output_shapes[idx]
        if op.type in ("ReadVariableOp", "VariableV2", "Identity"):
            var = _variable_behind(g, op_name, inputs)
            if var is not None and isinstance(nodes[var].attrs.get("shape"), tuple):
                return nodes[var].attrs["shape"]
        return None

    missing = {
        t.split(":")[0]
        for t, _ in crossing
        if not t.startswith("^") and shape_of(t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1])) is None
    }
    inferred = infer_shapes(missing) if (missing and infer_shapes is not None) else {}

    transfers = []
    for (tensor, dst_task), cons in sorted(crossing.items()):
        cons = sorted(set(cons))
        ctrl = tensor.startswith("^")
        src_op = tensor[1:] if ctrl else tensor.rsplit(":", 1)[0]
        op = g.nodes[src_op]["op"]
        src_dev = op.device
        dst_dev = g.nodes[cons[0]]["op"].device
        updates: tuple[str, ...] = ()
        if ctrl:
            kind, nbytes, dtype, shape, var = "control", 0, None, None, None
        else:
            idx = int(tensor.rsplit(":", 1)[1])
            dtype = _output_dtype(nodes[src_op], idx, output_specs, source)
            shape = shape_of(src_op, idx)
            if shape is None and src_op in inferred and idx < len(inferred[src_op]):
                shape = inferred[src_op][idx]
            nbytes = _tensor_bytes(dtype, shape)
            if op.task in ps_tasks:
                kind = "pull"
                var = _variable_behind(g, src_op, inputs)
            elif dst_task in ps_tasks:
                kind = "push"
                updated = _variables_updated_by(g, cons, dst_task, inputs)
                var = updated[0] if len(updated) == 1 else None
                updates = updated if len(updated) > 1 else ()
                if not updated:  # as the pass: a gradient into SyncReplicasOptimizer's accumulator
                    var = _accumulated_variable(tensor, cons, nodes, inputs, g.successors)
            else:
                # Worker to worker: in gRPC TensorFlow the receiver pulls every tensor.
                kind, var = "pull", _variable_behind(g, src_op, inputs)
        transfers.append(
            Transfer(
                tensor=tensor,
                src=src_dev,
                dst=dst_dev,
                kind=kind,
                bytes=nbytes,
                variable=var,
                consumers=tuple(cons),
                dtype=dtype,
                shape=shape,
                updates=updates,
            )
        )
    return transfers


def _output_dtype(node: RawNode, idx: int, output_specs: OutputSpecs | None, source: str) -> str | None:
    attr = _ALL_OUTPUTS_OF.get(node.op)
    if attr is not None and isinstance(node.attrs.get(attr), str):
        return node.attrs[attr]
    specs = output_specs(node.op) if output_specs is not None else None
    if specs is None:
        if output_specs is not None:
            raise TfschedError(
                f"{source}: node {node.name!r} has op {node.op!r}, which TensorFlow does not know"
            )
        t = node.attrs.get("T", node.attrs.get("dtype"))
        return t if isinstance(t, str) else None
    # Expand the arg list into one dtype per output index.
    flat: list[str | None] = []
    for fixed, type_attr, number_attr, type_list_attr in specs:
        if type_list_attr:
            flat.extend(node.attrs.get(type_list_attr, []))
            continue
        dt = fixed if fixed else node.attrs.get(type_attr)
        flat.extend([dt] * (int(node.attrs.get(number_attr, 1)) if number_attr else 1))
    dt = flat[idx] if idx < len(flat) else None
    if dt is not None and dt.removesuffix("_REF") not in DTYPE_SIZES and dt not in VARIABLE_SIZE_DTYPES:
        raise TfschedError(f"{source}: node {node.name!r}: unsupported dtype {dt}")
    return dt
