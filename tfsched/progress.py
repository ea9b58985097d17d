"""The progress bar of the long commands (``tfsched bench``, ``tfsched demo``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def progress_bar(console, what: str) -> Iterator[tuple[Callable[[str], None], Callable[[int, int], None]]]:
    """A bar on ``console`` (rich) while the block runs; yields ``(say, done)``: ``say(text)``
    shows what runs now, ``done(k, n)`` fills the bar to k parts of n (``run_side_by_side``'s
    ``progress`` and ``done``). The bar is gone once the block ends."""
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
            lambda text: bar.update(task, description=text),
            lambda k, n: bar.update(task, completed=k, total=n),
        )
