"""Generation only: each step pushes one batch of prompts x samples through the rollout engines.

No training happens; this is the foundation's end-to-end job and the place to study the engines
alone (batching, KV pressure, the long tail of response lengths). A step ends when its last sample
finishes, as a synchronous RL step's `gen` phase does.
"""

from __future__ import annotations

from rlsim.sim.aggregate import tail_extension
from rlsim.sim.engine.fleet import build_engines, register_pools
from rlsim.sim.engine.request import Request
from rlsim.sim.schedules.base import Schedule, StepOutcome
from rlsim.sim.schedules.dispatch import assign_engines
from rlsim.sim.workload import LengthSampler


class GenerationOnlySchedule(Schedule):
    def __init__(self, scenario, env):
        super().__init__(scenario, env)
        register_pools(scenario, env)
        self.engines = build_engines(scenario, env, "rollout")
        self.lengths = LengthSampler(scenario.workload, env.rng)

    def run_step(self, step: int):
        env, scn = self.env, self.scenario
        algo = scn.algorithm
        start = env.now
        prompt_len, response_len = self.lengths(algo.prompts_per_step, algo.samples_per_prompt, step)
        where = assign_engines(scn.schedule.dispatch, prompt_len, len(self.engines))
        reqs = []
        for i in range(algo.samples_per_step):
            req = Request(self.next_request_id(), int(prompt_len[i]), int(response_len[i]))
            self.collector.sample_started(req.rid, step, req.prompt_tokens, env.now)
            self.engines[where[i]].submit(req)
            reqs.append(req)
        yield env.all_of([r.done for r in reqs])
        if env.load_scale > 1:  # aggregate mode: wait for the slowest of all engines (sim/aggregate.py)
            yield env.timeout(tail_extension(reqs, start, len(self.engines), env.load_scale))
        for req in reqs:
            self.collector.sample_finished(req.rid, req)
        self.step_preemptions = sum(r.preemptions for r in reqs)
        return StepOutcome({"timing_s/gen": env.now - start}, prompt_len, response_len)
