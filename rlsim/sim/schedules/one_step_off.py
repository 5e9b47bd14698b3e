"""verl one-step-off asynchronous RL (docs/advance/one_step_off.md).

Rollout and training sit on disjoint pools. At step k the trainer waits for batch k (generated
with the weights of version k-1), pushes its current weights to the engines, launches the
generation of batch k+1 and trains on batch k meanwhile: generation of k+1 overlaps training of k,
and every trained sample is exactly one version stale (the first batch: zero).
"""

from __future__ import annotations

from rlsim.sim.schedules.rl_base import Batch, RLSchedule


class OneStepOffSchedule(RLSchedule):
    def _launch(self):
        env = self.env
        algo = self.scenario.algorithm
        for e in self.engines:
            e.resume(version=env.policy_version)
        return env.process(self._timed_generate(algo.prompts_per_step, algo.samples_per_prompt))

    def _timed_generate(self, prompts: int, n: int):
        start = self.env.now
        prompt, response = yield from self.generate_batch(prompts, n)
        return prompt, response, self.env.now - start, self.last_batch

    def before_steps(self):
        self.pending = self._launch()
        yield from ()

    def rollout(self, step: int, timing: dict):
        """Wait for batch k, push the current weights, start generating batch k+1, hand over batch k."""
        env = self.env
        start = env.now
        prompt, response, gen_time, batch_requests = yield self.pending
        timing.update({"timing_s/wait_prev_gen": env.now - start, "timing_s/generate_async": gen_time})
        batch_version = self.engines[0].weight_version
        timing["timing_s/sync_rollout_weights"] = yield from self.broadcast_weights()
        # The next batch starts generating even after the last step, as in a run that goes on: the last
        # measured step is steady state, not a drain (its samples end the run in flight).
        self.pending = self._launch()
        staleness = env.policy_version - batch_version
        return Batch(prompt, response, [r.rid for r in batch_requests],
                     columns={"staleness/mean": float(staleness), "staleness/max": staleness})
