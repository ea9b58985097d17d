"""Measured ordering efficiency and the simulator's prediction, beside each benchmark mode.

From the traced baseline steps of worker 0 alone (every task it touches; the other workers
wait): the oracle (op times and link fits, TicTac §5), TicTac's makespan bounds of the step for
that oracle (``sim.metrics``), and so the measured ordering efficiency E = (U - t) / (U - L),
t the median synchronized step of the mode (each step as long as its slowest worker).
The simulator, given the same oracle and each mode's schedule (with its partitioning and
credit), predicts each mode's step time (its slowest worker's); the prediction and its error
against the measured mean of the slowest workers go beside the measurement.

Every task of the benchmark runs on this one machine. Op times traced while four workers
compute at once are each worker's share of the cores, and a simulator that gives every worker
its own machine with those times counts the sharing twice (VGG16 training was predicted 24% to
84% slow, inference up to 166%). So the op times come from worker 0 alone, and the simulated
workers share the machine, which does as much work at once as the workers measured together
(``machine_slots``). Moving the bytes takes that machine's CPU too (gRPC's copies and the
kernel's TCP at both ends): the bench measures it per byte with worker 0 pulling every variable
alone, past what the same messages cost cut short (``run._comm_cpu_costs``), and the
simulated flows take their share of the machine from the ops. What the machine
does at once comes from the CPU the baseline spent per step where it was measured
(``machine_slots_from_cpu``; where each task had cores of its own, from the CPU the workers'
own processes spent, ``machine_slots_from_task_cpu``), else from the op times
(``machine_slots``).
"""

from __future__ import annotations

import functools
import os
import statistics
from collections.abc import Callable
from dataclasses import replace

from tfsched.bench.run import ModeResult, parse_mode
from tfsched.errors import TfschedError

# what a step's ops cost in the machine's share of the cores (``annotate``'s ``work``)
WORKS = ("simulated", "traced")


def check_work(work: str) -> None:
    """One error line for a ``work`` that is not one of ``WORKS``."""
    if work not in WORKS:
        raise TfschedError(f"work must be one of {', '.join(WORKS)}, got {work!r}")


def _op_seconds(trace, device_part: str = "") -> float:
    """Seconds of compute per step on the devices containing ``device_part`` (gates and receives
    wait, they do not compute)."""
    total = sum(
        o.duration_us
        for o in trace.ops
        if device_part in o.device and not o.op.startswith("Tfsched") and o.op not in ("_Recv", "_HostRecv")
    )
    return total / 1e6 / max(trace.steps, 1)


def machine_slots(alone, together, workers: int, *, host_cores: float = 0.0, cores: int = 1) -> float:
    """The work the machine does at once, in worker-0-alone ops: ``workers`` workers computing
    together each took ``together / alone`` times as long per op (their compute phases overlap
    in a synchronized step, all pulling and then computing at about the same time). At least
    what worker 0 alone ran at once.

    Where each task has ``host_cores`` of the machine's ``cores`` of its own (``bench.hostcpu``),
    worker 0 ran alone within them: a lone-worker op took at most ``host_cores``, so the machine
    does at least ``cores / host_cores`` of them at once, and ``host_slots`` gives each task at
    least the rate it had alone, as ``machine_slots_from_cpu`` gives it there (4.1 slots on
    VGG16, 6.7 on ResNet-50). The ratio of op times says nothing of that (every task runs at its
    cap alone or not: about ``workers``), and taken alone it ran each task at about half its
    lone speed on half-core hosts, by as much as one traced step's op times happened to say:
    ResNet-50 training at 10 Gbit/s there, where the bytes' measured CPU left none for the ops
    (``machine_slots_from_cpu`` None), was simulated at +94% of its measured step in one run
    (sixty-second session), and at -7% in another re-predicted so (2.27 slots; -28% with this,
    as with the CPU's 6.7 slots: -31%). What the simulator left out there was the CPU each
    task's gRPC threads spend on the bytes within its own share (charged since the sixty-third
    session, ``sim.engine._host_comm``); the halved speed stood in for it by chance.
    """
    from tfsched.oracle.fit import compute_parallelism

    least = cores / host_cores if host_cores else 0.0
    solo, shared = _op_seconds(alone, "/job:worker/"), _op_seconds(together, "/job:worker/")
    own = max((v for task, v in compute_parallelism(alone).items() if "/job:worker/" in task), default=1.0)
    if solo <= 0 or shared <= 0:
        return max(own, least)
    return max(own, workers * solo / shared, least)


def machine_slots_from_cpu(
    alone,
    *,
    cpu_s_per_step: float,
    comm_cpu_s_per_byte: float,
    workers: int,
    cores: int,
    work_s: float | None = None,
) -> float | None:
    """The work the machine does at once, in lone-worker ops, from the CPU it spent: the baseline
    used ``cpu_s_per_step`` CPU seconds per synchronized step (measured over its rounds), of
    which moving each worker's bytes took ``comm_cpu_s_per_byte`` each; the rest did ``workers``
    times the ops of worker 0's traced step alone (every task's). So a second of lone-worker op
    costs (cpu - comm) / work CPU seconds, and ``cores`` of them run at once. None without the
    measurements.

    Better than ``machine_slots`` where the cores are saturated: op times under contention miss
    the CPU spent between ops (the executors, gRPC's threads, the driver), which this counts.
    VGG16 inference at batch 496 (the row of BENCHMARKS.md until the fourteenth session): 1.00 slots from the CPU against
    1.44 from the op times; the credit modes' predictions are -15% to -19% of the measured step,
    and -31% to -39% re-predicted from the same run's traces with the op times' 1.44.

    Each tensor's own CPU (``ModeResult.comm_cpu_s_per_message``) stays in the ops' share: the
    simulator does not charge it to the machine, so taking it out leaves that CPU to nobody. (It
    charges it to each acknowledgement, ``annotate``: those are not in the baseline's CPU, which
    this divides, so nothing is counted twice.)
    Tried in the ninth session: ResNet-50 training came out -24% to -4% (-17% to -3% without it,
    in the row re-run the same day), Inception-v3 training -30% to -20% (-19% to -5%
    without it), and par32 training stayed +34% to +64%.

    ``work_s``: the op seconds of a step as the simulator counts them (its oracle's times), in
    place of the trace's mean, so that the simulated machine is busy for as long as the measured
    one was. The TensorFlow 2 bench passes it (``tf2.predict_calls``): its oracle takes each op's
    fastest traced time, 14% to 15% under the mean on VGG16 inference (0.939 slots against
    1.098, 0.967 against 1.113), and with the mean the modes at the cores' limit ran 11% to 15%
    faster than the CPU they spent allowed; -5% to +1% with this
    (``benchmarks/results/tf2-vgg16-inference*-repredicted.md``, two runs). The session bench
    does not (``annotate``'s ``work``: worse there on four of seven kept runs, alike on two).
    """
    work = _op_seconds(alone) if work_s is None else work_s
    spent = ops_cpu_s(
        alone, cpu_s_per_step=cpu_s_per_step, comm_cpu_s_per_byte=comm_cpu_s_per_byte, workers=workers
    )
    if cpu_s_per_step <= 0 or work <= 0 or spent <= 0:
        return None
    return cores * workers * work / spent


