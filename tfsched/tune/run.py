"""``tfsched tune``: tune partition and credit on a real cluster while it trains.

The driver starts the cluster (emulated hosts or loopback), the coordinator on the driver's
cluster address, and one training loop per worker (a ``TunedSession`` each, talking to the
coordinator over gRPC like any remote worker would). Trials run until the budget is spent; the
best setting is then applied on every worker at one step and training carries on with it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tfsched.errors import TfschedError, cause_line
from tfsched.io import as_path
from tfsched.tune.coordinator import OBJECTIVES, THROUGHPUT
from tfsched.tune.search import SEARCHES, Setting, Space, confirm_order, judged_on_repeats
from tfsched.units import is_count

PRESCREEN_GRID = 5  # per knob, simulated before the first real trial
TUNE_SCHEMA = "tfsched.tune/1"


@dataclass
class TuneResult:
    history: list  # Trial
    best: Setting
    best_value: float
    applied: dict[str, dict] = field(default_factory=dict)  # worker task -> setting and partition in force
    prescreened: list[dict] = field(default_factory=list)
    config: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    repeats_only: bool = False  # the best was judged on its repeats alone (``judged_on_repeats``)
    leaders: list[dict] = field(default_factory=list)  # the repeated leaders' means (``_Search.standings``)

    def to_json(self) -> dict:
        return {
            "schema": TUNE_SCHEMA,
            "config": self.config,
            "trials": [{"trial": k + 1, **t.to_json()} for k, t in enumerate(self.history)],
            "best": {
                **self.best.to_json(),
                "value": self.best_value,  # the objective's mean over its measurements
                **self._best_means(),
                "measurements": len(self._best_runs()),
                **({"repeats_only": True} if self.repeats_only else {}),
            },
            "leaders": self.leaders,
            "applied": self.applied,
            "prescreened": self.prescreened,
            "elapsed_s": self.elapsed_s,
        }

    def _best_runs(self) -> list:
        """The best setting's trials that its value is the mean of: all of them, or its repeats."""
        return [t for t in self.history if t.setting == self.best and (t.confirm or not self.repeats_only)]

    def _best_means(self) -> dict[str, float]:
        """The best setting's throughput (and straggler effect where measured), each the mean
        over its trials (``_best_runs``); a trial that kept no throughput apart measured its value."""
        runs = self._best_runs()
        if not runs:
            return {THROUGHPUT: self.best_value}
        out = {THROUGHPUT: statistics.fmean(t.measured.get(THROUGHPUT, t.value) for t in runs)}
        stragglers = [t.measured["straggler"] for t in runs if "straggler" in t.measured]
        if stragglers:
            out["straggler"] = statistics.fmean(stragglers)
        return out


def read_tune_file(path: str) -> dict:
    """A ``tfsched tune -o`` file (``TuneResult.to_json``), checked as far as a reader uses it:
    its schema, the best setting (``best.partition`` >= 0, ``best.credit`` > 0, ``best.push_credit``
    >= 0 where given, in parameters)
    and the configuration it was tuned in. Anything else is one TfschedError line naming the file.
    """

    path = as_path(path, "tune result")

    def bad(why: str) -> TfschedError:
        return TfschedError(f"{path}: not a tfsched tune result ({why})")

    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise TfschedError(f"{path}: cannot read ({e.strerror})") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise bad(f"not JSON: {str(e).splitlines()[0]}") from None
    if not isinstance(doc, dict) or doc.get("schema") != TUNE_SCHEMA:
        got = doc.get("schema") if isinstance(doc, dict) else type(doc).__name__
        raise bad(f"schema {got!r}, expected {TUNE_SCHEMA!r}")
    best, config = doc.get("best"), doc.get("config")
    if not isinstance(config, dict) or not isinstance(best, dict):
        raise bad("no config or best setting")

    if not (is_count(best.get("partition")) and is_count(best.get("credit"), least=1)):
        raise bad(
            f"best setting {best.get('partition')!r}/{best.get('credit')!r} is not a partition and credit"
        )
    if not is_count(best.get("push_credit", 0)):
        raise bad(f"best setting's push_credit {best.get('push_credit')!r} is not a number of parameters")
    return doc


