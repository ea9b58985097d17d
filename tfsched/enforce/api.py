"""What users call: ``enable`` (one line in the session config) and ``start_server``."""

from __future__ import annotations

import os

from tfsched.deadlines import SESSION_CALL_TIMEOUT_S
from tfsched.errors import TfschedError, cause_line
from tfsched.graph.devices import check_job_name, check_task_devices, task_of

# the pass's defaults (scheduler.h) and how the credit comes back (the pass's credit_return): the
# receiver's acknowledgement, or the sender's transport done with the tensor
from tfsched.sim.engine import DEFAULT_ACK_SHARE, check_ack_share, check_credit_return, check_host_order
from tfsched.units import check_seconds, is_count

OPTIMIZER_NAME = "TfschedScheduler"
DEFAULT_TIMEOUT_MS = 60_000
# a gate's longest timeout (cc/gate.h kMaxTimeoutMs, about 31.7 years): its deadline in the
# clock's nanoseconds must fit an int64; 0 is no limit
MAX_TIMEOUT_MS = 10**12
STAT_NAMES = (
    "released",
    "waited",
    "timeouts",
    "cancelled",
    "live_steps",
    "wait_us",
    "acked",  # credit returns: acknowledged transfers, or sent ones with credit_return="sent"
    "peak_in_flight",
    "live_credit",
    "armed_late",  # gates whose turn came on another thread while they armed their wait
    "steps",  # per-step states made: one per step and sending task
)
# ByteScheduler's defaults for parameter servers (§4.2), in parameters.
DEFAULT_PARTITION = 1_000_000
DEFAULT_CREDIT = 4_000_000
# The link those defaults are kept for: on a faster one, link_sizes scales them.
REFERENCE_BANDWIDTH_BPS = 1e9
# The fastest link they are sized for, a petabit a second (cc/scheduler.cc kMaxSizesBandwidthBps):
# past it the sizes outgrow an int64 (from about 9.2e21 bit/s) and the pass's float (3.4e38),
# and no link is that fast. Until the hundred-and-seventh session 1e300 made sizes of 300 digits
# here and an infinite bandwidth in the pass's config.
MAX_SIZES_BANDWIDTH_BPS = 1e15
# link_sizes keeps the credit at 1 Gbit/s to at most this share of what a channel carries in a step
CHANNEL_CREDIT_SHARE = 4
# and never under this (cc/scheduler.cc kMinAckedElements: smaller tensors are not acknowledged)
MIN_CREDIT = 16_384
ENV_PARTITION = "TFSCHED_PARTITION"
ENV_CREDIT = "TFSCHED_CREDIT"
# A partition or credit of "auto" reaches the pass as this: it sizes it for the graph it rewrites
# (cc/scheduler.cc AutoSizes, the rule of link_sizes over the busiest channel it finds).
AUTO = -1


def _knob(name: str, value, env: str) -> int:
    """A partition or credit setting: the parameter if given, else the environment variable, else 0
    (off); ``"auto"`` is ``AUTO``.

    The one place where TFSCHED_PARTITION and TFSCHED_CREDIT are read (ByteScheduler's
    BYTESCHEDULER_PARTITION / BYTESCHEDULER_CREDIT); a parameter always wins.
    """
    import os

    source = name
    if value is None:
        raw = os.environ.get(env)
        if raw is None or raw.strip() == "":
            return 0
        source = f"environment variable {env}"
        if raw.strip() == "auto":
            return AUTO
        try:
            value = int(raw.strip().replace("_", ""))
        except ValueError:
            raise TfschedError(f"{source}={raw!r}: expected a number of parameters or auto") from None
    if value == "auto":
        return AUTO
    if not is_count(value):
        raise TfschedError(
            f"{source} must be a whole number of parameters (0 to 2**63-1) or 'auto', got {value!r}"
        )
    return value


