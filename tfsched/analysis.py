"""``analyze``: from a graph file to a schedule and a predicted step time.

The library function behind ``tfsched analyze``: it loads the graph, orders the transfers,
and simulates a step with and without the order. The CLI only prints what this returns.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace

from tfsched.errors import TfschedError
from tfsched.graph import CommGraph, load_comm_graph
from tfsched.oracle.oracle import DEFAULT_BANDWIDTH_BPS, DEFAULT_OVERHEAD_S, LinkModel, TimeOracle
from tfsched.ordering import order
from tfsched.ordering.schedule import Schedule
from tfsched.sim import POLICY_OF_MODE, build_sim_graph, mean_step, step_bounds
from tfsched.sim.engine import DEFAULT_ACK_SHARE, check_credit_return, check_host_order
from tfsched.sim.pool import Simulations, check_jobs
from tfsched.units import check_link_times, is_count


@dataclass
class Prediction:
    """Simulated step times and TicTac's metrics for the slowest worker (seconds)."""

    baseline_s: float
    scheduled_s: float
    lower_bound_s: float
    upper_bound_s: float
    efficiency: float  # E of the scheduled step
    speedup_bound: float  # S
    baseline_efficiency: float
    # no order is faster (sim.metrics.Bounds.floor: the dependencies and each resource); 0: unknown
    floor_s: float = 0.0
    # what sets it (sim.metrics.describe_floor's words: "the uplink of ...: 4.31 s of work, ...")
    floor_by: str = ""
    # With partitioning and/or credit (parameters; 0: off): the same order without them.
    partition: int = 0
    credit: int = 0
    host_credit: bool = False  # the credit is one window per sending task
    host_order: str = "steps"  # what that window serves first ("priority": the steps in lockstep)
    ack_share: int = DEFAULT_ACK_SHARE  # the credit acknowledges transfers of at least credit/ack_share
    credit_return: str = "ack"  # "sent": the credit comes back when the sender has sent a transfer
    ack_group: int = 1  # slices on a channel one acknowledgement returns at most
    push_credit: int = 0  # the pushes' window in place of the credit (0: the credit)
    # each task's inter-op threads, for the acknowledgements' ops to wait for (None: a spare one)
    executor_threads: int | None = None
    priority_only_s: float | None = None
    # with a credit: the messages of the graph's step it acknowledges, of all (acknowledged_messages)
    acknowledged: int | None = None
    messages: int | None = None
    # the scheduled steps across TensorFlow's barrier, this many laid out at once (0: behind it)
    cross_steps: int = 0

    def to_json(self) -> dict:
        out = {
            "baseline_s": self.baseline_s,
            "scheduled_s": self.scheduled_s,
            "lower_bound_s": self.lower_bound_s,
            "upper_bound_s": self.upper_bound_s,
            "efficiency": self.efficiency,
            "speedup_bound": self.speedup_bound,
            "floor_s": self.floor_s,
            "floor_by": self.floor_by,
        }
        if self.partition or self.credit:
            out.update(
                partition=self.partition,
                credit=self.credit,
                host_credit=self.host_credit,
                host_order=self.host_order,
                ack_share=self.ack_share,
                credit_return=self.credit_return,
                ack_group=self.ack_group,
                push_credit=self.push_credit,
                priority_only_s=self.priority_only_s,
            )
        if self.credit:
            out.update(
                acknowledged=self.acknowledged, messages=self.messages, executor_threads=self.executor_threads
            )
        if self.cross_steps:
            out["cross_steps"] = self.cross_steps
        return out


@dataclass(frozen=True)
class Traced:
    """What the steps of ``analyze``'s trace took: the median of its complete steps (seconds),
    how many, and whether tfsched's pass scheduled them (``tracing.match.MatchReport``)."""

    step_s: float
    steps: int
    scheduled: bool

    def efficiency(self, p: Prediction) -> float:
        """TicTac's E of the traced step against the predicted step's makespan bounds."""
        span = p.upper_bound_s - p.lower_bound_s
        return (p.upper_bound_s - self.step_s) / span if span > 0 else 1.0

    @classmethod
    def of(cls, trace, match) -> Traced | None:
        from tfsched.tracing.collector import complete_steps

        times = complete_steps(trace).step_times_us
        if not times:
            return None
        return cls(
            step_s=statistics.median(times) / 1e6, steps=len(times), scheduled=bool(match.gated_transfers)
        )


