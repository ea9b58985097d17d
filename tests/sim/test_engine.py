"""The simulator against step times worked out by hand."""

import math

import pytest

from tests.helpers import (
    PS,
    W0,
    W1,
    chain_graph,
    op,
    oracle_with,
    random_training_case,
    simulated_orders,
    training_chain,
    var,
)
from tfsched.errors import TfschedError
from tfsched.graph import build_comm_graph
from tfsched.oracle.oracle import DEFAULT_COPY_S_PER_BYTE, TimeOracle
from tfsched.ordering import order
from tfsched.ordering.schedule import Schedule
from tfsched.sim import build_sim_graph, simulate, simulate_schedule, step_bounds
from tfsched.sim.model import BARRIER, COMPUTE, GATE_OPS, REASSEMBLY, gated_variables


def _two_workers_pulling_one_variable():
    """One PS, two workers each pulling 1 MB (1 s alone on the link) and computing 1 s with it:
    the simulated graph, and the ids of the two workers' ops by name (a, b)."""
    nodes = var("w", (250_000,)) + [op("a", ["w/read"], device=W0), op("b", ["w/read"], device=W1)]
    g = build_comm_graph(nodes, fetches=["a", "b"])
    sg = build_sim_graph(g, oracle_with({"a": 1.0, "b": 1.0}, bandwidth_bps=8e6), order(g, "tio"))
    return sg, {sg.name[i]: i for i in range(len(sg)) if sg.name[i] in ("a", "b")}


