"""The ``tfsched`` command: thin commands over the library (sqlite-utils style).

Each command parses options, calls one library function and prints its record as a table or
``--json``. Bad input ends in one ``Error: ...`` line and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import functools
import json
import os
import sys

import click
from click.core import ParameterSource

from tfsched.bench.local import LEGACY_KERAS
from tfsched.demo import DEMO_MODES
from tfsched.errors import OutOfMemory, TfschedError
from tfsched.models.build import PS_PLACEMENTS
from tfsched.tune.coordinator import OBJECTIVES
from tfsched.tune.search import MAX_SEED
from tfsched.units import INT32_MAX

# The built-in models (tfsched.models.MODELS), listed here so that --help needs no import of them.
BUILTIN_MODELS = [
    "vgg16",
    "resnet50",
    "inception_v3",
    "alexnet",
    "transformer",
    "mobilenet",
    "seq32",
    "par32",
]


def _quiet_out_of_memory(hook):
    """``sys.unraisablehook`` without the reports of finalizers that ran out of memory: as a
    ``MemoryError`` unwinds, what it would free is still held by its traceback, and a
    ``__del__`` or a generator's close that runs then can fail too. Python reported each as
    "Exception ignored in ...", or failed to ("Exception ignored in sys.unraisablehook"),
    before the one error line (``_Group.main``) that says memory ran out."""

    if getattr(hook, "quiet_out_of_memory", False):  # main() called again in one process
        return hook

    def quiet(unraisable):
        if not isinstance(unraisable.exc_value, MemoryError):
            hook(unraisable)

    quiet.quiet_out_of_memory = True
    return quiet


class _Group(click.Group):
    def main(self, args=None, prog_name=None, **extra):
        # TensorFlow's C++ INFO logging would bury our output; users can override.
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        sys.unraisablehook = _quiet_out_of_memory(sys.unraisablehook)
        try:
            rv = super().main(args=args, prog_name=prog_name or "tfsched", standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            sys.exit(e.exit_code)
        except click.Abort:
            click.echo("Aborted.", err=True)
            sys.exit(130)
        except click.ClickException as e:
            # One line: the usage dump click prints by default buries the error.
            click.echo(f"Error: {e.format_message()}", err=True)
            sys.exit(e.exit_code)
        except TfschedError as e:
            click.echo(f"Error: {e}", err=True)
            sys.exit(1)
        except MemoryError as e:  # numpy's says how much it could not allocate; Python's, nothing
            where = f" in {e.where}" if isinstance(e, OutOfMemory) else ""
            detail = str(e).strip()
            click.echo(
                f"Error: out of memory{where}{': ' + detail if detail else ''}; ask for less (fewer "
                "--workers or --steps, a smaller model) or free some",
                err=True,
            )
            sys.exit(1)
        except RuntimeError as e:  # this process could start no thread: the limit it met, in one line
            from tfsched.limits import explain

            if explain(str(e)) == str(e):
                raise
            click.echo(f"Error: {explain(str(e))}", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


_PS_OPTION = click.option(
    "--ps",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="PS tasks of the built-in model, its variables spread over them as --ps-placement says.",
)
_PS_PLACEMENT_OPTION = click.option(
    "--ps-placement",
    type=click.Choice(PS_PLACEMENTS),
    default="bytes",
    show_default=True,
    help="How the built-in model's variables are spread over the PS. bytes: by the bytes each moves a "
    "step, largest first; held: by bytes held, in creation order (TF1's greedy load balancing); "
    "round-robin (replica_device_setter's default); min-size: each variable split first as TensorFlow "
    "2's MinSizePartitioner splits it (a shard for each 256 KiB begun, at most one per PS), the shards "
    "round-robin.",
)


def _ps_placements(ctx, param, value) -> tuple[str, ...]:
    """bench's --ps-placement: one placement, or several, comma-separated, each once."""
    from tfsched.bench.tf2 import TF2_PS_PLACEMENTS

    names = tuple(v.strip() for v in value.split(",") if v.strip())
    known = PS_PLACEMENTS + tuple(p for p in TF2_PS_PLACEMENTS if p not in PS_PLACEMENTS)
    for name in names:
        if name not in known:
            raise click.BadParameter(f"{name!r} is not one of {', '.join(known)}")
    if not names or len(set(names)) != len(names):
        raise click.BadParameter(f"expected distinct placements, comma-separated (got {value!r})")
    return names


_run_mode_option = click.option(
    "--mode",
    "run_mode",
    type=click.Choice(["train", "inference"]),
    default="train",
    show_default=True,
    help="A built-in model's training steps, or its forward passes (inference).",
)
_BENCH_PS_PLACEMENT_OPTION = click.option(
    "--ps-placement",
    default="bytes",
    show_default=True,
    callback=_ps_placements,
    help="How the built-in model's variables are spread over the PS (bytes, held, round-robin or "
    "min-size, as trace's). Several, comma-separated (bytes,min-size), run every mode on each placement "
    "in the same rounds: the first's modes under their names, the others' as MODE@PLACEMENT. --api "
    "tf2: round-robin (the strategy's own, its default there), min-size (the strategy's "
    "variable_partitioner: MinSizePartitioner, a shard for each 256 KiB begun, at most one per PS), or both.",
)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tfsched")
def main() -> None:
    """Communication scheduling for parameter-server TensorFlow training.

    \b
    Example:
      tfsched analyze train.pb --fetch train --algorithm tao -o schedule.json
    """


def _bandwidth(ctx, param, value):
    from tfsched.units import parse_bandwidth

    if value is None:
        return None
    try:
        return parse_bandwidth(value)
    except TfschedError as e:
        raise click.BadParameter(str(e)) from None


def _modes(ctx, param, value, *, tuned: bool = False) -> tuple[str, ...]:
    from tfsched.bench.run import parse_modes

    try:
        return parse_modes(value, tuned=tuned)
    except TfschedError as e:
        raise click.BadParameter(str(e)) from None


# bench's --modes: the mode ``tuned`` allowed too (``--tuned FILE`` says what it runs)
_bench_modes = functools.partial(_modes, tuned=True)


def _size_or_auto(ctx, param, value):
    """A number of parameters (>= 0) or ``auto`` (sized for the graph and link)."""
    if value == "auto":
        return value
    try:
        n = int(value.replace("_", ""))
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a number of parameters nor auto") from None
    if n < 0:
        raise click.BadParameter(f"{n} is not a number of parameters (>= 0) nor auto")
    return n


def _duration(ctx, param, value):
    from tfsched.units import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except TfschedError as e:
        raise click.BadParameter(str(e)) from None


def _timeout(ctx, param, value):
    """A duration (``_duration``) above 0: how long something has to answer."""
    seconds = _duration(ctx, param, value)
    if seconds is not None and seconds <= 0:
        raise click.BadParameter(f"{value!r} leaves no time to answer: give more than 0")
    return seconds


# what a credit window acknowledges (analyze: needs --credit; tune: its trials' credit)
_ack_share_option = click.option(
    "--ack-share",
    type=click.IntRange(min=1),
    default=None,
    help="The credit acknowledges transfers of at least credit/N parameters, the smaller ones "
    "race for the wire (tfsched.enable(..., ack_share=N); default 8).",
)
# how many slices one acknowledgement returns (analyze: needs --credit)
_ack_group_option = click.option(
    "--ack-group",
    type=click.IntRange(min=1),
    default=None,
    help="Up to N consecutive acknowledged slices on a channel (of one tensor or of several) share "
    "one acknowledgement, the first taking the credit of all (tfsched.enable(..., ack_group=N); "
    "default 1, one each).",
)
# When a credit window's credit comes back (analyze: needs --credit; tune: its trials'); the
# choices are sim.engine.CREDIT_RETURNS, listed here so that --help needs no import of it.
CREDIT_RETURN_CHOICES = ("ack", "sent")
# What a window per sending task serves first (analyze --host-order): sim.engine.HOST_ORDERS, as above
HOST_ORDER_CHOICES = ("steps", "priority")
_credit_return_option = click.option(
    "--credit-return",
    type=click.Choice(CREDIT_RETURN_CHOICES),
    default="ack",
    show_default=True,
    help="How the credit comes back: the receiver's acknowledgement, or once the sender has sent "
    "the tensor, with no acknowledgement (tfsched.enable(..., credit_return='sent')).",
)

