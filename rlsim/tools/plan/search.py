"""The search: bound pruning, then successive halving on a sweep backend; sampling when the space is large.

Rung 0 runs candidates for `rungs[0]` measured steps, best bound first, in batches of fixed size; before
each batch, a candidate whose bound cannot beat the k-th best result so far is pruned (with the
reason). Each later rung runs the best `keep` share of the previous one (at least top_k) for more
steps. Batches, not workers, decide what is known when: serial, local and Ray give the same plan. A
space larger than `exhaustive_limit` is sampled: Optuna's NSGA-II (seeded) on throughput and $ per
million tokens when Optuna is installed (`pip install 'rlsim[plan]'`), a seeded uniform sample otherwise.
"""

from __future__ import annotations

import importlib.util
import math
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlsim.tools.plan.bounds import step_lower_bound, step_work
from rlsim.tools.plan.candidates import Candidate
from rlsim.tools.plan.screen import SCREEN_MARGIN, Pruning, aggregate_data, incumbent, relaxed, screen_out
from rlsim.tools.plan.space import Constraints, Objective, SearchOptions, seconds_per_step
from rlsim.tools.sweep.runner import PointTask, make_backend, run_point

DEFAULT_STEPS_FOR_TIME = 1000  # time-to-steps without a deadline: hours for this many steps


@dataclass
class Evaluation:
    candidate: int
    rung: int
    steps: int
    summary: dict | None
    error: str | None
    cpu_s: float  # in the worker
    objective: float = float("nan")  # higher is better
    violations: list[str] = field(default_factory=list)
    timing: dict[str, float] = field(default_factory=dict)  # mean seconds of each measured step's timings
    mode: str = "exact"  # how the simulator ran it: exact, or aggregate (a screen run, screen.py)

    @property
    def ok(self) -> bool:
        return self.summary is not None and not self.violations


@dataclass
class SearchResult:
    candidates: list[Candidate]
    evaluations: list[Evaluation]
    ranking: list[Evaluation]  # the last rung's constraint-satisfying evaluations, best first
    sampler: str
    wall_s: float
    cpu_s: float
    screen: list[Evaluation] = field(default_factory=list)  # aggregate-mode screen runs (rung -1)
    pruning: Pruning = field(default_factory=Pruning)


def objective_value(summary: dict, objective: Objective, steps_for_time: int) -> float:
    """Higher is better: throughput, minus $ per million tokens, minus hours for N steps."""
    if objective == "throughput":
        return float(summary["throughput_tokens_per_s"])
    if objective == "cost":
        return -float(summary.get("cost_per_million_tokens_usd", float("nan")))
    return -steps_for_time * seconds_per_step(summary) / 3600.0


def bound_objective(bound: dict, price: float | None, objective: Objective, steps_for_time: int) -> float:
    """The best objective value a candidate's bound allows (inf when there is no bound)."""
    if not bound:
        return math.inf
    if objective == "throughput":
        return bound["throughput_tokens_per_s"]
    if objective == "cost":
        return -math.inf if price is None else -price / 3600.0 / bound["throughput_tokens_per_s"] * 1e6
    return -steps_for_time * bound["step_s"] / 3600.0


def violations(summary: dict, c: Constraints) -> list[str]:
    out = []
    if c.max_staleness is not None and summary.get("staleness_max", 0.0) > c.max_staleness:
        out.append(f"staleness_max {summary['staleness_max']:g} > {c.max_staleness:g}")
    floor = c.min_throughput_tokens_per_s
    if floor is not None and summary["throughput_tokens_per_s"] < floor:
        out.append(f"throughput {summary['throughput_tokens_per_s']:,.0f} < {floor:,.0f} tokens/s")
    if c.deadline_hours is not None:
        hours = c.deadline_steps * seconds_per_step(summary) / 3600.0
        if hours > c.deadline_hours:
            out.append(f"{c.deadline_steps} steps take {hours:.1f} h > deadline {c.deadline_hours:g} h")
    return out


