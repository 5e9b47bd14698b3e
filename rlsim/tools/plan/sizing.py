"""Inverse sizing: per GPU type, the smallest cluster (then the cheapest layout on it) that reaches a target.

`rlsim plan SCENARIO --target tokens_per_s=20000 --gpu h100-sxm:64 --gpu h20:96`. For each GPU type the
cluster sizes are tried smallest first (1, 2, 4 GPUs, then whole 8-GPU nodes up to MAX). At each size
every layout of the space (colocated, split, disaggregated, the asynchronous schedules, generation TP,
training TP) is a candidate; the analytic bounds drop those that cannot reach the target, successive
halving simulates the rest (`run_search`), and the first size where a candidate meets the target is the
answer, its layouts ranked by $ per million tokens (one price per hour at one size: by throughput).
The answer's ± band combines two parts, named where it is printed: the 95% interval of throughput over
seed replicates (report/uncertainty.py) and the model's error where the job sits (the validation band of
`rlsim run`, report/validation_band.py). Each answer says its margin over the target and how far the
nearest smaller size fell short; a shortfall inside the band makes the choice a coin toss.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from rlsim.sim.inputs import MAX_GPUS_PER_NODE, MAX_NODES, MAX_NUMBER, MIN_MAGNITUDE
from rlsim.tools.plan.candidates import Candidate, enumerate_candidates
from rlsim.tools.plan.screen import Pruning
from rlsim.tools.plan.search import Evaluation, Progress, run_search
from rlsim.tools.plan.space import Constraints, GpuOption, ScheduleOption, SearchOptions, Space, TrainConfig
from rlsim.tools.report.validation_band import ROW_TOLERANCE_PCT, Band, band, scenario_regime

DEFAULT_MAX_GPUS = 64
SEED_REPLICATES = 3  # the answer's band: throughput over this many seeds
TARGET_KEYS = ("tokens_per_s", "step_time_s", "steps", "deadline_h")
# The range of each target: within it the sizing's constraints hold any value (a step time becomes hours, so
# its floor keeps step_time_s / 3600 a number and not a denormal); beyond it, one line says so.
TARGET_RANGE = {"tokens_per_s": (MIN_MAGNITUDE, MAX_NUMBER), "step_time_s": (3600 * MIN_MAGNITUDE, MAX_NUMBER),
                "steps": (1, MAX_NUMBER), "deadline_h": (MIN_MAGNITUDE, MAX_NUMBER)}
MOST_GPUS = MAX_NODES * MAX_GPUS_PER_NODE  # --gpu TYPE:MAX, MAX at most this
_SCHEDULE = {"hybridflow": "sync", "one-step-off": "1-off", "fully-async": "async", "roll": "roll"}


@dataclass(frozen=True)
class Target:
    """What the cluster must reach: a throughput floor, a step-time ceiling, or N steps within H hours."""

    tokens_per_s: float | None = None
    step_time_s: float | None = None
    steps: int | None = None
    deadline_h: float | None = None

    def constraints(self) -> Constraints:
        if self.step_time_s is not None:  # a step-time ceiling is a one-step deadline
            return Constraints(deadline_steps=1, deadline_hours=self.step_time_s / 3600.0)
        return Constraints(min_throughput_tokens_per_s=self.tokens_per_s, deadline_steps=self.steps,
                           deadline_hours=self.deadline_h)

    def met(self, summary: dict) -> bool:
        step = float(summary["step_time_s"])
        if self.tokens_per_s is not None:
            return float(summary["throughput_tokens_per_s"]) >= self.tokens_per_s
        if self.step_time_s is not None:
            return step <= self.step_time_s
        return self.steps * step / 3600.0 <= self.deadline_h

    def ratio(self, summary: dict) -> float:
        """How far a result goes towards the target: simulated / target for a throughput, target / simulated
        for a step time or a deadline (>= 1: met)."""
        step = float(summary["step_time_s"])
        if self.tokens_per_s is not None:
            return float(summary["throughput_tokens_per_s"]) / self.tokens_per_s
        if self.step_time_s is not None:
            return self.step_time_s / step if step > 0 else math.inf
        return self.deadline_h * 3600.0 / (self.steps * step) if step > 0 else math.inf

    @property
    def text(self) -> str:
        if self.tokens_per_s is not None:
            return f"{self.tokens_per_s:,.0f} tokens/s"
        if self.step_time_s is not None:
            return f"a step within {self.step_time_s:g} s"
        return f"{self.steps:,} steps within {self.deadline_h:g} h"


def parse_target(text: str) -> Target:
    """`tokens_per_s=V`, `step_time_s=V` or `steps=N,deadline_h=H`; ValueError with one line otherwise."""
    values: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = part.partition("=")
        key = key.strip()
        if not sep or key not in TARGET_KEYS:
            raise ValueError(f"--target: {part!r}: expected KEY=VALUE with KEY one of {', '.join(TARGET_KEYS)}")
        try:
            value = float(raw)
        except ValueError:
            raise ValueError(f"--target: {key}: expected a number, got {raw.strip()!r}") from None
        if not value > 0 or not math.isfinite(value):
            raise ValueError(f"--target: {key}: expected a number > 0, got {raw.strip()}")
        low, high = TARGET_RANGE[key]
        if not low <= value <= high:
            raise ValueError(f"--target: {key}: must be {'<=' if value > high else '>='} "
                             f"{high if value > high else low:g}, got {value:g}")
        values[key] = value
    kinds = [k for k in ("tokens_per_s", "step_time_s") if k in values] + (["steps"] if {"steps", "deadline_h"}
                                                                           & values.keys() else [])
    if len(kinds) != 1:
        raise ValueError("--target: give one of tokens_per_s=V, step_time_s=V or steps=N,deadline_h=H")
    if kinds == ["steps"]:
        if {"steps", "deadline_h"} - values.keys():
            raise ValueError("--target: steps and deadline_h go together, e.g. steps=1000,deadline_h=48")
        if values["steps"] != int(values["steps"]):
            raise ValueError(f"--target: steps: expected a whole number, got {values['steps']:g}")
        return Target(steps=int(values["steps"]), deadline_h=values["deadline_h"])
    return Target(**values)


def parse_gpu(text: str, known: list[str]) -> tuple[str, int]:
    """`TYPE[:MAX]` -> (profile name, most GPUs); ValueError with one line for an unknown type or bad MAX."""
    from rlsim.sim.inputs import canonical_profile, unknown_profile_message

    name, _, raw = text.partition(":")
    name = name.strip()
    if name not in known:
        found = canonical_profile(name, known)  # H100, NVIDIA H100 -> h100-sxm
        if found is None:
            why = unknown_profile_message(name, known).removeprefix(f"unknown hardware profile {name!r}")
            raise ValueError(f"--gpu: unknown GPU type {name!r}{why.split(' (known')[0]}; shipped profiles: "
                             f"{', '.join(known)}")
        name = found
    if not raw:
        return name, DEFAULT_MAX_GPUS
    try:
        most = int(raw)
    except ValueError:
        raise ValueError(f"--gpu {text}: MAX must be a whole number of GPUs, got {raw!r}") from None
    if not 1 <= most <= MOST_GPUS:
        raise ValueError(f"--gpu {text}: MAX must be between 1 and {MOST_GPUS:,} GPUs")
    return name, most


def cluster_sizes(most: int, gpus_per_node: int = 8) -> list[int]:
    """Sizes to try, smallest first: 1, 2, 4 GPUs (parts of a node), then whole nodes up to `most`."""
    small = [g for g in (1, 2, 4) if g < gpus_per_node and g <= most and gpus_per_node % g == 0]
    return small + list(range(gpus_per_node, most + 1, gpus_per_node))


# The default layouts: verl's colocated hybrid engine and split placement, a disaggregated synchronous
# step, one-step-off (verl) and AReaL's fully asynchronous rollout at staleness 1 and 2 (docs/sources.md §2, §7).
DEFAULT_SCHEDULES = (
    {"kind": "hybridflow", "layouts": ["colocate", "split", "disaggregated"]},
    {"kind": "one-step-off"},
    {"kind": "fully-async", "set": {"max_head_offpolicyness": [1, 2]}},
)
# Training parallelism in order of preference, the first that fits memory (HybridFlow's auto-mapping):
# data parallel first, then tensor parallel inside a node, then offloading.
DEFAULT_TRAINING = ({"tp": 1}, {"tp": 2}, {"tp": 4}, {"tp": 8}, {"tp": 8, "offload": "optimizer"},
                    {"tp": 8, "offload": "all"})


def default_space() -> Space:
    return Space(gpus=[GpuOption(hardware="h100-sxm", counts=[8])],
                 schedules=[ScheduleOption(**s) for s in DEFAULT_SCHEDULES],
                 generation_fraction=[0.5, 0.75],
                 parallel={"generation_tp": [1, 2, 4, 8], "training": [TrainConfig(**t) for t in DEFAULT_TRAINING]})


def space_at(space: Space, hardware: str, gpus: int) -> Space:
    """`space` on one cluster: `gpus` GPUs of `hardware` (generation TP capped at the cluster)."""
    parallel = space.parallel.model_copy()
    if parallel.generation_tp:
        parallel.generation_tp = [t for t in parallel.generation_tp if t <= gpus] or [1]
    return space.model_copy(update={"gpus": [GpuOption(hardware=hardware, counts=[gpus])],
                                    "mixes": [], "parallel": parallel, "constraints": Constraints()})


def short_layout(c: Candidate) -> str:
    """A layout in at most ~30 characters: placement, pools, schedule, generation TP, training config."""
    k = c.knobs
    where = {"disaggregated": f"disagg {k['gen_gpus']}+{k['train_gpus']}", "partition": "partition"}.get(
        k["layout"], k["layout"])
    parts = [where, _SCHEDULE.get(k["schedule"], k["schedule"])]
    if k["schedule_set"]:
        parts.append(k["schedule_set"].replace("max_head_offpolicyness=", "eta").replace(", ", ","))
    if k["gen_tp"] is not None:
        parts.append(f"tg{k['gen_tp']}")
    if k["train"] != "scenario":
        tp, pp, off = k["train"].split("-")
        parts.append(tp + ("" if pp == "pp1" else pp) + {"none": "", "optimizer": "+off-opt", "all": "+off"}[off])
    return " ".join(parts)



@dataclass
class SizeTry:
    """One cluster size of one GPU type: what happened there (why it fell short, or its ranked layouts)."""

    gpus: int
    candidates: list[Candidate]
    ranking: list[Evaluation]
    evaluations: list[Evaluation] = field(default_factory=list)
    why_not: str = ""
    memory_bound: bool = False  # every layout was refused for memory


@dataclass
class Sizing:
    """The answer for one GPU type: the size that reached the target (None when none up to MAX did)."""

    hardware: str
    most: int
    tries: list[SizeTry] = field(default_factory=list)
    band: dict[str, float] = field(default_factory=dict)  # mean and 95% half-width over seed replicates
    model: Band | None = None  # the model's error where the answer's job sits (validation residuals)
    verdict: Verdict | None = None  # margin, smaller size's shortfall, band (see `verdict`)
    pruning: Pruning = field(default_factory=Pruning)  # bounded out, screened out, simulated exactly (all sizes)
    cpu_s: float = 0.0  # of the searches (enumeration and the seed band excluded)

    @property
    def answer(self) -> SizeTry | None:
        return self.tries[-1] if self.tries and self.tries[-1].ranking else None


def best_simulated(evals: list[Evaluation], target: Target) -> Evaluation | None:
    """The closest to the target among the results measured longest (the last rung any candidate reached): a
    one-step result a longer measurement overruled is not quoted."""
    simulated = [e for e in evals if e.summary is not None]
    if not simulated:
        return None
    deepest = max(e.rung for e in simulated)
    return max((e for e in simulated if e.rung == deepest), key=lambda e: target.ratio(e.summary))


# Where no validated row resembles the job, a smaller size this close to the target is flagged all the same: the
# per-row tolerance of the validation (docs/validation.md), the least a prediction may miss by with nothing to say.
UNKNOWN_MODEL_ERROR_PCT = ROW_TOLERANCE_PCT


@dataclass(frozen=True)
class Verdict:
    """How safely an answer clears its target: its margin, the nearest smaller size's shortfall, and one band
    with its two parts (seed spread, model error where this job sits)."""

    margin_pct: float  # the answer beyond the target, % (Target.ratio - 1)
    smaller_gpus: int | None  # the nearest smaller size tried
    smaller_short_pct: float | None  # its best simulated result short of the target, %; None: none simulated
    smaller_why: str  # why it fell short, one phrase
    seed_pct: float | None  # 95% half-width of throughput over seed replicates, % of the mean
    model_pct: float | None  # the model's error in this job's regime, % (validation band)
    model_regime: str
    model_rows: int

    @property
    def band_pct(self) -> float:
        """The one band: seed spread and model error combined (root sum of squares: independent errors)."""
        return math.hypot(self.seed_pct or 0.0, self.model_pct or 0.0)

    @property
    def coin_toss(self) -> bool:
        """The nearest smaller size falls short of the target by less than the band: either size may be the
        answer on a real cluster."""
        if self.smaller_short_pct is None:
            return False
        if self.model_pct is None:  # no validated regime nearby: the model's own error is unknown here
            return self.smaller_short_pct < max(self.band_pct, UNKNOWN_MODEL_ERROR_PCT)
        return self.smaller_short_pct < self.band_pct


def verdict(sizing: Sizing, target: Target) -> Verdict | None:
    """The margin, the smaller size's shortfall and the band of one GPU type's answer (None: no answer)."""
    ans = sizing.answer
    if ans is None:
        return None
    smaller = sizing.tries[-2] if len(sizing.tries) > 1 else None
    best = best_simulated(smaller.evaluations, target) if smaller is not None else None
    seed = sizing.band
    mean, half = seed.get("throughput_tokens_per_s"), seed.get("throughput_tokens_per_s_ci95")
    model = sizing.model
    return Verdict(
        margin_pct=100 * (target.ratio(ans.ranking[0].summary) - 1),
        smaller_gpus=smaller.gpus if smaller is not None else None,
        smaller_short_pct=None if best is None else 100 * (1 - target.ratio(best.summary)),
        smaller_why="" if smaller is None else "cannot hold the job (memory)" if smaller.memory_bound
        else smaller.why_not,
        seed_pct=100 * half / mean if mean and half is not None else None,
        model_pct=None if model is None else model.pct, model_regime="" if model is None else model.regime,
        model_rows=0 if model is None else model.rows)


def _why_not(cands: list[Candidate], evals: list[Evaluation], target: Target) -> tuple[str, bool]:
    """Why no layout at one size met the target, in one phrase; and whether memory alone refused them all."""
    best = best_simulated(evals, target)
    if best is not None:
        s = best.summary
        return (f"best simulated {s['throughput_tokens_per_s']:,.0f} tokens/s, step {s['step_time_s']:.1f} s "
                f"({short_layout(cands[best.candidate])})", False)
    refused = [c for c in cands if c.status == "infeasible"]
    if refused and len(refused) == len(cands):
        memory = all("memory" in c.reason.lower() or "fit" in c.reason.lower() for c in refused)
        first = refused[0].reason.split("; ")[0]
        return (f"every layout refused{' for memory' if memory else ''}: {first}", memory)
    pruned = [c for c in cands if c.status == "pruned" and c.reason.startswith("bound")]
    if pruned:
        best = max((c.bound.get("throughput_tokens_per_s", 0.0) for c in pruned), default=0.0)
        return f"bound: at most {best:,.0f} tokens/s (analytic, before simulating)", False
    return "no layout to try", False


def size_one(base: dict, base_dir: Path, space: Space, hardware: str, most: int, target: Target,
             backend: str, workers: int | None, seed: int, progress: Progress | None, prune: bool = True,
             store=None, opened=None) -> Sizing:
    """Sizes of one GPU type smallest first, until a layout meets the target (or MAX is passed).

    Progress: one unit per size (the total is every size of every type, fixed up front); the sizes above
    the answer advance at once."""
    sizing = Sizing(hardware, most)
    opts = SearchOptions(rungs=list(space.search.rungs), keep=space.search.keep, top_k=space.search.top_k,
                         batch=space.search.batch)
    progress = progress or Progress()
    sizes = cluster_sizes(most)
    for n, gpus in enumerate(sizes, 1):
        cands = enumerate_candidates(base, space_at(space, hardware, gpus), base_dir)
        result = run_search(cands, "throughput", target.constraints(), opts, backend, workers, seed, base_dir,
                            None, prune=prune, store=store, opened=opened)
        sizing.pruning.add(result.pruning)
        sizing.cpu_s += result.cpu_s
        progress.advance()
        ranking = [e for e in result.ranking if target.met(e.summary)]
        why, memory = ("", False) if ranking else _why_not(cands, result.evaluations + result.screen, target)
        sizing.tries.append(SizeTry(gpus, cands, ranking, result.evaluations + result.screen, why, memory))
        if ranking:
            for _ in sizes[n:]:
                progress.advance()
            answer = cands[ranking[0].candidate]
            sizing.band = seed_band(answer, ranking[0], base_dir, seed, opened)
            sizing.model = None if answer.scenario is None else band(scenario_regime(answer.scenario))
            sizing.verdict = verdict(sizing, target)
            break
    return sizing


def seed_band(cand: Candidate, first: Evaluation, base_dir: Path, seed: int, opened=None) -> dict[str, float]:
    """Throughput, step time and $/M tokens of the answer over SEED_REPLICATES seeds (its own evaluation is the
    first): mean and 95% half-width (report/uncertainty.py). `opened`: a backend to run the replicates on."""
    import pandas as pd

    from rlsim.tools.report.uncertainty import mean_interval
    from rlsim.tools.sweep.runner import PointTask, run_point, run_points

    tasks = [PointTask(i, f"band-{i}", {**cand.data, "steps": first.steps}, cand.label, str(base_dir), (), seed + i)
             for i in range(1, SEED_REPLICATES)]
    keys = ("throughput_tokens_per_s", "step_time_s", "cost_per_million_tokens_usd")
    records = run_points(tasks) if opened is None else \
        [r for _, r in sorted(opened.run(run_point, tasks), key=lambda tr: tr[0].index)]
    summaries = [first.summary] + [r["summary"] for r in records if r["summary"] is not None]
    rows = [{k: s.get(k) for k in keys} for s in summaries]
    if len(rows) < 2:
        return {}
    stats = mean_interval(pd.DataFrame(rows).astype(float))
    out = {}
    for k in keys:
        if k in stats.index and not math.isnan(stats.loc[k, "mean"]):
            out[k] = float(stats.loc[k, "mean"])
            out[f"{k}_ci95"] = float(stats.loc[k, "ci95"])
    return out


def fit_problem(problem) -> bool:
    """A scenario problem that only says the job does not fit the scenario's own GPUs (memory, KV cache): the
    sizing replaces that cluster by each size it tries, so such a problem is no reason to refuse."""
    return problem.path.startswith("roles.") and ("does not fit" in problem.message
                                                  or problem.message.startswith("KV cache holds"))


def checked_apart_from_fit(scenario: Path, overrides: tuple[str, ...]) -> None:
    """Validate the scenario as `load_scenario` does, except that it need not fit its own cluster."""
    from rlsim.sim.api import ScenarioError, load_scenario

    try:
        load_scenario(scenario, overrides)
    except ScenarioError as exc:
        others = [p for p in exc.problems if not fit_problem(p)]
        if others:
            raise ScenarioError(exc.source, others) from None


def size_cluster(scenario: Path, target: Target, gpus: list[tuple[str, int]], space: Space | None = None,
                 overrides: tuple[str, ...] = (), backend: str = "serial", workers: int | None = None,
                 seed: int | None = None, progress: Progress | None = None, prune: bool = True,
                 out: Path | None = None, ray_address: str | None = None, flag: str = "--ray") -> list[Sizing]:
    """Per GPU type, the smallest cluster and the cheapest layout on it reaching `target`.

    `prune=False` simulates every layout of every size tried exactly (`--exact`); `out`: simulations are
    recorded under `out/points/` as they finish, and a rerun reads them back (resume after a kill)."""
    from rlsim.sim.api import apply_overrides, read_yaml
    from rlsim.tools.sweep.runner import make_backend
    from rlsim.tools.sweep.store import ResultStore

    checked_apart_from_fit(scenario, overrides)
    base = apply_overrides(read_yaml(scenario), overrides, str(scenario))
    seed = int(base.get("seed", 0)) if seed is None else seed
    base_dir = scenario.resolve().parent
    space = space or default_space()
    opened = make_backend(backend, workers, ray_address, flag)  # a bad backend or address: before `out` is made
    store = ResultStore(out) if out is not None else None
    if progress is not None:
        progress.add(sum(len(cluster_sizes(most)) for _, most in gpus))
    with opened:  # one pool (or one Ray) for every search
        return [size_one(base, base_dir, space, hw, most, target, backend, workers, seed, progress, prune, store,
                         opened) for hw, most in gpus]