_host_order_option = click.option(
    "--host-order",
    type=click.Choice(HOST_ORDER_CHOICES),
    default="steps",
    show_default=True,
    help="What --host-credit's window serves first: the oldest step's tensors (steps) or every "
    "step's highest priority, the steps in lockstep (priority; enable(..., host_order=...)).",
)


def _check_host_order(host_order: str, host_credit: bool) -> None:
    if host_order != "steps" and not host_credit:
        raise click.UsageError("--host-order orders --host-credit's window: give --host-credit too")


# where bench and tune run the tasks without namespaces
_loopback_option = click.option(
    "--loopback", is_flag=True, help="No namespaces: every task on loopback, unshaped."
)
_host_cores_option = click.option(
    "--host-cores",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="Cores of its own each emulated host has: every task's process in a CPU cgroup capped at "
    "that many (root; cgroup v1 or v2). As on separate hosts, the cores a waiting task leaves idle "
    "are not lent to the others (0: every task shares this machine's cores). The machine's cores "
    "over the workers gives each worker its share when all compute.",
)


def _check_host_cores(host_cores: float) -> None:
    """Before anything runs: a share no task could have, or no cgroup to cap it with, is one line."""
    if host_cores:
        from tfsched.bench.hostcpu import check

        try:
            check(host_cores)
        except TfschedError as e:
            raise click.BadParameter(str(e), param_hint="--host-cores") from None


_shaped_loopback_option = click.option(
    "--shaped-loopback",
    is_flag=True,
    help="No namespaces or root: every task on loopback, each with its own link of --bandwidth "
    "each way, shaped by relays in this process (with --latency, but no --queue).",
)


_latency_option = click.option(
    "--latency", default="0s", show_default=True, callback=_duration, help="One-way added latency per link."
)


def _check_ps_placement(graph_path: str | None) -> None:
    """--ps-placement places a built-in model's variables: with --graph, given, it is a usage error."""
    ctx = click.get_current_context()
    if graph_path is not None and ctx.get_parameter_source("ps_placement") != ParameterSource.DEFAULT:
        raise click.UsageError(
            "--ps-placement places a built-in model's variables; a saved graph keeps its own"
        )


def _shaped_bandwidth(bandwidth: float, queue: float | None = None) -> None:
    """--bandwidth, where a link is shaped to it: one the relays can shape, or (with the
    namespaces' shaper's ``queue``, seconds) tc."""
    from tfsched.bench.netns import DEFAULT_QUEUE_S, check_shaping
    from tfsched.units import check_link_bandwidth

    try:
        check_link_bandwidth(bandwidth) if queue is None else check_shaping(bandwidth, queue)
    except TfschedError as e:
        hint = "--bandwidth" if queue in (None, DEFAULT_QUEUE_S) else "--bandwidth with --queue"
        raise click.BadParameter(str(e), param_hint=hint) from None


def _check_loopback(
    loopback: bool, shaped_loopback: bool, bandwidth: float, latency: float = 0.0, queue: float | None = None
):
    """--loopback and --shaped-loopback: at most one; --loopback has no latency and neither has a
    shaper's queue; on namespaces, latency needs the kernel's netem; a shaped link's --bandwidth
    is one it can be shaped to (checked before any work)."""
    from tfsched.bench.netns import DEFAULT_QUEUE_S, check_latency

    if loopback and shaped_loopback:
        raise click.UsageError("--loopback is unshaped, --shaped-loopback shaped: choose one")
    queued = queue is not None and queue != DEFAULT_QUEUE_S
    if loopback and (latency or queued):
        raise click.UsageError("--latency and --queue shape the emulated links; --loopback has neither")
    if shaped_loopback and queued:
        raise click.UsageError(
            "--queue is the emulated links' shaper's; --shaped-loopback's relays have none"
        )
    if not loopback:
        _shaped_bandwidth(bandwidth, None if shaped_loopback else (queue or DEFAULT_QUEUE_S))
    if not (loopback or shaped_loopback):
        check_latency(latency)


# which meta graph of a SavedModel (analyze, trace --graph, viz --graph)
_tag_set_option = click.option(
    "--tag-set",
    default=None,
    help="A SavedModel's meta graph by its tags, comma-separated (as saved_model_cli's --tag_set; "
    "default: the only one, else the one tagged train).",
)


