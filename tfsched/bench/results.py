"""Writing a side-by-side run: one JSON record and one Markdown table."""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
from itertools import accumulate

from tfsched.bench.run import (
    TIMED,
    ModeResult,
    crosses,
    placed_mode,
    split_placed,
    spread,
    steady_spread,
    steady_step,
    steps_across,
    training_step_s,
)
from tfsched.bench.stagger import PHASE_NAMES, PHASES
from tfsched.enforce.build import current_build_id
from tfsched.io import write_atomic
from tfsched.models.build import BATCH_NORM_MODELS


def paired_ratio_ci(mode: ModeResult, base: ModeResult, level: float = 0.95) -> tuple[float, float] | None:
    """Confidence interval of the mode's throughput over the baseline's, from paired rounds.

    Rounds interleave the modes, so round k of a mode and round k of the baseline ran under the
    same drift: their throughput ratio is one paired sample. The interval is Student's t on the
    logarithms of the per-round ratios (ratios are multiplicative); None with fewer than 3 rounds.
    """
    pairs = [
        (s / w) / (bs / bw)
        for (s, w), (bs, bw) in zip(mode.rounds, base.rounds, strict=False)
        if w > 0 and bw > 0 and s > 0 and bs > 0
    ]
    if len(pairs) < 3:
        return None
    _, low, high = ratio_interval(pairs, level)
    return low, high


def ratio_interval(ratios: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """The geometric mean of ``ratios`` (at least two) and Student's t interval around it, on
    their logarithms (ratios multiply). ``paired_ratio_ci``'s over a run's rounds, and
    ``benchmarks/pool_runs.py``'s over runs.

    >>> [round(x, 3) for x in ratio_interval([1.2, 1.5, 1.35])]
    [1.344, 1.019, 1.774]
    """
    import numpy as np
    from scipy import stats

    logs = np.log(ratios)
    half = stats.t.ppf(0.5 + level / 2, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs))
    mean = logs.mean()
    return float(np.exp(mean)), float(np.exp(mean - half)), float(np.exp(mean + half))


