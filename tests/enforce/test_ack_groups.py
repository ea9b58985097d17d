"""Acknowledgement groups (``enable(ack_group=N)``): consecutive slices of a tensor share one
acknowledgement, on the real pass and op, over a real gRPC cluster."""

import re

import pytest

from tests.enforce.conftest import assert_bitwise_equal, settled_stats, train, within
from tests.enforce.test_partition_credit import _config, _nodes, _traced_step
from tests.enforce.test_pass import seq32_through_the_pass
from tfsched.errors import TfschedError
from tfsched.models import build_graph

pytestmark = [pytest.mark.tf, pytest.mark.cluster]

SLICE = 16_384  # partition 20,000 cuts each 65,536-parameter weight of seq32 into 4 such slices
DEVICES = ["/job:ps/task:0", "/job:ps/task:1", "/job:worker/task:0"]


def _groups(graphs, job):
    """Per tensor split on ``job``'s tasks (its TfschedSplit's name): its gates in slice order, as
    (credit, group_elements), and the slices whose gate an acknowledgement follows, with what
    each returns (0: its own)."""
    gates = _nodes(graphs, "TfschedGate")
    acks = {a.name.removesuffix("/ack"): a.attr["elements"].i for a in _nodes(graphs, "TfschedAck")}
    out = {}
    for split in _nodes(graphs, "TfschedSplit"):
        if f"/job:{job}/" not in split.device:
            continue
        mine = sorted(
            (g for g in gates if g.input[0].split(":")[0] == split.name),
            key=lambda g: int(g.input[0].split(":")[1]) if ":" in g.input[0] else 0,
        )
        out[split.name] = (
            [(g.attr["credit"].i, g.attr["group_elements"].i) for g in mine],
            {i: acks[g.name] for i, g in enumerate(mine) if g.name in acks},
        )
    return out


@pytest.mark.parametrize(
    "host, inline", [(False, True), (True, True), (False, False)], ids=["channel", "window", "pool"]
)
def test_two_slices_share_one_acknowledgement(cluster, host, inline):
    """Under a credit of four slices and ack_group=2, each pulled weight's four slices go as two
    pairs: the first of a pair takes the credit of both, the second none, and one acknowledgement
    after the second returns both. The pushes, which TIO ranks all alike (their slices tie), keep
    one each. Training stays bitwise identical, no gate waits out its timeout, the credit bounds
    what is in flight, and each acknowledgement returns its credit once a step."""
    import tfsched

    target = cluster.target("worker", 0)
    credit = 4 * SLICE + 100
    vanilla = train(target, build_graph("seq32", ps_tasks=2), 5, _config())
    kw = {"partition": 20_000, "credit": credit, "host_credit": host, "inline_transfers": inline}
    grouped, single = _config(ack_group=2, **kw), _config(**kw)
    tfsched.enforce.set_credit(target, 0, DEVICES)  # resets the peak counters
    assert_bitwise_equal(vanilla, train(target, build_graph("seq32", ps_tasks=2), 5, grouped))

    graphs, _ = _traced_step(target, build_graph("seq32", ps_tasks=2), grouped, steps=1)
    pulls, pushes = _groups(graphs, "ps"), _groups(graphs, "worker")
    assert len(pulls) == len(pushes) == 32  # every weight
    for gates, acked in pulls.values():
        assert gates == [(credit, 2 * SLICE), (0, 0), (credit, 2 * SLICE), (0, 0)]
        assert acked == {1: 2 * SLICE, 3: 2 * SLICE}
    assert all(g == ([(credit, 0)] * 4, dict.fromkeys(range(4), 0)) for g in pushes.values())
    for device in DEVICES:
        s = settled_stats(target, device)
        assert s["timeouts"] == 0 and s["live_steps"] == 0
        assert (2 if "ps" in device else 1) * SLICE <= s["peak_in_flight"] <= credit

    def returned(config, steps=3):
        """Credit returns (acknowledgements) on DEVICES over ``steps`` steps, and the TfschedAcks
        of the graphs that ran them."""
        before = {d: settled_stats(target, d)["acked"] for d in DEVICES}
        graphs, _ = _traced_step(target, build_graph("seq32", ps_tasks=2), config, steps=steps)
        back = sum(settled_stats(target, d)["acked"] - before[d] for d in DEVICES)
        return back, len(_nodes(graphs, "TfschedAck"))

    pairs, single_acks = returned(grouped), returned(single)
    assert pairs[0] == 3 * pairs[1] and single_acks[0] == 3 * single_acks[1]
    assert single_acks[1] - pairs[1] == 2 * 32  # a pulled weight's two pairs save two of its four


