"""Running sweep points: a pure `run_point`, three backends (serial, local processes, Ray), `run_sweep`.

`run_point` is a module-level function of one picklable `PointTask` (the scenario mapping, the
overrides, the seed): whichever process, machine or backend runs it, the summary is the same, bit
for bit. It never raises for a bad point: the error becomes part of the record, so one infeasible
point cannot stop a sweep. Only the driver writes to the store, so workers need no shared disk.
"""

from __future__ import annotations

import gc
import importlib.util
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import pandas as pd

from rlsim.sim.api import ScenarioError
from rlsim.tools.sweep.grid import SweepError, SweepPlan
from rlsim.tools.sweep.store import ResultStore, pid_alive

BACKENDS = ("serial", "local", "ray")
PointFn = Callable[["PointTask"], dict]


class SweepInterrupted(RuntimeError):
    """The sweep stopped before its end (a worker process died); the store is consistent, re-run to finish."""


@dataclass(frozen=True)
class PointTask:
    """Everything a worker needs for one point; small and picklable (plain data, no Scenario object)."""

    index: int
    point_id: str
    scenario: dict
    source: str
    base_dir: str
    overrides: tuple[str, ...]
    seed: int


def flatten_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """`{"idle_fraction_by_pool": {"gen": 0.1}}` -> `{"idle_fraction_by_pool.gen": 0.1}`; plain numbers."""
    flat: dict[str, Any] = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            flat.update({f"{key}.{sub}": _plain(v) for sub, v in value.items()})
        else:
            flat[key] = _plain(value)
    return flat


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def run_point(task: PointTask) -> dict:
    """Validate and simulate one point; return its record (summary or error, steps, overrides, seed)."""
    from rlsim.sim.api import parse_scenario, simulate

    start = time.perf_counter()
    record: dict[str, Any] = {
        "point_id": task.point_id,
        "index": task.index,
        "seed": task.seed,
        "overrides": list(task.overrides),
        "summary": None,
        "error": None,
    }
    try:
        scenario = parse_scenario(task.scenario, task.source, task.overrides, Path(task.base_dir))
        result = simulate(scenario, seed=task.seed)
        record["summary"] = flatten_summary(result.summary)
        record["steps"] = result.steps.to_dict("list")  # small: one row per RL step, columnar
        record["simulation_mode"] = result.meta.get("simulation_mode", "exact")  # aggregate ran, or exact
    except ScenarioError as exc:
        record["error"] = "; ".join(exc.lines())
    except Exception as exc:  # a bug or an impossible configuration found while simulating
        record["error"] = f"{type(exc).__name__}: {exc}"
        record["traceback"] = traceback.format_exc()
    record.update(wall_s=time.perf_counter() - start, pid=os.getpid(), host=socket.gethostname())
    return record


def error_record(task: PointTask, message: str) -> dict:
    """The record of a point whose worker failed (rather than the point's own code)."""
    return {
        "point_id": task.point_id,
        "index": task.index,
        "seed": task.seed,
        "overrides": list(task.overrides),
        "summary": None,
        "error": message,
    }


# ---------------------------------------------------------------- backends


class Backend(Protocol):
    def __enter__(self) -> Backend: ...
    def __exit__(self, *exc: object) -> None: ...
    def run(self, fn: PointFn, tasks: Iterable[PointTask]) -> Iterator[tuple[PointTask, dict]]: ...


class _FrozenHeap:
    """gc.freeze for a while: collections skip the long-lived objects (modules, the plan) made before.

    Serially, that is ~10% less time per small point; before a fork, workers' collections then do
    not touch (and copy) the parent's pages. Leaves a freeze made by someone else alone.
    """

    def __enter__(self) -> None:
        self._mine = gc.get_freeze_count() == 0
        if self._mine:
            gc.freeze()

    def __exit__(self, *exc: object) -> None:
        if self._mine:
            gc.unfreeze()


class SerialBackend:
    """In this process, in order: for debugging and for measuring the others."""

    workers = 1

    def __enter__(self) -> SerialBackend:
        self._frozen = _FrozenHeap()
        self._frozen.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._frozen.__exit__()

    def run(self, fn: PointFn, tasks: Iterable[PointTask]) -> Iterator[tuple[PointTask, dict]]:
        for task in tasks:
            try:
                record = fn(task)
            except Exception as exc:  # as a pool reports a raising point_fn: an error row, not a stop
                record = error_record(task, f"{type(exc).__name__}: {exc}")
            yield task, record


