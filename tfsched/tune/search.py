"""The search over (partition, credit): Bayesian optimization (ByteScheduler §4.3) and random search.

Optionally a third knob, the window of the workers' pushes (``enable(push_credit=N)``), which
ByteScheduler does not have: its credit is one window for both directions. The knobs are
searched on a log2 scale, where their effect is smooth. The partition size is
rounded to a grid (``Space.partition_step`` in log2): each partition size is a graph rewrite
and a session per worker, so the tuner should revisit a few values rather than try many close
ones. Credit changes live and is rounded to whole parameters only.

A probed setting may lie outside the space (``ONE_IN_FLIGHT``): it is measured and can win,
but the model never sees it, as a point that far out would skew its fit of the space.
"""

from __future__ import annotations

import contextlib
import io
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from tfsched.errors import TfschedError
from tfsched.units import is_count

# The largest seed the Bayesian search takes: numpy's RandomState, which bayes_opt seeds with it,
# takes 0 to 2**32 - 1 and refuses the rest with its ValueError.
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Setting:
    """Partition, credit and the pushes' window in parameters (0: off; a push window of 0 is
    the credit's)."""

    partition: int
    credit: int
    push_credit: int = 0

    def to_json(self) -> dict:
        d = {"partition": self.partition, "credit": self.credit}
        return {**d, "push_credit": self.push_credit} if self.push_credit else d

    @staticmethod
    def from_json(d: dict) -> Setting:
        return Setting(int(d["partition"]), int(d["credit"]), int(d.get("push_credit", 0)))

    def describe(self) -> str:
        """``partition 1,000 credit 4,000`` (and ``pushes N``), in parameters: for progress lines.

        >>> Setting(0, 1).describe()
        'partition 0 credit 1 (one tensor in flight)'
        """
        text = f"partition {self.partition:,} credit {self.credit:,}"
        text += f" pushes {self.push_credit:,}" if self.push_credit else ""
        if self.credit == 1:
            text += " (one slice in flight)" if self.partition else " (one tensor in flight)"
        return text


# One tensor in flight a channel (``enable(credit=1, credit_return="sent")``; BENCHMARKS.md, "One
# tensor in flight"): no partition, and a credit under any acknowledged tensor, so that each
# waits until gRPC has let go of the one before it. Outside every space: ``tfsched tune
# --credit-return sent`` measures it as a probe (an addition to ByteScheduler's search, whose
# smallest credit, 2^18 parameters, still lets several of a model's tensors go at once).
ONE_IN_FLIGHT = Setting(0, 1)


# Two settings this close (log2 of parameters) on every knob, about 7%, are one setting to the
# tuner's repeats (``_Search.to_confirm``): the steps they make differ by less than a trial's noise
NEAR_LOG2 = 0.1


def judged_on_repeats(leaders: list[Setting], rounds: int) -> bool:
    """Whether the tuner's winner is the best mean of the leaders' repeats alone
    (``_Search.winner``): leaders measured again in two rounds or more."""
    return bool(leaders) and rounds > 1


def confirm_order(leaders: list[Setting], rounds: int) -> list[Setting]:
    """The repeats of ``leaders``: ``rounds`` rounds, each leader once a round in turn, so that a
    cluster that drifts over the repeats moves every leader's alike.

    >>> a, b = Setting(1, 2), Setting(3, 4)
    >>> [s.partition for s in confirm_order([a, b], 3)]
    [1, 3, 1, 3, 1, 3]
    """
    if rounds < 1:
        raise TfschedError(f"confirm rounds must be at least 1, got {rounds}")
    return list(leaders) * rounds


# the pushes' window searched by ``tfsched tune --push-credit``: 65,536 .. 16,777,216 parameters,
# from a window that lets one slice go at a time to one over most models' pushes
PUSH_CREDIT_LOG2 = (16.0, 24.0)


