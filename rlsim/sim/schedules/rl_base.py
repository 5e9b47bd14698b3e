"""What every RL schedule shares: roles on resource pools, model phases and their costs, step rows.

Synchronous (HybridFlow/verl), one-step-off and fully asynchronous schedules differ only in *when*
they generate, train and sync weights; the cost of each model phase (a forward pass, a PPO update,
a weight sync, a hybrid-engine switch) and how it occupies its pool are the same, and live here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from rlsim.sim.aggregate import tail_extension
from rlsim.sim.costs.offload import offload_time
from rlsim.sim.costs.quantisation import quantise_time
from rlsim.sim.costs.training import forward_pass_time, pass_model_flops, train_pass_time
from rlsim.sim.costs.transition import TransitionSetup
from rlsim.sim.costs.transition import to_generate as transition_to_generate
from rlsim.sim.costs.transition import to_train as transition_to_train
from rlsim.sim.costs.weight_sync import SyncSetup, sync_parts
from rlsim.sim.engine.fleet import build_engines, register_pools, role_hardware
from rlsim.sim.engine.request import Request
from rlsim.sim.limits import MAX_SECONDS, MAX_TURNS
from rlsim.sim.results.collector import MFU_PREFIX
from rlsim.sim.results.lifecycle import COMPLETED
from rlsim.sim.schedules.base import Schedule, StepOutcome
from rlsim.sim.schedules.dispatch import assign_engines
from rlsim.sim.schedules.gpu_locks import GpuLocks
from rlsim.sim.schedules.least_loaded import LoadBalancer
from rlsim.sim.schedules.lora import adapter_view, serve_adapter, store_sync_time, sync_bytes, update_kwargs
from rlsim.sim.schedules.trajectories import Trajectory, run_trajectory
from rlsim.sim.workload import LengthSampler


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
        self.lora = getattr(scn.schedule, "lora", None)  # LoRA RL: adapters over a frozen base
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
        self.trajectories: list[Trajectory] = []
        # Optimizer updates per epoch of a step (verl fully_async derives its own from require_batches).
        self.mini_batches = scn.algorithm.mini_batches
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

    # ------------------------------------------------------------------ costs of phases

    def transition_setup(self):
        """What decides the colocated transition of the actor's weights into the rollout engines."""
        scn = self.scenario
        actor, rollout = self._role("actor"), self._role("rollout")
        model, hw, eng = scn.models[actor.model], role_hardware(scn, actor), rollout.engine
        train, gen = scn.layout("actor"), scn.layout("rollout")
        gen_tp = gen.engine_gpus
        served = eng.shape(model)  # the engines' copy: quantised weights / KV (costs/quantisation.py)
        kv = eng.kv_capacity(served, hw, gen_tp)
        sched = scn.schedule
        sync = sched.weight_sync
        return TransitionSetup(
            model=model, hw=hw, sharding=actor.train.sharding, train_tp=train.tp,
            train_pp=train.pp, train_dp=self.dp_size("actor"), gen_tp=gen_tp, gpus_per_node=self._gpn("actor"),
            reshard=getattr(sched, "reshard", "3d-hybrid-engine"), engine_kind=eng.kind, cuda_graphs=eng.cuda_graphs,
            max_num_seqs=eng.max_num_seqs, kv_pool_bytes_per_gpu=kv * served.kv_bytes_per_token / gen_tp,
            sleep_level=getattr(sched, "engine_sleep_level", 1), host_s=getattr(sched, "switch_overhead_s", 0.0),
            synced=None if self.lora is None else adapter_view(model, self.lora),
            train_ep=train.ep, gen_ep=gen.ep,
            engine=None if served is model else served,
            sync_path=sync.path, tensors=self.synced_tensors(),
            per_tensor_s=None if sync.per_tensor_ms is None else sync.per_tensor_ms * 1e-3,
            host_bytes_per_s=None if sync.host_gb_per_s is None else sync.host_gb_per_s * 1e9,
        )

    def transition_parts(self, to_generate: bool):
        """Hybrid engine switch by part (rlsim.sim.costs.transition): train->generate or back."""
        setup = self.transition_setup()
        offload = self._offload_time("actor")
        return transition_to_generate(setup, offload) if to_generate else transition_to_train(setup, offload)

    def switch_to_generate_time(self) -> float:
        """Hybrid engine: wake the engine, gather and load the new weights, offload what training does not need."""
        return self.transition_parts(True).total

    def switch_to_train_time(self) -> float:
        """Back from generation: the engine sleeps, offloaded training state comes home (the KV cache is freed)."""
        return self.transition_parts(False).total

    def _offload_time(self, role: str) -> float:
        r = self._role(role)
        t = r.train
        if not (t.param_offload or t.grad_offload or t.optimizer_offload):
            return 0.0
        fsdp = t.sharding == "fsdp"
        layout = self.scenario.layout(role)
        return offload_time(
            self.scenario.models[r.model], role_hardware(self.scenario, r), layout.tp, layout.pp,
            self.dp_size(role), params=t.param_offload, grads=t.grad_offload, optimizer=t.optimizer_offload,
            shard_params=fsdp, shard_grads=fsdp, ep=layout.ep,
        )

    def weight_sync_time(self) -> float:
        """Actor and rollout on different GPUs: the sync path of schedule.weight_sync (costs/weight_sync.py)."""
        scn = self.scenario
        actor = self._role("actor")
        if self.lora is not None and self.lora.sync == "store":
            return store_sync_time(scn.models[actor.model], self.lora)
        return sync_parts(self.sync_setup()).total + self.sync_quantise_time()

    def sync_setup(self) -> SyncSetup:
        """What decides a disaggregated weight sync: the bytes and tensors, both sides' GPUs, and the path."""
        scn = self.scenario
        actor, rollout = self._role("actor"), self._role("rollout")
        spec = scn.schedule.weight_sync
        trainer_gpus = scn.role_gpus("actor")
        return SyncSetup(
            weight_bytes=self.sync_bytes(), tensors=self.synced_tensors(), sender=role_hardware(scn, actor),
            receiver=role_hardware(scn, rollout), receivers=scn.role_gpus("rollout"), receiver_tp=rollout.parallel.tp,
            trainer_gpus=trainer_gpus, trainer_nodes=-(-trainer_gpus // self._gpn("actor")), path=spec.path,
            senders=spec.senders, bucket_bytes=spec.bucket_bytes, delta_fraction=spec.changed_fraction,
            per_tensor_s=None if spec.per_tensor_ms is None else spec.per_tensor_ms * 1e-3,
            host_bytes_per_s=None if spec.host_gb_per_s is None else spec.host_gb_per_s * 1e9,
            same_node=scn.roles_in_one_nvlink_domain("actor", "rollout"),
            element_bytes=scn.models[actor.model].weight_bytes, sender_node_gpus=self._gpn("actor"),
        )

    def _served_model(self):
        """The actor's model as the rollout engines hold it (quantised weights / KV, or the model itself)."""
        return self._role("rollout").engine.shape(self.scenario.models[self._role("actor").model])

    def sync_quantise_time(self) -> float:
        """A quantising refit's pass over the weights before they move: each of the actor's tp x pp
        model-parallel GPUs quantises its shard (costs/quantisation.py; 0 unquantised or for a LoRA adapter)."""
        model, served = self.scenario.models[self._role("actor").model], self._served_model()
        if self.lora is not None or served is model:
            return 0.0
        return quantise_time(model, served.weight_bytes, role_hardware(self.scenario, self._role("actor")),
                             self.scenario.layout("actor").replica_gpus)

    def synced_tensors(self) -> int:
        """Weight tensors one sync sends: the model's, or the adapter's two per adapted module and layer."""
        model = self.scenario.models[self._role("actor").model]
        if self.lora is None:
            return model.weight_tensors
        return model.layers * 2 * (7 if self.lora.targets == "all-linear" else 4)

    def sync_bytes(self) -> float:
        """Bytes one weight sync moves: every weight (in the engines' format), or the LoRA adapter only."""
        model = self.scenario.models[self._role("actor").model]
        return self._served_model().weight_bytes_total if self.lora is None else sync_bytes(model, self.lora)

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

    def phase_time(self, phase: str, role: str, seq_lens: np.ndarray) -> float:
        scn = self.scenario
        r = self._role(role)
        model, hw = scn.models[r.model], role_hardware(scn, r)
        t = r.train
        layout = scn.layout(role)
        if phase.startswith("update_"):
            lora = update_kwargs(model, self.lora) if self.lora is not None and role == "actor" else {}
            return train_pass_time(
                model, hw, seq_lens, layout.tp, layout.pp, self.dp_size(role), t.ppo_max_token_len_per_gpu,
                self.mini_batches, scn.algorithm.epochs, balance=t.balance_batch,
                overlap_grad_reduce=t.overlap_grad_reduce, shard_optimizer=True, gpus_per_node=self._gpn(role),
                grad_bytes=t.grad_comm_bytes_per_param, opts=t.pass_options(phase, role),
                balance_scope="batch" if t.long_context_costs else "mini_batch",
                clip_grad_norm=t.clip_grad_norm and t.long_context_costs, ep=layout.ep, **lora,
            )
        return forward_pass_time(
            model, hw, seq_lens, layout.tp, layout.pp, self.dp_size(role), t.ppo_max_token_len_per_gpu,
            t.balance_batch, t.pass_options(phase, role), ep=layout.ep, gpus_per_node=self._gpn(role),
        )

    def phase_mfu(self, phase: str, role: str, seq_lens: np.ndarray, seconds: float) -> float:
        """The pass's achieved share of its GPUs' peak (`mfu/<phase>`): its model FLOPs (`pass_model_flops`) over
        `seconds` x the role's GPUs x peak BF16 FLOP/s. A result of the operator-priced pass, not an input."""
        scn = self.scenario
        r = self._role(role)
        if seconds <= 0:
            return 0.0
        train = phase.startswith("update_")
        adapters = update_kwargs(scn.models[r.model], self.lora)["adapters"] if (
            train and self.lora is not None and role == "actor") else None
        flops = pass_model_flops(scn.models[r.model], seq_lens, train, scn.algorithm.epochs if train else 1, adapters)
        gpus = r.parallel.tp * r.parallel.pp * self.dp_size(role)
        return flops / (seconds * gpus * role_hardware(scn, r).peak_flops)

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
                bound += 10 * self.phase_time(phase, role, seqs)
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
        turns = agent.turns.sample_groups(env.rng, len(prompt), 1, env.rl_step)  # mean_schedule: drift
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
        if getattr(env, "load_scale", 1) > 1:  # aggregate mode: wait for the slowest of all engines (sim/aggregate.py)
            yield env.timeout(tail_extension(reqs, start, len(self.engines), env.load_scale))
        for req in reqs:
            self.collector.sample_finished(req.rid, req)
        self.last_batch = reqs
        self.step_preemptions += sum(r.preemptions for r in reqs)
        return prompt, response

    def _state_moves(self, phase: str, role: str) -> float:
        """PCIe onload/offload of a role whose state lives in host memory between its phases.

        Onload before a role's first phase of the step, offload after its last. The actor's moves
        happen in the hybrid-engine switch instead (around generation).
        """
        if role == "actor":
            return 0.0
        one_way = self._offload_time(role)
        if role == "critic":
            return one_way  # onload before values, offload after update_critic
        return 2 * one_way

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
                seconds = self.phase_time(phase, role, seq_lens)
                yield env.timeout(seconds + self._state_moves(phase, role))
                self.mark_busy(role, role, "train" if phase.startswith("update_") else "forward", start)
                timing[f"{MFU_PREFIX}{phase}"] = self.phase_mfu(phase, role, seq_lens, seconds)
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
        if not getattr(self.scenario.schedule, "recompute_logprob", True):  # log-probs came with the tokens
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
        scale = getattr(env, "load_scale", 1)  # aggregate mode: the trainer takes the full batch (sim/aggregate.py)
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
