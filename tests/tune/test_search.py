"""The search: Bayesian optimization against random search on an objective with a known optimum."""

import math
import statistics

import pytest

from tfsched.errors import TfschedError
from tfsched.tune.search import (
    ONE_IN_FLIGHT,
    BayesSearch,
    RandomSearch,
    Setting,
    Space,
    confirm_order,
    trials_to_reach,
)

OPT = (19.3, 22.7)  # log2 partition, log2 credit of the optimum


def bowl(s: Setting) -> float:
    lp, lc = math.log2(s.partition), math.log2(s.credit)
    return -((lp - OPT[0]) ** 2 + 0.5 * (lc - OPT[1]) ** 2)


def test_bayes_needs_fewer_trials_than_random_search_on_average():
    space = Space()
    best = bowl(space.setting({"log2_partition": OPT[0], "log2_credit": OPT[1]}))
    target = best - 0.3
    bayes = [trials_to_reach(BayesSearch(space, seed=s), bowl, 60, target) for s in range(8)]
    rand = [trials_to_reach(RandomSearch(space, seed=s), bowl, 60, target) for s in range(8)]
    assert statistics.mean(bayes) < statistics.mean(rand)
    assert statistics.mean(bayes) <= 15


def test_space_rounds_partition_to_its_grid_and_fixes_it_when_asked():
    space = Space(partition_step=1.0)
    s = space.setting({"log2_partition": 20.4, "log2_credit": 22.0})
    assert s == Setting(2**20, 2**22)
    fixed = Space(partition=1000)
    assert set(fixed.bounds()) == {"log2_credit"}
    assert fixed.setting({"log2_credit": 20.0}) == Setting(1000, 2**20)
    with pytest.raises(TfschedError):
        Space(credit_log2=(30.0, 20.0))
    # a fixed partition the pass could not take: refused here, before any cluster starts
    for bad in (-1, 2**63, 1.5, True, "1000"):
        with pytest.raises(TfschedError, match="the fixed partition must be a whole number of parameters"):
            Space(partition=bad)


def test_the_pushes_window_is_a_third_knob_and_zero_is_the_credits():
    from tfsched.tune.search import PUSH_CREDIT_LOG2

    space = Space(partition_step=1.0, push_credit_log2=PUSH_CREDIT_LOG2)
    assert set(space.bounds()) == {"log2_partition", "log2_credit", "log2_push_credit"}
    s = space.setting({"log2_partition": 18.0, "log2_credit": 22.0, "log2_push_credit": 17.0})
    assert s == Setting(2**18, 2**22, 2**17)
    assert space.setting(space.params(s)) == s
    # ByteScheduler's setting has one window for both directions: in this space, the credit's
    unset = Setting(2**18, 2**22)
    assert space.setting(space.params(unset)) == Setting(2**18, 2**22, 2**22)
    assert BayesSearch(space).in_bounds(unset)
    assert not BayesSearch(space).in_bounds(Setting(2**18, 2**22, 2**12))
    # the window is kept in the file only where there is one; files without it read as 0
    assert Setting.from_json(s.to_json()) == s and "push_credit" not in unset.to_json()
    assert Setting.from_json({"partition": 8, "credit": 9}) == Setting(8, 9, 0)
    assert s.describe() == "partition 262,144 credit 4,194,304 pushes 131,072"
    with pytest.raises(TfschedError, match="bad search range"):
        Space(push_credit_log2=(20.0, 10.0))
    # the search suggests all three, and keeps what each measurement was made of
    search = BayesSearch(space, seed=1)
    for _ in range(4):
        t = search.next_setting()
        assert t.push_credit > 0 and search.in_bounds(t)
        search.register(t, 1.0, measured={"straggler": 0.1})
    assert search.history[-1].to_json()["straggler"] == 0.1


def test_a_setting_measured_before_is_not_run_again():
    space = Space(partition_log2=(16.0, 17.0), credit_log2=(18.0, 18.5), partition_step=1.0)
    search = BayesSearch(space, seed=1)
    seen = []
    for _ in range(6):
        s = search.next_setting()
        seen.append(s)
        search.register(s, bowl(s))
    # only 2 partition values exist; credits round to whole parameters, so repeats are rare but
    # whatever came back twice was answered from the history
    assert len(search.history) == 6
    assert search.best().value == max(t.value for t in search.history)