@dataclass
class Analysis:
    graph: CommGraph
    schedule: Schedule
    oracle: TimeOracle
    prediction: Prediction
    workers: int
    trace_match: object | None = None  # tfsched.tracing.match.MatchReport when analyzed with a trace
    # The partition graphs the trace ran (tracing.replay.graph_that_ran), which the prediction
    # lays out with the schedule carried over; None: the prediction is of ``graph``.
    simulated: CommGraph | None = None
    # Where the links' bandwidth and overhead came from, for the report ("fitted to the trace", ...)
    links: str = ""
    # The traced steps (``Traced``), beside the prediction; None without a trace
    traced: Traced | None = None

    @property
    def sizes(self) -> dict:
        """ByteScheduler's partition and credit kept to this graph and link
        (``tfsched.enforce.link_sizes``), and the busiest channel's parameters they come from."""
        partition, credit = _sizes(self.graph, self.oracle)
        return {
            "partition": partition,
            "credit": credit,
            "busiest_channel_params": self.graph.busiest_channel_params,
        }

    @property
    def simulated_graph(self) -> dict:
        """What the prediction laid out: ``from`` "ran" (the trace's partition graphs) or "saved",
        and its transfers beside the saved graph's (as the bench's results say it)."""
        laid = self.simulated or self.graph
        return {
            "from": "saved" if self.simulated is None else "ran",
            "transfers": len(laid.transfers),
            "saved_transfers": len(self.graph.transfers),
        }

    def to_json(self) -> dict:
        """The stable ``analyze --json`` shape."""
        prios = self.schedule.priorities
        return {
            "algorithm": self.schedule.algorithm,
            "transfers": [
                t.record(prios[t], t not in self.schedule.ungated)
                for ts in self.schedule.channels().values()
                for t in ts
            ],
            "prediction": {**self.prediction.to_json(), "simulated_graph": self.simulated_graph},
            "sizes": self.sizes,
            "ps_load": self.graph.ps_load,
            **({} if self.traced is None else {"traced": self.traced_json}),
        }

    @property
    def traced_json(self) -> dict:
        t = self.traced
        return {
            "step_s": t.step_s,
            "steps": t.steps,
            "scheduled": t.scheduled,
            "efficiency": t.efficiency(self.prediction),
            # how much of the graph the trace timed (tracing.match.MatchReport)
            "transfers_matched": self.trace_match.transfers_matched,
            "transfers_total": self.trace_match.transfers_total,
        }


def _sizes(graph: CommGraph, oracle: TimeOracle) -> tuple[int, int]:
    """(partition, credit) kept to ``graph`` and ``oracle``'s link (``enforce.link_sizes``)."""
    from tfsched.enforce.api import link_sizes

    return link_sizes(oracle.link.bandwidth_bps, graph.busiest_channel_params)


# The pass counts partition and credit in parameters (as ByteScheduler); the simulator in bytes.
PARAM_BYTES = 4
# Tensors under this many bytes are ordered but not acknowledged (cc/scheduler.cc kMinAckedElements).
MIN_ACKED_BYTES = 16384 * PARAM_BYTES