@dataclass(frozen=True)
class Space:
    """Where to search. ``partition=None`` searches partition sizes; a number fixes it (credit only).

    ``push_credit_log2``: also search the window of the workers' pushes in this range (live on
    the workers' gates, as ``set_credit`` on their tasks); None: the pushes keep the credit.
    """

    partition_log2: tuple[float, float] = (16.0, 24.0)  # 65,536 .. 16,777,216 parameters
    credit_log2: tuple[float, float] = (18.0, 26.0)  # 262,144 .. 67,108,864 parameters
    partition_step: float = 0.5
    partition: int | None = None
    push_credit_log2: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        ranges = [self.partition_log2, self.credit_log2]
        if self.push_credit_log2 is not None:
            ranges.append(self.push_credit_log2)
        for lo, hi in ranges:
            if not (0 <= lo < hi <= 40):
                raise TfschedError(f"bad search range 2^{lo} .. 2^{hi} parameters")
        if self.partition is not None and not is_count(self.partition):
            # before any cluster starts (it was a worker's failure, once every task had started)
            raise TfschedError(
                f"the fixed partition must be a whole number of parameters (0 to 2**63-1), got {self.partition!r}"
            )

    def one_in_flight(self) -> Setting:
        """One tensor in flight a channel (``ONE_IN_FLIGHT``), with the partition this space
        fixes if it fixes one (then one slice in flight).

        >>> Space().one_in_flight() == ONE_IN_FLIGHT, Space(partition=2**20).one_in_flight().describe()
        (True, 'partition 1,048,576 credit 1 (one slice in flight)')
        """
        return Setting(self.partition or 0, 1)

    def bounds(self) -> dict[str, tuple[float, float]]:
        b = {"log2_credit": self.credit_log2}
        if self.partition is None:
            b["log2_partition"] = self.partition_log2
        if self.push_credit_log2 is not None:
            b["log2_push_credit"] = self.push_credit_log2
        return b

    def setting(self, params: dict) -> Setting:
        credit = round(2 ** params["log2_credit"])
        push = round(2 ** params["log2_push_credit"]) if self.push_credit_log2 is not None else 0
        if self.partition is not None:
            return Setting(self.partition, credit, push)
        k = round(params["log2_partition"] / self.partition_step) * self.partition_step
        return Setting(round(2**k), credit, push)

    def params(self, s: Setting) -> dict:
        p = {"log2_credit": math.log2(max(s.credit, 1))}
        if self.partition is None:
            p["log2_partition"] = math.log2(max(s.partition, 1))
        if self.push_credit_log2 is not None:
            # a window of 0 is the credit's (ByteScheduler's one window for both directions)
            p["log2_push_credit"] = math.log2(max(s.push_credit or s.credit, 1))
        return p

    def sample(self, rng: random.Random) -> dict:
        return {k: rng.uniform(lo, hi) for k, (lo, hi) in self.bounds().items()}


@dataclass
class Trial:
    setting: Setting
    value: float  # what is maximized: measured throughput (steps/s), or any objective
    confirm: bool = False  # a repeat of a setting measured before (``_Search.to_confirm``)
    measured: dict = field(default_factory=dict)  # what the value was made of (throughput, straggler)

    def to_json(self) -> dict:
        return {**self.setting.to_json(), "value": self.value, "confirm": self.confirm, **self.measured}


