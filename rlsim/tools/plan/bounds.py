"""Analytic lower bounds on a candidate's step time, so candidates that cannot win are never simulated.

Generation: every response token is decoded by some engine, and an engine decodes at most
`max_num_seqs` tokens per step, a step costing at least the simulator's decode step at zero context
(with the engines' expert-parallel all-to-alls);
a synchronous step also waits for its longest response, one token per step at batch 1 (the longest a step
of n samples reaches with probability ~95%: the 1 - 3/n quantile, since (1 - 3/n)^n ~ e^-3). Training: the
actor's FLOPs at the hardware's peak (no MFU), over its GPUs. A step lasts at least the sum of the
two when rollout and actor share GPUs, the larger of the two otherwise. Lengths are the workload's
means from a fixed-seed sample, so the bound is on the expected step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlsim.sim.api import Scenario
from rlsim.sim.costs import decode_step_time, training_flops

_SAMPLE = 4096


@dataclass(frozen=True)
class StepWork:
    """What one step must do, from the workload's distributions (means over a fixed-seed sample)."""

    samples: int
    prompt_mean: float
    response_mean: float
    response_max: float  # the longest response a step of `samples` reaches with probability ~95%
    seq_sq_mean: float  # mean of (prompt + response)^2, for attention FLOPs

    @property
    def tokens(self) -> float:
        return self.samples * (self.prompt_mean + self.response_mean)


def step_work(scn: Scenario, seed: int = 0) -> StepWork | None:
    """None for workloads the bound does not cover (multi-turn agents, length traces)."""
    w = scn.workload
    if w.agent is not None or w.length_trace is not None:
        return None
    rng = np.random.default_rng(seed)
    prompts = w.prompt_length.sample(rng, _SAMPLE).astype(float)
    responses = w.response_length.sample(rng, _SAMPLE).astype(float)
    n = scn.algorithm.samples_per_step
    longest = float(np.quantile(responses, max(0.0, 1.0 - 3.0 / n)))  # not the whole sample's: n may be << 4096
    return StepWork(n, float(prompts.mean()), float(responses.mean()), longest,
                    float(((prompts + responses) ** 2).mean()))


def generation_seconds(scn: Scenario, work: StepWork, synchronous: bool) -> float:
    ro = scn.roles["rollout"]
    hw = scn.cluster.pools[ro.pool].profile()
    model = ro.engine.shape(scn.models[ro.model])  # the engines' weight and KV formats (quantised rollout)
    tp = scn.layout("rollout").engine_gpus
    engines = max(1, scn.role_gpus("rollout") // tp)
    layout = {"overheads": ro.engine.overheads(hw), "ep": ro.parallel.ep,
              "gpus_per_node": scn.cluster.pools[ro.pool].gpus_per_node}
    batch = ro.engine.max_num_seqs
    full = decode_step_time(model, hw, tp, batch, 0.0, **layout)
    seconds = work.samples * work.response_mean * full / (engines * batch)
    if synchronous:
        seconds = max(seconds, work.response_max * decode_step_time(model, hw, tp, 1, 0.0, **layout))
    if ro.engine.speculative is not None:  # at best every proposed token is accepted at a plain step's price
        seconds /= ro.engine.speculative.k + 1
    return seconds


def training_seconds(scn: Scenario, work: StepWork) -> float:
    actor = scn.roles["actor"]
    hw = scn.cluster.pools[actor.pool].profile()
    model = scn.models[actor.model]
    flops = training_flops(model, work.tokens, work.samples * work.seq_sq_mean) * scn.algorithm.epochs
    return flops / (scn.role_gpus("actor") * hw.peak_flops)


def step_lower_bound(scn: Scenario, work: StepWork | None) -> dict[str, float]:
    """{step_s, generation_s, training_s, throughput_tokens_per_s (an upper bound)}; {} when not covered."""
    if work is None or "actor" not in scn.roles or not scn.schedule.trains:
        return {}
    shared = scn.roles_share_gpus("rollout", "actor")
    synchronous = scn.schedule.synchronous
    gen = generation_seconds(scn, work, synchronous)
    train = training_seconds(scn, work)
    step = gen + train if shared or synchronous else max(gen, train)
    return {"step_s": step, "generation_s": gen, "training_s": train, "throughput_tokens_per_s": work.tokens / step}
