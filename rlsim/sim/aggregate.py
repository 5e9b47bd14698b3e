"""Aggregate mode: simulate a share of N identical rollout engines with the same share of the load.

Replica sampling with scaled load. The N rollout engines of a scenario are identical and a dispatcher
spreads the load evenly over them, so k = N / f of them, given 1/f of the generation load, behave as
the whole fleet does. The reduced run keeps everything else of the scenario (pools, layouts, the
training side) and:

- builds k engines, each standing for f in the GPU ledger (its busy intervals count f x tp GPUs, so
  idle per pool and the cluster's idle stay right);
- divides the generation load by f: prompts per step, the asynchronous trainer's batch and admission
  caps, and the tool pools' concurrency (rounded up);
- trains exactly: the trainer's phases take a full-size batch (`TrainerBatch`: a synchronous step's whole
  draw, an asynchronous one's share with f - 1 shares resampled from it, shuffled) on the full training
  GPUs, and a weight sync reaches all N engines' GPUs;
- scales the step rows' counts (samples, tokens, groups, preemptions) and the token and trajectory
  totals back by f; rates, times, fractions and staleness need no scaling.

The long tail of a synchronous step: with N engines the step waits for the slowest of N, not of k.
Two corrections. (1) A synchronous batch is drawn at the full size and subsampled by rank (the groups
sorted by their longest response, one from each block of f at a random offset, the first block's pick
replaced by the longest group): the share keeps the length distribution and the batch's longest
sequences. (2) Even then the slowest of k engines finishes earlier than the slowest of N (many engines
hold a long sequence; the one with the heaviest load beside it is the last): when the k engines are
done, the step waits `tail_extension`, the extreme-value estimate of how much later the N-th would be
(a generalized Pareto tail, bounded to exponential, fitted to the k engines' finishing times).

Asynchronous runs need neither: their batches are admitted group by group, and a weight sync's pause
(the slowest engine reaching a step boundary) is short against a step.

What it does not keep: per-engine tables (engine_stats, samples, trajectories) hold the simulated engines
and samples only; the tool pools queue as c/f servers (a smaller pool waits longer at the same load);
scenarios whose rollout engines are not interchangeable (schedules ROLL, verl V1, re-splitting, LoRA,
tail re-sharding, routing, prefill/decode disaggregation, an LLM judge, a length trace, too few engines) run
exactly (`plan` says why).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rlsim.sim.scenario.schema import Scenario

# Step-row columns that count things across the fleet: multiplied by the factor. Everything else in a
# step row is a time, a rate, a fraction, a staleness or a label.
SCALED_COLUMNS = (
    "samples", "prompt_tokens", "response_tokens", "tokens", "preemptions", "samples/multi_version",
    "samples/dropped_stale", "trainer/prompt_groups", "routing/affinity_hits", "routing/prefill_saved_tokens",
)
SUPPORTED_KINDS = ("generation-only", "hybridflow", "one-step-off", "fully-async")
# Schedule knobs counting samples or prompts a step: the share divides each of them by the factor.
BATCH_KNOBS = ("consumer_batch_size", "max_concurrent_rollouts", "ppo_mini_batch_size")
# The share by default (simulation.engines null): the fewest engines simulated per schedule family, and the fewest
# prompt groups per step in the share. A synchronous step's tail is extrapolated from the simulated engines'
# finishing times (more engines, a steadier fit); an asynchronous run has no such tail, and its trainer batch is
# the share resampled, so what it needs is enough distinct groups per step (benchmarks/aggregate_agreement.py).
DEFAULT_ENGINES = {"sync": 16, "async": 8}
MIN_GROUPS = 16
# How far the aggregate mode is from the exact one, as measured by benchmarks/aggregate_agreement.py over the
# covered shipped scenarios and their x8 scale-ups (docs/benchmarks.md, Aggregate mode): per schedule family.
EXPECTED_DIFFERENCE = {
    "sync": "throughput and step time within ~2%, the generation tail within ~4%, idle per pool within ~2 points "
            "(averaged over seeds: one seed's step tail swings with whether its batch reaches the length cap)",
    "async": "throughput and step time within ~2%, staleness within ~1.5%, idle per pool "
             "within ~2 points (steady state, averaged over seeds; per seed an aggregate run is noisier, give it "
             "more steps or seeds)",
}


@dataclass(frozen=True)
class AggregatePlan:
    """What an aggregate run simulates: `reduced` (1/factor of the generation load) on engines/factor engines."""

    factor: int
    engines: int  # rollout engines of the full scenario
    reduced: Scenario


def _divisors_desc(n: int) -> list[int]:
    return sorted({d for i in range(1, math.isqrt(n) + 1) if n % i == 0 for d in (i, n // i)}, reverse=True)


def family(scn: Scenario) -> str:
    return "sync" if scn.schedule.batch_at_once else "async"


def min_engines(scn: Scenario) -> int:
    """Rollout engines an aggregate run simulates at least: simulation.engines, or the schedule family's default."""
    given = scn.simulation.engines
    return given if given is not None else DEFAULT_ENGINES[family(scn)]


