"""What every schedule provides: a SimPy process that runs the RL steps and leaves one row per step."""

from __future__ import annotations

from abc import ABC, abstractmethod

from rlsim.engine.environment import SimEnvironment
from rlsim.scenario.schema import Scenario


class Schedule(ABC):
    """Builds its entities from a scenario in __init__, then `run()` is the driving SimPy process."""

    def __init__(self, scenario: Scenario, env: SimEnvironment):
        self.scenario = scenario
        self.env = env
        self.step_rows: list[dict] = []
        self.engines: list = []
        self.requests_done: list = []  # finished generation requests (per-sample outputs)
        self.staleness_values: list[int] = []  # per trained sample: trainer version - oldest token version

    @property
    def total_steps(self) -> int:
        return self.scenario.warmup_steps + self.scenario.steps

    def is_warmup(self, step: int) -> bool:
        return step < self.scenario.warmup_steps

    def step_row(self, step: int, start: float, timing: dict, prompt, response, preemptions: int) -> dict:
        """One steps.csv row: verl timing columns, token counts, response lengths (staleness 0 by default)."""
        now = self.env.now
        return {
            "step": step,
            "warmup": self.is_warmup(step),
            "start_s": start,
            "end_s": now,
            **timing,
            "timing_s/step": now - start,
            "samples": len(prompt),
            "prompt_tokens": int(prompt.sum()),
            "response_tokens": int(response.sum()),
            "tokens": int(prompt.sum() + response.sum()),
            "response_length/mean": float(response.mean()),
            "response_length/max": int(response.max()),
            "response_length/min": int(response.min()),
            "policy_version": self.env.policy_version,
            "staleness/mean": 0.0,
            "staleness/max": 0,
            "preemptions": preemptions,
        }

    @abstractmethod
    def run(self):
        """The SimPy process (a generator) that drives the whole run."""