def prescreen(
    graph,
    oracle,
    schedule,
    space: Space,
    *,
    workers: int,
    keep: int,
    host_credit: bool = False,
    host_order: str = "steps",
    ack_share: int | None = None,
    credit_return: str = "ack",
) -> list[tuple[Setting, float]]:
    """Simulate a grid of settings; the ``keep`` best (setting, predicted step time) first.

    ``PRESCREEN_GRID`` values of each knob the space searches, on its log2 scale (with the
    pushes' window, the simulator's ``push_credit_bytes``).

    ``host_credit``: the credit is one window per sending task (``enable(host_credit=True)``),
    serving ``host_order`` first (``"priority"``: the workers in lockstep);
    ``ack_share``: it acknowledges transfers of at least credit/ack_share (None: the default);
    ``credit_return``: when the credit comes back (``enable(credit_return=...)``).
    """
    from tfsched.analysis import MIN_ACKED_BYTES, PARAM_BYTES
    from tfsched.sim import POLICY_OF_MODE, build_sim_graph, simulate

    def grid(lo, hi):
        return [lo + (hi - lo) * k / (PRESCREEN_GRID - 1) for k in range(PRESCREEN_GRID)]

    knobs = ("log2_partition", "log2_credit", "log2_push_credit")  # the order of the grid's loops
    axes = {k: grid(*b) for k, b in sorted(space.bounds().items(), key=lambda kb: knobs.index(kb[0]))}
    out = []
    graphs: dict[int, object] = {}  # partition -> its simulated graph
    for point in itertools.product(*axes.values()):
        s = space.setting(dict(zip(axes, point, strict=True)))
        if s.partition not in graphs:
            graphs[s.partition] = build_sim_graph(
                graph, oracle, schedule, workers=workers, partition_bytes=s.partition * PARAM_BYTES
            )
        t = simulate(
            graphs[s.partition],
            POLICY_OF_MODE[schedule.mode],
            credit_bytes=s.credit * PARAM_BYTES,
            push_credit_bytes=s.push_credit * PARAM_BYTES or None,
            min_acked_bytes=MIN_ACKED_BYTES,
            host_credit=host_credit,
            host_order=host_order,
            **({} if ack_share is None else {"ack_share": ack_share}),
            credit_return=credit_return,
        ).step_time
        out.append((s, t))
    out.sort(key=lambda st: st[1])
    return out[:keep]


@contextlib.contextmanager
def _named(path: str, name: str):
    """A `TfschedError` about the tuner's own copy of a graph (``path``, in a temporary
    directory) names the graph it was made from instead."""
    try:
        yield
    except TfschedError as e:
        raise TfschedError(str(e).replace(path, name)) from None