@main.command()
@click.argument("graph", type=click.Path())
@click.option(
    "--fetch",
    "fetches",
    multiple=True,
    help="Op or tensor the step runs (repeatable). Default: the train_op collection, else the graph's sinks.",
)
@click.option(
    "--algorithm", type=click.Choice(["tio", "tao", "layer", "fifo"]), default="tio", show_default=True
)
@click.option(
    "--bandwidth",
    default=None,
    callback=_bandwidth,
    help="Per-host link bandwidth [default: 1Gbit; with --trace: each channel's, fitted to the trace].",
)
@click.option(
    "--overhead",
    default=None,
    callback=_duration,
    help="Per-message overhead [default: 300us; with --trace: each channel's, fitted to the trace].",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Replicate a one-worker graph (between-graph replication). Default: the workers in the graph.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["graphdef", "metagraph", "runmeta", "savedmodel"]),
    default=None,
    help="Force the file format (default: from the name and content).",
)
@click.option(
    "--ps-job",
    "ps_jobs",
    multiple=True,
    default=["ps"],
    show_default=True,
    help="Job name(s) of the parameter servers.",
)
@_tag_set_option
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write the schedule (JSON) for the enforcement pass.",
)
@click.option("--json", "as_json", is_flag=True, help="Print exactly one JSON object on stdout.")
@click.option(
    "--all", "show_all", is_flag=True, help="List every transfer (default: the first 12 per channel)."
)
@click.option(
    "--trace",
    "trace_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Measured times from `tfsched trace` (TAO and the prediction use them).",
)
@click.option(
    "--statistic",
    default="min",
    show_default=True,
    help="Over traced steps: min (TicTac), median, mean, max, pNN.",
)
@click.option(
    "--partition",
    default="0",
    show_default=True,
    callback=_size_or_auto,
    help="Predict with transfers split at this many parameters (ByteScheduler; 0: off; auto: "
    "sized for the graph and link, as enable(partition='auto')).",
)
@click.option(
    "--credit",
    default="0",
    show_default=True,
    callback=_size_or_auto,
    help="Predict with at most this many parameters in flight per channel (0: off; auto: sized "
    "for the graph and link, as enable(credit='auto')).",
)
@click.option(
    "--host-credit",
    is_flag=True,
    help="Predict with the credit as one window per sending task (needs --credit; "
    "tfsched.enable(..., host_credit=True)).",
)
@_host_order_option
@_ack_share_option
@_credit_return_option
@_ack_group_option
@click.option(
    "--push-credit",
    type=click.IntRange(min=1),
    default=None,
    help="Predict with the pushes (a worker's transfers to a PS) under a window of this many "
    "parameters in place of --credit, which the pulls keep (enable(push_credit=N)); what is "
    "acknowledged stays --credit's [needs --credit].",
)
@click.option(
    "--inter-op-threads",
    type=click.IntRange(min=1),
    default=None,
    help="Predict a run with enable(..., inline_transfers=False) and each task running this many "
    "kernels at a time (inter_op_parallelism_threads; TensorFlow's default is one per core): a "
    "credit's acknowledgements wait for a free one where the task's ops hold them all, as measured "
    "in the trace [default: they wait for none, as with the default inline transfers; needs --credit].",
)
@click.option(
    "--cross-steps",
    type=click.IntRange(min=1),
    default=None,
    help="Predict the scheduled steps across TensorFlow's barrier (tfsched.enforce.crossing, with "
    "enable(ready=True)): this many laid out at once, the step their mean; the baseline stays "
    "behind it.",
)
@click.option(
    "--placement",
    "placement_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write where each variable should go so that the PS exchange about the same bytes a step "
    "(JSON; tfsched.ps_strategy(FILE, ps_tasks) is replica_device_setter's ps_strategy).",
)
@click.option(
    "--placement-ps",
    type=click.IntRange(min=1),
    default=None,
    help="The placement's number of PS tasks [default: the graph's].",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    default=None,
    help="Processes that run the simulations: 2 or more run beside the one that bounds the step, 1 is "
    "that one alone; the prediction is the same with any number [default: one a core for a graph of "
    "30,000 simulated nodes or more, else 1].",
)
def analyze(
    graph,
    fetches,
    algorithm,
    bandwidth,
    overhead,
    workers,
    fmt,
    ps_jobs,
    tag_set,
    output,
    as_json,
    show_all,
    trace_path,
    statistic,
    partition,
    credit,
    host_credit,
    host_order,
    ack_share,
    credit_return,
    ack_group,
    push_credit,
    inter_op_threads,
    cross_steps,
    placement_path,
    placement_ps,
    jobs,
):
    """Find the transfers of a saved PS graph, order them, and predict the step time.

    \b
    Examples:
      tfsched analyze train.pb --fetch train
      tfsched analyze model.meta --algorithm tao --bandwidth 100Mbit --workers 4 -o schedule.json
      tfsched analyze run.runmeta --json
      tfsched analyze export_dir --tag-set train --workers 4
      tfsched analyze train.pb --fetch train --trace trace.json --algorithm tao
      tfsched analyze train.pb --fetch train --algorithm tao --workers 4 --credit 4000000 --host-credit
      tfsched analyze train.pb --fetch train --workers 4 --partition auto --credit auto
      tfsched analyze train.pb --fetch train --trace trace.json --workers 4 --credit 1000000 --inter-op-threads 2
      tfsched analyze train.pb --fetch train --workers 4 --partition 250000 --credit 4000000 --ack-share 32 --push-credit 250000
      tfsched analyze train.pb --fetch train --placement placement.json --placement-ps 2
      tfsched analyze train.pb --fetch train --algorithm layer --workers 4 --credit auto --cross-steps 5
      tfsched analyze graphs/__inference_step_7.worker_0.pb --trace tf2.trace.json --algorithm tao -o tao.json

    A TensorFlow 2 function's graph is the one enable_functions(dump_graphs=DIR) wrote, and its
    trace one of tfsched.trace_functions.
    """
    from tfsched.analysis import analyze as run_analysis

    if statistic != "min" and trace_path is None:
        raise click.UsageError("--statistic needs --trace (the traced steps it summarizes)")
    if placement_ps is not None and placement_path is None:
        raise click.UsageError("--placement-ps needs --placement FILE (the placement it sizes)")
    from tfsched.io import check_writable

    for path in filter(None, (output, placement_path)):
        check_writable(path)  # before the analysis, not after it
    if host_credit and not credit:
        raise click.UsageError("--host-credit needs --credit N (the window it makes one per sending task)")
    _check_host_order(host_order, host_credit)
    if ack_share is not None and not credit:
        raise click.UsageError("--ack-share needs --credit N (the window that acknowledges)")
    if credit_return != "ack" and not credit:
        raise click.UsageError("--credit-return needs --credit N (the window whose credit comes back)")
    if ack_group is not None and (not credit or credit_return != "ack"):
        raise click.UsageError(
            "--ack-group needs --credit N returned by acknowledgement (--credit-return ack)"
        )
    if push_credit is not None and not credit:
        raise click.UsageError("--push-credit needs --credit N (the window that acknowledges the transfers)")
    if inter_op_threads is not None and not credit:
        raise click.UsageError(
            "--inter-op-threads needs --credit N (the acknowledgements that wait for a thread)"
        )
    from rich.console import Console

    # what it does now, on a terminal (seconds a graph; minutes with tens of workers)
    with Console(stderr=True).status(f"analyze: reading {graph}") as status:
        result = run_analysis(
            graph,
            fetches=list(fetches) or None,
            algorithm=algorithm,
            bandwidth_bps=bandwidth,
            overhead_s=overhead,
            workers=workers,
            fmt=fmt,
            ps_jobs=tuple(ps_jobs),
            tag_set=tag_set,
            trace=trace_path,
            statistic=statistic,
            partition=partition,
            credit=credit,
            host_credit=host_credit,
            host_order=host_order,
            **({} if ack_share is None else {"ack_share": ack_share}),
            credit_return=credit_return,
            ack_group=ack_group or 1,
            push_credit=push_credit or 0,
            executor_threads=inter_op_threads,
            cross_steps=cross_steps or 0,
            progress=lambda text: status.update(f"analyze: {text}"),
            jobs=jobs,
        )
    placement = None
    if placement_path:
        from tfsched.placement import Placement

        placement = Placement.of_graph(result.graph, placement_ps)
        placement.check_every_ps_serves()
    if output:
        result.schedule.save(output)
    if placement:
        placement.save(placement_path)
    if as_json:
        click.echo(json.dumps(result.to_json()))
        return
    from tfsched.report import print_analysis, print_placement

    print_analysis(result, limit=None if show_all else 12, output=output)
    if placement:
        print_placement(placement, placement_path)


@main.command()
@click.option(
    "--model",
    type=click.Choice(BUILTIN_MODELS),
    default="vgg16",
    show_default=True,
)
@click.option(
    "--bandwidth",
    default="1Gbit",
    show_default=True,
    callback=_bandwidth,
    help="Each host's link, each way: predicted for, and shaped for the training.",
)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Measured steps per worker per round.",
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Interleaved rounds of every mode.",
)
@click.option(
    "--modes",
    default=",".join(DEMO_MODES),
    show_default=True,
    callback=_modes,
    help="Comma-separated, as tfsched bench's: baseline, tio, tao, layer, and +pc, +host, ...",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=4, show_default=True, help="Per worker.")
@click.option(
    "--loopback",
    is_flag=True,
    help="Train on loopback as it is (by default each task's link is shaped to --bandwidth: in "
    "network namespaces as root, else by relays in user space).",
)
@click.option("--no-train", is_flag=True, help="Only the offline analysis, no cluster.")
def demo(model, bandwidth, workers, steps, rounds, modes, batch_size, loopback, no_train):
    """Analyze a built-in model, then train it on a local PS cluster with and without tfsched.

    Each task's link is shaped to --bandwidth both ways, as the analysis assumes: in network
    namespaces with tc where this runs as root with iproute2, else by relays in user space.

    \b
    Example:
      tfsched demo --model vgg16 --workers 2 --steps 5
      tfsched demo --model resnet50 --no-train
      tfsched demo --loopback --modes baseline,tio,tao   # unshaped loopback, the orders alone
    """
    from click.core import ParameterSource

    from tfsched.demo import run_demo

    ctx = click.get_current_context()
    given = [
        f"--{p}"
        for p in ("steps", "rounds", "loopback")
        if ctx.get_parameter_source(p) == ParameterSource.COMMANDLINE
    ]
    if no_train and given:
        verb = "is" if len(given) == 1 else "are"
        raise click.UsageError(f"{' and '.join(given)} {verb} for the training, which --no-train leaves out")
    if not (no_train or loopback):
        from tfsched.bench.netns import DEFAULT_QUEUE_S, available

        # before the analysis, for the links the training shapes: tc's, else the relays'
        _shaped_bandwidth(bandwidth, DEFAULT_QUEUE_S if available() is None else None)
    run_demo(
        model=model,
        bandwidth_bps=bandwidth,
        workers=workers,
        steps=steps,
        rounds=rounds,
        modes=modes,
        train=not no_train,
        batch_size=batch_size,
        shaped=not loopback,
    )


