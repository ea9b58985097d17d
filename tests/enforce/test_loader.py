import os

import pytest

from tfsched.errors import TfschedError

pytestmark = pytest.mark.tf


def test_load_failure_names_both_versions(tmp_path, monkeypatch):
    """A library that does not load says which TensorFlow it was built for and which one is here."""
    import tensorflow as tf

    from tfsched.enforce import _loader, build

    bogus = tmp_path / "libtfsched-tf2.99.0-0000000000000000.so"
    bogus.write_bytes(b"not a shared library")
    monkeypatch.setattr(build, "build", lambda force=False: str(bogus))
    monkeypatch.setattr(_loader, "_ops", None)
    with pytest.raises(TfschedError) as e:
        _loader.load_ops()
    msg = str(e.value)
    assert "built for TensorFlow 2.99.0" in msg and f"found TensorFlow {tf.__version__}" in msg
    assert "python -m tfsched.enforce.build --force" in msg


def test_library_is_keyed_by_tensorflow_version_and_sources(monkeypatch, tmp_path):
    from tfsched.enforce import build

    monkeypatch.setenv("TFSCHED_CACHE_DIR", str(tmp_path))
    path, version = build.library_path()
    assert path.startswith(str(tmp_path)) and f"-tf{version}-" in path


def test_a_checkout_on_the_path_builds_its_own_sources(tmp_path):
    """A checkout run with PYTHONPATH (say, a worktree of another commit) hashes and builds its
    own cc/, not the cc/ an editable install elsewhere maps tfsched._cc to."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    shutil.copytree(root / "tfsched", tmp_path / "tfsched", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(root / "cc", tmp_path / "cc")
    with open(tmp_path / "cc" / "gate.cc", "a") as f:
        f.write("\n// another commit's sources\n")
    code = "from tfsched.enforce import build; print(build.source_dir()); print(build.library_path()[0])"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "TFSCHED_CACHE_DIR": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    source, library = out.stdout.split()[-2:]
    assert source == str(tmp_path / "cc")
    mine = subprocess.run(
        [sys.executable, "-c", code], env={**env, "PYTHONPATH": str(root)}, capture_output=True, text=True
    )
    assert mine.returncode == 0, mine.stderr[-2000:]
    assert library != mine.stdout.split()[-1], "the changed sources must get their own library"


def test_a_build_without_g_plus_plus_is_one_error_line(tmp_path, monkeypatch):
    """No compiler on PATH: one TfschedError saying what to install, not a FileNotFoundError."""
    from tfsched.enforce import build

    monkeypatch.setenv("TFSCHED_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty directory: no g++
    with pytest.raises(TfschedError) as e:
        build.build()
    assert "needs g++, and there is none on PATH" in str(e.value)
    assert "apt-get install g++" in str(e.value)
    assert not (tmp_path / "cache").exists(), "nothing made before the build could start"


def test_a_cache_that_cannot_be_written_is_one_error_line(tmp_path, monkeypatch):
    """A cache directory that cannot be made (here under a file, which root cannot get past
    either) is named, with the variable that moves it."""
    from tfsched.enforce import build

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("TFSCHED_CACHE_DIR", str(blocker / "cache"))
    with pytest.raises(TfschedError) as e:
        build.build()
    msg = str(e.value)
    assert msg.startswith(f"{blocker / 'cache'}: cannot write the tfsched op's build cache"), msg
    assert "TFSCHED_CACHE_DIR" in msg


def _compilers_of(path) -> list[str]:
    """Command lines of the processes that compile a source under `path`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(path) in cmd and ".cc" in cmd:
            found.append(cmd)
    return found


def test_a_unit_that_fails_ends_the_compiles_still_running(tmp_path, monkeypatch):
    """The first unit fails at once while the others compile (seconds each): the error names
    the unit and its first error, and no compiler of the others is left running after it, nor
    a temporary file of theirs (g++'s ``cc*.s``, in ``TMPDIR``) after them."""
    import shutil
    import tempfile
    from pathlib import Path

    from tfsched.enforce import build

    system_tmp = tmp_path / "tmp"
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))

    src = tmp_path / "cc"
    shutil.copytree(Path(__file__).resolve().parents[2] / "cc", src)
    first = build.SOURCES[0]
    (src / first).write_text("#error broken on purpose\n")
    monkeypatch.setattr(build, "source_dir", lambda: str(src))
    monkeypatch.setenv("TFSCHED_CACHE_DIR", str(tmp_path / "cache"))
    with pytest.raises(TfschedError) as e:
        build.build()
    msg = str(e.value)
    assert first in msg and "broken on purpose" in msg, msg
    assert _compilers_of(src) == []
    assert not list((tmp_path / "cache").glob("*.so")), "no library from a failed build"
    assert not list(system_tmp.iterdir()), "the build's temporary files are all removed"


def test_tfsched_bench_without_g_plus_plus_is_one_error_line(tmp_path, monkeypatch):
    """The CLI at a build that cannot start: one Error line, exit 1, no traceback, no results."""
    from tests.helpers import cli

    (tmp_path / "empty").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("TFSCHED_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "bench.json"
    run = cli(
        *("bench", "--model", "seq32", "--loopback", "--workers", "1", "--batch-size", "4"),
        *("--steps", "1", "--rounds", "1", "--modes", "baseline,tio", "-o", str(out)),
        timeout=300,
    )
    said = run.stdout + run.stderr
    assert run.returncode == 1, said[-3000:]
    errors = [line for line in said.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "needs g++, and there is none on PATH" in errors[0], said[-3000:]
    assert "Traceback" not in said
    assert not list(tmp_path.glob("bench.*")), "no results file written half-way"
