"""What a step shows while it is built: its phase, a bar over the rows of a long data pass, and
one line at the end with the seconds per phase.

Building a step can take seconds (compiling, the reference fit's passes over all N rows) before
PyMC's own sampling bar appears. :class:`BuildProgress` draws a transient display with rich,
the library of PyMC's progress bars, on standard error, and leaves one summary line. The build
sequence (:mod:`pymc_subsample.model.setup`) names its phases; the data passes
(:func:`~pymc_subsample.model.cluster.map_row_blocks`) advance a bar over the rows through
:func:`rows_advance`, without a progress argument threaded through every layer, as PyMC's
model context does. ``progressbar=False`` on the step shows nothing.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

__all__ = ["BuildProgress", "build_note", "build_phase", "rows_advance"]

#: A pass's bar appears once the pass has run this long (shorter ones would only flicker).
SHOW_PASS_AFTER_S = 1.0

_current: ContextVar[BuildProgress | None] = ContextVar("build_progress", default=None)


class BuildProgress:
    """The display of one step's build (a context manager; shows nothing when not ``enabled``).

    Parameters
    ----------
    title : str
        The step's name, e.g. ``"MHSS"``.
    enabled : bool
        ``False``: no display and no summary line.
    file : file, optional
        Where to draw (standard error by default, as PyMC's bars).
    """

    def __init__(self, title: str, enabled: bool = True, file=None) -> None:
        self.title = title
        self.enabled = enabled
        self.console = Console(file=sys.stderr if file is None else file)
        self.seconds: dict[str, float] = {}
        self.notes: dict[str, str] = {}
        self._progress: Progress | None = None
        self._phase_task: TaskID | None = None
        self._token = None

    def __enter__(self) -> BuildProgress:
        self._start = time.perf_counter()
        if self.enabled:
            self._progress = Progress(
                SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                MofNCompleteColumn(), TimeElapsedColumn(),
                console=self.console, transient=True,
            )
            self._progress.start()
            self._phase_task = self._progress.add_task(f"{self.title}: building", total=None)
        self._token = _current.set(self)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _current.reset(self._token)
        if self._progress is None:
            return
        self._progress.stop()
        if exc_type is None:
            self.console.print(self.summary(), highlight=False, soft_wrap=True)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Show ``name`` while the block runs and record its seconds."""
        if self._progress is not None:
            self._progress.update(self._phase_task, description=f"{self.title}: {name}")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def note(self, name: str, text: str) -> None:
        """A remark printed beside a phase's seconds in the summary (e.g. passes over N rows)."""
        self.notes[name] = text

    def rows(self, total: int) -> Callable[[int], None]:
        """``advance(n_rows)`` for one pass over ``total`` rows: a bar shown once the pass has
        run :data:`SHOW_PASS_AFTER_S` seconds, removed when it completes."""
        progress = self._progress
        if progress is None:
            return _ignore
        task = progress.add_task("  rows", total=total, visible=False)
        t0, done = time.perf_counter(), [0]

        def advance(n: int) -> None:
            done[0] += n
            if done[0] >= total:
                progress.remove_task(task)
                return
            progress.advance(task, n)
            if time.perf_counter() - t0 > SHOW_PASS_AFTER_S:
                progress.update(task, visible=True)

        return advance

    def summary(self) -> str:
        """One line: the whole time and the seconds of each phase that took at least 0.05 s."""
        total = time.perf_counter() - self._start
        parts = [f"{name} {s:.1f} s" + (f" ({self.notes[name]})" if name in self.notes else "")
                 for name, s in self.seconds.items() if s >= 0.05]
        return f"{self.title} built in {total:.1f} s" + (f": {', '.join(parts)}" if parts else "")


def _ignore(n: int) -> None:
    return None


def rows_advance(total: int) -> Callable[[int], None]:
    """The current build's ``advance`` for a pass over ``total`` rows (a no-op outside a build
    or with the display off)."""
    progress = _current.get()
    return _ignore if progress is None else progress.rows(total)


@contextmanager
def build_phase(name: str) -> Iterator[None]:
    """The current build's :meth:`BuildProgress.phase` (nothing outside a build)."""
    progress = _current.get()
    if progress is None:
        yield
        return
    with progress.phase(name):
        yield


def build_note(name: str, text: str) -> None:
    """The current build's :meth:`BuildProgress.note` (nothing outside a build)."""
    progress = _current.get()
    if progress is not None:
        progress.note(name, text)