def tune_cluster(
    model: str | None = "seq32",
    *,
    graph_path: str | None = None,
    fetches: list[str] | None = None,
    init: str | None = None,
    tag_set: str | None = None,
    workers: int = 2,
    ps: int | None = None,
    ps_placement: str = "bytes",
    bandwidth_bps: float | None = None,
    relays: bool = False,
    latency_s: float = 0.0,
    algorithm: str = "tio",
    run_mode: str = "train",
    batch_size: int = 4,
    image_size: int | None = None,
    trials: int = 8,
    settle: int = 1,
    measure: int = 3,
    final_steps: int = 3,
    search: str = "bayes",
    seed: int = 0,
    prescreen_keep: int = 0,
    space: Space | None = None,
    host_credit: bool = False,
    host_order: str = "steps",
    ack_share: int | None = None,
    credit_return: str = "ack",
    confirm: int = 2,
    confirm_rounds: int = 1,
    from_defaults: bool = True,
    sync: bool = False,
    objective: str = "throughput",
    timeout_s: float = 3600.0,
    progress: Callable[[str], None] | None = None,
    host_cores: float = 0.0,
) -> TuneResult:
    """Tune (partition, credit) on a cluster that trains ``model`` (or a user's graph).

    The hosts' links are ``bandwidth_bps`` each way, emulated with namespaces (root), or with
    ``relays`` shaped on loopback in this process (``bench.relay``); None: loopback unshaped.
    ``ps``: the PS tasks (None: 1, or for a user's graph as many as its ops are placed on).
    ``ps_placement``: ``build_graph``'s, how a built-in model's variables are spread over ``ps``
    PS tasks. ``run_mode``: a built-in model's training steps, or its forward passes
    (``inference``: pulls only).

    ``host_credit`` tunes the credit as one window per sending task (``enable(host_credit=True)``),
    ``host_order="priority"`` that window with the workers in lockstep (``enable(host_order=...)``);
    ``ack_share``: the credit acknowledges transfers of at least credit/ack_share parameters
    (``enable(ack_share=N)``; None: the pass's default). The live credit a trial sets limits
    those the pass acknowledges from the smallest credit of the search. ``credit_return``:
    ``"sent"`` returns the credit when the sender has sent a tensor, with no acknowledgement
    (``enable(credit_return="sent")``), and then one tensor in flight a channel
    (``Space.one_in_flight``: no partition, or the one the space fixes, and credit 1) is
    measured after the defaults, before the search's own settings, and can win. ``sync``: every step starts on all workers together and
    lasts until the slowest has finished it (synchronous training, and what ``tfsched bench``
    measures); otherwise the workers run free (asynchronous between-graph training). The two
    can favour different settings: on MobileNet the free-running tuner chose a window larger
    than the step, which ran at 1.04x and 1.01x vanilla TensorFlow in the bench's synchronized
    steps against the defaults' 1.11x and 1.02x (BENCHMARKS.md, twenty-third session).

    ``space.push_credit_log2`` also searches the window of the workers' pushes, live on each
    worker's gates (``enable(push_credit=N)``). It is there for the straggler effect, not for
    speed, so it goes with ``objective="balanced"`` (``sync`` steps): the throughput times one
    minus the straggler effect (``coordinator.straggler``, from the share of each step each
    worker waited for the others at its end, as the bench's). ByteScheduler's tuner maximizes the throughput alone.

    Two additions to ByteScheduler's tuner (§4.3), for clusters whose steps vary by several
    percent from one trial to the next:

    * ``from_defaults``: the first trial is ByteScheduler's setting sized for this link and
      model (``tfsched.enforce.link_sizes``), so what the search finds is measured against
      what the user gets without tuning, on the same cluster.
    * ``confirm``: after the ``trials``, the settings with the ``confirm`` highest means are
      measured once more, and the one of them with the highest mean wins, not the single
      luckiest measurement. Only they can win: a cluster that slows over the run would
      otherwise hand the win to a setting measured once, early. On ResNet-50 here, both
      leaders measured 9% slower when repeated at the end (0.809 then 0.735 steps/s, 0.794
      then 0.719), and the third, measured once at the start (0.786), would have won. In the
      eighth session's run on VGG16 (2 measured steps a trial, no repeats), one setting
      measured 0.638 steps/s and won; a setting one part in 600 away measured 0.597, and the
      winner then ran at 1.05x vanilla TensorFlow in the benchmark against 1.27x for the
      defaults. With both additions (BENCHMARKS.md, ninth session) the tuned settings ran at
      1.34x and 1.22x against the defaults' 1.38x and 1.23x: as good, not better, on this
      machine. ``confirm_rounds``: the leaders are measured again that many times, in turn,
      and with two or more the winner is the best mean of the repeats alone
      (``_Search.winner``).

    ``host_cores``: the cores of its own each task has (``bench.run.host_cluster``'s, the
    bench's ``--host-cores``); the tune file records it, and ``bench --tuned`` wants the same.
    """
    import tempfile

    from tfsched.analysis import least_acknowledged
    from tfsched.bench.local import dead_tasks_named
    from tfsched.bench.run import host_cluster
    from tfsched.deadlines import (
        SESSION_CALL_TIMEOUT_S,
        close_sessions,
        deadline_ms,
        session_config,
        step_deadline_s,
    )
    from tfsched.graph._tf import import_tensorflow
    from tfsched.sim.engine import DEFAULT_ACK_SHARE, check_host_order
    from tfsched.tune.coordinator import Coordinator, CoordinatorClient
    from tfsched.tune.worker import PASS_CREDIT, TunedSession

    if search not in SEARCHES:
        raise TfschedError(f"unknown search {search!r}; choose {', '.join(SEARCHES)}")
    if (model is None) == (graph_path is None):
        raise TfschedError("give either a built-in model or --graph")
    if model is not None and (fetches or init or tag_set):
        raise TfschedError("--fetch, --init and --tag-set go with --graph; a built-in model has its own")
    if run_mode not in ("train", "inference"):
        raise TfschedError(f"unknown mode {run_mode!r}; expected train or inference")
    if graph_path is not None and run_mode != "train":
        raise TfschedError("a saved graph runs its own fetches: --mode is for a built-in model")
    if trials < 1 or measure < 1 or settle < 0:
        raise TfschedError("trials and measured steps must be at least 1, settle steps not negative")
    check_host_order(host_order, host_credit)  # before a cluster starts
    confirm_order([], confirm_rounds)  # a bad count: its error line, before a cluster starts
    space = space or Space()
    if objective not in OBJECTIVES:
        raise TfschedError(f"unknown objective {objective!r}; choose {', '.join(OBJECTIVES)}")
    if objective == "balanced" and not sync:
        raise TfschedError(
            "the balanced objective weighs how long workers wait for each other: it needs sync"
        )
    if space.push_credit_log2 is not None and objective != "balanced":
        raise TfschedError(
            "the pushes' window evens out the workers, not the throughput: search it with the balanced objective"
        )
    found = SEARCHES[search](space, seed=seed)  # a bad seed: its error line, before a graph is built
    tf = import_tensorflow()  # after the arguments' checks: an error in them comes at once
    started = time.monotonic()

    if model is not None:
        from tfsched.models import build_graph

        ps = 1 if ps is None else ps

        def builder(w: int):
            b = build_graph(
                model,
                mode=run_mode,
                worker_task=w,
                ps_tasks=ps,
                batch_size=batch_size,
                image_size=image_size,
                ps_placement=ps_placement,
            )
            # inference: the step's output computed, not fetched (an op, as the train op)
            return b.graph, [b.train_op if b.train_op is not None else b.loss.op], b.init_op, b

    else:
        from tfsched.tracing.run import load_user_graph

        if workers != 1:
            raise TfschedError("a user's graph runs as saved: tune it with --workers 1")

        def builder(w: int):
            g, f, i = load_user_graph(graph_path, fetches, init, tag_set)
            return g, f, i, None

    built = [builder(w) for w in range(workers)]
    if graph_path is not None:
        from tfsched.tracing.run import tasks_for_graph

        ps, placed = tasks_for_graph(built[0][0], graph_path, ps, None)
        if placed > 1:
            raise TfschedError(
                f"{graph_path}: its ops are placed on {placed} worker tasks; the tuner runs a user's "
                "graph as one worker's step (--workers 1), which can place ops on worker 0 only"
            )
    enable_kwargs: dict = {"host_credit": True} if host_credit else {}
    if host_order != "steps":
        enable_kwargs["host_order"] = host_order
    if ack_share is not None:
        enable_kwargs["ack_share"] = ack_share
    if credit_return != "ack":
        enable_kwargs["credit_return"] = credit_return
    defaults = None
    pre: list[tuple[Setting, float]] = []
    with tempfile.TemporaryDirectory(prefix="tfsched-tune-") as d:
        import os

        from tfsched.analysis import analyze

        path = os.path.join(d, "graph.pb")
        with open(path, "wb") as f:
            f.write(built[0][0].as_graph_def().SerializeToString())
        fetch_names = [x.name for x in built[0][1]]
        with _named(path, graph_path or model):  # errors about the copy name the graph
            if from_defaults:
                from tfsched.enforce.api import link_sizes
                from tfsched.graph import load_comm_graph

                channel_params = load_comm_graph(path, fetches=fetch_names).busiest_channel_params
                partition, credit = link_sizes(bandwidth_bps, channel_params)
                p = space.params(Setting(partition, credit))
                defaults = space.setting(p)  # on the search's partition grid
                if found.in_bounds(defaults):
                    found.probe(defaults)
                else:
                    defaults = None
            if credit_return == "sent":
                found.probe(space.one_in_flight())
            if algorithm != "tio" or prescreen_keep:
                # the schedule and the pre-screen see the cluster's link
                link = {"bandwidth_bps": bandwidth_bps} if bandwidth_bps else {}
                a = analyze(path, fetches=fetch_names, algorithm=algorithm, workers=workers, **link)
                if algorithm != "tio":
                    sched = os.path.join(d, "schedule.json")
                    a.schedule.save(sched)
                    enable_kwargs.update(schedule=sched, algorithm=algorithm)
                if prescreen_keep:
                    if progress:
                        progress(f"pre-screening {PRESCREEN_GRID}x{PRESCREEN_GRID} settings in the simulator")
                    pre = prescreen(
                        a.graph,
                        a.oracle,
                        a.schedule,
                        space,
                        workers=workers,
                        keep=prescreen_keep,
                        host_credit=host_credit,
                        host_order=host_order,
                        ack_share=ack_share,
                        credit_return=credit_return,
                    )
                    for s, _ in pre:
                        found.probe(s)

        cluster = host_cluster(
            ps=ps,
            workers=workers,
            bandwidth_bps=bandwidth_bps,
            latency_s=latency_s,
            relays=relays,
            progress=progress,
            host_cores=host_cores,
        )
        with cluster:
            tasks = [f"/job:worker/task:{w}" for w in range(workers)]
            hosts = [a.rsplit(":", 1)[0] for job in cluster.spec.values() for a in job]

            def on_trial(k, s, v, again, measured):
                if progress:
                    what = "again" if again else f"{k}/{trials}"
                    got = f"{measured[THROUGHPUT]:.3f} steps/s"
                    if "straggler" in measured:
                        got += f", straggler {measured['straggler']:.3f} -> {v:.3f}"
                    progress(f"trial {what}: {s.describe()} -> {got}")

            coord = Coordinator(
                found,
                tasks,
                host=cluster.driver_host,
                allowed_hosts=hosts,
                trials=trials,
                confirm=confirm,
                confirm_rounds=confirm_rounds,
                objective=objective,
                on_trial=on_trial,
            )
            address = coord.start()
            ps_devices = [f"/job:ps/task:{p}" for p in range(ps)]
            barrier = threading.Barrier(workers) if sync else None
            sessions = [
                TunedSession(
                    cluster.target("worker", w),
                    built[w][0],
                    client=CoordinatorClient(address, tasks[w]),
                    # with a pushes' window, the worker's own gates take it and the PS's the credit
                    **(
                        {"devices": ps_devices, "push_devices": [tasks[w]]}
                        if space.push_credit_log2 is not None
                        else {"devices": [tasks[w], *ps_devices]}
                    ),
                    settle=settle,
                    measure=measure,
                    step_barrier=barrier,
                    barrier_timeout_s=timeout_s,
                    operation_timeout_ms=deadline_ms(SESSION_CALL_TIMEOUT_S),
                    **enable_kwargs,
                )
                for w in range(workers)
            ]
            errors: list[BaseException] = []
            stop = threading.Event()
            deadline = time.monotonic() + timeout_s

            def step_options(slowest: float | None):
                left_s = max(1.0, deadline - time.monotonic())
                return tf.compat.v1.RunOptions(timeout_in_ms=deadline_ms(step_deadline_s(left_s, slowest)))

            def loop(w: int) -> None:
                graph, run_fetches, init_op, _ = built[w]
                sess = sessions[w]
                try:
                    if w == 0 and init_op is not None:
                        with tf.compat.v1.Session(
                            cluster.target("worker", 0), graph=graph, config=session_config()
                        ) as s0:
                            s0.run(init_op, options=step_options(None))
                        inited.set()
                    inited.wait(timeout_s)
                    after_final = 0
                    slowest = None  # every step has a deadline: a dead task ends the tuning soon
                    while not stop.is_set() and time.monotonic() < deadline:
                        started = time.perf_counter()
                        sess.run(run_fetches, options=step_options(slowest))
                        slowest = max(slowest or 0.0, time.perf_counter() - started)
                        if sess.follower.final:
                            after_final += 1
                            if after_final >= final_steps:
                                return
                except threading.BrokenBarrierError:
                    pass  # with sync: another worker's loop ended (or failed: its error is kept)
                except BaseException as e:  # noqa: BLE001 - reported by the driver
                    errors.append(e)
                    stop.set()
                finally:
                    if barrier is not None:
                        barrier.abort()  # no worker waits for one that has stopped

            inited = threading.Event()
            if built[0][2] is None:
                inited.set()
            threads = [threading.Thread(target=loop, args=(w,), daemon=True) for w in range(workers)]
            try:
                if progress:
                    progress(
                        f"tuning: {trials} trials (+{confirm * confirm_rounds} repeats) of {settle}+{measure} steps"
                        f" on {workers} workers"
                    )
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(max(0.0, deadline - time.monotonic()) + 60)
                if errors:
                    dead = dead_tasks_named(cluster.dead_tasks)
                    if dead:
                        raise TfschedError(f"tuning: cluster task {'; '.join(dead)}")
                    raise TfschedError(f"a worker failed while tuning: {cause_line(errors[0])}")
                if not coord.done.is_set() or any(t.is_alive() for t in threads):
                    stop.set()
                    raise TfschedError(f"tuning did not finish its {trials} trials within {timeout_s:.0f} s")
                from tfsched.enforce.api import stats

                applied = {}
                for w, sess in enumerate(sessions):
                    applied[tasks[w]] = {
                        **sess.follower.setting.to_json(),
                        "session_partition": sess.partition,
                        "live_credit": stats(cluster.target("worker", w), tasks[w])["live_credit"],
                    }
            finally:
                stop.set()
                close_sessions(sessions)
                coord.stop()
    best = coord.best()
    return TuneResult(
        history=found.history,
        best=best.setting,
        best_value=best.value,
        repeats_only=judged_on_repeats(coord.leaders, confirm_rounds),
        leaders=found.standings(coord.leaders, confirm_rounds),
        applied=applied,
        prescreened=[{**s.to_json(), "predicted_step_s": t} for s, t in pre],
        config={
            "model": model,
            "graph": graph_path,
            **({"tag_set": tag_set} if tag_set else {}),
            "mode": run_mode,
            "workers": workers,
            "ps": ps,
            **({"ps_placement": ps_placement} if model is not None and ps > 1 else {}),
            "bandwidth": f"{bandwidth_bps / 1e9:g} Gbit/s" if bandwidth_bps else "loopback",
            **({"latency": f"{latency_s * 1e3:g} ms"} if latency_s else {}),
            **({"links": "relays"} if relays and bandwidth_bps else {}),
            **({"host_cores": host_cores} if host_cores else {}),
            "algorithm": algorithm,
            "host_credit": host_credit,
            "host_order": host_order,
            "ack_share": ack_share,
            "credit_return": credit_return,
            "search": search,
            "trials": trials,
            "settle": settle,
            "measure": measure,
            "seed": seed,
            "confirm": confirm,
            "confirm_rounds": confirm_rounds,
            "batch_size": batch_size,
            "sync": sync,
            "objective": objective,
            **({"push_credit_log2": list(space.push_credit_log2)} if space.push_credit_log2 else {}),
            # the least transfer (parameters) the tuned sessions' pass acknowledged: what a live
            # credit or window counted (``bench.run.setting_mode`` acknowledges as much)
            "acknowledged_from": least_acknowledged(PASS_CREDIT, ack_share or DEFAULT_ACK_SHARE),
            "defaults": defaults.to_json() if defaults else None,
        },
        elapsed_s=time.monotonic() - started,
    )
