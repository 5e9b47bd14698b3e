"""A run's prompt and response lengths, drawn from the scenario's distributions with the run's generator.

Every schedule draws a step's (or a group's) lengths through `LengthSampler` / `sample_group_lengths`:
`n_groups` prompts of `group_size` answers each, groups contiguous. Each distribution draws its own
lengths (rlsim/sim/scenario/schema/lengths.py: `sample`, `sample_groups`, `sampler`); response lengths
can carry the shape of real RL generation (docs/scenarios.md, Response lengths: shaping the tail), or
(prompt, response) pairs can be replayed from a trace, handled here.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from rlsim.sim.csv_inputs import read_length_trace
from rlsim.sim.scenario.schema import WorkloadSpec


@cache
def _trace_pairs(path: str) -> tuple[np.ndarray, np.ndarray]:
    prompts, responses = read_length_trace(path)
    return np.asarray(prompts, dtype=np.int64), np.asarray(responses, dtype=np.int64)


def sample_group_lengths(
    workload: WorkloadSpec, n_groups: int, group_size: int, step: int, rng: np.random.Generator, offset: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """(prompt, response) lengths of n_groups prompts x group_size answers, groups contiguous.

    Distributions: one prompt length per group, repeated; the prompt lengths are drawn before the
    responses (the order every schedule always used). A length trace gives each sample one row:
    sequential from row `offset` (cycling) or rows drawn with `rng` (order: shuffle).
    """
    n = n_groups * group_size
    trace = workload.length_trace
    if trace is not None:
        prompts, responses = _trace_pairs(trace.path)
        if trace.order == "sequential":
            idx = (offset + np.arange(n)) % len(prompts)
        else:
            idx = rng.integers(0, len(prompts), size=n)
        return prompts[idx], responses[idx]
    prompt = np.repeat(workload.prompt_length.sample(rng, n_groups), group_size)
    return prompt, workload.response_length.sample_groups(rng, n_groups, group_size, step)


class LengthSampler:
    """A run's length source: `sample_group_lengths` with the trace position kept between calls."""

    def __init__(self, workload: WorkloadSpec, rng: np.random.Generator):
        self.workload = workload
        self.rng = rng
        self.cursor = 0  # next trace row (sequential replay)

    def __call__(self, n_groups: int, group_size: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        out = sample_group_lengths(self.workload, n_groups, group_size, step, self.rng, self.cursor)
        self.cursor += n_groups * group_size
        return out


class TurnSampler:
    """A run's planned turns per trajectory (workload.agent.turns), at the policy version `step` (drift).

    One source for every agentic schedule, as LengthSampler is for lengths, so the aggregate mode can
    stratify the share's draws (rlsim/sim/aggregate.py, StratifiedDraws)."""

    def __init__(self, workload: WorkloadSpec, rng: np.random.Generator):
        self.turns = workload.agent.turns if workload.agent is not None else None
        self.rng = rng

    def __call__(self, n: int, step: int) -> np.ndarray:
        return self.turns.sample_groups(self.rng, n, 1, step)
