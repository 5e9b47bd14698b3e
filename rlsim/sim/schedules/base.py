"""The schedule template: the step loop, warm-up, step rows and the progress watchdog live here once.

A schedule implements only its phases: `run_step(step)` (a SimPy generator that generates, scores,
trains and syncs as the schedule does, and returns a `StepOutcome`), plus optional `before_steps` /
`after_steps`. Everything it reports goes through the run collector on the environment
(`env.collector`); `simulate()` reads nothing else. Adding a schedule is one module of phase code.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from rlsim.sim.engine.environment import SimEnvironment
from rlsim.sim.scenario.schema import Scenario

STALL_STEPS = 10  # no step for this many times the longest step so far: the run cannot finish


class SimulationStalled(RuntimeError):
    """A run that stopped making progress (no RL step completes): stopped with the reason, never hung."""


@dataclass
class StepOutcome:
    """What one step produced: its phase timings, the trained sequences, extra declared columns."""

    timing: dict[str, float]
    prompt: np.ndarray
    response: np.ndarray
    columns: dict = field(default_factory=dict)


class Schedule(ABC):
    """Builds its entities from a (placement-resolved) scenario in __init__; `run()` drives the steps."""

    def __init__(self, scenario: Scenario, env: SimEnvironment):
        self.scenario = scenario
        self.env = env
        self.collector = env.collector
        self.engines: list = []
        self.judges: list = []
        self.tools = None
        self.step_preemptions = 0  # KV-cache preemptions on the rollout engines in the current step (its row)

    # ------------------------------------------------------------------ read-back (tests, notebooks)

    @property
    def step_rows(self) -> list[dict]:
        return self.collector.step_rows

    @property
    def staleness_values(self) -> list[float]:
        return self.collector.staleness_values()

    @property
    def total_steps(self) -> int:
        return self.scenario.warmup_steps + self.scenario.steps

    def is_warmup(self, step: int) -> bool:
        return step < self.scenario.warmup_steps

    # ------------------------------------------------------------------ the template

    def run(self):
        """The SimPy process of the whole run: before_steps, one `run_step` per step, after_steps."""
        env = self.env
        watchdog = env.process(self._watchdog())
        yield from self.before_steps()
        for step in range(self.total_steps):
            env.rl_step = step
            start = env.now
            self.step_preemptions = 0
            produced = yield from self.run_step(step)
            self.collector.step(self.step_row(step, start, produced))
        yield from self.after_steps()
        if watchdog.is_alive:
            watchdog.interrupt()
        self.collector.entities([*self.engines, *self.judges], self.tools)

    @abstractmethod
    def run_step(self, step: int):
        """One RL step's phases (a generator); returns a StepOutcome."""

    def before_steps(self):
        """Start long-lived processes (a rollout loop, the first generation)."""
        yield from ()

    def after_steps(self):
        """Account for what the run leaves unfinished."""
        yield from ()

    def next_request_id(self) -> int:
        return self.env.next_request_id()

    def step_row(self, step: int, start: float, out: StepOutcome) -> dict:
        """One steps.csv row: verl timing columns, token counts, response lengths (staleness 0 by default)."""
        now, prompt, response = self.env.now, out.prompt, out.response
        empty = len(prompt) == 0  # e.g. a synchronous agentic step where every trajectory failed
        row = {
            "step": step,
            "warmup": self.is_warmup(step),
            "start_s": start,
            "end_s": now,
            **out.timing,
            "timing_s/step": now - start,
            "samples": len(prompt),
            "prompt_tokens": int(prompt.sum()),
            "response_tokens": int(response.sum()),
            "tokens": int(prompt.sum() + response.sum()),
            "response_length/mean": 0.0 if empty else float(response.mean()),
            "response_length/max": 0 if empty else int(response.max()),
            "response_length/min": 0 if empty else int(response.min()),
            "policy_version": self.env.policy_version,
            "staleness/mean": 0.0,
            "staleness/max": 0,
            "preemptions": self.step_preemptions,
        }
        row.update(out.columns)
        return row

    # ------------------------------------------------------------------ watchdog

    def first_step_bound_s(self) -> float:
        """A generous bound on the first step: every wave of generation at the slowest batch, ten times over."""
        scn = self.scenario
        if not self.engines:
            return 86_400.0
        engine = self.engines[0]
        per_wave = max(1, len(self.engines) * engine.settings.max_num_seqs)
        waves = math.ceil(scn.algorithm.samples_per_step / per_wave)
        agent = scn.workload.agent
        longest = agent.max_context_tokens if agent is not None else 32_768  # tokens one sequence may reach
        batch = min(engine.settings.max_num_seqs, scn.algorithm.samples_per_step)
        step_s = engine.step_time(batch, longest * batch)
        turns = 128 if agent is not None else 1  # the documented turn limit
        return 3600.0 + 10 * waves * longest * step_s * turns + 600.0 * turns

    def _watchdog(self):
        """Stop a run in which no step completes for far longer than any step could take."""
        env = self.env
        last_done, last_t = 0, env.now
        bound: float | None = None  # the first-step bound costs a little: computed only if step 0 is slow
        interval = 900.0
        try:
            while True:
                yield env.timeout(interval)
                done = len(self.collector.step_rows)
                if done > last_done:
                    longest = max(r["timing_s/step"] for r in self.collector.step_rows)
                    bound = max(60.0, STALL_STEPS * longest)
                    interval = bound / 4
                    last_done, last_t = done, env.now
                    continue
                if bound is None:
                    bound = self.first_step_bound_s()
                    interval = bound / 4
                if env.now - last_t > bound:
                    raise SimulationStalled(
                        f"no RL step completed in {env.now - last_t:,.0f} simulated seconds after step {done} "
                        f"(bound {bound:,.0f} s): the run cannot finish. {self.stall_hint()}"
                    )
        except Exception as exc:  # an interrupt at the end of the run stops the watchdog quietly
            if isinstance(exc, SimulationStalled):
                raise
            return

    def stall_hint(self) -> str:
        """What usually stops this schedule from finishing a step (overridden where something is known)."""
        return "Check the workload: samples that never finish, or a rule that never admits a batch."
