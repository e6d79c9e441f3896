"""Progress of long work, always on standard error so that standard output stays the
result (`--json` parses): rich's bars on a terminal; where either output is a file or a
pipe (a log, CI), one line per step and per finished run instead, so that a sweep's log
says what it is doing rather than nothing for minutes."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class Bars(Protocol):
    """What long work asks of its progress: rich's Progress, or ProgressLines."""

    def add_task(self, description: str, *, total: float | None = ..., **fields: Any) -> Any: ...

    def update(self, task_id: Any, *, description: str | None = ..., **fields: Any) -> None: ...

    def advance(self, task_id: Any, advance: float = ...) -> None: ...

    def remove_task(self, task_id: Any) -> None: ...

    def __enter__(self) -> Any: ...

    def __exit__(self, *exc: Any) -> Any: ...


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float = 0
    began: float = field(default_factory=time.monotonic)


class ProgressLines:
    """The part of rich's Progress the advisor uses, written as lines: a task's new
    description as it changes, and a counted task's count and time when it is removed."""

    def __init__(self, out: TextIO | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.out, self.clock = out, clock
        self.began = clock()
        self._tasks: dict[int, _Task] = {}

    def __enter__(self) -> ProgressLines:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _say(self, text: str) -> None:
        out = self.out or sys.stderr
        print(f"[{self.clock() - self.began:7.1f} s] {text}", file=out, flush=True)

    def add_task(self, description: str, *, total: float | None = None, **_: Any) -> int:
        task = len(self._tasks)
        self._tasks[task] = _Task(description, total, began=self.clock())
        if total is None:
            self._say(description)
        return task

    def update(self, task_id: int, *, description: str | None = None, **_: Any) -> None:
        t = self._tasks[task_id]
        if description is not None and description != t.description:
            t.description = description
            self._say(description)

    def advance(self, task_id: int, advance: float = 1) -> None:
        self._tasks[task_id].completed += advance

    def remove_task(self, task_id: int) -> None:
        t = self._tasks.pop(task_id)
        if t.total is not None:
            self._say(f"{t.description}: {t.completed:g} of {t.total:g} done in "
                      f"{self.clock() - t.began:.1f} s")


def progress_bars() -> Bars:
    """The progress long work shows on standard error: bars (gone when done) where both
    outputs are a terminal, else lines (where either goes to a log or a pipe)."""
    if not (sys.stdout.isatty() and sys.stderr.isatty()):
        return ProgressLines()
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), console=Console(stderr=True), transient=True)