def ops_cpu_s(alone, *, cpu_s_per_step: float, comm_cpu_s_per_byte: float, workers: int) -> float:
    """The machine's CPU seconds a synchronized step left for the ops (``machine_slots_from_cpu``):
    ``cpu_s_per_step`` less what moving every worker's bytes took, at ``comm_cpu_s_per_byte`` over
    the bytes of worker 0's lone traced step (``alone``). At most 0 where the bytes' CPU, as
    reckoned, took all of it: then no share of the cores comes from the CPU.

    Kept in each run's results (``ops_cpu_s_per_step``) since the seventieth session, so that a
    prediction from the op times shows why: a toy model's bytes are most of its CPU, and the
    cost of a byte measured on a few of them (``run._comm_cpu_costs``) can come out above it
    (Seq-32 training at 0.2 Gbit/s, once in CI).
    """
    moved = sum(t.bytes for t in alone.transfers) / max(alone.steps, 1)
    return cpu_s_per_step - comm_cpu_s_per_byte * moved * workers


def machine_slots_from_task_cpu(
    graph,
    oracle,
    task_cpu_s_per_step: dict[str, float],
    *,
    comm_cpu_s_per_byte: float,
    shares: tuple[float, float],
    cores: int,
) -> float | None:
    """``machine_slots_from_cpu`` where each task has cores of its own, from the CPU the
    baseline's workers' own processes spent: worker 0's ops of ``graph`` as the simulator runs
    them (each op's fastest traced time, ``oracle``'s) took a worker's process the mean of the
    workers' CPU per synchronized step (``task_cpu_s_per_step``, "worker:K" -> seconds), less
    what its bytes cost it (its share of a byte's CPU, ``shares`` (sender, receiver), over the
    bytes it received and sent). So a CPU second does ``work / cpu`` seconds of the simulator's
    ops, and ``cores`` of them, the machine's, ``cores * work / cpu``; a task's own cores the
    same share of it (``host_slots``), and a byte's CPU is reckoned at the same rate
    (``annotate``). None without a worker measured, or where the bytes took all of it.

    Why (sixty-fifth session): under a CPU quota an op's traced time holds the periods its task
    waited out throttled, so the mean op seconds ``machine_slots_from_cpu`` divides the
    machine's CPU by were 2.3 and 2.7 times the fastest on ResNet-50 at 10 Gbit/s on half-core
    hosts, and each half core came out as 1.06 and 1.69 lone-worker ops at once: the quota
    slowed no simulated op, and the predictions were 13% to 34% fast. The fastest op seconds
    over the machine's CPU (``work="simulated"``) divide the op seconds of one worker by the CPU
    of every process, the PS's, the driver's and the kernel's among them, which is not what a
    worker's quota pays for (VGG16 training's floors rose over its measured steps,
    ``results/ops-work-on-hosts.md``). A worker's own process's CPU is.

    >>> from tfsched.graph.model import CommGraph, Op, Transfer
    >>> import networkx as nx
    >>> w, ps = "/job:worker/replica:0/task:0", "/job:ps/replica:0/task:0"
    >>> g = nx.DiGraph()
    >>> g.add_node("conv", op=Op("conv", "Conv2D", w + "/device:CPU:0", [], []))
    >>> g.add_node("apply", op=Op("apply", "Apply", ps + "/device:CPU:0", [], []))
    >>> pull = Transfer("v:0", ps + "/device:CPU:0", w + "/device:CPU:0", "pull", 1000, "v")
    >>> cg = CommGraph(g, [pull], [], [ps], [w])
    >>> class Oracle:
    ...     def compute(self, n):
    ...         return {"conv": 0.5, "apply": 0.1}[n]
    >>> cpu = {"worker:0": 1.2, "worker:1": 0.9, "ps:0": 0.4}  # the PS's is not a worker's
    >>> machine_slots_from_task_cpu(cg, Oracle(), cpu, comm_cpu_s_per_byte=1e-4, shares=(0.2, 0.5), cores=2)
    1.0
    >>> machine_slots_from_task_cpu(cg, Oracle(), {"ps:0": 0.4}, comm_cpu_s_per_byte=0, shares=(0.5, 0.5), cores=2)
    """
    measured = [s for task, s in task_cpu_s_per_step.items() if task.startswith("worker:")]
    wtasks = set(graph.worker_tasks)
    work = sum(oracle.compute(n) for n in graph.graph if graph.op(n).task in wtasks)
    send, recv = shares
    received = sum(t.bytes or 0 for t in graph.transfers if t.dst_task in wtasks)
    sent = sum(t.bytes or 0 for t in graph.transfers if t.src_task in wtasks)
    cpu = (
        statistics.fmean(measured) - comm_cpu_s_per_byte * (recv * received + send * sent)
        if measured
        else 0.0
    )
    if cpu <= 0 or work <= 0:
        return None
    return cores * work / cpu


def host_slots(host_cores: float, machine_slots: float, cores: int) -> float | None:
    """The most of the simulated machine one task's ops take at once where each task has
    ``host_cores`` of its own (``bench.hostcpu``): the machine's ``machine_slots`` are its
    ``cores``' worth of lone-worker ops. None where the tasks share the cores (0).

    >>> host_slots(0.5, 1.2, 2)
    0.3
    >>> host_slots(0, 1.2, 2) is None
    True
    """
    return host_cores * machine_slots / cores if host_cores else None


