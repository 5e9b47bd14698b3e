"""What every RL schedule shares: roles on resource pools, model phases and their costs, step rows.

Synchronous (HybridFlow/verl), one-step-off and fully asynchronous schedules differ only in *when*
they generate, train and sync weights; the cost of each model phase (a forward pass, a PPO update,
a weight sync, a hybrid-engine switch) and how it occupies its pool are the same, and live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlsim.sim.aggregate import tail_extension
from rlsim.sim.costs.phase_costs import PhaseCosts
from rlsim.sim.engine.fleet import build_engines, register_pools
from rlsim.sim.engine.request import Request
from rlsim.sim.limits import MAX_SECONDS, MAX_TURNS
from rlsim.sim.results.collector import MFU_PREFIX
from rlsim.sim.results.lifecycle import COMPLETED
from rlsim.sim.scenario.schema import HybridSwitchOptions, TrainingOptions
from rlsim.sim.schedules.base import Schedule, StepOutcome
from rlsim.sim.schedules.dispatch import assign_engines
from rlsim.sim.schedules.gpu_locks import GpuLocks
from rlsim.sim.schedules.least_loaded import LoadBalancer
from rlsim.sim.schedules.lora import serve_adapter
from rlsim.sim.schedules.trajectories import Trajectory, run_trajectory
from rlsim.sim.workload import LengthSampler, TurnSampler


@dataclass
class Batch:
    """What a rollout phase hands the trainer: sequence lengths, the samples' ids, phases to skip
    (scored during rollout), and declared step columns (staleness) known before training."""

    prompt: np.ndarray
    response: np.ndarray
    sample_ids: list[int] = field(default_factory=list)
    skip: tuple[str, ...] = ()
    columns: dict = field(default_factory=dict)


# verl's forward phases, in the order its trainer calls them, with the role that runs each.
FORWARD_PHASES = (("reward", "reward"), ("old_log_prob", "actor"), ("ref", "reference"), ("values", "critic"))
UPDATE_PHASES = (("update_critic", "critic"), ("update_actor", "actor"))


class RLSchedule(Schedule):
    """Base of the RL schedules: pools, engines, GPU-segment locks, GPU groups per model role."""

    def __init__(self, scenario, env):
        super().__init__(scenario, env)  # placement already resolved (rlsim.sim.scenario.placement)
        scn = self.scenario
        register_pools(scn, env)
        self.engines = build_engines(scn, env, "rollout")
        self.lora = scn.schedule.options(TrainingOptions).lora  # LoRA RL: adapters over a frozen base
        if self.lora is not None:
            serve_adapter(self.engines, self.lora)
        self.synced_bytes = 0.0  # what the step's weight syncs moved (reported for LoRA runs)
        self.gpu_locks = GpuLocks(env, scn)
        # An LLM judge (reward role with an engine section) is served by engines of its own.
        self.judges = build_engines(scn, env, "reward") if self._judge_role() else []
        self._judges_balancer = LoadBalancer(env, self.judges)
        for role, spec in scn.roles.items():
            if role != "rollout" and not (role == "reward" and self.judges):
                env.ledger.add_group(role, spec.pool, scn.role_gpus(role))
        self.hybrid = scn.roles_share_gpus("rollout", "actor")
        self.lengths = LengthSampler(scn.workload, env.rng)
        self.turns = TurnSampler(scn.workload, env.rng)
        self.trajectories: list[Trajectory] = []
        self.costs = PhaseCosts(scn, self.lora, self.dp_size)  # what each phase costs (pure: costs/phase_costs.py)
        self.mini_batches = self.costs.mini_batches  # optimizer updates per epoch of a trainer step
        if scn.environments.tools:
            from rlsim.sim.engine.tools import ToolRunner

            self.tools = ToolRunner(env, scn.environments)

    # ------------------------------------------------------------------ helpers

    def _judge_role(self) -> bool:
        reward = self.scenario.roles.get("reward")
        return reward is not None and reward.engine is not None

    def judge(self, seq_lens: np.ndarray):
        """Score samples with the LLM judge: one request each (the sequence in, a short verdict out)."""
        env = self.env
        out = self.scenario.algorithm.judge_output_tokens
        reqs = []
        for n in seq_lens:
            req = Request(self.next_request_id(), int(n), out)
            self._judges_balancer.pick().submit(req)  # the least-loaded judge (ties: by name)
            reqs.append(req)
        yield env.all_of([r.done for r in reqs])

    def _role(self, name):
        return self.scenario.roles[name]

    def dp_size(self, name) -> int:
        return self.scenario.layout(name).dp

    def _gpn(self, name) -> int:
        return self.scenario.cluster.pools[self._role(name).pool].gpus_per_node

    def mark_busy(self, group: str, role: str, phase: str, start: float) -> None:
        self.env.ledger.record(group, role, phase, start, self.env.now, self.env.rl_step, self.env.policy_version)

    # ------------------------------------------------------------------ costs of phases (costs/phase_costs.py)

    def transition_setup(self):
        """What decides the colocated transition of the actor's weights into the rollout engines."""
        return self.costs.transition_setup(self.scenario.schedule.options(HybridSwitchOptions))

    def transition_parts(self, to_generate: bool):
        """Hybrid engine switch by part (rlsim.sim.costs.transition): train->generate or back."""
        return self.costs.transition_parts(self.scenario.schedule.options(HybridSwitchOptions), to_generate)

    def switch_to_generate_time(self) -> float:
        """Hybrid engine: wake the engine, gather and load the new weights, offload what training does not need."""
        return self.transition_parts(True).total

    def switch_to_train_time(self) -> float:
        """Back from generation: the engine sleeps, offloaded training state comes home (the KV cache is freed)."""
        return self.transition_parts(False).total

    def weight_sync_time(self) -> float:
        return self.costs.weight_sync_time()

    def sync_bytes(self) -> float:
        return self.costs.sync_bytes()

    def broadcast_weights(self, engines: list | None = None):
        """NCCL broadcast of the actor's weights to every rollout GPU (or `engines`); both sides are busy."""
        env = self.env
        start = env.now
        self.synced_bytes += self.sync_bytes()
        yield env.timeout(self.weight_sync_time())
        self.mark_busy("actor", "actor", "sync", start)
        for e in self.engines if engines is None else engines:
            env.ledger.record(e.name, "rollout", "sync", start, env.now, env.rl_step, env.policy_version)
        return env.now - start

    def first_step_bound_s(self) -> float:
        """The template's generation bound plus every other long thing a first step may do, ten times over:
        each model phase on a full batch of the longest sequences, switches, syncs and tool calls."""
        scn = self.scenario
        bound = super().first_step_bound_s()
        agent = scn.workload.agent
        longest = agent.max_context_tokens if agent is not None else 32_768
        seqs = np.full(scn.algorithm.samples_per_step, longest, dtype=np.int64)
        for phase, role in (*FORWARD_PHASES, *UPDATE_PHASES):
            if role in scn.roles and scn.roles[role].engine is None:
                bound += 10 * self.costs.phase_time(phase, role, seqs)
        if self.hybrid:
            bound += 10 * (self.switch_to_generate_time() + self.switch_to_train_time())
        if "actor" in scn.roles and not self.hybrid:
            bound += 10 * self.weight_sync_time()
        if agent is not None:
            for tool in scn.environments.tools.values():
                per_try = tool.timeout_s or min(tool.latency.maximum(), MAX_SECONDS)
                bound += MAX_TURNS * tool.max_attempts * ((per_try or MAX_SECONDS) + sum(tool.backoff_s))
        return bound

    def _generate_agentic(self, n_prompts: int, samples_per_prompt: int):
        """Multi-turn trajectories, each sticky to one engine; returns (prompt, trained tokens - prompt)."""
        scn, env = self.scenario, self.env
        agent = scn.workload.agent
        prompt = np.repeat(scn.workload.prompt_length.sample(env.rng, n_prompts), samples_per_prompt)
        turns = self.turns(len(prompt), env.rl_step)  # mean_schedule: drift
        where = assign_engines(scn.schedule.dispatch, prompt, len(self.engines))
        trajs, procs, last = [], [], {}  # last: trajectory id -> the request its latest turn ran as

        def track(req: Request, t: Trajectory) -> None:
            last[t.tid] = req

        for i in range(len(prompt)):
            t = Trajectory(len(self.trajectories) + i, int(prompt[i]), int(turns[i]), step=env.rl_step)
            trajs.append(t)
            engine = self.engines[where[i]]
            procs.append(env.process(run_trajectory(env, engine, self.tools, agent, t, on_request=track)))
        yield env.all_of(procs)
        self.trajectories.extend(trajs)
        done = [t for t in trajs if t.state is COMPLETED]
        self.last_batch = []
        for t in trajs:  # one sample per trajectory, under the id of its last turn's request
            req = last.get(t.tid)
            if req is None:
                continue  # it ended before its first turn: no sample
            self.collector.sample_started(req.rid, env.rl_step, t.prompt_tokens, t.started_s)
            if t.state is COMPLETED:
                self.collector.sample_finished(req.rid, req, t.sequence_tokens - t.prompt_tokens, t.version_tokens)
                self.last_batch.append(req)
            else:
                self.collector.sample_discarded(req.rid, t.state, t.reason)
        prompt = np.array([t.prompt_tokens for t in done], dtype=np.int64)
        rest = np.array([t.sequence_tokens - t.prompt_tokens for t in done], dtype=np.int64)
        return prompt, rest

    def generate_batch(self, n_prompts: int, samples_per_prompt: int, on_done=None):
        """Sample lengths, dispatch to the engines, wait for all; returns (prompt, response) arrays.

        `on_done(event)` is called as each request finishes (sample-level work such as judging).
        """
        if self.scenario.workload.agent is not None:
            return (yield from self._generate_agentic(n_prompts, samples_per_prompt))
        scn, env = self.scenario, self.env
        start = env.now
        prompt, response = self.lengths(n_prompts, samples_per_prompt, env.rl_step)
        where = assign_engines(scn.schedule.dispatch, prompt, len(self.engines))
        reqs = []
        for i in range(len(prompt)):
            req = Request(self.next_request_id(), int(prompt[i]), int(response[i]))
            self.collector.sample_started(req.rid, env.rl_step, req.prompt_tokens, env.now)
            done = self.engines[where[i]].submit(req)
            if on_done is not None:
                done.callbacks.append(on_done)
            reqs.append(req)
        yield env.all_of([r.done for r in reqs])
        if env.load_scale > 1:  # aggregate mode: wait for the slowest of all engines (sim/aggregate.py)
            yield env.timeout(tail_extension(reqs, start, len(self.engines), env.load_scale))
        for req in reqs:
            self.collector.sample_finished(req.rid, req)
        self.last_batch = reqs
        self.step_preemptions += sum(r.preemptions for r in reqs)
        return prompt, response

    def _pass(self, phase: str, role: str, seq_lens: np.ndarray, timing: dict):
        """One model phase on its role's GPUs, after the phases queued there before it."""
        env = self.env
        held = self.gpu_locks.request(self.gpu_locks.of(role))
        try:
            yield env.all_of(held)
            start = env.now
            if phase == "reward" and self.judges:
                yield from self.judge(seq_lens)
            else:
                seconds = self.costs.phase_time(phase, role, seq_lens)
                yield env.timeout(seconds + self.costs.state_moves(role))
                self.mark_busy(role, role, "train" if phase.startswith("update_") else "forward", start)
                timing[f"{MFU_PREFIX}{phase}"] = self.costs.phase_mfu(phase, role, seq_lens, seconds)
            timing[f"timing_s/{phase}"] = env.now - start
        finally:
            self.gpu_locks.release(held)

    def _rule_reward(self, n: int, timing: dict):
        algo = self.scenario.algorithm
        start = self.env.now
        yield self.env.timeout(n * algo.rule_reward_s_per_sample / algo.rule_reward_workers)
        timing["timing_s/reward"] = self.env.now - start

    # ------------------------------------------------------------------ the RL step

    def run_step(self, step: int):
        """Every RL schedule's step: its rollout phase hands over a batch, the trainer trains it, the
        policy version moves on, then whatever follows an update (a weight sync) runs."""
        timing: dict[str, float] = {}
        self.synced_bytes = 0.0
        batch = yield from self.rollout(step, timing)
        skip = batch.skip
        if not self.scenario.schedule.options(TrainingOptions).recompute_logprob:  # log-probs came with the tokens
            skip = (*skip, "old_log_prob")
        yield from self.train_batch(batch.prompt + batch.response, timing, skip=skip)
        for sample_id in batch.sample_ids:  # trained at the trainer's current version (per-sample staleness)
            self.collector.sample_trained(sample_id, step, self.env.policy_version)
        self.env.policy_version += 1
        columns = yield from self.after_update(step, timing, batch)
        if self.lora is not None:
            columns["weight_sync/bytes"] = self.synced_bytes
        return StepOutcome(timing, batch.prompt, batch.response, {**batch.columns, **columns})

    def rollout(self, step: int, timing: dict):
        """The schedule's phase code: produce the batch the trainer takes now (a generator)."""
        raise NotImplementedError

    def after_update(self, step: int, timing: dict, batch: Batch):
        """After the version moved on (a weight sync, for instance); returns extra step columns."""
        yield from ()
        return {}

    def after_steps(self):
        """Multi-turn runs: how every launched trajectory ended."""
        for t in self.trajectories:
            self.collector.trajectory(t)
        yield from ()

    def train_batch(self, seq_lens: np.ndarray, timing: dict, skip: tuple[str, ...] = ()):
        """verl's trainer side of a step: forward phases (concurrent across pools), then the updates."""
        env, scn = self.env, self.scenario
        scale = env.load_scale  # aggregate mode: the trainer takes the full batch (sim/aggregate.py)
        if scale > 1:
            seq_lens = self.full_batch(seq_lens)
        forwards = []
        for phase, role in FORWARD_PHASES:
            if phase in skip:
                continue
            if role in scn.roles:
                forwards.append(env.process(self._pass(phase, role, seq_lens, timing)))
            elif phase == "reward":
                reward = env.process(self._rule_reward(len(seq_lens), timing))
                if not scn.algorithm.launch_reward_fn_async:
                    yield reward  # verl's driver scores the batch before dispatching the forward passes
                forwards.append(reward)
        yield env.all_of(forwards)
        updates = [
            env.process(self._pass(ph, role, seq_lens, timing)) for ph, role in UPDATE_PHASES if role in scn.roles
        ]
        yield env.all_of(updates)
