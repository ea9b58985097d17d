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

from tfsched.errors import TfschedError

MODES = ("baseline", "tio", "tao", "layer")
ALGORITHMS = ("tio", "tao", "layer")


@dataclass(frozen=True)
class ModeSpec:
    """A benchmark mode: ``baseline``, or an algorithm with optional partitioning and credit.

    Grammar: ``ALG[+pc][+pN][+cN]`` with ALG one of tio, tao, layer; ``+pc`` turns on
    ByteScheduler's defaults (partition 1,000,000, credit 4,000,000 parameters), ``+pN`` and
    ``+cN`` set either one (``tao+p500000+c2000000``). ``tuned`` is added by the tuner.
    """

    name: str
    algorithm: str | None  # None: vanilla TensorFlow
    partition: int = 0
    credit: int = 0


def parse_mode(name: str) -> ModeSpec:
    from tfsched.enforce.api import DEFAULT_CREDIT, DEFAULT_PARTITION

    if name == "baseline":
        return ModeSpec(name, None)
    alg, *knobs = name.split("+")
    if alg not in ALGORITHMS:
        raise TfschedError(
            f"unknown mode {name!r}: expected baseline or one of {', '.join(ALGORITHMS)} [+pc][+pN][+cN]"
        )
    partition = credit = 0
    for k in knobs:
        if k == "pc":
            partition, credit = DEFAULT_PARTITION, DEFAULT_CREDIT
        elif k[:1] in ("p", "c") and k[1:].isdigit() and int(k[1:]) > 0:
            if k[0] == "p":
                partition = int(k[1:])
            else:
                credit = int(k[1:])
        else:
            raise TfschedError(f"unknown mode {name!r}: {k!r} is not pc, pN or cN (N parameters > 0)")
    return ModeSpec(name, alg, partition, credit)


def parse_modes(value: str) -> tuple[str, ...]:
    """Comma-separated modes, baseline among them, each valid; the names in order."""
    modes = tuple(m.strip() for m in value.split(",") if m.strip())
    if "baseline" not in modes:
        raise TfschedError(f"the modes must include baseline (got {value!r})")
    for m in modes:
        parse_mode(m)
    if len(set(modes)) != len(modes):
        raise TfschedError(f"a mode is listed twice in {value!r}")
    return modes


@dataclass
class ModeResult:
    mode: str
    step_times: list[float] = field(default_factory=list)  # seconds, every worker's steps
    per_worker: dict[int, list[float]] = field(default_factory=dict)  # worker -> its step times
    wall_s: float = 0.0  # time the rounds of this mode took
    steps: int = 0  # steps completed by all workers together

    @property
    def throughput(self) -> float:
        """Steps per second, all workers together."""
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0

    def percentile(self, q: float) -> float:
        xs = sorted(self.step_times)
        return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))] if xs else 0.0

    @property
    def straggler(self) -> float:
        """Spread between workers: (slowest worker's mean step - fastest's) / mean step."""
        means = [statistics.fmean(v) for v in self.per_worker.values() if v]
        if len(means) < 2:
            return 0.0
        return (max(means) - min(means)) / statistics.fmean(self.step_times)

    def to_json(self) -> dict:
        p50 = self.percentile(50)
        return {
            "mode": self.mode,
            "p95_over_p50": self.percentile(95) / p50 if p50 else 0.0,
            "straggler": self.straggler,
            "steps": self.steps,
            "throughput_steps_per_s": self.throughput,
            "p50_s": self.percentile(50),
            "p95_s": self.percentile(95),
            "mean_s": statistics.fmean(self.step_times) if self.step_times else 0.0,
        }


def mode_configs(
    model: str, modes: tuple[str, ...], builder: Callable, *, workdir: str, timeout_ms: int = 60_000
) -> dict:
    """Session config of each mode (None: vanilla TensorFlow); schedules come from ``analyze``."""
    import tfsched
    from tfsched.analysis import analyze

    configs = {}
    for mode in modes:
        spec = parse_mode(mode)
        knobs = {"partition": spec.partition, "credit": spec.credit, "timeout_ms": timeout_ms}
        if spec.algorithm is None:
            configs[mode] = None
        elif spec.algorithm == "tio":
            configs[mode] = tfsched.enable(**knobs)
        else:
            path = os.path.join(workdir, f"{model}.pb")
            sched = os.path.join(workdir, f"{model}-{spec.algorithm}.json")
            if not os.path.exists(sched):
                built = builder(0)
                with open(path, "wb") as f:
                    f.write(built.graph_def().SerializeToString())
                analyze(path, fetches=built.fetches, algorithm=spec.algorithm).schedule.save(sched)
            configs[mode] = tfsched.enable(schedule=sched, algorithm=spec.algorithm, **knobs)
    return configs


