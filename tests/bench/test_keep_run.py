"""benchmarks/keep_run.py and the kept-run argument of the re-prediction scripts (_results.run_dir)."""

import argparse
import io
import json
import tarfile

import pytest

from tests.helpers import benchmark_script


def _run(where, names=("bench.json", "baseline.trace.json", "baseline.alone.trace.json")):
    where.mkdir()
    for n in names:
        (where / n).write_text(json.dumps({"name": n}))
    return where


def test_a_run_is_packed_with_what_a_re_prediction_reads_and_read_back_from_the_archive(
    tmp_path, monkeypatch
):
    keep = benchmark_script("keep_run")
    monkeypatch.setattr(keep, "RUNS", str(tmp_path / "runs"))
    kept = [
        "bench.json",
        "baseline.trace.json",
        "baseline.alone.trace.json",
        "baseline@held.trace.json",
        "order.alone.trace.json",
    ]
    # every other worker's and every other mode's traced steps stay behind
    run = _run(tmp_path / "run", kept + ["baseline.worker-1.trace.json", "tio.trace.json", "bench.md"])
    keep.main([str(run), "--name", "r"])
    out = tmp_path / "runs" / "r.tar.xz"
    with tarfile.open(out) as archive:
        assert sorted(archive.getnames()) == sorted(kept)
    assert oct(out.stat().st_mode & 0o777) == oct(0o644)
    # the scripts' run argument takes the archive, unpacked into a directory of its own
    where = keep.run_dir(str(out))
    assert benchmark_script("floor").UNPACKED[where] == str(out)  # what floor.py's rows name
    assert json.loads(open(f"{where}/baseline@held.trace.json").read()) == {
        "name": "baseline@held.trace.json"
    }
    assert keep.run_dir(str(run)) == str(run)  # a directory as it is


def test_what_is_not_a_kept_run_is_one_error_and_nothing_is_written(tmp_path, monkeypatch):
    keep = benchmark_script("keep_run")
    monkeypatch.setattr(keep, "RUNS", str(tmp_path / "runs"))
    with pytest.raises(argparse.ArgumentTypeError, match="no such directory or packed run"):
        keep.run_dir(str(tmp_path / "missing"))
    (tmp_path / "notes.txt").write_text("not an archive")
    with pytest.raises(argparse.ArgumentTypeError, match="notes.txt: not a packed bench run"):
        keep.run_dir(str(tmp_path / "notes.txt"))
    with pytest.raises(argparse.ArgumentTypeError, match="no bench.json in it"):
        keep.run_dir(str(_run(tmp_path / "empty", ())))
    # an archive whose member would land outside its directory is refused
    evil = tmp_path / "evil.tar.xz"
    with tarfile.open(evil, "w:xz") as archive:
        info = tarfile.TarInfo("../outside.json")
        info.size = 2
        archive.addfile(info, io.BytesIO(b"{}"))
    with pytest.raises(argparse.ArgumentTypeError, match="evil.tar.xz: not a packed bench run"):
        keep.run_dir(str(evil))
    assert not (tmp_path / "outside.json").exists()
    # a run without the baseline's traced steps (no --traces) is not packed
    with pytest.raises(SystemExit, match="no baseline's traced steps"):
        keep.main([str(_run(tmp_path / "bare", ("bench.json",))), "--name", "bare"])
    assert not (tmp_path / "runs").exists() or list((tmp_path / "runs").iterdir()) == []


def test_a_tf2_run_is_packed_with_each_placements_solo_round_and_step_function(tmp_path, monkeypatch):
    """What ``repredict_tf2.py`` reads of a ``--api tf2`` run: the baselines' traced rounds, and
    per placement worker 0's solo round and the step function it ran."""
    keep = benchmark_script("keep_run")
    monkeypatch.setattr(keep, "RUNS", str(tmp_path / "runs"))
    run = tmp_path / "run"
    kept = [
        "bench.json",
        "baseline.trace.json",
        "baseline@min-size.trace.json",
        "solo-round.trace.json",
        "graphs/__inference_step_12.worker_0.pb",
        "at-min-size/solo-round.trace.json",
        "at-min-size/graphs/__inference_step_40.worker_0.pb",
    ]
    left = ["tio.trace.json", "tao.schedule.json", "graphs/__inference_whole_7.worker_0.pb"]
    left += ["graphs/__inference_step_12.worker_1.pb", "at-min-size/tao.schedule.json"]
    for n in kept + left:
        (run / n).parent.mkdir(parents=True, exist_ok=True)
        (run / n).write_text(json.dumps({"name": n}))
    (run / "bench.json").write_text(json.dumps({"config": {"api": "tf2"}, "modes": []}))
    keep.main([str(run), "--name", "tf2"])
    with tarfile.open(tmp_path / "runs" / "tf2.tar.xz") as archive:
        assert sorted(m.name for m in archive.getmembers() if m.isfile()) == sorted(kept)
    where = keep.run_dir(str(tmp_path / "runs" / "tf2.tar.xz"))
    graph = open(f"{where}/at-min-size/graphs/__inference_step_40.worker_0.pb").read()
    assert json.loads(graph) == {"name": "at-min-size/graphs/__inference_step_40.worker_0.pb"}
    # one without worker 0's solo round (its graph) cannot be predicted again: not packed
    (run / "solo-round.trace.json").unlink()
    with pytest.raises(SystemExit, match="no solo round of worker 0 with its step function's graph"):
        keep.main([str(run), "--name", "tf2-bare"])
    assert not (tmp_path / "runs" / "tf2-bare.tar.xz").exists()