@pytest.mark.parametrize("host", [False, True], ids=["channel", "window"])
def test_a_group_goes_on_into_the_next_tensor_of_its_channel(cluster, host):
    """ack_group=3 under a credit of four slices: on a channel of its own (host_credit off) a
    group goes on from one pulled weight's last slices into the next weight's first, so each PS's
    channel of 16 weights (64 slices) has ceil(64 / 3) acknowledgements, not 16 x 2 one tensor at
    a time. Under one window per PS (host_credit) a group stays within its tensor: three slices
    and one. Each group's first gate takes what its acknowledgement returns, and training stays
    bitwise identical with no gate waiting out its timeout."""
    import tfsched

    target = cluster.target("worker", 0)
    credit = 4 * SLICE + 100
    cfg = _config(partition=20_000, credit=credit, ack_group=3, host_credit=host)
    vanilla = train(target, build_graph("seq32", ps_tasks=2), 4, _config())
    tfsched.enforce.set_credit(target, 0, DEVICES)  # resets the peak counters
    assert_bitwise_equal(vanilla, train(target, build_graph("seq32", ps_tasks=2), 4, cfg))
    for device in DEVICES:
        s = settled_stats(target, device)
        assert s["timeouts"] == 0 and s["live_steps"] == 0 and s["peak_in_flight"] <= credit

    graphs, _ = _traced_step(target, build_graph("seq32", ps_tasks=2), cfg, steps=1)
    acks = {a.name.removesuffix("/ack"): a.attr["elements"].i for a in _nodes(graphs, "TfschedAck")}
    pulls = _groups(graphs, "ps")
    for ps in ("/task:0/", "/task:1/"):
        # the channel's pulled slices in its order (a weight's slices take consecutive priorities)
        gates = sorted(
            (
                g
                for g in _nodes(graphs, "TfschedGate")
                if ps in g.device and g.input[0].split(":")[0] in pulls
            ),
            key=lambda g: g.attr["priority"].i,
        )
        assert len(gates) == 16 * 4
        assert len([g for g in gates if g.name in acks]) == (16 * 2 if host else 22)
        # each group: a gate that takes the credit of all, those that take none, and its ack
        first = None
        for g in gates:
            if g.attr["credit"].i:
                first = g
            assert first is not None and g.attr["credit"].i in (0, credit)
            if g.name in acks:
                assert (acks[g.name] or SLICE) == (first.attr["group_elements"].i or SLICE)
        # a weight's first slice (its split's output 0) that joined a group begun before it
        joined = [g for g in gates if ":" not in g.input[0] and g.attr["credit"].i == 0]
        assert len(joined) == (0 if host else 16 - 6), len(joined)


def test_a_group_is_never_more_slices_than_the_credit_holds(cluster):
    """ack_group=4 under a credit of two slices groups them by two; under a credit of one slice,
    not at all (each slice its own acknowledgement, as without ack_group)."""
    target = cluster.target("worker", 0)
    for credit, gates, acked in (
        (2 * SLICE, [(2 * SLICE, 2 * SLICE), (0, 0)] * 2, {1: 2 * SLICE, 3: 2 * SLICE}),
        (SLICE + 100, [(SLICE + 100, 0)] * 4, dict.fromkeys(range(4), 0)),
    ):
        cfg = _config(partition=20_000, credit=credit, ack_group=4)
        graphs, _ = _traced_step(target, build_graph("seq32", ps_tasks=2), cfg, steps=1)
        groups = _groups(graphs, "ps")
        assert len(groups) == 32
        assert all(g == (gates, acked) for g in groups.values()), credit


