"""The transfers the enforcement pass leaves as TensorFlow makes them (``cc/scheduler.cc``, ``Gate``).

The pass gates every tensor one task sends another, but for these, which it leaves ungated:

* a control edge (it carries no tensor);
* a tensor of a ref, resource or variant type (a gate holds a value);
* a small constant, of at most 16 elements (TensorFlow may copy it to each device that uses it);
* a tensor whose producer may be dead, or live in a loop's frame (``control_flow_region``): its
  gate could never run, or run once per iteration, and leave a counter short or over;
* an operand that a sum sent away ungated could take over (``_operands_of_ungated_sums``), so that
  the sum adds in TensorFlow's order.

An ungated transfer goes when TensorFlow sends it: it takes no place in its channel's counter,
no credit, and the partition does not cut it. Until the hundred-and-twenty-fifth session the
analysis and the simulator scheduled these like the others (a priority on the counter, slices
under a partition), which the pass never enforced; they now leave them to TensorFlow as the pass
does (``CommGraph.ungated``), and the two agree transfer for transfer on random graphs with
conditionals and loops (``tests/enforce/test_pass.py``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping

from tfsched.graph.model import RawNode, Transfer

SWITCH_OPS = frozenset({"Switch", "RefSwitch"})
MERGE_OPS = frozenset({"Merge", "RefMerge"})
ENTER_OPS = frozenset({"Enter", "RefEnter"})
EXIT_OPS = frozenset({"Exit", "RefExit"})
LOOP_BACK_OPS = frozenset({"NextIteration", "RefNextIteration"})
# a constant of at most this many elements is not gated (the pass's kReplicatedConstMaxElements)
SMALL_CONST_ELEMENTS = 16

Inputs = Mapping[str, list[tuple[str, int, bool]]]  # op -> its inputs in order: (source, port, control)


def control_flow_region(order: Iterable[str], op_of: Callable[[str], str], inputs: Inputs) -> set[str]:
    """The ops whose outputs may be dead or live in a loop's frame, as the pass finds them
    (``ControlFlowRegion``). ``order``: the ops in a topological order without the loops' back
    edges; ``op_of``: an op's type; ``inputs``: its inputs in TensorFlow's order.

    A loop's frame is what its Enter ops reach before its Exit ops. Outside loops, an op may be
    dead when it depends on an output of a Switch, data or control; a Merge whose inputs differ
    only by the two branches of one predicate (a conditional's) depends on neither.

    >>> ins = {"p": [], "x": [], "s": [("x", 0, False), ("p", 0, False)],
    ...        "a": [("s", 1, False)], "b": [("s", 0, False)],
    ...        "m": [("a", 0, False), ("b", 0, False)], "y": [("m", 0, False)]}
    >>> ops = {"s": "Switch", "m": "Merge"}
    >>> sorted(control_flow_region(ins, lambda n: ops.get(n, "Identity"), ins))
    ['a', 'b', 's']
    """
    predicates: dict[tuple[str, int], int] = {}  # a conditional's predicate tensor, numbered

    def predicate(switch: str) -> int:
        src = inputs[switch][1][:2] if len(inputs[switch]) > 1 else ("", 0)
        return predicates.setdefault(src, len(predicates))

    depth: dict[str, int] = {}  # loop frames around the op
    on: dict[str, frozenset[tuple[int, int]]] = {}  # the (predicate, branch) pairs it depends on
    for v in order:
        op = op_of(v)
        ins: list[set[tuple[int, int]]] = []
        d = 0
        for u, port, control in inputs[v]:
            if u not in depth or op_of(u) in LOOP_BACK_OPS:
                continue
            d = max(d, depth[u])
            c = set(on[u])
            if op_of(u) in SWITCH_OPS and depth[u] == 0:
                p = predicate(u)
                c |= {(p, 0), (p, 1)} if control else {(p, port)}  # control: dead with either
            ins.append(c)
        depth[v] = d + 1 if op in ENTER_OPS else max(d - 1, 0) if op in EXIT_OPS else d
        if op in MERGE_OPS and depth[v] == 0 and len(ins) >= 2:
            common = set.intersection(*ins)
            apart = [c - common for c in ins]
            ends = {pb for c in apart for pb in c}  # each input: the common part and one branch
            if all(len(c) == 1 for c in apart) and len({p for p, _ in ends}) == 1 and len(ends) == 2:
                on[v] = frozenset(common)  # one branch or the other runs: live where both are
                continue
        on[v] = frozenset().union(*ins)
    return {v for v in depth if depth[v] > 0 or on[v] or op_of(v) in SWITCH_OPS}


def small_const(node: RawNode) -> bool:
    """A constant of at most ``SMALL_CONST_ELEMENTS``: the pass does not gate it, and TensorFlow
    copies it to each device that uses it where several do (``graph.build``)."""
    shape = node.attrs.get("value_shape")
    return (
        node.op == "Const"
        and shape is not None
        and math.prod(max(d, 0) for d in shape) <= SMALL_CONST_ELEMENTS
    )


def _unheld_dtype(dtype: str | None) -> bool:
    """A dtype no gate holds: a ref, a resource handle or a variant."""
    return dtype is not None and (dtype.endswith("_REF") or dtype in ("RESOURCE", "VARIANT"))


def ungated_transfers(
    transfers: list[Transfer],
    nodes: Mapping[str, RawNode],
    inputs: Inputs,
    order: list[str],
    task_of_op: Callable[[str], str],
) -> frozenset[Transfer]:
    """The ``transfers`` the pass leaves ungated (the module's docstring). ``nodes``: the graph's
    ops; ``inputs``: each one's, in TensorFlow's order; ``order``: the step's ops in a
    topological order without the loops' back edges; ``task_of_op``: where each op runs."""
    region = control_flow_region(order, lambda n: nodes[n].op, inputs)
    out = {
        t
        for t in transfers
        if t.kind == "control" or _unheld_dtype(t.dtype) or t.src_op in region or small_const(nodes[t.src_op])
    }
    data = [t for t in transfers if t.kind != "control"]
    by_tensor: dict[str, list[Transfer]] = defaultdict(list)  # "op:port" -> its transfers
    for t in data:
        by_tensor[t.tensor].append(t)
    sums = [n for n in order if nodes[n].op == "AddN" and f"{n}:0" in by_tensor]
    while True:  # until none is left: an operand left ungated may itself be such a sum
        more = _operands_of_ungated_sums(sums, by_tensor, out, inputs, task_of_op) - out
        if not more:
            return frozenset(out)
        out |= more


def _operands_of_ungated_sums(sums, by_tensor, ungated, inputs: Inputs, task_of_op) -> set[Transfer]:
    """The transfers of the operands that the sums of ``sums`` (AddN sent to another task), where
    sent away ungated, could take over, as TensorFlow makes them (the pass's
    ``OperandsOfUngatedSums``): an operand received from another task, or itself sent to one.
    Sent away by a ``_Send``, such a sum's output is NIC-compatible and takes over only such an
    operand's buffer; gated or cut, the operand would no longer be one. A sum of two adds the
    same in either order."""
    out: set[Transfer] = set()
    for s in sums:
        if any(t not in ungated for t in by_tensor[f"{s}:0"]):
            continue  # gated: the pass holds its operands (HeldFromSums)
        operands = [(u, port) for u, port, control in inputs[s] if not control]
        if len(operands) < 3:
            continue
        here = task_of_op(s)
        for u, port in operands:
            sent = by_tensor.get(f"{u}:{port}", [])
            if task_of_op(u) != here:  # received from another task
                out.update(t for t in sent if t.dst_task == here)
            else:  # sent to one
                out.update(sent)
    return out
