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