@main.command()
@click.option(
    "--model",
    type=click.Choice(BUILTIN_MODELS),
    default=None,
    help="A built-in model.",
)
@click.option(
    "--graph",
    "graph_path",
    type=click.Path(),
    default=None,
    help="Or a user's GraphDef / MetaGraphDef / SavedModel.",
)
@click.option("--fetch", "fetches", multiple=True, help="With --graph: what a step runs (repeatable).")
@click.option("--init", default=None, help="With --graph: the initializer op to run once.")
@_tag_set_option
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Worker tasks; with --graph, by default as many as its ops are placed on.",
)
@_PS_OPTION
@_PS_PLACEMENT_OPTION
@click.option("--steps", type=int, default=5, show_default=True, help="Traced steps.")
@click.option("--warmup", type=click.IntRange(min=0), default=2, show_default=True)
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), required=True, help="Trace file to write (JSON)."
)
def trace(model, graph_path, fetches, init, tag_set, workers, ps, ps_placement, steps, warmup, output):
    """Run a local cluster (PS and workers as processes) and trace real steps.

    \b
    Examples:
      tfsched trace --model seq32 --workers 2 --steps 5 -o trace.json
      tfsched trace --graph train.pb --fetch train --init init -o trace.json

    A saved graph runs on as many PS and workers as its ops are placed on, unless --ps and
    --workers say more.
    """
    from rich.console import Console

    from tfsched.io import check_writable
    from tfsched.tracing.run import trace_local

    _check_ps_placement(graph_path)
    check_writable(output)  # not after the steps
    if graph_path is not None:  # a user's graph: the tasks its ops are placed on, unless given
        ctx = click.get_current_context()
        given = {p: ctx.get_parameter_source(p) != ParameterSource.DEFAULT for p in ("workers", "ps")}
        workers, ps = (workers if given["workers"] else None), (ps if given["ps"] else None)
    console = Console(stderr=True)
    with console.status("tracing") as status:
        result = trace_local(
            model=model,
            graph_path=graph_path,
            fetches=list(fetches) or None,
            init=init,
            tag_set=tag_set,
            workers=workers,
            ps=ps,
            ps_placement=ps_placement,
            steps=steps,
            warmup=warmup,
            progress=lambda s: status.update(s),
        )
    result.save(output)
    mean_ms = sum(result.step_times_us) / len(result.step_times_us) / 1e3
    click.echo(
        f"{output}: {result.steps} steps (mean {mean_ms:.1f} ms), {len(result.ops)} op records, "
        f"{len(result.transfers)} transfer records"
    )


@main.command()
@click.argument("trace_paths", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    required=True,
    help="out.json (Chrome trace), out.png / out.svg (Gantt + CDF), out.html (a page).",
)
@click.option(
    "--schedule",
    type=click.Path(dir_okay=False),
    default=None,
    help="Show each transfer's priority (Chrome trace).",
)
@click.option(
    "--graph",
    "graph_path",
    type=click.Path(),
    default=None,
    help="Draw the simulator's prediction for this graph beside the measurement.",
)
@click.option("--fetch", "fetches", multiple=True, help="With --graph: what a step runs.")
@_tag_set_option
@click.option(
    "--compare",
    "compare",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="More traces for the step-time CDF (e.g. the baseline).",
)
@click.option("--step", type=int, default=0, show_default=True, help="The traced step to draw.")
def viz(trace_paths, output, schedule, graph_path, fetches, tag_set, compare, step):
    """Show a trace: Chrome trace JSON (Perfetto, chrome://tracing), a picture, or an HTML page.

    Several traces are several workers' traces of the same steps (tfsched bench --traces writes
    MODE.trace.json and MODE.worker-K.trace.json): they are drawn on one time axis, each step
    where the machines' clock had it, to show how far apart the workers pull, compute and push.

    \b
    Examples:
      tfsched viz trace.json -o trace.chrome.json
      tfsched viz trace.json -o step.png --graph train.pb --fetch train
      tfsched viz scheduled.json --compare baseline.json -o report.html
      tfsched viz traces/tao.trace.json traces/tao.worker-*.trace.json -o workers.chrome.json
    """
    from tfsched.tracing.trace import Trace
    from tfsched.viz.write import write_visualization

    trace, *workers = (Trace.load(path) for path in trace_paths)
    others = {"this trace": trace, **{path: Trace.load(path) for path in compare}} if compare else None
    parting = _where_workers_part([trace, *workers]) if workers else None  # before writing: it can fail
    write_visualization(
        trace,
        output,
        schedule=schedule,
        graph=graph_path,
        fetches=list(fetches) or None,
        compare=others,
        step=step,
        tag_set=tag_set,
        workers=workers,
    )
    click.echo(f"{output} written")
    if parting:
        click.echo(parting)


@main.command()
@click.option(
    "--cluster",
    "cluster_text",
    default=None,
    help='The cluster: a JSON file\'s path, or JSON, of {job: ["host:port", ...]} or of a TF_CONFIG '
    "[default: $TF_CONFIG's cluster].",
)
@click.option(
    "--job",
    "jobs",
    multiple=True,
    help="A job to check (repeatable) [default: every job but chief, the TensorFlow 2 coordinator's].",
)
@click.option(
    "--timeout",
    "timeout_s",
    default="30s",
    show_default=True,
    callback=_timeout,
    help="How long each task has to answer (30s, 500ms; a plain number is seconds).",
)
@click.option(
    "--wait",
    "wait_s",
    default="0s",
    show_default=True,
    callback=_duration,
    help="How long to wait for tasks that do not answer yet (a cluster that is starting; 300s, "
    "a plain number is seconds): they are asked again about once a second.",
)
@click.option(
    "--stats",
    "counters",
    is_flag=True,
    help="Also each task's gate counters (tfsched.enforce.stats): transfers released, gates that "
    "waited, timed out or were cancelled, steps whose state is held now.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the tasks as JSON, not a table.")
def check(cluster_text, jobs, timeout_s, wait_s, counters, as_json):
    """Check that every task of a running cluster has tfsched loaded, the same build as here.

    Each task is asked through its own address which build of tfsched's library it loaded
    (tfsched.check_cluster). A task started without tfsched.start_server, one that loaded
    another build, or one that does not answer is named, with an error line and exit code 1.

    \b
    Examples:
      tfsched check --cluster '{"ps": ["ps0:2222"], "worker": ["w0:2222", "w1:2222"]}'
      TF_CONFIG=... tfsched check --wait 300 --stats
    """
    import dataclasses

    from rich.console import Console
    from rich.table import Table

    from tfsched.enforce.check import load_cluster, raise_not_ready, wait_answers
    from tfsched.graph.devices import short_task

    spec, where = load_cluster(cluster_text)
    try:
        with Console(stderr=True).status("asking the tasks") as status:
            found = wait_answers(
                spec,
                jobs=list(jobs) or None,
                timeout_s=timeout_s,
                wait_s=wait_s,
                counters=counters,
                progress=status.update,
            )
    except TfschedError as e:  # e.g. no task of the jobs asked for
        raise TfschedError(f"{where}: {e}") from None
    if as_json:
        click.echo(json.dumps([dataclasses.asdict(b) for b in found], indent=2))
    else:
        shown = ("released", "waited", "timeouts", "cancelled", "live_steps") if counters else ()
        table = Table(title=f"tfsched on the tasks of {where}", title_justify="left")
        for col in ("task", "address", "build", "status", *shown):
            table.add_column(col.replace("_", " "), justify="right" if col in shown else "left")
        for b in found:
            numbers = [f"{b.stats[k]:,}" if b.stats else "-" for k in shown]
            table.add_row(short_task(b.task), b.address, b.build or "-", b.problem or "ready", *numbers)
        Console().print(table)
    raise_not_ready(found)