def cpu_description(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The processor every task of the run shared: model name, family/model numbers, clock, cores.

    The same command's CPU per step moved by 1.4x to 1.9x between sessions of this project
    (ResNet-50 at 10 Gbit/s: 1.48 CPU seconds a baseline step in the thirteenth session, 0.91
    and 0.94 in two runs of the sixteenth on an AMD EPYC of family 25, model 17), and with it
    the balance of computation and communication that every ratio depends on: a row says which
    processor it ran on. Falls back to ``platform.processor()`` where there is no /proc/cpuinfo.
    """
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the first processor's block is enough: the machine's are alike
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or "unknown processor"
    if "cpu family" in fields and "model" in fields:
        name += f" (family {fields['cpu family']}, model {fields['model']})"
    if fields.get("cpu MHz"):
        try:
            name += f", {float(fields['cpu MHz']):.0f} MHz"
        except ValueError:
            pass
    return f"{name}, {os.cpu_count() or 1} cores"


def summarize(results: dict[str, ModeResult], config: dict, build: str | None = None) -> dict:
    """The run's summary that ``write`` writes: its config, the machine, and per mode its results
    and ratio to the baseline. ``build``: the build of the op the run's tasks loaded
    (``current_build_id`` when they started; until the 124th session it was taken here, after
    the run, from sources that may have changed meanwhile); None: the current one."""
    baseline = results.get("baseline")
    base = baseline.throughput if baseline else 0.0
    rows = []
    for r in results.values():
        row = r.to_json()
        row["vs_baseline"] = r.throughput / base if base else None
        ci = paired_ratio_ci(r, baseline) if baseline and r is not baseline else None
        row["vs_baseline_ci95"] = list(ci) if ci else None
        # a mode on another placement (MODE@P): also over that placement's own baseline
        where = split_placed(r.mode)[1]
        own = results.get(placed_mode("baseline", where)) if where is not None else None
        if own is not None and own is not r and own.throughput:
            row["vs_placement_baseline"] = r.throughput / own.throughput
        rows.append(row)
    return {
        "benchmark": "tfsched bench",
        "config": config,
        "machine": platform.platform(),
        "cpu": cpu_description(),
        "cores": os.cpu_count() or 1,
        "tfsched_build": build or current_build_id(),
        "modes": rows,
    }


def ratio_text(r: dict) -> str:
    """A mode's throughput over the baseline's, and its 95% interval where there is one."""
    out = f"{r['vs_baseline']:.3f}x"
    if r.get("vs_baseline_ci95"):
        lo, hi = r["vs_baseline_ci95"]
        out += f" ({lo:.2f}-{hi:.2f})"
    return out


def sync_spread(r: dict) -> float | None:
    """A mode's p95/p50 of the synchronized steps (each as long as its slowest worker), from its
    JSON record; recomputed from the raw iterations for files written before the twenty-fifth
    session, None for files from before the seventh (no iterations)."""
    if r.get("iteration_p95_over_p50"):
        return r["iteration_p95_over_p50"]
    its = [max(it) for it in r.get("iterations") or [] if it]
    return spread(its) if its else None


def realigned(r: dict, steps: int) -> dict:
    """A mode's JSON record with its steps across the barrier as the bench times them since the
    seventy-ninth session (``bench.run.steps_across``): a record of a mode across the barrier
    from a file of before it, whose iterations are each worker's own steps, with its iterations,
    straggler effect, synchronized steps' p95/p50 and their mean worked out again. A worker's
    ends are its own steps added up from its round's start (``steps`` a round), where a barrier
    started every worker's first step together; where the steps so worked out do not add up to
    the rounds' wall time (within 0.5%), the record is left as it was measured. A record across the
    barrier gets its step once the pipeline is full (``bench.run.steady_step``) from its steps.
    Any other record as it is.

    >>> old = {"mode": "cross", "iterations": [[2.0, 1.0], [1.0, 2.0]], "straggler": 0.5}
    >>> new = realigned(old, 2)
    >>> new["iterations"], new["straggler"], new["iteration_mean_s"]
    ([[2.0, 1.0], [1.0, 1.0]], 0.25, 1.5)
    """
    its = r.get("iterations") or []
    if not crosses(r["mode"]) or not its or steps <= 0:
        return r
    if len({len(it) for it in its}) != 1 or len(its) % steps:
        return r  # not whole rounds of every worker's steps: left as it was measured
    redone = {}
    if not r.get("iterations_from"):
        out = []
        for k in range(0, len(its), steps):
            one = its[k : k + steps]
            out += steps_across([list(accumulate(step[w] for step in one)) for w in range(len(one[0]))])
        res = ModeResult(r["mode"], iterations=out)
        step, rate = statistics.fmean(res.iteration_times), r.get("throughput_steps_per_s")
        if rate and abs(step - len(out[0]) / rate) > 0.005 * step:
            # they do not add up to the rounds' wall time (the seventy-sixth session's runs at
            # one compute run a time: 1% to 15% short), so no alignment follows from them
            return r
        its = out
        redone = {
            "iterations": out,
            "iterations_from": "last_end",
            "straggler": res.straggler,
            "iteration_p95_over_p50": spread(res.iteration_times),
            "iteration_mean_s": step,
        }
    # the step once the pipeline is full, as today's ``steady_step`` takes it from the raw times
    # (files from before the seventy-ninth session do not keep it)
    steady = steady_step(its, len(its) // steps)
    if steady != r.get("steady_step_s"):
        redone["steady_step_s"] = steady
    return {**r, **redone} if redone else r


def _parenthesized(*parts: str) -> str:
    """The non-empty ``parts`` in parentheses after a space, separated by semicolons; nothing
    for none.

    >>> _parenthesized("1.4x", ""), _parenthesized("", "")
    (' (1.4x)', '')
    """
    said = [p for p in parts if p]
    return f" ({'; '.join(said)})" if said else ""


def step_of(r: dict, workers: int) -> float | None:
    """A mode's measured training step from its JSON record (``bench.run.training_step_s``):
    the mean of its synchronized steps' slowest worker, across the barrier the rounds' wall time
    over their steps; None for files from before the seventh session (no iteration times)."""
    if not r.get("iteration_mean_s"):
        return None
    return training_step_s(r["mode"], r["iteration_mean_s"], r.get("throughput_steps_per_s", 0.0), workers)


def prediction_error(r: dict, workers: int) -> float | None:
    """The simulator's error on a mode's step, against ``step_of``: as the bench stores it, and for
    a mode across the barrier from a file of before the seventy-eighth session (whose error was
    against the mean of each step's slowest worker) worked out again."""
    step = step_of(r, workers)
    if crosses(r["mode"]) and step and r.get("predicted_s") is not None:
        return (r["predicted_s"] - step) / step
    return r.get("prediction_error")


def _number(x: float | None, fmt: str = ".3f") -> str:
    return "-" if x is None else format(x, fmt)


def _placed(ps_placement: str | list[str]) -> str:
    """How the variables were spread, where not by the bytes each moves (the default), for the
    header; several placements: the first's, and how the others' modes are named.

    >>> _placed("bytes"), _placed("held")
    ('', ' (variables placed held)')
    >>> _placed(["bytes", "held", "round-robin"])
    ' (variables placed bytes; as MODE@held held, as MODE@round-robin round-robin)'
    """
    if isinstance(ps_placement, str):
        return f" (variables placed {ps_placement})" if ps_placement != "bytes" else ""
    first, *others = ps_placement
    return f" (variables placed {first}; " + ", ".join(f"as MODE@{p} {p}" for p in others) + ")"


def tuned_lines(config: dict) -> list[str]:
    """bench --tuned: which mode ran the tune file's best setting (none without)."""
    t = config.get("tuned")
    return ["", f"`{t['mode']}`: the best setting of `tfsched tune` ({t['file']})."] if t else []


# a mode whose cores were at least this busy over its rounds ran at the cores' limit
CORES_LIMIT_BUSY = 0.95


def machine_cores(summary: dict) -> int | None:
    """The cores every task of the run shared: the summary's ``cores``, or (files from before the
    fifty-seventh session) the end of its processor's description ("..., 2 cores")."""
    if summary.get("cores"):
        return int(summary["cores"])
    m = re.search(r", (\d+) cores$", summary.get("cpu") or "")
    return int(m[1]) if m else None


def slots_lines(summary: dict) -> list[str]:
    """What the simulated machine's share of the cores was reckoned from (``bench.predict.annotate``),
    and where it came from the op times because the bytes, as reckoned, took all the CPU a step
    spent, that (``ops_cpu_s_per_step``, since the seventieth session). None before it was kept.

    >>> r = {"machine_slots": 0.654, "host_slots": None, "slots_from": "the op times", "ops_cpu_s_per_step": -0.02}
    >>> print(slots_lines({"modes": [r]})[1])
    The simulated machine ran 0.65 lone-worker ops at once, reckoned from the op times: the bytes' CPU, as reckoned, was all the CPU a step spent (0.02 s over it).
    """
    r = next((r for r in summary["modes"] if r.get("slots_from")), None)
    if r is None:
        return []
    text = f"The simulated machine ran {r['machine_slots']:.2f} lone-worker ops at once"
    if r.get("host_slots"):
        text += f", each task at most {r['host_slots']:.2f}"
    text += f", reckoned from {r['slots_from']}"
    left = r.get("ops_cpu_s_per_step")
    if r["slots_from"] == "the op times" and left is not None and left <= 0:
        text += f": the bytes' CPU, as reckoned, was all the CPU a step spent ({-left:.2f} s over it)"
    return ["", text + "."]


def cpu_floor_lines(summary: dict) -> list[str]:
    """The modes whose prediction is the CPU a baseline step spent over the machine's cores, not
    the simulator's shorter step (``bench.predict.machine_cpu_floor``; since the eighty-sixth
    session, whose files keep both). Each placement of a run (``MODE@PLACEMENT``) has its own
    baseline, and so its own floor.

    >>> rows = [{"mode": "baseline", "simulated_s": 1.20, "predicted_s": 1.20, "cpu_floor_s": 1.15},
    ...         {"mode": "tao", "simulated_s": 0.98, "predicted_s": 1.15, "cpu_floor_s": 1.15}]
    >>> print(cpu_floor_lines({"modes": rows, "cores": 2})[1])  # doctest: +NORMALIZE_WHITESPACE
    The simulator stepped `tao` in 0.98 s, under the 1.15 s that the CPU a baseline step spent
    takes on the machine's 2 cores: an order does not take that work away, so that is its
    prediction (the simulated machine, whose ops take their fastest traced times, did less work
    a second than the measured one).
    >>> rows.append({"mode": "tao+pc", "simulated_s": 1.0, "predicted_s": 1.17, "cpu_floor_s": 1.17,
    ...              "added_messages": 200.0})
    >>> print(cpu_floor_lines({"modes": rows, "cores": 2})[1].split(":")[1])  # doctest: +NORMALIZE_WHITESPACE
     `tao+pc` 200 a step)
    >>> rows[-1]["reassembled_bytes"] = 264e6
    >>> print(cpu_floor_lines({"modes": rows, "cores": 2})[1].split(":")[1])  # doctest: +NORMALIZE_WHITESPACE
     `tao+pc` 200 and 264.0 MB a step)
    >>> rows[2:] = [{"mode": "tao@held", "simulated_s": 1.0, "predicted_s": 1.25, "cpu_floor_s": 1.25}]
    >>> print(cpu_floor_lines({"modes": rows, "cores": 2})[1].split(":")[0])  # doctest: +NORMALIZE_WHITESPACE
    The simulator stepped `tao` in 0.98 s, under the 1.15 s, and `tao@held` in 1.00 s, under the
    1.25 s, that the CPU a baseline step spent takes on the machine's 2 cores
    """
    held = [
        r
        for r in summary["modes"]
        if r.get("cpu_floor_s") and r.get("simulated_s") is not None and r["predicted_s"] > r["simulated_s"]
    ]
    if not held:
        return []
    by_floor: dict[float, list[dict]] = {}
    for r in held:
        by_floor.setdefault(r["cpu_floor_s"], []).append(r)
    stepped = ", and ".join(
        ", ".join(f"`{r['mode']}` in {r['simulated_s']:.2f} s" for r in these) + f", under the {floor:.2f} s"
        for floor, these in by_floor.items()
    )
    if len(by_floor) > 1:
        stepped += ","
    cores = machine_cores(summary)
    one = len(held) == 1
    added = ", ".join(
        f"`{r['mode']}` {r.get('added_messages') or 0:.0f}"
        + (f" and {r['reassembled_bytes'] / 1e6:.1f} MB" if r.get("reassembled_bytes") else "")
        for r in held
        if r.get("added_messages") or r.get("reassembled_bytes")
    )
    if added:  # since the eighty-ninth session (bench.predict.added_messages)
        # and the copies that put its cut tensors back together, since the ninetieth
        copies = (
            ", and the bytes of the tensors it cut that it puts back together, at the measured CPU "
            "of copying one"
            if any(r.get("reassembled_bytes") for r in held)
            else ""
        )
        # an acknowledgement at what one measured alone, since the ninety-first (run.ack_cpu_s)
        acks = (
            " (an acknowledgement at what one was measured to cost)"
            if any(r.get("ack_cpu_s") for r in summary["modes"])
            and any(r.get("acknowledgements") for r in held)
            else ""
        )
        added = (
            f" (with the messages a mode adds to it, its slices and acknowledgements, at the measured "
            f"CPU of one{acks}{copies}: {added} a step)"
        )
    return [
        "",
        f"The simulator stepped {stepped} that the CPU a baseline step spent takes on the machine's "
        f"{f'{cores} ' if cores else ''}cores{added}: an order does not take that work away, so that is "
        f"{'its' if one else 'their'} prediction (the simulated machine, whose ops take their fastest traced "
        "times, did less work a second than the measured one).",
    ]


def cores_limit_lines(summary: dict) -> list[str]:
    """The modes that ran at the cores' limit (``CORES_LIMIT_BUSY``), with the shortest step their
    CPU work allows on the machine's cores and what that leaves to win over the baseline.

    Every task of the bench shares this machine's cores, where a real cluster's workers have
    their own: a mode that keeps them busy cannot step faster than its CPU seconds a step over
    the cores, whatever its order, and its ratio to the baseline is then the baseline's idle share
    to win (VGG16 inference at batch 708, fifty-seventh session: 10.2 CPU seconds a step on two
    cores, at least 5.11 s, against the baseline's 7.63 s: at most 1.49x, measured 1.486x).
    """
    cores = machine_cores(summary)
    own = summary["config"].get("host_cores")
    if own:  # no task takes the cores another leaves idle: the machine's busy share bounds nothing
        text = (
            f"Every task had {own:g} core{'' if own == 1 else 's'} of its own (a CPU quota: the machine's "
            f"{f'{cores} ' if cores else ''}cores are not lent between tasks), so the machine's busy share "
            "does not bound a step: each worker's own cores do."
        )
        config = summary["config"]
        quota = own * (config.get("ps", 0) + config.get("workers", 0))
        if cores and quota > cores + 1e-9:
            # measured (eighty-first session): the Transformer across the barrier, synchronized
            # steps' p95/p50 1.133 at 2.5 cores of quota on 2, 1.073 at 2.0 (the baseline's 1.09
            # and 1.07)
            text += (
                f" Their quotas add up to {quota:g} cores on the machine's {cores}, though: when every "
                "task computes at once they share the machine's cores as its kernel schedules them, not "
                "each its own: a mode that keeps every task busy is held to the machine's cores, and "
                "steps less steadily than on hosts of its own."
            )
        return ["", text]
    full = [
        r
        for r in summary["modes"]
        if r.get("cpu_s_per_step") and r.get("iteration_mean_s") and r.get("cpu_busy", 0) >= CORES_LIMIT_BUSY
    ]
    if not cores or not full:
        return []
    base = next((r for r in summary["modes"] if r["mode"] == "baseline" and r.get("iteration_mean_s")), None)
    lines = [
        "",
        f"At the cores' limit ({CORES_LIMIT_BUSY:.0%} busy or more; every task shares the {cores} cores):",
    ]
    for r in full:
        floor = r["cpu_s_per_step"] / cores
        line = (
            f"`{r['mode']}`, {r['cpu_busy']:.0%} busy: {r['cpu_s_per_step']:.2f} CPU seconds a step take at least "
            f"{floor:.2f} s (slowest worker {r['iteration_mean_s']:.2f} s)"
        )
        if base is not None and base is not r:
            line += f"; at most {base['iteration_mean_s'] / floor:.2f}x the baseline's {base['iteration_mean_s']:.2f} s"
        lines.append(f"- {line}.")
    return lines


def floor_lines(summary: dict) -> list[str]:
    """What no order can beat in the simulator: its floor (``sim.metrics.Bounds.floor``: the
    dependencies and each resource of the traced baseline's graph), against the baseline's
    simulated and measured step (none before the sixty-first session, or without traces). The
    floor is as right as the simulator's op times: where a mode measured under it, it says so.
    It is the floor behind TensorFlow's barrier: a mode that crosses it (``bench.run.crosses``)
    is not bounded by it, and a crossing mode under it is said to be past the barrier.

    >>> rows = [{"mode": "baseline", "floor_s": 4.0, "predicted_s": 5.0, "iteration_mean_s": 6.0}]
    >>> print(floor_lines({"modes": rows})[1])  # doctest: +NORMALIZE_WHITESPACE
    In the simulator no order steps faster than its floor of 4.00 s (for each link, channel and
    task: the least time before the first thing it serves, its work, and the least time after the
    last): at most 1.25x the simulated baseline (5.00 s), 1.50x the measured one (6.00 s).
    >>> rows.append({"mode": "tio", "iteration_mean_s": 3.8})
    >>> print(floor_lines({"modes": rows})[1].split("). ")[-1])  # doctest: +NORMALIZE_WHITESPACE
    `tio` measured 3.80 s, under the floor: the simulator's op times were slower than this run's
    ops, and the floor is off as much.
    >>> rows[-1]["mode"] = "layer+pc+ready+cross"
    >>> print(floor_lines({"modes": rows})[1].split("). ")[-1])  # doctest: +NORMALIZE_WHITESPACE
    `layer+pc+ready+cross` measured 3.80 s, under the floor: across the barrier the floor is
    laid out behind.
    """
    base = next((r for r in summary["modes"] if r["mode"] == "baseline" and r.get("floor_s")), None)
    if base is None:
        return []
    floor = base["floor_s"]
    line = (
        f"In the simulator no order steps faster than its floor of {floor:.2f} s (for each link, channel and "
        "task: the least time before the first thing it serves, its work, and the least time after the last): "
        f"at most {base['predicted_s'] / floor:.2f}x the simulated baseline ({base['predicted_s']:.2f} s)"
    )
    if base.get("iteration_mean_s"):
        line += (
            f", {base['iteration_mean_s'] / floor:.2f}x the measured one ({base['iteration_mean_s']:.2f} s)"
        )
    if base.get("floor_by"):  # since the sixty-first session
        line += f". It is set by {base['floor_by']}"
    workers = summary.get("config", {}).get("workers", 0)
    steps = {r["mode"]: step_of(r, workers) for r in summary["modes"]}
    under = [r for r in summary["modes"] if steps[r["mode"]] and steps[r["mode"]] < floor]
    for crossing, why in (
        (False, "the simulator's op times were slower than this run's ops, and the floor is off as much"),
        (True, "across the barrier the floor is laid out behind"),
    ):
        these = [r for r in under if crosses(r["mode"]) == crossing]
        if these:
            line += ". " + ", ".join(f"`{r['mode']}` measured {steps[r['mode']]:.2f} s" for r in these)
            line += f", under the floor: {why}"
    return ["", line + "."]


def stagger_lines(summary: dict) -> list[str]:
    """The straggler effect by phase (``bench.stagger``), where the traced steps measured it
    (files from before the forty-ninth session have none)."""
    rows = [r for r in summary["modes"] if r.get("stagger")]
    if not rows:
        return []
    lines = [
        "",
        f"Where the workers part, over the traced step{'s' if summary['config'].get('trace_steps', 1) > 1 else ''}"
        " of each mode (every worker traced; the latest worker minus the earliest, over the step):",
        "",
        "| mode | " + " | ".join(PHASE_NAMES[p] for p in PHASES) + " |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['mode']} | " + " | ".join(_number(r["stagger"].get(p)) for p in PHASES) + " |")
    if any(crosses(r["mode"]) for r in rows):
        lines += [
            "",
            "Across the barrier a worker's traced step is both of its runs, from its compute run's "
            "first op (which starts while the step before still computes: its reads wait on the PS) "
            "to its last update: each step overlaps the next.",
        ]
    return lines


def link_text(config: dict) -> str:
    """The hosts a run had, as its title says them: the link, its latency and queue, the relays
    where they shaped it, and the cores of its own each host had (``bench.hostcpu``) where they
    did not share the machine's."""
    link = f"{config['bandwidth']}" + (f", {config['latency']} latency" if config.get("latency") else "")
    link += f", links queueing at most {config['queue']}" if config.get("queue") else ""
    link += ", shaped by relays on loopback" if config.get("links") == "relays" else ""
    if config.get("host_cores"):
        from tfsched.bench.hostcpu import describe

        link += f", {describe(config['host_cores'])}"
    return link


def markdown(summary: dict) -> str:
    c = summary["config"]
    # the crossing modes of a file of before the seventy-ninth session: their steps aligned again,
    # or left as measured where they do not add up to the rounds' wall time (``realigned``)
    modes = [realigned(r, c["steps"]) for r in summary["modes"]]
    old = [
        (r["mode"], bool(now.get("iterations_from")))
        for r, now in zip(summary["modes"], modes, strict=True)
        if crosses(r["mode"]) and r.get("iterations") and not r.get("iterations_from")
    ]
    redone, kept = [m for m, again in old if again], [m for m, again in old if not again]
    summary = {**summary, "modes": modes}
    link = link_text(c)
    link += f", {c['inter_op_threads']} inter-op threads a task" if c.get("inter_op_threads") else ""
    link += ", idle threads not spinning" if c.get("thread_spinning") is False else ""
    batch = f", batch {c['batch_size']}" if c.get("batch_size") else ""
    if c["mode"] == "train" and c["model"] in BATCH_NORM_MODELS and not c.get("moving_averages"):
        batch += ", without batch normalization's moving averages"  # the key's absence too: see bench
    # how the variables were spread, where not by the bytes each moves (the default)
    placed = _placed(c.get("ps_placement", "bytes"))
    lines = [
        f"**{c['model']}** ({c['mode']}{batch}), {c['ps']} PS{placed} x {c['workers']} workers, {link}, "
        f"{c['rounds']} interleaved rounds of {c['steps']} synchronized steps per worker"
        + (
            "; vs baseline: over all rounds (95% interval of the paired per-round ratios)"
            if any(r.get("vs_baseline_ci95") for r in summary["modes"])
            else ""
        ),
        # files from before the sixteenth session do not say which processor ran them
        *(["", f"Processor: {summary['cpu']}."] if summary.get("cpu") else []),
        # files from before the hundred-and-seventeenth session do not say which build made them
        *(["", f"tfsched build: {summary['tfsched_build']}."] if summary.get("tfsched_build") else []),
        "",
        "| mode | steps/s | vs baseline | p50 step (s) | p95 step (s) | p95/p50 | sync p95/p50 | straggler "
        "| E (measured) | slowest worker (s) | simulated (s) | sim. error | CPU s/step (busy) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary["modes"]:
        vs = ratio_text(r) if r["vs_baseline"] else "-"
        if r.get("vs_placement_baseline"):
            vs += f"; {r['vs_placement_baseline']:.3f}x of baseline@{split_placed(r['mode'])[1]}"
        e = f"{r['efficiency_E']:.2f}" if r.get("efficiency_E") is not None else "-"
        pred = f"{r['predicted_s']:.4f}" if r.get("predicted_s") is not None else "-"
        err = _number(prediction_error(r, c["workers"]), "+.0%")
        # files from before the seventh session have no iteration times (their error is
        # against the mean step of all workers); across the barrier, the training step (*)
        step = step_of(r, c["workers"])
        slowest = "-" if step is None else f"{step:.4f}" + ("*" if crosses(r["mode"]) else "")
        # the whole machine's CPU per synchronized step (files from before the eighth session: -)
        cpu = f"{r['cpu_s_per_step']:.2f} ({r['cpu_busy']:.0%})" if r.get("cpu_s_per_step") else "-"
        lines.append(
            f"| {r['mode']} | {r['throughput_steps_per_s']:.3f} | {vs} | {r['p50_s']:.4f} | {r['p95_s']:.4f} | "
            f"{r['p95_over_p50']:.3f} | {_number(sync_spread(r))} | {r['straggler']:.3f} | {e} | {slowest} "
            f"| {pred} | {err} | {cpu} |"
        )
    lines += [
        "",
        "p95/p50: of every worker's step times; sync p95/p50: of the synchronized steps, each as long "
        "as its slowest worker (how steady the training step is; the workers' stagger within a step "
        "is the straggler effect).",
    ]
    if any(crosses(r["mode"]) and r.get("iteration_mean_s") for r in summary["modes"]):
        lines += [
            "",
            "*: across the barrier nothing starts the workers' steps together: a synchronized step runs "
            "from the last worker's end of the step before to the last one's end of its own, and a "
            "worker's part of it (in the straggler effect and sync p95/p50) ends with its own step. The "
            "training step is the rounds' wall time over their steps (what the throughput is of), which "
            "the simulator predicts.",
        ]
        base = next((r for r in summary["modes"] if r["mode"] == "baseline"), None)
        base_step = step_of(base, c["workers"]) if base else None
        steady = [r for r in summary["modes"] if r.get("steady_step_s")]

        def middle_spread(r: dict) -> float | None:  # from the raw times, as steady_step_s
            its = r.get("iterations") or []
            return steady_spread(its, len(its) // c["steps"]) if c.get("steps") else None

        if steady:
            base_spread = middle_spread(base) if base else None
            lines[-1] += (
                " Once the pipeline is full (a round's steps but its first, whose pulls have no step "
                "before them to overlap, and its last, whose compute run has no run after it to share "
                "the machine with: a long training has each once, these rounds each time): "
                + ", ".join(
                    f"`{r['mode']}` {r['steady_step_s']:.3f} s"
                    + _parenthesized(
                        f"{base_step / r['steady_step_s']:.3f}x the baseline's step" if base_step else "",
                        f"sync p95/p50 {sp:.3f}" if (sp := middle_spread(r)) else "",
                    )
                    for r in steady
                )
                + "."
                + (
                    f" The baseline's sync p95/p50 over the same places in its rounds: {base_spread:.3f}."
                    if base_spread
                    else ""
                )
            )
        if redone:
            lines[-1] += (
                " This file is from before the seventy-ninth session, which timed each worker's part "
                "from its own step before: the parts of "
                + ", ".join(f"`{m}`" for m in redone)
                + " were worked out again from those times."
            )
        if kept:
            lines[-1] += (
                " This file is from before the seventy-ninth session: the parts of "
                + ", ".join(f"`{m}`" for m in kept)
                + " are each worker's own steps, each from its own step before, as measured: they do "
                "not add up to the rounds' wall time, so they were not worked out again."
            )
    lines += cores_limit_lines(summary)
    lines += cpu_floor_lines(summary)
    lines += floor_lines(summary)
    lines += stagger_lines(summary)
    # the graph the simulator laid out (tracing.replay.graph_that_ran): since the twenty-ninth session
    laid = next((r["simulated_graph"] for r in summary["modes"] if r.get("simulated_graph")), None)
    if laid and laid["from"] == "ran":
        differs = laid["transfers"] != laid["saved_transfers"]
        lines += [
            "",
            f"Simulated on the partition graphs the traced baseline ran ({laid['transfers']} transfers a worker"
            + (
                f"; the saved graph has {laid['saved_transfers']}, before Grappler's rewrites)."
                if differs
                else ")."
            ),
        ]
    lines += slots_lines(summary)
    # how the simulated links were shared (bench.predict.fit_worker_weight): since the forty-fifth
    # session, per placement
    weights = {
        split_placed(r["mode"])[1]: r["worker_weight"] for r in summary["modes"] if "worker_weight" in r
    }
    if weights:
        lines += [
            "",
            "Simulated with the links shared as unequally as the baseline's workers staggered: worker k's "
            "flows weigh w^k, w = "
            + ", ".join(f"{w:.2f}" + (f" (MODE@{where})" if where else "") for where, w in weights.items())
            + " (1: evenly).",
        ]
    # TAO's op times (bench.run.mode_configs): a trace since the seventeenth session
    timed = [r for r in summary["modes"] if split_placed(r["mode"])[0].split("+")[0] in TIMED]
    if timed:
        lines += [
            "",
            "TAO ordered from "
            + (
                "worker 0's op times, traced alone before the rounds."
                if all(r.get("ordered_from") for r in timed)
                else "the cost model's op times (the bench did so until the seventeenth session)."
            ),
        ]

    # +pc is sized for the link (tfsched.enforce.link_sizes): say what it was here (+wN, the
    # pushes' window, leaves +pc's sizes as they are)
    def knobs(r: dict) -> set[str]:
        return {
            k for k in split_placed(r["mode"])[0].split("+")[1:] if not (k[:1] == "w" and k[1:].isdigit())
        }

    sized = [r for r in summary["modes"] if {"pc"} <= knobs(r) <= {"pc", "host", "lockstep"}]
    # per placement (each sized for its own busiest channel), said once where they all agree
    sizes = {split_placed(r["mode"])[1]: (r["partition"], r["credit"]) for r in sized if r.get("partition")}
    if sizes:
        texts = [f"partition {p:,}, credit {n:,} parameters" for p, n in sizes.values()]
        if len(set(sizes.values())) > 1:
            texts = [
                f"{t} ({f'MODE@{w}' if w else 'the first placement'})"
                for w, t in zip(sizes, texts, strict=True)
            ]
        lines += ["", "`+pc` here: " + "; ".join(dict.fromkeys(texts)) + "."]
    if any(r.get("push_credit") for r in summary["modes"]):
        lines += [
            "",
            "`+wN`: the workers' pushes under a window of N parameters (`tfsched.enable(push_credit=N)`; "
            "until the fifty-third session a live credit set on the worker tasks while the mode ran, "
            "`tfsched.set_credit`, the same window); the PS's pulls keep the mode's credit.",
        ]
    lines += tuned_lines(c)
    return "\n".join(lines) + "\n"


def glance(summaries: dict[str, dict]) -> str:
    """One line per benchmark row (name -> the JSON ``summarize`` wrote): its fastest mode, that
    mode's p95/p50 (of the workers' steps and of the synchronized steps) and straggler effect
    beside the baseline's, and its slowest mode.

    What a reader of BENCHMARKS.md wants before the full tables: where tfsched gains, what the
    gain costs in step-time spread and straggling, and whether any mode lost. Rows without a
    baseline or another mode are left out.
    """
    lines = [
        "| row | batch | fastest mode | vs baseline (95%) | p95/p50 (baseline) | sync p95/p50 (baseline) "
        "| straggler (baseline) | slowest mode | vs baseline (95%) | processor |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, summary in summaries.items():
        modes = [realigned(r, summary["config"]["steps"]) for r in summary["modes"]]
        base = next((r for r in modes if r["mode"] == "baseline"), None)
        others = [r for r in modes if r is not base and r.get("vs_baseline")]
        if base is None or not others:
            continue
        fast = max(others, key=lambda r: r["vs_baseline"])
        slow = min(others, key=lambda r: r["vs_baseline"])
        # model name and family/model (files from before the sixteenth session: -)
        cpu = re.sub(r", \d+ MHz|, \d+ cores", "", summary.get("cpu", "-"))
        lines.append(
            f"| {name} | {summary['config'].get('batch_size') or '-'} | {fast['mode']} | {ratio_text(fast)} "
            f"| {fast['p95_over_p50']:.3f} ({base['p95_over_p50']:.3f}) "
            f"| {_number(sync_spread(fast))} ({_number(sync_spread(base))}) "
            f"| {fast['straggler']:.3f} ({base['straggler']:.3f}) | {slow['mode']} | {ratio_text(slow)} | {cpu} |"
        )
    return "\n".join(lines) + "\n"


def plot(results: dict[str, ModeResult], summary: dict, png_path: str) -> None:
    """Throughput per mode (bars, against baseline) and the step-time CDF of every mode."""
    c = summary["config"]
    plot_modes(
        {m: r.throughput for m, r in results.items()},
        {m: r.step_times for m, r in results.items()},
        ("step time (s)", "fraction of steps", "step-time CDF"),
        f"{c['model']} ({c['mode']}), {c['ps']} PS x {c['workers']} workers, {c['bandwidth']}",
        png_path,
    )


def plot_modes(
    throughput: dict[str, float],
    times: dict[str, list[float]],
    cdf_labels: tuple[str, str, str],
    title: str,
    png_path: str,
) -> None:
    """Throughput per mode (bars, each against the baseline's) beside the CDF of each mode's
    ``times``, labelled ``cdf_labels`` (x, y, title); written whole to ``png_path`` or not at
    all. The session bench draws its steps so, ``bench.tf2`` its traced calls."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (bars, cdf) = plt.subplots(1, 2, figsize=(11, 4))
    names = list(throughput)
    tput = [throughput[m] for m in names]
    colors = ["0.6" if m == "baseline" else f"C{i}" for i, m in enumerate(names)]
    bars.bar(names, tput, color=colors)
    base = throughput.get("baseline", 0)
    for i, v in enumerate(tput):
        bars.text(i, v, f"{v / base:.2f}x" if base else "", ha="center", va="bottom", fontsize=8)
    bars.set_ylabel("steps/s (all workers)")
    bars.set_title("throughput")
    bars.tick_params(axis="x", rotation=30, labelsize=8)
    for i, m in enumerate(names):
        xs = sorted(times[m])
        if xs:
            cdf.step(xs, [(k + 1) / len(xs) for k in range(len(xs))], where="post", label=m, color=colors[i])
    xlabel, ylabel, cdf_title = cdf_labels
    cdf.set_xlabel(xlabel)
    cdf.set_ylabel(ylabel)
    cdf.set_title(cdf_title)
    cdf.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    write_atomic(png_path, lambda f: fig.savefig(f, format="png", dpi=110), binary=True)
    plt.close(fig)


def write(summary: dict, json_path: str, results: dict[str, ModeResult] | None = None) -> str:
    """Write ``<name>.json``, ``<name>.md`` and (with ``results``) ``<name>.png``; returns the Markdown path."""
    stem = json_path[: -len(".json")] if json_path.endswith(".json") else json_path
    write_atomic(json_path, lambda f: json.dump(summary, f, indent=1))
    write_atomic(stem + ".md", lambda f: f.write(markdown(summary)))
    if results:
        plot(results, summary, stem + ".png")
    return stem + ".md"