class TestSimulate:
    def test_single_transfer_is_overhead_plus_bytes_over_bandwidth(self):
        g = chain_graph(1, [250_000])  # 1 MB
        o = oracle_with({"f0": 0.25}, bandwidth_bps=8e6, overhead_s=0.01)
        assert simulate_schedule(g, o).step_time == pytest.approx(0.01 + 1.0 + 0.25)

    def test_messages_on_one_channel_go_one_after_another(self):
        g = chain_graph(2, [250_000, 250_000])
        o = oracle_with({"f0": 0.0, "f1": 0.0}, bandwidth_bps=8e6)
        assert simulate_schedule(g, o).step_time == pytest.approx(2.0)

    def test_two_receivers_share_the_senders_uplink(self):
        # One PS, two workers each pulling 1 MB: the PS uplink is shared, so 2 s for both.
        nodes = var("w", (250_000,)) + [op("a", ["w/read"], device=W0), op("b", ["w/read"], device=W1)]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({}, bandwidth_bps=8e6)
        r = simulate_schedule(g, o)
        assert r.makespan == pytest.approx(2.0)

    def test_between_graph_replication_doubles_ps_load(self):
        g = chain_graph(1, [250_000])
        o = oracle_with({}, bandwidth_bps=8e6)
        assert simulate_schedule(g, o, workers=1).step_time == pytest.approx(1.0)
        assert simulate_schedule(g, o, workers=2).step_time == pytest.approx(2.0)

    def test_counter_policy_follows_priorities(self):
        g = chain_graph(3, [1000, 1000, 1000])
        o = oracle_with({}, bandwidth_bps=8e6)
        pulls = sorted(g.transfers, key=lambda t: t.variable)
        s = Schedule("tao", {pulls[0]: 2, pulls[1]: 0, pulls[2]: 1}, mode="counter")
        sg = build_sim_graph(g, o, s)
        r = simulate(sg, "counter", record=True)
        wire_order = sorted((r.sends[i], i) for i, k in enumerate(sg.kind) if k == 1)
        assert [sg.name[i] for _, i in wire_order] == ["v1/read:0", "v2/read:0", "v0/read:0"]
        assert [round(t, 9) for t, _ in wire_order] == [0.0, 0.004, 0.008]

    def test_released_messages_race_for_the_channel_unless_a_credit_window_holds_them(self):
        g = chain_graph(6, [1000] * 6)  # six 4000-byte pulls released together, first-needed first
        o = oracle_with({f"f{k}": 0.001 for k in range(6)}, bandwidth_bps=8e6)
        sg = build_sim_graph(g, o, order(g, "tio"))
        msgs = [i for i, k in enumerate(sg.kind) if k == 1]

        def wire_order(**kw):
            r = simulate(sg, "counter", record=True, **kw)
            assert all(math.isfinite(r.ends[i]) for i in msgs)  # every message still arrives
            return [sg.name[i] for i in sorted(msgs, key=lambda i: r.sends[i])]

        ordered = wire_order()
        assert ordered == sorted(ordered, key=lambda n: int(n[1]))  # v0, v1, ... as released
        raced = {tuple(wire_order(race=True, seed=s)) for s in range(8)}
        assert len(raced) > 1 and any(list(w) != ordered for w in raced)
        assert all(sorted(w) == sorted(ordered) for w in raced)
        # with a credit window the released order holds on the wire, also when it lets several go
        for s in range(4):
            assert wire_order(race=True, seed=s, credit_bytes=12000) == ordered
        # but what the window does not acknowledge (under min_acked_bytes) races as without it
        unacked = {
            tuple(wire_order(race=True, seed=s, credit_bytes=12000, min_acked_bytes=5000)) for s in range(8)
        }
        assert len(unacked) > 1
        # racing costs the chain some of its overlap: slower on average than the order kept
        kept = simulate(sg, "counter").step_time
        mean_raced = sum(simulate(sg, "counter", race=True, seed=s).step_time for s in range(8)) / 8
        assert mean_raced > kept

    @pytest.mark.parametrize("race", [False, True], ids=["kept", "raced"])
    def test_a_stream_window_sends_a_large_message_after_those_waiting_with_it(self, race):
        """``stream_window_bytes``: a large message goes a window at a time, its rest behind the
        messages waiting for its channel; whole, released first, it holds them back. A credit
        window that holds the message keeps it whole."""
        g = chain_graph(4, [100_000, 1000, 1000, 1000])  # a 400 KB pull needed first, three of 4 KB
        o = oracle_with({f"f{k}": 0.001 for k in range(4)}, bandwidth_bps=8e6)
        sg = build_sim_graph(g, o, order(g, "tio"))
        msgs = [i for i, k in enumerate(sg.kind) if k == 1]
        big = next(i for i in msgs if sg.nbytes[i] == 400_000)
        small = [i for i in msgs if i != big]

        def run(**kw):
            r = simulate(sg, "counter", record=True, race=race, **kw)
            return r, r.ends[big] - r.sends[big]  # the large one's time on the wire, first byte to last

        whole, took = run()
        assert took == pytest.approx(0.4)  # 400 KB at 1 MB/s, in one go
        windowed, took = run(stream_window_bytes=65_536)
        assert all(windowed.ends[big] > windowed.ends[i] for i in small)
        assert took > 0.4  # the small ones went in between
        assert windowed.ends[big] == pytest.approx(412_000 / 1e6)  # every byte once, the link never idle
        _, took = run(stream_window_bytes=65_536, credit_bytes=800_000)  # acknowledges 100 KB and more
        assert took == pytest.approx(0.4)
        assert whole.step_time != windowed.step_time
        with pytest.raises(TfschedError, match="stream_window_bytes"):
            simulate(sg, "counter", stream_window_bytes=0)

    def test_under_credit_the_acknowledged_keep_their_order_and_the_small_race_around_them(self):
        g = chain_graph(6, [1000, 10, 1000, 10, 1000, 10])  # 4000-byte pulls acknowledged, 40-byte ones not
        o = oracle_with({f"f{k}": 0.001 for k in range(6)}, bandwidth_bps=8e6)
        sg = build_sim_graph(g, o, order(g, "tio"))
        msgs = [i for i, k in enumerate(sg.kind) if k == 1]
        orders = set()
        for s in range(12):
            r = simulate(sg, "counter", record=True, race=True, seed=s, credit_bytes=12000)
            wire = [sg.name[i] for i in sorted(msgs, key=lambda i: r.sends[i])]
            assert [n for n in wire if n[1] in "024"] == ["v0/read:0", "v2/read:0", "v4/read:0"]
            orders.add(tuple(wire))
        # the small ones go before, between and after the large ones, depending on the seed
        assert len(orders) > 2

    def test_queue_policy_keeps_credit(self):
        g = chain_graph(4, [1000] * 4)
        o = oracle_with({}, bandwidth_bps=8e6)
        sg = build_sim_graph(g, o, order(g, "layer", o))
        r = simulate(sg, "queue", credit_bytes=8000, record=True)
        msgs = [i for i, k in enumerate(sg.kind) if k == 1]
        for i in msgs:  # at most two 4000-byte messages released and not yet arrived at any time
            in_flight = [j for j in msgs if r.starts[j] <= r.starts[i] < r.ends[j]]
            assert sum(sg.nbytes[j] for j in in_flight) <= 8000

    def test_a_control_edge_beside_the_pulls_goes_ungated(self):
        # TensorFlow 2's step functions send control edges from the PS beside the pulls (its
        # GroupCrossDeviceControlEdges): under the layer order's queue policy such an edge was a
        # queue's message among counted ones, and the simulator failed comparing their keys. The
        # pass gates no control edge; since the hundred-and-twenty-fifth session neither does
        # the simulator: it goes when ready, under any policy.
        from tests.helpers import PS
        from tfsched.graph import RawNode
        from tfsched.sim.engine import pushing_gates, release_policies

        nodes = var("v0", (1000,)) + var("v1", (1000,))
        nodes.append(RawNode("mark", "NoOp", PS, []))
        nodes += [op("f0", ["v0/read", "^mark"]), op("f1", ["f0", "v1/read"])]
        g = build_comm_graph(nodes, fetches=["f1"])
        assert sorted(t.kind for t in g.transfers) == ["control", "pull", "pull"]
        o = oracle_with({"f0": 0.001, "f1": 0.001}, bandwidth_bps=8e6)
        layer = order(g, "layer", o)
        sg = build_sim_graph(g, o, layer)
        r = simulate(sg, "queue", record=True)
        msgs = [i for i, k in enumerate(sg.kind) if k == 1]
        assert all(math.isfinite(r.ends[i]) for i in msgs)
        pulls = [sg.name[i] for i in sorted(msgs, key=lambda i: r.sends[i]) if "read" in sg.name[i]]
        assert pulls == ["v0/read:0", "v1/read:0"]
        assert r.step_time == pytest.approx(simulate(sg, "counter").step_time)
        for policy in ("counter", "queue", "ready"):
            how = release_policies(sg, policy, pushing_gates(sg))
            assert {sg.name[i]: how[i] for i in msgs}["^mark"] == "fifo"

    def test_a_transfer_the_pass_leaves_ungated_goes_when_ready_whole_and_holds_no_counter(self):
        # v1's read is ready at 1 s and ranked first. Gated, v0's pull waits for it under the
        # counters (1 s, then both 1 MB pulls on the link, one after the other: 3 s); ungated (in
        # a loop or a branch, which the pass leaves to TensorFlow) it holds no counter, and the
        # partition does not cut it (2 s).
        from dataclasses import replace

        g = chain_graph(2, [250_000, 250_000])
        o = oracle_with({"v1/read": 1.0, "f0": 0.0, "f1": 0.0}, bandwidth_bps=8e6)
        first, second = sorted(g.transfers, key=lambda t: t.variable)
        s = Schedule("tao", {second: 0, first: 1}, mode="counter")
        left = replace(g, ungated=frozenset({second}))
        for graph, step, slices in ((g, 3.0, [10, 10]), (left, 2.0, [10, 1])):
            sg = build_sim_graph(graph, o, s, partition_bytes=100_000)
            assert simulate(sg, "counter").step_time == pytest.approx(step)
            names = [sg.name[i] for i, k in enumerate(sg.kind) if k == 1]
            assert [names.count(t.tensor) for t in (first, second)] == slices
        # the order puts it last on its channel and the schedule file says it is not gated
        tio = order(left, "tio")
        assert tio.ungated == {second} and tio.priorities[second] > tio.priorities[first]
        records = [r for ch in tio.to_json()["channels"] for r in ch["transfers"]]
        assert {r["tensor"]: r["gated"] for r in records} == {first.tensor: True, second.tensor: False}

    def test_random_fifo_spreads(self):
        nodes = (
            var("big", (1_000_000,))
            + var("small", (10,))
            + [op("early", ["small/read"]), op("late", ["early", "big/read"])]
        )
        g = build_comm_graph(nodes, fetches=["late"])
        o = oracle_with({"early": 0.5, "late": 0.01})
        sg = build_sim_graph(g, o)
        times = {round(simulate(sg, "random", seed=s).step_time, 6) for s in range(12)}
        assert len(times) == 2

    def test_partitioning_splits_messages_as_the_pass_does(self):
        g = chain_graph(1, [625_000])  # 2.5 MB -> 3 slices of equal size, rounded up to 64 bytes
        o = oracle_with({}, bandwidth_bps=8e6, overhead_s=0.001)
        sg = build_sim_graph(g, o, partition_bytes=1_000_000)
        sizes = [sg.nbytes[i] for i, k in enumerate(sg.kind) if k == 1]
        assert sizes == [833_344, 833_344, 833_312]
        assert all(s % 64 == 0 for s in sizes[:-1]) and sum(sizes) == 2_500_000
        # the slices pay their overheads at once, before they wait for the channel
        assert simulate(sg).step_time == pytest.approx(2.5 + 0.001)
        # TicTac's channel: each slice's overhead holds the channel as its bytes do
        assert simulate(sg, overlap=False).step_time == pytest.approx(2.5 + 3 * 0.001)

    def test_a_cut_tensor_is_put_back_together_on_its_receiver_before_its_consumer(self):
        # 2.5 MB in 3 slices (2.5 s on the wire), copied back together at 1e-7 s a byte (0.25 s) on
        # the worker, where its consumer (0.5 s) waits for the copy; a tensor sent whole is not
        g = chain_graph(1, [625_000])
        o = oracle_with({"f0": 0.5}, bandwidth_bps=8e6)
        sg = build_sim_graph(g, o, partition_bytes=1_000_000, copy_s_per_byte=1e-7)
        (copy,) = [i for i in range(len(sg)) if sg.name[i].startswith(REASSEMBLY)]
        assert (
            sg.kind[copy] == COMPUTE
            and sg.resource[copy] == W0.partition("/device")[0]
            and sg.npred[copy] == 3
        )
        assert sg.duration[copy] == pytest.approx(0.25)
        assert simulate(sg).step_time == pytest.approx(2.5 + 0.25 + 0.5)
        assert simulate(build_sim_graph(g, o, partition_bytes=1_000_000)).step_time == pytest.approx(3.0)
        whole = build_sim_graph(g, o, partition_bytes=4_000_000, copy_s_per_byte=1e-7)
        assert not any(n.startswith(REASSEMBLY) for n in whole.name)
        assert simulate(whole).step_time == pytest.approx(3.0)
        for bad in (-1e-9, math.nan, math.inf):
            with pytest.raises(TfschedError, match="copy's seconds per byte"):
                build_sim_graph(g, o, partition_bytes=1_000_000, copy_s_per_byte=bad)

    def test_a_copy_costs_what_the_oracle_says_unless_told(self):
        # the cost model's oracle (what `analyze` starts from) copies at the default; 0 copies not
        g = chain_graph(1, [625_000])
        cost_model = TimeOracle.from_cost_model(g)
        assert cost_model.copy_s_per_byte == DEFAULT_COPY_S_PER_BYTE > 0
        sg = build_sim_graph(g, cost_model, partition_bytes=1_000_000)
        (copy,) = [i for i in range(len(sg)) if sg.name[i].startswith(REASSEMBLY)]
        assert sg.duration[copy] == pytest.approx(2_500_000 * DEFAULT_COPY_S_PER_BYTE)
        none = build_sim_graph(g, cost_model, partition_bytes=1_000_000, copy_s_per_byte=0.0)
        assert not any(n.startswith(REASSEMBLY) for n in none.name)
        assert len(none) == len(sg) - 1

    def test_a_window_of_slices_keeps_the_link_full_past_their_overheads(self):
        # A 4 MB tensor in four 1 MB slices (1 s each on the wire, 0.5 s of overhead each), two in
        # flight at a time: each next slice pays its overhead while the one before it is on the
        # wire, so the link is busy from the first overhead on (as one window per sending task
        # serving one worker at a time measured on VGG16, BENCHMARKS.md's reading)
        g = chain_graph(1, [1_000_000])
        o = oracle_with({}, bandwidth_bps=8e6, overhead_s=0.5)
        sg = build_sim_graph(g, o, order(g, "tio"), partition_bytes=1_000_000)
        assert [sg.nbytes[i] for i in range(len(sg)) if sg.kind[i] == 1] == [1_000_000] * 4
        for host_credit in (False, True):
            kw = {"credit_bytes": 2_000_000, "host_credit": host_credit}
            assert simulate(sg, "counter", **kw).step_time == pytest.approx(0.5 + 4.0)
            # TicTac's channel: the link idles for every slice's overhead
            assert simulate(sg, "counter", overlap=False, **kw).step_time == pytest.approx(4 * 1.5)

    @pytest.mark.parametrize("host_credit", [False, True])
    def test_slices_that_share_an_acknowledgement_return_their_credit_together(self, host_credit):
        # The 4 MB tensor above in four 1 MB slices (1 s each on the wire, 0.5 s of overhead).
        # Acknowledged in pairs (the pass's ack_group=2) under a window of all four: both pairs go
        # at once, as four slices one by one do; half the acknowledgements.
        g = chain_graph(1, [1_000_000])
        o = oracle_with({}, bandwidth_bps=8e6, overhead_s=0.5)
        sg = build_sim_graph(g, o, order(g, "tio"), partition_bytes=1_000_000)
        kw = {"host_credit": host_credit}
        assert simulate(sg, "counter", credit_bytes=4_000_000, ack_group=2, **kw).step_time == pytest.approx(
            4.5
        )
        # Under a window of two slices a pair holds it all: the first pair's credit comes back one
        # overhead after its second slice arrived (2.5 s + 0.5 s), then the second pair goes (its
        # overhead 0.5 s, 2 s on the wire): 5.5 s, where the slices one by one take 4.5 s. A group
        # of four is cut to the two the window holds.
        for group, step in ((1, 4.5), (2, 5.5), (4, 5.5)):
            r = simulate(sg, "counter", credit_bytes=2_000_000, ack_group=group, **kw)
            assert r.step_time == pytest.approx(step), group
        # Under a window of one slice nothing is grouped
        assert simulate(sg, "counter", credit_bytes=1_000_000, ack_group=2, **kw).step_time == pytest.approx(
            simulate(sg, "counter", credit_bytes=1_000_000, **kw).step_time
        )
        # Each acknowledgement's CPU (0.1 s) on one shared slot that nothing else uses: one of them
        # lies on the path to the second pair's release, as to the third slice's one by one
        o.machine_slots = 1.0
        shared = build_sim_graph(g, o, order(g, "tio"), partition_bytes=1_000_000)
        acked = {
            group: simulate(shared, "counter", credit_bytes=2_000_000, ack_group=group, ack_slot_s=0.1, **kw)
            for group in (1, 2)
        }
        assert acked[1].step_time == pytest.approx(4.5 + 0.1)
        assert acked[2].step_time == pytest.approx(5.5 + 0.1)
        for bad in (0, True, 1.5):
            with pytest.raises(TfschedError, match="ack_group must be a positive integer"):
                simulate(sg, "counter", credit_bytes=2_000_000, ack_group=bad)

    def test_counter_policy_keeps_credit_and_waits_for_acks(self):
        g = chain_graph(3, [1000] * 3)  # 4000-byte pulls
        o = oracle_with({}, bandwidth_bps=8e6, overhead_s=0.001)  # 4 ms per message + 1 ms
        sg = build_sim_graph(g, o, order(g, "tio"))
        free = simulate(sg, "counter").step_time
        # released together, the pulls pay their overheads at once, then 4 ms each on the wire
        assert free == pytest.approx(0.001 + 3 * 0.004)
        one_at_a_time = simulate(sg, "counter", credit_bytes=4000).step_time
        # each next pull is released once the previous one's acknowledgement is back (one more
        # overhead after it arrived), and pays its own overhead before the wire
        assert one_at_a_time == pytest.approx(3 * (0.001 + 0.004) + 2 * 0.001)
        # TicTac's channel pays every overhead on the wire, so the window adds only the acks'
        serial = simulate(sg, "counter", overlap=False).step_time
        assert serial == pytest.approx(3 * (0.001 + 0.004))
        assert simulate(sg, "counter", credit_bytes=4000, overlap=False).step_time == pytest.approx(
            serial + 2 * 0.001
        )

    @pytest.mark.parametrize("host_credit", [False, True])
    def test_a_window_for_the_pushes_leaves_the_pulls_the_channels_credit(self, host_credit):
        # Two 4,000-byte variables pulled (4 ms each on the wire, 1 ms of overhead), each used by
        # one op whose 4,000-byte result is pushed back: a credit of both at once, and a window of
        # one push for the worker (enable(push_credit=N), the bench's +wN)
        nodes = var("v0", (1000,)) + var("v1", (1000,))
        nodes += [op("f0", ["v0/read"], shape=(1000,)), op("f1", ["v1/read"], shape=(1000,))]
        nodes += [op("u0", ["f0"], device=PS), op("u1", ["f1"], device=PS)]
        g = build_comm_graph(nodes, fetches=["u0", "u1"])
        sg = build_sim_graph(g, oracle_with({}, bandwidth_bps=8e6, overhead_s=0.001), order(g, "tio"))
        kinds = {i: sg.transfer[i].kind for i in range(len(sg)) if sg.kind[i] == 1}
        assert sorted(kinds.values()) == ["pull", "pull", "push", "push"]

        def released(**kw):
            r = simulate(sg, "counter", credit_bytes=8000, host_credit=host_credit, record=True, **kw)
            by = {
                k: sorted((r.starts[i], r.ends[i]) for i in kinds if kinds[i] == k) for k in ("pull", "push")
            }
            return by, r.step_time

        both, free = released()
        one, windowed = released(push_credit_bytes=4000)
        # the pulls go as before, both at once
        assert [s for s, _ in one["pull"]] == [s for s, _ in both["pull"]]
        assert both["pull"][0][0] == both["pull"][1][0]
        # the second push waits for the first's acknowledgement under the window, not without it
        (s0, e0), (s1, _) = one["push"]
        assert s1 >= e0 > s0
        assert both["push"][1][0] < both["push"][0][1]
        assert windowed > free
        with pytest.raises(TfschedError, match="window for the pushes needs a credit"):
            simulate(sg, "counter", push_credit_bytes=4000)

    def test_one_window_per_sender_serves_one_worker_after_the_other(self):
        sg, ends = _two_workers_pulling_one_variable()

        def finish(**kw):
            r = simulate(sg, "counter", credit_bytes=1_000_000, record=True, **kw)
            return sorted(r.ends[i] for i in ends.values())

        # a window per channel: the two pulls share the uplink and both arrive at 2 s
        assert finish() == pytest.approx([3.0, 3.0])
        # one window for the PS: the first worker's pull has the link to itself, then the other's
        assert finish(host_credit=True) == pytest.approx([2.0, 3.0])
        with pytest.raises(TfschedError, match="needs a credit"):
            simulate(sg, "counter", host_credit=True)

    def test_a_lockstep_window_serves_every_workers_next_tensor_in_turn(self):
        # Two workers' steps (between-graph replication) each pull two 1 MB variables (1 s each
        # alone on the PS's link), the first needed first: one window for the PS, one tensor in
        # flight
        g = chain_graph(2, [250_000, 250_000])
        first, second = sorted(g.transfers, key=lambda t: t.variable)
        s = Schedule("tio", {first: 0, second: 1}, mode="counter")
        sg = build_sim_graph(g, oracle_with({}, bandwidth_bps=8e6), s, workers=2)

        def finish(**kw):
            r = simulate(sg, "counter", credit_bytes=1_000_000, host_credit=True, **kw)
            return sorted(r.run_finish.values())

        # in turn: worker 0's two pulls, then worker 1's: 2 s and 4 s
        assert finish() == pytest.approx([2.0, 4.0])
        # in lockstep: both first pulls, then both second ones: the workers end 1 s apart, not 2
        assert finish(host_order="priority") == pytest.approx([3.0, 4.0])
        with pytest.raises(TfschedError, match="needs host_credit"):
            simulate(sg, "counter", credit_bytes=1_000_000, host_order="priority")
        with pytest.raises(TfschedError, match="host_order must be one of steps, priority"):
            simulate(sg, "counter", credit_bytes=1_000_000, host_credit=True, host_order="fair")

    def test_links_shared_unequally_between_the_workers(self):
        sg, ends = _two_workers_pulling_one_variable()

        def finish(**kw):
            r = simulate(sg, "fifo", record=True, **kw)
            return [r.ends[ends["a"]], r.ends[ends["b"]]]

        # shared evenly, both pulls end at 2 s
        assert finish() == pytest.approx([3.0, 3.0])
        # worker 1's flow weighing half worker 0's: worker 0 has 2/3 of the link until its pull
        # ends at 1.5 s, and worker 1's still ends at 2 s (the link was full throughout), so
        # worker 0's compute overlaps worker 1's pull
        assert finish(worker_weight=0.5) == pytest.approx([2.5, 3.0])
        for bad in (0.0, 1.5):
            with pytest.raises(TfschedError, match="worker_weight must be in"):
                simulate(sg, "fifo", worker_weight=bad)

    def test_messages_not_acknowledged_take_no_credit(self):
        g = chain_graph(3, [1000] * 3)  # 4000-byte pulls
        o = oracle_with({}, bandwidth_bps=8e6, overhead_s=0.001)
        sg = build_sim_graph(g, o, order(g, "tio"))
        free = simulate(sg, "counter").step_time
        acked = simulate(sg, "counter", credit_bytes=4000, min_acked_bytes=4000).step_time
        # one at a time, each waits for an ack and then pays its own overhead
        assert acked == pytest.approx(3 * (0.001 + 0.004) + 2 * 0.001) and acked > free
        # under the pass's floor (kMinAckedElements): ordered, never held for credit
        assert simulate(sg, "counter", credit_bytes=4000, min_acked_bytes=4001).step_time == pytest.approx(
            free
        )

    def test_the_ack_share_sets_what_the_credit_acknowledges(self):
        g = chain_graph(3, [1000] * 3)  # 4000-byte pulls; two do not fit a 6000-byte window
        o = oracle_with({}, bandwidth_bps=8e6, overhead_s=0.001)
        sg = build_sim_graph(g, o, order(g, "tio"))
        free = simulate(sg, "counter").step_time
        one_at_a_time = 3 * (0.001 + 0.004) + 2 * 0.001  # as under a 4000-byte window
        assert simulate(sg, "counter", credit_bytes=6000).step_time == pytest.approx(one_at_a_time)
        assert one_at_a_time > free
        # acknowledged from 6000/1 bytes: the pulls are under it, and never held for credit
        assert simulate(sg, "counter", credit_bytes=6000, ack_share=1).step_time == pytest.approx(free)
        for bad in (0, True, 2.0):
            with pytest.raises(TfschedError, match="ack_share"):
                simulate(sg, "counter", credit_bytes=6000, ack_share=bad)

    def test_the_credit_returned_when_sent_needs_no_acknowledgement(self):
        g = chain_graph(3, [1000] * 3)  # 4000-byte pulls; one at a time under a 4000-byte credit
        o = oracle_with({}, bandwidth_bps=8e6, overhead_s=0.001)
        sg = build_sim_graph(g, o, order(g, "tio"))
        for latency in (0.0, 0.01):
            free = simulate(sg, "counter", latency_s=latency).step_time
            acked = simulate(sg, "counter", credit_bytes=4000, latency_s=latency).step_time
            sent = simulate(sg, "counter", credit_bytes=4000, latency_s=latency, credit_return="sent")
            # together: the overheads at once, 4 ms each on the wire, the last one latency away
            assert free == pytest.approx(0.001 + 3 * 0.004 + latency)
            # one at a time, each with its overhead and its arrival's latency; an acknowledgement
            # is one more overhead and latency before the next is released, a send's end is at
            # the sender
            assert acked == pytest.approx(3 * (0.005 + latency) + 2 * (0.001 + latency))
            assert sent.step_time == pytest.approx(3 * 0.005 + latency)
        with pytest.raises(TfschedError, match="credit_return must be one of ack, sent"):
            simulate(sg, "counter", credit_bytes=4000, credit_return="received")
        with pytest.raises(TfschedError, match="ack_slot_s"):
            simulate(sg, "counter", credit_bytes=4000, ack_slot_s=-0.1)
        with pytest.raises(TfschedError, match="handoff_s must be a non-negative number of seconds"):
            simulate(sg, "counter", credit_bytes=4000, credit_return="sent", handoff_s=-0.001)

    def test_a_credit_returned_when_sent_waits_a_handoff_where_ops_hold_the_cores(self):
        """One tensor in flight: each held pull waits for the credit of the one before it, which
        comes back ``handoff_s`` after that one's last byte left where ops hold every core the
        sender's threads could take, and at once where a core is free."""
        # Three 4000-byte pulls (1 ms overhead, 4 ms on the wire each), one at a time: the first
        # is sent at 5 ms, when nothing computes; f0 (12 ms) then runs from 5 to 17 ms, while the
        # second is sent (10 ms); the third arrives at 15 ms plus that hand-off, f2 needs it.
        g = chain_graph(3, [1000] * 3)
        o = oracle_with({"f0": 0.012, "f1": 0.0, "f2": 0.0}, bandwidth_bps=8e6, overhead_s=0.001)

        def step(slots, handoff, credit=1, credit_return="sent"):
            o.machine_slots = slots
            sg = build_sim_graph(g, o, order(g, "tio"))
            return simulate(
                sg, "counter", credit_bytes=credit, credit_return=credit_return, handoff_s=handoff
            ).step_time

        assert step(1.0, 0.0) == pytest.approx(0.017)
        # one core, which f0 holds: one hand-off waits
        assert step(1.0, 0.005) == pytest.approx(0.020)
        # a core to spare, or each task a machine of its own (the PS computes nothing): none
        assert step(2.0, 0.005) == pytest.approx(0.017)
        assert step(None, 0.005) == pytest.approx(0.017)
        # a window over all three holds none back; acknowledgements do not wait for it
        assert step(1.0, 0.005, credit=12000) == pytest.approx(step(1.0, 0.0, credit=12000))
        assert step(1.0, 0.005, credit_return="ack") == pytest.approx(step(1.0, 0.0, credit_return="ack"))

    def test_acknowledgements_take_the_shared_machines_cpu(self):
        # Three 4000-byte pulls one at a time (5 ms each with the overhead), the last op 1 s.
        g = chain_graph(3, [1000] * 3)
        o = oracle_with({"f0": 0.0, "f1": 0.0, "f2": 1.0}, bandwidth_bps=8e6, overhead_s=0.001)

        def step(slots, **kw):
            o.machine_slots = slots
            sg = build_sim_graph(g, o, order(g, "tio"))
            return simulate(sg, "counter", credit_bytes=4000, **kw).step_time

        plain = step(1.0)
        assert plain == pytest.approx(0.015 + 2 * 0.001 + 1.0)
        # One slot: the first two acknowledgements hold the next pull 0.1 s each; the last one
        # shares the slot with f2, which ends 0.1 s later: 0.3 s in all, the acknowledgements' work.
        assert step(1.0, ack_slot_s=0.1) == pytest.approx(plain + 0.3)
        # Two slots: the last one runs beside f2 on the spare slot
        assert step(2.0, ack_slot_s=0.1) == pytest.approx(plain + 0.2)
        # Returned when sent, there is no acknowledgement to pay for; on hosts of their own the
        # tasks' cores are not the ops'
        assert step(1.0, ack_slot_s=0.1, credit_return="sent") == pytest.approx(0.015 + 1.0)
        assert step(None, ack_slot_s=0.1) == pytest.approx(plain)

    @pytest.mark.parametrize("busy_on", ["worker", "ps"])
    def test_an_acknowledgement_waits_for_a_thread_of_its_task(self, busy_on):
        # A worker pushes two 4,000-byte gradients (1 ms of overhead, 4 ms on the wire) under a
        # credit of one; the first is acknowledged 1 ms after it arrives at 5 ms, which lets the
        # second go at 6 ms. A 1 s op of the worker's (or 0.5 s of the PS's) holds its task's one
        # thread meanwhile.
        nodes = [op("g0", [], shape=(1000,)), op("g1", [], shape=(1000,))]
        nodes += [op("u0", ["g0"], device=PS), op("u1", ["g1"], device=PS)]
        nodes.append(op("busy", ["g0"]) if busy_on == "worker" else op("busy", [], device=PS))
        g = build_comm_graph(nodes, fetches=["u0", "u1", "busy"])
        times = {"busy": 1.0 if busy_on == "worker" else 0.5}
        sg = build_sim_graph(g, oracle_with(times, bandwidth_bps=8e6, overhead_s=0.001), order(g, "tio"))
        pushes = [i for i in range(len(sg)) if sg.kind[i] == 1]
        assert [sg.transfer[i].kind for i in pushes] == ["push", "push"]

        def second_push(**kw):
            r = simulate(sg, "counter", credit_bytes=4000, record=True, **kw)
            return sorted(r.starts[i] for i in pushes)[1]

        assert second_push() == pytest.approx(0.006)
        # one thread: the sender's TfschedCredit waits for the worker's op to end, or the
        # receiver's TfschedAck for the PS's (then 1 ms back to the worker, whose thread is free)
        assert second_push(executor_threads=1) == pytest.approx(1.0 if busy_on == "worker" else 0.501)
        # more threads than the task's ops can hold: a spare one takes it at once
        assert second_push(executor_threads=2) == pytest.approx(0.006)
        # returned when sent (gRPC's callback), the credit needs neither op: 5 ms
        assert second_push(executor_threads=1, credit_return="sent") == pytest.approx(0.005)
        with pytest.raises(TfschedError, match="executor_threads must be a whole number"):
            simulate(sg, "counter", credit_bytes=4000, executor_threads=0)

    def test_several_steps_run_back_to_back(self):
        g = chain_graph(1, [250_000])
        o = oracle_with({"f0": 0.5}, bandwidth_bps=8e6)
        r = simulate_schedule(g, o, steps=3)
        assert r.step_times()[g.worker_tasks[0]] == pytest.approx([1.5, 1.5, 1.5])

    def test_the_offline_prediction_lays_steps_across_the_barrier_out(self):
        """``analysis.predict(cross_steps=N)``: N scheduled steps across the barrier at once, the
        gates serving the arrived by priority, each step their makespan over N; the baseline
        stays vanilla TensorFlow's, behind the barrier."""
        from tfsched.analysis import predict

        g = training_chain(4)
        times = {f"f{i}": 0.25 for i in range(4)} | {f"g{i}": 0.5 for i in range(4)}
        o = oracle_with(times, bandwidth_bps=8e6)
        schedule = order(g, "tio")
        behind = predict(g, schedule, o, workers=2)
        across = predict(g, schedule, o, workers=2, cross_steps=3)
        assert across.baseline_s == behind.baseline_s and across.floor_s == behind.floor_s
        # the PS's uplink carries 2 x 4 MB a step at 1 MB/s: no step is faster, crossed or not;
        # crossed, the next step's pulls go while this one's pushes run
        assert 8.0 <= across.scheduled_s < behind.scheduled_s - 1.0
        assert across.to_json()["cross_steps"] == 3 and "cross_steps" not in behind.to_json()
        # one step has no barrier to cross; a partitioned, windowed crossing is predicted too
        assert predict(g, schedule, o, workers=2, cross_steps=1).scheduled_s >= across.scheduled_s
        windowed = predict(g, schedule, o, workers=2, cross_steps=3, partition=125_000, credit=250_000)
        assert windowed.priority_only_s is None and 8.0 <= windowed.scheduled_s < behind.scheduled_s
        for bad in (-1, 1.5):
            with pytest.raises(TfschedError, match="cross_steps must be a positive number of steps"):
                predict(g, schedule, o, workers=2, cross_steps=bad)

    def test_crossing_the_barrier_overlaps_the_next_pulls_and_keeps_what_each_read_sees(self):
        # Two workers train a chain of four layers on one PS (1 MB a layer, 1 s on a link alone;
        # forward ops 0.25 s, backward 0.5 s). Behind the barrier a step pulls, computes and
        # pushes; across it (ByteScheduler's crossing) the next step's pulls of the last layers,
        # whose gradients come first, go while the first layers' are still being pushed.
        g = training_chain(4)
        times = {f"f{i}": 0.25 for i in range(4)} | {f"g{i}": 0.5 for i in range(4)}
        o = oracle_with(times, bandwidth_bps=8e6)

        def makespan(steps, cross, policy="fifo", **kw):
            sg = build_sim_graph(g, o, order(g, "tio"), workers=2, steps=steps, cross_barrier=cross)
            return simulate(sg, policy, **kw)

        for policy in ("fifo", "counter", "queue"):  # one step has no barrier to cross
            assert makespan(1, True, policy).makespan == makespan(1, False, policy).makespan
        # without variables on the PS nothing would order one step's reads after the last's updates
        bare = build_comm_graph([op("c", [], device=PS), op("a", ["c"])], fetches=["a"])
        with pytest.raises(TfschedError, match="crossing the barrier needs the graph's variables"):
            build_sim_graph(bare, oracle_with({}), steps=2, cross_barrier=True)
        behind, across = makespan(3, False).makespan, makespan(3, True).makespan
        assert behind == pytest.approx(3 * makespan(1, False).makespan)
        # the PS's uplink carries 2 x 4 MB a step, whatever the layout
        assert 3 * 8.0 <= across < behind - 3.0
        # a strict counter gate releases the pulls in TIO's order, the first layer's first: that
        # one waits for the last update, so across the barrier it holds back the others
        assert makespan(3, True, "counter").makespan > across
        # the bench's steps start together: every worker's after every worker's last (synchronized)
        sg = build_sim_graph(g, o, order(g, "tio"), workers=2, steps=3, synchronized=True)
        r = simulate(sg, "fifo", record=True)
        ends = [
            max(r.ends[i] for i in range(len(sg)) if sg.step[i] == k and sg.kind[i] != BARRIER)
            for k in (0, 1)
        ]
        for k in (1, 2):
            assert min(r.starts[i] for i in range(len(sg)) if sg.step[i] == k) >= ends[k - 1] - 1e-9
        sg = build_sim_graph(g, o, order(g, "tio"), workers=2, steps=3, cross_barrier=True, synchronized=True)
        r = simulate(sg, "fifo", record=True)
        assert r.makespan <= across + 1e-9  # synchronized, across

        def nodes(name, step, run=None):
            return [
                i
                for i in range(len(sg))
                if sg.name[i] == name and sg.step[i] == step and run in (None, sg.worker[i])
            ]

        for step in (1, 2):
            for i in range(4):
                reads, updates = nodes(f"v{i}/read", step), nodes(f"apply{i}", step)
                assert len(reads) == len(updates) == 2  # one per worker's run
                # a read sees every worker's update of the last step, and no update of its own step
                last = max(r.ends[u] for u in nodes(f"apply{i}", step - 1))
                assert min(r.starts[n] for n in reads) >= last - 1e-9
                assert min(r.starts[u] for u in updates) >= max(r.ends[n] for n in reads) - 1e-9
            # a worker's ops of a step after every worker's ops of the last (synchronized)
            on_worker = [f"f{i}" for i in range(4)] + [f"g{i}" for i in range(4)]
            ends = max(r.ends[n] for name in on_worker for n in nodes(name, step - 1))
            assert min(r.starts[n] for name in on_worker for n in nodes(name, step)) >= ends - 1e-9
            for run in {sg.worker[i] for i in range(len(sg)) if sg.worker[i]}:
                # and the crossing overlaps: a pull of the step goes before the last one's last push
                moved = [i for i in range(len(sg)) if sg.transfer[i] is not None and sg.worker[i] == run]
                last_push = max(
                    r.ends[i] for i in moved if sg.step[i] == step - 1 and sg.transfer[i].kind == "push"
                )
                assert (
                    min(r.starts[i] for i in moved if sg.step[i] == step and sg.transfer[i].kind == "pull")
                    < last_push
                )

    def test_crossing_charges_its_gates_ops_to_the_ps(self):
        # tfsched's crossing runs its gates on the PS: each worker's step takes a read gate and
        # an update gate of each variable there, 2 ops each (enforce.crossing)
        g = training_chain(4)
        times = {f"f{i}": 0.25 for i in range(4)} | {f"g{i}": 0.5 for i in range(4)}
        o = oracle_with(times, bandwidth_bps=8e6)
        assert gated_variables(g) == {f"v{i}": ([f"v{i}/read"], [f"apply{i}"]) for i in range(4)}
        assert GATE_OPS == (2, 2)

        def layout(gate_op_s):
            o.gate_op_s = gate_op_s
            return build_sim_graph(
                g, o, order(g, "tio"), workers=2, steps=3, cross_barrier=True, synchronized=True
            )

        uncharged = layout(0.0)
        assert not any("gate of" in n for n in uncharged.name)  # as until the charge
        sg = layout(0.05)
        r = simulate(sg, "fifo", record=True)
        assert r.makespan > simulate(uncharged, "fifo").makespan
        gates = [i for i in range(len(sg)) if "gate of" in sg.name[i]]
        # a read gate and an update gate a variable, a worker and a step, on the variable's PS
        assert len(gates) == 2 * 4 * 2 * 3 and {sg.resource[i] for i in gates} == {PS.rsplit("/device", 1)[0]}
        assert {round(sg.duration[i], 9) for i in gates} == {0.1}

        def nodes(name, step, run=None):
            return [
                i
                for i in range(len(sg))
                if sg.name[i] == name and sg.step[i] == step and run in (None, sg.worker[i])
            ]

        for step in range(3):
            for i in range(4):
                for run in {sg.worker[n] for n in nodes(f"v{i}/read", step)}:
                    (read,), (apply,) = nodes(f"v{i}/read", step, run), nodes(f"apply{i}", step, run)
                    (read_gate,), (update_gate,) = (
                        nodes(f"read gate of v{i}", step, run),
                        nodes(f"update gate of v{i}", step, run),
                    )
                    # a read after its gate, the gate after every worker's last update of it
                    assert r.starts[read] >= r.ends[read_gate] - 1e-9
                    if step:
                        assert (
                            r.starts[read_gate] >= max(r.ends[u] for u in nodes(f"apply{i}", step - 1)) - 1e-9
                        )
                    # an update after its gate, the gate after every worker's read of this step
                    assert r.starts[apply] >= r.ends[update_gate] - 1e-9
                    assert r.starts[update_gate] >= max(r.ends[n] for n in nodes(f"v{i}/read", step)) - 1e-9

    def test_bounds_hold(self):
        g = chain_graph(4, [1000, 50_000, 200, 9000])
        o = oracle_with({f"f{i}": 0.01 for i in range(4)}, bandwidth_bps=8e6, overhead_s=0.001)
        sg = build_sim_graph(g, o, order(g, "tio"))
        for overlap in (True, False):
            b = step_bounds(sg, overlap=overlap)
            for policy in ("fifo", "counter"):
                t = simulate(sg, policy, overlap=overlap).step_time
                assert b.lower - 1e-12 <= t <= b.upper + 1e-12
                assert 0.0 <= b.efficiency(t) <= 1.0
        # the channel's bytes (240,800 at 1 MB/s) and one overhead before them, or all four's
        wire = 4 * 60_200 / 1e6  # float32
        assert step_bounds(sg).lower == pytest.approx(wire + 0.001, rel=1e-3)
        assert step_bounds(sg, overlap=False).lower == pytest.approx(wire + 4 * 0.001, rel=1e-3)

    def test_bounds_hold_where_a_host_link_is_slower_than_its_channels(self):
        # The bench measures each host link over its channels together; under a queue it can
        # measure slower than a channel's fitted rate (CI: lower 1.38 s over upper 1.35 s). Two
        # workers pull 1 MB each over channels of 1 MB/s through a PS uplink of 0.5 MB/s: a lone
        # pull takes 2 s, not 1 s, and the two 4 s, then 0.1 s of compute.
        nodes = var("w", (250_000,)) + [op("a", ["w/read"], device=W0), op("b", ["w/read"], device=W1)]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({"a": 0.1, "b": 0.1}, bandwidth_bps=8e6)
        o.host_bps = {(PS.split("/device:")[0], "up"): 4e6}
        sg = build_sim_graph(g, o, order(g, "tio"))
        b = step_bounds(sg)
        # every transfer alone at the link's rate, one after another, and both ops
        assert b.upper == pytest.approx(2 * 2.0 + 0.2, rel=1e-3)
        assert b.lower == pytest.approx(4.0, rel=1e-3)
        assert b.floor == pytest.approx(4.1, rel=1e-3)
        for policy in ("fifo", "counter"):
            t = simulate(sg, policy).step_time
            assert b.floor - 1e-9 <= t <= b.upper + 1e-9
            assert 0.0 <= b.efficiency(t) <= 1.0
        # On a shared machine whose CPU moves a byte in 2 us, a flow gets at most 95% of it
        # (the ops keep MIN_OPS_SHARE): 475 kB/s, so a lone pull takes 2.1 s however fast the
        # links. The machine's busy time (its bytes' CPU) stays under the upper bound.
        o.host_bps, o.machine_slots, o.comm_slot_s_per_byte = {}, 1.0, 2e-6
        sg = build_sim_graph(g, o, order(g, "tio"))
        b = step_bounds(sg)
        pull = 1_000_000 * 2e-6 / 0.95
        assert b.upper == pytest.approx(2 * pull + 0.2, rel=1e-3)
        assert b.lower == pytest.approx(2 * 1_000_000 * 2e-6 + 0.2, rel=1e-3)  # the machine's
        assert b.lower <= b.floor
        for policy in ("fifo", "counter"):
            t = simulate(sg, policy).step_time
            assert b.floor - 1e-9 <= t <= b.upper + 1e-9

    def test_the_floor_counts_the_backward_pass_after_the_last_pull(self):
        # One worker trains a chain of four layers: pulls of 1 MB (1 s each on the PS's link),
        # forward ops of 0.25 s, backward ops of 0.5 s, each gradient (1 MB) pushed to the PS.
        # TicTac's lower bound is the busiest resource, the link's 4 s of pulls; but the
        # backward pass needs every pull's layer, so no gradient leaves before the four pulls
        # (4 s), the last layer's forward op and its backward op (0.75 s), and then the
        # worker's link carries the four pushes, 4 s: 8.75 s, what TIO's order takes.
        g = training_chain(4)
        times = {f"f{i}": 0.25 for i in range(4)} | {f"g{i}": 0.5 for i in range(4)}
        sg = build_sim_graph(g, oracle_with(times, bandwidth_bps=8e6), order(g, "tio"))
        b = step_bounds(sg)
        assert b.lower == pytest.approx(4.0, rel=1e-3)
        assert b.floor == pytest.approx(8.75, rel=1e-3)
        # set by the worker's uplink: 4.75 s before its first push, its 4 s of pushes
        assert b.floor_by == f"up:{W0.split('/device:')[0]}"
        assert (b.floor_part.before, b.floor_part.work) == (
            pytest.approx(4.75, rel=1e-3),
            pytest.approx(4.0, rel=1e-3),
        )
        assert b.floor_part.after == pytest.approx(0.0, abs=1e-6)
        assert type(b.floor) is float and all(type(x) is float for x in b.floor_part)
        assert b.most_gain(10.0) == pytest.approx(10.0 / 8.75, rel=1e-3)
        for policy in ("fifo", "random", "counter", "queue"):
            for seed in range(3):
                assert simulate(sg, policy, seed=seed).step_time >= b.floor - 1e-9
        # TIO's order: the pulls end at 4 s, the backward ops at 6.25 s, the pushes, one after
        # another on the channel from the first gradient's (4.75 s), at 8.75 s
        assert simulate(sg, "counter").step_time == pytest.approx(8.75, rel=1e-3)
        # with several steps the floor is per step, and still under every run
        sg3 = build_sim_graph(g, oracle_with(times, bandwidth_bps=8e6), order(g, "tio"), steps=3)
        b3 = step_bounds(sg3, steps=3)
        assert b.lower <= b3.floor <= simulate(sg3, "counter").makespan / 3 + 1e-9
        assert b3.floor_part.total == pytest.approx(b3.floor)  # its parts per step too

    def test_the_floor_counts_the_work_after_a_pull_not_only_its_longest_path(self):
        # After its one pull (1 MB, 1 s) the worker runs f (0.5 s) and then a and b (1 s each)
        # side by side in the graph, but one op at a time: the longest path after the pull is
        # 1.5 s, the work 2.5 s, and the step takes 3.5 s whatever the order.
        nodes = var("w", (250_000,)) + [op("f", ["w/read"]), op("a", ["f"]), op("b", ["f"])]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({"f": 0.5, "a": 1.0, "b": 1.0}, bandwidth_bps=8e6)
        sg = build_sim_graph(g, o)
        assert simulate(sg, "fifo").step_time == pytest.approx(3.5)
        assert step_bounds(sg).floor == pytest.approx(3.5)
        # the PS's uplink: its 1 s pull, then the worker's 2.5 s of work after it
        assert step_bounds(sg).floor_by.startswith("up:")
        # a worker that runs two ops at once: the path bounds it, 2.5 s
        o.compute_slots = {W0.split("/device:")[0]: 2.0}
        sg = build_sim_graph(g, o)
        assert simulate(sg, "fifo").step_time == pytest.approx(2.5)
        assert step_bounds(sg).floor == pytest.approx(2.5)
        # the pull, f, then a or b: the link's floor and the longest path tie, and the link says more
        assert step_bounds(sg).floor_by.startswith("up:")

    @pytest.mark.parametrize("seed", [*range(6), 9])
    def test_no_simulated_order_beats_the_floor(self, seed):
        # random layer sizes and op times, two or three workers, a shared machine (some with
        # cores of their own; seed 9 their ends' shares of a byte's CPU uneven), every policy,
        # with and without slices and a window per task
        g, o, workers = random_training_case(seed)
        s = order(g, "tio")
        plain = step_bounds(build_sim_graph(g, o, s, workers=workers))
        assert plain.lower <= plain.floor and plain.lower <= plain.upper
        for partition in (None, 100_000):
            sg = build_sim_graph(g, o, s, workers=workers, partition_bytes=partition)
            assert min(r.step_time for r in simulated_orders(sg)) >= plain.floor - 1e-9

    def test_bounds_hold_on_a_machine_slower_than_one_op(self):
        # four workers of a chain on a machine that does a quarter of an op's worth at once
        g = chain_graph(4, [1000, 50_000, 200, 9000])
        o = oracle_with({f"f{i}": 0.01 for i in range(4)}, bandwidth_bps=8e6, overhead_s=0.001)
        o.machine_slots = 0.25
        sg = build_sim_graph(g, o, order(g, "tio"), workers=4)
        b = step_bounds(sg)
        # the ops' 16 x 10 ms at a quarter speed, one after another, and every message (its
        # overhead and its bytes at 1 MB/s)
        assert b.upper == pytest.approx(16 * 0.01 / 0.25 + 4 * (4 * 0.001 + 4 * 60_200 / 1e6))  # float32
        for policy in ("fifo", "counter"):
            t = simulate(sg, policy).step_time
            assert b.lower - 1e-12 <= t <= b.upper + 1e-12
            assert 0.0 <= b.efficiency(t) <= 1.0

    def test_tasks_on_one_machine_share_it(self):
        # Two workers, each computing 1 s after a pull of negligible size.
        nodes = var("w", (1,)) + [op("a", ["w/read"], device=W0), op("b", ["w/read"], device=W1)]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({"a": 1.0, "b": 1.0}, bandwidth_bps=8e12)
        assert simulate_schedule(g, o).makespan == pytest.approx(1.0, abs=1e-6)  # a host each
        o.machine_slots = 1.0  # one machine doing one op's worth at once: each at half speed
        assert simulate_schedule(g, o).makespan == pytest.approx(2.0, abs=1e-6)
        o.machine_slots = 2.0
        assert simulate_schedule(g, o).makespan == pytest.approx(1.0, abs=1e-6)
        # One slot, b three times as long: both at half speed until a is done at 2 s, then b
        # alone at full speed for its last 2 s of work.
        o.op_times["b"] = 3.0
        o.machine_slots = 1.0
        assert simulate_schedule(g, o).makespan == pytest.approx(4.0, abs=1e-6)
        bounds = step_bounds(build_sim_graph(g, o))
        assert bounds.lower == pytest.approx(4.0, abs=1e-6)  # the machine's work

    def test_a_task_with_cores_of_its_own_is_lent_none_of_the_others(self):
        # a (1 s) and b (3 s), each on its own worker, on one machine of one op's worth at once
        nodes = var("w", (1,)) + [op("a", ["w/read"], device=W0), op("b", ["w/read"], device=W1)]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({"a": 1.0, "b": 3.0}, bandwidth_bps=8e12)
        o.machine_slots = 1.0
        # shared: b takes the whole machine once a is done (2 s), and ends at 4 s
        assert simulate_schedule(g, o).makespan == pytest.approx(4.0, abs=1e-6)
        # each task capped at half of it (bench.hostcpu): b keeps its half, 6 s of it
        o.host_slots = 0.5
        assert build_sim_graph(g, o).host_slots == 0.5
        assert simulate_schedule(g, o).makespan == pytest.approx(6.0, abs=1e-6)
        # and so do the bounds: b's 3 s of work on its half of the machine
        b = step_bounds(build_sim_graph(g, o))
        assert b.lower == pytest.approx(6.0, abs=1e-6)
        assert b.floor == pytest.approx(6.0, abs=1e-6)
        assert b.upper >= 8.0 - 1e-6  # both ops one after another at half speed
        # a cap above the fair share binds only when b computes alone: its last 2 s of work at
        # 0.8 after 2 s at half speed
        o.host_slots = 0.8
        assert simulate_schedule(g, o).makespan == pytest.approx(4.5, abs=1e-6)
        # without a shared machine there is nothing to cap
        o.machine_slots = None
        assert build_sim_graph(g, o).host_slots is None
        assert simulate_schedule(g, o).makespan == pytest.approx(3.0, abs=1e-6)

    def test_bytes_on_the_wire_take_the_machines_cpu(self):
        # Worker 0 computes a (1 s) while worker 1 pulls v (1,000,000 bytes at 1 MB/s: 1 s).
        nodes = var("w", (1,)) + var("v", (250_000,))
        nodes += [op("a", ["w/read"], device=W0), op("b", ["v/read"], device=W1)]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({"a": 1.0, "b": 0.0}, bandwidth_bps=8e6)
        o.machine_slots = 1.0
        sg = build_sim_graph(g, o)
        r = simulate(sg, "fifo", record=True)
        a, b = r.ends[sg.name.index("a")], r.ends[sg.name.index("b")]
        # The flow takes half the machine while it runs and keeps its rate; a gets the other
        # half for the flow's second, then the machine for the work left (1/2 s): 1.5
        # slot-seconds on one slot.
        o.comm_slot_s_per_byte = 0.5 / 1e6
        sg = build_sim_graph(g, o)
        r = simulate(sg, "fifo", record=True)
        assert r.ends[sg.name.index("a")] - a == pytest.approx(0.5, abs=0.01)
        assert r.ends[sg.name.index("b")] == pytest.approx(b)
        # the machine's lower bound counts the bytes' CPU
        assert step_bounds(sg).lower >= 1.0 + 0.5 - 1e-6
        # A flow that wants more than the machine is slowed to what it can move, all but the
        # ops' least share (MIN_OPS_SHARE): 2 slots wanted of 1, 0.95 given, the pull 1/0.475 s.
        o.comm_slot_s_per_byte = 2.0 / 1e6
        sg = build_sim_graph(g, o)
        r = simulate(sg, "fifo", record=True)
        assert r.ends[sg.name.index("b")] - b == pytest.approx(1 / 0.475 - 1, abs=0.01)
        # without a shared machine (each task on its own host) the bytes cost no CPU
        o.machine_slots = None
        assert build_sim_graph(g, o).comm_slot_s_per_byte == 0.0

    def test_a_task_with_cores_of_its_own_spends_its_bytes_cpu_there(self):
        # Two workers pull 1 MB each from the PS (its uplink 1 MB/s, each pull 0.5 MB/s), then
        # compute 0.1 s. The machine has 2 slots, each task 0.5 of its own (bench.hostcpu); a
        # byte costs 1 us of CPU, half at each end, in the gRPC threads of its own task.
        nodes = var("w", (250_000,)) + [op("a", ["w/read"], device=W0), op("b", ["w/read"], device=W1)]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({"a": 0.1, "b": 0.1}, bandwidth_bps=8e6)
        o.machine_slots, o.comm_slot_s_per_byte = 2.0, 1e-6
        # shared cores: the bytes want 1 slot of the machine's 2, and keep the link's rate
        assert simulate_schedule(g, o).makespan == pytest.approx(2.0 + 0.1, rel=1e-3)
        # cores of their own: the PS's two flows want 2 x 0.5 MB/s x 0.5 us = 0.5 slots of its
        # 0.5; it gives them all but MIN_OPS_SHARE (0.475), so each pull runs at 475 kB/s and
        # the ops at the task's share, 0.5: 1 / 0.475 + 0.2 s
        o.host_slots = 0.5
        sg = build_sim_graph(g, o)
        t = simulate(sg, "fifo").step_time
        assert t == pytest.approx(1 / 0.475 + 0.2, rel=1e-3)
        # the floor and the bounds move the bytes no faster than the PS's cores
        b = step_bounds(sg)
        assert b.floor <= t + 1e-9 and b.lower <= b.upper
        assert b.floor == pytest.approx(t, rel=1e-3)
        # as until the sixty-third session (host_bytes=False): the bytes take the machine's CPU
        # alone, the pulls keep the link's rate
        o.host_bytes = False
        sg = build_sim_graph(g, o)
        assert simulate(sg, "fifo").step_time == pytest.approx(2.0 + 0.2, rel=1e-3)
        assert step_bounds(sg).floor == pytest.approx(2.2, rel=1e-3)
        # a worker computing while it receives: the op gets what the bytes leave of its share
        nodes = var("v", (250_000,)) + [op("a", [], device=W0), op("b", ["v/read"], device=W0)]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({"a": 0.5, "b": 0.0}, bandwidth_bps=8e6)
        o.machine_slots, o.host_slots, o.comm_slot_s_per_byte = 2.0, 0.5, 0.4e-6
        sg = build_sim_graph(g, o)
        r = simulate(sg, "fifo", record=True)
        # the pull (1 s at 1 MB/s) takes 0.2 of the worker's 0.5 slots: a runs at 0.3 for 1 s,
        # then at 0.5 for its last 0.2 s of work: 1.4 s
        assert r.ends[sg.name.index("a")] == pytest.approx(1.4, abs=0.01)

    def test_the_sender_and_the_receiver_spend_their_measured_shares_of_a_bytes_cpu(self):
        # As above, two workers pulling 1 MB each from the PS (each pull 0.5 MB/s), a byte 2 us
        # of CPU. Half at each end: the PS's flows want 2 x 0.5 MB/s x 1 us = 1 slot of its
        # 0.5, and get 0.475: each pull runs at 237.5 kB/s.
        nodes = var("w", (250_000,)) + [op("a", ["w/read"], device=W0), op("b", ["w/read"], device=W1)]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({"a": 0.1, "b": 0.1}, bandwidth_bps=8e6)
        o.machine_slots, o.host_slots, o.comm_slot_s_per_byte = 2.0, 0.5, 2e-6
        assert build_sim_graph(g, o).host_byte_shares == (0.5, 0.5)
        assert simulate_schedule(g, o).makespan == pytest.approx(1 / 0.2375 + 0.2, rel=1e-3)
        # The sender a fifth, the receiver three fifths, the kernel the rest (on the machine
        # alone): the PS's flows want 0.4 slots, under its 0.475; each worker's 0.6, and gets
        # 0.475, so its pull runs at 0.5 MB/s x 0.475 / 0.6. The receivers bind.
        o.host_byte_shares = (0.2, 0.6)
        sg = build_sim_graph(g, o)
        assert sg.host_byte_shares == (0.2, 0.6)
        t = simulate(sg, "fifo").step_time
        assert t == pytest.approx(1 / (0.5 * 0.475 / 0.6) + 0.2, rel=1e-3)
        b = step_bounds(sg)
        assert b.floor == pytest.approx(t, rel=1e-3) and b.lower <= b.floor <= t + 1e-9
        # the other way round the PS binds: its flows want 2 x 0.5 MB/s x 1.2 us = 1.2 slots
        o.host_byte_shares = (0.6, 0.2)
        t = simulate_schedule(g, o).makespan
        assert t == pytest.approx(1 / (0.5 * 0.475 / 1.2) + 0.2, rel=1e-3)
        assert step_bounds(build_sim_graph(g, o)).floor == pytest.approx(t, rel=1e-3)

    def test_bad_policy(self):
        with pytest.raises(TfschedError, match="unknown simulation policy"):
            simulate(build_sim_graph(chain_graph(1), oracle_with({})), "lifo")