def _where_workers_part(traces) -> str | None:
    """The line ``viz`` says of several workers' traces: how far apart they reached each phase of
    their steps (``bench.stagger``); None unless each trace is one worker's."""
    from tfsched.bench.stagger import spreads_line, trace_spreads
    from tfsched.viz.workers import own_task, worker_labels

    worker_labels(traces)  # of one run, each saying when its steps began: else its error line
    tasks = [own_task(t) for t in traces]
    if None in tasks:
        return None
    return (
        f"where the workers part, over the {min(t.steps for t in traces)} traced steps (the latest "
        "worker minus the earliest, over the step): " + spreads_line(trace_spreads(traces, tasks))
    )


def _refuse_for_tf2(refused: tuple[tuple[str, str], ...]) -> None:
    """One usage line for the first of ``refused`` (a parameter's name, why ``--api tf2`` cannot
    take it) that the command line set."""
    ctx = click.get_current_context()
    for name, why in refused:
        if ctx.get_parameter_source(name) != ParameterSource.DEFAULT:
            option = "--" + {"tuned_path": "tuned", "graph_path": "graph", "fetches": "fetch"}.get(
                name, name
            ).replace("_", "-")
            raise click.UsageError(f"{option} is not for --api tf2: {why}")


def _tf2_placements(ps_placement: tuple[str, ...]) -> tuple[str, ...]:
    """``--api tf2``'s placements of the variables (the strategy's round-robin unless
    --ps-placement says)."""
    from tfsched.bench.tf2 import TF2_PS_PLACEMENTS

    if click.get_current_context().get_parameter_source("ps_placement") == ParameterSource.DEFAULT:
        return ("round-robin",)
    if any(p not in TF2_PS_PLACEMENTS for p in ps_placement):
        raise click.UsageError(
            f"--ps-placement {','.join(ps_placement)} is not for --api tf2: the strategy places the "
            f"variables round-robin, whole or split first; of {', '.join(TF2_PS_PLACEMENTS)}"
        )
    return ps_placement


def _check_tf2_bench(ps_placement: tuple[str, ...]) -> tuple[str, ...]:
    """What ``bench --api tf2`` cannot take: one usage line, before any work. Its placements of the
    variables (``_tf2_placements``)."""
    _refuse_for_tf2((("trace_steps", "a traced round of each mode runs whole"),))
    return _tf2_placements(ps_placement)


def _check_tf2_tune(ps_placement: str) -> str:
    """What ``tune --api tf2`` cannot take: one usage line, before any work. Its placement of the
    variables (``_tf2_placements``)."""
    own = "a built-in model, built by the strategy (tfsched.models.keras)"
    _refuse_for_tf2(
        (
            ("graph_path", own),
            ("fetches", own),
            ("init", own),
            ("tag_set", own),
            ("prescreen", "the simulator's pre-screen is of a session's graph"),
            ("sync", "a coordinator's steps are asynchronous"),
            ("settle", "each trial is a coordinator of its own, its setting in force from its first step"),
            (
                "push_credit",
                "a window on the pushes evens out synchronized workers, and TensorFlow 2's step asynchronously",
            ),
            ("objective", "a coordinator's steps are asynchronous: no worker waits for another"),
        )
    )
    return _tf2_placements((ps_placement,))[0]


def _bench_tf2(console, *, output, traces_dir, balance, tuned, **run) -> None:
    """``bench --api tf2``'s run, results and summary (``tfsched.bench.tf2``)."""
    from tfsched.bench import tf2
    from tfsched.progress import progress_bar

    with progress_bar(console, "benchmark") as (say, done):
        summary = tf2.side_by_side(traces_dir=traces_dir, progress=say, done=done, **run)
    summary["config"]["batch_balance"] = balance.to_json() if balance else None
    summary["config"]["tuned"] = tuned
    md_path = tf2.write(summary, output)
    click.echo(tf2.markdown(summary))
    click.echo(f"results: {output}, {md_path}, {md_path[: -len('.md')]}.png")
    if traces_dir:
        click.echo(f"traced rounds: {traces_dir}/<mode>.trace.json (tfsched viz ...)")


