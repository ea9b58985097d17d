"""Matching a trace to the saved graph it ran: names Grappler changed on the way."""

from tests.helpers import PS, W0, op, var
from tfsched.graph import build_comm_graph
from tfsched.tracing.match import identity_sources, match_trace
from tfsched.tracing.trace import OpRecord, Trace, TransferRecord


def _pushed_through_an_identity():
    """A pull of w, and a gradient pushed as tf.tuple leaves it: an Identity of the gradient
    with a control input (``control_dependency_1``), which Grappler removes from the graph that
    runs, sending the gradient itself."""
    nodes = var("w") + [
        op("f", ["w/read"]),
        op("g", ["f"]),
        op("g_id", ["g", "^f"], op_type="Identity"),
        op("upd", ["g_id"], device=PS),
    ]
    return build_comm_graph(nodes, fetches=["upd"])


def _trace(pushed: str, nbytes: int = 16) -> Trace:
    transfers = [
        TransferRecord(0, "edge_1_w/read", "w/read:0", 16, PS, W0, 0.0, 10.0),
        TransferRecord(0, "edge_2_g", pushed, nbytes, W0, PS, 30.0, 10.0),
    ]
    ops = [OpRecord(0, W0, n, "AddV2", 10.0, 10.0) for n in ("f", "g")]
    return Trace(steps=1, ops=ops, transfers=transfers, step_times_us=[50.0])


def test_a_push_grappler_sent_without_its_identity_matches():
    g = _pushed_through_an_identity()
    assert sorted(t.tensor for t in g.transfers if t.kind != "control") == ["g_id:0", "w/read:0"]
    assert identity_sources(g, "g_id:0") == ["g_id:0", "g:0"]
    assert identity_sources(g, "w/read:0") == ["w/read:0"]  # a read is not an Identity
    report = match_trace(g, _trace("g:0"))
    assert (report.transfers_matched, report.transfers_total) == (2, 2) and not report.unmatched_transfers
    # as the saved graph names it, too
    assert match_trace(g, _trace("g_id:0")).transfers_matched == 2


def test_a_tensor_of_another_size_does_not_match_through_an_identity():
    report = match_trace(_pushed_through_an_identity(), _trace("g:0", nbytes=32))
    assert report.transfers_matched == 1 and report.unmatched_transfers == [
        "g_id:0 -> /job:ps/replica:0/task:0"
    ]
