"""Benchmark bookkeeping: modes, and TicTac's straggler effect from synchronized steps."""

import re
import statistics

import pytest

from tfsched.bench.results import (
    cpu_description,
    glance,
    markdown,
    paired_ratio_ci,
    realigned,
    summarize,
    sync_spread,
)
from tfsched.bench.run import ModeResult, crosses, parse_mode, parse_modes, per_byte, steps_across
from tfsched.enforce.api import link_sizes
from tfsched.errors import TfschedError

# a one-worker run's settings, for tables built from hand-made results
CONFIG = {
    "model": "m",
    "mode": "train",
    "ps": 1,
    "workers": 1,
    "bandwidth": "1 Gbit/s",
    "rounds": 1,
    "steps": 1,
}


def test_straggler_is_the_longest_wait_over_the_iteration():
    r = ModeResult("baseline", iterations=[[1.0, 0.5], [2.0, 2.0], [1.0, 0.9, 0.8]])
    # waits: 0.5 of 1.0, 0 of 2.0, 0.2 of 1.0
    assert r.straggler == pytest.approx((0.5 + 0.0 + 0.2) / 3)
    assert ModeResult("x").straggler == 0.0


def test_a_synchronized_step_lasts_as_long_as_its_slowest_worker():
    its = [[1.0, 0.5], [2.0, 2.0], [1.0, 0.9, 0.8]]
    r = ModeResult("tao", step_times=[t for it in its for t in it], iterations=its)
    assert r.iteration_times == [1.0, 2.0, 1.0]
    j = r.to_json()
    assert j["iteration_mean_s"] == pytest.approx(4.0 / 3)
    assert j["mean_s"] == pytest.approx(8.2 / 7) and j["iteration_mean_s"] > j["mean_s"]
    assert j["iterations"] == its  # kept raw: every column can be recomputed from the file
    assert ModeResult("x").to_json()["iteration_mean_s"] == 0.0


def test_sync_spread_is_of_the_synchronized_steps_not_of_each_workers():
    # the workers stagger (two of three finish at half the step) but the steps take 1.0 s: steady
    its = [[1.0, 0.5, 0.5]] * 19 + [[1.3, 0.6, 0.6]]
    r = ModeResult("tao", step_times=[t for it in its for t in it], iterations=its)
    j = r.to_json()
    assert j["p95_over_p50"] == pytest.approx(2.0)  # the workers' times: 1.0 against 0.5
    assert j["iteration_p95_over_p50"] == pytest.approx(1.0)  # p95 of 20 steps is the 19th
    its[-2] = [1.3, 0.6, 0.6]
    assert ModeResult("tao", iterations=its).to_json()["iteration_p95_over_p50"] == pytest.approx(1.3)
    # a file from before the field: recomputed from the raw iterations; before those: none
    old = {
        k: v for k, v in ModeResult("tao", iterations=its).to_json().items() if k != "iteration_p95_over_p50"
    }
    assert sync_spread(old) == pytest.approx(1.3)
    assert sync_spread({"mode": "tao", "iterations": []}) is None
    assert ModeResult("x").to_json()["iteration_p95_over_p50"] == 0.0


