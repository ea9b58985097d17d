"""Which transfers the analysis leaves ungated, as the enforcement pass leaves them
(``tfsched.graph.gating``); ``tests/enforce/test_pass.py`` checks it against the pass itself."""

import pytest

from tests.helpers import PS, W0, op, var
from tfsched.graph import RawNode, build_comm_graph
from tfsched.graph.gating import control_flow_region


def _region(nodes: list[RawNode]) -> set[str]:
    inputs = {
        n.name: [
            (i.lstrip("^").split(":")[0], int(i.split(":")[1]) if ":" in i else 0, i[0] == "^")
            for i in n.inputs
        ]
        for n in nodes
    }
    types = {n.name: n.op for n in nodes}
    return control_flow_region([n.name for n in nodes], types.__getitem__, inputs)


def test_a_conditionals_branches_are_in_the_region_and_its_merge_is_not():
    nodes = [
        RawNode("p", "Placeholder"),
        RawNode("x", "Placeholder"),
        RawNode("s", "Switch", "", ["x", "p"]),
        RawNode("t", "Switch", "", ["x", "p"]),  # the same predicate: one conditional
        RawNode("a", "Neg", "", ["s:1"]),
        RawNode("b", "Neg", "", ["t"]),
        RawNode("m", "Merge", "", ["a", "b"]),
        RawNode("after", "Neg", "", ["m"]),
        RawNode("c", "Neg", "", ["x", "^s"]),  # after the Switch by a control edge: dead with either
    ]
    assert _region(nodes) == {"s", "t", "a", "b", "c"}


def test_a_merge_of_two_predicates_stays_in_the_region():
    nodes = [
        RawNode("p", "Placeholder"),
        RawNode("q", "Placeholder"),
        RawNode("x", "Placeholder"),
        RawNode("s", "Switch", "", ["x", "p"]),
        RawNode("t", "Switch", "", ["x", "q"]),
        RawNode("m", "Merge", "", ["s:1", "t:0"]),
    ]
    assert _region(nodes) == {"s", "t", "m"}


def test_a_loops_frame_is_its_enters_reach_before_its_exits():
    nodes = [
        RawNode("x", "Placeholder"),
        RawNode("enter", "Enter", "", ["x"]),
        RawNode("merge", "Merge", "", ["enter", "next"]),
        RawNode("cond", "Less", "", ["merge", "x"]),  # after the Merge: still the loop's
        RawNode("lc", "LoopCond", "", ["cond"]),
        RawNode("sw", "Switch", "", ["merge", "lc"]),
        RawNode("body", "Neg", "", ["sw:1"]),
        RawNode("next", "NextIteration", "", ["body"]),
        RawNode("exit", "Exit", "", ["sw"]),
        RawNode("out", "Neg", "", ["exit"]),
    ]
    assert _region(nodes) == {"enter", "merge", "cond", "lc", "sw", "body", "next"}


def test_the_transfers_the_pass_does_not_gate():
    nodes = var("v", (1000,)) + var("w", (1000,))
    nodes += [
        RawNode("pred", "Placeholder", W0, attrs={"dtype": "BOOL"}, output_shapes=[()]),
        RawNode("sw", "Switch", PS, ["w/read", "pred"], attrs={"T": "FLOAT"}, output_shapes=[(1000,)] * 2),
        RawNode("branch", "Neg", PS, ["sw:1"], attrs={"T": "FLOAT"}, output_shapes=[(1000,)]),
        RawNode("small", "Const", PS, attrs={"dtype": "FLOAT", "value_shape": (4,)}, output_shapes=[(4,)]),
        RawNode("mark", "NoOp", PS),
        op("f", ["v/read", "branch", "small", "^mark"], shape=(1000,), op_type="AddN"),
    ]
    g = build_comm_graph(nodes, fetches=["f"])
    ungated = sorted(t.tensor for t in g.ungated)
    # in a branch, a small constant and a control edge; v's read is gated, and so is the
    # predicate sent to the PS (a Placeholder's, before any Switch)
    assert ungated == ["^mark", "branch:0", "small:0"]
    assert sorted(t.tensor for t in g.transfers if t not in g.ungated) == ["pred:0", "v/read:0"]


@pytest.mark.parametrize("chained", [False, True])
def test_the_operands_a_sum_sent_away_ungated_could_take_over(chained):
    # `total` (sent to the PS from a branch: ungated) may take over `own` (also sent to the PS)
    # and v's read (received): their transfers stay TensorFlow's. `local` is neither, and
    # `apart` is gated, so its operands are (x's read among them). Chained: `inner`, one of
    # total's operands sent to the PS and a sum itself, so left ungated, leaves its own operand
    # `mine` (sent to the PS) too.
    nodes = var("v", (1000,)) + var("x", (1000,))
    nodes += [
        RawNode("pred", "Placeholder", W0, attrs={"dtype": "BOOL"}, output_shapes=[()]),
        RawNode("sw", "Switch", W0, ["x/read", "pred"], attrs={"T": "FLOAT"}, output_shapes=[(1000,)] * 2),
        op("own", ["v/read"], shape=(1000,), op_type="Neg"),
        op("mine", ["v/read"], shape=(1000,), op_type="Sin"),
        op("local", ["v/read"], shape=(1000,), op_type="Cos"),
        op(
            "inner",
            ["mine", "local", "local"] if chained else ["local", "local", "local"],
            shape=(1000,),
            op_type="AddN",
        ),
        op("total", ["sw:1", "own", "v/read", "inner"], shape=(1000,), op_type="AddN"),
        op("apart", ["local", "own", "x/read"], shape=(1000,), op_type="AddN"),
        RawNode(
            "out",
            "AddN",
            PS,
            ["total", "own", "mine", "inner", "apart"],
            attrs={"T": "FLOAT"},
            output_shapes=[(1000,)],
        ),
    ]
    g = build_comm_graph(nodes, fetches=["out"])
    ungated = {t.tensor for t in g.ungated}
    expected = {"total:0", "own:0", "v/read:0", "inner:0"} | ({"mine:0"} if chained else set())
    assert ungated == expected
    assert "apart:0" not in ungated and "x/read:0" not in ungated
