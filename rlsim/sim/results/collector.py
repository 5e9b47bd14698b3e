"""RunCollector: the one way a schedule reports what happened in a run.

Beside the GPU ledger (who was busy when) on the simulation environment, the collector takes typed
reports: one row per RL step whose every column is declared here once (unit, and whether it is a
per-step amount or a running total), and each sample's life (started, finished, trained or
discarded), each multi-turn trajectory's end, the token accounting of asynchronous runs. `simulate()`
builds the `Result` from the collector and the ledger alone: it never looks inside a schedule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlsim.sim.results.lifecycle import (
    COMPLETED,
    DISCARDED,
    OUTCOME,
    OUTCOMES,
    RUNNING,
    TERMINAL,
    TRAINED,
    SampleLife,
    SampleState,
)

PER_STEP = "per-step"  # an amount of this step alone: summed over steps
CUMULATIVE = "cumulative"  # a running total since the start: its last value is the run's
LABEL = "label"  # identifies or describes the step: never aggregated by adding


@dataclass(frozen=True)
class Column:
    name: str
    unit: str
    kind: str
    doc: str


TIMING_PREFIX = "timing_s/"  # timing_s/<phase>: seconds the step spent in that phase (per step)
# mfu/<phase>: the model phase's achieved share of its GPUs' peak BF16 FLOP/s in the step (a result of the
# operator-priced pass, never an input): 6N per trained token plus causal attention (x epochs), a third of that
# for a forward pass, over the pass's seconds x the role's GPUs x peak. 0 when the step ran no such pass.
MFU_PREFIX = "mfu/"

STEP_COLUMNS: dict[str, Column] = {c.name: c for c in (
    Column("step", "", LABEL, "RL step index (warm-up steps first)"),
    Column("warmup", "", LABEL, "warm-up step: simulated, left out of the summary"),
    Column("start_s", "s", LABEL, "simulated time the step started"),
    Column("end_s", "s", LABEL, "simulated time the step ended"),
    Column("samples", "samples", PER_STEP, "samples trained (generated, for generation-only) in the step"),
    Column("prompt_tokens", "tokens", PER_STEP, "prompt tokens of the step's samples"),
    Column("response_tokens", "tokens", PER_STEP, "response tokens (incl. tool observations) of the samples"),
    Column("tokens", "tokens", PER_STEP, "prompt + response tokens (HybridFlow's throughput numerator)"),
    Column("response_length/mean", "tokens", LABEL, "mean response length of the step's samples"),
    Column("response_length/max", "tokens", LABEL, "longest response of the step"),
    Column("response_length/min", "tokens", LABEL, "shortest response of the step"),
    Column("policy_version", "version", LABEL, "trainer's policy version when the step ended"),
    Column("staleness/mean", "trainer steps", LABEL, "mean over the step's samples of trainer - oldest token version"),
    Column("staleness/max", "trainer steps", LABEL, "largest staleness of the step's samples"),
    Column("staleness/p50", "trainer steps", LABEL, "median staleness of the step's samples"),
    Column("staleness/p90", "trainer steps", LABEL, "90th percentile staleness of the step's samples"),
    Column("preemptions", "count", PER_STEP, "KV-cache preemptions on the rollout engines during the step"),
    Column("staleness/token_mean", "trainer steps", LABEL, "mean over the step's generated tokens of trainer - token "
           "version"),
    Column("staleness/token_max", "trainer steps", LABEL, "largest trainer - token version among the step's tokens"),
    Column("tokens/multi_version_share", "fraction", LABEL, "share of the step's generated tokens in sequences that "
           "span >1 policy version"),
    Column("samples/multi_version", "samples", PER_STEP, "trained samples whose tokens span >1 policy version"),
    Column("samples/dropped_stale", "samples", CUMULATIVE, "samples dropped for exceeding the staleness bound"),
    Column("trainer/prompt_groups", "groups", PER_STEP, "prompt groups the trainer consumed"),
    Column("trainer/optimizer_updates", "count", PER_STEP, "optimizer updates of the step"),
    Column("weight_sync/bytes", "bytes", PER_STEP, "bytes the step's weight syncs moved (LoRA runs: the adapter)"),
    Column("routing/affinity_hits", "requests", PER_STEP, "group-affinity routing: requests sent to the engine "
           "holding their group's prompt"),
    Column("routing/prefill_saved_tokens", "tokens", PER_STEP, "prompt tokens those requests did not prefill"),
    Column("routing/load_imbalance", "ratio", LABEL, "max / mean requests per engine, mean over the step's routing "
           "decisions"),
    Column("lending/lent", "count", PER_STEP, "verl V1 switch: 1 if the trainer's GPUs joined generation this step"),
    Column("lending/benefit_s", "s", LABEL, "verl V1 switch: benefit_seconds of the step's decision"),
    Column("lending/switch_cost_s", "s", LABEL, "verl V1 switch: effective_switch_cost_seconds of the decision"),
    Column("resplit/trainer_gpus", "GPUs", LABEL, "online re-splitting: GPUs training after the step"),
    Column("resplit/rollout_gpus", "GPUs", LABEL, "online re-splitting: GPUs generating after the step"),
    Column("resplit/applied", "count", PER_STEP, "online re-splitting: 1 if the split changed after the step"),
    Column("replay/evicted_stale", "groups", PER_STEP, "verl V1 replay buffer: groups evicted for spanning more "
           "than max_off_policy_threshold weight versions"),
    Column("replay/evicted_filtered", "groups", PER_STEP, "verl V1 replay buffer: groups evicted by the DAPO filter "
           "(all rewards equal)"),
    Column("replay/evicted_failed", "groups", PER_STEP, "verl V1 replay buffer: groups evicted for a failed "
           "trajectory"),
    Column("replay/refilled", "groups", PER_STEP, "verl V1 replay buffer: fresh prompts fed for evicted groups"),
    Column("elastic/active", "count", LABEL, "elastic replicas: 1 if the trainer's GPUs generate after the step"),
    Column("elastic/deactivate_ratio", "fraction", LABEL, "elastic replicas: the policy's deactivate_ratio after the "
           "step"),
    Column("elastic/benefit_s", "s", LABEL, "elastic replicas: the estimated wait the step's activation decision "
           "weighed (0 when none was made)"),
    Column("elastic/switch_cost_s", "s", LABEL, "elastic replicas: the switch cost it weighed against"),
    Column("trainer/idle_ratio", "fraction", LABEL, "share of the step the trainer waited for rollouts"),
)}


# Summary keys beside the glossary of rlsim/sim/results/metrics.py, declared once like the step columns:
# how much of the busy time is useful (rlsim/sim/results/efficiency.py). Each maps a pool or "pool/phase"
# to a fraction in [0, 1].
SUMMARY_COLUMNS: dict[str, Column] = {c.name: c for c in (
    Column("tail_share_by_pool", "fraction", LABEL, "share of a pool's busy GPU-seconds in which an engine "
           "decodes fewer sequences than a quarter of its max_num_seqs (the thin tail of a batch)"),
    Column("mfu_by_phase", "fraction", LABEL, "achieved / peak BF16 FLOP/s of a pool's GPUs in a phase "
           "(keys pool/phase; the cost model's FLOP counts)"),
    Column("mbu_by_phase", "fraction", LABEL, "achieved / peak HBM bytes/s of a pool's GPUs while decoding "
           "(keys pool/generate: weights once per step plus the running KV cache)"),
)}


def column_kind(name: str) -> str:
    """A declared column's kind; every `timing_s/<phase>` column is a per-step duration, every `mfu/<phase>` a
    fraction of the step (a label: never summed over steps)."""
    if name.startswith(TIMING_PREFIX):
        return PER_STEP
    if name.startswith(MFU_PREFIX):
        return LABEL
    return STEP_COLUMNS[name].kind


SAMPLE_COLUMNS = [
    "sample_id", "step", "engine", "prompt_tokens", "response_tokens", "arrival_s", "admitted_s",
    "finished_s", "preemptions", "oldest_version", "newest_version", "staleness", "fate",
]
TRAJECTORY_COLUMNS = [
    "trajectory", "engine", "turns", "turns_planned", "tool_calls", "prompt_tokens", "generated_tokens",
    "observation_tokens", "started_s", "finished_s", "outcome", "reason",
]


def token_accounting(generated: int, trained: int, discarded: int) -> dict[str, int]:
    """tokens generated = trained + discarded + still in flight (no token is lost or counted twice)."""
    return {"tokens_generated": generated, "tokens_trained": trained, "tokens_discarded": discarded,
            "tokens_in_flight": generated - trained - discarded}


class RunCollector:
    """Typed reports from a schedule; read back as plain rows by `simulate()`."""

    def __init__(self) -> None:
        self.step_rows: list[dict] = []
        self.samples: dict[int, SampleLife] = {}
        self.trained_order: list[int] = []  # sample ids in the order they were trained
        self.trajectory_rows: list[tuple] = []
        self.token_totals: dict[str, int] = {}
        self.tool_runner = None
        self.engines: list = []
        self.on_step: Callable[[int], None] | None = None  # progress hook: steps reported so far

    # ------------------------------------------------------------------ steps

    def step(self, row: dict) -> None:
        """One row per RL step; every column must be declared (STEP_COLUMNS, timing_s/<phase> or mfu/<phase>)."""
        unknown = [k for k in row if not k.startswith((TIMING_PREFIX, MFU_PREFIX)) and k not in STEP_COLUMNS]
        if unknown:
            raise KeyError(f"undeclared step column(s) {unknown}: declare them in rlsim/sim/results/collector.py")
        self.step_rows.append(row)
        if self.on_step is not None:
            self.on_step(len(self.step_rows))

    # ------------------------------------------------------------------ samples

    def sample_started(self, sample_id: int, step: int | None, prompt_tokens: int, arrival_s: float) -> None:
        if sample_id in self.samples:
            raise ValueError(f"sample {sample_id} started twice")
        self.samples[sample_id] = SampleLife(sample_id, step, prompt_tokens, arrival_s)

    def sample_finished(self, sample_id: int, request, response_tokens: int | None = None,
                        versions: dict[int, int] | None = None) -> None:
        """Its generation ended (the last request that served it gives engine and timing)."""
        rec = self.samples[sample_id]
        versions = request.version_tokens if versions is None else versions
        rec.engine = request.engine
        rec.response_tokens = request.generated if response_tokens is None else response_tokens
        rec.admitted_s, rec.finished_s = request.admitted_s, request.finished_s
        rec.preemptions = request.preemptions
        rec.oldest_version = min(versions) if versions else None
        rec.newest_version = max(versions) if versions else None
        if rec.state is RUNNING or rec.state is COMPLETED:  # finished unless its request never did
            rec.state = COMPLETED if rec.finished_s is not None else RUNNING

    def sample_trained(self, sample_id: int, step: int, version: int) -> None:
        rec = self.samples[sample_id]
        if rec.state in TERMINAL:
            raise ValueError(f"sample {sample_id} trained after it was {rec.fate}")
        rec.trained_step, rec.trained_version, rec.state = step, version, TRAINED
        self.trained_order.append(sample_id)

    def sample_discarded(self, sample_id: int, state: SampleState, reason: str) -> None:
        """It ended failed, aborted or dropped (the first such report counts; a trained sample stays trained)."""
        if state not in DISCARDED:
            raise ValueError(f"sample {sample_id}: {state.value} is not a discarded state")
        rec = self.samples[sample_id]
        if rec.state not in TERMINAL:
            rec.state, rec.reason = state, reason

    def staleness_values(self) -> list[float]:
        """Per trained sample, in training order: trainer version - oldest token version."""
        return [self.samples[i].staleness for i in self.trained_order]

    def sample_rows(self) -> list[tuple]:
        return [
            (r.sample_id, r.trained_step if r.trained_step is not None else r.step, r.engine, r.prompt_tokens,
             r.response_tokens, r.arrival_s, r.admitted_s, r.finished_s, r.preemptions, r.oldest_version,
             r.newest_version, r.staleness, r.fate)
            for r in self.samples.values()
        ]

    # ------------------------------------------------------------------ trajectories, tokens, entities

    def trajectory(self, t, state: SampleState | None = None, reason: str | None = None) -> None:
        """A multi-turn trajectory's end: how far it got and how it ended (its sample's state, if it has one)."""
        self.trajectory_rows.append((
            t.tid, t.engine, t.turns, t.turns_planned, t.tool_calls, t.prompt_tokens, t.generated,
            t.observation_tokens, t.started_s, t.finished_s, OUTCOME[state or t.state], reason or t.reason,
        ))

    def tokens(self, generated: int, trained: int, discarded: int) -> None:
        """Asynchronous runs: every generated token is trained, discarded or still in flight."""
        self.token_totals = token_accounting(generated, trained, discarded)

    def trajectory_counts(self) -> dict[str, int]:
        """The `trajectories_<outcome>` summary keys and `trajectories_launched`."""
        if not self.trajectory_rows:
            return {}
        counts = dict.fromkeys(OUTCOMES, 0)
        for row in self.trajectory_rows:
            counts[row[10]] += 1
        launched = {"trajectories_launched": len(self.trajectory_rows)}
        return {f"trajectories_{k}": v for k, v in counts.items()} | launched

    def entities(self, engines: list, tools=None) -> None:
        """The engines (for their batch/KV statistics) and the tool runner (per-tool call statistics)."""
        self.engines = list(engines)
        self.tool_runner = tools