def test_the_best_is_the_best_mean_and_repeats_go_to_the_leaders():
    search = RandomSearch(Space(), seed=0)
    lucky, steady, poor = Setting(2**17, 2**20), Setting(2**20, 2**22), Setting(2**23, 2**25)
    search.register(lucky, 1.30)
    search.register(steady, 1.20)
    search.register(poor, 0.90)
    assert search.to_confirm(2) == [lucky, steady] and search.to_confirm(0) == []
    search.register(lucky, 0.96, confirm=True)  # the first measurement was luck
    search.register(steady, 1.18, confirm=True)
    best = search.best()
    assert best.setting == steady and best.value == pytest.approx(1.19)
    assert search.measured(lucky) == pytest.approx(1.13)
    assert [t.confirm for t in search.history] == [False, False, False, True, True]
    assert search.history[-1].to_json()["confirm"] is True
    # the cluster slowed down while the leaders ran again: a setting measured once, early, would
    # win on its mean; among the repeated leaders, the steadier one wins
    early = Setting(2**21, 2**21)
    search.register(early, 1.195)
    assert search.best().setting == early
    assert search.best(among=[lucky, steady]).setting == steady


def test_leaders_repeated_in_rounds_are_judged_by_their_repeats_alone():
    search = RandomSearch(Space(), seed=0)
    lucky, steady = Setting(2**17, 2**20), Setting(2**20, 2**22)
    search.register(lucky, 1.60)  # the trial that made it a leader was luck
    search.register(steady, 1.20)
    leaders = search.to_confirm(2)
    repeats = confirm_order(leaders, 2)
    assert repeats == [lucky, steady, lucky, steady]  # in turn: drift moves both alike
    for s, v in zip(repeats, [1.10, 1.20, 1.12, 1.22], strict=True):
        search.register(s, v, confirm=True)
    # over every measurement the lucky one still leads (1.273 against 1.207); over the repeats,
    # made in turn, the steady one does
    assert search.best(among=leaders).setting == lucky
    won = search.winner(leaders, 2)
    assert won.setting == steady and won.value == pytest.approx(1.21)
    # one round keeps every measurement; no leaders: every setting measured, repeats or not
    assert search.winner(leaders, 1).setting == lucky
    assert search.winner([], 2).setting == lucky
    with pytest.raises(TfschedError, match="confirm rounds must be at least 1, got 0"):
        confirm_order(leaders, 0)


def test_a_setting_next_to_a_better_leader_does_not_take_a_leaders_place():
    # the seventieth session's VGG16 inference: the model's last two trials were neighbours
    search = BayesSearch(Space(), seed=0)
    near, nearer = Setting(2_965_821, 405_249), Setting(2_965_821, 407_361)
    apart = Setting(2_965_821, round(407_361 * 1.1))  # 10% more credit: another setting
    search.register(ONE_IN_FLIGHT, 0.728)  # outside the space
    search.register(near, 0.732)
    search.register(nearer, 0.738)
    assert search.to_confirm(2) == [nearer, ONE_IN_FLIGHT]
    assert search.to_confirm(3) == [nearer, ONE_IN_FLIGHT]  # fewer where no other setting is apart
    search.register(apart, 0.70)
    assert search.to_confirm(3) == [nearer, ONE_IN_FLIGHT, apart]
    # a space with a fixed partition compares the credit alone
    fixed = RandomSearch(Space(partition=2**20))
    fixed.register(Setting(2**20, 2**20), 1.0)
    fixed.register(Setting(2**20, round(2**20 * 1.05)), 0.9)
    fixed.register(Setting(2**20, 1), 0.8)  # one slice in flight
    assert fixed.to_confirm(2) == [Setting(2**20, 2**20), Setting(2**20, 1)]


def test_a_result_judged_on_the_repeats_says_so_and_reports_their_means():
    from tfsched.tune.run import TuneResult
    from tfsched.tune.search import Trial

    a, b = Setting(2**17, 2**20), Setting(2**20, 2**22)
    history = [Trial(a, 1.6), Trial(b, 1.2), Trial(a, 1.0, True), Trial(b, 1.2, True)]
    history += [Trial(a, 1.1, True), Trial(b, 1.3, True)]
    doc = TuneResult(history, b, 1.25, repeats_only=True).to_json()["best"]
    assert doc["repeats_only"] is True and doc["measurements"] == 2
    assert doc["throughput_steps_per_s"] == pytest.approx(1.25)
    doc = TuneResult(history, b, 1.2333).to_json()["best"]
    assert "repeats_only" not in doc and doc["measurements"] == 3
    assert doc["throughput_steps_per_s"] == pytest.approx(3.7 / 3)


def test_a_repeat_does_not_take_the_place_of_the_models_suggestion(capsys):
    search = BayesSearch(Space(), seed=0, init_points=0)
    first = search.next_setting()
    search.register(first, 1.0)
    suggested = search.next_setting()
    search.register(first, 1.1, confirm=True)  # a repeat arrives while a suggestion is out
    assert search._pending is not None
    search.register(suggested, 0.8)
    assert search._pending is None and search.measured(first) == pytest.approx(1.05)
    assert len(search._opt.space) == 3
    assert capsys.readouterr().out == ""  # the library's line about repeated points is kept off stdout


