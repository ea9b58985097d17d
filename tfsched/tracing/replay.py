"""The graph a trace actually ran, for replay in the simulator (as dPRO replays its traces).

A user's saved graph is what Grappler starts from; what ran is Grappler's output, partitioned:
identity nodes removed, arithmetic rewritten, constants folded. Op times of a trace can only be
matched to the ops that ran, so the simulator predicts a traced step best on the trace's own
partition graphs: ``_Send``/``_Recv`` pairs turned back into edges, byte counts from the
transfers the trace recorded (exact, also where no static shape is known).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable

from tfsched.errors import TfschedError
from tfsched.graph.devices import task_of
from tfsched.graph.model import DTYPE_SIZES, CommGraph, RawNode
from tfsched.tracing.trace import Trace


def partition_graph_defs(trace: Trace) -> list:
    """The GraphDefs of the partition graphs ``trace`` keeps (base64 in the file); one that is
    not one is an error naming the trace's file."""
    from google.protobuf.message import DecodeError

    from tfsched.graph.load import _protos

    graph_pb2 = _protos()[0]
    out = []
    for i, g in enumerate(trace.partition_graphs):
        try:
            out.append(graph_pb2.GraphDef.FromString(base64.b64decode(g)))
        except (DecodeError, ValueError, TypeError):
            raise TfschedError(
                f"{trace.source}: partition graph {i} of the trace is corrupt (not a GraphDef)"
            ) from None
    return out


def comm_graph_of_trace(
    trace: Trace, *, fetches: list[str] | None = None, source: str = "<trace>"
) -> CommGraph:
    """The CommGraph of the partition graphs ``trace``'s steps ran; of a step tfsched scheduled,
    without its pass (``_without_the_pass``), its tensors' bytes summed over their slices."""
    return _ran(trace, fetches, source)[0]


def transfer_keys(
    trace: Trace, *, fetches: list[str] | None = None, source: str = "<trace>"
) -> dict[tuple[str, str], tuple[str, ...]]:
    """What each message of ``trace`` carried, as (tensor as traced, receiver task) -> the keys
    of its transfer in the graph that ran (``Transfer.keys``: the variable it reads or updates,
    which survives Grappler's rewrites, then, for a push Grappler merged, the variables it
    updates; as ``ordering.carry_over`` matches a schedule). A gate's
    or slice's message has the keys of the tensor it forwards; what the pass added
    (acknowledgements, credit) and what no transfer of the graph carries have none. Empty for a
    trace that keeps no partition graphs.

    Grappler sends some tensors under other names than the saved graph's: a gradient's push
    without the ``tuple/control_dependency_1`` Identity it went through
    (``tracing.match.identity_sources`` follows those on the saved graph's side), so a
    schedule's records name tensors the trace never moved."""
    if not trace.partition_graphs:
        return {}
    graph, sent = _ran(trace, fetches, source)
    by_tensor = {(t.tensor, task_of(t.dst)): t.keys for t in graph.transfers}
    out: dict[tuple[str, str], tuple[str, ...]] = {}
    for x in trace.transfers:
        tensor = sent(x.tensor)
        keys = by_tensor.get((tensor, task_of(x.dst))) if tensor is not None else None
        if keys is not None:
            out[(x.tensor, task_of(x.dst))] = keys
    return out