def least_acknowledged(credit: int, ack_share: int) -> int:
    """The fewest parameters of a transfer the pass acknowledges under ``credit``: ``credit /
    ack_share`` and at least kMinAckedElements (cc/scheduler.cc's ``least_acked``).

    >>> least_acknowledged(4_000_000, 8), least_acknowledged(100_000, 8)
    (500000, 16384)
    """
    return max(MIN_ACKED_BYTES // PARAM_BYTES, credit // ack_share)


def acknowledged_messages(
    graph: CommGraph,
    *,
    partition: int,
    credit: int,
    ack_share: int = DEFAULT_ACK_SHARE,
    kinds: tuple[str, ...] = ("pull", "push"),
) -> tuple[int, int]:
    """(acknowledged, all): the messages of ``graph``'s tensors of ``kinds`` (a transfer, or each
    slice of it under ``partition``; the pass gates no control edge) and of them those the pass
    acknowledges under ``credit`` (parameters): a size unknown, or at least ``credit /
    ack_share`` and kMinAckedElements (cc/scheduler.cc). A credit window counts only these. Slices are cut equal
    (``sim.model.slice_sizes``), so a tensor a little over the partition is cut into two of
    about half of it: with partition 500,000 and credit 4,000,000 none of VGG16's pushed slices
    reached the 500,000 parameters that credit acknowledges."""
    from tfsched.sim.model import slice_sizes

    least = least_acknowledged(credit, ack_share) * PARAM_BYTES if credit else None
    sizes = [
        size
        for t in graph.transfers
        if t.kind in kinds
        for size in slice_sizes(t.bytes or 0, partition * PARAM_BYTES or None)
    ]
    acked = 0 if least is None else sum(size == 0 or size >= least for size in sizes)
    return acked, len(sizes)


def predict(
    graph: CommGraph,
    schedule: Schedule,
    oracle: TimeOracle,
    *,
    workers: int | None = None,
    partition: int = 0,
    credit: int = 0,
    host_credit: bool = False,
    host_order: str = "steps",
    ack_share: int = DEFAULT_ACK_SHARE,
    credit_return: str = "ack",
    ack_group: int = 1,
    push_credit: int = 0,
    executor_threads: int | None = None,
    cross_steps: int = 0,
    progress: Callable[[str], None] | None = None,
    jobs: int | None = None,
) -> Prediction:
    """Simulate one step under FIFO and under ``schedule``, with TicTac's bounds.

    The baseline is FIFO with ties in a random order (TensorFlow hands ready transfers to gRPC
    in no fixed order), averaged over a few seeds. So is the schedule without a credit window:
    the transfers its gates release and that wait for a channel race for it (``sim.engine``,
    ``race``), and only a credit window keeps its order on the wire, for the transfers it
    acknowledges (the smaller ones still race). ``partition`` and
    ``credit`` (parameters, as the enforcement pass takes them) apply to the scheduled run only;
    then the same order without them is simulated too (``priority_only_s``). A tensor the
    partition cuts is put back together on its receiver before its consumers run, at
    ``oracle.copy_s_per_byte`` (since the ninety-first session). ``host_credit``:
    the credit is one window per sending task, as ``tfsched.enable(..., host_credit=True)``
    enforces it, serving the steps in turn or, with ``host_order="priority"``, in lockstep.
    ``ack_share``: the credit acknowledges transfers of at least credit/ack_share parameters
    (``enable(..., ack_share=N)``). ``credit_return``: when the credit comes back
    (``enable(..., credit_return=...)``); each task has a machine of its own here, so an
    acknowledgement costs its time on the wire, not the cores'. ``ack_group``: slices on a
    channel one acknowledgement returns at most (``enable(..., ack_group=N)``). ``push_credit``: the pushes' window
    (parameters) in place of ``credit``, which the pulls keep (``enable(..., push_credit=N)``).
    ``executor_threads``: each task's inter-op threads (``inter_op_parallelism_threads``), for a
    run with ``enable(..., inline_transfers=False)``: an acknowledgement's ops (the receiver's
    ``TfschedAck``, the sender's ``TfschedCredit``) then wait in their task's ready queue for a
    free one where the task's ops can hold them all (``sim.simulate``'s), as a worker's credit
    waits behind the backward pass's convolutions. None: they wait for none, as with the
    default inline transfers, which receive and acknowledge on the thread that has the tensor.
    ``cross_steps``: the scheduled steps cross TensorFlow's barrier (``tfsched.enforce.crossing``),
    ``cross_steps`` of them laid out at once as ``sim.build_sim_graph(cross_barrier=True)`` does,
    the gates serving by priority among the transfers arrived (``enable(ready=True)``, which the
    crossing needs); the step is their makespan over their number, the first from an empty
    pipeline and the last to the end of its updates, as ``CrossingRunner.run`` times a run of them
    (``bench.predict`` lays the bench's modes across the barrier out the same way), the PS
    charged the crossing's gates' ops at ``oracle.gate_op_s`` each. The baseline
    stays behind the barrier (vanilla TensorFlow's steps), and so do the bounds: E above 1 is a
    step faster than any order behind the barrier gives. ``progress(text)``: told what it
    simulates next (``tfsched analyze``'s status line). ``jobs``: the processes the seeded
    simulations run in while this one bounds the step (``sim.pool.Simulations``); None: one a
    core for a large graph, else this one alone. The prediction is the same with any number.
    """
    if cross_steps and not is_count(cross_steps, least=1):
        raise TfschedError(f"cross_steps must be a positive number of steps, got {cross_steps!r}")
    if host_credit and not credit:
        raise TfschedError("host_credit needs a credit (the window it makes one per sending task)")
    check_host_order(host_order, host_credit)
    if ack_share != DEFAULT_ACK_SHARE and not credit:
        raise TfschedError("ack_share needs a credit (the window that acknowledges)")
    if check_credit_return(credit_return) != "ack" and not credit:
        raise TfschedError("credit_return needs a credit (the window whose credit comes back)")
    if ack_group != 1 and not (credit and credit_return == "ack" and is_count(ack_group, least=1)):
        raise TfschedError(
            f"ack_group must be a positive number of slices and needs a credit returned by "
            f"acknowledgement, got {ack_group!r}"
        )
    if push_credit:
        if not credit:
            raise TfschedError("push_credit needs a credit (the window that acknowledges the transfers)")
        if not is_count(push_credit, least=1):
            raise TfschedError(f"push_credit must be a positive number of parameters, got {push_credit!r}")
    check_jobs(jobs)
    if executor_threads is not None:
        if not credit:
            raise TfschedError(
                "executor_threads needs a credit (the acknowledgements that wait for a thread)"
            )
        if not is_count(executor_threads, least=1):
            raise TfschedError(
                f"executor_threads must be a positive number of threads, got {executor_threads!r}"
            )
    say = progress or (lambda text: None)
    sg = build_sim_graph(graph, oracle, schedule, workers=workers)
    policy = POLICY_OF_MODE[schedule.mode]
    window = {
        "credit_bytes": credit * PARAM_BYTES or None,
        "min_acked_bytes": MIN_ACKED_BYTES,
        "host_credit": host_credit,
        "host_order": host_order,
        "ack_share": ack_share,
        "credit_return": credit_return,
        "ack_group": ack_group,
        "push_credit_bytes": push_credit * PARAM_BYTES or None,
        "executor_threads": executor_threads,
    }

    # released transfers waiting for a channel race for it (sim.engine ``race``)
    with Simulations(jobs, say) as sims:
        plain = sims.seeded(
            sg, policy, f"simulating the {schedule.algorithm.upper()} order ({len(sg):,} nodes)", race=True
        )
        crossed = windowed = None
        if cross_steps:
            csg = build_sim_graph(
                graph,
                oracle,
                schedule,
                workers=workers,
                partition_bytes=partition * PARAM_BYTES or None,
                steps=cross_steps,
                cross_barrier=True,
                synchronized=True,
            )
            crossed = sims.seeded(
                csg, "ready", f"simulating {cross_steps} steps across the barrier", race=True, **window
            )
        elif partition or credit:
            psg = build_sim_graph(
                graph, oracle, schedule, workers=workers, partition_bytes=partition * PARAM_BYTES or None
            )
            windowed = sims.seeded(
                psg, policy, "simulating the order with its partition and credit", race=True, **window
            )
        vanilla = sims.seeded(sg, "random", "simulating vanilla TensorFlow (the transfers in no order)")
        sims.start()
        say("bounding the step (TicTac's bounds and the floor)")
        b = step_bounds(sg)
        plain_s = mean_step(plain.runs())
        scheduled, priority_only = plain_s, None
        if crossed is not None:
            scheduled = statistics.fmean(r.makespan for r in crossed.runs()) / cross_steps
        elif windowed is not None:
            scheduled, priority_only = mean_step(windowed.runs()), plain_s
        baseline = mean_step(vanilla.runs())
    acknowledged, messages = (
        acknowledged_messages(graph, partition=partition, credit=credit, ack_share=ack_share)
        if credit
        else (None, None)
    )
    return Prediction(
        baseline_s=baseline,
        scheduled_s=scheduled,
        lower_bound_s=b.lower,
        upper_bound_s=b.upper,
        efficiency=b.efficiency(scheduled),
        speedup_bound=b.speedup,
        baseline_efficiency=b.efficiency(baseline),
        floor_s=b.floor,
        floor_by=b.floor_text,
        partition=partition,
        credit=credit,
        host_credit=host_credit,
        host_order=host_order,
        ack_share=ack_share,
        credit_return=credit_return,
        ack_group=ack_group,
        push_credit=push_credit,
        executor_threads=executor_threads,
        priority_only_s=priority_only,
        acknowledged=acknowledged,
        messages=messages,
        cross_steps=cross_steps,
    )


def analyze(
    path: str,
    *,
    fetches: list[str] | None = None,
    algorithm: str = "tio",
    bandwidth_bps: float | None = None,
    overhead_s: float | None = None,
    workers: int | None = None,
    fmt: str | None = None,
    default_device: str | None = None,
    ps_jobs: tuple[str, ...] = ("ps",),
    tag_set: str | None = None,
    trace: str | None = None,
    statistic: str = "min",
    partition: int | str = 0,
    credit: int | str = 0,
    host_credit: bool = False,
    host_order: str = "steps",
    ack_share: int = DEFAULT_ACK_SHARE,
    credit_return: str = "ack",
    ack_group: int = 1,
    push_credit: int = 0,
    executor_threads: int | None = None,
    cross_steps: int = 0,
    progress: Callable[[str], None] | None = None,
    jobs: int | None = None,
) -> Analysis:
    """Analyze a saved graph: transfers, their order under ``algorithm``, and the predicted gain.

    ``partition`` and ``credit`` may be ``"auto"``: ``Analysis.sizes``, as the pass sizes them
    for ``enable(partition="auto", credit="auto")`` on this link. ``push_credit``: the pushes'
    window in place of the credit (``predict``). ``executor_threads``: the tasks' inter-op
    threads, for a credit's acknowledgements to wait for with ``inline_transfers=False``
    (``predict``); a task's ops hold as many at a time as the trace measured them to (one without
    a trace). ``cross_steps``: the scheduled steps across TensorFlow's barrier (``predict``).
    ``progress(text)``: told what it does next, from reading the graph to bounding the step.
    ``jobs``: the processes that simulate (``predict``).

    The link: ``bandwidth_bps`` per host and ``overhead_s`` per message, 1 Gbit/s and 300 us when
    not given. With a ``trace``, each channel's link is the one fitted to it (TicTac §5), and a
    ``bandwidth_bps`` or ``overhead_s`` given replaces that part of every fit: what the traced
    step would take on another network. (Until the thirtieth session they were ignored beside a
    trace, and ``analyze --trace --bandwidth 10Gbit`` predicted the traced link's step.)

    With a ``trace`` that keeps its partition graphs, the prediction lays out the graph that ran
    (``tracing.replay.graph_that_ran``: what Grappler made of the saved graph), with the
    schedule carried over as the pass applies it (``ordering.carry_over``); the schedule itself
    is of the saved graph, which is what the pass is given. Par-32 training, traced on the
    emulated cluster (worker 0 alone; ``--algorithm tao --workers 4 --bandwidth 1Gbit``, the
    links' shaped rate): the saved graph's 33 pushes a worker are 2 after Grappler merged the
    identical gradients; a baseline step is predicted at 23.1 ms on the saved graph and 12.7 ms
    on the graph that ran, where the run that traced it measured 14.3 ms with the four workers
    sharing two cores (``benchmarks/results/analyze-graph-that-ran.md``).

    >>> a = analyze("train.pb", fetches=["train"], algorithm="tao")  # doctest: +SKIP
    >>> a.prediction.scheduled_s <= a.prediction.baseline_s  # doctest: +SKIP
    True
    """
    for name, v in (("partition", partition), ("credit", credit)):
        if v != "auto" and not is_count(v):
            raise TfschedError(f"{name} must be a number of parameters (>= 0) or 'auto', got {v!r}")
    if workers is not None and not is_count(workers, least=1):
        raise TfschedError(f"workers must be a positive number, got {workers!r}")
    if statistic != "min" and trace is None:
        raise TfschedError("statistic needs a trace (the traced steps it summarizes)")
    check_link_times(bandwidth_bps, overhead_s)  # what the simulator's sums stay finite with
    check_jobs(jobs)
    say = progress or (lambda text: None)
    say(f"reading {path}")
    graph = load_comm_graph(
        path, fetches=fetches, fmt=fmt, default_device=default_device, ps_jobs=ps_jobs, tag_set=tag_set
    )
    have = len(graph.worker_tasks)
    if workers is not None and workers != have and have != 1:
        raise TfschedError(
            f"{path}: --workers {workers} replicates a one-worker graph (between-graph replication); "
            f"this one has {have} workers (in-graph): leave --workers out"
        )
    link = LinkModel(
        bandwidth_bps=DEFAULT_BANDWIDTH_BPS if bandwidth_bps is None else bandwidth_bps,
        overhead_s=DEFAULT_OVERHEAD_S if overhead_s is None else overhead_s,
    )
    oracle = TimeOracle.from_cost_model(graph, link=link)
    match = ran = traced = None
    if trace is not None:
        # Measured times (TicTac §5); ops the trace did not time keep the cost model's estimate,
        # those that did not run none (tracing.match.oracle_for)
        from tfsched.tracing.match import match_trace, oracle_for
        from tfsched.tracing.trace import Trace

        say(f"reading {trace}")
        measured = Trace.load(trace)
        match = match_trace(graph, measured, trace)
        oracle = oracle_for(graph, measured, statistic, fallback=oracle, report=match)
        oracle.set_links(bandwidth_bps=bandwidth_bps, overhead_s=overhead_s)
        from tfsched.tracing.replay import graph_that_ran

        ran = graph_that_ran(measured, graph.fetches, source=trace)
        traced = Traced.of(measured, match)
    links = _links_line(bandwidth_bps, overhead_s, traced=trace is not None, unsplit=_unsplit(oracle))
    if "auto" in (partition, credit):
        sized = _sizes(graph, oracle)  # as Analysis.sizes
        partition = sized[0] if partition == "auto" else partition
        credit = sized[1] if credit == "auto" else credit
    analysis = analyze_graph(
        graph,
        oracle,
        algorithm=algorithm,
        workers=workers,
        trace_match=match,
        simulate_on=ran,
        links=links,
        partition=partition,
        credit=credit,
        host_credit=host_credit,
        host_order=host_order,
        ack_share=ack_share,
        credit_return=credit_return,
        ack_group=ack_group,
        push_credit=push_credit,
        executor_threads=executor_threads,
        cross_steps=cross_steps,
        progress=progress,
        jobs=jobs,
    )
    return replace(analysis, traced=traced)


def _unsplit(oracle: TimeOracle) -> bool:
    """Whether a channel's fit took the default overhead: its trace could not split it from the
    bandwidth (``oracle.fit.link_fits``)."""
    from tfsched.oracle.fit import DEFAULT

    return any(f.overhead_from == DEFAULT for f in getattr(oracle, "fits", {}).values())


def _links_line(
    bandwidth_bps: float | None, overhead_s: float | None, *, traced: bool, unsplit: bool = False
) -> str:
    """Where ``analyze``'s links come from, in words. ``unsplit``: some channel's trace could
    not tell its overhead from its bandwidth, and took the default overhead.

    >>> _links_line(None, None, traced=False)
    '1 Gbit/s a host, 300 us a message'
    >>> print(_links_line(1e10, None, traced=True))
    10 Gbit/s a host (given), the overheads fitted to the trace's channels
    >>> print(_links_line(1e9, None, traced=True, unsplit=True))  # doctest: +NORMALIZE_WHITESPACE
    1 Gbit/s a host (given), the overheads fitted to the trace's channels (300 us a message where
    a channel's messages were in flight together and do not tell it)
    """
    if overhead_s is None and traced and unsplit:
        default = (
            f"{DEFAULT_OVERHEAD_S * 1e6:g} us a message where a channel's messages were in flight "
            "together and do not tell it"
        )
        if bandwidth_bps is None:
            return f"fitted to the trace's channels (bandwidth and per-message overhead; {default})"
        return f"{_links_line(bandwidth_bps, None, traced=True)} ({default})"
    if traced and bandwidth_bps is None and overhead_s is None:
        return "fitted to the trace's channels (bandwidth and per-message overhead)"
    given = " (given)" if traced else ""
    if bandwidth_bps is None and traced:
        bw = "the bandwidths fitted to the trace's channels"
    else:
        bps = DEFAULT_BANDWIDTH_BPS if bandwidth_bps is None else bandwidth_bps
        bw = f"{bps / 1e9:g} Gbit/s a host{given}"
    if overhead_s is None and traced:
        oh = "the overheads fitted to the trace's channels"
    else:
        oh = f"{(DEFAULT_OVERHEAD_S if overhead_s is None else overhead_s) * 1e6:g} us a message{given}"
    return f"{bw}, {oh}"


def analyze_graph(
    graph: CommGraph,
    oracle: TimeOracle,
    *,
    algorithm: str = "tio",
    workers: int | None = None,
    trace_match=None,
    simulate_on: CommGraph | None = None,
    links: str = "",
    partition: int = 0,
    credit: int = 0,
    host_credit: bool = False,
    host_order: str = "steps",
    ack_share: int = DEFAULT_ACK_SHARE,
    credit_return: str = "ack",
    ack_group: int = 1,
    push_credit: int = 0,
    executor_threads: int | None = None,
    cross_steps: int = 0,
    progress: Callable[[str], None] | None = None,
    jobs: int | None = None,
) -> Analysis:
    """Order and predict for a graph already loaded, e.g. to compare algorithms on one graph.

    ``simulate_on``: the graph that ran (``tracing.replay.graph_that_ran``), to predict on with
    the schedule of ``graph`` carried over to it. ``progress(text)``: told what it does next.
    ``jobs``: the processes that simulate (``predict``)."""
    from tfsched.ordering import carry_over

    if progress:
        progress(f"ordering {len(graph.transfers):,} transfers ({algorithm.upper()})")
    schedule = order(graph, algorithm, oracle)
    return Analysis(
        graph=graph,
        schedule=schedule,
        oracle=oracle,
        simulated=simulate_on,
        links=links,
        prediction=predict(
            simulate_on or graph,
            schedule if simulate_on is None else carry_over(schedule, simulate_on),
            oracle,
            workers=workers,
            partition=partition,
            credit=credit,
            host_credit=host_credit,
            host_order=host_order,
            ack_share=ack_share,
            credit_return=credit_return,
            ack_group=ack_group,
            push_credit=push_credit,
            executor_threads=executor_threads,
            cross_steps=cross_steps,
            progress=progress,
            jobs=jobs,
        ),
        workers=workers or len(graph.worker_tasks),
        trace_match=trace_match,
    )