def test_mode_grammar():
    assert parse_mode("baseline").algorithm is None
    # across the barrier: vanilla, or TIO's gates, each served by priority among the arrived
    vanilla, gated = parse_mode("cross"), parse_mode("tio+pc+ready+cross")
    assert (vanilla.algorithm, vanilla.cross, vanilla.ready) == (None, True, False)
    assert (gated.algorithm, gated.cross, gated.ready, gated.knobs["ready"]) == ("tio", True, True, True)
    assert not parse_mode("tio+ready").cross and parse_mode("tio+ready").ready
    assert parse_mode("layer+pc+ready+cross").cross
    assert [crosses(m) for m in ("cross", "tio+ready+cross@held", "tio+pc", "baseline")] == [
        True,
        True,
        False,
        False,
    ]
    m = parse_mode("tao+pc")
    assert (m.algorithm, m.partition, m.credit) == ("tao", 1_000_000, 4_000_000)
    m = parse_mode("tio+p500000+c2000000")
    assert (m.algorithm, m.partition, m.credit) == ("tio", 500_000, 2_000_000)
    # +pc keeps ByteScheduler's sizes as link time on faster links, never below them
    assert (parse_mode("tao+pc", 1e9).partition, parse_mode("tao+pc", 100e6).credit) == (1_000_000, 4_000_000)
    m = parse_mode("tao+pc", 10e9)
    assert (m.partition, m.credit) == (10_000_000, 40_000_000)
    m = parse_mode("tao+pc+p2000000", 10e9)  # an explicit size wins
    assert (m.partition, m.credit) == (2_000_000, 40_000_000)
    # and the credit at most a quarter of what the busiest channel carries in a step (the
    # Transformer encoder's 3,210,762 parameters), the partition at most the credit; the cap is
    # kept as link time too, and never goes below what the pass acknowledges (16,384)
    m = parse_mode("tao+pc", 1e9, 3_210_762)
    assert (m.partition, m.credit) == (802_690, 802_690)
    m = parse_mode("tao+pc", 10e9, 3_210_762)
    assert (m.partition, m.credit) == (8_026_900, 8_026_900)
    m = parse_mode("tao+pc", 1e9, 23_608_202)  # ResNet-50: a quarter is over ByteScheduler's credit
    assert (m.partition, m.credit) == (1_000_000, 4_000_000)
    m = parse_mode("tao+pc", None, 20_000)
    assert (m.partition, m.credit) == (16_384, 16_384)
    m = parse_mode("tao+pc+c2000000", 1e9, 3_210_762)  # an explicit size wins
    assert (m.partition, m.credit) == (802_690, 2_000_000)
    # wherever it stands; and each knob once (p1000+p2000 ran as p2000 under a name with both),
    # its digits ASCII ('p٣' ran as a partition of 3)
    m = parse_mode("tao+p2000000+pc", 10e9)
    assert (m.partition, m.credit) == (2_000_000, 40_000_000)
    for bad, message in (
        ("tio+p1000+p2000+c1", "+p2000 sets the partition a second time"),
        ("tio+pc+c1+c2", "+c2 sets the credit a second time"),
        ("tio+pc+g2+g8", "+g8 sets the acknowledgement group a second time"),
        ("tio+pc+pc", "+pc is given twice"),
        ("tio+pc+sent+sent", "+sent is given twice"),
        ("tio+pc+host+host", "+host is given twice"),
        ("tio+pc+host+lockstep", "+host and +lockstep are two orders of one window"),
        ("tio+p\u0663+c1", "is not pc, pN, cN"),
    ):
        with pytest.raises(TfschedError, match=re.escape(message)):
            parse_mode(bad)
    for bad in (-1, 2.5, True):
        with pytest.raises(TfschedError, match="channel_params"):
            link_sizes(1e9, bad)
    m = parse_mode("tao+pc+a32")
    assert (m.credit, m.ack_share, m.effective_ack_share) == (4_000_000, 32, 32)
    assert (parse_mode("tao+pc").ack_share, parse_mode("tao+pc").effective_ack_share) == (None, 8)
    with pytest.raises(TfschedError, match=r"\+aN needs a credit"):
        parse_mode("tao+a32")
    assert (parse_mode("tao+pc+host+sent").credit_return, parse_mode("tao+pc").credit_return) == (
        "sent",
        "ack",
    )
    with pytest.raises(TfschedError, match=r"\+sent needs a credit"):
        parse_mode("tao+p1000000+sent")
    # +gN: slices an acknowledgement returns at most, recorded with the mode's settings
    g = parse_mode("tao+p1000000+c4000000+g2")
    assert (g.ack_group, g.knobs["ack_group"], parse_mode("tao+pc").ack_group) == (2, 2, 1)
    with pytest.raises(TfschedError, match=r"\+gN needs a credit"):
        parse_mode("tao+p1000000+g2")
    with pytest.raises(TfschedError, match=r"\+gN groups acknowledgements, and \+sent has none"):
        parse_mode("tao+pc+g2+sent")
    with pytest.raises(TfschedError, match="'g0' is not pc"):
        parse_mode("tao+pc+g0")
    # +pool: the transfers left to TensorFlow's _Send/_Recv, recorded with the mode's settings
    pool, inline = parse_mode("tao+pc+pool"), parse_mode("tao+pc")
    assert (pool.inline_transfers, pool.knobs["inline_transfers"], inline.inline_transfers) == (
        False,
        False,
        True,
    )
    assert parse_mode("tio+pool").credit == 0
    # one window per sending task, serving the steps in turn or in lockstep
    host, lockstep = parse_mode("tao+pc+host"), parse_mode("tao+pc+lockstep")
    assert (host.host_credit, host.host_order) == (True, "steps")
    assert (lockstep.host_credit, lockstep.host_order) == (True, "priority")
    assert (parse_mode("tao+pc").host_credit, parse_mode("tao+pc").host_order) == (False, "steps")
    with pytest.raises(TfschedError, match=r"\+lockstep needs a credit"):
        parse_mode("tao+lockstep")
    with pytest.raises(TfschedError, match=r"\+host and \+lockstep are two orders of one window"):
        parse_mode("tao+pc+host+lockstep")
    # a window for the workers' pushes, a live credit beside the pass's (run_side_by_side)
    w = parse_mode("tao+pc+lockstep+w1000000")
    assert (w.push_credit, w.knobs["push_credit"], w.credit, parse_mode("tao+pc").push_credit) == (
        1_000_000,
        1_000_000,
        4_000_000,
        0,
    )
    with pytest.raises(TfschedError, match=r"\+wN needs a credit"):
        parse_mode("tao+p1000000+w1000")
    # slices under what the credit acknowledges (credit / 8) take none of it: the window would hold
    # nothing; with +a16 they are acknowledged, and whole tensors are where there is no partition
    with pytest.raises(TfschedError, match=r"\+w250000 would hold no push: .* 500,000 parameters and more"):
        parse_mode("tao+p250000+c4000000+lockstep+w250000")
    assert parse_mode("tao+p250000+c4000000+a16+w250000").push_credit == 250_000
    assert parse_mode("tao+c4000000+w250000").push_credit == 250_000
    for bad in (
        "fifo",
        "tio+q3",
        "tio+p0",
        "tio+p-1",
        "tio+pc5",
        "tio+pc+a0",
        "tio+pc+a",
        "tio+pc+w0",
        "tio+pc+w",
    ):
        with pytest.raises(TfschedError):
            parse_mode(bad)
    with pytest.raises(TfschedError, match="baseline"):
        parse_modes("tio,tao")
    with pytest.raises(TfschedError, match="twice"):
        parse_modes("baseline,tio,tio")