DRIVER_POLL_S = 0.5  # how often a worker checks that its driver still lives


def _worker_init(driver_pid: int) -> None:
    """Workers leave Ctrl-C to the driver, which stops them itself (no traceback per worker), and exit
    when the driver dies without stopping them (kill -9, an OOM kill): no orphan keeps computing."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()  # the driver, or the forkserver (which exits with the driver)
    watch = threading.Thread(target=_exit_with_driver, args=(driver_pid, parent), daemon=True, name="driver-watch")
    watch.start()


def _exit_with_driver(driver_pid: int, parent: int) -> None:
    while True:
        time.sleep(DRIVER_POLL_S)
        if os.getppid() != parent or not pid_alive(driver_pid):
            os._exit(1)  # no cleanup to do: only the driver writes to the store


def _mp_context():
    """fork when this process has no other thread (fast: rlsim is already imported), else forkserver.

    Forking a process with threads (Ray's, a progress bar's) can copy a held lock into the child.
    """
    import multiprocessing as mp

    methods = mp.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return mp.get_context("fork")
    if "forkserver" in methods:
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["rlsim.tools.sweep.runner", "rlsim.sim.simulate", "rlsim.sim.scenario.loader"])
        return ctx
    return mp.get_context("spawn")


class LocalBackend:
    """A process pool on this machine; a few tasks queued per worker so Ctrl-C cancels quickly."""

    def __init__(self, workers: int | None = None):
        self.workers = max(1, workers or os.cpu_count() or 1)
        self._pool: ProcessPoolExecutor | None = None

    def __enter__(self) -> LocalBackend:
        # Start every worker now, before the caller starts threads (a progress bar): see _mp_context.
        with _FrozenHeap():
            ctx = _mp_context()
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(),)
            )
            for f in [self._pool.submit(os.getpid) for _ in range(self.workers)]:
                f.result()
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        if exc_type is None:
            pool.shutdown(wait=True)
            return
        # Interrupted: drop the queue and stop the running points now rather than wait for them.
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            if proc.is_alive():
                proc.kill()
        pool.shutdown(wait=True, cancel_futures=True)

    def run(self, fn: PointFn, tasks: Iterable[PointTask]) -> Iterator[tuple[PointTask, dict]]:
        assert self._pool is not None, "use LocalBackend as a context manager"
        queue = iter(tasks)
        pending: dict[Future, PointTask] = {}

        def fill() -> None:
            while len(pending) < 2 * self.workers:
                task = next(queue, None)
                if task is None:
                    return
                pending[self._pool.submit(fn, task)] = task

        fill()
        while pending:
            done, _ = wait(pending, return_when=FIRST_COMPLETED)
            broken = None
            for future in sorted(done, key=lambda f: pending[f].index):
                task = pending.pop(future)
                try:
                    record = future.result()
                except BrokenProcessPool as exc:
                    broken = exc
                    continue
                except Exception as exc:  # the record could not come back (pickling...): the point failed
                    record = error_record(task, f"{type(exc).__name__}: {exc}")
                yield task, record
            if broken is not None:
                raise SweepInterrupted(
                    f"a worker process died ({broken}); the finished points are stored, re-run to complete"
                )
            fill()


class RayBackend:
    """Ray tasks on a cluster (`address`) or on a local Ray started with `workers` CPUs.

    Ray is imported here, not at module import: the core install does not need it. A task whose
    worker dies gets an error row (Ray knows which task it was) and the sweep goes on.
    """

    def __init__(self, workers: int | None = None, address: str | None = None, flag: str = "--ray-address"):
        self.workers = workers
        self.flag = flag  # the option the user typed, named in every refusal
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self._started = False
        self._ray: Any = None

    def __enter__(self) -> RayBackend:
        if self.address:  # nothing listening, or not a Ray GCS: one line in seconds, before importing Ray
            from rlsim.tools.sweep.ray_address import probe

            probe(self.address, flag=self.flag)
        try:
            import ray
        except ImportError:
            raise SweepError(["--backend ray: Ray is not installed (pip install 'rlsim[ray]')"]) from None
        self._ray = ray
        if not ray.is_initialized():
            if self.address:
                from rlsim.tools.sweep.ray_address import bounded_init

                bounded_init(lambda: ray.init(address=self.address, log_to_driver=False), self.address,
                             flag=self.flag)
            else:
                ray.init(
                    num_cpus=self.workers or os.cpu_count(), include_dashboard=False, log_to_driver=False
                )
            self._started = True
        return self

    def __exit__(self, exc_type: object, *rest: object) -> None:
        if self._started:
            self._ray.shutdown()
            self._started = False

    def run(self, fn: PointFn, tasks: Iterable[PointTask]) -> Iterator[tuple[PointTask, dict]]:
        ray = self._ray
        remote = ray.remote(num_cpus=1)(fn)
        cpus = int(ray.cluster_resources().get("CPU", 1))
        queue = iter(tasks)
        pending: dict[Any, PointTask] = {}

        def fill() -> None:
            while len(pending) < 2 * max(cpus, 1):
                task = next(queue, None)
                if task is None:
                    return
                pending[remote.remote(task)] = task

        fill()
        try:
            while pending:
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    task = pending.pop(ref)
                    try:
                        record = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        record = error_record(task, f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
                    yield task, record
                fill()
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)


def make_backend(name: str, workers: int | None = None, ray_address: str | None = None,
                 flag: str = "--ray-address") -> Backend:
    """`flag`: the option that gave `ray_address`, named in the one-line refusals of a bad address."""
    if name == "serial":
        return SerialBackend()
    if name == "local":
        return LocalBackend(workers)
    if name == "ray":
        if importlib.util.find_spec("ray") is None:
            raise SweepError(["--backend ray: Ray is not installed (pip install 'rlsim[ray]')"])
        address = ray_address if ray_address is not None else os.environ.get("RAY_ADDRESS") or None
        if address is not None:  # "" (an unset shell variable) is refused, not read as "start a local Ray"
            from rlsim.tools.sweep.ray_address import parse_address

            parse_address(address, flag)  # a malformed address fails before anything else is touched
        return RayBackend(workers, ray_address, flag)
    raise SweepError([f"--backend: must be one of {', '.join(BACKENDS)}, got {name!r}"])


# ---------------------------------------------------------------- a whole sweep


class Progress(Protocol):
    """What run_sweep reports to: a progress bar, a log, or nothing."""

    def start(self, total: int, skipped: int) -> None: ...
    def advance(self, record: dict) -> None: ...


@dataclass
class SweepOutcome:
    out: Path
    table: pd.DataFrame
    total: int  # points in the plan
    skipped: int  # already stored by an earlier run
    ran: int
    failed: int  # error rows in the table (this run's and earlier ones)


def tasks_for(plan: SweepPlan, skip: set[str] = frozenset()) -> list[PointTask]:
    """The plan's points as tasks, in index order, minus the ids in `skip`."""
    base_dir = str(plan.base_dir)
    return [
        PointTask(p.index, p.point_id, plan.base, plan.source, base_dir, plan.full_overrides(p), p.seed)
        for p in plan.points
        if p.point_id not in skip
    ]


