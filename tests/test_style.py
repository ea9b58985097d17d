"""The house style (STYLE.md): ruff for the Python, .clang-format for the C++ of the op."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PYTHON = ["tfsched", "tests", "benchmarks"]


def run(cmd):
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("check", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_python_follows_ruff(check):
    out = run([sys.executable, "-m", "ruff", *check, *PYTHON])
    assert out.returncode == 0, out.stdout + out.stderr


def test_cpp_follows_clang_format():
    exe = shutil.which("clang-format")
    assert exe, "clang-format is a test dependency: pip install -e '.[test]'"
    sources = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "cc").iterdir() if p.suffix in (".cc", ".h"))
    assert any(s.endswith(".cc") for s in sources) and any(s.endswith(".h") for s in sources)
    out = run([exe, "--dry-run", "-Werror", "--style=file", *sources])
    assert out.returncode == 0, out.stderr[-3000:]
