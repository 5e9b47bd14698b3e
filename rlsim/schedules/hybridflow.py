"""HybridFlow / verl synchronous RL: PPO, GRPO/DAPO, ReMax, RLOO on any placement.

One step is verl's dataflow: generate -> {reward, old_log_prob, ref, values} -> advantage ->
{update_critic, update_actor} -> new weights. Each phase runs on its role's resource pool; roles on
one pool take turns (a FIFO lock per pool, in verl's call order), roles on different pools run as
soon as their inputs exist. The actor's weights reach the rollout engines at the start of the next
generation: a reshard (hybrid engine) when they share GPUs, a NIC broadcast when they do not.
"""

from __future__ import annotations

from rlsim.schedules.rl_base import RLSchedule


class HybridFlowSchedule(RLSchedule):
    def _rollout(self, timing: dict, rid: int):
        """Weights to the engines, then generation (ReMax adds a greedy baseline pass)."""
        env, scn = self.env, self.scenario
        rollout, actor = self._role("rollout"), self._role("actor")
        pools = sorted({rollout.pool, actor.pool})
        reqs = [self.locks[p].request() for p in pools]
        yield env.all_of(reqs)
        start = env.now
        if env.rl_step > 0 or self.hybrid:
            if self.hybrid:
                yield env.timeout(self.switch_to_generate_time())
                self._busy("actor", "actor", "switch", start)
            else:
                yield from self.broadcast_weights()
        for e in self.engines:
            e.weight_version = env.policy_version
        timing["timing_s/update_weights"] = env.now - start
        if not self.hybrid:  # a disaggregated actor is free while the rollout pool generates
            self.locks[actor.pool].release(reqs[pools.index(actor.pool)])
        gen_start = env.now
        algo = scn.algorithm
        prompt, response = yield from self._generate(algo.prompts_per_step, algo.samples_per_prompt, rid)
        self.batch_requests = self.last_batch
        timing["timing_s/gen"] = env.now - gen_start
        if algo.kind == "remax":
            base_start = env.now
            yield from self._generate(algo.prompts_per_step, 1, rid + len(prompt))
            timing["timing_s/gen_max"] = env.now - base_start
        if self.hybrid:
            back = env.now
            yield env.timeout(self.switch_to_train_time())
            self._busy("actor", "actor", "switch", back)
            timing["timing_s/update_weights"] += env.now - back
        for p, r in zip(pools, reqs, strict=True):
            if self.hybrid or p != actor.pool:
                self.locks[p].release(r)
        return prompt, response

    def run(self):
        env = self.env
        rid = 0
        for step in range(self.total_steps):
            env.rl_step = step
            start = env.now
            timing: dict[str, float] = {}
            self._preemptions = 0
            prompt, response = yield from self._rollout(timing, rid)
            rid += 2 * len(prompt)
            yield from self.train_batch(prompt + response, timing)
            self.mark_trained(self.batch_requests)
            env.policy_version += 1
            self.step_rows.append(self._row(step, start, timing, prompt, response))