@dataclass
class _Search:
    space: Space
    seed: int = 0
    history: list[Trial] = field(default_factory=list)
    _queue: list[Setting] = field(default_factory=list)  # probed settings, measured first

    def __post_init__(self) -> None:
        # Both searches take the same seeds, so a tune file's seed reruns with either.
        if not is_count(self.seed, most=MAX_SEED):
            raise TfschedError(f"the seed must be a whole number from 0 to 2**32-1, got {self.seed!r}")

    def best(self, among: list[Setting] | None = None, *, repeats_only: bool = False) -> Trial | None:
        """The setting with the highest mean over its measurements, with that mean.

        The mean, not the single best measurement: on a noisy cluster the highest value of a few
        trials is as often luck as it is the setting (the winner's curse), and repeats of the
        leaders (``to_confirm``) only help if they are averaged in. ``among``: choose only from
        these (the repeated leaders: a cluster that drifts slower over the run would otherwise
        hand the win to a setting measured once, early).

        ``repeats_only``: the means of the repeats alone, for leaders measured again in several
        rounds in turn (``confirm_order``; the tuner's ``confirm_rounds`` of 2 or more). The
        measurement that made a setting a leader is the one most likely to be luck, and it was
        made at another time than the others' (an addition to ByteScheduler's tuner, seventieth
        session: VGG16 inference's tuner had chosen a credit that measured 0.721 then 0.665
        steps/s over one tensor in flight measured once at 0.693, and in the bench the winner
        made 1.378x and one tensor in flight 1.487x, ``benchmarks/results/
        bench-vgg16-inference-tuned-sent.md``). With three rounds and distinct leaders
        (``to_confirm``) its winner made 1.408x and one tensor in flight 1.412x, both at the
        cores' floor (``results/bench-vgg16-inference-tuned-rounds.md``); in that run the same
        leader would have won on all its measurements too, so the distinct leaders made the
        difference there, and the repeats alone are the fairer mean, not yet a measured gain.
        """
        means = self._means(repeats_only=repeats_only)
        if among:
            means = {s: v for s, v in means.items() if s in among}
        if not means:
            return None
        s = max(means, key=means.get)
        return Trial(s, means[s])

    def measured(self, setting: Setting) -> float | None:
        """The mean of this setting's measurements; None if it was never measured."""
        return self._means().get(setting)

    def to_confirm(self, k: int) -> list[Setting]:
        """The ``k`` settings with the highest means, best first: the ones worth measuring again.

        A setting within ``NEAR_LOG2`` of a better one on every knob is left out: the model, once
        it has found a good point, proposes its neighbours, and two of them as leaders spend the
        repeats on one setting (seventieth session, VGG16 inference: credits 405,249 and 407,361
        at the same partition led, over one tensor in flight a trial behind them,
        ``benchmarks/results/tune-vgg16-inference-sent-rounds.json``).
        """
        means = self._means()
        leaders: list[Setting] = []
        for s in sorted(means, key=means.get, reverse=True):
            if len(leaders) >= k:
                break
            if not any(self._near(s, t) for t in leaders):
                leaders.append(s)
        return leaders

    def _near(self, a: Setting, b: Setting) -> bool:
        """Whether ``a`` is within ``NEAR_LOG2`` of ``b`` on every knob the space has."""
        pa, pb = self.space.params(a), self.space.params(b)
        return all(abs(pa[key] - pb[key]) <= NEAR_LOG2 for key in pa)

    def winner(self, leaders: list[Setting], rounds: int) -> Trial | None:
        """The tuner's choice: the best mean among the ``leaders`` once they were measured again
        (``rounds`` times; over their repeats alone after two or more), else among every setting
        measured."""
        return self.best(among=leaders or None, repeats_only=judged_on_repeats(leaders, rounds))

    def standings(self, leaders: list[Setting], rounds: int) -> list[dict]:
        """How the ``leaders`` compared, best first: each one's setting, the mean its win was
        judged on (``winner``) and how many measurements that mean is of, so that a user sees
        the margin beside the trials' noise.

        >>> search = RandomSearch(Space())
        >>> a, b = Setting(2**17, 2**20), Setting(2**20, 2**22)
        >>> for s, v, again in [(a, 1.6, False), (b, 1.2, False), (a, 1.0, True), (b, 1.2, True)]:
        ...     search.register(s, v, confirm=again)
        >>> [(x["partition"], x["value"], x["measurements"]) for x in search.standings([a, b], 1)]
        [(131072, 1.3, 2), (1048576, 1.2, 2)]
        >>> [(x["partition"], x["value"], x["measurements"]) for x in search.standings([a, b], 2)]
        [(1048576, 1.2, 1), (131072, 1.0, 1)]
        """
        runs = self._runs(judged_on_repeats(leaders, rounds))
        out = [
            {**s.to_json(), "value": sum(runs[s]) / len(runs[s]), "measurements": len(runs[s])}
            for s in leaders
            if s in runs
        ]
        return sorted(out, key=lambda x: x["value"], reverse=True)

    def _runs(self, repeats_only: bool = False) -> dict[Setting, list[float]]:
        """Each setting's measurements (its repeats alone with ``repeats_only``)."""
        runs: dict[Setting, list[float]] = {}
        for t in self.history:
            if t.confirm or not repeats_only:
                runs.setdefault(t.setting, []).append(t.value)
        return runs

    def _means(self, repeats_only: bool = False) -> dict[Setting, float]:
        return {s: sum(v) / len(v) for s, v in self._runs(repeats_only).items()}

    def probe(self, setting: Setting) -> None:
        """Measure this setting before the model's own suggestions (the defaults, the simulator's
        choices, or one outside the space, which only the history keeps)."""
        self._queue.append(setting)

    def next_setting(self) -> Setting:
        """The next setting worth measuring; settings seen before are registered again, not re-run."""
        while self._queue:
            s = self._queue.pop(0)
            inside = self.in_bounds(s)
            known = self.measured(s)
            if known is None:
                self._pending = self.space.params(s) if inside else None
                return s
            if inside:
                self._register(self.space.params(s), known)
        for _ in range(25):
            params = self._suggest()
            s = self.space.setting(params)
            known = self.measured(s)
            if known is None:
                self._pending = params
                return s
            self._register(params, known)  # tell the model, at no cost
        params = self.space.sample(self._rng)  # the model keeps proposing known points: explore
        self._pending = params
        return self.space.setting(params)

    def register(
        self, setting: Setting, value: float, *, confirm: bool = False, measured: dict | None = None
    ) -> None:
        """One measurement of ``setting``; ``confirm``: a repeat, not the model's suggestion;
        ``measured``: what ``value`` was made of, kept with the trial."""
        params = getattr(self, "_pending", None)
        if confirm or params is None:
            # a setting outside the space (a probe's) stays out of the model
            params = self.space.params(setting) if self.in_bounds(setting) else None
        else:
            self._pending = None
        if not math.isfinite(value):
            raise TfschedError(f"trial value must be finite, got {value}")
        if params is not None:
            self._register(params, value)
        self.history.append(Trial(setting, value, confirm, dict(measured or {})))

    def in_bounds(self, setting: Setting) -> bool:
        """Whether ``setting`` lies in the search space (a probe outside it would skew the model)."""
        bounds = self.space.bounds()
        return all(lo <= v <= hi for k, v in self.space.params(setting).items() for lo, hi in [bounds[k]])