def machine_cpu_floor(
    cpu_s_per_step: float,
    cores: int,
    *,
    added_messages: float = 0.0,
    cpu_s_per_message: float = 0.0,
    copied_bytes: float = 0.0,
    cpu_s_per_copied_byte: float = 0.0,
    acknowledgements: float = 0.0,
    cpu_s_per_acknowledgement: float | None = None,
) -> float | None:
    """The least a step of any mode takes on the machine its tasks share: the CPU seconds a
    baseline step spent (``ModeResult.cpu_per_step``) over the machine's ``cores``, with the
    ``added_messages`` a step of the mode sends past the baseline's (``added_messages``: its
    slices and acknowledgements) at the measured ``cpu_s_per_message`` each (since the
    eighty-ninth session). None where no CPU was measured.

    An order moves the same bytes and runs the same ops, so it does not take that work away,
    and no step does more work than its cores. The simulator does not keep to it: it runs each op
    at its fastest traced time and reckons the machine's share of the cores from the mean
    (``annotate``'s ``work``), so at the cores' limit its machine does less than the measured
    one (MobileNet training, 1 PS x 4 workers, eighty-sixth session: 0.95 s of work a step in
    its floor, against 2.30 CPU seconds a baseline step on two cores, 1.15 s; three modes at
    96% to 99% busy predicted 16% to 21% fast). Taking the fastest times' work instead
    (``work="simulated"``) put other runs' modes up to 13 points slow, away from the cores'
    limit (``annotate``); the floor binds only at it. Over the 829 modes of the 171 stored runs
    on shared cores whose baseline measured its CPU, their stored predictions held to it: the
    mean error 8.2% became 7.1% (median 6.5% and 5.5%; 179 modes closer, 8 further, each by at
    most 10 points: VGG16 and ResNet-50 inference's scheduled modes, which spent up to 15% less
    CPU a step than their baseline); over 216 modes of 50 runs on hosts with cores of their own,
    6 closer, none further (``benchmarks/cpu_floor.py``, ``results/cpu-floor.md``).

    A mode that cuts tensors into slices or acknowledges them does more work than its baseline:
    a message more for each slice past a tensor's first and for each acknowledgement, which is
    what ``added_messages`` counts; and putting each cut tensor back together, a copy of its
    bytes at the receiver (``copied_bytes``, ``reassembled_bytes``), at the CPU the bench
    measured ``TfschedConcat`` to spend on a byte (``run.copy_cpu_s_per_byte``; since the
    ninetieth session, before which the copy was not counted). ResNet-50 training at 10
    Gbit/s on this Intel Xeon, its baseline at the cores' limit (eighty-ninth session, ``results/bench-resnet50-train-10g-s89.md``):
    ByteScheduler's fixed sizes (partition 1,000,000, credit 4,000,000) spent 0.14 CPU seconds
    a step more than the baseline's 1.64 and were predicted 12% fast; their 172 more messages a
    step (120 acknowledgements, 52 slices) at the 166 us the bench measured a message to cost
    are 0.03 of it, and they are now predicted 10% fast
    (``results/resnet50-train-10g-s89-repredicted.md``). Beside its twin with ``+sent`` in the
    next run (``results/bench-resnet50-train-10g-sent-s89.md``) an acknowledgement cost about 0.75
    ms, and putting the slices back together most of the rest. The same row on the AMD EPYC
    (ninetieth session, ``results/bench-resnet50-train-10g-s90.md``): the fixed sizes' copies,
    230.7 MB a step at the 1.09e-10 CPU seconds a byte measured, added 0.025 s to the 0.021 s of
    their messages, and they were predicted 4.6% fast, as every other mode (3.5% to 5.4%), where
    without the copies 6.6%.

    ``acknowledgements`` (of the ``added_messages``) at ``cpu_s_per_acknowledgement`` each in
    place of a message's (``run.ack_cpu_s``, since the ninety-first session; None: a message's).
    The bench measures a message among many sent at once; ``benchmarks/ack_cost.py`` measured an
    acknowledgement alone at 0.5 ms and 11 context switches on the AMD EPYC, where the bench
    measured a message at 0.12 to 0.13 ms (ninety-first session, ``results/ack-cost-s91.md``).
    Counted so on the two kept runs of the row above, the fixed sizes' prediction came within
    1% of the measured step (``results/resnet50-train-10g-s90-acks-s91-repredicted.md``,
    ``-sent-s90-acks-s91``).

    >>> machine_cpu_floor(2.30, 2)
    1.15
    >>> machine_cpu_floor(2.30, 2, added_messages=100, cpu_s_per_message=2e-4)
    1.16
    >>> machine_cpu_floor(2.30, 2, copied_bytes=200e6, cpu_s_per_copied_byte=1e-10)
    1.16
    >>> machine_cpu_floor(0.0, 2) is None
    True
    >>> machine_cpu_floor(2.30, 2, added_messages=100, cpu_s_per_message=2e-4, acknowledgements=50,
    ...                   cpu_s_per_acknowledgement=1e-3)  # 50 of the 100 at 1 ms each
    1.18
    """
    if cpu_s_per_step <= 0:
        return None
    per_ack = cpu_s_per_message if cpu_s_per_acknowledgement is None else cpu_s_per_acknowledgement
    return (
        cpu_s_per_step
        + added_messages * cpu_s_per_message
        + acknowledgements * max(0.0, per_ack - cpu_s_per_message)  # an acknowledgement is a message
        + copied_bytes * cpu_s_per_copied_byte
    ) / cores


def reassembled_bytes(sg, steps: int = 1) -> float:
    """The bytes a step of ``sg`` (its ``steps`` laid out) puts back together at the receivers:
    those of every transfer the mode's partition cut into more than one slice, which the pass's
    ``TfschedConcat`` copies into one tensor (cc/gate_ops.cc).

    >>> from types import SimpleNamespace as Spec
    >>> from tfsched.sim.model import COMPUTE, MESSAGE
    >>> big, small = object(), object()
    >>> sg = Spec(kind=[COMPUTE, MESSAGE, MESSAGE, MESSAGE], nbytes=[0, 4_000_000, 4_000_000, 400],
    ...           transfer=[None, big, big, small], worker=["w0"] * 4, step=[0] * 4)
    >>> reassembled_bytes(sg)
    8000000.0
    """
    from tfsched.sim.model import MESSAGE

    cut: dict[tuple, list[int]] = {}
    for i, k in enumerate(sg.kind):
        if k == MESSAGE:
            cut.setdefault((id(sg.transfer[i]), sg.worker[i], sg.step[i]), []).append(sg.nbytes[i])
    return sum(sum(sizes) for sizes in cut.values() if len(sizes) > 1) / steps