class TestQueueWithoutCredit:
    def test_layer_pushes_do_not_wait_for_the_last_gradient(self):
        # Chain with backward: grad_i depends on grad_{i+1}; layer order ranks push_0 first,
        # but push_0's gradient is computed last. Counters would hold every push until then.
        n = 4
        g = training_chain(n)
        o = oracle_with({f"g{i}": 0.5 for i in range(n)}, bandwidth_bps=8e7)
        layer = order(g, "layer", o)
        assert layer.mode == "queue"
        queue_time = simulate(build_sim_graph(g, o, layer), "queue").step_time
        counter_time = simulate(build_sim_graph(g, o, layer), "counter").step_time
        # pushes of 1 MB take 0.1 s each; with counters they all wait for g0 (at 2.0 s + pulls)
        assert queue_time < counter_time - 0.2


class TestHeterogeneousLinks:
    def test_a_fast_channel_is_not_throttled_by_a_slow_one(self):
        # One PS, two workers; the channel to w0 is 10x faster than the one to w1 (per-link fits).
        from tests.helpers import PS
        from tfsched.oracle import LinkModel

        nodes = var("w", (250_000,)) + [op("a", ["w/read"], device=W0), op("b", ["w/read"], device=W1)]
        g = build_comm_graph(nodes, fetches=["a", "b"])
        o = oracle_with({}, bandwidth_bps=8e6)
        ps_task = PS.split("/device:")[0]
        o.links = {
            (ps_task, W0.split("/device:")[0]): LinkModel(8e7, 0.0),
            (ps_task, W1.split("/device:")[0]): LinkModel(8e6, 0.0),
        }
        sg = build_sim_graph(g, o)
        r = simulate(sg, record=True)
        ends = {sg.resource[i]: r.ends[i] for i, k in enumerate(sg.kind) if k == 1}
        fast = ends[f"{ps_task}->{W0.split('/device:')[0]}"]
        slow = ends[f"{ps_task}->{W1.split('/device:')[0]}"]
        # 1 MB at 80 Mbit/s alone would take 0.1 s; it shares the PS NIC (80 Mbit/s) with a flow
        # capped at 8 Mbit/s, so it gets 72 Mbit/s: 0.111 s. The slow one needs 1 s.
        assert fast == pytest.approx(1e6 * 8 / 72e6, rel=1e-6)
        assert slow == pytest.approx(1.0, rel=1e-6)
        b = step_bounds(sg)
        assert b.lower == pytest.approx(1.0)  # the slow channel; the PS NIC carries 2 MB in 0.2 s
        assert b.lower <= r.makespan <= b.upper