def link_sizes(bandwidth_bps: float | None = None, channel_params: int | None = None) -> tuple[int, int]:
    """(partition, credit) in parameters: ByteScheduler's defaults, kept to the model and the link.

    Two improvements over ByteScheduler's fixed sizes (partition 1,000,000, credit 4,000,000):

    * **The model.** A credit as large as what a channel carries in a step releases the whole
      step at once and orders nothing: the Transformer encoder's 3,210,762 parameters a channel
      fit in ByteScheduler's credit. Given ``channel_params``, the most parameters one channel
      carries in a step (``CommGraph.busiest_channel_params``), the credit at 1 Gbit/s is at most
      a ``1 / CHANNEL_CREDIT_SHARE`` of it (and ``MIN_CREDIT``), and the partition at most the
      credit. ResNet-50, Inception-v3, VGG16 and AlexNet (21.8M parameters a channel and more)
      keep ByteScheduler's sizes; the Transformer's row (batch 21, whose embedding gradient
      adds to its pushes) gets 881,186. Measured in BENCHMARKS.md (transformer-train, against
      vanilla TensorFlow in the same runs): ByteScheduler's sizes 1.02x (eighteenth session),
      these 1.11x and with one window per task 1.22x (twenty-second session). On MobileNet
      (3.2M parameters, a model the share was not chosen on; mobilenet-train, three runs of the
      twenty-third session): these (809,778) 1.07x, 1.05x and 1.11x, ByteScheduler's 0.95x,
      0.99x and 1.05x.
    * **The link.** A slice and an acknowledged tensor each cost about the same CPU and messages
      whatever the link, so at 10 Gbit/s a 1,000,000-parameter slice (3.2 ms on the wire) and a
      4,000,000-parameter window (13 ms) cost ten times their share at 1 Gbit/s. Above
      ``REFERENCE_BANDWIDTH_BPS`` (1 Gbit/s) both sizes grow with the bandwidth, so each keeps
      the link time it has at 1 Gbit/s; at or below it (or when the link is not known) they are
      the 1 Gbit/s sizes, never smaller. Measured in BENCHMARKS.md (ResNet-50 at 10 Gbit/s, two
      runs against vanilla TensorFlow): the fixed sizes 0.958x and 0.961x, the scaled sizes
      0.983x and 1.030x, TAO alone 0.993x and 1.054x.

    The pass applies the same rule to a partition or credit of ``"auto"`` (cc/scheduler.cc
    ``AutoSizes``, over the busiest channel of the graph it rewrites).

    >>> link_sizes(), link_sizes(10e9), link_sizes(channel_params=3_210_762)
    ((1000000, 4000000), (10000000, 40000000), (802690, 802690))
    """
    if bandwidth_bps is not None and (
        isinstance(bandwidth_bps, bool)
        or not isinstance(bandwidth_bps, (int, float))
        or not 0 < bandwidth_bps <= MAX_SIZES_BANDWIDTH_BPS
    ):
        raise TfschedError(
            f"bandwidth must be a positive number of bits/s, at most 1e15 (a petabit a second), got {bandwidth_bps!r}"
        )
    if channel_params is not None and not is_count(channel_params):
        raise TfschedError(
            f"channel_params must be a non-negative integer (parameters), got {channel_params!r}"
        )
    credit = DEFAULT_CREDIT
    if channel_params is not None:
        credit = min(credit, max(MIN_CREDIT, channel_params // CHANNEL_CREDIT_SHARE))
    partition = min(DEFAULT_PARTITION, credit)
    scale = max(1.0, (bandwidth_bps or REFERENCE_BANDWIDTH_BPS) / REFERENCE_BANDWIDTH_BPS)
    return round(partition * scale), round(credit * scale)


def resolve_knobs(partition=None, credit=None) -> tuple[int, int]:
    """(partition, credit) in parameters from the arguments or the environment; 0 means off,
    ``AUTO`` sized by the pass for its graph."""
    return _knob("partition", partition, ENV_PARTITION), _knob("credit", credit, ENV_CREDIT)


def schedule_priorities(schedule: dict) -> list[str]:
    """``sender|receiver|key|priority`` lines for the pass, from a ``tfsched.schedule/1`` document."""
    lines = []
    for ch in schedule.get("channels", []):
        for t in ch["transfers"]:
            if t["kind"] == "control":
                continue  # control edges carry no tensor and are not gated
            lines.append(f"{ch['sender']}|{ch['receiver']}|{t['key']}|{t['priority']}")
    return lines


def match_schedule(
    schedule: dict, graph_def, fetches: list[str] | None, path: str, ps_job: str = "ps"
) -> tuple[int, int]:
    """How many of a graph's data transfers the schedule names: (matched, total)."""
    from tfsched.graph import build_comm_graph
    from tfsched.graph.load import nodes_from_graph_def, output_specs
    from tfsched.ordering import priority_of

    source = f"the graph checked against {path}"
    g = build_comm_graph(
        nodes_from_graph_def(graph_def, source),
        fetches=fetches or schedule.get("graph", {}).get("fetches") or None,
        source=source,
        output_specs=output_specs,
        ps_jobs=(ps_job,),
    )
    exact, by_ps = {}, {}
    for ch in schedule["channels"]:
        ps_side = ch["sender"] if f"/job:{ps_job}/" in ch["sender"] else ch["receiver"]
        for t in ch["transfers"]:
            exact[(ch["sender"], ch["receiver"], t["key"])] = by_ps[(ps_side, t["key"])] = t["priority"]
    data = [t for t in g.transfers if t.kind != "control"]
    # matched as the pass matches them (a merged push by the variables it updates)
    matched = sum(
        priority_of(t, exact, by_ps, t.src_task if t.src_task in g.ps_tasks else t.dst_task) is not None
        for t in data
    )
    return matched, len(data)


def _fetch_names(fetches) -> list[str]:
    """``enable``'s ``fetches`` as names: one op or tensor name, a ``tf.Operation`` or
    ``tf.Tensor`` (``tf.Variable``), or a list of them, as ``Session.run`` takes them. Until the
    hundred-and-nineteenth session a name was read letter by letter ("fetch 't' is not in the
    graph") and an op raised an AttributeError."""
    items = fetches if isinstance(fetches, list | tuple) else [fetches]
    names = []
    for f in items:
        name = f if isinstance(f, str) else getattr(f, "name", None)  # (an EagerTensor has none)
        if not isinstance(name, str) or not name:
            raise TfschedError(
                f"fetches must be op or tensor names, tf.Operations or tf.Tensors (or a list of them), got {f!r}"
            )
        names.append(name)
    return names


def _graph_def(graph):
    """``enable``'s ``graph``: a tf.Graph's GraphDef, or the GraphDef given."""
    from tfsched.graph._tf import import_tensorflow

    if hasattr(graph, "as_graph_def"):
        return graph.as_graph_def()
    if isinstance(graph, import_tensorflow().compat.v1.GraphDef):
        return graph
    raise TfschedError(f"graph must be a tf.Graph or a GraphDef, got {type(graph).__name__}")


def enable(
    config=None,
    *,
    schedule: str | None = None,
    algorithm: str = "tio",
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ps_job: str = "ps",
    graph=None,
    fetches: list[str] | None = None,
    strict: bool = False,
    partition: int | None = None,
    credit: int | None = None,
    host_credit: bool = False,
    host_order: str = "steps",
    ack_share: int | None = None,
    credit_return: str = "ack",
    push_credit: int | None = None,
    inline_transfers: bool = True,
    bandwidth_bps: float | None = None,
    dump_graphs: str | None = None,
    ready: bool = False,
    ack_group: int | None = None,
):
    """Turn tfsched's pass on in a session config; returns the config (a new one if none given).

    Parameters
    ----------
    config : tf.compat.v1.ConfigProto to extend (it is modified and returned). The pass gates on
        Grappler's last iteration, whose number it takes from the config's
        ``graph_options.rewrite_options.meta_optimizer_iterations`` now: set that first (set
        after, more iterations are an error of the pass, which fails a ``strict`` session, and
        fewer leave the graph ungated, which the pass logs).
    schedule : a ``tfsched analyze -o`` file; without one the pass orders by TIO itself.
    algorithm : ``tio`` (no schedule needed) or the algorithm of the schedule file.
    timeout_ms : the longest a gate waits before it lets its tensor go (0: no limit; at most
        ``MAX_TIMEOUT_MS``, about 31.7 years).
    graph : optionally the tf.Graph or GraphDef the session will run: the schedule is checked
        against it now, and a schedule made for another graph is an error here, not at run time.
    fetches : with ``graph``, what a step of it runs, as ``Session.run`` takes it: an op or
        tensor, its name, or a list of them (default: the schedule's fetches, else the graph's
        ``train_op`` collection or sinks).
    strict : make any error of the pass fail the session (default: TensorFlow logs it and runs the
        graph unscheduled).
    partition : split transfers larger than this many parameters into slices that are gated one
        by one (ByteScheduler's partitioning; ``DEFAULT_PARTITION`` is its 1,000,000), or
        ``"auto"``: the pass sizes it for the graph it rewrites and ``bandwidth_bps``, by
        ``link_sizes``' rule. Default: ``$TFSCHED_PARTITION`` (a number or ``auto``), else off.
    credit : at most this many parameters released and not yet acknowledged per channel
        (ByteScheduler's credit; ``DEFAULT_CREDIT`` is its 4,000,000; ``link_sizes`` keeps both
        sizes to the model and the link), or ``"auto"``, as ``partition``. Default:
        ``$TFSCHED_CREDIT`` (a number or ``auto``), else off. ``set_credit`` changes it while
        training runs.
    bandwidth_bps : the link, in bits/s, for sizes ``"auto"`` (default: 1 Gbit/s's sizes).
    host_credit : make the credit one window per sending task instead of one per channel, and serve
        the workers' steps in the order they reach the task: a PS then sends one worker its
        parameters after the other, so the first computes and pushes while the next pulls (an
        improvement over ByteScheduler, measured in BENCHMARKS.md). Needs ``credit``.
    host_order : with ``host_credit``, what the window serves first: ``"steps"`` (default), the
        oldest step's tensors, as above; or ``"priority"``, every step's highest-priority tensor
        (ties: the oldest step's), so that the workers pull in lockstep and their pulls end
        together, without the overlap of serving them in turn. Measured on VGG16 training
        (BENCHMARKS.md): no gain (1.006x, 0.997x), and the straggler effect not reliably lower
        (0.050 against 0.103, then 0.097 against 0.110); not for speed. With ``push_credit``
        the workers' pushes end together too.
    ack_share : the credit acknowledges transfers of at least ``credit / ack_share`` parameters
        (and 16,384); the smaller ones are ordered but released without waiting for credit, so
        they race for the wire (each acknowledgement is one more RPC). Default
        ``DEFAULT_ACK_SHARE`` (8); a larger share keeps a model of many small tensors
        (Inception-v3) in order (measured in BENCHMARKS.md). Needs ``credit``.
    credit_return : ``"ack"`` (default): the receiver acknowledges each counted transfer, one small
        RPC each (ByteScheduler's); ``"sent"``: the credit comes back when the sender's transport
        is done with the tensor, with no acknowledgement (an improvement over ByteScheduler, which
        saves the acknowledgements' CPU; it does not count the bytes already queued in the
        sender's socket). Tensors of other than plain data types (strings) are then not counted.
        Needs ``credit``. With ``credit=1`` a channel has one tensor in flight: each gate waits
        until gRPC has let go of the one before it, not just until that one was released into the
        rendezvous, close to where TicTac enforces its order (§5: at the hand-off to gRPC);
        tensors under 16,384 parameters still go as their turn comes. Where the sender is idle
        its gates otherwise release every tensor within milliseconds, and on the wire they
        interleave: VGG16 inference (1 PS x 4 workers, 1 Gbit/s) made 1.37x vanilla's
        throughput with TIO so held against 1.05x with TIO alone,
        TAO 1.39x against 1.05x, and 1.26x against 1.17x through TensorFlow 2's functions
        (BENCHMARKS.md, "One tensor in flight").
    ack_group : at most this many consecutive acknowledged slices on a channel share one
        acknowledgement (default 1: one each, ByteScheduler's): a tensor's slices, and after them
        the next tensors' on the channel. The group's first slice takes the credit of all of
        them, the others go in their turn without waiting for credit, and the last one's arrival
        returns the whole group's. Each acknowledgement is an RPC of its own (about 0.4 ms of CPU
        at its two ends here): ResNet-50 with ByteScheduler's sizes sends 120 a step, 32 with
        ``ack_group=4`` and 20 to 22 with 8; at 10 Gbit/s, eight made 0.964x to 1.013x of
        vanilla TensorFlow's throughput, pooled 0.991x, against 0.945x to 0.987x one each in the
        same twelve runs (an improvement over ByteScheduler; BENCHMARKS.md, "Acknowledgement
        groups across tensors" and "Groups of eight decided"). A group is never more than the credit holds, only channels that keep their
        order group (not ``ready``, not a schedule's queued pushes), a tensor that shares its
        priority stands alone, and under ``host_credit`` a group stays within its tensor. Needs
        ``credit`` and ``credit_return="ack"``.
    push_credit : the window of the pushes (a worker's gradients to a PS), in parameters, in place
        of ``credit``, which the PS's pulls keep; what is acknowledged is still ``credit /
        ack_share``'s, so give ``partition`` and ``ack_share`` that make the pushes' slices at
        least that. A window that holds about one slice evens out the workers' pushes through the
        PS's one downlink, where TCP shares it unevenly: VGG16 training in lockstep (1 PS x 4
        workers, 1 Gbit/s, 4 inter-op threads a task) with ``partition=250_000, credit=4_000_000,
        ack_share=32, push_credit=250_000, host_credit=True, host_order="priority"`` had the
        straggler effect 2.8, 3.2 and 4.1 times lower than vanilla TensorFlow's at 0.998x to 1.005x
        its throughput with the same window set live (``set_credit`` on the workers), and 3.4 and
        4.0 times lower at 0.979x and 1.006x with this setting (BENCHMARKS.md); with one inter-op
        thread per core, TensorFlow's default, at 0.850x, before transfers were inline: each
        acknowledgement's credit waited for a thread behind the backward pass's kernels
        (``inline_transfers``). Needs ``credit``.
    inline_transfers : a released gate puts its tensor in the rendezvous itself, and an
        acknowledgement returns its credit as it arrives, on the thread that has it in hand (an
        improvement over TensorFlow's ``_Send``/``_Recv``, after which both waited for an inter-op
        thread of their task, behind kernels: up to 345 ms in VGG16 training's backward pass,
        measured in BENCHMARKS.md). The graph's ops and names stay TensorFlow's (a
        ``POST_PARTITIONING`` pass in every task gives its ``_Send``/``_Recv`` a kernel label).
        ``False`` keeps TensorFlow's, for comparison.
    ready : every channel's gates, pulls too, served highest priority first among the tensors
        that have arrived (ByteScheduler's Core), not each in its turn (TicTac's counters). For
        steps across TensorFlow's barrier (``tfsched.enforce.crossing``), where a pull is ready
        once its variable's last update is done: the first layer's, updated last, would hold
        every other pull behind it on a counter. With ``credit``, a pull ready late still goes
        before the lower-priority ones queued, at most a credit behind what is in flight.
    dump_graphs : a directory (made if missing; a relative path is taken from this process's
        working directory) on the host of the task that runs the pass (a session's master; for
        functions, each worker): every graph with transfers between tasks is
        written there as the pass got it, placed, ``<graph>.<worker>.pb`` (what ``tfsched analyze``
        reads, with a trace of its steps; a function's graph is named after the function), and as
        gated, ``<graph>.<worker>.gated.pb``. Each file is written whole or not at all.

    Example
    -------
    >>> config = tfsched.enable(schedule="schedule.json")  # doctest: +SKIP
    >>> sess = tf.compat.v1.Session(server.target, config=config)  # doctest: +SKIP
    >>> config = tfsched.enable(partition="auto", credit="auto")  # doctest: +SKIP
    """
    from tfsched.ordering.schedule import ALGORITHMS, load_schedule

    partition, credit = resolve_knobs(partition, credit)
    if bandwidth_bps is not None:
        if AUTO not in (partition, credit):
            raise TfschedError("bandwidth_bps sizes a partition or credit 'auto'; neither is 'auto'")
        link_sizes(bandwidth_bps)  # one error line for a bad bandwidth
    for name, flag in (
        ("host_credit", host_credit),
        ("strict", strict),
        ("inline_transfers", inline_transfers),
    ):
        if not isinstance(flag, bool):
            raise TfschedError(f"{name} must be True or False, got {flag!r}")
    check_job_name(ps_job)
    if algorithm not in ALGORITHMS:
        raise TfschedError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")
    if fetches is not None and graph is None:
        raise TfschedError("fetches choose what of graph= a step runs; give graph= too")
    graph_def = None if graph is None else _graph_def(graph)
    fetches = None if fetches is None else _fetch_names(fetches)
    if host_credit and not credit:
        raise TfschedError("host_credit needs a credit (credit=N parameters or $TFSCHED_CREDIT)")
    check_host_order(host_order, host_credit)
    if ack_share is not None:
        check_ack_share(ack_share)
        if not credit:
            raise TfschedError("ack_share needs a credit (credit=N parameters or $TFSCHED_CREDIT)")
    if check_credit_return(credit_return) != "ack" and not credit:
        raise TfschedError("credit_return needs a credit (credit=N parameters or $TFSCHED_CREDIT)")
    if ack_group is not None:
        if not is_count(ack_group, least=1):
            raise TfschedError(
                f"ack_group must be a whole number of slices (1 to 2**63-1), got {ack_group!r}"
            )
        if not credit or credit_return != "ack":
            raise TfschedError(
                "ack_group groups acknowledgements: it needs a credit (credit=N parameters or "
                "$TFSCHED_CREDIT) returned by them (credit_return='ack')"
            )
    if push_credit is not None:
        if not is_count(push_credit, least=1):
            raise TfschedError(
                f"push_credit must be a whole number of parameters (1 to 2**63-1), got {push_credit!r}"
            )
        if not credit:
            raise TfschedError(
                "push_credit needs a credit (credit=N parameters or $TFSCHED_CREDIT): it says what is acknowledged"
            )
    if dump_graphs is not None and not (isinstance(dump_graphs, str | os.PathLike) and str(dump_graphs)):
        raise TfschedError(f"dump_graphs must be a directory's path, got {dump_graphs!r}")
    if not is_count(timeout_ms, most=MAX_TIMEOUT_MS):
        raise TfschedError(
            f"timeout_ms must be a whole number of milliseconds from 0 (no limit) to {MAX_TIMEOUT_MS:.0e} "
            f"(about 31.7 years), got {timeout_ms!r}"
        )
    lines: list[str] = []
    mode = "counter"
    if schedule is not None:
        doc = load_schedule(schedule)
        if algorithm not in ("tio", doc["algorithm"]):
            raise TfschedError(f"{schedule}: the schedule is {doc['algorithm']!r}, not {algorithm!r}")
        lines = schedule_priorities(doc)
        mode = "queue" if doc["mode"] == "queue" else "counter"
        if not lines:
            raise TfschedError(f"{schedule}: the schedule has no transfers to order")
        if graph_def is not None:
            matched, total = match_schedule(doc, graph_def, fetches, schedule, ps_job)
            if matched == 0 or matched < total // 2:
                raise TfschedError(
                    f"{schedule}: the schedule matches {matched} of the {total} transfers of this graph; "
                    "it was made for another graph (run tfsched analyze on this one)"
                )
    elif algorithm != "tio":
        raise TfschedError(
            f"algorithm {algorithm!r} needs a schedule file: tfsched analyze --algorithm {algorithm} -o FILE"
        )

    if not isinstance(ready, bool):
        raise TfschedError(f"ready must be True or False, got {ready!r}")
    if ready:
        mode = "ready"
    from tfsched.enforce._loader import load_ops
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    load_ops()  # the master runs the pass: it must be registered in this process
    if config is None:
        config = tf.compat.v1.ConfigProto()
    elif not isinstance(config, tf.compat.v1.ConfigProto):
        raise TfschedError(f"config must be a tf.compat.v1.ConfigProto, got {type(config).__name__}")
    rewrite = config.graph_options.rewrite_options
    for existing in list(rewrite.custom_optimizers):
        if existing.name == OPTIMIZER_NAME:
            rewrite.custom_optimizers.remove(existing)
    opt = rewrite.custom_optimizers.add(name=OPTIMIZER_NAME)
    opt.parameter_map["timeout_ms"].i = timeout_ms
    opt.parameter_map["ps_job"].s = ps_job.encode()
    opt.parameter_map["mode"].s = mode.encode()
    opt.parameter_map["priorities"].list.s.extend(s.encode() for s in lines)
    opt.parameter_map["partition"].i = partition
    opt.parameter_map["credit"].i = credit
    opt.parameter_map["sizes_bandwidth_bps"].f = bandwidth_bps or 0.0
    opt.parameter_map["host_credit"].b = host_credit
    opt.parameter_map["host_order"].s = host_order.encode()
    opt.parameter_map["ack_share"].i = DEFAULT_ACK_SHARE if ack_share is None else ack_share
    opt.parameter_map["ack_group"].i = ack_group or 1
    opt.parameter_map["credit_return"].s = credit_return.encode()
    opt.parameter_map["push_credit"].i = push_credit or 0
    opt.parameter_map["inline_transfers"].b = inline_transfers
    # the pass gates on Grappler's last iteration (cc/scheduler.h): 0 is TensorFlow's default, two
    opt.parameter_map["iterations"].i = rewrite.meta_optimizer_iterations or 2
    if dump_graphs is not None:
        opt.parameter_map["dump_dir"].s = os.fspath(os.path.abspath(dump_graphs)).encode()
    if strict:
        rewrite.fail_on_optimizer_errors = True
    return config


def enable_functions(**kwargs):
    """Turn tfsched's pass on for the ``tf.function`` calls of this process (TensorFlow 2); returns
    the config it put in force.

    For TensorFlow 2's ``ParameterServerStrategy`` with a ``ClusterCoordinator``, or functions run
    on a cluster joined with ``tf.config.experimental_connect_to_cluster`` (under the
    coordinator's own job name, e.g. ``job_name="chief", task_index=0``). Every task is started
    with ``start_server``, as for sessions. Call it in the coordinator before the strategy is made
    (before any function runs: each thread keeps the options of its first call). The pass then
    gates the transfers of every function the workers instantiate, and the gates keep each call's
    state apart by its step id (TensorFlow 2 runs every call of a function in one step container)
    and free it when the call ends, fails or is cancelled.

    ``kwargs`` are ``enable``'s: ``algorithm="tio"`` (the default, from the graph alone),
    ``partition``, ``credit``, ``host_credit``, ``host_order``, ``ack_share``, ``credit_return``,
    ``ack_group``, ``push_credit``, ``inline_transfers``, ``bandwidth_bps``, ``timeout_ms``, ``ps_job``,
    ``strict``, ``dump_graphs``, and ``schedule`` with its ``algorithm``: a ``tfsched analyze -o`` file made from a function's
    graph as the pass got it (``dump_graphs``) and a trace of its calls (``trace_functions``). The
    schedule orders that function's transfers on every worker (each channel's by the PS's side of
    it); another function, whose transfers it names none of, is ordered by TIO.

    TensorFlow has no public setting for the functions' Grappler passes: the config goes in as the
    eager context's base config, which every thread's function-call options are made from
    (``context.context()._config``, read by ``Context.config`` since TensorFlow 2.0). A TensorFlow
    without it is one TfschedError line.

    Example
    -------
    >>> tfsched.enable_functions(partition="auto", credit="auto", host_credit=True)  # doctest: +SKIP
    >>> strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)  # doctest: +SKIP
    >>> tfsched.enable_functions(schedule="tao.json", algorithm="tao")  # doctest: +SKIP
    """
    for name in ("graph", "fetches", "config"):
        if kwargs.get(name) is not None:
            raise TfschedError(
                f"enable_functions takes no {name}: each function's graph is the one the pass gets"
            )
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    from tensorflow.python.eager import context

    ctx = context.context()
    if not hasattr(ctx, "_config") or not hasattr(ctx, "_thread_local_data"):
        raise TfschedError(
            f"TensorFlow {tf.__version__}'s eager context has no base config to add the pass to; "
            "use graph-mode sessions (tfsched.enable)"
        )
    config = tf.compat.v1.ConfigProto()
    if ctx._config is not None:
        config.CopyFrom(ctx._config)
    enable(config, **kwargs)
    for opt in config.graph_options.rewrite_options.custom_optimizers:
        if opt.name == OPTIMIZER_NAME:
            opt.parameter_map["functions"].b = True  # a schedule orders its function, TIO the others
    ctx._config = config
    ctx._thread_local_data.function_call_options = None  # this thread's are made again from it
    return config


def start_server(cluster, job_name: str, task_index: int, *, config=None, start: bool = True):
    """A ``tf.distribute.Server`` in a process that has tfsched's op and pass loaded.

    Start every task (PS and workers) with it: senders run the gates, and every task runs the
    pass that makes its transfers inline (``enable(inline_transfers=...)``). ``config`` is the
    task's (``tf.distribute.Server``'s). With ``inline_transfers=False`` and a small credit
    window give it more ``inter_op_parallelism_threads`` than cores, so that an
    acknowledgement's ``TfschedCredit`` does not wait behind kernels that block on the intra-op
    pool (measured in README, "The executor's threads"); inline, the sends, acknowledgements and
    credit returns wait for none. A task that cannot start (a job or task the cluster has not,
    its port held by another process) is one TfschedError line naming it.
    """
    from tfsched.enforce._loader import load_ops
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    load_ops()
    try:
        return tf.distribute.Server(
            cluster, job_name=job_name, task_index=task_index, config=config, start=start
        )
    except (tf.errors.OpError, TypeError, ValueError) as e:
        # one line naming the task (TensorFlow's error, an InternalError's traceback before the
        # hundred-and-nineteenth session): a job or task the cluster has not, a port in use
        task = f" {job_name}:{task_index}" if job_name is not None else ""
        raise TfschedError(f"cannot start task{task}: {cause_line(e)}") from None


def _session_target(target, what: str = "target") -> str:
    """A session's target string (``grpc://host:port``), or the string given; anything else is one
    TfschedError line naming ``what``."""
    found = target.sess_str if hasattr(target, "sess_str") else target
    if isinstance(found, bytes):  # (a Session's)
        found = found.decode(errors="replace")
    if not isinstance(found, str):
        raise TfschedError(f"{what} must be a tf.compat.v1.Session or its target string, got {target!r}")
    return found


def _side_failure(error, what: str, target: str) -> TfschedError:
    """A side session's TensorFlow error as one line: ``what``, then its cause. Until the
    hundred-and-nineteenth session a task the cluster has not, or a target that is none, was
    TensorFlow's error and traceback."""
    cause = cause_line(error)
    if cause.startswith("Cannot assign a device for operation"):
        cause = "the cluster has no such task"
    elif cause.startswith("No session factory registered"):
        cause = f"{target!r} is not a session target such as 'grpc://host:port'"
    return TfschedError(f"{what} (through {target}): {cause}")


def _side_session(target, graph, devices: list[str], timeout_s: float | None = None):
    """A session on ``target`` that sees only the tasks of ``devices`` (``device_filters``), every
    call of which (run, create, close) has a deadline (``tfsched.deadlines``).

    Without the filters the master waits at the session's creation for every task of the
    cluster (``CreateSession still waiting for response from worker``), so one task down held
    the calls about the others: ``stats`` of a live PS through worker 0 failed after 33 s
    (``DeadlineExceeded``) where worker 1 had never come up, at once where a killed worker's
    stand-in answered for it (``... is gone``), and through a master in the caller's own process
    waited over 100 s. A task of ``devices`` that does not answer still holds it so
    (``_answered`` bounds what waits on it)."""
    import tensorflow as tf

    from tfsched.deadlines import session_config

    config = session_config() if timeout_s is None else session_config(timeout_s=timeout_s)
    config.device_filters.extend(dict.fromkeys(task_of(d) for d in devices))
    return tf.compat.v1.Session(target, graph=graph, config=config)


def _answered(call, what: str, timeout_s: float):
    """``call()``'s value, or one TfschedError line saying ``what`` gave no answer within
    ``timeout_s``: ``call`` runs on a thread of its own, left behind if it never returns (a
    session whose master waits for a task that is gone cannot be ended from here)."""
    import threading

    box: dict = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as e:  # noqa: BLE001 - raised again on the caller's thread
            box["error"] = e

    thread = threading.Thread(target=run, name="tfsched-side-session", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise TfschedError(f"{what} gave no answer within {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def check_live_credit(credit) -> int:
    """``credit`` if it is a credit ``set_credit`` takes (0: the pass's), else one TfschedError."""
    if not is_count(credit):
        raise TfschedError(f"credit must be a whole number of parameters (0 to 2**63-1), got {credit!r}")
    return credit


class CreditSetter:
    """Sets the live credit on some tasks, again and again, through one side session.

    The training session is not touched (its graph may be finalized, as in
    ``MonitoredTrainingSession``): a small graph of ``TfschedSetCredit`` ops, one per task,
    runs in its own session on the same cluster.
    """

    def __init__(self, target, devices: list[str]):
        from tfsched.enforce._loader import load_ops

        devices = check_task_devices(devices)
        self._target = _session_target(target, "set_credit: the session")

        ops = load_ops()
        import tensorflow as tf

        self._what = f"set_credit: {', '.join(devices)}"
        self._graph = tf.Graph()
        with self._graph.as_default():
            self._value = tf.compat.v1.placeholder(tf.int64, [])
            self._ops = []
            for d in devices:
                with tf.device(d):
                    self._ops.append(ops.tfsched_set_credit(self._value))
        try:
            self._sess = _side_session(self._target, self._graph, devices)
        except tf.errors.OpError as e:
            raise _side_failure(e, self._what, self._target) from None

    def __call__(self, credit: int) -> None:
        import tensorflow as tf

        check_live_credit(credit)
        try:
            self._sess.run(self._ops, {self._value: credit or -1})
        except tf.errors.OpError as e:
            raise _side_failure(e, self._what, self._target) from None

    def close(self) -> None:
        self._sess.close()

    def __enter__(self) -> CreditSetter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def set_credit(target, credit: int, devices: list[str]) -> None:
    """Change the credit on the given tasks while training runs (no new training session).

    ``target`` is the training session (or its target string); ``devices`` the sending tasks, e.g.
    ``["/job:ps/task:0", "/job:worker/task:0"]``. Takes effect at the next release decision of every
    channel of those tasks; ``credit=0`` returns to the setting the pass was given. Channels the
    pass gave no credit (no acknowledgements) are not affected.
    """
    check_live_credit(credit)  # before the side session is made
    with CreditSetter(target, devices) as setter:
        setter(credit)


def stats(
    session=None, device: str | None = None, *, timeout_s: float = SESSION_CALL_TIMEOUT_S
) -> dict[str, int]:
    """Gate counters: of this process, or (with a session and a device) of the task running ``device``.

    ``live_steps`` is the number of steps whose gate state is still held: 0 between steps.
    A task's counters come through a session that sees that task alone, whatever other task of
    the cluster is down; a task that does not answer within ``timeout_s`` is one TfschedError
    line (through another task's master, whose wait for it can outlast the session's deadline:
    ``_side_session``).
    """
    from tfsched.enforce._loader import load_ops

    if session is None and device is not None:
        raise TfschedError(
            f"stats: device {device!r} is a task's, asked through a session: give session= too"
        )
    if session is not None:
        target = _session_target(session, "stats: the session")
        try:
            (device,) = check_task_devices([device])
        except TfschedError:
            raise TfschedError(
                f"stats: device must be a task's device such as '/job:ps/task:0' (with a session), got {device!r}"
            ) from None
        check_seconds(timeout_s, "stats: timeout_s")
    ops = load_ops()
    if session is None:
        values = ops.tfsched_stats().numpy()
    else:
        import tensorflow as tf

        g = tf.Graph()
        with g.as_default(), g.device(device):
            t = ops.tfsched_stats()

        def ask():
            with _side_session(target, g, [device], timeout_s) as s:
                return s.run(t)

        try:
            values = _answered(ask, f"stats: {device} (through {target})", timeout_s)
        except tf.errors.OpError as e:
            raise _side_failure(e, f"stats: {device}", target) from None
    return dict(zip(STAT_NAMES, (int(v) for v in values), strict=True))
