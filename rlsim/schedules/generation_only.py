"""Generation only: each step pushes one batch of prompts x samples through the rollout engines.

No training happens; this is the foundation's end-to-end job and the place to study the engines
alone (batching, KV pressure, the long tail of response lengths). A step ends when its last sample
finishes, as a synchronous RL step's `gen` phase does.
"""

from __future__ import annotations

import numpy as np

from rlsim.engine.fleet import build_engines, register_pools
from rlsim.engine.request import Request
from rlsim.schedules.base import Schedule
from rlsim.schedules.dispatch import assign_engines
from rlsim.workload import sample_lengths


class GenerationOnlySchedule(Schedule):
    def __init__(self, scenario, env):
        super().__init__(scenario, env)
        register_pools(scenario, env)
        self.engines = build_engines(scenario, env, "rollout")

    def run(self):
        env, scn = self.env, self.scenario
        algo = scn.algorithm
        rid = 0
        for step in range(self.total_steps):
            env.rl_step = step
            start = env.now
            prompt_len = np.repeat(
                sample_lengths(scn.workload.prompt_length, algo.prompts_per_step, env.rng), algo.samples_per_prompt
            )
            response_len = sample_lengths(scn.workload.response_length, algo.samples_per_step, env.rng)
            where = assign_engines(scn.schedule.dispatch, prompt_len, len(self.engines))
            reqs = []
            for i in range(algo.samples_per_step):
                req = Request(rid, int(prompt_len[i]), int(response_len[i]), meta={"step": step})
                rid += 1
                self.engines[where[i]].submit(req)
                reqs.append(req)
            yield env.all_of([r.done for r in reqs])
            gen = env.now - start
            self.requests_done.extend(reqs)
            self.step_rows.append(
                {
                    "step": step,
                    "warmup": self.is_warmup(step),
                    "start_s": start,
                    "end_s": env.now,
                    "timing_s/gen": gen,
                    "timing_s/step": gen,
                    "samples": len(reqs),
                    "prompt_tokens": int(prompt_len.sum()),
                    "response_tokens": int(response_len.sum()),
                    "tokens": int(prompt_len.sum() + response_len.sum()),
                    "response_length/mean": float(response_len.mean()),
                    "response_length/max": int(response_len.max()),
                    "response_length/min": int(response_len.min()),
                    "policy_version": env.policy_version,
                    "staleness/mean": 0.0,
                    "staleness/max": 0,
                    "preemptions": sum(r.preemptions for r in reqs),
                }
            )