class RandomSearch(_Search):
    """Uniform random search on the same (log2) space: the paper's comparison (Figure 14)."""

    def __init__(self, space: Space, seed: int = 0):
        super().__init__(space, seed)
        self._rng = random.Random(seed)

    def _suggest(self) -> dict:
        return self.space.sample(self._rng)

    def _register(self, params: dict, value: float) -> None:
        pass


class BayesSearch(_Search):
    """Gaussian process + expected improvement, exploration ``xi`` (ByteScheduler: 0.1).

    Values are normalized by the first measurement before the model sees them, so xi has the
    same meaning for a model at 0.5 steps/s and one at 50.
    """

    def __init__(self, space: Space, seed: int = 0, xi: float = 0.1, init_points: int = 2):
        from bayes_opt import BayesianOptimization, acquisition

        super().__init__(space, seed)
        self._rng = random.Random(seed)
        self._opt = BayesianOptimization(
            f=None,
            pbounds=space.bounds(),
            acquisition_function=acquisition.ExpectedImprovement(xi=xi, random_state=seed),
            random_state=seed,
            verbose=0,
            allow_duplicate_points=True,
        )
        self._init = init_points
        self._scale: float | None = None

    def _suggest(self) -> dict:
        if len(self._opt.space) < self._init:
            return self.space.sample(self._rng)
        return {k: float(v) for k, v in self._opt.suggest().items()}

    def _register(self, params: dict, value: float) -> None:
        if self._scale is None:
            self._scale = abs(value) or 1.0
        # bayes_opt prints a line to stdout for every repeated point (a repeat is intended here)
        with contextlib.redirect_stdout(io.StringIO()):
            self._opt.register(params=params, target=value / self._scale)


SEARCHES: dict[str, Callable[..., _Search]] = {"bayes": BayesSearch, "random": RandomSearch}


def trials_to_reach(
    search: _Search, objective: Callable[[Setting], float], budget: int, target: float
) -> int:
    """Trials until a measured value reaches ``target`` (``budget + 1`` if it never does)."""
    for k in range(1, budget + 1):
        s = search.next_setting()
        v = objective(s)
        search.register(s, v)
        if v >= target:
            return k
    return budget + 1