@main.command()
@click.option(
    "--model",
    type=click.Choice(BUILTIN_MODELS),
    default="vgg16",
    show_default=True,
)
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@_PS_OPTION
@click.option(
    "--bandwidth",
    default="1Gbit",
    show_default=True,
    callback=_bandwidth,
    help="Per-host link, each direction.",
)
@_latency_option
@click.option(
    "--queue",
    default="400ms",
    show_default=True,
    callback=_duration,
    help="The most of the link's time each link's shaper queues before it drops (a NIC's or "
    "switch port's buffer).",
)
@click.option(
    "--modes",
    default="baseline,tio,tao",
    show_default=True,
    callback=_bench_modes,
    help="Comma-separated: baseline, tio, tao, layer; +pc adds ByteScheduler's partitioning and credit, "
    "kept to the model and the link (tio+pc; tfsched.enforce.link_sizes), +pN / +cN set them "
    "(tao+p500000+c2000000), +host makes the credit one window per sending task that serves the "
    "workers in turn (tao+pc+host), +lockstep one that serves every worker's next tensor by "
    "priority, the workers in lockstep (tao+pc+lockstep), +wN gives the workers' pushes a window of N "
    "(tao+pc+lockstep+w1000000), +ready serves every gate by priority among those arrived; cross "
    "(vanilla TensorFlow) and +cross (layer+pc+ready+cross) step across TensorFlow's barrier "
    "(training; tfsched.enforce.crossing); tuned: the best setting of --tuned FILE.",
)
@click.option(
    "--inter-op-threads",
    type=click.IntRange(min=0, max=INT32_MAX),  # ConfigProto's int32: a task refused more as it started
    default=0,
    show_default=True,
    help="Kernels each task runs at a time (inter_op_parallelism_threads; 0: TensorFlow's default, "
    "the number of cores). More than the cores let a credit's acknowledgement run while the "
    "others wait on convolutions; every mode, the baseline too, runs on these tasks.",
)
@click.option(
    "--thread-spinning/--no-thread-spinning",
    default=True,
    show_default=True,
    help="Whether each task's idle pool threads spin a while before they sleep (TensorFlow's "
    "default). --no-thread-spinning sets the tasks' ConfigProto.experimental.disable_thread_spinning: "
    "the CPU they spun goes to the other tasks of shared cores; every mode, the baseline too, "
    "runs on these tasks.",
)
@_host_cores_option
@click.option(
    "--tuned",
    "tuned_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="A `tfsched tune -o` file, tuned for this model, cluster, link, batch size, --api and --mode: "
    "mode tuned "
    "runs its best setting (its algorithm, partition and credit, and +host, +aN, +sent as tuned).",
)
@click.option(
    "--steps", type=click.IntRange(min=1), default=5, show_default=True, help="Steps per worker per round."
)
@click.option(
    "--rounds",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="Interleaved rounds of every mode.",
)
@click.option(
    "--batch-size",
    default="auto",
    show_default=True,
    help="Per worker; auto: computation about equal to communication on the link (TicTac's method).",
)
@_run_mode_option
@_loopback_option
@_shaped_loopback_option
@click.option(
    "--traces",
    "traces_dir",
    type=click.Path(file_okay=False),
    default=None,
    help="Also write each mode's traced steps to DIR/MODE.trace.json (worker 0) and "
    "DIR/MODE.worker-K.trace.json (worker K), for tfsched viz (and the baseline's worker 0 alone "
    "to DIR/baseline.alone.trace.json).",
)
@click.option(
    "--trace-steps",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Synchronized steps of each mode traced after the rounds, on every worker: worker 0's are what "
    "--traces writes, all of them say where the workers part (under the table).",
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default="bench.json",
    show_default=True,
    help="Results (JSON, and a .md beside it).",
)
@_BENCH_PS_PLACEMENT_OPTION
@click.option(
    "--moving-averages/--no-moving-averages",
    default=True,
    show_default=True,
    help="A training step also updates the moving statistics of the model's batch normalization "
    "(resnet50, inception_v3, mobilenet), as a user's training does (--api tf2's Keras steps always "
    "do). --no-moving-averages: the gradients only, as the rows measured before the eightieth session ran.",
)
@click.option(
    "--api",
    type=click.Choice(["session", "tf2"]),
    default="session",
    show_default=True,
    help="session: TF1 graphs in sessions, synchronous steps; tf2: TensorFlow 2's "
    "ParameterServerStrategy with a ClusterCoordinator (enable_functions), asynchronous training.",
)
def bench(
    model,
    workers,
    ps,
    bandwidth,
    latency,
    queue,
    modes,
    tuned_path,
    steps,
    rounds,
    batch_size,
    run_mode,
    loopback,
    shaped_loopback,
    traces_dir,
    trace_steps,
    output,
    ps_placement,
    api,
    inter_op_threads,
    thread_spinning,
    host_cores,
    moving_averages,
):
    """Vanilla TensorFlow vs tfsched on an emulated multi-host PS cluster, interleaved in one run.

    Every task runs in its own network namespace, its link shaped to --bandwidth in each
    direction (root and iproute2 needed; --shaped-loopback or --loopback otherwise).

    \b
    Example:
      tfsched bench --model vgg16 --workers 4 --bandwidth 1Gbit --modes baseline,tio,tao -o vgg16.json
      tfsched bench --model vgg16 --workers 4 --modes baseline,tao+pc,tuned --tuned vgg16-tune.json
      tfsched bench --api tf2 --model vgg16 --workers 4 --modes baseline,tio,tao+pc+host -o tf2.json
    """
    from rich.console import Console

    from tfsched.bench.netns import DEFAULT_QUEUE_S
    from tfsched.bench.results import markdown, summarize, write
    from tfsched.bench.run import TUNED, cluster_side_by_side, crosses, parse_mode, tuned_mode
    from tfsched.io import check_directory, check_writable

    if queue <= 0:
        raise click.BadParameter("must be a positive time", param_hint="--queue")
    if api == "tf2":
        tf2_placements = _check_tf2_bench(ps_placement)
        if inter_op_threads:
            # measured: a server of 2 or of 5 threads had 6 more after a round of calls, alike
            # (benchmarks/tf2_threads.py)
            raise click.UsageError(
                "--inter-op-threads is not for --api tf2: TensorFlow 2's calls also run on thread "
                "pools of their own, which the server's setting does not size"
            )
        if not thread_spinning:
            raise click.UsageError(
                "--no-thread-spinning is for --api session: TensorFlow 2's calls also run on thread "
                "pools of their own, which the bench has not checked the setting reaches"
            )
        if any(parse_mode(m).push_credit for m in modes if m != TUNED):
            raise click.UsageError(
                "+wN modes are for --api session: a window on the pushes evens out synchronized workers, "
                "and TensorFlow 2's step asynchronously"
            )
        if any(crosses(m) for m in modes):
            raise click.UsageError(
                "cross and +cross modes are for --api session: they cross a Session.run's barrier, "
                "and TensorFlow 2's calls have none"
            )
        if not moving_averages:
            raise click.UsageError(
                "--no-moving-averages is for --api session: a TensorFlow 2 step of a Keras model "
                "updates its batch normalization's moving statistics"
            )
    _check_loopback(loopback, shaped_loopback, bandwidth, latency, queue)  # before a batch size is measured
    _check_host_cores(host_cores)
    if traces_dir:
        check_directory(traces_dir)
    # the results and their .md and .png: checked now, not after the run (in the traces
    # directory, which the run makes before it writes them, as repredict.py reads them)
    if not traces_dir or os.path.dirname(os.path.abspath(output)) != os.path.abspath(traces_dir):
        check_writable(output)
    if (TUNED in modes) != (tuned_path is not None):
        raise click.UsageError(
            f"mode {TUNED} needs --tuned FILE (a tfsched tune -o file)"
            if tuned_path is None
            else f"--tuned FILE runs as mode {TUNED}: add it to --modes"
        )
    if len(ps_placement) > 1 and ps < 2:
        raise click.UsageError("several --ps-placement need --ps 2 or more")
    link = "loopback" if loopback else f"{bandwidth / 1e9:g} Gbit/s"
    # a tuned setting runs on every placement; the file's must be the first's
    tuned_for = dict(
        model=model,
        workers=workers,
        ps=ps,
        bandwidth=link,
        ps_placement=tf2_placements[0] if api == "tf2" else ps_placement[0],
        api=api,
        run_mode=run_mode,
        host_cores=host_cores,
    )
    tuned_doc = None
    if tuned_path is not None:
        from tfsched.tune.run import read_tune_file

        tuned_doc = read_tune_file(tuned_path)
        # checked before the batch-size probe runs; the batch size once it is known (below)
        tuned_mode(tuned_doc, tuned_path, batch_size=None, **tuned_for)
    console = Console(stderr=True)
    balance = None
    if batch_size == "auto":
        from tfsched.models.batch import balanced_batch_size

        with console.status(f"measuring compute for the default batch size ({workers} workers at once)"):
            balance = balanced_batch_size(
                model, bandwidth_bps=bandwidth, workers=workers, ps=ps, mode=run_mode, host_cores=host_cores
            )
        batch_size = balance.batch_size
        console.print(
            f"batch size {batch_size}: communication {balance.comm_s:.2f} s per step at "
            f"{bandwidth / 1e9:g} Gbit/s, compute {balance.fixed_s:.2f} s + {balance.per_example_s * 1e3:.1f} ms "
            "per example" + "".join(f"; measured {t:.2f} s at batch {b}" for b, t in balance.measured)
        )
    else:
        try:
            batch_size = int(batch_size)
        except ValueError:
            raise click.BadParameter(
                f"expected a number or auto, got {batch_size!r}", param_hint="--batch-size"
            ) from None
        if batch_size < 1:
            raise click.BadParameter("must be at least 1", param_hint="--batch-size")
    # the cluster, links and rounds: both APIs' runs take them alike
    cluster = dict(
        workers=workers,
        ps=ps,
        steps=steps,
        rounds=rounds,
        batch_size=batch_size,
        bandwidth_bps=None if loopback else bandwidth,
        latency_s=latency,
        queue_s=queue,
        host_cores=host_cores,
    )
    tuned = None
    if tuned_doc is not None:
        tuned = tuned_mode(tuned_doc, tuned_path, batch_size=batch_size, **tuned_for)
        if tuned in modes:
            raise click.BadParameter(f"{TUNED} is {tuned} here, which is listed too", param_hint="--modes")
        modes = tuple(tuned if m == TUNED else m for m in modes)
    if api == "tf2":
        _bench_tf2(
            console,
            model=model,
            modes=modes,
            run_mode=run_mode,
            ps_placement=tf2_placements,
            traces_dir=traces_dir,
            output=output,
            balance=balance,
            tuned={"file": tuned_path, "mode": tuned} if tuned else None,
            relays=shaped_loopback,
            **cluster,
        )
        return
    from tfsched.enforce.build import current_build_id
    from tfsched.progress import progress_bar

    build = current_build_id()  # what the tasks load: the sources may change while it runs
    with progress_bar(console, "benchmark") as (say, done):
        results = cluster_side_by_side(
            model,
            modes=modes,
            mode=run_mode,
            trace_steps=trace_steps,
            progress=say,
            done=done,
            relays=shaped_loopback,
            ps_placement=ps_placement,
            inter_op_threads=inter_op_threads,
            thread_spinning=thread_spinning,
            moving_averages=moving_averages,
            **cluster,
        )
    config = {
        "model": model,
        "mode": run_mode,
        "workers": workers,
        "ps": ps,
        # one placement as before; several: the first's modes under their names, MODE@P the others'
        **(
            {"ps_placement": ps_placement[0] if len(ps_placement) == 1 else list(ps_placement)}
            if ps > 1
            else {}
        ),
        "batch_size": batch_size,
        # a training step of a model with batch normalization: whether it updated the moving
        # statistics (absent in files of before the eightieth session, which did not)
        **({"moving_averages": moving_averages} if run_mode == "train" else {}),
        "steps": steps,
        "rounds": rounds,
        "bandwidth": link,
        "latency": f"{latency * 1e3:g} ms" if latency else None,
        "queue": None if loopback or queue == DEFAULT_QUEUE_S else f"{queue * 1e3:g} ms",
        **({"inter_op_threads": inter_op_threads} if inter_op_threads else {}),
        # absent: TensorFlow's default, the tasks' idle pool threads spin before they sleep
        **({"thread_spinning": False} if not thread_spinning else {}),
        **({"host_cores": host_cores} if host_cores else {}),
        **({"links": "relays"} if shaped_loopback else {}),
        "batch_balance": balance.to_json() if balance else None,
        "tuned": {"file": tuned_path, "mode": tuned} if tuned else None,
        "trace_steps": trace_steps,
    }
    summary = summarize(results, config, build=build)
    if traces_dir:
        os.makedirs(traces_dir, exist_ok=True)
    md_path = write(summary, output, results)
    click.echo(markdown(summary))
    click.echo(f"results: {output}, {md_path}, {md_path[: -len('.md')]}.png")
    if traces_dir:
        for name, res in results.items():
            if res.trace is not None:
                res.trace.meta.update(model=model, bench=config)
                res.trace.save(os.path.join(traces_dir, f"{name}.trace.json"))
            for w, trace in res.other_traces.items():
                trace.meta.update(model=model, bench=config)
                trace.save(os.path.join(traces_dir, f"{name}.worker-{w}.trace.json"))
            if res.solo_trace is not None:
                res.solo_trace.meta.update(model=model, bench=config)
                res.solo_trace.save(os.path.join(traces_dir, f"{name}.alone.trace.json"))
        # the op times every timing-aware mode was ordered from (one trace for all of a placement's)
        from tfsched.bench.run import placed_mode, split_placed

        ordered = {split_placed(n)[1]: r.order_trace for n, r in results.items() if r.order_trace is not None}
        for where, order_trace in ordered.items():
            order_trace.meta.update(model=model, bench=config)
            order_trace.save(os.path.join(traces_dir, f"{placed_mode('order', where)}.alone.trace.json"))
        click.echo(
            f"traced steps: {traces_dir}/<mode>.trace.json, the other workers' "
            f"{traces_dir}/<mode>.worker-<k>.trace.json (tfsched viz ...)"
        )