def plan(scn: Scenario) -> tuple[AggregatePlan | None, str]:
    """The aggregate plan of a (placement-resolved) scenario, or None and why it runs exactly instead."""
    spec, algo = scn.schedule, scn.algorithm
    if spec.kind not in SUPPORTED_KINDS:
        return None, f"schedule kind {spec.kind!r} (aggregate mode covers {', '.join(SUPPORTED_KINDS)})"
    for option in ("resplit", "tail_reshard", "lora", "routing"):
        if getattr(spec, option, None) is not None:
            return None, f"schedule.{option} is set"
    if getattr(spec, "verl_rule", False) or getattr(spec, "require_batches", None) is not None:
        return None, "verl fully_async's staleness rule"
    if scn.roles["rollout"].engine is not None and scn.roles["rollout"].engine.disaggregation is not None:
        return None, ("prefill/decode disaggregation: a share of the decode engines would need its own share of "
                      "the prefill pool, which the engine counts rarely divide into")
    if "reward" in scn.roles and scn.roles["reward"].engine is not None:
        return None, "an LLM judge serves the reward"
    if scn.workload.length_trace is not None:
        return None, "lengths replayed from a trace"
    tp = scn.layout("rollout").engine_gpus
    engines = scn.role_gpus("rollout") // tp
    sizes = [engines, algo.prompts_per_step]
    for name in BATCH_KNOBS:
        value = getattr(spec, name, None)
        if value is not None:
            sizes.append(value)
    common = math.gcd(*sizes)
    want = min_engines(scn)
    groups = algo.prompts_per_step
    factor = next((d for d in _divisors_desc(common) if engines // d >= want and groups // d >= MIN_GROUPS), 1)
    if factor == 1:
        return None, (f"{engines} rollout engines: no share of them leaves at least {want} engines and "
                      f"{MIN_GROUPS} prompt groups per step and divides the batch sizes {sizes[1:]}")
    return AggregatePlan(factor, engines, _reduced(scn, factor)), ""


def _reduced(scn: Scenario, f: int) -> Scenario:
    """The scenario with 1/f of the generation load (pools, roles and layouts unchanged)."""
    algo = scn.algorithm.model_copy(update={"prompts_per_step": scn.algorithm.prompts_per_step // f})
    spec_update = {}
    for name in BATCH_KNOBS:
        value = getattr(scn.schedule, name, None)
        if value is not None:
            spec_update[name] = value // f
    schedule = scn.schedule.model_copy(update=spec_update)
    envs = scn.environments
    pools = {name: p.model_copy(update={"concurrency": max(1, math.ceil(p.concurrency / f))})
             for name, p in envs.pools.items()}
    environments = envs.model_copy(update={"pools": pools})
    return scn.model_copy(update={"algorithm": algo, "schedule": schedule, "environments": environments})


class TailSubsample:
    """A synchronous batch's lengths drawn at the full size, subsampled by rank keeping the longest group."""

    def __init__(self, lengths, factor: int, rng: np.random.Generator):
        self.lengths, self.factor, self.rng = lengths, factor, rng
        # per draw, oldest first: the sequence lengths (prompt + response) of the rows not simulated, for the
        # trainer's full batch (TrainerBatch); a few at most (one-step-off trains a step behind its draws)
        self.rest: deque[np.ndarray] = deque(maxlen=4)

    def __call__(self, n_groups: int, group_size: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        f = self.factor
        prompt, response = self.lengths(n_groups * f, group_size, step)
        longest = response.reshape(n_groups * f, group_size).max(axis=1)
        # groups, longest first; ties (every group holding a sequence at the cap) in random order: in drawn
        # order, picks every f-th would spread the tied groups evenly over the engines' chunks, and every
        # engine would hold a capped sequence (verl-generation-flat x8: all 16 engines against 85% of 128)
        shuffled = self.rng.permutation(len(longest))
        order = shuffled[np.argsort(-longest[shuffled], kind="stable")]
        picks = order[np.arange(n_groups) * f + int(self.rng.integers(f))]
        picks[0] = order[0]  # the batch's longest group always among the simulated ones
        picks = np.sort(picks)  # keep the drawn order (dispatch is by position)
        rows = (picks[:, None] * group_size + np.arange(group_size)).ravel()
        rest = np.ones(len(prompt), dtype=bool)
        rest[rows] = False
        self.rest.append(prompt[rest] + response[rest])
        return prompt[rows], response[rows]


def _gpd_tail(excess: np.ndarray) -> tuple[float, float]:
    """(scale, shape) of a generalized Pareto tail fitted to threshold excesses by probability-weighted
    moments (Hosking & Wallis 1987), the shape clamped to [-1, 0]: finishing times have a bounded tail
    (lengths are capped) or an exponential one, never a heavier one."""
    y = np.sort(excess)
    m = len(y)
    a0 = float(y.mean())
    a1 = float(np.mean(y * (1 - (np.arange(1, m + 1) - 0.35) / m)))
    if a0 <= 0 or a0 - 2 * a1 <= 0:
        return a0, 0.0
    shape = min(0.0, max(-1.0, 2 - a0 / (a0 - 2 * a1)))  # Hosking's k = -shape
    return a0 * (1 - shape), shape  # the scale of a GPD with this mean excess


def tail_extension(reqs: list, start_s: float, engines: int, factor: int) -> float:
    """Seconds the slowest of `engines` x `factor` engines is expected to finish after the slowest of `engines`.

    The engine holding the batch's longest sequence is simulated (TailSubsample keeps it); the other
    N - 1 engines are represented by the k - 1 others. Extreme-value scaling of their finishing times
    (each engine's last request of the batch, from `start_s`): the excesses of the top half over the
    median are fitted a generalized Pareto tail (scale s, shape x in [-1, 0]: bounded to exponential), whose
    quantile at 1 - 1/n gives the expected slowest of n, Q(n) = u + s/x ((p n)^x - 1) (s ln(p n) for x = 0;
    p the share above the threshold u). The slowest of the N - 1 lies Q(N - 1) - Q(k - 1) beyond the
    slowest of the k - 1; the step ends at the later of that and the longest sequence's engine. Zero with
    fewer than five engines that finished work.
    """
    finish: dict[str, float] = {}
    longest: tuple[int, str | None] = (-1, None)
    for r in reqs:
        if r.engine is not None and r.finished_s is not None:
            finish[r.engine] = max(finish.get(r.engine, start_s), r.finished_s)
            if r.max_new_tokens > longest[0]:
                longest = (r.max_new_tokens, r.engine)
    k = len(finish)
    if k < 5 or factor <= 1:
        return 0.0
    slowest = max(finish.values()) - start_s
    held = finish.pop(longest[1], start_s) - start_s  # the engine with the batch's longest sequence
    others = np.sort(np.fromiter(finish.values(), float, len(finish))) - start_s
    m = max(3, len(others) // 2)
    scale, shape = _gpd_tail(others[-m:] - others[-m - 1])
    share = m / len(others)

    def quantile(n: int) -> float:  # above the threshold
        if shape == 0.0:
            return scale * math.log(share * n)
        return scale / shape * ((share * n) ** shape - 1)

    others_max = others[-1] + max(0.0, quantile(k * factor - 1) - quantile(len(others)))
    return max(0.0, max(held, others_max) - slowest)


class TrainerBatch:
    """The full-size batch the trainer takes in an aggregate run: an asynchronous step's share with f - 1 shares
    drawn from its quantile function, shuffled piece by piece in the share's order; a synchronous batch drawn at
    full size (TailSubsample), the simulated share with the rows not simulated, shuffled.

    A synchronous share holds the batch's longest group (TailSubsample): repeated f times, the batch would
    train it f times, and f mini-batches would wait for a rank holding one of its longest sequences (verl DAPO
    7B at 64 H20, a 20k-token cap over a 735-token mean: the step 4% longer than exact). The rest of the draw
    is the batch the exact run would train, up to what generation cut short.

    An asynchronous share is not drawn at full size (its groups are admitted one by one), so the rest is
    resampled from it. Not repeated: the share's exact copies put each of its longest sequences into f
    mini-batches at once, and a trainer-bound run's update took 6-8% longer than the exact run's on the same
    tokens (AReaL 1.5B at 96 H800, 1/8 share: 59.8 s against 55.3 s). Nor drawn from it with replacement: at a
    small share each length comes ~f times, and the balanced deal of sequences to ranks (longest first, to the
    lightest) evens the ranks out with equal lengths better than it can with distinct ones (ASearcher 7B at
    1,024 GPUs, 1/64 share: the update 3.5% faster per token than the full batch's, on the exact run's own
    batches). The rest is drawn from the share's quantile function interpolated between its order statistics:
    distinct lengths in the share's range, its ties (a length cap) kept (-0.9% there; AReaL 1.5B, 1/2 share: the
    three ways alike). Shuffled, because the rows not simulated (or resampled) would
    otherwise all sit at the batch's end, in mini-batches of their own. Shares of earlier steps are not
    mixed in: while a run settles (the first steps of an asynchronous one) or lengths drift, they would lag.
    The price is noise: 1/f as many distinct lengths as the exact run trains on.

    An asynchronous batch is in the order its groups finished, short ones first, and the trainer cuts it into
    contiguous mini-batches: shuffled whole, the exact run's own batch takes 2.1% longer to train (NeMo-RL-style
    in-flight updates, 2,048 sequences on 8 H800; AReaL 7B: 1.5%). So the share is resampled in `segments`
    contiguous pieces, each from its own quantile function and shuffled within itself, in the share's order. A
    piece is drawn from its own rows only, so it cannot be finer than the share affords: a mini-batch's rows come
    from at most half as many share rows (segments <= 2 x mini-batches / f); past that its near-equal lengths
    even the ranks out (AReaL 1.5B, 1/8 share, four pieces: 1.1% fast). On the exact runs' batches: in-flight
    updates at 1/2, four pieces, +2.0% -> +0.0%; AReaL 7B at 1/4, two pieces, +1.2% -> +0.3%.
    """

    def __init__(self, factor: int, rng: np.random.Generator, drawn: TailSubsample | None = None, segments: int = 1):
        self.factor, self.rng, self.drawn, self.segments = factor, rng, drawn, segments

    def __call__(self, seq_lens: np.ndarray) -> np.ndarray:
        if self.drawn is not None and self.drawn.rest:
            return self.rng.permutation(np.concatenate([seq_lens, self.drawn.rest.popleft()]))
        pieces = [piece for piece in np.array_split(seq_lens, self.segments) if len(piece)] or [seq_lens]
        return np.concatenate([self.rng.permutation(np.concatenate([piece, self._resampled(piece)]))
                               for piece in pieces])

    def _resampled(self, seq_lens: np.ndarray) -> np.ndarray:
        """(f - 1) x n lengths drawn from the share's quantile function, interpolated between its order statistics."""
        n = len(seq_lens)
        if n == 0:
            return seq_lens
        ranked = np.sort(seq_lens)
        at = (np.arange(n) + 0.5) / n
        drawn = np.interp(self.rng.random((self.factor - 1) * n), at, ranked)
        return np.rint(drawn).astype(seq_lens.dtype)


class StratifiedDraws:
    """A share's planned turns per trajectory drawn as the full fleet's are: f x n draws, one from each block of f
    by rank (a random offset), shuffled.

    The exact run draws a step's turns for N engines' trajectories, and their mean is all but fixed; drawn alone,
    the share's 1/f as many trajectories carry sqrt(f) times the noise in the step's tokens (ASearcher 7B at 1,024
    GPUs, a 1/64 share of 256 trajectories a step: tokens per step with a 5% spread against the exact run's 0.8%),
    and a trainer-bound step's time with them. A systematic sample by rank keeps the full draw's spread over the
    turn counts; shuffled, every draw still has the law's distribution. The draws are made a block at a time (at
    least `block`, one step's share) per policy version (the law can drift); a new version discards what is left.
    """

    def __init__(self, draw, factor: int, rng: np.random.Generator, block: int):
        self.draw, self.factor, self.rng, self.block = draw, factor, rng, block
        self.pool = np.empty(0, dtype=np.int64)
        self.version: int | None = None

    def __call__(self, n: int, step: int) -> np.ndarray:
        if step != self.version:
            self.pool, self.version = self.pool[:0], step
        if len(self.pool) < n:
            size = max(n - len(self.pool), self.block)
            full = np.sort(self.draw(size * self.factor, step))
            picks = full[np.arange(size) * self.factor + int(self.rng.integers(self.factor))]
            self.pool = np.concatenate([self.pool, self.rng.permutation(picks)])
        out, self.pool = self.pool[:n], self.pool[n:]
        return out


def attach(schedule, plan_: AggregatePlan) -> None:
    """After the schedule is built on the reduced scenario: the trainer's full batch; synchronous batches keep
    the full batch's tail; agentic trajectories' turns are drawn stratified."""
    scn = plan_.reduced
    if scn.workload.agent is not None and hasattr(schedule, "turns"):
        block = scn.algorithm.prompts_per_step * scn.algorithm.samples_per_prompt
        schedule.turns = StratifiedDraws(schedule.turns, plan_.factor, schedule.env.rng, block)
    drawn = None
    if schedule.scenario.schedule.batch_at_once and hasattr(schedule, "lengths"):  # tail subsampling
        drawn = schedule.lengths = TailSubsample(schedule.lengths, plan_.factor, schedule.env.rng)
    costs = getattr(schedule, "costs", None)  # none: a generation-only schedule trains nothing
    mini_batches = costs.mini_batches if costs is not None else 1
    segments = max(1, min(mini_batches, 2 * mini_batches // plan_.factor))  # see TrainerBatch
    schedule.full_batch = TrainerBatch(plan_.factor, schedule.env.rng, drawn, segments)


def scale_steps(steps: pd.DataFrame, f: int) -> pd.DataFrame:
    steps = steps.copy()
    for col in SCALED_COLUMNS:
        if col in steps.columns:
            steps[col] = steps[col] * f
    return steps


TOOL_COUNT_COLUMNS = ("calls", "ok_calls", "failed_calls", "attempts", "failed_attempts", "timeouts")


def scale_tools(tools: pd.DataFrame | None, f: int) -> pd.DataFrame | None:
    """Per-tool call counts of the simulated share, scaled back to the whole fleet."""
    if tools is None:
        return None
    tools = tools.copy()
    for col in TOOL_COUNT_COLUMNS:
        if col in tools.columns:
            tools[col] = tools[col] * f
    return tools


def scale_counts(values: dict, f: int) -> dict:
    return {k: v * f if isinstance(v, int | float) and not isinstance(v, bool) else v for k, v in values.items()}


def meta(plan_: AggregatePlan | None, reason: str, requested: str) -> dict:
    """The meta.json keys saying which mode ran and how far it is expected to be from the exact mode."""
    if plan_ is None:
        out = {"simulation_mode": "exact"}
        if requested == "aggregate":
            out["aggregate_fallback"] = f"ran exactly: {reason}"
        return out
    scn = plan_.reduced
    default = "the default for a synchronous schedule" if family(scn) == "sync" else \
        "the default for an asynchronous schedule"
    source = "simulation.engines" if scn.simulation.engines is not None else default
    rule = (f"the largest share leaving at least {min_engines(scn)} engines ({source}) and {MIN_GROUPS} prompt "
            "groups per step")
    return {"simulation_mode": "aggregate", "aggregate_factor": plan_.factor,
            "aggregate_engines_simulated": plan_.engines // plan_.factor, "aggregate_engines": plan_.engines,
            "aggregate_share_rule": rule, "aggregate_expected_difference": EXPECTED_DIFFERENCE[family(scn)]}


def describe_mode(meta_: dict) -> str | None:
    """One line for the screen, or None for an exact run that was not asked to aggregate."""
    if meta_.get("simulation_mode") == "aggregate":
        rule = f", {meta_['aggregate_share_rule']}" if "aggregate_share_rule" in meta_ else ""
        return (f"aggregate mode: {meta_['aggregate_engines_simulated']} of {meta_['aggregate_engines']} rollout "
                f"engines simulated (1/{meta_['aggregate_factor']} of the load{rule}); expected vs exact: "
                f"{meta_['aggregate_expected_difference']}")
    if "aggregate_fallback" in meta_:
        return f"aggregate mode not applicable, {meta_['aggregate_fallback']}"
    return None