def bound_violation(cand: Candidate, c: Constraints) -> str:
    """A constraint the candidate's bound already breaks (then no simulation can meet it)."""
    b = cand.bound
    if not b:
        return ""
    if c.min_throughput_tokens_per_s is not None and b["throughput_tokens_per_s"] < c.min_throughput_tokens_per_s:
        return (f"bound: at most {b['throughput_tokens_per_s']:,.0f} tokens/s < minimum "
                f"{c.min_throughput_tokens_per_s:,.0f}")
    if c.deadline_hours is not None and c.deadline_steps * b["step_s"] / 3600.0 > c.deadline_hours:
        return f"bound: {c.deadline_steps} steps take at least {c.deadline_steps * b['step_s'] / 3600:.1f} h > " \
               f"deadline {c.deadline_hours:g} h"
    if c.max_staleness is not None:
        eta = getattr(cand.scenario.schedule, "eta", None)
        if eta is None and cand.scenario.schedule.kind == "fully-async":
            return f"schedule: unbounded staleness > max_staleness {c.max_staleness:g}"
    return ""


class Runner:
    """Evaluates batches of (candidate, steps) on one backend, in candidate order whatever the backend.

    With a store (`OUT/points/`, the sweep's ResultStore), every record is written as it arrives and a run
    already recorded is read back instead of simulated: a plan killed at any instant resumes where it stopped.
    """

    def __init__(self, backend, base_dir: Path | None, seed: int, on_record: Callable[[], None] | None,
                 store=None):
        self.backend = backend
        self.base_dir = str(base_dir or Path.cwd())
        self.seed = seed
        self.on_record = on_record or (lambda: None)
        self.store = store

    def run(self, cands: list[Candidate], steps: int, rung: int, mode: str = "exact") -> list[Evaluation]:
        tasks = []
        for c in cands:
            data = {**c.data, "steps": steps}
            if mode == "aggregate":
                data = aggregate_data(data)
            tasks.append(PointTask(c.index, record_id(data, self.seed), data, c.label, self.base_dir, (), self.seed))
        records = {}
        todo = []
        for task in tasks:
            stored = self.store.read_point(task.point_id) if self.store is not None else None
            if stored is not None and not stored.get("error"):
                records[task.index] = stored
                self.on_record()
            else:
                todo.append(task)
        for task, record in self.backend.run(timed_point, todo) if todo else ():
            record["point_id"] = task.point_id
            if self.store is not None:
                self.store.write_point(record)
            records[task.index] = record
            self.on_record()
        return [Evaluation(c.index, rung, steps, records[c.index]["summary"], records[c.index]["error"],
                           float(records[c.index].get("cpu_s", 0.0)), timing=step_timing(records[c.index]),
                           mode=records[c.index].get("simulation_mode") or mode)
                for c in cands]


def record_id(data: dict, seed: int) -> str:
    """The store id of one simulation: its scenario mapping (steps and mode included) and seed."""
    import hashlib
    import json

    from rlsim.tools.sweep.store import point_id

    text = json.dumps(data, sort_keys=True, default=str)
    return point_id(hashlib.sha256(text.encode()).hexdigest(), (), seed)


def timed_point(task: PointTask) -> dict:
    """`run_point` plus the CPU seconds it took in its worker (wall time overstates it on a busy machine)."""
    start = time.process_time()
    record = run_point(task)
    record["cpu_s"] = time.process_time() - start
    return record


def step_timing(record: dict) -> dict[str, float]:
    """Mean `timing_s/*` of the measured steps in a point record (the step's parts, critical path first)."""
    steps = record.get("steps") or {}
    measured = [i for i, w in enumerate(steps.get("warmup", [])) if not w]
    out = {}
    for key, values in steps.items():
        if key.startswith("timing_s/") and measured:
            vals = [float(values[i]) for i in measured if values[i] is not None and values[i] == values[i]]
            if vals:
                out[key.removeprefix("timing_s/")] = sum(vals) / len(vals)
    return out


def kth_best(evals: list[Evaluation], k: int) -> float:
    values = sorted((e.objective for e in evals if e.ok), reverse=True)
    return values[k - 1] if len(values) >= k else -math.inf


def _score(evals: list[Evaluation], objective: Objective, constraints: Constraints, steps_for_time: int) -> None:
    for e in evals:
        if e.summary is not None:
            e.objective = objective_value(e.summary, objective, steps_for_time)
            e.violations = violations(e.summary, constraints)


def rung_zero_order(cands: list[Candidate], objective: Objective, steps_for_time: int) -> list[Candidate]:
    """Best bound first (ties: enumeration order), so the k-th best is known early and prunes the most."""
    key = {c.index: bound_objective(c.bound, c.price_usd_per_hour, objective, steps_for_time) for c in cands}
    return sorted(cands, key=lambda c: (-key[c.index], c.index))