def _ran(
    trace: Trace, fetches: list[str] | None, source: str
) -> tuple[CommGraph, Callable[[str], str | None]]:
    """``comm_graph_of_trace``, and what a tensor the trace sent is in it (``_without_the_pass``)."""
    from tfsched.graph.build import _output_dtype, build_comm_graph
    from tfsched.graph.load import nodes_from_partition_graphs, output_specs

    if not trace.partition_graphs:
        raise TfschedError(f"{source}: the trace holds no partition graphs to replay")
    nodes, sent = _without_the_pass(nodes_from_partition_graphs(partition_graph_defs(trace), source))
    by_name = {n.name: n for n in nodes}
    # a step's bytes of each tensor to each device: a gate's are of the tensor it forwards
    # (not always the one its name says: the pass gates what an Identity forwarded, and the
    # graph that ran has no Identity), a tensor's slices add up
    per_step: dict[tuple[int, str, str], int] = {}
    for t in trace.transfers:
        tensor = sent(t.tensor)
        if tensor is not None:
            per_step[(t.step, tensor, t.dst)] = per_step.get((t.step, tensor, t.dst), 0) + t.bytes
    seen: dict[str, int] = {}
    for (_step, tensor, _dst), nbytes in per_step.items():
        seen.setdefault(tensor, nbytes)

    def shapes_from_trace(names: set[str]) -> dict[str, list]:
        out: dict[str, list] = {}
        for tensor, nbytes in seen.items():
            op, _, idx = tensor.rpartition(":")
            if op not in names or op not in by_name or not idx.isdigit():
                continue
            dtype = _output_dtype(by_name[op], int(idx), output_specs, source)
            size = DTYPE_SIZES.get((dtype or "").removesuffix("_REF"))
            if not size:
                continue
            shapes = out.setdefault(op, [])
            shapes.extend([None] * (int(idx) + 1 - len(shapes)))
            shapes[int(idx)] = (nbytes // size,)
        return out

    fetches = [f for f in (fetches or []) if f.split(":")[0].lstrip("^") in by_name] or None
    graph = build_comm_graph(
        nodes, fetches=fetches, source=source, output_specs=output_specs, infer_shapes=shapes_from_trace
    )
    return graph, sent


def ran_node_names(trace: Trace) -> set[str] | None:
    """The names of the nodes the traced steps ran (of every partition graph), None for a trace
    that keeps no partition graphs. A node of the saved graph that is not among them did not
    run: Grappler fused it into another (a Conv2D and its BiasAdd into the op named after their
    Relu), folded it into a constant, or pruned it."""
    if not trace.partition_graphs:
        return None
    return {n.name for g in partition_graph_defs(trace) for n in g.node}


def _without_the_pass(nodes: list[RawNode]) -> tuple[list[RawNode], Callable[[str], str | None]]:
    """Merged partition graphs (``graph.load.nodes_from_partition_graphs``) of a step tfsched's
    pass scheduled, as the step runs without it, and what a tensor the step sent is in that
    graph (None: it carried none).

    A gate becomes the Identity it stands in for (the pass gates what an Identity forwarded,
    and takes over its control inputs: a gradient's push waits for its sibling's, say), so what
    it sent is the one transfer of the tensor. A tensor's slices are one again: its first
    slice's gate takes the split's inputs and sends the whole, the other slices' gates and the
    split go, and the receiver's concat is that transfer. Acknowledgements, credits and credit
    sinks go, with the control edges they added (a PS's update waits for its credit). Nodes of
    a step without the pass come back as they are. The gates' traced durations are waiting, not
    compute: ``oracle.fit.op_times`` leaves them out."""
    by_name = {n.name: n for n in nodes}
    first_slice: dict[str, str] = {}  # split -> the gate of its slice 0
    for n in nodes:
        if n.op == "TfschedGate" and n.inputs:
            src, _, port = n.inputs[0].partition(":")
            if by_name.get(src) is not None and by_name[src].op == "TfschedSplit" and int(port or 0) == 0:
                first_slice[src] = n.name
    aliases: dict[str, str] = {}  # node gone -> the tensor that stands for its output 0
    dropped: set[str] = set()
    for n in nodes:
        data = [i for i in n.inputs if not i.startswith("^")]
        if n.op == "TfschedGate":
            src, _, port = data[0].partition(":")
            if src not in first_slice:
                n.op = "Identity"
            elif n.name == first_slice[src]:
                n.op = "Identity"
                n.inputs = [*by_name[src].inputs, *(i for i in n.inputs if i.startswith("^"))]
            else:
                aliases[n.name] = f"{first_slice[src]}:0"
        elif n.op == "TfschedConcat":
            aliases[n.name] = data[0] if ":" in data[0] else f"{data[0]}:0"
        elif n.op == "TfschedSplit":
            aliases[n.name] = f"{first_slice.get(n.name, data[0])}:0"
        elif n.op.startswith("Tfsched") or n.name.startswith("tfsched_credit_sink_"):
            dropped.add(n.name)

    def source(op: str) -> str:
        tensor = f"{op}:0"
        while op in aliases:  # a concat of slices: the first slice's gate
            tensor = aliases[op]
            op = tensor.rpartition(":")[0]
        return tensor

    def sent(tensor: str) -> str | None:
        op = tensor.rpartition(":")[0]
        return None if op in dropped else source(op) if op in aliases else tensor

    kept = [n for n in nodes if n.name not in aliases and n.name not in dropped]
    if len(kept) == len(nodes):
        return nodes, sent
    for n in kept:
        inputs = []
        for i in n.inputs:
            ctrl, op = i.startswith("^"), i.lstrip("^").split(":")[0]
            if op in dropped:
                continue
            if op in aliases:
                i = f"^{source(op).rpartition(':')[0]}" if ctrl else source(op)
            inputs.append(i)
        n.inputs = list(dict.fromkeys(inputs))
    return kept, sent


def graph_that_ran(trace: Trace, fetches: list[str] | None, *, source: str = "<trace>") -> CommGraph | None:
    """The CommGraph of the partition graphs ``trace``'s steps ran, to simulate instead of the
    saved graph; None for a trace that keeps none (written before traces kept them). Of steps
    tfsched's pass scheduled, the graph without its gates, slices and credit
    (``_without_the_pass``), which is what a schedule is applied to.

    Grappler rewrites the graph before it runs, and what crosses the network is what the
    rewritten graph sends. On Par-32 training it merges the 32 identical weight gradients (one
    input, one upstream gradient) into one MatMul, so the graph that ran pushes 2 tensors a step
    where the saved graph has 33; laid out on the saved graph, every mode of the bench was
    predicted 46% to 73% slow, on the graph that ran 0% to 18%
    (``benchmarks/results/par32-train-s29-repredicted.md``). Its ops also carry the names the
    trace timed them by, fused ops included, so none goes untimed. A schedule made from the
    saved graph is applied to it as the pass applies it (``ordering.carry_over``)."""
    if not trace.partition_graphs:
        return None
    return comm_graph_of_trace(trace, fetches=fetches, source=source)


# What the pass names its gates (cc/scheduler.cc): "SRC/tfsched_gate[_PORT]_to_TASK.TAG" for a
# whole tensor, "SRC/tfsched[_PORT]_to_TASK_gate_I.TAG" for slice I, TAG the fingerprint of the
# graph it gated (GraphTag: each graph a session runs has gate kernels of its own); their
# acknowledgements ".../ack" and credits ".../credit"; the credit sinks "tfsched_credit_sink_TASK"
# carry no tensor of the schedule.
GRAPH_TAG = r"\.[0-9a-f]{16}"
_TAGGED = re.compile(rf"(/tfsched[^/]*?){GRAPH_TAG}(?=/|:|$)")
_ACK = re.compile(r"/tfsched[^/]*/ack(?:_\d+)?:\d+$")
_GATE = re.compile(r"^(?P<src>.+)/tfsched(?:_gate)?(?:_(?P<port>\d+))?_to_[^/]*:0$")


def untagged(name: str) -> str:
    """A gate's name (or its tensor's, its acknowledgement's, its credit's) as the pass names it
    without its graph's tag: what stays the same in every graph of the model.

    >>> untagged("fc/w/read/tfsched_to_worker_0_gate_3.00a1b2c3d4e5f607/ack:0")
    'fc/w/read/tfsched_to_worker_0_gate_3/ack:0'
    >>> untagged("fc/w/read/tfsched_gate_to_ps_0.00a1b2c3d4e5f607")
    'fc/w/read/tfsched_gate_to_ps_0'
    >>> untagged("model/v1.5")  # not a gate's
    'model/v1.5'
    """
    return _TAGGED.sub(r"\1", name)


def scheduled_tensor(tensor: str) -> str | None:
    """The tensor of the graph a transfer of a scheduled step carries: ``tensor`` itself, or the
    one a gate or slice of it forwards; None for what the pass added (acknowledgements, credit).

    >>> scheduled_tensor("fc/MatMul/ReadVariableOp:0")
    'fc/MatMul/ReadVariableOp:0'
    >>> scheduled_tensor("fc/MatMul/ReadVariableOp/tfsched_to_worker_0_gate_3.00a1b2c3d4e5f607:0")
    'fc/MatMul/ReadVariableOp:0'
    >>> scheduled_tensor("split/tfsched_gate_1_to_ps_0:0")
    'split:1'
    >>> scheduled_tensor("fc/w/tfsched_to_worker_0_gate_3/ack:0") is None
    True
    >>> scheduled_tensor("model/ack:0")  # a tensor of the user's named so
    'model/ack:0'
    """
    if tensor.startswith("tfsched_credit_sink_") or _ACK.search(tensor):
        return None
    m = _GATE.match(tensor)
    return f"{m['src']}:{m['port'] or 0}" if m else tensor
