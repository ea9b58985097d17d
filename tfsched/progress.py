"""The progress bar of the long commands (``tfsched bench``, ``tfsched demo``)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_bar(console, what: str) -> Iterator[tuple[Callable[[str], None], Callable[[int, int], None]]]:
    """A bar on ``console`` (rich) while the block runs; yields ``(say, done)``: ``say(text)``
    shows what runs now, after ``what``; ``done(k, n)`` fills the bar to k parts of n
    (``run_side_by_side``'s ``progress`` and ``done``). The bar is gone once the block ends.

    Where ``console`` is no terminal (a log file, a pipe, CI), a bar would show nothing until the
    end: each ``say`` is then a line of its own, with the time since the start and the parts done.

    >>> import io
    >>> from rich.console import Console
    >>> log = io.StringIO()
    >>> with progress_bar(Console(file=log, force_terminal=False), "benchmark") as (say, done):
    ...     done(1, 4)
    ...     say("round 1/2: tio")
    >>> log.getvalue().split("] ")[1]
    'benchmark: round 1/2: tio (1/4 done)\\n'
    """
    if not console.is_terminal:
        start, parts = time.monotonic(), ""

        def say(text: str) -> None:
            line = f"[{time.monotonic() - start:7.1f} s] {what}: {text}{parts}"
            console.print(line, markup=False, highlight=False, soft_wrap=True)

        def done(k: int, n: int) -> None:
            nonlocal parts
            parts = f" ({k}/{n} done)"

        yield say, done
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn())
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(what, total=None)
        yield (
            lambda text: bar.update(task, description=f"{what}: {text}"),
            lambda k, n: bar.update(task, completed=k, total=n),
        )