def attach_bounds(cands: list[Candidate], seed: int) -> None:
    works: dict[str, object] = {}
    for c in cands:
        if c.scenario is None:
            continue
        wkey = c.scenario.workload.model_dump_json() + str(c.scenario.algorithm.samples_per_step)
        if wkey not in works:
            works[wkey] = step_work(c.scenario, seed)
        c.bound = step_lower_bound(c.scenario, works[wkey])


def sample_candidates(cands: list[Candidate], opts: SearchOptions, seed: int) -> tuple[list[Candidate], str]:
    """Which candidates a large space evaluates: uniform, seeded (the NSGA-II path asks instead)."""
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(cands), size=min(opts.trials, len(cands)), replace=False).tolist())
    return [cands[i] for i in picked], "uniform sample (seeded)"


def have_optuna() -> bool:
    return importlib.util.find_spec("optuna") is not None


def _batches(items: list[Candidate], size: int) -> Iterator[list[Candidate]]:
    for i in range(0, len(items), size):
        yield items[i:i + size]


def _prune(batch: list[Candidate], evals: list[Evaluation], k: int, objective: Objective, steps_for_time: int,
           constraints: Constraints) -> list[Candidate]:
    """The batch minus candidates whose bound cannot beat the k-th best (marked pruned, with the reason)."""
    bar = kth_best(evals, k)
    return _bounded(batch, bar, f"#{k} so far {_fmt_objective(bar, objective)}", objective, steps_for_time,
                    constraints)


def _bounded(batch: list[Candidate], bar: float, against: str, objective: Objective, steps_for_time: int,
             constraints: Constraints) -> list[Candidate]:
    """The batch minus candidates that break a constraint or whose bound is under `bar` (marked pruned, the
    reason naming `against`, what the bar is)."""
    keep = []
    for c in batch:
        why = bound_violation(c, constraints)
        best = bound_objective(c.bound, c.price_usd_per_hour, objective, steps_for_time)
        if not why and best < bar:
            why = f"bound: {objective} at best {_fmt_objective(best, objective)} < {against}"
        if why:
            c.status, c.reason = "pruned", why
        else:
            keep.append(c)
    return keep


def _fmt_objective(value: float, objective: Objective) -> str:
    if objective == "throughput":
        return f"{value:,.0f} tokens/s"
    if objective == "cost":
        return f"${-value:.3f}/M tokens"
    return f"{-value:.1f} h"


def survivors(evals: list[Evaluation], opts: SearchOptions, unseen: int = 0) -> list[int]:
    """Candidates the next rung runs: the best `keep` share (at least top_k) of those meeting the constraints.

    `unseen`: candidates pruned before this rung that an unpruned search would have counted (the share is of
    them all, so pruning never narrows what the next rung keeps of the rest)."""
    ok = sorted((e for e in evals if e.ok), key=lambda e: (-e.objective, e.candidate))
    n = max(opts.top_k, math.ceil(opts.keep * (len(ok) + unseen)))
    return [e.candidate for e in ok[:n]]


class Progress:
    """What the search reports to (a progress bar): a total fixed up front (`add`, once), then `advance`s."""

    def add(self, n: int) -> None: ...
    def advance(self) -> None: ...