def added_messages(sg, plain, spec, steps: int = 1, policy: str = "counter") -> float:
    """The messages a step of ``spec``'s mode (``run.parse_mode``'s) sends past the baseline's:
    one for each slice past a tensor's first (``sg``, its ``steps`` laid out with the mode's
    partition, against ``plain``, one step of the graph uncut), and with the credit returned by
    acknowledgement one for each message the credit acknowledges (those of at least
    ``MIN_ACKED_BYTES`` and the credit's ``ack_share``-th part, as ``sim.engine`` and the pass
    have it).

    >>> from types import SimpleNamespace as Spec
    >>> from tfsched.sim.model import COMPUTE, MESSAGE
    >>> plain = Spec(kind=[COMPUTE, MESSAGE, MESSAGE], nbytes=[0, 8_000_000, 400])
    >>> cut = Spec(kind=[COMPUTE, MESSAGE, MESSAGE, MESSAGE], nbytes=[0, 4_000_000, 4_000_000, 400])
    >>> mode = Spec(credit=4_000_000, credit_return="ack", effective_ack_share=8)
    >>> added_messages(cut, plain, mode)  # one slice more, and its two acknowledged
    3.0
    >>> added_messages(cut, plain, Spec(credit=4_000_000, credit_return="sent", effective_ack_share=8))
    1.0
    >>> added_messages(plain, plain, Spec(credit=0, credit_return="ack", effective_ack_share=8))
    0.0
    """
    from tfsched.sim.model import MESSAGE

    def sizes(g) -> list[int]:
        return [b for k, b in zip(g.kind, g.nbytes, strict=True) if k == MESSAGE]

    mine = sizes(sg)
    return max(0.0, len(mine) / steps + acknowledgements(sg, spec, steps, policy) - len(sizes(plain)))