def run_side_by_side(
    targets: list[str],
    builder: Callable[[int], object],
    configs: dict,
    *,
    steps: int = 10,
    warmup: int = 2,
    rounds: int = 2,
    step_timeout_s: float = 600.0,
    progress: Callable[[str], None] | None = None,
) -> dict[str, ModeResult]:
    """Train every mode ``rounds`` times ``steps`` steps on every worker, interleaved.

    Every step has a deadline (``step_timeout_s``): a stuck cluster fails the run, never hangs it.
    """
    import tensorflow as tf

    run_options = tf.compat.v1.RunOptions(timeout_in_ms=int(step_timeout_s * 1000))

    if steps <= 0 or rounds <= 0:
        raise TfschedError("steps and rounds must be positive")
    results = {mode: ModeResult(mode) for mode in configs}
    # One graph and session per (mode, worker), kept for all rounds: what a user's job does.
    sessions = {}
    try:
        for mode, config in configs.items():
            for w, target in enumerate(targets):
                built = builder(w)
                sess = tf.compat.v1.Session(target, graph=built.graph, config=config)
                sessions[(mode, w)] = (sess, built)
        first_sess, first_built = sessions[(next(iter(configs)), 0)]
        first_sess.run(first_built.init_op, options=run_options)
        for r in range(rounds):
            for mode in configs:
                if progress:
                    progress(f"round {r + 1}/{rounds}: {mode}")
                times: list[float] = []
                errors: list[BaseException] = []
                lock = threading.Lock()
                started: list[float] = []  # when every worker is past warm-up: the timed part starts
                barrier = threading.Barrier(
                    len(targets), action=lambda started=started: started.append(time.perf_counter())
                )

                def work(
                    w: int, mode=mode, times=times, errors=errors, lock=lock, barrier=barrier, r=r
                ) -> None:
                    sess, built = sessions[(mode, w)]
                    try:
                        for _ in range(warmup if r == 0 else 0):
                            sess.run(built.train_op, options=run_options)
                        barrier.wait(timeout=600)
                        for _ in range(steps):
                            t = time.perf_counter()
                            sess.run(built.train_op, options=run_options)
                            with lock:
                                times.append((w, time.perf_counter() - t))
                    except BaseException as e:  # noqa: BLE001 - re-raised below
                        barrier.abort()
                        errors.append(e)

                threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(len(targets))]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                wall = time.perf_counter() - started[0] if started else 0.0
                if errors:
                    raise TfschedError(
                        f"mode {mode}: a worker failed: {str(errors[0]).splitlines()[0][:200]}"
                    )
                res = results[mode]
                res.step_times.extend(dt for _, dt in times)
                for w, dt in times:
                    res.per_worker.setdefault(w, []).append(dt)
                res.wall_s += wall
                res.steps += len(times)
    finally:
        for sess, _ in sessions.values():
            sess.close()
    return results


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
    mode: str = "train",
    progress: Callable[[str], None] | None = None,
) -> dict[str, ModeResult]:
    """Side by side on an emulated multi-host cluster (``bandwidth_bps`` given) or on loopback."""
    from tfsched.bench.local import LocalCluster
    from tfsched.bench.netns import EmulatedCluster
    from tfsched.models import build_graph

    def builder(w: int):
        built = build_graph(
            model, worker_task=w, ps_tasks=ps, batch_size=batch_size, image_size=image_size, mode=mode
        )
        if built.train_op is None:  # inference: a step is the forward pass
            built.train_op = built.loss
        return built

    with tempfile.TemporaryDirectory(prefix="tfsched-bench-") as d:
        configs = mode_configs(model, modes, builder, workdir=d)
        if progress:
            where = f"hosts shaped to {bandwidth_bps / 1e9:g} Gbit/s" if bandwidth_bps else "loopback"
            progress(f"starting {ps} PS and {workers} worker processes ({where})")
        cluster = (
            EmulatedCluster(ps=ps, workers=workers, bandwidth_bps=bandwidth_bps, latency_s=latency_s)
            if bandwidth_bps
            else LocalCluster(ps=ps, workers=workers)
        )
        with cluster:
            targets = [cluster.target("worker", w) for w in range(workers)]
            return run_side_by_side(targets, builder, configs, steps=steps, rounds=rounds, progress=progress)


def local_side_by_side(model: str = "seq32", **kwargs) -> dict[str, ModeResult]:
    """A local multi-process cluster on loopback, every mode interleaved."""
    return cluster_side_by_side(model, bandwidth_bps=None, **kwargs)
