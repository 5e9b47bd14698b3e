"""Progress bars on stderr for work that takes more than a second: steps done, elapsed, ETA.

A bar appears only on a terminal, never under `--quiet`, and only once the work has lasted
`RLSIM_PROGRESS_DELAY_S` seconds (default 1): short commands print nothing extra and piped output
stays clean. One bar serves a whole command; each simulation (or item) restarts its task.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from rlsim.tools.cli.common import err

DEFAULT_DELAY_S = 1.0


def bar_columns(field: str) -> list:
    """rlsim's progress-bar layout; `field` names the task field shown after the count (unit, failures)."""
    return [
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn(f"{{task.fields[{field}]}}"),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
    ]


def progress_delay_s() -> float:
    """Seconds before a bar shows (RLSIM_PROGRESS_DELAY_S; tests set 0)."""
    try:
        return max(0.0, float(os.environ.get("RLSIM_PROGRESS_DELAY_S", DEFAULT_DELAY_S)))
    except ValueError:
        return DEFAULT_DELAY_S


def wants_progress(quiet: bool, console: Console | None = None) -> bool:
    return not quiet and (console or err).is_terminal


class LazyBar:
    """A transient rich bar that starts after a delay (a timer thread, so a long first step still shows one).

    `begin(label, total, unit)` starts a new task (a new simulation, a new item); `update(done, total)`
    is the `simulate(progress=...)` callback; `advance()` counts one item.
    """

    def __init__(self, enabled: bool = True, console: Console | None = None, delay_s: float | None = None):
        self.enabled = enabled
        self.console = console or err
        self.delay_s = progress_delay_s() if delay_s is None else delay_s
        self._lock = threading.Lock()
        self._progress: Progress | None = None
        self._task = None
        self._label, self._unit, self._done, self._total = "", "steps", 0, None
        self._closed = False
        self._timer = threading.Timer(self.delay_s, self._start)
        self._timer.daemon = True

    def __enter__(self) -> LazyBar:
        if self.enabled:
            self._timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        with self._lock:
            if self._closed or self._progress is not None:
                return
            self._progress = Progress(*bar_columns("unit"), console=self.console, transient=True)
            self._progress.start()
            self._new_task()

    def _new_task(self) -> None:
        if self._task is not None:
            self._progress.remove_task(self._task)
        self._task = self._progress.add_task(self._label, total=self._total, completed=self._done, unit=self._unit)

    def begin(self, label: str, total: int | None = None, unit: str = "steps") -> None:
        with self._lock:
            self._label, self._unit, self._done, self._total = label, unit, 0, total
            if self._progress is not None:
                self._new_task()

    def update(self, done: int, total: int | None = None) -> None:
        with self._lock:
            self._done = done
            self._total = total if total is not None else self._total
            if self._progress is not None:
                self._progress.update(self._task, completed=done, total=self._total)

    __call__ = update

    def advance(self) -> None:
        self.update(self._done + 1)

    @property
    def shown(self) -> bool:
        return self._progress is not None

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            self._closed = True
            if self._progress is not None:
                self._progress.stop()


def simulate_with_progress(scenario, seed: int | None = None, bar: LazyBar | None = None, label: str | None = None):
    """`simulate()` reporting RL steps to `bar` (no bar: no progress). A run that stops making progress
    ends the command with its one-line reason (exit 1), never a traceback."""
    from rlsim.sim.api import ScenarioError, SimulationStalled, simulate
    from rlsim.tools.cli.common import fail

    try:
        if bar is None:
            return simulate(scenario, seed=seed)
        total = getattr(scenario, "steps", 0) + getattr(scenario, "warmup_steps", 0)  # known up front: an ETA
        bar.begin(label or f"simulating {scenario.name}", total=total or None, unit="steps")
        return simulate(scenario, seed=seed, progress=bar.update)
    except SimulationStalled as exc:
        if bar is not None:
            bar.close()  # the bar off the terminal before the reason is printed
        fail([f"{scenario.name}: {exc}"], code=1)
    except ScenarioError as exc:  # bad input found only by running it (a result that would not be finite)
        if bar is not None:
            bar.close()
        fail(exc.lines())


def item_bar(quiet: bool) -> LazyBar:
    """A bar for commands that count items (reproductions, fits, plan points): `begin(label, total, unit)`."""
    return LazyBar(enabled=wants_progress(quiet))


ProgressCallback = Callable[[int, int], None]