def acknowledgements(sg, spec, steps: int = 1, policy: str = "counter") -> float:
    """The acknowledgements a step of ``spec``'s mode sends (``added_messages``' part of them):
    with the credit returned by acknowledgement, one for each message of ``sg`` (its ``steps``
    laid out) the credit acknowledges, or with ``spec.ack_group`` for each group of them
    (``sim.engine.ack_groups``, the messages released under ``policy``).

    >>> from types import SimpleNamespace as Spec
    >>> from tfsched.sim.model import COMPUTE, MESSAGE
    >>> cut = Spec(kind=[COMPUTE, MESSAGE, MESSAGE, MESSAGE], nbytes=[0, 4_000_000, 4_000_000, 400])
    >>> acknowledgements(cut, Spec(credit=4_000_000, credit_return="ack", effective_ack_share=8))
    2.0
    >>> acknowledgements(cut, Spec(credit=4_000_000, credit_return="sent", effective_ack_share=8))
    0.0
    """
    from tfsched.analysis import MIN_ACKED_BYTES, PARAM_BYTES
    from tfsched.bench.run import acknowledges
    from tfsched.sim.model import MESSAGE

    if not acknowledges(spec):
        return 0.0
    least = max(MIN_ACKED_BYTES, spec.credit * PARAM_BYTES // spec.effective_ack_share)
    acked = [k == MESSAGE and b >= least for k, b in zip(sg.kind, sg.nbytes, strict=True)]
    if getattr(spec, "ack_group", 1) > 1:
        from tfsched.sim.engine import ack_groups, pushing_gates, release_policies

        pushing = pushing_gates(sg)
        windows = {True: (spec.push_credit or spec.credit) * PARAM_BYTES, False: spec.credit * PARAM_BYTES}
        how = release_policies(sg, policy, pushing)
        acked = ack_groups(sg, acked, how, spec.ack_group, lambda gate: windows[gate in pushing])[2]
    return sum(acked) / steps


def in_slots(cpu_s: float, machine_slots: float, cores: int) -> float:
    """``cpu_s`` of the machine's CPU as time of one simulated slot: a slot is the cores one lone
    worker's ops kept busy, the machine's ``cores`` over its ``machine_slots``.

    >>> in_slots(0.004, 1.5, 2)  # 4 ms of the machine's CPU where 2 cores are 1.5 slots
    0.003
    """
    return cpu_s * machine_slots / cores


def _by_rank(iterations: list[list[float]]) -> list[float]:
    """``sim.mean_by_rank`` of the synchronized steps that every worker finished.

    >>> [round(t, 3) for t in _by_rank([[0.3, 0.1], [0.2, 0.4], [0.5]])]
    [0.15, 0.35]
    """
    from tfsched.sim import mean_by_rank

    workers = max(map(len, iterations), default=0)
    return mean_by_rank([it for it in iterations if it and len(it) == workers])


# ``annotate``'s ``worker_weight`` that fits the links' share to the baseline's measured stagger
FIT = "fit"
FIT_LOW = 0.3  # the most unequal share the fit tries: worker 3's flows weigh 0.027 of worker 0's


def fit_worker_weight(
    runs_of: Callable[[float], list], measured: list[float], *, offset_s: float = 0.0, tol: float = 0.01
) -> float:
    """The ``worker_weight`` (``sim.simulate``'s) at which the simulated workers stagger as the
    measured ones did: their first to finish over their last (``finish_by_rank``, each plus
    ``offset_s``) against the same of ``measured`` (the baseline's, by rank), found by bisection
    between ``FIT_LOW`` and 1 to within ``tol``. ``runs_of(w)``: the baseline's seeded runs at
    weight ``w``. 1 where the simulated workers stagger as much at an even share; ``FIT_LOW``
    where even that share staggers them less.

    The simulated PS link is shared max-min fairly, so the simulated workers' pulls end together;
    the measured ones do not (TCP's flows leaving an idle link ramp up unevenly,
    ``benchmarks/link_sharing.py``, and the cores serve the tasks unevenly too), and a worker
    served sooner computes while the others still pull. Their stagger is in every run's
    measurement (the baseline's straggler effect); this carries it to the other modes.
    """
    from tfsched.sim import finish_by_rank

    if len(measured) < 2 or measured[-1] <= 0:
        return 1.0
    target = measured[0] / measured[-1]

    def first_over_last(w: float) -> float:
        ranks = finish_by_rank(runs_of(w))
        return (ranks[0] + offset_s) / (ranks[-1] + offset_s) if len(ranks) > 1 and ranks[-1] > 0 else 1.0

    if first_over_last(1.0) <= target:
        return 1.0
    if first_over_last(FIT_LOW) >= target:
        return FIT_LOW
    low, high = FIT_LOW, 1.0
    while high - low > tol:
        mid = (low + high) / 2
        if first_over_last(mid) > target:
            high = mid
        else:
            low = mid
    return (low + high) / 2


def scheduled_runs(
    sg,
    schedule,
    spec,
    *,
    ack_slot_s: float = 0.0,
    latency_s: float = 0.0,
    overlap: bool = True,
    worker_weight: float = 1.0,
    executor_threads: int | None = None,
    stream_window_bytes: int | None = None,
    record: bool = False,
    race: bool = True,
    handoff_s: float = 0.0,
    policy: str | None = None,
) -> list:
    """``sim.seeded_runs`` of ``sg`` as the pass enforces ``schedule`` with the sizes of ``spec``
    (``run.parse_mode``'s, in parameters): the pulls a gate releases together race to the wire,
    all but those a credit window acknowledges (``sim.engine``'s ``race``; ``race=False``: they
    go in the order released, as TensorFlow 2's calls send them, ``bench.tf2.predict_calls``), a
    mean over seeds as for the baseline's ties.
    ``latency_s``: what each arrival and acknowledgement is delayed; ``overlap``,
    ``worker_weight``, ``executor_threads``, ``stream_window_bytes``, ``handoff_s`` and
    ``record``: ``sim.simulate``'s; ``policy``: another than the schedule's (``sim.engine``'s
    ``ready``, a what-if)."""
    from tfsched.analysis import MIN_ACKED_BYTES, PARAM_BYTES
    from tfsched.sim import POLICY_OF_MODE, seeded_runs

    return seeded_runs(
        sg,
        policy or POLICY_OF_MODE[schedule.mode],
        race=race,
        credit_bytes=spec.credit * PARAM_BYTES or None,
        min_acked_bytes=MIN_ACKED_BYTES,
        host_credit=spec.host_credit,
        host_order=spec.host_order,
        ack_share=spec.effective_ack_share,
        credit_return=spec.credit_return,
        ack_group=spec.ack_group,
        push_credit_bytes=spec.push_credit * PARAM_BYTES or None,
        ack_slot_s=ack_slot_s,
        latency_s=latency_s,
        overlap=overlap,
        worker_weight=worker_weight,
        executor_threads=executor_threads,
        stream_window_bytes=stream_window_bytes,
        record=record,
        handoff_s=handoff_s,
    )


def cross_barrier_what_if(runs_of, steps: int, *, offset_s: float = 0.0, ready: bool = False) -> dict:
    """A mode's steady step behind TensorFlow's global barrier and across it (ByteScheduler's
    crossing, ``sim.build_sim_graph``'s ``cross_barrier``). ``runs_of(n, cross, policy=None)``:
    the seeded runs of ``n`` steps laid out either way, under the mode's policy or ``policy``. A
    steady step is the time ``steps`` steps take past the first one, over ``steps - 1``: the
    first has no step before it to overlap. ``offset_s`` (the driver's call) is added to each,
    as to every predicted step. ``ready``: across it also with every channel a queue of the
    messages ready (``sim.engine``'s ``ready`` policy, ByteScheduler's Core), as
    ``crossing_ready_s``: the pass's counters hold every pull behind the first layer's.

    >>> from types import SimpleNamespace as Run
    >>> made = {(1, False, None): 10.0, (4, False, None): 40.0, (4, True, None): 37.0, (4, True, "ready"): 31.0}
    >>> cross_barrier_what_if(lambda n, cross, policy=None: [Run(makespan=made[(n, cross, policy)])], 4, ready=True)
    {'steps': 4, 'first_s': 10.0, 'barrier_s': 10.0, 'crossing_s': 9.0, 'crossing_ready_s': 7.0}
    """
    if steps < 2:
        raise TfschedError(f"crossing the barrier needs at least 2 steps to overlap, got {steps}")

    def makespan(n: int, cross: bool, policy: str | None = None) -> float:
        return statistics.fmean(r.makespan for r in runs_of(n, cross, policy))

    first = makespan(1, False)

    def steady(cross: bool, policy: str | None = None) -> float:
        return (makespan(steps, cross, policy) - first) / (steps - 1) + offset_s

    out = {
        "steps": steps,
        "first_s": first + offset_s,
        "barrier_s": steady(False),
        "crossing_s": steady(True),
    }
    if ready:
        out["crossing_ready_s"] = steady(True, "ready")
    return out


def annotate(
    results: dict[str, ModeResult],
    *,
    graph_path: str,
    fetches: list[str],
    workers: int,
    bandwidth_bps: float | None,
    latency_s: float = 0.0,
    overhead_s: float | None = None,
    work: str = "traced",
    overlap: bool = True,
    worker_weight: float | str = FIT,
    inter_op_threads: int | None = None,
    executor_waits: bool = True,
    stream_window_bytes: int | None = None,
    op_statistic: str = "min",
    host_cores: float = 0.0,
    host_bytes: bool = True,
    even_byte_shares: bool = False,
    task_cpu: bool = True,
    handoff_s: float = 0.0,
    cross_barrier_steps: int = 0,
    gate_ops: bool = True,
    cpu_floor: bool = True,
    copies: bool = True,
    copy_cpu_s_per_byte: float | None = None,
    ack_cpu_s: float | None = None,
) -> None:
    """Fill ``ModeResult.measured`` of every mode (needs the baseline's trace).

    ``host_cores``: the cores of its own each task had (``bench.hostcpu``); the simulated tasks
    then share the machine as before, but none takes more than its own cores' worth of it
    (``host_slots``, ``SimGraph.host_slots``), and each end of a flow spends its share of the
    bytes' CPU there (``sim.engine._host_comm``): the shares the baseline measured
    (``ModeResult.comm_cpu_shares``), or half each where it measured none or with
    ``even_byte_shares`` (as until the sixty-fourth session); ``host_bytes=False``: on the
    machine only, as until the sixty-third session (what-ifs for ``benchmarks/repredict.py``).
    There what an op costs comes from the CPU the workers' own processes spent
    (``machine_slots_from_task_cpu``, ``ModeResult.task_cpu_s``) where the baseline measured it;
    ``task_cpu=False``: from the machine's, as until the sixty-fifth session (a what-if).
    ``handoff_s``: ``sim.simulate``'s, for the modes whose credit comes back when sent (a what-if
    for ``benchmarks/handoff.py``; the bench leaves it at 0).
    ``cross_barrier_steps``: at least 2, each mode's ``measured["cross_barrier"]`` too
    (``cross_barrier_what_if`` over that many steps; a what-if for
    ``benchmarks/cross_barrier.py``, which the bench does not run).
    ``gate_ops``: a mode across the barrier is charged its gates' ops on the PS, each at what
    ``TimeOracle.gate_op_s`` says (the baseline's trace ran none: 5 µs); False: not, as until
    the eighty-third session (a what-if for ``benchmarks/repredict.py``). The what-if of
    ``cross_barrier_steps`` (ByteScheduler's crossing, in TensorFlow's engine) is never charged.
    ``cpu_floor``: no mode is predicted faster than the CPU a baseline step spent, with the
    messages the mode adds to it (``added_messages``), over the machine's cores
    (``cpu_floor_s``; ``simulated_s`` is the simulator's step); False: the
    simulator's step, as until the eighty-sixth session (a what-if for ``benchmarks/repredict.py``).
    ``copies``: a mode's floor counts the copies that put its cut tensors back together
    (``reassembled_bytes``, at the baseline's ``ModeResult.copy_cpu_s_per_byte``), and since the
    ninety-first session its simulated step runs each as an op of the receiver that the tensor's
    consumers wait for (``build_sim_graph``'s ``copy_s_per_byte``); False: neither, as until the
    ninetieth session (a what-if for ``benchmarks/repredict.py``). ``copy_cpu_s_per_byte``: the
    copy's cost in place of the run's measurement (a what-if for a run that measured none).
    ``ack_cpu_s``: an acknowledgement's CPU in the floor in place of the baseline's
    ``ModeResult.ack_cpu_s`` (``machine_cpu_floor``'s ``cpu_s_per_acknowledgement``; a what-if for
    a run of before the ninety-first session, which measured none and took it as a message).

    ``latency_s``: what each host's link adds (``--latency``). A tensor between two tasks
    crosses two links, so the simulator delays each arrival (and each acknowledgement) by twice
    it; the driver's call to a worker and its answer cross the worker's link both ways, which
    the measured step includes and the simulated one does not, so that is added too. Until the
    twenty-sixth session the simulator was given no latency (only the per-message overhead it
    fits to the traced step): -3% to -5% on VGG16 at 20 ms per link.

    ``overhead_s``: every link's per-message overhead instead of the trace's fit (a what-if for
    ``benchmarks/channel_overhead.py``; the bench leaves it to the fit).

    ``work``: what a step's ops cost in the machine's share of the cores
    (``machine_slots_from_cpu``): ``traced``, the lone trace's mean op seconds, or ``simulated``,
    the op seconds the simulator runs (each op's fastest traced time, summed over the graph it
    lays out), as the TensorFlow 2 bench takes them (a what-if for ``benchmarks/repredict.py``).
    Tried in the forty-fourth session on seven kept traced runs: ``simulated`` brought VGG16
    inference's modes at the cores' limit from -8% to -11% to -4% to -6%, and the other runs'
    modes as far or up to 13 points slower (ResNet-50 inference -0% to +18% became +11% to +26%,
    Par-32 training +16% to +28% became +26% to +41%; the mean error over the 33 modes 13.5%
    against 10.0%), so the session bench keeps the mean. Tried again in the sixty-fourth on
    nine kept runs on hosts with cores of their own, where an op's traced time also holds the
    periods its task waited out under the CPU quota (ResNet-50's lone worker: mean op seconds
    2.3 and 2.7 times the fastest, so each task's half core came out as 1.06 and 1.69 lone-worker
    ops at once): the mean error over 41 modes went from 12.5% to 10.8% (ResNet-50 at 10 Gbit/s
    -13% to -34% became -12% to +30%), but the three VGG16 training runs' floors rose 3% to 8%
    and each one's fastest mode then measured under its floor, so the bench keeps the mean there
    too (``benchmarks/results/ops-work-on-hosts.md``). Since the sixty-fifth session a run on
    such hosts that measured its workers' own CPU is reckoned from that and the fastest times
    (``task_cpu``), whatever ``work`` says.

    ``overlap``: ``sim.simulate``'s (False: each message's overhead holds its channel, as until
    the forty-fourth session). ``worker_weight``: how the links are shared between the workers'
    flows (``sim.simulate``'s); ``FIT``, the default since the forty-fifth session: the weight at
    which the simulated baseline's workers stagger as the measured ones did
    (``fit_worker_weight``), for every mode (each mode's ``measured["worker_weight"]``); 1 shares
    them evenly, as until then. Re-predicted on six traced runs of that session
    (``benchmarks/repredict.py``), the mean error over their 34 modes went from 7.6% to 5.7%
    (the largest 18% to 14%; a set weight of 0.7, 8.8% and 28%): Seq-32 training's +10% to +13%
    became -5% to -8%, Par-32's +0% to +15% became -5% to +5%, Inception-v3 inference's baseline
    +18% became +8%; VGG16's fit is 0.98 in inference and 1.00 in training (their simulated
    workers already stagger as the measured ones did), and its inference baseline stays +14%.

    ``inter_op_threads``: each task's (the bench's ``--inter-op-threads``; None: TensorFlow's
    default, one per core), for the acknowledgements' ops of a ``+pool`` mode to wait for on the
    one machine (``sim.simulate``'s ``executor_threads``; the other modes' inline transfers wait
    for none); ``executor_waits=False``: none waits, as until the fifty-second session (a what-if
    for ``benchmarks/repredict.py``). ``stream_window_bytes``: ``sim.simulate``'s, for every mode
    (a what-if for ``benchmarks/repredict.py``; None, the bench's: each message whole).

    ``op_statistic``: which of each op's times in the lone trace the simulated op takes
    (``oracle.fit.statistic_fn``'s names): ``min``, TicTac's and the bench's, or ``mean``, the
    time the machine's share of the cores is reckoned from (``work="traced"``), so that a
    saturated simulated machine does the work the measured one did (a what-if for
    ``benchmarks/repredict.py``; the links keep their fit to the fastest). Tried in the
    fifty-eighth session on eight traced runs (26 modes): VGG16 inference's modes at the cores'
    limit came closer (-9% and -6% became -5% and -2%), as with ``work="simulated"``, but Par-32
    training's went further off (+4% to +12% became +14% to +23%); the mean error 8.5% against 6.7%
    (``work="simulated"`` 9.6%), so the bench keeps the fastest."""
    check_work(work)
    from tfsched.oracle.fit import op_times, statistic_fn

    statistic_fn(op_statistic)  # an unknown one: its error line, before any work
    if worker_weight != FIT and not (isinstance(worker_weight, float | int) and 0 < worker_weight <= 1):
        raise TfschedError(f"worker_weight must be in (0, 1] or {FIT!r}, got {worker_weight!r}")
    from tfsched.analysis import PARAM_BYTES
    from tfsched.graph import load_comm_graph
    from tfsched.oracle.oracle import LinkModel, TimeOracle
    from tfsched.ordering import carry_over, order
    from tfsched.sim import POLICY_OF_MODE, build_sim_graph, finish_by_rank, seeded_runs, step_bounds
    from tfsched.tracing.match import oracle_for
    from tfsched.tracing.replay import graph_that_ran

    base = results.get("baseline")
    if base is None or base.trace is None:
        return
    traced = base.solo_trace or base.trace
    saved = load_comm_graph(graph_path, fetches=fetches)  # what the pass's schedules were made from
    graph = graph_that_ran(traced, fetches, source="the baseline's traced steps") or saved
    # No cost-model fallback: the graph that ran has the trace's op names; in the saved graph
    # (a trace without partition graphs) an op the trace does not time was fused or folded by
    # Grappler, and its work is in the op that replaced it (VGG16: each Conv2D's time is in the
    # fused op named after its Relu; a cost-model time for it counted it twice).
    oracle = TimeOracle.from_trace(traced, "min")
    if not gate_ops:
        oracle.gate_op_s = 0.0
    if op_statistic != "min":
        oracle.op_times.update(op_times(traced.complete_steps(), op_statistic))
    ack_slot_s = 0.0
    executor_threads = None
    slots_from = None  # what the machine's slots were reckoned from
    ops_cpu = None  # the machine's CPU a step left for the ops (ops_cpu_s)
    if base.solo_trace is not None:
        cores = os.cpu_count() or 1
        if executor_waits:
            # TensorFlow's default: a thread per core (inter_op_parallelism_threads 0)
            executor_threads = inter_op_threads or cores
        if base.comm_cpu_shares and not even_byte_shares:
            oracle.host_byte_shares = tuple(base.comm_cpu_shares)
        from_tasks = None
        if host_cores and task_cpu and base.task_cpu_s:
            from_tasks = machine_slots_from_task_cpu(
                graph,
                oracle,
                base.task_cpu_per_step,
                comm_cpu_s_per_byte=base.comm_cpu_s_per_byte,
                shares=oracle.host_byte_shares,
                cores=cores,
            )
        from_cpu = from_tasks or machine_slots_from_cpu(
            base.solo_trace,
            cpu_s_per_step=base.cpu_per_step,
            comm_cpu_s_per_byte=base.comm_cpu_s_per_byte,
            workers=workers,
            cores=cores,
            work_s=sum(oracle.compute(n) for n in graph.graph) if work == "simulated" else None,
        )
        slots_from = "the workers' CPU" if from_tasks else "the machine's CPU" if from_cpu else "the op times"
        ops_cpu = ops_cpu_s(
            base.solo_trace,
            cpu_s_per_step=base.cpu_per_step,
            comm_cpu_s_per_byte=base.comm_cpu_s_per_byte,
            workers=workers,
        )
        oracle.machine_slots = from_cpu or machine_slots(
            base.solo_trace, base.trace, workers, host_cores=host_cores, cores=cores
        )
        oracle.host_slots = host_slots(host_cores, oracle.machine_slots, cores)
        oracle.host_bytes = host_bytes
        oracle.comm_slot_s_per_byte = in_slots(base.comm_cpu_s_per_byte, oracle.machine_slots, cores)
        # an acknowledgement is one more message with almost no bytes (TfschedAck, its RPC,
        # TfschedCredit): the CPU the bench measured a message to cost, on the same machine
        ack_slot_s = in_slots(base.comm_cpu_s_per_message, oracle.machine_slots, cores)
    if bandwidth_bps:
        # The hosts' links are shaped to a known rate. A trace of one worker sees only its share
        # of the PS's link (the other workers pull at the same time); the simulator shares the
        # link itself, so it gets the link's rate, with the per-message overheads of the fit.
        oracle.set_links(bandwidth_bps=bandwidth_bps)  # every NIC is shaped to that rate
    oracle.set_links(overhead_s=overhead_s)  # None: the fit's
    cost_model = TimeOracle.from_cost_model(saved, link=LinkModel())  # what `analyze` starts from
    plain = build_sim_graph(graph, oracle, None, workers=workers)
    bounds = step_bounds(plain, overlap=overlap)
    driver_s = 2 * latency_s  # the driver's call there and back, across the worker's link

    def unordered_runs(sg, weight: float) -> list:
        """The baseline's: TensorFlow's transfers, no gate, ties at random."""
        return seeded_runs(
            sg,
            "random",
            latency_s=2 * latency_s,
            overlap=overlap,
            worker_weight=weight,
            stream_window_bytes=stream_window_bytes,
        )

    @functools.cache  # the fit's runs, kept: the weight it ends on is often one it tried
    def baseline_runs(weight: float) -> list:
        return unordered_runs(plain, weight)

    # what a byte of the copies that put a cut tensor back together costs (0: none)
    copy_rate = (
        (base.copy_cpu_s_per_byte if copy_cpu_s_per_byte is None else copy_cpu_s_per_byte) if copies else 0.0
    )
    if worker_weight == FIT:
        worker_weight = fit_worker_weight(baseline_runs, _by_rank(base.iterations), offset_s=driver_s)
    for mode, res in results.items():
        # the sizes the run used (ModeResult.knobs), else as the bench sizes them for this graph
        spec = parse_mode(mode, bandwidth_bps, saved.busiest_channel_params)
        spec = replace(
            spec,
            partition=res.knobs.get("partition", spec.partition),
            credit=res.knobs.get("credit", spec.credit),
            # a results file of before the fifty-fourth session ran TensorFlow's _Send/_Recv
            inline_transfers=res.knobs.get("inline_transfers", not res.knobs) and spec.inline_transfers,
        )
        schedule = None
        if spec.algorithm is not None:
            # the order the pass was given, as mode_configs made it: from the graph, and a timing-aware
            # one from the trace of worker 0 alone (the cost model for the ops it did not time)
            ordering_oracle = (
                oracle_for(saved, res.order_trace, fallback=cost_model) if res.order_trace else cost_model
            )
            schedule = order(saved, spec.algorithm, ordering_oracle)
            if graph is not saved:
                schedule = carry_over(schedule, graph)  # as the pass applied it to the graph that ran

        def layout(steps: int = 1, cross: bool = False, schedule=schedule, spec=spec, oracle=oracle):
            return build_sim_graph(
                graph,
                oracle,
                schedule,
                workers=workers,
                partition_bytes=spec.partition * PARAM_BYTES or None,
                steps=steps,
                cross_barrier=cross,
                synchronized=True,  # the bench's steps start together
                # the receivers' copies of the cut tensors, in the step (since the ninety-first)
                copy_s_per_byte=copy_rate,
            )

        def runs_of(sg, policy=None, schedule=schedule, spec=spec) -> list:
            if schedule is None:
                return unordered_runs(sg, worker_weight)
            return scheduled_runs(
                sg,
                schedule,
                spec,
                ack_slot_s=ack_slot_s,
                latency_s=2 * latency_s,
                overlap=overlap,
                worker_weight=worker_weight,
                # inline transfers (the default) wait for no thread (cc/transfers.cc)
                executor_threads=None if spec.inline_transfers else executor_threads,
                stream_window_bytes=stream_window_bytes,
                handoff_s=handoff_s,
                policy=policy,
            )

        per_step = 1  # how many steps a run lays out, the prediction their mean
        if spec.cross:
            # a round's steps as they ran: the first without a step before it to overlap, the
            # last timed to the end of its updates (bench.run's CrossingRunner)
            per_step = max(1, len(res.iterations) // max(1, len(res.rounds)))
            sg = layout(per_step, cross=True)
            runs = runs_of(sg, "ready" if spec.ready else None)
        elif schedule is None:
            sg = plain
            runs = baseline_runs(worker_weight)
        else:
            sg = layout()
            runs = runs_of(sg)
        # the CPU a baseline step spent, and this mode's own messages past its (slices and
        # acknowledgements), over the machine's cores: no step of the mode is shorter
        # (as its gates release them: an acknowledgement groups slices only where they keep order)
        released_as = (
            "ready"
            if spec.cross and spec.ready
            else POLICY_OF_MODE.get(getattr(schedule, "mode", ""), "fifo")
        )
        added = added_messages(sg, plain, spec, per_step, released_as) if schedule is not None else 0.0
        acks = acknowledgements(sg, spec, per_step, released_as) if schedule is not None else 0.0  # of them
        # and the copies that put its cut tensors back together (since the ninetieth session)
        copied = reassembled_bytes(sg, per_step) if schedule is not None and copies else 0.0
        cpu_floor_s = (
            machine_cpu_floor(
                base.cpu_per_step,
                os.cpu_count() or 1,
                added_messages=added,
                cpu_s_per_message=base.comm_cpu_s_per_message,
                copied_bytes=copied,
                cpu_s_per_copied_byte=copy_rate,
                acknowledgements=acks,
                cpu_s_per_acknowledgement=ack_cpu_s if ack_cpu_s is not None else base.ack_cpu_s or None,
            )
            if cpu_floor
            else None
        )
        # The simulator's step is the slowest worker's; so is a synchronous iteration. The mean
        # over every worker's steps was the measure until the seventh session: it put the
        # early-served workers of one window per task (whose steps end first) into the
        # measurement and made that mode's prediction look 33% slow on VGG16 inference.
        simulated = (
            statistics.fmean(r.makespan if spec.cross else r.step_time for r in runs) / per_step + driver_s
        )
        predicted = max(simulated, cpu_floor_s or 0.0)
        its = res.iteration_times or res.step_times
        measured = res.training_step_s  # across the barrier, the rounds' wall time over their steps
        res.measured = {
            "efficiency_E": (
                bounds.efficiency(measured if spec.cross else statistics.median(its)) if its else None
            ),
            "lower_bound_s": bounds.lower,
            "upper_bound_s": bounds.upper,
            # no order is faster than this (sim.metrics.step_bounds' floor, since the
            # sixty-first session), with the driver's call as every predicted step has it
            "floor_s": bounds.floor + driver_s,
            # what sets it (sim.metrics.describe_floor), the driver's call not counted
            "floor_by": bounds.floor_text or None,
            "predicted_s": predicted,
            "prediction_error": (predicted - measured) / measured if measured else None,
            # the simulator's step, and the least the baseline's CPU allows (``cpu_floor_s``): the
            # prediction is the longer
            "simulated_s": simulated,
            "cpu_floor_s": cpu_floor_s,
            # the messages a step of this mode sends past the baseline's, in its floor
            "added_messages": added,
            # the acknowledgements of them, at what the bench measured one to cost where it did
            "acknowledgements": acks,
            # and the bytes of the tensors it cut that a step puts back together
            "reassembled_bytes": copied,
            # the workers' steps, the first to finish first: measured (the mean by rank over the
            # synchronized steps) and simulated; where a mode staggers the workers, this shows
            # whether the simulator does it alike
            "finish_by_rank_s": _by_rank(res.iterations),
            "predicted_finish_by_rank_s": [t + driver_s for t in finish_by_rank(runs)],
            "worker_weight": worker_weight,  # how the simulated links were shared (``sim.simulate``)
            # the machine's work at once in lone-worker ops, each task's most of it where it had
            # cores of its own, and what its ops' cost was reckoned from (``work``)
            "machine_slots": oracle.machine_slots,
            "host_slots": oracle.host_slots,
            "ops_work": work,
            "slots_from": slots_from,
            # the machine's CPU a step left for the ops once the bytes had theirs: at most 0, the
            # bytes took all of it as reckoned, and the machine's slots came from the op times
            "ops_cpu_s_per_step": ops_cpu,
            # what the simulator laid out: the graph the baseline ran, else (an old trace) the saved one
            "simulated_graph": {
                "from": "saved" if graph is saved else "ran",
                "transfers": len(graph.transfers),
                "saved_transfers": len(saved.transfers),
            },
        }
        if cross_barrier_steps:
            res.measured["cross_barrier"] = cross_barrier_what_if(
                # ByteScheduler's crossing, in TensorFlow's engine: no gates of tfsched's to charge
                lambda steps, cross, policy=None, layout=layout, runs_of=runs_of: runs_of(
                    layout(steps, cross, oracle=replace(oracle, gate_op_s=0.0)), policy
                ),
                cross_barrier_steps,
                offset_s=driver_s,
                ready=schedule is not None,
            )