def test_slices_that_need_not_keep_their_order_are_not_grouped(cluster):
    """ready=True serves each channel's gates highest priority first among those arrived: a
    group's second slice could go before its first, so every slice keeps its own acknowledgement."""
    target = cluster.target("worker", 0)
    credit = 4 * SLICE + 100
    cfg = _config(partition=20_000, credit=credit, ack_group=2, ready=True)
    vanilla = train(target, build_graph("seq32", ps_tasks=2), 3, _config())
    assert_bitwise_equal(vanilla, train(target, build_graph("seq32", ps_tasks=2), 3, cfg))
    graphs, _ = _traced_step(target, build_graph("seq32", ps_tasks=2), cfg, steps=1)
    groups = {**_groups(graphs, "ps"), **_groups(graphs, "worker")}
    assert len(groups) == 2 * 32
    assert all(g == ([(credit, 0)] * 4, dict.fromkeys(range(4), 0)) for g in groups.values())


@pytest.mark.parametrize("host", [False, True], ids=["channel", "window"])
def test_pairs_that_fill_the_credit_do_not_deadlock(cluster, host):
    """Under a credit of exactly two slices each pair holds the whole window until its second
    slice arrives; with no timeout to hide a deadlock, training ends, bitwise as vanilla's."""
    target = cluster.target("worker", 0)
    vanilla = train(target, build_graph("seq32", ps_tasks=2), 5, _config())
    cfg = _config(partition=20_000, credit=2 * SLICE, ack_group=2, host_credit=host, timeout_ms=0)
    box = within(120, lambda: train(target, build_graph("seq32", ps_tasks=2), 5, cfg))
    assert "error" not in box, box.get("error")
    assert_bitwise_equal(vanilla, box["value"])
    for device in DEVICES:
        s = settled_stats(target, device)
        assert s["live_steps"] == 0


@pytest.mark.parametrize("credit", [2 * SLICE, 3 * SLICE // 2], ids=["grouped", "none"])
def test_a_group_size_that_groups_nothing_is_warned_of(credit):
    """Asked for groups that none of a graph's slices can make, the pass says so in TensorFlow's
    log, once for the graph, with why: here the window holds no two slices, and the pushes share
    their priority under TIO."""
    kwargs = {"partition": 20_000, "credit": credit, "ack_share": 2, "ack_group": 2}
    counts, log = seq32_through_the_pass(kwargs)
    acks = counts["TfschedAck"]
    warnings = [line for line in log.splitlines() if "groups none of its acknowledged slices" in line]
    # the 32 weights pulled and pushed, 4 slices each, every slice acknowledged (from SLICE / 2)
    if credit >= 2 * SLICE:  # a window of two slices: most pulls in pairs, the pushes (tied) alone
        assert 32 * 4 + 32 * 2 <= acks < 64 * 4 and not warnings, (acks, warnings)
    else:  # a window of one slice and a half: no pair fits
        assert acks == 64 * 4 and len(warnings) == 1, (acks, log[-2000:])
        tied = re.search(
            rf"fit the credit of {credit} parameters together \((\d+) tensors of them share", warnings[0]
        )
        assert tied and int(tied.group(1)) >= 32, warnings[0]  # every push, under TIO


def test_ack_group_is_checked():
    import tfsched

    with pytest.raises(TfschedError, match="ack_group groups acknowledgements: it needs a credit"):
        tfsched.enable(ack_group=2, credit=0)
    with pytest.raises(TfschedError, match="ack_group groups acknowledgements"):
        tfsched.enable(ack_group=2, credit=1000, credit_return="sent")
    for bad in (0, -1, 2.5, "2", True):
        with pytest.raises(TfschedError, match="ack_group must be a whole number of slices"):
            tfsched.enable(ack_group=bad, credit=1000)
    opt = tfsched.enable(credit=1000).graph_options.rewrite_options.custom_optimizers[0]
    assert opt.parameter_map["ack_group"].i == 1
    opt = tfsched.enable(credit=1000, ack_group=2).graph_options.rewrite_options.custom_optimizers[0]
    assert opt.parameter_map["ack_group"].i == 2