def test_the_table_says_what_pc_was_on_this_link():
    base = ModeResult("baseline", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
    spec = parse_mode("tao+pc", 10e9)
    pc = ModeResult("tao+pc", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
    pc.knobs = {"partition": spec.partition, "credit": spec.credit, "host_credit": False}
    summary = summarize(
        {"baseline": base, "tao+pc": pc},
        {
            "model": "m",
            "mode": "train",
            "ps": 1,
            "workers": 1,
            "bandwidth": "10 Gbit/s",
            "rounds": 1,
            "steps": 1,
        },
    )
    assert summary["modes"][1]["credit"] == 40_000_000
    assert "`+pc` here: partition 10,000,000, credit 40,000,000 parameters." in markdown(summary)
    # the build of the library the tasks load, which the file records (TfschedBuild answers it)
    from tfsched.enforce.build import build_id, library_path

    assert summary["tfsched_build"] == build_id(library_path()[0])
    assert f"\ntfsched build: {summary['tfsched_build']}.\n" in markdown(summary)
    assert "tfsched build" not in markdown({**summary, "tfsched_build": None})  # an older file
    # the one the run's tasks loaded, taken as they started: the sources may change meanwhile
    started = "tf2.21.0-0123456789abcdef"
    assert summarize({"baseline": base}, summary["config"], build=started)["tfsched_build"] == started
    # CPU per synchronized step: the machine's busy seconds over the steps all workers made
    pc.iterations, pc.cpu_s, pc.cpu_total_s = [[1.0, 0.9], [1.1, 1.0]], 3.0, 4.0
    row = summarize({"baseline": base, "tao+pc": pc}, summary["config"])["modes"][1]
    assert (row["cpu_s_per_step"], row["cpu_busy"]) == (1.5, 0.75)
    assert "| 1.50 (75%) |" in markdown(summarize({"tao+pc": pc}, summary["config"]))
    # cores that never idled: /proc/stat's seconds since boot, subtracted, may differ by a rounding
    # error (CI measured 1.000000000001692); the share stays a share
    pc.cpu_s, pc.cpu_total_s = 9.700000000016, 9.7
    assert summarize({"tao+pc": pc}, summary["config"])["modes"][0]["cpu_busy"] == 1.0
    assert "`+pc` here" not in markdown(summarize({"baseline": base}, summary["config"]))
    # a window on the workers' pushes leaves +pc's sizes as they were, and the table says what it is
    w = ModeResult("tao+pc+w1000", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
    w.knobs = dict(pc.knobs, push_credit=1000)
    text = markdown(summarize({"baseline": base, "tao+pc+w1000": w}, summary["config"]))
    assert "`+pc` here: partition 10,000,000, credit 40,000,000 parameters." in text
    assert "`+wN`: the workers' pushes under a window of N parameters" in text
    assert "`+wN`" not in markdown(summarize({"baseline": base, "tao+pc": pc}, summary["config"]))
    # tasks given their own executor threads (bench --inter-op-threads) say so in the header
    threads = dict(summary["config"], inter_op_threads=4)
    assert "10 Gbit/s, 4 inter-op threads a task, 1 interleaved" in markdown(
        summarize({"baseline": base}, threads)
    )
    assert "inter-op" not in markdown(summarize({"baseline": base}, summary["config"]))
    # and tasks whose idle threads sleep at once (bench --no-thread-spinning)
    still = dict(summary["config"], thread_spinning=False)
    assert "10 Gbit/s, idle threads not spinning, 1 interleaved" in markdown(
        summarize({"baseline": base}, still)
    )
    assert "spinning" not in markdown(summarize({"baseline": base}, summary["config"]))


def test_paired_round_ratios_give_the_interval_of_the_speedup():
    # The baseline drifts (10, 20, 5 steps/s); the mode is 1.1x of it in every round but the last.
    base = ModeResult("baseline", rounds=[(10, 1.0), (20, 1.0), (5, 1.0), (10, 1.0)])
    mode = ModeResult("tao", rounds=[(11, 1.0), (22, 1.0), (5.5, 1.0), (10.5, 1.0)])
    lo, hi = paired_ratio_ci(mode, base)
    assert lo < 1.05 < 1.1 < hi < 1.2  # drift cancels out: only the pairs' spread counts
    same = ModeResult("tao", rounds=[(11, 1.0), (22, 1.0), (5.5, 1.0), (11, 1.0)])
    lo, hi = paired_ratio_ci(same, base)
    assert lo == pytest.approx(1.1) and hi == pytest.approx(1.1)
    assert paired_ratio_ci(ModeResult("tao", rounds=[(11, 1.0)] * 2), base) is None  # too few rounds
    for m in (base, mode):
        m.steps, m.wall_s = sum(s for s, _ in m.rounds), sum(w for _, w in m.rounds)
    rows = {r["mode"]: r for r in summarize({"baseline": base, "tao": mode}, {})["modes"]}
    assert rows["baseline"]["vs_baseline_ci95"] is None and rows["tao"]["vs_baseline_ci95"][0] > 1.0


def test_a_byte_costs_the_cpu_past_what_the_same_messages_cost_cut_short():
    # 3 steps moved 400 MB more each than the cut pulls, for 2.4 more CPU seconds
    assert per_byte(3.0, 0.6, 400_000_000, 3) == pytest.approx(2e-9)
    # the same messages cost as much whole as cut: nothing measurable per byte (not negative)
    assert per_byte(0.05, 0.06, 1_000_000, 3) == 0.0
    assert per_byte(1.0, 0.5, 0, 3) == 0.0 and per_byte(1.0, 0.5, 10, 0) == 0.0


def test_a_row_says_which_processor_it_ran_on(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC\ncpu MHz\t\t: 2596.132\n\nprocessor\t: 1\nmodel name\t: other\n"
    )
    desc = cpu_description(str(info))
    assert desc.startswith("AMD EPYC (family 25, model 17), 2596 MHz, ") and desc.endswith(" cores")
    assert "other" not in desc  # the first processor's block only
    bare = tmp_path / "bare"
    bare.write_text("processor\t: 0\nmodel name\t: Some CPU\ncpu MHz\t: fast\n")
    assert cpu_description(str(bare)).startswith("Some CPU, ")  # no numbers, an unreadable clock
    assert cpu_description(str(tmp_path / "missing")).endswith(" cores")  # no /proc: still a line
    base = ModeResult("baseline", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
    config = CONFIG
    summary = summarize({"baseline": base}, config)
    assert summary["cpu"] == cpu_description()
    assert f"Processor: {summary['cpu']}." in markdown(summary)
    del summary["cpu"]  # a file written before rows said it
    assert "Processor:" not in markdown(summary)


def test_at_a_glance_names_each_rows_fastest_and_slowest_mode():
    def mode(name, rate, p50, p95, straggler, slow_step=1.0):
        # three rounds of one second, the last a little faster (the interval needs a spread)
        rounds = [(rate, 1.0), (rate, 1.0), (rate * 1.01, 1.0)]
        return ModeResult(
            name,
            step_times=[p50] * 18 + [p95] * 2,
            rounds=rounds,
            steps=round(sum(s for s, _ in rounds)),
            wall_s=3.0,
            # 20 synchronized steps, the last two slow_step times as long
            iterations=[[t, t * (1.0 - straggler)] for t in [1.0] * 18 + [slow_step] * 2],
        )

    config = {**CONFIG, "workers": 2, "rounds": 3}
    fast = summarize(
        {
            "baseline": mode("baseline", 100, 1.0, 1.2, 0.3, slow_step=1.1),
            "tio": mode("tio", 90, 1.1, 1.2, 0.2),
            "tao+pc": mode("tao+pc", 150, 0.7, 0.72, 0.1, slow_step=1.02),
        },
        {**config, "batch_size": 32},
    )
    fast["cpu"] = "Some CPU (family 6, model 1), 2600 MHz, 2 cores"
    alone = summarize({"baseline": mode("baseline", 100, 1.0, 1.2, 0.3)}, config)
    table = glance({"row-a": fast, "row-b": alone}).splitlines()
    assert len(table) == 3  # a row with the baseline alone has nothing to show
    cells = [c.strip() for c in table[2].strip("|").split("|")]
    base, tio, pc = fast["modes"]
    assert cells[:3] == ["row-a", "32", "tao+pc"]
    assert pc["vs_baseline"] == pytest.approx(1.5, abs=0.01) and tio["vs_baseline"] < 1.0
    assert cells[3] == f"{pc['vs_baseline']:.3f}x (1.50-1.50)"
    assert cells[4] == "1.029 (1.200)"
    assert cells[5] == "1.020 (1.100)"  # the synchronized steps' spread, not the workers'
    assert cells[6] == "0.100 (0.300)"
    assert cells[7:9] == ["tio", f"{tio['vs_baseline']:.3f}x (0.90-0.90)"]
    assert cells[9] == "Some CPU (family 6, model 1)"


def test_the_table_says_what_tao_was_ordered_from():
    config = CONFIG
    base = ModeResult("baseline", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
    tao = ModeResult("tao+pc", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
    assert "TAO ordered" not in markdown(summarize({"baseline": base}, config))
    # a file written before the seventeenth session: no ordered_from, the cost model's times
    old = summarize({"baseline": base, "tao+pc": tao}, config)
    assert "ordered_from" not in old["modes"][1]
    assert "TAO ordered from the cost model's op times" in markdown(old)
    tao.order_trace = object()  # what mode_configs' function was given (bench.run.run_side_by_side)
    new = summarize({"baseline": base, "tao+pc": tao}, config)
    assert new["modes"][1]["ordered_from"] == "trace of worker 0 alone"
    assert "TAO ordered from worker 0's op times, traced alone before the rounds." in markdown(new)


def test_the_table_says_how_the_simulated_links_were_shared():
    def run(**measured) -> dict:
        modes = {}
        for name in ("baseline", "tao+pc", "baseline@held"):
            modes[name] = ModeResult(name, step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
            modes[name].measured = measured.get(name.partition("@")[2], {})
        return summarize(modes, {**CONFIG, "ps": 2, "ps_placement": ["bytes", "held"]})

    # not predicted (no traced baseline), or a file from before the forty-fifth session
    assert "links shared" not in markdown(run())
    shared = markdown(run(**{"": {"worker_weight": 0.861}, "held": {"worker_weight": 1.0}}))
    assert "worker k's flows weigh w^k, w = 0.86, 1.00 (MODE@held) (1: evenly)." in shared


def _tune_doc(**config) -> dict:
    base = {
        "model": "seq32",
        "graph": None,
        "workers": 2,
        "ps": 1,
        "bandwidth": "1 Gbit/s",
        "algorithm": "tao",
    }
    return {
        "schema": "tfsched.tune/1",
        "config": {**base, **config},
        "best": {"partition": 131_072, "credit": 569_173, "throughput_steps_per_s": 4.1},
    }


def test_a_tune_files_best_setting_is_a_bench_mode(tmp_path):
    import json

    from tfsched.bench.run import tuned_mode
    from tfsched.tune.run import read_tune_file

    where = {"model": "seq32", "workers": 2, "ps": 1, "bandwidth": "1 Gbit/s", "batch_size": 4}
    path = tmp_path / "tune.json"
    path.write_text(json.dumps(_tune_doc(batch_size=4)))
    doc = read_tune_file(str(path))
    assert tuned_mode(doc, "t.json", **where) == "tao+p131072+c569173"
    spec = parse_mode(tuned_mode(doc, "t.json", **where))
    assert (spec.algorithm, spec.partition, spec.credit, spec.host_credit) == ("tao", 131_072, 569_173, False)
    # tuned with one window per task, another share and no acknowledgements: the bench runs it so
    tuned = _tune_doc(host_credit=True, ack_share=32, credit_return="sent", algorithm="tio")
    assert tuned_mode(tuned, "t.json", **where) == "tio+p131072+c569173+host+a32+sent"
    # no partitioning tuned (--credit-only --partition 0): none in the mode
    flat = _tune_doc()
    flat["best"]["partition"] = 0
    assert parse_mode(tuned_mode(flat, "t.json", **where)).partition == 0
    # a pushes' window tuned (tune --push-credit): +wN, acknowledging what the tuner's pass did
    pushed = _tune_doc(host_credit=True, host_order="priority", ack_share=32, acknowledged_from=16_384)
    pushed["best"]["push_credit"] = 262_144
    path.write_text(json.dumps(pushed))
    spec = parse_mode(tuned_mode(read_tune_file(str(path)), "t.json", **where))
    assert (spec.push_credit, spec.ack_share, spec.host_order) == (262_144, 35, "priority")
    from tfsched.analysis import least_acknowledged

    assert least_acknowledged(spec.credit, spec.ack_share) == 16_384  # as the tuner's pass
    pushed["best"]["push_credit"] = -1
    path.write_text(json.dumps(pushed))
    with pytest.raises(TfschedError, match="best setting's push_credit -1 is not a number of parameters"):
        read_tune_file(str(path))
    # the mode's name is allowed only where a tune file can say what it runs (bench --tuned)
    assert parse_modes("baseline,tuned", tuned=True) == ("baseline", "tuned")
    with pytest.raises(TfschedError, match="unknown mode 'tuned'"):
        parse_modes("baseline,tuned")
    # an earlier file records no batch size: nothing to check it against
    assert tuned_mode(_tune_doc(), "t.json", **{**where, "batch_size": 64}) == "tao+p131072+c569173"
    # a file of the TensorFlow 2 tuner runs in the TensorFlow 2 bench, in the mode it was tuned in;
    # files that say neither are a session's, trained
    tf2 = _tune_doc(api="tf2", mode="inference")
    assert tuned_mode(tf2, "t.json", **where, api="tf2", run_mode="inference") == "tao+p131072+c569173"
    for doc, run, why in (
        (tf2, {}, "api tf2, mode inference, not api session, mode train"),
        (_tune_doc(), {"api": "tf2"}, "api session, not api tf2"),
        (_tune_doc(), {"run_mode": "inference"}, "mode train, not mode inference"),
    ):
        with pytest.raises(TfschedError, match=f"^t.json: tuned for {why}$"):
            tuned_mode(doc, "t.json", **where, **run)


def test_a_tune_file_for_another_run_is_one_error_naming_it(tmp_path):
    import json

    from tfsched.bench.run import tuned_mode
    from tfsched.tune.run import read_tune_file

    where = {"model": "seq32", "workers": 2, "ps": 1, "bandwidth": "1 Gbit/s", "batch_size": 4}
    for doc, why in (
        (_tune_doc(model="vgg16"), "tuned for model vgg16, not model seq32"),
        (
            _tune_doc(workers=4, bandwidth="10 Gbit/s"),
            "tuned for workers 4, bandwidth 10 Gbit/s, not workers 2, bandwidth 1 Gbit/s",
        ),
        (_tune_doc(batch_size=8), "tuned for batch_size 8, not batch_size 4"),
        (_tune_doc(model=None, graph="g.pb"), "tuned on a saved graph (g.pb)"),
    ):
        with pytest.raises(TfschedError, match="^t.json: " + why.replace("(", r"\(").replace(")", r"\)")):
            tuned_mode(doc, "t.json", **where)
    # on two PS, a file tuned with the variables placed otherwise (files before the placement
    # was recorded are taken as they are)
    two = {**where, "ps": 2, "ps_placement": "bytes"}
    with pytest.raises(TfschedError, match="^t.json: tuned for ps_placement held, not ps_placement bytes$"):
        tuned_mode(_tune_doc(ps=2, ps_placement="held"), "t.json", **two)
    assert tuned_mode(_tune_doc(ps=2, ps_placement="bytes"), "t.json", **two) == "tao+p131072+c569173"
    assert tuned_mode(_tune_doc(ps=2), "t.json", **two) == "tao+p131072+c569173"
    # tuned on hosts of cores of their own, or not (files that record none shared the machine's)
    with pytest.raises(TfschedError, match="^t.json: tuned for host_cores 0, not host_cores 0.5$"):
        tuned_mode(_tune_doc(), "t.json", **where, host_cores=0.5)
    with pytest.raises(TfschedError, match="^t.json: tuned for host_cores 0.5, not host_cores 0$"):
        tuned_mode(_tune_doc(host_cores=0.5), "t.json", **where)
    assert tuned_mode(_tune_doc(host_cores=0.5), "t.json", **where, host_cores=0.5) == "tao+p131072+c569173"
    # files that are not tune results, each named with what is wrong
    bad = _tune_doc()
    bad["best"]["credit"] = 0
    for content, why in (
        ("{", "not JSON"),
        (json.dumps({"schema": "tfsched.trace/1"}), "schema 'tfsched.trace/1'"),
        (json.dumps([1, 2]), "schema 'list'"),
        (json.dumps({"schema": "tfsched.tune/1", "best": {}}), "no config or best setting"),
        (json.dumps(bad), "is not a partition and credit"),
    ):
        path = tmp_path / "x.json"
        path.write_text(content)
        with pytest.raises(TfschedError, match="not a tfsched tune result") as e:
            read_tune_file(str(path))
        assert str(e.value).startswith(f"{path}: ") and why in str(e.value)
    with pytest.raises(TfschedError, match="cannot read"):
        read_tune_file(str(tmp_path / "missing.json"))


def test_the_table_says_which_mode_was_tuned():
    base = ModeResult("baseline", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
    tuned = ModeResult("tao+p131072+c569173", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
    config = {**CONFIG, "tuned": {"file": "tune.json", "mode": "tao+p131072+c569173"}}
    md = markdown(summarize({"baseline": base, tuned.mode: tuned}, config))
    assert "`tao+p131072+c569173`: the best setting of `tfsched tune` (tune.json)." in md
    assert "tfsched tune" not in markdown(summarize({"baseline": base}, CONFIG))


def test_the_header_names_a_placement_other_than_by_bytes_moved():
    base = ModeResult("baseline", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)

    def header(**config):
        return markdown(summarize({"baseline": base}, {**CONFIG, **config})).splitlines()[0]

    assert "**m** (train), 2 PS (variables placed held) x 1 workers" in header(ps=2, ps_placement="held")
    assert "**m** (train), 2 PS x 1 workers" in header(ps=2, ps_placement="bytes")
    assert "**m** (train), 1 PS x 1 workers" in header()  # rows run before the option


def test_the_header_says_when_a_training_step_left_out_batch_norms_moving_averages():
    base = ModeResult("baseline", step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)

    def header(**config):
        return markdown(summarize({"baseline": base}, {**CONFIG, **config})).splitlines()[0]

    without = "without batch normalization's moving averages"
    assert f"**resnet50** (train, {without}), 1 PS" in header(model="resnet50", moving_averages=False)
    assert without in header(model="mobilenet")  # a file of before the option: it left them out
    assert without not in header(model="resnet50", moving_averages=True)
    assert without not in header(model="vgg16", moving_averages=False)  # none to leave out
    assert without not in header(model="resnet50", mode="inference")  # none in a forward pass


def test_the_table_says_which_modes_ran_at_the_cores_limit_and_what_that_leaves_to_win():
    """Every task shares the machine's cores: a mode that kept them busy cannot step faster than
    its CPU seconds a step over the cores, and its ratio to the baseline is bounded by that."""
    config = {
        "model": "m",
        "mode": "inference",
        "ps": 1,
        "workers": 2,
        "bandwidth": "1 Gbit/s",
        "rounds": 1,
        "steps": 2,
    }

    def mode(name, slowest, cpu_s, busy):
        r = ModeResult(name, step_times=[slowest] * 4, rounds=[(1, 2 * slowest)], steps=4, wall_s=2 * slowest)
        r.iterations = [[slowest, slowest - 0.1]] * 2
        r.cpu_s, r.cpu_total_s = 2 * cpu_s, 2 * cpu_s / busy
        return r

    base, fast = mode("baseline", 7.5, 10.0, 0.66), mode("tao+pc+host", 5.1, 10.0, 0.99)
    summary = summarize({"baseline": base, "tao+pc+host": fast}, config)
    summary["cores"] = 2  # as on the machine the numbers are from, whatever this one has
    text = markdown(summary)
    assert "At the cores' limit (95% busy or more; every task shares the 2 cores):" in text
    assert (
        "- `tao+pc+host`, 99% busy: 10.00 CPU seconds a step take at least 5.00 s (slowest worker "
        "5.10 s); at most 1.50x the baseline's 7.50 s." in text
    )
    assert "`baseline`, 66% busy" not in text  # the baseline left the cores idle
    # files from before the summary said how many cores: from the processor's description
    del summary["cores"]
    summary["cpu"] = "AMD EPYC (family 26, model 2), 2596 MHz, 4 cores"
    assert "take at least 2.50 s (slowest worker 5.10 s); at most 3.00x" in markdown(summary)
    # no mode at the limit, or no cores said: no such lines
    summary["modes"][1]["cpu_busy"] = 0.9
    assert "At the cores' limit" not in markdown(summary)
    summary["modes"][1]["cpu_busy"], summary["cpu"] = 0.99, "unknown processor"
    assert "At the cores' limit" not in markdown(summary)
    # each task with cores of its own (bench --host-cores): the title says so, and the machine's
    # busy share bounds nothing, for no task is lent another's idle cores
    summary["config"]["host_cores"], summary["cores"] = 0.5, 2
    text = markdown(summary)
    assert "x 2 workers, 1 Gbit/s, each host 0.5 cores of its own, 1 interleaved rounds" in text
    assert "At the cores' limit" not in text and (
        "Every task had 0.5 cores of its own (a CPU quota: the machine's 2 cores are not lent "
        "between tasks)" in text
    )
    # their quotas add up to the machine's cores (3 tasks): no more said; past them, that
    assert "Their quotas add up to" not in markdown(
        dict(summary, config=dict(summary["config"], host_cores=2 / 3))
    )
    summary["config"]["host_cores"] = 0.8
    assert (
        "Their quotas add up to 2.4 cores on the machine's 2, though: when every task computes at once"
        in markdown(summary)
    )


def test_the_table_says_what_no_order_can_beat_and_where_a_mode_measured_under_it():
    """The simulator's floor under the table (sim.metrics.Bounds.floor), against the baseline's
    simulated and measured step; a mode that measured under it is named, for the floor is only as
    right as the simulator's op times."""
    config = {
        "model": "m",
        "mode": "train",
        "ps": 1,
        "workers": 2,
        "bandwidth": "1 Gbit/s",
        "rounds": 1,
        "steps": 2,
    }

    def mode(name, slowest):
        r = ModeResult(name, step_times=[slowest] * 4, rounds=[(1, 2 * slowest)], steps=4, wall_s=2 * slowest)
        r.iterations = [[slowest, slowest - 0.1]] * 2
        return r

    summary = summarize({"baseline": mode("baseline", 9.0), "tao+pc+host": mode("tao+pc+host", 7.5)}, config)
    assert "no order steps faster" not in markdown(summary)  # no traces, no floor
    summary["modes"][0].update(floor_s=7.2, predicted_s=8.64, floor_by="the uplink of PS: 4.00 s of work")
    text = markdown(summary)
    assert "In the simulator no order steps faster than its floor of 7.20 s" in text
    assert (
        "at most 1.20x the simulated baseline (8.64 s), 1.25x the measured one (9.00 s). It is set by the "
        "uplink of PS: 4.00 s of work." in text
    )
    assert "under the floor" not in text
    summary["modes"][0]["floor_s"] = 7.8
    assert "`tao+pc+host` measured 7.50 s, under the floor" in markdown(summary)


def test_the_table_of_where_the_workers_part_says_a_step_across_the_barrier_overlaps_the_next():
    phases = {"started": 0.0, "pulled": 0.1, "computed": 0.2, "pushed": 0.3, "ended": 0.3}

    def traced(mode: str) -> ModeResult:
        r = ModeResult(mode, step_times=[1.0], rounds=[(1, 1.0)], steps=1, wall_s=1.0)
        r.stagger = dict(phases)
        return r

    behind = markdown(summarize({"baseline": traced("baseline")}, CONFIG))
    assert "| baseline | 0.100 | 0.200 | 0.300 | 0.300 |" in behind
    assert "each step overlaps the next" not in behind
    across = markdown(summarize({"baseline": traced("baseline"), "cross": traced("cross")}, CONFIG))
    assert "| cross | 0.100 | 0.200 | 0.300 | 0.300 |" in across
    assert "traced step is both of its runs" in across and "each step overlaps the next" in across


def test_a_step_across_the_barrier_is_the_rounds_wall_time_over_their_steps():
    """Two workers whose own steps across the barrier alternate (2 s then 1 s, 1 s then 2 s):
    the second step runs from worker 0's end at 2 s to both ends at 3 s, so the round took 3 s
    for its 2 steps. The training step, the simulator's error and the table are of 1.5 s; behind
    the barrier, of each step's slowest worker."""
    config = dict(CONFIG, workers=2, steps=2)

    def result(mode: str, its: list) -> ModeResult:
        r = ModeResult(mode, step_times=[2.0, 1.0, 1.0, 2.0], iterations=its, steps=4, wall_s=3.0)
        r.per_worker, r.rounds = {0: [2.0, 1.0], 1: [1.0, 2.0]}, [(4, 3.0)]
        r.measured = {"predicted_s": 1.65, "prediction_error": 1.65 / 2.0 - 1}  # as stored until then
        return r

    crossed = result("tio+pc+ready+cross", steps_across([[2.0, 3.0], [1.0, 3.0]]))
    behind = result("tio+pc", [[2.0, 1.0], [1.0, 2.0]])
    assert crossed.training_step_s == pytest.approx(1.5) and behind.training_step_s == pytest.approx(2.0)
    assert statistics.fmean(crossed.iteration_times) == pytest.approx(crossed.training_step_s)
    # the fastest worker waits 1 s of the first step's 2 and none of the second's 1
    assert crossed.straggler == pytest.approx(0.25) and behind.straggler == pytest.approx(0.5)
    text = markdown(summarize({"tio+pc": behind, "tio+pc+ready+cross": crossed}, config))
    rows = {
        line.split(" | ")[0][2:]: line.split(" | ") for line in text.splitlines() if line.startswith("| tio")
    }
    assert rows["tio+pc+ready+cross"][7:12] == ["0.250", "-", "1.5000*", "1.6500", "+10%"]
    assert rows["tio+pc"][7:12] == ["0.500", "-", "2.0000", "1.6500", "-18%"]
    assert "*: across the barrier nothing starts the workers' steps together" in text
    assert "worked out again" not in text
    # two steps a round: none but the first and the last, so no step once the pipeline is full
    assert crossed.steady_step_s is None and "Once the pipeline is full" not in text
    assert "*: across" not in markdown(summarize({"tio+pc": behind}, config))


def test_a_file_of_before_the_steps_across_the_barrier_were_aligned_is_read_aligned():
    """A file written before the seventy-ninth session kept each worker's own steps across the
    barrier: its table and its line in BENCHMARKS.md's glance show the straggler effect and the
    synchronized steps as the bench times them now, and say they were worked out again; a mode
    behind the barrier is read as it was written."""
    config = dict(CONFIG, workers=2, steps=2, rounds=2)
    own = [[2.0, 1.0], [1.0, 2.0], [1.0, 1.5], [1.5, 1.0]]  # two rounds of two steps
    crossed = ModeResult("cross", step_times=[1.0] * 8, iterations=own, steps=8, wall_s=5.5)
    crossed.per_worker, crossed.rounds = {0: [1.0] * 4, 1: [1.0] * 4}, [(4, 3.0), (4, 2.5)]
    base = ModeResult("baseline", step_times=[2.0] * 8, iterations=[[2.0, 1.0]] * 4, steps=8, wall_s=8.0)
    base.per_worker, base.rounds = {0: [2.0] * 4, 1: [1.0] * 4}, [(4, 4.0), (4, 4.0)]
    summary = summarize({"baseline": base, "cross": crossed}, config)
    record = next(r for r in summary["modes"] if r["mode"] == "cross")
    assert record.pop("iterations_from") == "last_end"  # as a file of before then has it
    record["straggler"], record["iteration_p95_over_p50"] = 0.5, 1.5  # of each worker's own steps

    again = realigned(record, 2)
    # each round's second step from its first's last end: worker 0's at 2 s, then worker 1's at 1.5 s
    assert again["iterations"] == [[2.0, 1.0], [1.0, 1.0], [1.0, 1.5], [1.0, 1.0]]
    assert again["straggler"] == pytest.approx((0.5 + 0.0 + 1 / 3 + 0.0) / 4)
    assert again["iteration_mean_s"] == pytest.approx(5.5 / 4)
    assert realigned(again, 2) is again and realigned(summary["modes"][0], 2) is summary["modes"][0]
    text = markdown(summary)
    row = next(line.split(" | ") for line in text.splitlines() if line.startswith("| cross"))
    assert row[7] == f"{again['straggler']:.3f}" and row[6] == f"{again['iteration_p95_over_p50']:.3f}"
    assert "the parts of `cross` were worked out again" in text
    assert "steady_step_s" not in again  # two steps a round: no middle one
    line = next(x for x in glance({"r": summary}).splitlines() if x.startswith("| r |"))
    assert f"| {again['straggler']:.3f} (0.500) |" in line
    # steps that do not add up to the rounds' wall time were timed otherwise: left as measured
    record["throughput_steps_per_s"] *= 1.5
    assert realigned(record, 2) is record
    text = markdown(summary)
    row = next(line.split(" | ") for line in text.splitlines() if line.startswith("| cross"))
    assert row[7] == "0.500" and "the parts of `cross` are each worker's own steps" in text
    assert "worked out again from those times" not in text and "Once the pipeline" not in text


def test_the_step_once_the_pipeline_is_full_leaves_out_a_rounds_first_and_last_steps():
    """Three steps a round across the barrier: 1.6 s (the pipeline filling), 1.0 s, 0.4 s (the
    last run alone on the machine). Once full the step is the middle one's 1.0 s, half the
    baseline's 2 s, where the first and the second (1.3 s) or the second and the last (0.7 s)
    would say otherwise; an old file's record gets it from its raw times."""
    config = dict(CONFIG, workers=2, steps=3)
    crossed = ModeResult("cross", step_times=[1.0] * 6, steps=6, wall_s=3.0)
    crossed.iterations = steps_across([[1.6, 2.6, 3.0], [1.2, 2.4, 2.9]])
    crossed.per_worker, crossed.rounds = {0: [1.0] * 3, 1: [1.0] * 3}, [(6, 3.0)]
    base = ModeResult("baseline", step_times=[2.0] * 6, iterations=[[2.0, 1.8]] * 3, steps=6, wall_s=6.0)
    base.per_worker, base.rounds = {0: [2.0] * 3, 1: [1.8] * 3}, [(6, 6.0)]
    assert crossed.steady_step_s == pytest.approx(1.0) and base.steady_step_s is None
    summary = summarize({"baseline": base, "cross": crossed}, config)
    assert "`cross` 1.000 s (2.000x the baseline's step; sync p95/p50 1.000)" in markdown(summary)
    record = next(r for r in summary["modes"] if r["mode"] == "cross")
    record.pop("steady_step_s")  # as a file of before then has it
    assert realigned(record, 3)["steady_step_s"] == pytest.approx(1.0)


def test_the_steps_once_the_pipeline_is_full_have_their_spread_beside_the_baselines_same_steps():
    """Two rounds of five steps: across the barrier 1.8 s, 1.0 s, 1.0 s, 1.2 s, 0.4 s a round
    (p95/p50 1.8 over them all), 1.2 once its ends are left out; the baseline's middle steps
    2.0 s, 2.0 s and 2.2 s, whose 1.1 is set beside it."""
    config = dict(CONFIG, workers=1, steps=5)
    crossed = ModeResult("cross", step_times=[1.0] * 10, steps=10, wall_s=10.8)
    crossed.iterations = [[t] for t in (1.8, 1.0, 1.0, 1.2, 0.4) * 2]
    crossed.per_worker, crossed.rounds = {0: [1.0] * 10}, [(5, 5.4), (5, 5.4)]
    base = ModeResult("baseline", step_times=[2.0] * 10, steps=10, wall_s=20.4)
    base.iterations = [[t] for t in (2.0, 2.0, 2.0, 2.2, 2.0) * 2]
    base.per_worker, base.rounds = {0: [2.0] * 10}, [(5, 10.2), (5, 10.2)]
    summary = summarize({"baseline": base, "cross": crossed}, config)
    records = {r["mode"]: r for r in summary["modes"]}
    assert records["cross"]["iteration_p95_over_p50"] == pytest.approx(1.8)
    assert records["cross"]["steady_iteration_p95_over_p50"] == pytest.approx(1.2)
    assert records["baseline"]["steady_iteration_p95_over_p50"] == pytest.approx(1.1)
    md = markdown(summary)
    ratio = 2.04 / (3.2 / 3)  # the baseline's step over the crossing's once full
    assert f"`cross` 1.067 s ({ratio:.3f}x the baseline's step; sync p95/p50 1.200)" in md
    assert "The baseline's sync p95/p50 over the same places in its rounds: 1.100." in md
