"""Training side by side: vanilla TensorFlow and tfsched modes, interleaved on one cluster.

Every worker runs its own session (between-graph replication) in a thread of this process;
modes alternate in rounds (baseline, tio, baseline, tio, ...) after a warm-up, so that drift
(caches, other load) hits every mode alike.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tfsched.bench.local import dead_tasks_named
from tfsched.bench.netns import DEFAULT_QUEUE_S, check_hosts, check_shaping
from tfsched.bench.stagger import traced_spreads
from tfsched.deadlines import close_sessions, deadline_ms, session_config, step_deadline_s
from tfsched.errors import TfschedError, cause_line
from tfsched.sim.engine import DEFAULT_ACK_SHARE
from tfsched.tracing.collector import trace_of
from tfsched.tracing.rpclog import RpcLogging, task_addresses
from tfsched.units import check_link_bandwidth

MODES = ("baseline", "tio", "tao", "layer")
ALGORITHMS = ("tio", "tao", "layer")
CROSS = "cross"  # vanilla TensorFlow's steps across its barrier (ModeSpec.cross)
TIMED = ("tao",)  # the algorithms that order from measured op times (mode_configs)
ORDERED_FROM_TRACE = "trace of worker 0 alone"


@dataclass(frozen=True)
class ModeSpec:
    """A benchmark mode: ``baseline``, or an algorithm with optional partitioning and credit.

    Grammar: ``ALG[+pc][+pN][+cN]`` with ALG one of tio, tao, layer; ``+pc`` turns on
    ByteScheduler's defaults (partition 1,000,000, credit 4,000,000 parameters) kept to the model
    and the link (``tfsched.enforce.link_sizes``: at most a quarter of ``channel_params``, the
    most parameters a channel carries in a step; 10,000,000 and 40,000,000 at 10 Gbit/s;
    ``bandwidth_bps`` is the link, None for loopback), ``+pN`` and
    ``+cN`` set either one (``tao+p500000+c2000000``); ``+host`` makes the credit one window per
    sending task, workers served in turn (``tao+pc+host``); ``+lockstep`` makes it one window per
    sending task that serves every worker's next tensor by priority, the workers in lockstep
    (``tao+pc+lockstep``: ``enable(host_credit=True, host_order="priority")``); ``+aN``
    acknowledges transfers of at least credit/N parameters (``tao+pc+a32``; default
    ``DEFAULT_ACK_SHARE``, 8); ``+sent``
    returns the credit when the sender has sent a tensor, with no acknowledgement
    (``enable(credit_return="sent")``; ``tio+c1+sent``: one tensor in flight a channel, TicTac's
    order held to the wire); ``+wN`` gives the workers' pushes a window of N
    parameters, the PS's pulls keeping the mode's credit (``enable(push_credit=N)``:
    ``tao+pc+lockstep+w1000000``; until the fifty-third session the bench set it live,
    ``tfsched.set_credit`` on the worker tasks while the mode ran, the same window); ``+pool``
    leaves the gates' ``_Send`` and the acknowledgements' credit to TensorFlow's ops, which wait
    for an inter-op thread (``enable(inline_transfers=False)``, how every mode ran until the
    fifty-fourth session); ``+gN`` gives up to N consecutive acknowledged slices on a channel
    (of a tensor, or of several) one acknowledgement (``enable(ack_group=N)``:
    ``tao+p1000000+c4000000+g2``, ByteScheduler's sizes with their slices acknowledged in
    pairs). ``tfsched bench --tuned FILE`` turns the mode ``tuned`` into the best setting of a
    ``tfsched tune`` file in this grammar (``tuned_mode``).

    ``cross``: vanilla TensorFlow's transfers with the steps across TensorFlow's barrier
    (``tfsched.enforce.crossing``: each step's pushes and updates run on while the next step's
    pulls cross, each pull once its variable is updated); ``+cross`` the same under the pass's
    gates (``layer+pc+ready+cross``), ordered by a schedule made from the graph behind the
    barrier (the pass names a transfer by the variable it pulls or updates, so it matches the
    two runs of a step; TIO too, which the pass would otherwise work out on each run's graph,
    where the pushes lead to no forward pass to rank them by). ``+ready`` serves every
    channel's gates, pulls too, highest priority first among the tensors arrived
    (``enable(ready=True)``): across the barrier a counter would hold every pull behind the
    first layer's, updated last (``bench.predict``'s crossing what-if).
    """

    name: str
    algorithm: str | None  # None: vanilla TensorFlow
    partition: int = 0
    credit: int = 0
    host_credit: bool = False
    host_order: str = "steps"  # "priority" (+lockstep): the window's workers in lockstep
    ack_share: int | None = None  # None: the pass's default
    credit_return: str = "ack"  # "sent": no acknowledgements (enable(credit_return=...))
    push_credit: int = 0  # +wN: the pushes' window (enable(push_credit=N)), 0: the credit
    inline_transfers: bool = True  # False (+pool): enable(inline_transfers=False)
    cross: bool = False  # the steps across TensorFlow's barrier (the mode "cross", +cross)
    ready: bool = False  # +ready: every gate served by priority among the arrived (enable(ready=True))
    ack_group: int = 1  # +gN: slices an acknowledgement returns at most (enable(ack_group=N))

    @property
    def effective_ack_share(self) -> int:
        return DEFAULT_ACK_SHARE if self.ack_share is None else self.ack_share

    @property
    def knobs(self) -> dict:
        """The settings in force, as a results file records them for a mode."""
        return {
            "partition": self.partition,
            "credit": self.credit,
            "host_credit": self.host_credit,
            "host_order": self.host_order,
            "ack_share": self.effective_ack_share,
            "credit_return": self.credit_return,
            "ack_group": self.ack_group,
            "push_credit": self.push_credit,
            "inline_transfers": self.inline_transfers,
            "ready": self.ready,
            "cross": self.cross,
        }


def crosses(name: str) -> bool:
    """Whether the mode named ``name`` (``MODE@PLACEMENT`` too) steps across the barrier.

    >>> crosses("cross"), crosses("tio+pc+ready+cross@held"), crosses("tio+pc")
    (True, True, False)
    """
    return CROSS in split_placed(name)[0].split("+")


def training_step_s(mode: str, iteration_mean_s: float, throughput: float, workers: int) -> float:
    """A mode's measured training step (seconds): the mean of its synchronized steps' slowest
    worker (``ModeResult.iteration_times``), which is the rounds' wall time over their steps where
    a barrier starts every step together. Across the barrier (``crosses``) it is the rounds' wall
    time over their steps, ``workers / throughput``, which the throughput is of. Since the
    seventy-ninth session the two agree there too (``steps_across``); files from before it timed
    each worker's part of a step from its own end before, so that a step's slowest worker was
    another one from step to step and the mean of the slowest was longer than a step: 6.70 s
    against 5.78 s (seventy-eighth session, VGG16 training, four workers,
    ``results/bench-vgg16-train-s78-cross.md``).

    >>> training_step_s("tio+pc", 6.0, 0.8, 4), training_step_s("tio+pc+ready+cross", 6.0, 0.8, 4)
    (6.0, 5.0)
    """
    if crosses(mode) and throughput > 0 and workers > 0:
        return workers / throughput
    return iteration_mean_s


def steps_across(ends: list[list[float]], start: float = 0.0) -> list[list[float]]:
    """A round's synchronized steps across the barrier, each worker's part of each (seconds):
    ``ends`` is each worker's step ends (a clock's readings), ``start`` when the round began.

    Behind the barrier every step starts together, so a worker's part is its step's time. Across
    it (``crosses``) nothing starts them together; what holds them in step is the reads' gates,
    each waiting on the updates of every worker's step before. So a step runs from the last
    worker's end of the step before (``start`` for the first) to the last one's end of its own,
    the fastest worker waits the gap between its end and the last one's (TicTac's straggler
    effect, ``ModeResult.straggler``), and the steps' lengths add up to the round's. Until the
    seventy-ninth session each worker's part was its own step, from its own end before: a step's
    slowest part was then another worker's from step to step, and the straggler effect and the
    synchronized steps' p95/p50 were of workers out of step with each other.

    >>> steps_across([[2.0, 3.0], [1.0, 3.0]])  # worker 0: 2 s then 1 s; worker 1: 1 s then 2 s
    [[2.0, 1.0], [1.0, 1.0]]
    """
    out, since = [], start
    for k in range(min(map(len, ends), default=0)):
        at = [e[k] for e in ends]
        out.append([t - since for t in at])
        since = max(at)
    return out


def _middle_steps(iterations: list[list[float]], rounds: int) -> list[float]:
    """The synchronized steps (each its slowest worker's time) of ``rounds`` rounds of equal
    steps but each round's first and last; none for fewer than three steps a round."""
    per = len(iterations) // rounds if rounds > 0 else 0
    if per < 3:
        return []
    return [max(it) for k, it in enumerate(iterations[: per * rounds]) if 0 < k % per < per - 1 and it]


def steady_step(iterations: list[list[float]], rounds: int) -> float | None:
    """Across the barrier, the training step once the pipeline is full: the mean of a round's
    synchronized steps (``steps_across``) but its first and its last, over ``rounds`` rounds of
    equal steps; None for fewer than three steps a round.

    A round across the barrier starts from an empty pipeline and ends with one: its first step's
    pulls have no step before them to overlap, and its last compute run has no run after it to
    share the machine with (and ends with the round's last updates). A long training has each
    once; the bench's interleaved rounds have them every round, so the rounds' wall time over
    their steps (the throughput, and the training step the bench compares) is of steps with both
    ends in. This is the step between them. Measured (seventy-ninth session), each step's mean by
    its place in the round: the Transformer on hosts with cores of their own 1.26 s, 0.99 s,
    1.05 s, 1.01 s, 0.95 s (``tao+pc+ready+cross``); ResNet-50 at 10 Gbit/s 0.68 s, 0.50 s,
    0.50 s, 0.36 s, its middle steps the baseline's 0.51 s.

    >>> steady_step([[1.3, 1.2], [1.0, 0.9], [0.8, 0.6], [1.4, 1.3], [0.9, 1.0], [0.7, 0.5]], 2)
    1.0
    """
    middle = _middle_steps(iterations, rounds)
    return sum(middle) / len(middle) if middle else None


def steady_spread(iterations: list[list[float]], rounds: int) -> float | None:
    """p95/p50 of the synchronized steps ``steady_step`` averages (each round's but its first
    and last); None for fewer than three steps a round. Of a mode behind the barrier too, so
    that one across it is set beside the baseline's same steps: the rounds' ends, which an
    empty pipeline makes slow and fast across the barrier, are most of its p95 over whole rounds
    (eightieth session: ResNet-50 training at 1 Gbit/s, rounds of five, 1.18 and 1.19 over the
    rounds, 1.05 and 1.06 without their ends; the baseline's 1.05 and 1.04).

    >>> steady_spread([[2.0], [1.0], [1.0], [0.5], [2.0], [1.0], [1.2], [0.5]], 2)
    1.2
    """
    middle = _middle_steps(iterations, rounds)
    return round(spread(middle), 6) if middle else None


# A mode's knobs that take a number, and what each sets
_SIZES = {
    "p": "the partition",
    "c": "the credit",
    "a": "the acknowledged share",
    "w": "the pushes' window",
    "g": "the acknowledgement group",
}


def parse_mode(name: str, bandwidth_bps: float | None = None, channel_params: int | None = None) -> ModeSpec:
    from tfsched.enforce.api import link_sizes

    if name == "baseline":
        return ModeSpec(name, None)
    if name == CROSS:
        return ModeSpec(name, None, cross=True)
    alg, *knobs = name.split("+")
    if alg not in ALGORITHMS:
        raise TfschedError(
            f"unknown mode {name!r}: expected baseline, {CROSS} or one of {', '.join(ALGORITHMS)} "
            "[+pc][+pN][+cN][+host|+lockstep][+aN][+gN][+sent][+wN][+pool][+ready][+cross]"
        )
    partition = credit = push_credit = 0
    host = False
    host_order = "steps"
    ack_share = None
    ack_group = 1
    credit_return = "ack"
    inline_transfers = True
    cross = ready = sized = False
    seen: set[str] = set()
    for k in knobs:
        # each knob once (p1000+p2000 took the last, under a name that gives both); +pc's sizes
        # give way to a pN or cN wherever they stand
        numeric = k[:1] in _SIZES and k[1:].isascii() and k[1:].isdigit()
        key = k[0] if numeric else k
        if key in seen:
            again = f"sets {_SIZES[key]} a second time" if numeric else "is given twice"
            raise TfschedError(f"unknown mode {name!r}: +{k} {again}")
        seen.add(key)
        if k == CROSS:
            cross = True
        elif k == "ready":
            ready = True
        elif k in ("host", "lockstep"):
            if host:
                raise TfschedError(f"unknown mode {name!r}: +host and +lockstep are two orders of one window")
            host, host_order = True, "priority" if k == "lockstep" else "steps"
        elif k == "sent":
            credit_return = "sent"
        elif k == "pool":
            inline_transfers = False
        elif k == "pc":
            sized = True
        elif numeric and int(k[1:]) > 0:
            if k[0] == "g":
                ack_group = int(k[1:])
            elif k[0] == "p":
                partition = int(k[1:])
            elif k[0] == "c":
                credit = int(k[1:])
            elif k[0] == "w":
                push_credit = int(k[1:])
            else:
                ack_share = int(k[1:])
        else:
            raise TfschedError(
                f"unknown mode {name!r}: {k!r} is not pc, pN, cN, wN (N parameters > 0), host, lockstep, "
                "aN, gN (N > 0), sent, pool, ready or cross"
            )
    if sized:
        sized_partition, sized_credit = link_sizes(bandwidth_bps, channel_params)
        partition, credit = partition or sized_partition, credit or sized_credit
    window = "+lockstep" if host_order == "priority" else "+host"
    needs = (
        (window, host),
        ("+aN", ack_share),
        ("+gN", ack_group > 1),
        ("+sent", credit_return != "ack"),
        ("+wN", push_credit),
    )
    for knob, given in needs:
        if given and not credit:
            raise TfschedError(f"unknown mode {name!r}: {knob} needs a credit (+pc or +cN)")
    if ack_group > 1 and credit_return != "ack":
        raise TfschedError(f"unknown mode {name!r}: +gN groups acknowledgements, and +sent has none")
    share = DEFAULT_ACK_SHARE if ack_share is None else ack_share
    if push_credit and partition and partition * share < credit:
        # the pass acknowledges transfers of credit / share and more: no slice is one, and a
        # window counts only what is acknowledged (a run of the fifty-second session held nothing)
        raise TfschedError(
            f"mode {name!r}: +w{push_credit} would hold no push: the credit acknowledges transfers of "
            f"{credit // share:,} parameters and more (credit / {share}), and +p{partition} cuts them "
            "smaller; lower the credit or raise +aN"
        )
    return ModeSpec(
        name,
        alg,
        partition,
        credit,
        host,
        host_order,
        ack_share,
        credit_return,
        push_credit,
        inline_transfers,
        cross,
        ready,
        ack_group,
    )


def acknowledged_pushes(graph, spec: ModeSpec) -> int:
    """How many messages of ``graph``'s pushes the pass acknowledges under ``spec``'s partition
    and credit (``analysis.acknowledged_messages``): all that a ``+wN`` window counts."""
    from tfsched.analysis import acknowledged_messages

    return acknowledged_messages(
        graph,
        partition=spec.partition,
        credit=spec.credit,
        ack_share=spec.effective_ack_share,
        kinds=("push",),
    )[0]


TUNED = "tuned"  # the mode that runs a tune file's best setting (tuned_mode)
PLACED = "@"  # a mode run with the variables placed otherwise: MODE@PLACEMENT (placed_mode)


def placed_mode(mode: str, placement: str | None) -> str:
    """The name of ``mode`` run on the graph with the variables placed ``placement`` (None: the
    run's first placement, whose modes keep their names).

    >>> placed_mode("tao+pc", "held"), placed_mode("baseline", None)
    ('tao+pc@held', 'baseline')
    """
    return mode if placement is None else f"{mode}{PLACED}{placement}"


def split_placed(name: str) -> tuple[str, str | None]:
    """``placed_mode``'s inverse: (the mode, its placement or None).

    >>> split_placed("tao+pc@held"), split_placed("baseline")
    (('tao+pc', 'held'), ('baseline', None))
    """
    mode, sep, placement = name.partition(PLACED)
    return mode, placement if sep else None


def parse_modes(value: str, *, tuned: bool = False) -> tuple[str, ...]:
    """Comma-separated modes, baseline among them, each valid; the names in order. With
    ``tuned``, the mode ``TUNED`` may be among them, as itself (``tuned_mode`` expands it)."""
    modes = tuple(m.strip() for m in value.split(",") if m.strip())
    if "baseline" not in modes:
        raise TfschedError(f"the modes must include baseline (got {value!r})")
    for m in modes:
        if not (tuned and m == TUNED):
            parse_mode(m)
    if len(set(modes)) != len(modes):
        raise TfschedError(f"a mode is listed twice in {value!r}")
    return modes


def setting_mode(config: dict, setting: dict) -> str:
    """The bench mode that runs ``setting`` (its ``partition``, 0: none, ``credit``, and
    ``push_credit`` where it has one) as a tuner measured it with ``config`` (a tune file's: its
    algorithm, and ``+host``, ``+aN`` and ``+sent`` where it tuned with them; ``+lockstep`` for a
    window per task in lockstep).

    A window counts only acknowledged transfers, and the tuner's pass acknowledged those of
    ``config["acknowledged_from"]`` parameters and more whatever the live credit (a tune file
    since the fifty-ninth session records it): the mode's ``+aN`` acknowledges those too under
    its credit (the nearest share, which may take a few parameters less), where
    ``tfsched.enable(credit=N)`` alone would acknowledge from N/8 on.

    >>> setting_mode({"algorithm": "tao", "host_credit": True}, {"partition": 0, "credit": 500})
    'tao+c500+host'
    >>> setting_mode({"algorithm": "tio", "host_credit": True, "host_order": "priority"},
    ...              {"partition": 8, "credit": 500})
    'tio+p8+c500+lockstep'
    >>> setting_mode({"algorithm": "tao", "host_credit": True, "acknowledged_from": 32768},
    ...              {"partition": 262144, "credit": 4194304, "push_credit": 262144})
    'tao+p262144+c4194304+host+a128+w262144'
    >>> setting_mode({"algorithm": "tio", "acknowledged_from": 32768}, {"partition": 0, "credit": 100000})
    'tio+c100000+a4'
    """
    name = str(config.get("algorithm"))
    name += f"+p{setting['partition']}" if setting["partition"] else ""
    name += f"+c{setting['credit']}"
    if config.get("host_credit"):
        name += "+lockstep" if config.get("host_order") == "priority" else "+host"
    share = config.get("ack_share")
    if config.get("acknowledged_from"):  # the tuned ack_share is in it, with the pass's credit
        share = max(1, -(-setting["credit"] // config["acknowledged_from"]))
    name += f"+a{share}" if share else ""
    name += "+sent" if config.get("credit_return") == "sent" else ""
    name += f"+w{setting['push_credit']}" if setting.get("push_credit") else ""
    return name


def tuned_mode(
    doc: dict,
    path: str,
    *,
    model: str,
    workers: int,
    ps: int,
    bandwidth: str,
    batch_size: int | None,
    ps_placement: str = "bytes",
    api: str = "session",
    run_mode: str = "train",
    host_cores: float = 0.0,
) -> str:
    """The bench mode of a tune file's best setting (``tfsched.tune.run.read_tune_file``): its
    algorithm, ``+pN`` (unless it tuned no partitioning), ``+cN``, ``+wN`` (a pushes' window),
    ``+aN`` that acknowledges what the tuner's pass did, and ``+host`` and ``+sent`` as it tuned
    with them (``setting_mode``), so that the bench runs what the tuner measured.

    The file must have been tuned for this model, cluster and link (``bandwidth`` as the
    results label it: ``1 Gbit/s`` or ``loopback``), with this ``api`` (``session`` or ``tf2``:
    the TensorFlow 2 tuner's files say so, the others are a session's) and ``run_mode`` (files
    that record none trained), and for ``batch_size`` where it records one (None: not known
    yet), and on several PS for ``ps_placement`` where it records one, on hosts of ``host_cores``
    of their own (files that record none: 0, sharing the machine's); a setting tuned elsewhere is
    one TfschedError line naming it.
    """
    c, b = doc["config"], doc["best"]
    if c.get("model") is None:
        raise TfschedError(f"{path}: tuned on a saved graph ({c.get('graph')}), not on a built-in model")
    want = {"model": model, "workers": workers, "ps": ps, "bandwidth": bandwidth}
    if batch_size is not None and c.get("batch_size") is not None:
        want["batch_size"] = batch_size
    if ps > 1 and c.get("ps_placement") is not None:
        want["ps_placement"] = ps_placement
    want.update(api=api, mode=run_mode, host_cores=host_cores or 0)
    had = dict(c, api=c.get("api", "session"), mode=c.get("mode", "train"), host_cores=c.get("host_cores", 0))
    off = [k for k, v in want.items() if had.get(k) != v]
    if off:
        raise TfschedError(
            f"{path}: tuned for {', '.join(f'{k} {had.get(k)}' for k in off)}, "
            f"not {', '.join(f'{k} {want[k]}' for k in off)}"
        )
    name = setting_mode(c, b)
    try:
        parse_mode(name)
    except TfschedError as e:
        raise TfschedError(f"{path}: its best setting is no bench mode ({e})") from None
    return name


def percentile(xs: list[float], q: float) -> float:
    """The ``q``-th percentile of ``xs`` by the nearest rank (one of the measured values), 0.0
    for none."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else 0.0


def spread(xs: list[float]) -> float:
    """p95/p50 of ``xs``: 1.0 when the slow steps are as fast as the typical one (0.0 for none)."""
    p50 = percentile(xs, 50)
    return percentile(xs, 95) / p50 if p50 else 0.0


@dataclass(frozen=True)
class StepRecord:
    """One worker's part of one timed synchronized step (``run_side_by_side(step_log=...)``):
    ``time.monotonic()`` when its ``sess.run`` began and returned."""

    mode: str
    round: int
    step: int
    worker: int
    start: float
    end: float


@dataclass
class ModeResult:
    mode: str
    step_times: list[float] = field(default_factory=list)  # seconds, every worker's steps
    per_worker: dict[int, list[float]] = field(default_factory=dict)  # worker -> its step times
    # per synchronized step: each worker's time (across the barrier, from the last worker's end
    # of the step before: steps_across)
    iterations: list[list[float]] = field(default_factory=list)
    wall_s: float = 0.0  # time the rounds of this mode took
    rounds: list[tuple[int, float]] = field(default_factory=list)  # per round: (steps, wall seconds)
    cpu_s: float = 0.0  # CPU seconds the whole machine was busy during the timed rounds
    cpu_total_s: float = 0.0  # CPU seconds the machine had then (wall time x cores)
    steps: int = 0  # steps completed by all workers together
    trace: object | None = None  # traced steps of worker 0 (tfsched.tracing.Trace), if asked for
    other_traces: dict = field(default_factory=dict)  # the same steps of every other worker: index -> Trace
    # baseline: steps of worker 0 traced while the other workers wait (op times alone)
    solo_trace: object | None = None
    # a timing-aware mode: the trace of worker 0 alone its order was made from (mode_configs)
    order_trace: object | None = None
    comm_cpu_s_per_byte: float = 0.0  # baseline: the machine's CPU per byte moved (0: not measured)
    # baseline: ... per tensor sent, bytes aside, its share of the step included (the simulator
    # charges it to each acknowledgement, predict.annotate; a transfer's own stays in the ops'
    # share, see predict.machine_slots_from_cpu)
    comm_cpu_s_per_message: float = 0.0
    # baseline: ... per byte a receiver copies putting a partitioned tensor back together
    # (copy_cpu_s_per_byte; 0: not measured: no mode cuts tensors, or before the ninetieth session)
    copy_cpu_s_per_byte: float = 0.0
    # baseline: ... per acknowledgement, its message included (ack_cpu_s; 0: not measured: no mode
    # acknowledges, or before the ninety-first session, when the floor took it as a message)
    ack_cpu_s: float = 0.0
    # baseline: the shares of a byte's CPU (comm_cpu_s_per_byte) the sending PS's process and the
    # receiving worker's spent, the rest the kernel's (None: not measured)
    comm_cpu_shares: tuple[float, float] | None = None
    # baseline: the shares of a message's CPU (comm_cpu_s_per_message) the sending PS's process and
    # worker 0's spent (None: not measured; since the hundred-and-third session)
    comm_cpu_message_shares: tuple[float, float] | None = None
    # CPU seconds each task's process spent during the timed rounds ("job:index" -> seconds;
    # empty where the processes could not be read): what its ops cost where it has cores of its
    # own (predict.machine_slots_from_task_cpu)
    task_cpu_s: dict[str, float] = field(default_factory=dict)
    measured: dict = field(default_factory=dict)  # E, bounds, the simulator's prediction (predict.py)
    # with the traced steps: per phase, how far apart the workers reached it (bench.stagger)
    stagger: dict = field(default_factory=dict)
    # partition, credit (parameters), host_credit, host_order, ack_share, credit_return
    knobs: dict = field(default_factory=dict)

    @property
    def throughput(self) -> float:
        """Steps per second, all workers together."""
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0

    def percentile(self, q: float) -> float:
        """The ``q``-th percentile of every worker's step times (0.0 without any)."""
        return percentile(self.step_times, q)

    @property
    def straggler(self) -> float:
        """TicTac §6: the longest time any worker waits for the others, over the iteration time.

        Workers start every step together (synchronous training); in each step the iteration
        takes as long as the slowest worker and the fastest one waits the difference. Mean over
        the steps. Across the barrier a step starts at the last worker's end of the step before
        (``steps_across``), where the fastest worker's wait starts too.
        """
        ratios = [(max(it) - min(it)) / max(it) for it in self.iterations if len(it) > 1 and max(it) > 0]
        return statistics.fmean(ratios) if ratios else 0.0

    @property
    def cpu_per_step(self) -> float:
        """CPU seconds the machine spent per synchronized step (every task shares this machine)."""
        return self.cpu_s / len(self.iterations) if self.iterations and self.cpu_total_s else 0.0

    @property
    def task_cpu_per_step(self) -> dict[str, float]:
        """CPU seconds each task's process spent per synchronized step (``task_cpu_s``)."""
        n = len(self.iterations)
        return {task: round(s / n, 6) for task, s in sorted(self.task_cpu_s.items())} if n else {}

    @property
    def steady_step_s(self) -> float | None:
        """Across the barrier, the training step once the pipeline is full (``steady_step``);
        None behind it, where no step overlaps another."""
        return steady_step(self.iterations, len(self.rounds)) if crosses(self.mode) else None

    @property
    def iteration_times(self) -> list[float]:
        """Per synchronized step, the slowest worker's time: how long the step took for all."""
        return [max(it) for it in self.iterations if it]

    @property
    def training_step_s(self) -> float:
        """The measured training step (``training_step_s``; 0.0 without steps)."""
        its = self.iteration_times or self.step_times
        return training_step_s(
            self.mode, statistics.fmean(its) if its else 0.0, self.throughput, len(self.per_worker)
        )

    def to_json(self) -> dict:
        its = self.iteration_times
        return {
            "mode": self.mode,
            "p95_over_p50": spread(self.step_times),
            # the same of the synchronized steps (each as long as its slowest worker): how steady
            # the training step is, the stagger of the workers within a step aside (that is the
            # straggler effect)
            "iteration_p95_over_p50": spread(its),
            "straggler": self.straggler,
            **({"stagger": self.stagger} if self.stagger else {}),
            "steps": self.steps,
            "throughput_steps_per_s": self.throughput,
            "p50_s": self.percentile(50),
            "p95_s": self.percentile(95),
            "mean_s": statistics.fmean(self.step_times) if self.step_times else 0.0,
            "iteration_mean_s": statistics.fmean(its) if its else 0.0,
            "cpu_s_per_step": self.cpu_per_step,
            # at most 1: /proc/stat's counters are seconds since boot, and a difference of two
            # large floats can pass the other's by a rounding error when the cores never idled
            "cpu_busy": min(1.0, self.cpu_s / self.cpu_total_s) if self.cpu_total_s else 0.0,
            **({"comm_cpu_s_per_byte": self.comm_cpu_s_per_byte} if self.comm_cpu_s_per_byte else {}),
            **(
                {"comm_cpu_s_per_message": self.comm_cpu_s_per_message} if self.comm_cpu_s_per_message else {}
            ),
            **({"comm_cpu_shares": list(self.comm_cpu_shares)} if self.comm_cpu_shares else {}),
            **(
                {"comm_cpu_message_shares": list(self.comm_cpu_message_shares)}
                if self.comm_cpu_message_shares
                else {}
            ),
            **({"copy_cpu_s_per_byte": self.copy_cpu_s_per_byte} if self.copy_cpu_s_per_byte else {}),
            **({"ack_cpu_s": self.ack_cpu_s} if self.ack_cpu_s else {}),
            **({"task_cpu_s_per_step": per_task} if (per_task := self.task_cpu_per_step) else {}),
            # the raw times (seconds): any column can be recomputed from the file
            "iterations": [[round(t, 6) for t in it] for it in self.iterations],
            # across the barrier, each step's parts from the last worker's end of the step
            # before (``steps_across``; files from before the seventy-ninth session: each
            # worker's own steps)
            **({"iterations_from": "last_end"} if crosses(self.mode) else {}),
            **({"steady_step_s": steady} if (steady := self.steady_step_s) else {}),
            # the same steps' p95/p50, of every mode (``steady_spread``)
            **(
                {"steady_iteration_p95_over_p50": sp}
                if (sp := steady_spread(self.iterations, len(self.rounds)))
                else {}
            ),
            # a timing-aware mode: what its order came from (files from before the seventeenth
            # session have no such field: their TAO was ordered from the cost model)
            **({"ordered_from": ORDERED_FROM_TRACE} if self.order_trace is not None else {}),
            **self.knobs,
            **self.measured,
        }


def cpu_seconds() -> tuple[float, float] | None:
    """(busy, all) CPU seconds of this machine since boot, from /proc/stat; None without it."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    fields += [0] * (8 - len(fields))
    # user, nice, system, irq, softirq (guest time is already in user); then idle, iowait, steal
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6]
    return busy / hz, (busy + fields[3] + fields[4] + fields[7]) / hz


def mode_configs(
    modes: tuple[str, ...],
    graph_path: str,
    fetches: list[str],
    *,
    timeout_ms: int = 60_000,
    bandwidth_bps: float | None = None,
    channel_params: int | None = None,
) -> dict:
    """Session config of each mode (None: vanilla TensorFlow); schedules come from ``analyze``
    of the saved graph at ``graph_path`` (written beside it, one per algorithm); ``+pc`` sized
    for a link of ``bandwidth_bps`` and channels of ``channel_params`` (``parse_mode``).

    A timing-aware order (TAO) needs the op times of this model on this machine (TicTac §5): its
    config is a function of a trace (``tfsched.tracing.Trace`` of worker 0's steps), which
    ``run_side_by_side`` calls once it has traced them, as a user runs ``tfsched trace`` and then
    ``analyze --trace``. Until the seventeenth session the bench ordered TAO from the cost model
    (``analyze`` without a trace), which is not TicTac's TAO and not what a user following the
    README runs.
    """
    import tfsched
    from tfsched.analysis import analyze

    def schedule(algorithm: str, trace=None) -> str:
        """The algorithm's schedule file beside the graph, made once (from ``trace`` if given)."""
        base = f"{graph_path.removesuffix('.pb')}-{algorithm}"
        if not os.path.exists(f"{base}.json"):
            if trace is not None:
                trace.save(f"{base}.trace.json")
            analyze(
                graph_path,
                fetches=fetches,
                algorithm=algorithm,
                trace=None if trace is None else f"{base}.trace.json",
            ).schedule.save(f"{base}.json")
        return f"{base}.json"

    configs = {}
    for mode in modes:
        spec = parse_mode(mode, bandwidth_bps, channel_params)
        knobs = {
            "partition": spec.partition,
            "credit": spec.credit,
            "host_credit": spec.host_credit,
            "host_order": spec.host_order,
            "ack_share": spec.ack_share,
            "credit_return": spec.credit_return,
            "ack_group": spec.ack_group if spec.ack_group > 1 else None,
            "push_credit": spec.push_credit or None,
            "inline_transfers": spec.inline_transfers,
            "ready": spec.ready,
            "timeout_ms": timeout_ms,
        }
        if spec.algorithm is None:
            configs[mode] = None
        elif spec.algorithm == "tio" and not spec.cross:
            configs[mode] = tfsched.enable(**knobs)
        elif spec.algorithm in TIMED:
            configs[mode] = lambda trace, alg=spec.algorithm, knobs=knobs: tfsched.enable(
                schedule=schedule(alg, trace), algorithm=alg, **knobs
            )
        else:
            configs[mode] = tfsched.enable(
                schedule=schedule(spec.algorithm), algorithm=spec.algorithm, **knobs
            )
    return configs


SOLO_STEPS = 2
COMM_STEPS = 3  # pull-only steps that measure what moving a byte costs the machine: at least
COMM_MAX_STEPS = 60  # and more, up to this, until the whole pulls took COMM_MIN_CPU_S of CPU
COMM_MIN_CPU_S = 1.0  # (/proc/stat counts in ticks of 10 ms: small models need many steps)
COMM_MAX_MESSAGE_STEPS = 60  # calls of the cut and of the empty call in turn, up to this, until
COMM_MIN_MESSAGE_CPU_S = 0.3  # the cut took this much CPU (a message's cost is their difference)


def _comm_cpu_costs(
    tf,
    target: str,
    built,
    options,
    tasks: dict[int, str],
    dead_tasks: Callable[[], list[str]] | None = None,
) -> tuple[float, float, tuple[float, float] | None, tuple[float, float] | None]:
    """CPU seconds this machine spends per byte moved between two tasks past each message's own
    cost, and per message (a tensor sent with almost no bytes, past the step's own cost); and the
    shares of a byte's CPU the senders' processes (the PS tasks) and the receiver's (worker 0)
    spent (``byte_shares``), and of a message's, None where their processes cannot be read.

    Worker 0 alone (a fresh copy of ``built``'s graph, sharing the variables) runs three steps in
    turn, at least ``COMM_STEPS`` times each and more for small models, until the CPU is
    measurable: one pulls every PS variable whole and keeps one element of each; the second cuts
    that element on the PS, so it sends as many messages with almost no bytes; the third fetches
    as many values made on worker 0, sending none. The machine's extra busy CPU in the first
    over the second, over the extra bytes, is the cost of a byte; the second's CPU over the
    third's, in the ends' processes, over its messages, the cost of a message
    (``whole_and_cut_costs``). The plain ratio used before (all the CPU of the first step over
    its bytes) counted each message's and the step's own cost as bytes: par32 (33 small
    variables) came out at 3.1e-8 CPU s per byte, 20 times VGG16's, and its lower bound 80%
    above the measured step.

    Both are 0 if /proc/stat cannot be read, nothing is on a PS or a pull fails (the rounds
    measured before are kept: the prediction then leaves this CPU out); the cost of a byte is 0
    if the bytes cost nothing measurable. A pull that fails because a task of the cluster died
    (``dead_tasks``, ``bench.local.dead_tasks_named``) raises its error: the run has failed, and
    ``run_side_by_side`` names the task (until the hundred-and-eleventh session the run ended
    with its results, as if nothing had died).

    The shares come from the same steps: each task process's CPU (``/proc/<pid>/stat``, of the
    cluster's ``tasks``, pid -> "job:index") over them; the rest of the machine's is the
    kernel's, in no task's process. The simulator charges each end's share to its own task's
    cores (``TimeOracle.host_byte_shares``). Measured since the sixty-fourth session: on
    ResNet-50 training at 10 Gbit/s on half-core hosts the sending PS 0.27 to 0.32 and the
    receiving worker 0.46 to 0.69 (three runs, ``results/comm-cost-shares.md``); on VGG16
    inference at 1 Gbit/s there 0.12 and 0.57 (``results/bench-vgg16-inference-hosts-s64.md``).

    Until the sixty-third session the two steps were warmed up together, in one run of both
    fetches: that registered a graph for the pair, not for either, so the first measured step of
    each set up its own on every task. Measured on ResNet-50 training (1 PS x 2 workers, 10
    Gbit/s, half-core hosts, twelve steps each, ``results/comm-cost-first-steps.md``): the first
    cut step took 0.46 to 0.74 CPU seconds and the first whole one 0.55 to 0.74, the others 0.02
    to 0.05 and 0.09 to 0.15. The two setups did not cancel out (up to 0.09 s apart, against
    0.24 s of bytes over three steps), and the cut's was counted as its messages'. Three runs of
    one short bench command each way (``benchmarks/comm_cost_spread.py``,
    ``results/comm-cost-spread-before.md`` and ``results/comm-cost-spread.md``): a byte 6.5e-10
    to 1.27e-9 s before, 9.7e-10 to 1.13e-9 s now; a message 3.6e-4 to 7.3e-4 s before, 1.0e-4
    to 1.4e-4 s now. A fifth of the message's cost moves the predictions of kept runs' credit
    modes by at most half a point (``results/ack-cost-one-fifth.md``).
    """
    with built.graph.as_default():
        whole, cut, none, nbytes, small = [], [], [], 0, 0
        for v in built.graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
            if "/job:ps" in v.device and v.shape.is_fully_defined():
                with tf.device("/job:worker/task:0"):
                    whole.append(tf.reshape(v, [-1])[:1])  # the whole tensor comes, one element stays
                with tf.device(v.device):
                    first = tf.reshape(v, [-1])[:1]  # one element comes
                with tf.device("/job:worker/task:0"):
                    cut.append(tf.identity(first))
                    none.append(tf.identity(tf.zeros([1], v.dtype)))  # as many values, no message
                nbytes += v.shape.num_elements() * v.dtype.size
                small += v.dtype.size
    if nbytes <= small:
        return 0.0, 0.0, None, None
    try:
        with tf.compat.v1.Session(target, graph=built.graph, config=session_config()) as sess:
            fetches = {"whole": whole, "cut": cut, "none": none}
            return whole_and_cut_costs(
                lambda name: sess.run(fetches[name], options=options),
                pull_ends(tasks),
                extra_bytes=nbytes - small,
                messages=len(cut),
            )
    except tf.errors.OpError:
        if dead_tasks_named(dead_tasks):
            raise
        return 0.0, 0.0, None, None


def pull_ends(tasks: dict[int, str]) -> dict[str, list[int]]:
    """The processes at each end of worker 0's pulls among ``tasks`` (pid -> ``job:index``,
    ``bench.local.TaskHandles.task_pids``): the senders (every PS, ``send``) and the receiver
    (worker 0, ``recv``).

    >>> pull_ends({10: "ps:0", 11: "ps:1", 12: "worker:0", 13: "worker:1"})
    {'send': [10, 11], 'recv': [12]}
    """
    return {
        "send": [pid for pid, name in tasks.items() if name.startswith("ps:")],
        "recv": [pid for pid, name in tasks.items() if name == "worker:0"],
    }


def whole_and_cut_costs(
    run: Callable[[str], object], ends: dict[str, list[int]], *, extra_bytes: int, messages: int
) -> tuple[float, float, tuple[float, float] | None, tuple[float, float] | None]:
    """``_comm_cpu_costs``' measurement, whatever runs the pulls (a session's, or TensorFlow 2's
    coordinator, ``bench.tf2.comm_cost_round``): ``run("whole")`` pulls every PS variable whole
    to worker 0, ``run("cut")`` the same ``messages`` with one element each (``extra_bytes``
    fewer), ``run("none")`` as many values made on worker 0 itself (no message: the call's own
    cost). Each is run once alone to warm up (its first run sets up a graph of its own on every
    task), then all three in turn, as ``_comm_cpu_costs`` says, the machine's CPU and that of
    ``ends``' processes (``pull_ends``) read around each; then the cut and the empty call alone
    in turn until the cut took ``COMM_MIN_MESSAGE_CPU_S`` (at most ``COMM_MAX_MESSAGE_STEPS``
    in all). The cost of a byte, of a message, the ends' shares of a byte's and of a message's
    (``byte_shares``: the PS's and worker 0's parts; None where the ends' processes cannot be
    read or a message cost nothing measurable); (0, 0, None, None) where /proc/stat cannot be
    read. What ``run`` raises goes through.

    A message's shares (since the hundred-and-third session) tell where its cost is spent: a
    TensorFlow 2 message cost two to three times a session's, and the PS's part of a call (a
    component function the coordinator's call runs there, which no empty call does) was the
    likely cause, not measured apart. Measured on VGG16 inference (2 workers, three runs each,
    ``benchmarks/comm_cost_spread.py``, ``results/comm-cost-spread-{tf2,session}-s103.md``): the
    PS spent 0.26 to 0.67 of a TensorFlow 2 message's 2.1e-4 to 2.8e-4 s, and 0.46 to 0.56 of a
    session's 0.8e-4 to 1.3e-4 s. Both ends spend more in TensorFlow 2, not the PS alone.

    A byte's cost counts the machine's CPU (the kernel moves the bytes too, in interrupts and
    in threads of its own). A message's is the cut's CPU past the empty call's (``per_message``)
    in the PS's and worker 0's processes where they can be read (else the machine's), so what
    else runs on the machine meanwhile is left out.

    Until the seventy-third session a message took all the machine's CPU of the cut: the call's own
    cost (a session's run, or a coordinator's call and its answer), spread over its messages,
    counted as theirs. A first try of the empty call took the machine's CPU for both calls: in a CI
    rehearsal beside another test (``pytest -n 2``) Seq-32's message came out at nothing. A second
    counted a byte's CPU in the ends' processes, the driver's and the machine's interrupts, to leave
    other load out of it too; but this kernel (tick-based, no ``CONFIG_IRQ_TIME_ACCOUNTING``)
    charges an interrupt's tick both to /proc/stat's softirq and to the process it interrupted, and
    the softirq of loopback and veth likely runs mostly in the ends' own processes: the shares of a
    byte's CPU summed to 0.73 and 0.84 (means of three runs) against 0.90 and 0.94 on the machine's
    CPU, and a byte came out 1.15e-9 to 1.42e-9 s against 9.4e-10 to 1.09e-9 s. Three runs of one
    short bench command each way in one session (``benchmarks/comm_cost_spread.py``, ResNet-50
    training on half-core hosts, 320 messages a call): idle, a message 0.97e-4 to 1.34e-4 s before
    and 0.73e-4 to 1.04e-4 s with the ends' processes; with one more process spinning (``--load 1``)
    1.77e-4 to 2.08e-4 s before and 0.70e-4 to 0.94e-4 s (``results/comm-cost-spread-s73*``).
    TensorFlow 2's VGG16 inference (32 messages), idle: 3.9e-4 to 6.3e-4 s before, 1.8e-4 to 2.8e-4
    s (``results/comm-cost-spread-tf2*``)."""
    from tfsched.bench.profile import task_cpu_s

    names = ("none", "cut", "whole")
    for name in names:
        run(name)
    busy = dict.fromkeys(names, 0.0)
    spent = {(name, end): 0.0 for name in names for end in ends}  # (fetch, end) -> CPU seconds
    # the ends' processes can be read: what else runs on the machine is left out of a message's
    own = all(ends.values())

    def measure(name: str) -> bool:
        before, at = cpu_seconds(), {end: task_cpu_s(pids) for end, pids in ends.items()}
        run(name)
        after = cpu_seconds()
        if not before or not after:
            return False
        busy[name] += after[0] - before[0]
        for end, pids in ends.items():
            spent[(name, end)] += task_cpu_s(pids) - at[end]
        return True

    def message_cpu(name: str) -> float:  # the ends' processes', or the machine's
        return sum(spent[(name, end)] for end in ends) if own else busy[name]

    steps = 0
    while steps < COMM_STEPS or (busy["whole"] < COMM_MIN_CPU_S and steps < COMM_MAX_STEPS):
        if not all(measure(name) for name in names):
            return 0.0, 0.0, None, None
        steps += 1
    shares = None
    if own:
        shares = byte_shares(
            busy["whole"] - busy["cut"],
            spent[("whole", "send")] - spent[("cut", "send")],
            spent[("whole", "recv")] - spent[("cut", "recv")],
        )
    cost = per_byte(busy["whole"], busy["cut"], extra_bytes, steps)
    calls = steps  # the byte's cost above took the cut of the steps beside the whole pulls alone
    while message_cpu("cut") < COMM_MIN_MESSAGE_CPU_S and calls < COMM_MAX_MESSAGE_STEPS:
        busy_kept, spent_kept = dict(busy), dict(spent)
        if not (measure("none") and measure("cut")):
            busy.update(busy_kept)  # a pair measured in part counts for neither
            spent.update(spent_kept)
            break
        calls += 1
    message = per_message(message_cpu("cut"), message_cpu("none"), messages, calls)
    parts = None
    if own and message:
        send, recv = (spent[("cut", end)] - spent[("none", end)] for end in ("send", "recv"))
        parts = byte_shares(send + recv, send, recv)
    return cost, message, shares if cost else None, parts


def per_message(busy_cut_s: float, busy_none_s: float, messages: int, calls: int) -> float:
    """CPU seconds per message from ``calls`` calls that each sent ``messages`` almost empty
    tensors (``busy_cut_s`` in all) against as many calls that sent none (``busy_none_s``); 0
    when the difference is not positive (nothing measurable past the calls' own cost).

    >>> per_message(0.042, 0.01, 32, 10)  # 1 ms a call is the call's own: 0.1 ms a message
    0.0001
    >>> per_message(0.03, 0.04, 32, 10)
    0.0
    """
    extra = busy_cut_s - busy_none_s
    return extra / (messages * calls) if extra > 0 and messages > 0 and calls > 0 else 0.0


def byte_shares(machine_s: float, send_s: float, recv_s: float) -> tuple[float, float] | None:
    """The shares of the machine's extra CPU (``machine_s``) that the sender's and the
    receiver's processes spent (``send_s``, ``recv_s``), each at least 0 and together at most 1
    (the processes' ticks and the machine's are read apart: their sum can pass it by a tick);
    None when the machine or both processes spent none (nothing to split).

    >>> byte_shares(1.0, 0.3, 0.55)
    (0.3, 0.55)
    >>> byte_shares(1.0, 0.5, 0.6)  # scaled to the machine's
    (0.4545, 0.5455)
    >>> byte_shares(1.0, 0.45455, 0.54545)  # at most 1 once rounded
    (0.4546, 0.5454)
    >>> byte_shares(1.0, -0.01, 0.6), byte_shares(0.0, 0.1, 0.1), byte_shares(1.0, 0.0, -0.01)
    ((0.0, 0.6), None, None)
    """
    if machine_s <= 0:
        return None
    send, recv = max(send_s, 0.0) / machine_s, max(recv_s, 0.0) / machine_s
    both = send + recv
    if both <= 0:
        return None
    if both > 1:
        send, recv = send / both, recv / both
    send, recv = round(send, 4), round(recv, 4)
    # rounded, the two can pass 1 by a rounding step (0.45455 and 0.54545); the receiver's is
    # then what is left, which rounded never passes it
    return (send, recv) if send + recv <= 1 else (send, round(1 - send, 4))


def per_byte(busy_whole_s: float, busy_cut_s: float, extra_bytes: int, steps: int) -> float:
    """CPU seconds per byte from ``steps`` steps that moved ``extra_bytes`` more each than the
    same messages cut short; 0 when the difference is not positive (noise on tiny tensors).

    >>> per_byte(3.0, 0.6, 400_000_000, 3)
    2e-09
    >>> per_byte(0.05, 0.06, 1_000_000, 3)
    0.0
    """
    extra = busy_whole_s - busy_cut_s
    return extra / (extra_bytes * steps) if extra > 0 and extra_bytes > 0 and steps > 0 else 0.0


COPY_SLICE_BYTES = 4_000_000  # a slice of ByteScheduler's partition (1,000,000 float32 parameters)
COPY_SLICES = 8  # put together into one tensor of 32 MB
COPY_MIN_CPU_S = 0.5  # runs until the copies took this much CPU (at most COPY_MAX_RUNS)
COPY_MAX_RUNS = 200


def copy_cpu_s_per_byte(tf) -> float:
    """CPU seconds this machine spends per byte putting a partitioned tensor back together: the
    pass's ``TfschedConcat`` (cc/gate_ops.cc), as the receiver of a mode with partitioning runs
    it, on ``COPY_SLICES`` slices of ``COPY_SLICE_BYTES`` in a session of this process, its
    output allocated each run as the receiver's is. The process's CPU over the runs (after one
    to warm up), over the bytes put together; 0 where the op cannot be loaded or run.

    A slice past a tensor's first is one more message (``comm_cpu_s_per_message``); the copy of
    the whole tensor is on top of that. Measured since the ninetieth session for the CPU floor
    of a mode that cuts tensors (``predict.reassembled_bytes``): on the AMD EPYC (family 25)
    1.09e-10 and 1.21e-10 s a byte (9.2 and 8.2 GB/s) in two benches of ResNet-50
    (``results/bench-resnet50-train-10g-s90.json``, ``-sent-s90``). Constant slices would be
    folded by the optimizers into one tensor made once, a copy that costs nothing: the slices
    are variables, whose reads share their buffers."""
    import numpy as np

    try:
        from tfsched.enforce._loader import load_ops

        ops = load_ops()
    except TfschedError:
        return 0.0
    n = COPY_SLICE_BYTES // 4
    g = tf.Graph()
    with g.as_default():
        # variables, which the optimizers do not fold as they would constants (reading one on
        # this CPU shares its buffer: no copy before the op's)
        slices = [
            tf.compat.v1.Variable(np.full(n, i, np.float32), use_resource=True) for i in range(COPY_SLICES)
        ]
        concat = ops.tfsched_concat(slices=[v.read_value() for v in slices], shape=[n * COPY_SLICES]).op
        init = tf.compat.v1.variables_initializer(slices)
    try:
        with tf.compat.v1.Session(graph=g) as sess:
            sess.run(init)
            sess.run(concat)  # warm-up: the kernel made, the allocator's first buffer
            runs, start = 0, time.process_time()
            while runs < COPY_MAX_RUNS and (runs < 3 or time.process_time() - start < COPY_MIN_CPU_S):
                sess.run(concat)
                runs += 1
            cpu_s = time.process_time() - start
    except tf.errors.OpError:  # no memory for it, say: the floor then counts no copy, as before
        return 0.0
    return cpu_s / (runs * COPY_SLICES * COPY_SLICE_BYTES)


ACK_SLICE_PARAMS = 16_384  # the least the pass acknowledges (cc/scheduler.cc, kMinAckedElements)
ACK_SLICES = 32  # one tensor cut into this many slices, each acknowledged: 2 MB a step
ACK_ROUNDS, ACK_STEPS = 8, 5  # each way in turn, this many steps a round
ACK_STEP_TIMEOUT_MS = 60_000  # a step of 2 MB that takes longer fails (the measurement is then 0)


def acknowledges(spec: ModeSpec) -> bool:
    """Whether ``spec``'s mode returns its credit by acknowledgement (its receivers send them)."""
    return bool(spec.credit) and spec.credit_return == "ack"


def ack_cpu_s(
    tf, target: str, ends: dict[str, list[int]], dead_tasks: Callable[[], list[str]] | None = None
) -> float:
    """CPU seconds an acknowledgement costs the machine's two ends (``ends``, ``pull_ends``),
    its message included: the PS cuts a tensor of ``ACK_SLICES`` slices of ``ACK_SLICE_PARAMS``
    for worker 0 under a credit of four slices (``target``, worker 0's session), the credit
    returned by acknowledgement and, in turn, when sent (``enable(credit_return="sent")``, the
    same slices and no acknowledgement), ``ACK_ROUNDS`` rounds of ``ACK_STEPS`` steps each way;
    the ends' processes' CPU of the first past the second's, over its acknowledgements. 0 where
    the ends' processes cannot be read, a step fails or the difference is not positive; a step
    that fails because a task of the cluster died (``dead_tasks``) is a TfschedError naming it
    (since the hundred-and-eleventh session; before, the run ended as if nothing had died).

    The bench's ``comm_cpu_s_per_message`` is a message among many sent at once: an
    acknowledgement goes alone, when its slice arrives, and each one wakes the threads of both
    ends (``benchmarks/ack_cost.py``: 0.5 ms and 11 context switches on the AMD EPYC, where the
    bench measured a message at 0.12 to 0.13 ms; ninety-first session, ``results/ack-cost-s91.md``).
    The CPU floor counts each acknowledgement at this since the ninety-first session
    (``predict.machine_cpu_floor``)."""
    import tfsched
    from tfsched.bench.profile import task_cpu_s

    if not all(ends.values()):
        return 0.0
    pids = [pid for end in ends.values() for pid in end]
    options = tf.compat.v1.RunOptions(timeout_in_ms=ACK_STEP_TIMEOUT_MS)  # no step waits forever
    g = tf.Graph()
    with g.as_default():
        with tf.device("/job:ps/task:0"):
            # made each step from a value the optimizers do not fold (a constant tensor and its
            # sum would be folded into one constant on the worker: nothing sent)
            one = tf.compat.v1.placeholder_with_default(tf.constant(1.0), [])
            cut = tf.fill([ACK_SLICE_PARAMS * ACK_SLICES], one)
        with tf.device("/job:worker/task:0"):
            total = tf.reduce_sum(tf.identity(cut))
    window = {"partition": ACK_SLICE_PARAMS, "credit": 4 * ACK_SLICE_PARAMS, "strict": True}
    spent = {"ack": 0.0, "sent": 0.0}
    sessions = {}
    try:
        for way in spent:
            sessions[way] = tf.compat.v1.Session(
                target, graph=g, config=session_config(tfsched.enable(credit_return=way, **window))
            )
            sessions[way].run(total, options=options)  # its graph set up on every task
        for _ in range(ACK_ROUNDS):
            for way, sess in sessions.items():
                before = task_cpu_s(pids)
                for _ in range(ACK_STEPS):
                    sess.run(total, options=options)
                spent[way] += task_cpu_s(pids) - before
    except tf.errors.OpError:
        dead = dead_tasks_named(dead_tasks)
        if dead:
            raise TfschedError(
                f"measuring what an acknowledgement costs: cluster task {'; '.join(dead)}"
            ) from None
        return 0.0
    finally:
        close_sessions(list(sessions.values()))
    return max(0.0, spent["ack"] - spent["sent"]) / (ACK_SLICES * ACK_ROUNDS * ACK_STEPS)


def fitted(options, slowest_s: float | None):
    """A copy of ``options`` (``RunOptions``) whose deadline fits the slowest step before it
    (``step_deadline_s``: never past the one ``options`` has; ``slowest_s`` None: that one)."""
    out = type(options)()
    out.CopyFrom(options)
    limit_s = options.timeout_in_ms / 1000 if options.timeout_in_ms > 0 else None
    out.timeout_in_ms = deadline_ms(step_deadline_s(limit_s, slowest_s))
    return out


def _solo_trace(tf, sess, built, trace_options, meta: dict):
    """``SOLO_STEPS`` traced steps of worker 0's session ``sess``, the other workers idle."""
    mds = []
    for _ in range(SOLO_STEPS):
        mds.append(tf.compat.v1.RunMetadata())
        sess.run(built.train_op, options=trace_options, run_metadata=mds[-1])
    return trace_of(mds, built.graph, {"mode": "baseline", "worker": 0, "alone": True, **meta})


def _trace_alone(
    tf,
    sessions: dict,
    target: str,
    builder,
    warmup: int,
    run_options,
    trace_options,
    *,
    baseline: str = "baseline",
    initialize: bool = True,
):
    """Worker 0 traced alone under vanilla TensorFlow (``_solo_trace``) after ``warmup`` (at least
    one) untraced steps: in the session of mode ``baseline`` if there is one, else in a session
    of its own on ``builder``'s graph (which initializes the variables if ``initialize``: no
    session of that graph did yet)."""
    own = (baseline, 0) not in sessions
    if own:
        built = builder(0)
        sess = tf.compat.v1.Session(target, graph=built.graph, config=session_config())
    else:
        sess, built = sessions[(baseline, 0)]
    try:
        if own and initialize:
            sess.run(built.init_op, options=run_options)
        slowest = None  # each step's deadline fits the steps before it
        for _ in range(max(1, warmup)):
            t = time.perf_counter()
            sess.run(built.train_op, options=fitted(run_options, slowest))
            slowest = max(slowest or 0.0, time.perf_counter() - t)
        meta = {"mode": baseline, "for": "ordering"}
        return _solo_trace(tf, sess, built, fitted(trace_options, slowest), meta)
    finally:
        if own:
            sess.close()


def run_side_by_side(
    targets: list[str],
    builder: Callable[[int], object],
    configs: dict,
    *,
    steps: int = 10,
    warmup: int = 2,
    rounds: int = 2,
    trace: bool = False,
    trace_steps: int = 1,
    step_timeout_s: float = 600.0,
    progress: Callable[[str], None] | None = None,
    dead_tasks: Callable[[], list[str]] | None = None,
    step_log: list[StepRecord] | None = None,
    done: Callable[[int, int], None] | None = None,
    log_tasks=(),
    builders: dict[str, Callable[[int], object]] | None = None,
    tasks: dict[int, str] | None = None,
) -> dict[str, ModeResult]:
    """Train every mode ``rounds`` times ``steps`` steps on every worker, interleaved.

    ``progress`` is told what starts (a line of text), ``done`` how much of the run is done, as
    (parts done, parts in all): a part is a mode's round, or with ``trace`` a mode's traced
    steps (for a progress bar).

    ``configs``: mode -> session config (None: vanilla TensorFlow), or a function of a trace for
    a timing-aware order (``mode_configs``): before the rounds, worker 0 is traced alone under
    vanilla TensorFlow (``ModeResult.order_trace``) and the function gives the mode's config.

    The workers start each step together (synchronous training, as TicTac measures), so the
    straggler effect is the wait of the fastest worker. With ``trace``, ``trace_steps`` more
    synchronized steps of each mode are traced on every worker (worker 0's are
    ``ModeResult.trace``; all of them give ``ModeResult.stagger``, ``bench.stagger``), and the
    baseline's worker 0 is traced for ``SOLO_STEPS`` steps alone (``ModeResult.solo_trace``: op
    times without the other workers on the machine's cores), and then pulls every variable alone
    to measure what moving a byte and sending a tensor cost the machine
    (``ModeResult.comm_cpu_s_per_byte``, ``comm_cpu_s_per_message``). Every step has a deadline
    (``step_timeout_s``; once the worker has run steps of its mode, ``step_deadline_s`` of the
    slowest of them: behind the barrier from its next step, across it from its next round's
    runs, or once its warm-up is done): a stuck cluster or a dead task fails the run, never
    hangs it. ``dead_tasks`` (the cluster's ``TaskHandles.dead_tasks``) names the tasks that
    exited, for a failed step's error: a worker's step only sees that a peer went away. Closing
    the sessions is bounded too (a session whose PS died can wait on it forever): what has not
    closed in ``deadlines.SESSION_CLOSE_TIMEOUT_S`` is left to the cluster's exit, which stops
    every task. ``tasks``: the cluster's task processes, whose CPU is each task's
    (``TaskHandles.task_pids``; None: this process's children that are tasks, by name, which
    would count a task another cluster of this process left behind).
    ``step_log``: each worker's part of every timed step is appended to it (``StepRecord``), to
    line the steps up with what else was measured meanwhile (``bench.profile``). ``log_tasks``:
    the cluster spec or every task's address (``rpclog.task_addresses``), whose RPC logging is
    held on while steps are traced, so that the traces miss no transfer; the timed steps run
    without it.

    A mode that crosses the barrier (``crosses``) runs each step as two runs on every worker,
    two steps' compute runs at once (``tfsched.enforce.crossing.CrossingRunner``), its gates
    reset before each round's first step; step k is timed from the end of step k-1, a round's
    last step to the end of its updates. A traced step of it is its two runs, from its first op
    to its last update (``CrossingRunner.run``'s ``run_metadata``): its records overlap the next
    step's. ``bench.predict`` lays out its steps from the baseline's trace, as every mode's.

    ``builder(w)`` builds worker ``w``'s graph (``builder(w, cross=True)``, its graph split
    across the barrier, for a mode that crosses it); ``builders`` maps a placement to the builder of
    the modes named ``MODE@PLACEMENT`` (``placed_mode``): the same model with its variables
    placed otherwise, in the same rounds. Each placement's graph is initialized by its first
    session, its timing-aware modes are ordered from a trace of its own graph, and with ``trace``
    its ``baseline@PLACEMENT`` is traced alone too (what moving a byte costs the machine is
    measured once, on the first placement's baseline, and given to the others).
    """
    import tensorflow as tf

    log_tasks = task_addresses(log_tasks)
    run_options = tf.compat.v1.RunOptions(timeout_in_ms=int(step_timeout_s * 1000))
    trace_options = tf.compat.v1.RunOptions(
        timeout_in_ms=int(step_timeout_s * 1000),
        trace_level=tf.compat.v1.RunOptions.FULL_TRACE,
        output_partition_graphs=True,
    )

    if steps <= 0 or rounds <= 0 or trace_steps <= 0:
        raise TfschedError("steps, rounds and traced steps must be positive")
    results = {mode: ModeResult(mode) for mode in configs}
    from tfsched.bench.profile import task_processes, tasks_cpu_s

    # the cluster's task processes: ``tasks``, else this process's children that are tasks
    procs = task_processes() if tasks is None else tasks
    # One graph and session per (mode, worker), kept for all rounds: what a user's job does.
    sessions = {}
    runners = {}  # (mode, worker) -> CrossingRunner, for the modes across the barrier

    slowest_step: dict[tuple[str, int], float] = {}  # (mode, worker) -> its slowest step so far

    def builder_of(mode: str):
        where = split_placed(mode)[1]
        return builder if where is None else (builders or {})[where]

    def synchronized(
        mode: str, n: int, warm: int, traced: bool = False, round_: int | None = None
    ) -> tuple[list, float, object]:
        """``n`` steps of ``mode`` on every worker, each step started together (the steps of round
        ``round_`` go to ``step_log``)."""
        times: list[tuple[int, int, float]] = []
        errors: list[BaseException] = []
        lock = threading.Lock()
        started: list[float] = []
        barrier = threading.Barrier(len(targets))
        box: dict = {}
        cpu: list = []
        task_cpu: list = []  # each task's CPU seconds at the first step

        def work(w: int) -> None:
            sess, built = sessions[(mode, w)]
            runner = runners.get((mode, w))
            try:
                if runner is not None:
                    crossing(w, runner)
                    return
                # each step's deadline fits the mode's steps before it: a dead task fails the run soon
                slowest = slowest_step.get((mode, w))
                for _ in range(warm):
                    t = time.perf_counter()
                    sess.run(built.train_op, options=fitted(run_options, slowest))
                    slowest = slowest_step[(mode, w)] = max(slowest or 0.0, time.perf_counter() - t)
                for k in range(n):
                    if barrier.wait(timeout=step_timeout_s) == 0 and k == 0:
                        started.append(time.perf_counter())
                        cpu.append(cpu_seconds())
                        task_cpu.append(tasks_cpu_s(procs))
                    md = tf.compat.v1.RunMetadata() if traced else None
                    t, mono = time.perf_counter(), time.monotonic()
                    options = fitted(trace_options if md else run_options, slowest)
                    sess.run(built.train_op, options=options, run_metadata=md)
                    dt = time.perf_counter() - t
                    slowest = slowest_step[(mode, w)] = max(slowest or 0.0, dt)
                    with lock:
                        times.append((w, k, dt))
                        if step_log is not None and round_ is not None:
                            step_log.append(StepRecord(mode, round_, k, w, mono, time.monotonic()))
                        if md is not None:
                            box.setdefault("steps", {}).setdefault(k, {})[w] = md
                            box.setdefault("graphs", {})[w] = built.graph
            except BaseException as e:  # noqa: BLE001 - re-raised below
                barrier.abort()
                errors.append(e)
                if runner is not None:
                    # its failed run closed its session (CrossingRunner.run), but the other
                    # workers' reads wait on its updates: closing the mode's sessions cancels them
                    # (on a thread: a session to a dead task may take long to close, and the
                    # run's own close_sessions bounds that wait)
                    mode_sessions = [sessions[(mode, v)][0] for v in range(len(targets))]
                    threading.Thread(target=close_sessions, args=(mode_sessions,), daemon=True).start()

        def intervals(t0: float, ends: list[float]) -> list[float]:
            """Each step's time, from the end before it (``t0`` for the first) to its own."""
            return [end - last for last, end in zip([t0, *ends], ends)]  # noqa: B905 - one more start

        def note_slowest(w: int, step_s: list[float]) -> None:
            slowest_step[(mode, w)] = max([slowest_step.get((mode, w), 0.0), *step_s])

        def crossing(w: int, runner) -> None:
            """A mode across the barrier: its steps pipelined (CrossingRunner.run), a round's
            steps from an empty pipeline; the reads' gates keep the workers in step, as the
            barrier does behind it. Step k is the time from step k-1's end (a compute run's) to
            its own; a round's last step ends with its updates."""
            # every run's deadline fits the mode's steps before it, its warm-up's or its rounds'
            # (a run may hold two steps' intervals: step_deadline_s's slack covers that many
            # times over)
            runner.options = fitted(run_options, slowest_step.get((mode, w)))
            runner.prime()  # every worker's gates reset before any worker steps
            barrier.wait(timeout=step_timeout_s)
            if warm:
                tw = time.perf_counter()
                note_slowest(w, intervals(tw, runner.run(warm)))
                runner.options = fitted(run_options, slowest_step[(mode, w)])
            if barrier.wait(timeout=step_timeout_s) == 0:
                started.append(time.perf_counter())
                cpu.append(cpu_seconds())
                task_cpu.append(tasks_cpu_s(procs))
            t0, mono0 = time.perf_counter(), time.monotonic()
            mds = [] if traced else None  # each step's two runs in one RunMetadata
            ends = runner.run(n, run_metadata=mds)
            note_slowest(w, intervals(t0, ends))
            with lock:
                box.setdefault("t0", {})[w] = t0
                box.setdefault("ends", {})[w] = ends
                for k, md in enumerate(mds or ()):
                    box.setdefault("steps", {}).setdefault(k, {})[w] = md
                    box.setdefault("graphs", {})[w] = sessions[(mode, w)][1].graph
            for k, (last, end) in enumerate(zip([t0, *ends[:-1]], ends, strict=True)):
                with lock:
                    times.append((w, k, end - last))
                    if step_log is not None and round_ is not None:
                        step_log.append(StepRecord(mode, round_, k, w, mono0 + last - t0, mono0 + end - t0))

        threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(len(targets))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall = time.perf_counter() - started[0] if started else 0.0
        end, tasks_end = cpu_seconds(), tasks_cpu_s(procs)
        if cpu and cpu[0] and end:
            box["cpu"] = (end[0] - cpu[0][0], end[1] - cpu[0][1])
        if task_cpu:
            box["task_cpu"] = {
                task: s - task_cpu[0][task] for task, s in tasks_end.items() if task in task_cpu[0]
            }
        if errors:
            dead = dead_tasks_named(dead_tasks)
            if dead:
                raise TfschedError(f"mode {mode}: cluster task {'; '.join(dead)}")
            raise TfschedError(f"mode {mode}: a worker failed: {cause_line(errors[0])}")
        return times, wall, box

    def open_sessions(mode: str, config) -> None:
        cross = crosses(mode)
        for w, target in enumerate(targets):
            built = builder_of(mode)(w, cross=True) if cross else builder_of(mode)(w)
            sess = tf.compat.v1.Session(target, graph=built.graph, config=session_config(config))
            sessions[(mode, w)] = (sess, built)
            if cross:
                from tfsched.enforce.crossing import CrossingRunner

                runners[(mode, w)] = CrossingRunner(sess, built.crossing, options=run_options)

    timed = [mode for mode, config in configs.items() if callable(config)]
    parts = len(configs) * (rounds + (1 if trace else 0))

    def part_done(k: int) -> None:
        if done:
            done(k, parts)

    doing = ["setting up the sessions"]  # what runs now, for a failure's one line

    def say(what: str) -> None:
        doing[0] = what
        if progress:
            progress(what)

    try:
        part_done(0)
        for mode, config in configs.items():
            if mode not in timed:
                open_sessions(mode, config)
        doing[0] = "initializing the variables"
        initialized = set()  # the placements whose graph's variables are initialized
        for (mode, _), (sess, built) in sessions.items():
            if split_placed(mode)[1] not in initialized:
                sess.run(built.init_op, options=run_options)
                initialized.add(split_placed(mode)[1])
        configs = dict(configs)  # the caller's stays as given
        for where in dict.fromkeys(split_placed(mode)[1] for mode in timed):
            on = "" if where is None else f" (variables placed {where})"
            say(f"tracing worker 0 alone: the op times of a timing-aware order{on}")
            with RpcLogging(log_tasks):
                order_trace = _trace_alone(
                    tf,
                    sessions,
                    targets[0],
                    builder_of(placed_mode("baseline", where)),
                    warmup,
                    run_options,
                    trace_options,
                    baseline=placed_mode("baseline", where),
                    initialize=where not in initialized,
                )
            initialized.add(where)
            for mode in timed:
                if split_placed(mode)[1] == where:
                    configs[mode] = configs[mode](order_trace)
                    results[mode].order_trace = order_trace
                    open_sessions(mode, configs[mode])
        for r in range(rounds):
            for mode in configs:
                say(f"round {r + 1}/{rounds}: {mode}")
                times, wall, box = synchronized(mode, steps, warmup if r == 0 else 0, round_=r)
                res = results[mode]
                busy, total = box.get("cpu", (0.0, 0.0))
                res.cpu_s += busy
                res.cpu_total_s += total
                for task, s in box.get("task_cpu", {}).items():
                    res.task_cpu_s[task] = res.task_cpu_s.get(task, 0.0) + s
                res.step_times.extend(dt for _, _, dt in times)
                for w, _, dt in times:
                    res.per_worker.setdefault(w, []).append(dt)
                if "ends" in box:  # across the barrier: each step from the last end before
                    ends = [box["ends"][w] for w in sorted(box["ends"])]
                    res.iterations.extend(steps_across(ends, min(box["t0"].values())))
                else:
                    for k in range(steps):
                        res.iterations.append([dt for _, kk, dt in sorted(times) if kk == k])
                res.wall_s += wall
                res.steps += len(times)
                res.rounds.append((len(times), wall))
                part_done(r * len(configs) + list(configs).index(mode) + 1)
        if trace:
            for mode in configs:
                say(f"tracing {trace_steps} step{'s' if trace_steps > 1 else ''}: {mode}")
                with RpcLogging(log_tasks):
                    _, _, box = synchronized(mode, trace_steps, 0, traced=True)
                traces = {
                    w: trace_of(
                        [step[w] for _, step in sorted(box["steps"].items())],
                        graph,
                        {"mode": mode, "worker": w},
                    )
                    for w, graph in sorted(box["graphs"].items())
                }
                results[mode].trace = traces.pop(0)
                results[mode].other_traces = traces
                try:
                    results[mode].stagger = traced_spreads(box["steps"])
                except TfschedError as e:  # a diagnostic: the rounds' results stand without it
                    if progress:
                        progress(f"{mode}: no table of where the workers part: {e}")
                part_done(rounds * len(configs) + list(configs).index(mode) + 1)
            bases = [m for m in configs if split_placed(m)[0] == "baseline"]
            for base_mode in bases:
                say(f"tracing worker 0 alone: {base_mode}")
                sess, built = sessions[(base_mode, 0)]
                with RpcLogging(log_tasks):
                    results[base_mode].solo_trace = _solo_trace(
                        tf,
                        sess,
                        built,
                        fitted(trace_options, slowest_step.get((base_mode, 0))),
                        {"mode": base_mode},
                    )
            if bases:
                say("measuring what moving a byte costs the machine")
                first = results[bases[0]]
                (
                    first.comm_cpu_s_per_byte,
                    first.comm_cpu_s_per_message,
                    first.comm_cpu_shares,
                    first.comm_cpu_message_shares,
                ) = _comm_cpu_costs(
                    tf,
                    targets[0],
                    builder_of(bases[0])(0),
                    fitted(run_options, slowest_step.get((bases[0], 0))),
                    procs,
                    dead_tasks,
                )
                for base_mode in bases[1:]:  # the machine's, whatever PS holds a variable
                    results[base_mode].comm_cpu_s_per_byte = first.comm_cpu_s_per_byte
                    results[base_mode].comm_cpu_s_per_message = first.comm_cpu_s_per_message
                    results[base_mode].comm_cpu_shares = first.comm_cpu_shares
                    results[base_mode].comm_cpu_message_shares = first.comm_cpu_message_shares
    except (tf.errors.OpError, TfschedError) as e:
        # one line, naming what ran and the tasks that died if the error does not yet (the
        # synchronized steps' errors name them; a call to a dead task only says it timed out)
        dead = dead_tasks_named(dead_tasks)
        if dead and not all(name in str(e) for name in dead):
            raise TfschedError(f"{doing[0]}: cluster task {'; '.join(dead)}") from None
        if isinstance(e, TfschedError):
            raise
        raise TfschedError(f"{doing[0]}: {cause_line(e)}") from None
    finally:
        close_sessions([sess for sess, _ in sessions.values()])
    return results


def host_cluster(
    *,
    ps: int,
    workers: int,
    bandwidth_bps: float | None,
    latency_s: float = 0.0,
    queue_s: float = DEFAULT_QUEUE_S,
    relays: bool = False,
    progress: Callable[[str], None] | None = None,
    inter_op_threads: int = 0,
    host_cores: float = 0.0,
    thread_spinning: bool = True,
):
    """The cluster a bench or a tuning run trains on (not started yet): each task a host with
    links of ``bandwidth_bps`` each way, emulated with namespaces (``bench.netns``, root), or
    with ``relays`` shaped on loopback in this process (``bench.relay``); None: loopback unshaped.
    ``progress`` is told what it starts; ``inter_op_threads``: how many kernels each task runs
    at a time (0: TensorFlow's default, the number of cores); ``host_cores``: the cores of its
    own each task has (``bench.hostcpu``: a CPU quota; 0: every task shares the machine's),
    checked here, before anything starts; ``thread_spinning=False``: each task's idle pool
    threads sleep at once instead of spinning first (``bench.server``)."""
    from tfsched.bench.local import LocalCluster
    from tfsched.bench.netns import EmulatedCluster

    if host_cores:
        from tfsched.bench.hostcpu import check

        check(host_cores)
    if bandwidth_bps and relays:  # as the cluster would, but before the progress line says it starts
        check_link_bandwidth(bandwidth_bps)
    elif bandwidth_bps:
        check_shaping(bandwidth_bps, queue_s)
        check_hosts(ps, workers)
    if progress:
        where = f"hosts shaped to {bandwidth_bps / 1e9:g} Gbit/s" if bandwidth_bps else "loopback"
        where += " by relays on loopback" if bandwidth_bps and relays else ""
        if host_cores:
            from tfsched.bench.hostcpu import describe

            where += f", {describe(host_cores)}"
        progress(f"starting {ps} PS and {workers} worker processes ({where})")
    if bandwidth_bps and not relays:
        return EmulatedCluster(
            ps=ps,
            workers=workers,
            bandwidth_bps=bandwidth_bps,
            latency_s=latency_s,
            queue_s=queue_s,
            inter_op_threads=inter_op_threads,
            host_cores=host_cores,
            thread_spinning=thread_spinning,
        )
    return LocalCluster(
        ps=ps,
        workers=workers,
        bandwidth_bps=bandwidth_bps or None,
        latency_s=latency_s,
        inter_op_threads=inter_op_threads,
        host_cores=host_cores,
        thread_spinning=thread_spinning,
    )


def cluster_side_by_side(
    model: str = "seq32",
    *,
    workers: int = 2,
    ps: int = 1,
    modes: tuple[str, ...] = ("baseline", "tio"),
    steps: int = 10,
    rounds: int = 2,
    batch_size: int = 4,
    image_size: int | None = None,
    bandwidth_bps: float | None = None,
    latency_s: float = 0.0,
    queue_s: float = DEFAULT_QUEUE_S,
    mode: str = "train",
    measure: bool = True,
    trace_steps: int = 1,
    progress: Callable[[str], None] | None = None,
    step_log: list[StepRecord] | None = None,
    relays: bool = False,
    done: Callable[[int, int], None] | None = None,
    ps_placement: str | tuple[str, ...] = "bytes",
    inter_op_threads: int = 0,
    moving_averages: bool = True,
    host_cores: float = 0.0,
    thread_spinning: bool = True,
) -> dict[str, ModeResult]:
    """Side by side on an emulated multi-host cluster (``bandwidth_bps`` given) or on loopback.

    The hosts' links are shaped with namespaces and ``tc`` (``bench.netns``, root needed), or
    with ``relays`` by user-space relays on loopback (``bench.relay``: latency, but no queue
    setting).

    With ``measure`` (and a baseline), ``trace_steps`` steps of every mode are traced at the end
    and each mode gets its measured ordering efficiency and the simulator's prediction
    (``bench.predict``); ``step_log`` and ``done`` as ``run_side_by_side``'s.
    ``queue_s``: the most of the link's time each emulated link queues. ``ps_placement``:
    ``build_graph``'s, how the model's variables are spread over ``ps`` PS tasks; several
    (a tuple) run every mode on each placement's graph in the same rounds, the first's modes
    under their names, the others' as ``MODE@PLACEMENT`` (``placed_mode``), each predicted on
    its own graph from its own baseline's traces. ``inter_op_threads``: how many kernels each
    task runs at a time, ``host_cores`` the cores of its own each task has, ``thread_spinning``
    whether its idle pool threads spin before they sleep (``host_cluster``'s: every mode, the
    baseline too, runs on these tasks).
    ``moving_averages``: ``build_graph``'s (a training step updates its batch normalization's
    moving statistics).
    """
    from tfsched.bench.netns import check_latency
    from tfsched.models import build_graph

    placements = (ps_placement,) if isinstance(ps_placement, str) else tuple(ps_placement)
    if not placements or len(set(placements)) != len(placements):
        raise TfschedError(f"the placements must be distinct and at least one (got {', '.join(placements)})")
    if len(placements) > 1 and ps < 2:
        raise TfschedError("several placements need at least 2 PS")
    if bandwidth_bps and not relays:
        check_latency(latency_s)  # before the graphs are built

    if mode != "train" and any(crosses(m) for m in modes):
        raise TfschedError(f"a mode that crosses the barrier between training steps: {mode} has none")

    def builder_placed(where: str):
        def builder(w: int, cross: bool = False):
            built = build_graph(
                model,
                worker_task=w,
                ps_tasks=ps,
                batch_size=batch_size,
                image_size=image_size,
                mode=mode,
                ps_placement=where,
                cross_workers=workers if cross else 0,
                moving_averages=moving_averages,
            )
            if built.train_op is None:  # inference: a step is the forward pass
                built.train_op = built.loss
            return built

        return builder

    # per placement (None: the first, whose modes keep their names): its graph's file, its
    # worker 0 graph's fetches, the most parameters one of its channels carries
    saved: dict[str | None, tuple[str, list[str], int]] = {}
    with tempfile.TemporaryDirectory(prefix="tfsched-bench-") as d:
        from tfsched.analysis import least_acknowledged
        from tfsched.graph import load_comm_graph

        per_placement = {}
        specs: dict[str, ModeSpec] = {}  # MODE or MODE@PLACEMENT -> its settings
        for i, where in enumerate(placements):
            key = None if i == 0 else where
            graph_path = os.path.join(d, f"{model}.pb" if key is None else f"{model}-{where}.pb")
            first = builder_placed(where)(0)
            with open(graph_path, "wb") as f:
                f.write(first.graph_def().SerializeToString())
            # +pc is sized for the model's busiest channel (enforce.link_sizes), as bench.predict sizes it
            comm = load_comm_graph(graph_path, fetches=first.fetches)
            channel_params = comm.busiest_channel_params
            saved[key] = (graph_path, first.fetches, channel_params)
            # each mode's settings, sized for this placement's busiest channel; a +wN window that
            # would hold none of its pushes is refused before any cluster starts
            for m in modes:
                spec = specs[placed_mode(m, key)] = parse_mode(m, bandwidth_bps, channel_params)
                if spec.push_credit and not acknowledged_pushes(comm, spec):
                    share = spec.effective_ack_share
                    raise TfschedError(
                        f"mode {m!r}: +w{spec.push_credit} would hold no push of {model}: its pushes "
                        f"are all under the {least_acknowledged(spec.credit, share):,} parameters the "
                        f"credit acknowledges (credit / {share})"
                        + (
                            f" once cut into +p{spec.partition} slices of equal size"
                            if spec.partition
                            else ""
                        )
                        + "; lower the credit or raise +aN"
                    )
            per_placement[key] = mode_configs(
                modes, graph_path, first.fetches, bandwidth_bps=bandwidth_bps, channel_params=channel_params
            )
        # each mode on every placement next to each other: baseline, baseline@held, tio, ...
        configs = {placed_mode(m, key): per_placement[key][m] for m in modes for key in per_placement}
        if relays and queue_s != DEFAULT_QUEUE_S:
            raise TfschedError("the queue is the emulated links' shaper's; the loopback relays have none")
        cluster = host_cluster(
            ps=ps,
            workers=workers,
            bandwidth_bps=bandwidth_bps,
            latency_s=latency_s,
            queue_s=queue_s,
            relays=relays,
            progress=progress,
            inter_op_threads=inter_op_threads,
            host_cores=host_cores,
            thread_spinning=thread_spinning,
        )
        with cluster:
            targets = [cluster.target("worker", w) for w in range(workers)]
            results = run_side_by_side(
                targets,
                builder_placed(placements[0]),
                configs,
                steps=steps,
                rounds=rounds,
                trace=measure,
                trace_steps=trace_steps,
                progress=progress,
                dead_tasks=cluster.dead_tasks,
                tasks=cluster.task_pids(),
                step_log=step_log,
                done=done,
                log_tasks=cluster.spec,
                builders={where: builder_placed(where) for where in placements[1:]},
            )
            if measure and any(acknowledges(specs[name]) for name in results):
                # the machine's, as the baselines keep what a message costs
                from tfsched.graph._tf import import_tensorflow

                if progress:
                    progress("measuring what an acknowledgement costs")
                per_ack = ack_cpu_s(
                    import_tensorflow(), targets[0], pull_ends(cluster.task_pids()), cluster.dead_tasks
                )
                for name, res in results.items():
                    if split_placed(name)[0] == "baseline":
                        res.ack_cpu_s = per_ack
        for name, res in results.items():
            if specs[name].algorithm is not None:
                res.knobs = specs[name].knobs
        if measure and any(specs[name].partition for name in results):
            # the machine's, as the baselines keep what moving a byte costs
            from tfsched.graph._tf import import_tensorflow

            if progress:
                progress("measuring what putting a cut tensor back together costs")
            per_byte = copy_cpu_s_per_byte(import_tensorflow())
            for name, res in results.items():
                if split_placed(name)[0] == "baseline":
                    res.copy_cpu_s_per_byte = per_byte
        if measure:
            from tfsched.bench.predict import annotate

            if progress:
                progress("simulating every mode with the measured times")
            for key, (graph_path, fetches, _) in saved.items():
                annotate(
                    {split_placed(n)[0]: r for n, r in results.items() if split_placed(n)[1] == key},
                    graph_path=graph_path,
                    fetches=fetches,
                    workers=workers,
                    bandwidth_bps=bandwidth_bps,
                    latency_s=latency_s,
                    inter_op_threads=inter_op_threads or None,
                    host_cores=host_cores,
                )
        return results


def local_side_by_side(model: str = "seq32", **kwargs) -> dict[str, ModeResult]:
    """A local multi-process cluster on loopback, every mode interleaved."""
    return cluster_side_by_side(model, bandwidth_bps=None, **kwargs)