def _plain_max_min(flows, link_capacity=None, weight=None):
    """Max-min fairness as its definition reads (engine._max_min_rates until the hundred-and-
    twentieth session): each round, the link with the smallest share per weight, every flow's
    own link (its channel's rate) among them, ties to the smaller name."""
    from collections import defaultdict

    cap, users, links_of = {}, defaultdict(set), {}
    for fid, up, down, c in flows:
        for link in (up, down):
            cap[link] = (link_capacity or {}).get(link, max(cap.get(link, 0.0), c))
            users[link].add(fid)
        cap[f"flow:{fid}"] = c
        users[f"flow:{fid}"].add(fid)
        links_of[fid] = (up, down, f"flow:{fid}")
    w = (lambda fid: weight.get(fid, 1.0)) if weight else (lambda fid: 1.0)
    weighs = (lambda u: sum(map(w, u))) if weight else len
    rate = {}
    while len(rate) < len(flows):
        share, bottleneck = min((cap[link] / weighs(u), link) for link, u in users.items() if u)
        for fid in list(users[bottleneck]):
            rate[fid] = share * w(fid)
            for link in links_of[fid]:
                cap[link] -= rate[fid]
                users[link].discard(fid)
    return rate


def test_max_min_rates_are_the_definitions_to_the_last_bit():
    """The rounds skip the flows' own links while a host link's share is below them all; the
    rates, and the order they come in (which the shared machine's sums of them follow), must
    be the plain algorithm's exactly: ties (whole numbers), own links the bottleneck (channels
    slower than their hosts), link capacities and weights."""
    import random

    from tfsched.sim.engine import _max_min_rates

    rng = random.Random(7)
    own_first = 0
    for case in range(400):
        hosts = rng.randint(1, 6)
        flows = [
            (
                fid,
                f"up:h{rng.randrange(hosts)}",
                f"down:h{rng.randrange(hosts)}",
                float(rng.choice((2, 3, 4, 6, 12))),
            )
            for fid in rng.sample(range(10_000), rng.randint(1, 40))
        ]
        capacity = {
            f"up:h{h}": float(rng.randint(1, 30)) for h in range(hosts) if case % 3 and rng.random() < 0.5
        }
        weight = {fid: rng.choice((0.5, 1.0, 0.9**3)) for fid, *_ in flows} if case % 4 == 1 else None
        got = _max_min_rates(flows, capacity, weight)
        want = _plain_max_min(flows, capacity, weight)
        assert list(got.items()) == list(want.items()), case
        own_first += any(got[fid] == c / (weight or {}).get(fid, 1.0) for fid, _, _, c in flows)
    assert own_first > 50  # the cases had flows held to their own channel's rate


def test_analyze_predicts_an_order_without_credit_raced_and_with_credit_kept():
    from tfsched.analysis import predict

    g = chain_graph(6, [250_000] * 6)  # 1 MB pulls: 1 s each on the link, then 1 s of compute each
    o = oracle_with({f"f{k}": 1.0 for k in range(6)}, bandwidth_bps=8e6)
    s = order(g, "tio")
    kept = simulate(build_sim_graph(g, o, s), "counter").step_time
    assert kept == pytest.approx(7.0)
    alone = predict(g, s, o)
    assert alone.scheduled_s > kept  # released together, the pulls race for the channel
    windowed = predict(g, s, o, credit=500_000)  # two pulls in flight at most: the order holds
    assert windowed.scheduled_s == pytest.approx(kept)
    assert windowed.priority_only_s == pytest.approx(alone.scheduled_s)
