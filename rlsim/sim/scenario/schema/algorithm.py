"""Scenario section `algorithm`: the RL algorithm and its batch shape."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_EPOCHS,
    MAX_PROMPTS_PER_STEP,
    MAX_SAMPLES_PER_PROMPT,
    MAX_TOKENS,
)
from rlsim.sim.scenario.schema.base import Strict

# ---------------------------------------------------------------- algorithm


class AlgorithmSpec(Strict):
    kind: Literal["generate", "ppo", "grpo", "dapo", "remax", "rloo"] = "grpo"
    prompts_per_step: int = Field(
        default=512, gt=0, le=MAX_PROMPTS_PER_STEP, description="verl data.train_batch_size"
    )
    samples_per_prompt: int = Field(
        default=1, gt=0, le=MAX_SAMPLES_PER_PROMPT, description="verl actor_rollout_ref.rollout.n"
    )
    mini_batches: int = Field(default=1, gt=0, le=MAX_EPOCHS, description="Optimizer updates per epoch")
    epochs: int = Field(default=1, gt=0, le=MAX_EPOCHS, description="PPO epochs over each batch")
    rule_reward_s_per_sample: float = Field(
        default=0.002, ge=0,
        description="CPU seconds of a rule-based reward per sample, used when there is no reward role (assumed)",
    )
    rule_reward_workers: int = Field(
        default=16, gt=0, le=MAX_PROMPTS_PER_STEP,
        description="Parallel CPU reward workers (assumed)"
    )
    judge_output_tokens: int = Field(
        default=64, gt=0, le=MAX_TOKENS,
        description="Tokens an LLM judge generates per sample (reward role with an engine; assumed)"
    )
    launch_reward_fn_async: bool = Field(
        default=False,
        description="verl: compute the rule reward concurrently with the forward passes (default: in the driver, "
        "before them)",
    )

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt


