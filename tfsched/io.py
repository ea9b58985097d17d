"""Files the commands write and read: atomically, and with one clear line when they are bad."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from typing import IO

from tfsched.errors import TfschedError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def as_path(path, what: str) -> str:
    """``path`` as a str: a file's path given in Python must be a str or an ``os.PathLike``
    (pathlib's), not empty. Anything else is one TfschedError line naming ``what``; above all an
    int, which ``open`` and ``os.path.exists`` take for a file descriptor: reading a schedule
    "from" 3 closed the process's descriptor 3 (perhaps one of gRPC's sockets) when it was done.

    >>> import pathlib
    >>> as_path(pathlib.Path("a") / "b.json", "schedule")
    'a/b.json'
    >>> as_path(3, "schedule")
    Traceback (most recent call last):
    tfsched.errors.TfschedError: a schedule file must be a path (a str or os.PathLike), got 3
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        raise TfschedError(f"a {what} file must be a path (a str or os.PathLike), got {path!r}")
    return path


def write_atomic(path: str, write: Callable[[IO], None], *, binary: bool = False) -> None:
    """Write a file so that a failure leaves nothing half-written behind."""
    path = as_path(path, "result")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tfsched-", dir=directory)
    except OSError as e:
        raise TfschedError(f"{path}: cannot write ({e.strerror})") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w") as f:
            write(f)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a result file is for others too
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def check_writable(path: str) -> None:
    """Fail now, with the line ``write_atomic`` would give at the end, if ``path`` cannot be
    written (its directory missing or read-only): a run of minutes must not end in it."""
    path = as_path(path, "result")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tfsched-", dir=directory)
    except OSError as e:
        raise TfschedError(f"{path}: cannot write ({e.strerror})") from None
    os.close(fd)
    os.unlink(tmp)


def check_directory(path: str) -> None:
    """Fail now if files cannot be written into directory ``path`` once it is made (it is a
    file, or its nearest existing parent is not a writable directory); nothing is made here."""
    existing = os.path.abspath(path)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise TfschedError(f"{path}: cannot make a directory there ({existing} is a file)")
    check_writable(os.path.join(existing, "probe"))


def read_json(path: str, what: str, schema: str):
    """Load a ``schema`` JSON document; a missing, truncated or foreign file is a TfschedError."""
    path = as_path(path, what)
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise TfschedError(f"{path}: no such {what} file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise TfschedError(f"{path}: not a {what} file (truncated or not JSON: {e})") from None
    if not isinstance(data, dict) or data.get("schema") != schema:
        found = data.get("schema") if isinstance(data, dict) else type(data).__name__
        raise TfschedError(f"{path}: not a {schema} file (schema: {found!r})")
    return data