@pytest.mark.parametrize("kind", [BayesSearch, RandomSearch])
def test_both_searches_take_the_same_seeds_and_refuse_the_rest(kind):
    """A seed numpy's RandomState cannot take (bayes_opt seeds it) was its ValueError, after the
    tuner had built every worker's graph; both searches now refuse it with one error, and take
    the largest seed there is."""
    from tfsched.tune.search import MAX_SEED

    for seed in (0, MAX_SEED):
        first = kind(Space(), seed=seed).next_setting()
        assert kind(Space(), seed=seed).next_setting() == first  # the seed says what is tried
        assert kind(Space(), seed=seed).in_bounds(first)
    for bad in (-1, MAX_SEED + 1, 2**63, 1.5, True, "7", None):
        with pytest.raises(TfschedError, match=r"the seed must be a whole number from 0 to 2\*\*32-1"):
            kind(Space(), seed=bad)


@pytest.mark.parametrize("where", ["session", "tf2"])
def test_a_tuning_run_refuses_a_bad_seed_before_it_builds_anything(where, monkeypatch):
    """Both tuners make their search first: a seed it refuses is one error before any graph is
    built or any channel sized (the session tuner's came after every worker's graph)."""
    from tfsched.tune import run, tf2

    def built(*args, **kwargs):
        raise AssertionError("built before the seed was checked")

    monkeypatch.setattr("tfsched.graph._tf.import_tensorflow", built)
    monkeypatch.setattr("tfsched.bench.tf2.channel_params", built)
    tune = run.tune_cluster if where == "session" else tf2.tune_tf2
    with pytest.raises(TfschedError, match="the seed must be a whole number"):
        tune("seq32", seed=2**32)


def test_in_bounds():
    space = Space(partition_log2=(16.0, 20.0), credit_log2=(18.0, 22.0))
    search = RandomSearch(space)
    assert search.in_bounds(Setting(2**18, 2**20))
    assert not search.in_bounds(Setting(2**21, 2**20)) and not search.in_bounds(Setting(2**18, 2**23))


def test_probe_goes_first():
    search = BayesSearch(Space(), seed=0)
    search.probe(Setting(2**18, 2**20))
    assert search.next_setting() == Setting(2**18, 2**20)
    with pytest.raises(TfschedError):
        search.register(Setting(2**18, 2**20), float("nan"))


@pytest.mark.parametrize("kind", [BayesSearch, RandomSearch])
def test_a_probe_outside_the_space_is_measured_and_can_win_but_the_model_never_sees_it(kind, capsys):
    """One tensor in flight (no partition, credit 1) lies outside every space: it is measured as
    it is, not rounded into the space, and only the history keeps it."""
    search = kind(Space(), seed=0)
    assert not search.in_bounds(ONE_IN_FLIGHT)
    defaults = Setting(2**20, 2**22)
    search.probe(defaults)
    search.probe(ONE_IN_FLIGHT)
    assert search.next_setting() == defaults
    search.register(defaults, 1.0)
    assert search.next_setting() == ONE_IN_FLIGHT
    search.register(ONE_IN_FLIGHT, 1.4)
    for _ in range(3):  # the model's own settings, all inside
        s = search.next_setting()
        assert search.in_bounds(s) and s != ONE_IN_FLIGHT
        search.register(s, 0.9)
    search.register(ONE_IN_FLIGHT, 1.2, confirm=True)
    assert search.best().setting == ONE_IN_FLIGHT and search.best().value == pytest.approx(1.3)
    assert search.to_confirm(1) == [ONE_IN_FLIGHT]
    if kind is BayesSearch:  # the defaults and the model's three, not the probe outside
        assert len(search._opt.space) == 4
    # probed again once measured: not run again, and still not the model's
    search.probe(ONE_IN_FLIGHT)
    assert search.next_setting() != ONE_IN_FLIGHT
    if kind is BayesSearch:
        assert len(search._opt.space) == 4
    assert ONE_IN_FLIGHT.describe() == "partition 0 credit 1 (one tensor in flight)"
    assert capsys.readouterr().out == ""
    # a space that fixes the partition (tfsched tune --credit-only) keeps it: one slice in flight
    fixed = Space(partition=2**20)
    assert Space().one_in_flight() == ONE_IN_FLIGHT and fixed.one_in_flight() == Setting(2**20, 1)
    search = kind(fixed, seed=0)
    search.probe(fixed.one_in_flight())
    assert not search.in_bounds(fixed.one_in_flight()) and search.next_setting() == Setting(2**20, 1)