def run_search(cands: list[Candidate], objective: Objective, constraints: Constraints, opts: SearchOptions,
               backend: str = "serial", workers: int | None = None, seed: int = 0,
               base_dir: Path | None = None, progress: Progress | None = None,
               on_backend_ready: Callable[[], None] | None = None, prune: bool = True, store=None,
               ray_address: str | None = None, opened=None) -> SearchResult:
    """Prune (bounds, then an aggregate-mode screen: screen.py), run rung 0 exactly, then successive halving.

    Progress counts feasible candidates, a total known up front: each advances once its fate is settled
    (bounded or screened out, or simulated through its last rung). `prune=False` simulates every feasible
    candidate exactly (`--exact`). `store`: a ResultStore, so a killed plan resumes (Runner). `opened`: a
    backend already entered (the sizing's, over all its searches), else one is made from `backend`.
    """
    wall0, cpu0 = time.perf_counter(), time.process_time()
    progress = progress or Progress()
    steps_for_time = constraints.deadline_steps or DEFAULT_STEPS_FOR_TIME
    feasible = [c for c in cands if c.status == "feasible"]
    attach_bounds(feasible, seed)
    by_id = {c.index: c for c in cands}
    pruning = Pruning(enabled=prune)
    progress.add(len(feasible))
    settled: set[int] = set()

    def settle(ids) -> None:
        for i in ids:
            if i not in settled:
                settled.add(i)
                progress.advance()

    def score(new: list[Evaluation]) -> list[Evaluation]:
        _score(new, objective, constraints, steps_for_time)
        return new

    screen: list[Evaluation] = []
    with nullcontext(opened) if opened is not None else make_backend(backend, workers, ray_address) as be:
        if on_backend_ready is not None:  # e.g. start a progress bar's thread only after the workers forked
            on_backend_ready()
        runner = Runner(be, base_dir, seed, None, store)
        if len(feasible) > opts.exhaustive_limit and have_optuna():
            from rlsim.tools.plan.sampler import nsga2_rung_zero

            evals, sampler = nsga2_rung_zero(feasible, runner, opts, seed, score, Progress(),
                                             lambda batch, done: _prune(batch, done, opts.top_k, objective,
                                                                        steps_for_time, constraints)
                                             if prune else batch)
            pruning.bounded = sum(c.status == "pruned" for c in feasible)  # the sampler prunes by bounds only
        else:
            chosen, sampler = (feasible, "exhaustive") if len(feasible) <= opts.exhaustive_limit \
                else sample_candidates(feasible, opts, seed)
            if prune:
                evals, screen = _screened_rung_zero(chosen, runner, opts, objective, steps_for_time, constraints,
                                                    score, pruning)
            else:
                evals = score(runner.run(chosen, opts.rungs[0], 0))
        picked = {e.candidate for e in evals} | {c.index for c in feasible if c.status in ("pruned", "screened")}
        for c in feasible:
            if c.index not in picked:
                c.status, c.reason = "not-sampled", f"not picked by the {sampler} ({opts.trials} trials)"
        settle(c.index for c in feasible if c.status != "feasible")
        unseen = pruning.bounded + pruning.screened
        current = evals
        for rung, steps in enumerate(opts.rungs[1:], 1):
            ids = survivors(current, opts, unseen if rung == 1 else 0)
            settle(e.candidate for e in current if e.candidate not in set(ids))
            current = score(runner.run([by_id[i] for i in ids], steps, rung))
            evals += current
        settle(c.index for c in feasible)
    pruning.exact = len({e.candidate for e in evals})
    ranking = sorted((e for e in current if e.ok), key=lambda e: (-e.objective, e.candidate))
    cpu = time.process_time() - cpu0
    if backend != "serial":  # the workers' CPU time (serially it is already in this process's)
        cpu += sum(e.cpu_s for e in evals + screen)
    return SearchResult(cands, evals, ranking, sampler, time.perf_counter() - wall0, cpu, screen, pruning)


def _screened_rung_zero(chosen: list[Candidate], runner: Runner, opts: SearchOptions, objective: Objective,
                        steps_for_time: int, constraints: Constraints, score,
                        pruning: Pruning) -> tuple[list[Evaluation], list[Evaluation]]:
    """Tiers 1 and 2 then rung 0 exactly: (rung-0 evaluations, screen evaluations of the others)."""
    order = rung_zero_order(chosen, objective, steps_for_time)
    screen: list[Evaluation] = []
    for batch in _batches(order, opts.batch):
        best = incumbent(screen, constraints)
        bar = relaxed(best, SCREEN_MARGIN) if math.isfinite(best) else -math.inf
        kept = _bounded(batch, bar, f"the best screened {_fmt_objective(best, objective)} less {SCREEN_MARGIN:.0%}",
                        objective, steps_for_time, constraints)
        pruning.bounded += len(batch) - len(kept)
        if kept:
            screen += score(runner.run(kept, opts.rungs[0], 0, mode="aggregate"))
    keep = set(screen_out(screen, {c.index: c for c in chosen}, constraints))
    pruning.screened = len(screen) - len(keep)
    exact = [e for e in screen if e.candidate in keep and e.mode == "exact"]  # the screen fell back: reuse it
    pruning.screened_exactly = sum(e.mode == "exact" for e in screen)
    rerun = [e.candidate for e in screen if e.candidate in keep and e.mode != "exact"]
    again = score(runner.run([c for c in chosen if c.index in set(rerun)], opts.rungs[0], 0)) if rerun else []
    evals = sorted(exact + again, key=lambda e: e.candidate)
    rest = [e for e in screen if e.candidate not in keep or e.mode != "exact"]
    for e in rest:
        e.rung = -1
    return evals, rest
