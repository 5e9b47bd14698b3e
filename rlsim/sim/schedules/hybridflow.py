"""HybridFlow / verl synchronous RL: PPO, GRPO/DAPO, ReMax, RLOO on any placement.

One step is verl's dataflow: generate -> {reward, old_log_prob, ref, values} -> advantage ->
{update_critic, update_actor} -> new weights. Each phase runs on its role's resource pool; roles on
the same GPUs take turns (FIFO locks on GPU segments, in verl's call order), roles on different GPUs
run as soon as their inputs exist. The actor's weights reach the rollout engines at the start of the next
generation: a reshard (hybrid engine) when they share GPUs, a NIC broadcast when they do not.
"""

from __future__ import annotations

import numpy as np

from rlsim.sim.schedules.rl_base import Batch, RLSchedule
from rlsim.sim.schedules.tail_reshard import TailResharder


class HybridFlowSchedule(RLSchedule):
    def __init__(self, scenario, env):
        super().__init__(scenario, env)
        spec = self.scenario.schedule.tail_reshard
        self.tail = TailResharder(self, spec) if spec is not None else None  # validation refuses it with an agent

    def generate_batch(self, n_prompts: int, samples_per_prompt: int, on_done=None):
        if self.tail is None:
            return (yield from super().generate_batch(n_prompts, samples_per_prompt, on_done))
        return (yield from self.tail.generate(n_prompts, samples_per_prompt, on_done))

    def _rollout(self, timing: dict):
        """Weights to the engines, then generation (ReMax adds a greedy baseline pass)."""
        env, scn = self.env, self.scenario
        locks = self.gpu_locks
        gen_gpus = locks.of("rollout")
        judge_gpus = [s for s in locks.of("reward") if s not in gen_gpus] if self.sample_judging else []
        actor_gpus = [s for s in locks.of("actor") if s not in gen_gpus]  # the actor's, beyond the rollout's
        held = locks.request(gen_gpus)  # the rollout GPUs, for the whole generation
        judging = locks.request(judge_gpus)  # the judge's, while it scores responses as they finish
        actor_only = locks.request([s for s in actor_gpus if s not in judge_gpus])
        yield env.all_of(held + judging + actor_only)
        start = env.now
        if env.rl_step > 0 or self.hybrid:
            if self.hybrid:
                yield env.timeout(self._transition(True, timing))
                self.synced_bytes += self.sync_bytes()
                self.mark_busy("actor", "actor", "switch", start)
            else:
                yield from self.broadcast_weights()
        for e in self.engines:
            e.resume(version=env.policy_version)
        timing["timing_s/update_weights"] = env.now - start
        locks.release(actor_only)  # actor GPUs outside the rollout's are free while it generates
        gen_start = env.now
        algo = scn.algorithm
        scoring: list = []
        on_done = self._score_on_finish(scoring) if self.sample_judging else None
        prompt, response = yield from self.generate_batch(algo.prompts_per_step, algo.samples_per_prompt, on_done)
        self.batch_requests = self.last_batch
        timing["timing_s/gen"] = env.now - gen_start
        if self.sample_judging:  # the responses that finished last are still being judged
            gen_end = env.now
            yield env.all_of(scoring)
            timing["timing_s/reward"] = env.now - gen_end
            locks.release(judging)
        if algo.kind == "remax":
            base_start = env.now
            yield from self.generate_batch(algo.prompts_per_step, 1)
            timing["timing_s/gen_max"] = env.now - base_start
        if self.hybrid:
            back = env.now
            actor_only = locks.request(actor_gpus)
            yield env.all_of(actor_only)
            yield env.timeout(self._transition(False, timing))
            self.mark_busy("actor", "actor", "switch", back)
            timing["timing_s/update_weights"] += env.now - back
            locks.release(actor_only)
        locks.release(held)
        return prompt, response

    def _transition(self, to_generate: bool, timing: dict) -> float:
        """Seconds of a hybrid-engine switch; its parts go to the step row as timing_s/transition/<part>."""
        parts = self.transition_parts(to_generate)
        for name, seconds in parts.items():
            if seconds:
                key = f"timing_s/transition/{name}"
                timing[key] = timing.get(key, 0.0) + seconds
        return parts.total

    @property
    def sample_judging(self) -> bool:
        return bool(self.judges) and self.scenario.schedule.judge_scoring == "sample"

    def _score_on_finish(self, scoring: list):
        """A completion callback that sends each finished response to the judge (ROLL's sample-level reward)."""

        def score(event) -> None:
            req = event.value
            if not req.aborted:
                scoring.append(self.env.process(self.judge(np.array([req.prompt_tokens + req.generated]))))

        return score

    def rollout(self, step: int, timing: dict):
        prompt, response = yield from self._rollout(timing)
        skip = ("reward",) if self.sample_judging else ()
        return Batch(prompt, response, [r.rid for r in self.batch_requests], skip)
