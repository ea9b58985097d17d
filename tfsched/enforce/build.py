"""Building the gate op and the Grappler pass against the installed TensorFlow.

The shared library is built on first use, not by ``pip install``: pip builds in an isolated
environment that would have to download TensorFlow a second time to compile against it, and a
library built at install time goes stale when TensorFlow is upgraded. Instead the library is
cached per (TensorFlow version, compile flags, source hash) under ``~/.cache/tfsched``
(``TFSCHED_CACHE_DIR`` overrides), so a new TensorFlow or new sources get a new build
(about 15 s on two cores) and every later load is instant. A file lock makes the processes of a
cluster that start together build it once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from importlib import resources

from tfsched.errors import TfschedError

SOURCES = ("crossing.cc", "gate.cc", "gate_ops.cc", "scheduler.cc", "transfers.cc")
HEADERS = ("gate.h", "scheduler.h")
BUILD_TIMEOUT_S = 900  # a compile, or another process's build we wait for, never takes longer
# NDEBUG as TensorFlow's own build: classes of its headers change layout without it (EdgeSet, in
# every Node), and the POST_PARTITIONING pass (transfers.cc) walking a Graph would crash.
EXTRA_FLAGS = ["-O2", "-DNDEBUG", "-fPIC", "-Wno-deprecated-declarations", "-Wno-interference-size"]


def source_dir() -> str:
    """The C++ sources: ``cc/`` of the checkout, installed as the package ``tfsched._cc``.

    A checkout used without installing it (``PYTHONPATH=checkout``, e.g. a git worktree of
    another commit) builds its own ``cc/``: an editable install elsewhere maps ``tfsched._cc``
    to that install's ``cc/``, which would pair this checkout's Python with other C++.
    """
    checkout = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "cc"
    )
    if all(os.path.isfile(os.path.join(checkout, name)) for name in SOURCES + HEADERS):
        return checkout
    return str(resources.files("tfsched._cc"))


def cache_dir() -> str:
    return os.environ.get("TFSCHED_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tfsched")


def _flags() -> tuple[list[str], list[str], str]:
    from tfsched.graph._tf import import_tensorflow

    tf = import_tensorflow()
    return list(tf.sysconfig.get_compile_flags()), list(tf.sysconfig.get_link_flags()), tf.__version__


def library_path() -> tuple[str, str]:
    """(path of the library for this TensorFlow and these sources, TensorFlow version)."""
    cflags, lflags, version = _flags()
    h = hashlib.sha256()
    for name in SOURCES + HEADERS:
        with open(os.path.join(source_dir(), name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    h.update(" ".join(cflags + lflags + EXTRA_FLAGS).encode())
    return os.path.join(cache_dir(), f"libtfsched-tf{version}-{h.hexdigest()[:16]}.so"), version


def build_id(path: str) -> str:
    """The build a library's path names, ``tf<TensorFlow version>-<hash>``: what its
    ``TfschedBuild`` op answers (compiled in as ``TFSCHED_BUILD_ID``).

    >>> build_id("/root/.cache/tfsched/libtfsched-tf2.21.0-2b7ece3aae355f6d.so")
    'tf2.21.0-2b7ece3aae355f6d'
    """
    return os.path.basename(path).removeprefix("libtfsched-").removesuffix(".so")


def current_build_id() -> str:
    """The build this TensorFlow and these sources make (``build_id``), which every task started
    from this install loads: what a results file records of the code that made it."""
    return build_id(library_path()[0])


def build(force: bool = False) -> str:
    """Build the library if this TensorFlow and these sources have none yet; returns its path.

    What stops a build is one `TfschedError` line: no ``g++`` on PATH, a cache directory it
    cannot write, a compile or link that fails or outlasts ``BUILD_TIMEOUT_S``. The compiles
    still running when one fails are ended, not left to write into a removed directory, and
    ``g++``'s own temporary files (``TMPDIR``) go to the build's directory, removed with it: a
    compile killed half-way leaves no ``/tmp/cc*.s``.
    """
    path, version = library_path()
    if os.path.exists(path) and not force:
        return path
    compiler = shutil.which("g++")
    if compiler is None:
        raise TfschedError(
            f"building the tfsched op for TensorFlow {version} needs g++, and there is none on "
            "PATH: install it (Debian, Ubuntu: apt-get install g++)"
        )
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock = open(path + ".lock", "w")  # closed by the with below
    except OSError as e:
        raise TfschedError(
            f"{os.path.dirname(path)}: cannot write the tfsched op's build cache ({e.strerror}); "
            "set TFSCHED_CACHE_DIR to a directory that can be written"
        ) from None
    with lock:
        _lock(lock, path)  # another process of the cluster may be building it
        if os.path.exists(path) and not force:
            return path
        cflags, lflags, _ = _flags()
        src = source_dir()
        with tempfile.TemporaryDirectory(prefix="tfsched-build-") as tmp:
            objects = [os.path.join(tmp, name + ".o") for name in SOURCES]
            procs: list[tuple[list[str], subprocess.Popen]] = []
            try:
                for name, obj in zip(SOURCES, objects, strict=True):  # the units in parallel
                    cmd = [compiler, "-c", os.path.join(src, name), "-o", obj, "-I", src]
                    cmd += cflags + EXTRA_FLAGS + [f'-DTFSCHED_BUILD_ID="{build_id(path)}"']
                    procs.append((cmd, _start(cmd, tmp)))
                for cmd, p in procs:
                    out = _finish(p, f"compiling {os.path.basename(cmd[2])}")
                    if p.returncode != 0:
                        raise TfschedError(
                            f"building the tfsched op for TensorFlow {version} failed "
                            f"(g++ -c {os.path.basename(cmd[2])}): " + _first_error(out)
                        )
            finally:
                for _, p in procs:  # a failed unit ends the others, before tmp is removed
                    _end(p)
            tmp_lib = os.path.join(tmp, "lib.so")
            p = _start([compiler, "-shared", *objects, "-o", tmp_lib, *lflags], tmp)
            try:
                out = _finish(p, "linking")
            finally:
                _end(p)  # e.g. at a KeyboardInterrupt: its own session does not get the SIGINT
            if p.returncode != 0:
                raise TfschedError(f"linking the tfsched op failed: {_first_error(out)}")
            os.replace(tmp_lib, path)  # atomic: no process ever loads a half-written library
    return path


def _start(cmd: list[str], tmp: str) -> subprocess.Popen:
    """g++ in a process group of its own, so that ending it ends its compiler proper (cc1plus),
    with its temporary files (the assembly it hands to ``as``) in ``tmp``."""
    try:
        return subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env=dict(os.environ, TMPDIR=tmp),
        )
    except OSError as e:  # e.g. a process limit met
        raise TfschedError(f"cannot start g++ to build the tfsched op: {e.strerror}") from None


def _finish(p: subprocess.Popen, what: str) -> str:
    """Its output, once it ended; killed, and an error, past BUILD_TIMEOUT_S."""
    try:
        out, _ = p.communicate(timeout=BUILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _end(p)
        raise TfschedError(f"building the tfsched op timed out after {BUILD_TIMEOUT_S} s ({what})") from None
    return out


def _end(p: subprocess.Popen) -> None:
    """Kills `p`'s process group if `p` still runs; reaps `p` and closes its pipe."""
    if p.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
    if p.stdout is not None and not p.stdout.closed:  # not read by _finish yet
        p.communicate()


def _lock(lock, path: str) -> None:
    """Take the build lock, waiting at most BUILD_TIMEOUT_S for a build in another process."""
    deadline = time.monotonic() + BUILD_TIMEOUT_S
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise TfschedError(
                    f"{path}.lock: another process has been building the op for too long"
                ) from None
            time.sleep(0.5)


def _first_error(output: str) -> str:
    for line in output.splitlines():
        if "error" in line:
            return line.strip()[:300]
    return output.strip().splitlines()[-1][:300] if output.strip() else "no output"


if __name__ == "__main__":  # python -m tfsched.enforce.build [--force]
    try:
        print(build(force="--force" in sys.argv))
    except TfschedError as e:
        sys.exit(f"Error: {e}")
