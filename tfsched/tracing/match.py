"""Mapping a trace back to a CommGraph: how much of the graph the trace explains."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfsched.errors import TfschedError
from tfsched.graph.devices import task_of
from tfsched.graph.model import CommGraph
from tfsched.tracing.collector import complete_steps, missing_transfers
from tfsched.tracing.trace import FUNCTIONS_API, Trace


@dataclass
class MatchReport:
    ops_matched: int
    ops_total: int
    transfers_matched: int
    transfers_total: int
    unmatched_transfers: list[str] = field(default_factory=list)
    steps: int = 0  # traced steps
    incomplete_steps: int = 0  # of them, those that did not record every transfer
    ops_not_run: int = 0  # of the graph's ops, those the traced steps did not run (Grappler's rewrites)
    # A trace of steps tfsched's pass scheduled: how many of its transfers were gates' and
    # slices' outputs, read as the tensors they forward (0: a trace of unscheduled steps)
    gated_transfers: int = 0

    def line(self) -> str:
        out = (
            f"trace matches {self.ops_matched}/{self.ops_total} ops and "
            f"{self.transfers_matched}/{self.transfers_total} transfers of the graph"
        )
        if self.gated_transfers:
            out += (
                f" (steps tfsched scheduled: {self.gated_transfers} transfers a step of its gates and "
                "slices, read as the tensors they forward)"
            )
        if self.ops_not_run:
            out += (
                f"; {self.ops_not_run} ops did not run (fused, folded or pruned by Grappler: "
                "their time is in the ops that replaced them)"
            )
        if self.incomplete_steps:
            kept = (
                "times from the others"
                if self.incomplete_steps < self.steps
                else "no step is complete: times from all of them"
            )
            out += (
                f"; {self.incomplete_steps} of {self.steps} traced steps did not record every "
                f"transfer ({kept})"
            )
        return out


def forwarded_bytes(trace: Trace) -> tuple[dict[tuple[str, str], int], int]:
    """(tensor, receiving task) -> the bytes a step moved of it, and how many transfers a step
    were the pass's gates' and slices' outputs.

    A step tfsched scheduled sends a gate's output for each tensor (``tracing.replay.
    scheduled_tensor`` reads the tensor it forwards from its name), and a partitioned tensor as
    slices that add up to it; acknowledgements and credit carry none. Summed per step and
    receiving device, as the tensor is received whole; a trace of unscheduled steps reads as it is.
    """
    from tfsched.tracing.replay import scheduled_tensor

    per_step: dict[tuple[int, str, str], int] = {}
    gated = 0
    for t in trace.transfers:
        tensor = scheduled_tensor(t.tensor)
        if tensor is None:
            continue
        gated += tensor != t.tensor
        key = (t.step, tensor, t.dst)
        per_step[key] = per_step.get(key, 0) + t.bytes
    seen: dict[tuple[str, str], int] = {}
    for (_step, tensor, dst), nbytes in per_step.items():
        seen.setdefault((tensor, task_of(dst)), nbytes)
    return seen, round(gated / max(trace.steps, 1))


def identity_sources(graph: CommGraph, tensor: str) -> list[str]:
    """``tensor``, and back along a chain of Identities the tensors it is the value of.

    Grappler's dependency optimizer removes an Identity whose only use is a control dependency
    (``tf.tuple``'s ``control_dependency_1``, which every gradient of ``tf.gradients`` goes
    through) and sends the tensor it forwarded instead: VGG16 training's pushes of its 16 bias
    gradients and its first kernel's cross as ``BiasAdd_grad/BiasAddGrad:0`` where the saved
    graph sends ``BiasAdd_grad/tuple/control_dependency_1:0``. Until the thirty-second session
    those did not match, and a trace of the very graph matched 48 of its 65 transfers.
    """
    out = [tensor]
    seen = {tensor}
    name, _, index = tensor.rpartition(":")
    while name in graph.graph and index == "0" and graph.op(name).type in ("Identity", "Snapshot"):
        inputs = [
            x
            for _, _, d in graph.graph.in_edges(name, data=True)
            for x in d.get("tensors", ())
            if not x.startswith("^")
        ]
        if len(inputs) != 1 or inputs[0] in seen:
            break
        tensor = inputs[0]
        out.append(tensor)
        seen.add(tensor)
        name, _, index = tensor.rpartition(":")
    return out


def is_function_graph(graph: CommGraph) -> bool:
    """Whether ``graph`` is a function's body as TensorFlow instantiated it (its inputs ``_Arg``
    nodes, its outputs ``_Retval``): the graph ``enable_functions(dump_graphs=...)`` writes."""
    return any(graph.op(n).type in ("_Arg", "_Retval") for n in graph.graph)


def match_trace(graph: CommGraph, trace: Trace, source: str = "<trace>") -> MatchReport:
    """Count the graph's ops and data transfers that the trace timed; never drops silently.

    A trace that explains fewer than half of the graph's transfers is from another graph (or
    another fetch set): an error that says so. A trace of the same graph matches nearly all of
    them; the few it may miss (constants TensorFlow replicated instead of sending) are listed in
    the report. A trace of steps tfsched's pass scheduled matches by the tensors its gates and
    slices forward (``forwarded_bytes``): its ops are the graph's, and its messages those the
    links carried, each timed from its gate's release (``oracle.fit``). Until the thirty-first
    session such a trace was an error, and a user of ``tfsched.enable`` had to turn it off to
    trace. A trace of TensorFlow 2 calls (``tracing.functions``) matches a function's graph as
    the pass got it (``is_function_graph``); beside another graph it is an error that says so.
    """
    if trace.meta.get("api") == FUNCTIONS_API and not is_function_graph(graph):
        raise TfschedError(
            f"{trace.source}: a trace of TensorFlow 2 function calls (tfsched.trace_functions), not of "
            f"a session's steps, and {graph.source or 'the graph'} is not a function's graph: give the "
            "graph enable_functions(dump_graphs=DIR) wrote"
        )
    timed_ops = {o.node for o in trace.ops}
    # Names alone are not enough (every model has a MatMul/ReadVariableOp): the size must agree too.
    seen, gated = forwarded_bytes(trace)
    data = [t for t in graph.transfers if t.kind != "control"]

    def matches(t) -> bool:
        for tensor in identity_sources(graph, t.tensor):
            key = (tensor, t.dst_task)
            if key in seen and (t.bytes is None or seen[key] == t.bytes):
                return True
        return False

    unmatched = [f"{t.tensor} -> {t.dst_task}" for t in data if not matches(t)]
    report = MatchReport(
        ops_matched=sum(1 for n in graph.graph if n in timed_ops),
        ops_total=len(graph.graph),
        transfers_matched=len(data) - len(unmatched),
        transfers_total=len(data),
        unmatched_transfers=unmatched,
        steps=trace.steps,
        incomplete_steps=len(missing_transfers(trace)),
        gated_transfers=gated,
    )
    if data and report.transfers_matched * 2 < len(data):
        raise TfschedError(
            f"{source}: the trace matches {report.transfers_matched} of the {len(data)} transfers of "
            f"{graph.source or 'this graph'}; it is from another graph or another fetch"
        )
    return report


def oracle_for(
    graph: CommGraph,
    trace: Trace,
    statistic: str = "min",
    *,
    fallback=None,
    report: MatchReport | None = None,
):
    """The time oracle of ``trace`` for ``graph``'s ops: ``TimeOracle.from_trace`` of its
    complete steps (a trace written before the tracer noted its short steps is checked here).

    An op the trace did not time keeps ``fallback``'s estimate, unless the traced steps did not
    run it (``replay.ran_node_names``): then it takes no time, its work being in the op that
    replaced it. With the cost model's time for it, a Conv2D that Grappler fused into the op
    named after its Relu was counted twice: VGG16 inference at batch 397, traced on the emulated
    cluster, was predicted at 17.6 s a step from 1.2 s of traced compute a worker (13 cost-model
    seconds from the fused convolutions), and at 4.4 s with this. ``report`` counts those ops.
    """
    from tfsched.oracle.oracle import TimeOracle
    from tfsched.tracing.replay import ran_node_names

    oracle = TimeOracle.from_trace(complete_steps(trace), statistic, fallback=fallback)
    ran = ran_node_names(trace)
    if ran is not None:
        not_run = [n for n in graph.graph if n not in ran]
        oracle.op_times.update(dict.fromkeys(not_run, 0.0))
        if report is not None:
            report.ops_not_run = len(not_run)
    return oracle