def run_sweep(
    plan: SweepPlan,
    out: str | Path,
    backend: str = "local",
    workers: int | None = None,
    ray_address: str | None = None,
    progress: Progress | None = None,
    point_fn: PointFn = run_point,
) -> SweepOutcome:
    """Run the points of `plan` not already stored in `out`; write each record as it arrives, then the tables.

    Ctrl-C (KeyboardInterrupt) and a dead worker (SweepInterrupted) propagate after the tables are
    rewritten from what is stored, so `out` is always consistent and a re-run completes it.
    `point_fn` exists for tests (fault injection); it must be picklable for the process backends.
    """
    runner = make_backend(backend, workers, ray_address)  # a bad backend fails before `out` is touched
    store = ResultStore(out)
    store.write_manifest(plan)
    done = store.completed(p.point_id for p in plan.points)
    tasks = tasks_for(plan, done)
    ran = 0
    try:
        if not tasks:  # nothing left: no pool, no Ray
            if progress is not None:
                progress.start(0, len(done))
        else:
            with runner:
                if progress is not None:
                    progress.start(len(tasks), len(done))
                for _task, record in runner.run(point_fn, tasks):
                    store.write_point(record)
                    ran += 1
                    if progress is not None:
                        progress.advance(record)
    finally:
        table = store.write_tables(plan)
    failed = int(table["error"].notna().sum())
    return SweepOutcome(Path(out), table, len(plan.points), len(done), ran, failed)


def run_points(tasks: Sequence[PointTask], backend: str = "serial", workers: int | None = None) -> list[dict]:
    """Records of `tasks` in task order, no store: for notebooks and benchmarks."""
    with make_backend(backend, workers) as runner:
        records = {task.index: record for task, record in runner.run(run_point, tasks)}
    return [records[t.index] for t in tasks]
