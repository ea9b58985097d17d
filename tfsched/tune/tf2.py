"""``tfsched tune --api tf2``: partition and credit tuned for TensorFlow 2's ParameterServerStrategy.

The session tuner (``tune.run``) switches every worker to a trial's setting at the same step of
one running training: credit live, a new partition through a new session on the same graph. A
``ClusterCoordinator`` cannot do that: the pass's settings are the eager context's function-call
options, which each of the coordinator's worker threads keeps from its first call
(``tfsched.enable_functions``), so a function already running on the workers keeps the partition
it was instantiated with. Here a trial is therefore one coordinator round of the bench
(``tfsched.bench.tf2``): its own process on the same cluster (the PS and worker tasks, their
links), the setting put in force with ``enable_functions`` before the strategy is made, one
untimed warm-up step per worker, then ``measure`` timed steps per worker of asynchronous
training; its value is the round's steps over their wall time, what the bench reports. The
search, the defaults as the first trial and the repeats of the leaders are the session
tuner's (ByteScheduler §4.3, with the two additions ``tune_cluster`` describes). Vanilla
TensorFlow runs a round before the trials and one after them, on the same cluster, so that the
result says what the best setting gains.

What the session tuner does and this one does not: apply the best setting to a running
training (a user's coordinator takes it with ``enable_functions(partition=..., credit=...)``,
which ``tfsched tune`` prints), a simulator's pre-screen and synchronous steps (a coordinator's
steps are asynchronous). Links shaped by relays (``relays``) it has since the seventy-second
session: the coordinator hands every task the cluster's addresses, and they are relays that
pace each connection through the links of the task that opened it (``RelayedSpec.shared_spec``).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable

from tfsched.errors import TfschedError
from tfsched.tune.run import TuneResult
from tfsched.tune.search import SEARCHES, Setting, Space, confirm_order, judged_on_repeats


def tune_tf2(
    model: str = "seq32",
    *,
    workers: int = 2,
    ps: int = 1,
    ps_placement: str = "round-robin",
    bandwidth_bps: float | None = None,
    latency_s: float = 0.0,
    relays: bool = False,
    algorithm: str = "tio",
    run_mode: str = "train",
    batch_size: int = 4,
    image_size: int | None = None,
    trials: int = 8,
    measure: int = 3,
    search: str = "bayes",
    seed: int = 0,
    space: Space | None = None,
    host_credit: bool = False,
    host_order: str = "steps",
    ack_share: int | None = None,
    credit_return: str = "ack",
    confirm: int = 2,
    confirm_rounds: int = 1,
    from_defaults: bool = True,
    progress: Callable[[str], None] | None = None,
    host_cores: float = 0.0,
) -> TuneResult:
    """Tune (partition, credit) for ``model`` trained (or, ``run_mode="inference"``, run forward)
    by ``ParameterServerStrategy`` on ``ps`` PS and ``workers`` workers, each task a host with
    links of ``bandwidth_bps`` each way (namespaces, root, or with ``relays`` shaped on loopback
    by this process; None: loopback unshaped).

    ``ps_placement``: the strategy's (``bench.tf2.TF2_PS_PLACEMENTS``). ``algorithm``: ``tio``,
    or ``tao``/``layer``, ordered as the bench orders them (worker 0's step function traced
    alone first). ``host_credit``, ``host_order``, ``ack_share`` and ``credit_return`` are ``enable``'s, held
    fixed while the search moves partition and credit. The result's ``config`` says ``api``
    ``tf2``: ``tfsched bench --api tf2 --tuned FILE`` runs its best setting, the session bench
    refuses it. ``applied`` stays empty: no training outlives the trials.

    ``host_cores``: the cores of its own each task has (``bench.run.host_cluster``'s, the
    bench's ``--host-cores``); the tune file records it, and ``bench --tuned`` wants the same.
    """
    from tfsched.bench import tf2
    from tfsched.bench.run import host_cluster, parse_mode, setting_mode
    from tfsched.enforce.api import link_sizes
    from tfsched.sim.engine import check_ack_share, check_credit_return, check_host_order

    if search not in SEARCHES:
        raise TfschedError(f"unknown search {search!r}; choose {', '.join(SEARCHES)}")
    if run_mode not in ("train", "inference"):
        raise TfschedError(f"unknown mode {run_mode!r}; expected train or inference")
    if trials < 1 or measure < 1 or confirm < 0:
        raise TfschedError("trials and measured steps must be at least 1, repeats not negative")
    if ack_share is not None:
        check_ack_share(ack_share)
    check_credit_return(credit_return)
    check_host_order(host_order, host_credit)
    confirm_order([], confirm_rounds)  # a bad count: its error line, before a cluster starts
    space = space or Space()
    started = time.monotonic()
    knobs = {
        "algorithm": algorithm,
        "host_credit": host_credit,
        "host_order": host_order,
        "ack_share": ack_share,
        "credit_return": credit_return,
    }
    parse_mode(setting_mode(knobs, {"partition": 1, "credit": 1}))  # an unknown algorithm: one line

    found = SEARCHES[search](space, seed=seed)  # a bad seed: its error line, before the sizing
    if progress:
        progress(f"sizing {model}'s channels")
    params = tf2.channel_params(model, ps, image_size, ps_placement)  # an unknown placement: one line
    defaults = None
    if from_defaults:  # ByteScheduler's setting for this link and model, on the search's grid
        defaults = space.setting(space.params(Setting(*link_sizes(bandwidth_bps, params))))
        if found.in_bounds(defaults):
            found.probe(defaults)
        else:
            defaults = None
    if credit_return == "sent":  # one tensor in flight, after the defaults (``tune_cluster``)
        found.probe(space.one_in_flight())

    baseline: list[float] = []
    leaders: list[Setting] | None = None
    walls: list[float] = []
    cluster = host_cluster(
        ps=ps,
        workers=workers,
        bandwidth_bps=bandwidth_bps,
        latency_s=latency_s,
        relays=relays,
        progress=progress,
        host_cores=host_cores,
    )
    with (
        tempfile.TemporaryDirectory(prefix="tfsched-tune-tf2-") as out_dir,
        tf2.forked_coordinators(),
        cluster as c,
    ):
        args = tf2.round_args(
            c,
            bandwidth_bps=bandwidth_bps,
            channel_params=params,
            model=model,
            image_size=image_size,
            batch_size=batch_size,
            run_mode=run_mode,
            ps_placement=ps_placement,
            steps=measure,
        )

        def measured(mode: str) -> float:
            rec = tf2.run_round(args, mode, tf2.round_timeout(walls), c.dead_tasks)
            walls.append(rec["wall_s"])
            return rec["steps"] / rec["wall_s"]

        if algorithm != "tio":
            if progress:
                progress(f"tracing worker 0's step function alone and ordering it ({algorithm})")
            solo = tf2.solo_round(args, [algorithm], out_dir, tf2.round_timeout(walls), c.dead_tasks)
            args["schedules"] = {algorithm: solo["schedules"][algorithm]["file"]}
        if progress:
            progress(f"vanilla TensorFlow: {measure} steps per worker")
        baseline.append(measured("baseline"))
        repeats: list[Setting] = []
        while True:
            again = sum(not t.confirm for t in found.history) >= trials
            if again and leaders is None:  # the budget is spent: measure the leaders once more
                leaders = found.to_confirm(confirm)
                repeats = confirm_order(leaders, confirm_rounds)
            if again and not repeats:
                break
            s = repeats.pop(0) if again else found.next_setting()
            value = measured(setting_mode(knobs, s.to_json()))
            found.register(s, value, confirm=again)
            if progress:
                what = "again" if again else f"{len(found.history)}/{trials}"
                progress(f"trial {what}: {s.describe()} -> {value:.3f} steps/s")
        if progress:
            progress(f"vanilla TensorFlow again: {measure} steps per worker")
        baseline.append(measured("baseline"))

    best = found.winner(leaders or [], confirm_rounds)
    vanilla = statistics.mean(baseline)
    return TuneResult(
        history=found.history,
        best=best.setting,
        best_value=best.value,
        repeats_only=judged_on_repeats(leaders or [], confirm_rounds),
        leaders=found.standings(leaders or [], confirm_rounds),
        config={
            "api": "tf2",
            "model": model,
            "graph": None,
            "mode": run_mode,
            "workers": workers,
            "ps": ps,
            **({"ps_placement": ps_placement} if ps > 1 else {}),
            "bandwidth": f"{bandwidth_bps / 1e9:g} Gbit/s" if bandwidth_bps else "loopback",
            **({"latency": f"{latency_s * 1e3:g} ms"} if latency_s else {}),
            **({"links": "relays"} if relays and bandwidth_bps else {}),
            **({"host_cores": host_cores} if host_cores else {}),
            **knobs,
            "search": search,
            "trials": trials,
            "measure": measure,
            "seed": seed,
            "confirm": confirm,
            "confirm_rounds": confirm_rounds,
            "batch_size": batch_size,
            "image_size": image_size,
            "channel_params": params,
            "defaults": defaults.to_json() if defaults else None,
            # vanilla TensorFlow's rounds, before and after the trials, and the best's mean over them
            "baseline_steps_per_s": baseline,
            "best_vs_baseline": best.value / vanilla,
            "round_s": [round(w, 3) for w in walls],
            "enable": enable_call(knobs, best.setting),
        },
        elapsed_s=time.monotonic() - started,
    )


def enable_call(knobs: dict, best: Setting) -> str:
    """The ``enable_functions`` call that puts ``best`` in force as it was tuned (a schedule file
    for TAO and layer: ``tfsched analyze -o`` on the step function's graph, as the bench orders).

    >>> enable_call({"algorithm": "tio", "host_credit": True, "ack_share": None, "credit_return": "ack"},
    ...             Setting(0, 4000000))
    'tfsched.enable_functions(credit=4000000, host_credit=True)'
    >>> enable_call({"algorithm": "tio", "host_credit": True, "host_order": "priority", "ack_share": None,
    ...              "credit_return": "ack"}, Setting(0, 4000000))
    "tfsched.enable_functions(credit=4000000, host_credit=True, host_order='priority')"
    """
    kwargs = {}
    if knobs["algorithm"] != "tio":
        kwargs.update(schedule="'SCHEDULE.json'", algorithm=repr(knobs["algorithm"]))
    if best.partition:
        kwargs["partition"] = str(best.partition)
    kwargs["credit"] = str(best.credit)
    if knobs["host_credit"]:
        kwargs["host_credit"] = "True"
    if knobs.get("host_order", "steps") != "steps":
        kwargs["host_order"] = repr(knobs["host_order"])
    if knobs["ack_share"]:
        kwargs["ack_share"] = str(knobs["ack_share"])
    if knobs["credit_return"] != "ack":
        kwargs["credit_return"] = repr(knobs["credit_return"])
    return f"tfsched.enable_functions({', '.join(f'{k}={v}' for k, v in kwargs.items())})"