@main.command()
@click.option(
    "--model", type=click.Choice(BUILTIN_MODELS), default=None, help="A built-in model (default: seq32)."
)
@click.option("--graph", "graph_path", type=click.Path(), default=None, help="A saved graph instead.")
@click.option("--fetch", "fetches", multiple=True, help="With --graph: what a step runs (repeatable).")
@click.option("--init", default=None, help="With --graph: the initializer op to run once.")
@_tag_set_option
@click.option("--workers", type=click.IntRange(min=1), default=2, show_default=True)
@_PS_OPTION
@click.option(
    "--ps-placement",
    type=click.Choice(PS_PLACEMENTS),
    default="bytes",
    show_default=True,
    help="How the built-in model's variables are spread over the PS, as trace's (bytes, held, "
    "round-robin, min-size). --api tf2: round-robin (the strategy's own, its default there) or "
    "min-size (the strategy's variable_partitioner: MinSizePartitioner, as bench --api tf2).",
)
@click.option(
    "--bandwidth",
    default="1Gbit",
    show_default=True,
    callback=_bandwidth,
    help="Per-host link, each direction.",
)
@_latency_option
@_loopback_option
@_shaped_loopback_option
@click.option("--algorithm", type=click.Choice(["tio", "tao", "layer"]), default="tio", show_default=True)
@click.option("--trials", type=click.IntRange(min=1), default=10, show_default=True)
@click.option(
    "--measure", type=click.IntRange(min=1), default=3, show_default=True, help="Timed steps per trial."
)
@click.option(
    "--settle", type=click.IntRange(min=0), default=1, show_default=True, help="Untimed steps after a change."
)
@click.option(
    "--search",
    type=click.Choice(["bayes", "random"]),
    default="bayes",
    show_default=True,
    help="Bayesian optimization (GP, expected improvement, xi 0.1) or random search.",
)
@click.option(
    "--prescreen",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Try first the N settings the simulator predicts best.",
)
@click.option(
    "--credit-only", is_flag=True, help="Keep the partition size fixed (--partition) and tune credit."
)
@click.option(
    "--partition", type=click.IntRange(min=0), default=0, show_default=True, help="With --credit-only."
)
@click.option(
    "--host-credit",
    is_flag=True,
    help="Tune the credit as one window per sending task (tfsched.enable(..., host_credit=True)).",
)
@_host_order_option
@_ack_share_option
@_credit_return_option
@click.option(
    "--confirm",
    type=click.IntRange(min=0),
    default=2,
    show_default=True,
    help="After the trials, measure the N best settings once more; the best mean among them wins.",
)
@click.option(
    "--confirm-rounds",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Measure the --confirm leaders again R times, in turn; with 2 or more the best mean of "
    "the repeats alone wins (the trial that made a setting a leader is left out).",
)
@click.option(
    "--no-defaults",
    is_flag=True,
    help="Do not start from ByteScheduler's partition and credit sized for the model and link.",
)
@click.option(
    "--sync",
    is_flag=True,
    help="Start every step on all workers together, as synchronous training and tfsched bench do "
    "(default: the workers run free, as asynchronous training does).",
)
@click.option(
    "--push-credit",
    is_flag=True,
    help="Also tune the window of the workers' pushes (tfsched.enable(..., push_credit=N)), live on "
    "the workers' gates, for the straggler effect: with --objective balanced.",
)
@click.option(
    "--objective",
    type=click.Choice(OBJECTIVES),
    default="throughput",
    show_default=True,
    help="What the search maximizes: the throughput, or (balanced, with --sync) the throughput times "
    "one minus the straggler effect (the longest any worker waits for the others, over the step).",
)
@click.option("--batch-size", type=click.IntRange(min=1), default=4, show_default=True)
@_run_mode_option
@click.option(
    "--api",
    type=click.Choice(["session", "tf2"]),
    default="session",
    show_default=True,
    help="session: TF1 graphs in sessions, every worker switched at one step of one training; tf2: "
    "TensorFlow 2's ParameterServerStrategy, each trial a ClusterCoordinator of its own on the same "
    "cluster (asynchronous training, as bench --api tf2), vanilla TensorFlow measured before and after.",
)
@_host_cores_option
@click.option("--seed", type=click.IntRange(0, MAX_SEED), default=0, show_default=True)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default="tune.json",
    show_default=True,
    help="Trial history and the best setting (JSON).",
)
def tune(
    model,
    graph_path,
    fetches,
    init,
    tag_set,
    workers,
    ps,
    ps_placement,
    bandwidth,
    latency,
    loopback,
    shaped_loopback,
    algorithm,
    trials,
    measure,
    settle,
    search,
    prescreen,
    credit_only,
    partition,
    host_credit,
    host_order,
    ack_share,
    credit_return,
    confirm,
    confirm_rounds,
    no_defaults,
    sync,
    push_credit,
    objective,
    batch_size,
    run_mode,
    api,
    host_cores,
    seed,
    output,
):
    """Tune partition size and credit (ByteScheduler §4.3) on a cluster while it trains.

    One coordinator decides (Bayesian optimization over measured throughput); every worker
    applies each setting at the same step: credit live, a new partition size by a new session on
    the same graph (the variables stay on the PS). The first trial is ByteScheduler's setting
    sized for the model and link; after the trials the leaders are measured again, and the
    leader with the best mean throughput is applied at the end. --objective balanced weighs the
    throughput by how long the workers wait for each other (in synchronized steps, --sync), and
    --push-credit searches the window of the workers' pushes with it.

    With --api tf2 (TensorFlow 2's ParameterServerStrategy), each trial is a coordinator of its own
    on the same cluster, as a round of bench --api tf2, and vanilla TensorFlow runs before and after
    the trials; the result says the best setting's gain and the enable_functions call that puts it
    in force, and bench --api tf2 --tuned FILE runs it beside the other modes.

    \b
    Example:
      tfsched tune --model vgg16 --workers 4 --bandwidth 1Gbit --trials 12 -o vgg16-tune.json
      tfsched tune --model vgg16 --workers 4 --algorithm tao --host-credit -o vgg16-tune.json
      tfsched tune --model vgg16 --workers 4 --host-credit --host-order priority -o lockstep.json
      tfsched tune --api tf2 --model vgg16 --mode inference --workers 4 --host-credit -o tf2-tune.json
      tfsched tune --model vgg16 --workers 4 --host-credit --sync --push-credit --objective balanced
    """
    from rich.console import Console

    from tfsched.io import check_writable, write_atomic
    from tfsched.tune.run import tune_cluster
    from tfsched.tune.search import PUSH_CREDIT_LOG2, Space

    _check_loopback(loopback, shaped_loopback, bandwidth, latency)
    if model is not None and graph_path is not None:
        raise click.UsageError("give either --model or --graph")
    _check_ps_placement(graph_path)
    if api == "tf2":
        ps_placement = _check_tf2_tune(ps_placement)
    if graph_path is not None and run_mode != "train":
        raise click.UsageError("--mode is a built-in model's: a saved graph runs its --fetch")
    if partition and not credit_only:
        raise click.UsageError("--partition fixes the partition size of --credit-only; add it")
    _check_host_order(host_order, host_credit)
    if objective == "balanced" and not sync:
        raise click.UsageError("--objective balanced weighs how long workers wait for each other: add --sync")
    if push_credit and objective != "balanced":
        raise click.UsageError(
            "--push-credit evens out the workers, not the throughput: add --objective balanced (and --sync)"
        )
    _check_host_cores(host_cores)
    check_writable(output)  # not after the trials

    if model is None and graph_path is None:
        model = "seq32"
    if (
        graph_path is not None
        and click.get_current_context().get_parameter_source("ps") == ParameterSource.DEFAULT
    ):
        ps = None  # the PS tasks the graph's ops are placed on
    space = Space(
        partition=partition if credit_only else None,
        push_credit_log2=PUSH_CREDIT_LOG2 if push_credit else None,
    )
    console = Console(stderr=True)
    with console.status("tuning") as status:

        def progress(msg: str) -> None:
            status.update(msg)
            if msg.startswith("trial"):
                console.print(msg, soft_wrap=True)  # one line a trial, for logs too

        both = dict(
            workers=workers,
            ps=ps,
            ps_placement=ps_placement,
            bandwidth_bps=None if loopback else bandwidth,
            latency_s=latency,
            relays=shaped_loopback,
            algorithm=algorithm,
            run_mode=run_mode,
            batch_size=batch_size,
            trials=trials,
            measure=measure,
            search=search,
            seed=seed,
            space=space,
            host_credit=host_credit,
            host_order=host_order,
            ack_share=ack_share,
            credit_return=credit_return,
            confirm=confirm,
            confirm_rounds=confirm_rounds,
            from_defaults=not no_defaults,
            progress=progress,
            host_cores=host_cores,
        )
        if api == "tf2":
            from tfsched.tune.tf2 import tune_tf2

            result = tune_tf2(model, **both)
        else:
            result = tune_cluster(
                model,
                graph_path=graph_path,
                fetches=list(fetches) or None,
                init=init,
                tag_set=tag_set,
                settle=settle,
                prescreen_keep=prescreen,
                sync=sync,
                objective=objective,
                **both,
            )
    doc = result.to_json()
    write_atomic(output, lambda f: json.dump(doc, f, indent=1))
    if len(result.leaders) > 1:  # the margin the winner won by, beside the trials' noise
        from tfsched.tune.search import Setting

        click.echo(
            "leaders: "
            + "; ".join(
                f"{Setting.from_json(x).describe()} {x['value']:.3f} (mean of {x['measurements']})"
                for x in result.leaders
            )
        )
    b = result.best
    best = doc["best"]
    got = f"{best['throughput_steps_per_s']:.3f} steps/s"
    if "straggler" in best:
        got += f", straggler effect {best['straggler']:.3f}"
    repeats = sum(t.confirm for t in result.history)
    line = (
        f"best: {b.describe()}, {got} (mean of {best['measurements']}"
        f" {'repeats' if best.get('repeats_only') else 'measurements'}) over "
        f"{len(result.history) - repeats} trials"
        + (f" and {repeats} repeats of the leaders" if repeats else "")
    )
    if api == "tf2":
        c = doc["config"]
        vanilla = ", ".join(f"{v:.3f}" for v in c["baseline_steps_per_s"])
        click.echo(
            f"{line}: {c['best_vs_baseline']:.3f}x vanilla TensorFlow's steps/s ({vanilla}, before and after)"
        )
        click.echo(f"in force with: {c['enable']}")
        if c["algorithm"] != "tio":
            click.echo(
                f"SCHEDULE.json: tfsched analyze GRAPH --trace TRACE --algorithm {c['algorithm']} "
                "-o SCHEDULE.json, GRAPH the step function as the pass got it "
                "(enable_functions(dump_graphs=DIR)), TRACE its calls (tfsched.trace_functions)"
            )
    else:
        click.echo(f"{line}; applied on {len(result.applied)} workers")
    click.echo(f"results: {output}")


def run() -> None:
    """The ``tfsched`` command in a process of its own (the console script, ``python -m
    tfsched.cli``): ``main``, with TensorFlow imported without Keras 3 (``LEGACY_KERAS``) as in
    every process tfsched starts. ``main`` called in a process that is not its own (click's
    CliRunner, a user's code) leaves that process's environment as it is."""
    os.environ.setdefault(*LEGACY_KERAS)
    main()


if __name__ == "__main__":
    run()
