"""benchmarks/what_if_errors.py: the simulator's error now and with one what-if, over re-predicted runs."""

import json
from pathlib import Path

import pytest

from tests.helpers import benchmark_script


@pytest.fixture
def what_if_errors(tmp_path, monkeypatch):
    module = benchmark_script("what_if_errors")
    monkeypatch.setattr(module, "RESULTS", str(tmp_path))
    return module


def _repredicted(where: Path, name: str, modes: list[tuple[str, float, float, float, float]]) -> None:
    """``results/<name>-repredicted.json`` with a row per (mode, measured, error now, error with
    machine_cpu, floor now), as ``benchmarks/repredict.py`` writes it."""
    rows = [
        {"mode": m, "measured_s": s, "error_now": now, "error_machine_cpu": then, "floor_now_s": floor}
        for m, s, now, then, floor in modes
    ]
    (where / f"{name}-repredicted.json").write_text(json.dumps({"config": {}, "modes": rows}))


def test_each_mode_beside_its_what_if_and_each_runs_fastest_mode_against_its_floor(what_if_errors, tmp_path):
    _repredicted(tmp_path, "a", [("baseline", 1.0, -0.04, -0.22, 0.55), ("tao", 0.8, 0.02, -0.17, 0.55)])
    _repredicted(tmp_path, "b", [("baseline", 11.0, 0.05, 0.03, 9.7), ("tao+pc", 10.0, 0.01, -0.01, 9.7)])
    rows, runs = what_if_errors.pooled(["a", "b"], "machine_cpu")
    assert [(r["run"], r["mode"]) for r in rows] == [
        ("a", "baseline"),
        ("a", "tao"),
        ("b", "baseline"),
        ("b", "tao+pc"),
    ]
    assert [r["error_machine_cpu"] for r in rows] == [-0.22, -0.17, 0.03, -0.01]
    # the fastest measured mode of each run, over the floor no order beats
    assert [(r["fastest"], r["over_floor"]) for r in runs] == [
        ("tao", pytest.approx(0.8 / 0.55)),
        ("tao+pc", pytest.approx(10.0 / 9.7)),
    ]


def test_a_run_without_the_what_if_or_not_re_predicted_is_one_error_line(what_if_errors, tmp_path):
    _repredicted(tmp_path, "a", [("baseline", 1.0, -0.04, -0.22, 0.55)])
    with pytest.raises(SystemExit, match=r"a-repredicted.json: no what-if 'shared_cores'"):
        what_if_errors.pooled(["a"], "shared_cores")
    (tmp_path / "c-repredicted.json").write_text("{not json")
    with pytest.raises(SystemExit, match=r"c-repredicted.json: not a re-predicted run"):
        what_if_errors.pooled(["c"], "machine_cpu")
    with pytest.raises(SystemExit, match=r"missing-repredicted.json: not a re-predicted run"):
        what_if_errors.pooled(["missing"], "machine_cpu")
