"""What each model phase of an RL step costs, in one pure object built from the scenario (no SimPy).

`PhaseCosts` owns the colocated transition (hybrid-engine switch, costs/transition.py), the weight sync of
disaggregated roles (costs/weight_sync.py, a quantising refit, LoRA adapters), the PCIe offload of a role's
state (costs/offload.py) and each forward or update pass (costs/training.py). A schedule (schedules/rl_base.py)
asks it for seconds and spends them on its pools; tests ask it directly.

The trainer's data-parallel size may change during a run (re-splitting moves trainer GPUs into generation):
`dp_size(role)` is what the schedule says now, by default the layout's.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlsim.sim.costs.lora import adapter_bytes, adapter_params
from rlsim.sim.costs.offload import offload_time
from rlsim.sim.costs.quantisation import quantise_time
from rlsim.sim.costs.training import forward_pass_time, pass_model_flops, train_pass_time
from rlsim.sim.costs.transition import TransitionParts, TransitionSetup
from rlsim.sim.costs.transition import to_generate as transition_to_generate
from rlsim.sim.costs.transition import to_train as transition_to_train
from rlsim.sim.costs.weight_sync import SyncSetup, sync_parts


class PhaseCosts:
    """Seconds of the phases of one scenario's RL step.

    `lora`: the schedule's LoRA spec (None: every weight trained); `dp_size`: a role's data-parallel size now.
    """

    def __init__(self, scenario, lora=None, dp_size: Callable[[str], int] | None = None):
        self.scenario = scenario
        self.lora = lora
        self.dp_size = dp_size or (lambda role: scenario.layout(role).dp)
        algo = scenario.algorithm
        # Optimizer updates per epoch of a trainer step (verl fully_async: require_batches; else mini_batches).
        self.mini_batches = max(1, scenario.schedule.optimizer_updates(algo) // algo.epochs)

    # ------------------------------------------------------------------ helpers

    def _role(self, name):
        return self.scenario.roles[name]

    def hardware(self, name):
        """The GPU profile of the pool role `name` runs on."""
        scn = self.scenario
        return scn.cluster.pools[self._role(name).pool].profile()

    def _gpn(self, name) -> int:
        return self.scenario.cluster.pools[self._role(name).pool].gpus_per_node

    def _actor_model(self):
        return self.scenario.models[self._role("actor").model]

    def served_model(self):
        """The actor's model as the rollout engines hold it (quantised weights / KV, or the model itself)."""
        return self._role("rollout").engine.shape(self._actor_model())

    def _adapters(self, model) -> int:
        return adapter_params(model, self.lora.rank, self.lora.targets)

    def _adapter_bytes(self) -> float:
        return adapter_bytes(self._actor_model(), self.lora.rank, self.lora.targets)

    # ------------------------------------------------------------------ the colocated transition

    def transition_setup(self, switch) -> TransitionSetup:
        """What decides the colocated transition of the actor's weights into the rollout engines; `switch`: the
        schedule's hybrid-switch options (reshard method, sleep level, fixed host cost)."""
        scn = self.scenario
        actor, rollout = self._role("actor"), self._role("rollout")
        model, hw, eng = scn.models[actor.model], self.hardware("actor"), rollout.engine
        train, gen = scn.layout("actor"), scn.layout("rollout")
        gen_tp = gen.engine_gpus
        served = eng.shape(model)  # the engines' copy: quantised weights / KV (costs/quantisation.py)
        kv = eng.kv_capacity(served, hw, gen_tp)
        sync = scn.schedule.weight_sync
        synced = None
        if self.lora is not None:  # only the adapter moves: its bytes are the adapter's
            synced = model.model_copy(update={"weight_bytes": self._adapter_bytes() / model.params})
        return TransitionSetup(
            model=model, hw=hw, sharding=actor.train.sharding, train_tp=train.tp,
            train_pp=train.pp, train_dp=self.dp_size("actor"), gen_tp=gen_tp, gpus_per_node=self._gpn("actor"),
            reshard=switch.reshard, engine_kind=eng.kind, cuda_graphs=eng.cuda_graphs,
            max_num_seqs=eng.max_num_seqs, kv_pool_bytes_per_gpu=kv * served.kv_bytes_per_token / gen_tp,
            sleep_level=switch.engine_sleep_level, host_s=switch.switch_overhead_s, synced=synced,
            train_ep=train.ep, gen_ep=gen.ep,
            engine=None if served is model else served,
            sync_path=sync.path, tensors=self.synced_tensors(),
            per_tensor_s=None if sync.per_tensor_ms is None else sync.per_tensor_ms * 1e-3,
            host_bytes_per_s=None if sync.host_gb_per_s is None else sync.host_gb_per_s * 1e9,
        )

    def transition_parts(self, switch, to_generate: bool) -> TransitionParts:
        """Hybrid engine switch by part: train->generate or back."""
        setup = self.transition_setup(switch)
        offload = self.offload_time("actor")
        return transition_to_generate(setup, offload) if to_generate else transition_to_train(setup, offload)

    # ------------------------------------------------------------------ offload

    def offload_time(self, role: str) -> float:
        """One way of the PCIe moves of `role`'s offloaded training state (0 when nothing is offloaded)."""
        r = self._role(role)
        t = r.train
        if not (t.param_offload or t.grad_offload or t.optimizer_offload):
            return 0.0
        fsdp = t.sharding == "fsdp"
        layout = self.scenario.layout(role)
        return offload_time(
            self.scenario.models[r.model], self.hardware(role), layout.tp, layout.pp,
            self.dp_size(role), params=t.param_offload, grads=t.grad_offload, optimizer=t.optimizer_offload,
            shard_params=fsdp, shard_grads=fsdp, ep=layout.ep,
        )

    def state_moves(self, role: str) -> float:
        """PCIe onload/offload of a role whose state lives in host memory between its phases, around one
        phase: onload before its first phase of the step, offload after its last. The actor's moves happen
        in the hybrid-engine switch instead (around generation)."""
        if role == "actor":
            return 0.0
        one_way = self.offload_time(role)
        if role == "critic":
            return one_way  # onload before values, offload after update_critic
        return 2 * one_way

    # ------------------------------------------------------------------ weight sync

    def weight_sync_time(self) -> float:
        """Actor and rollout on different GPUs: the sync path of schedule.weight_sync (costs/weight_sync.py)."""
        if self.lora is not None and self.lora.sync == "store":
            # Shared storage: the trainer writes the adapter once, every engine reads it (in parallel).
            return 2 * self._adapter_bytes() / (self.lora.store_gb_per_s * 1e9)
        return sync_parts(self.sync_setup()).total + self.sync_quantise_time()

    def sync_setup(self) -> SyncSetup:
        """What decides a disaggregated weight sync: the bytes and tensors, both sides' GPUs, and the path."""
        scn = self.scenario
        rollout = self._role("rollout")
        spec = scn.schedule.weight_sync
        trainer_gpus = scn.role_gpus("actor")
        return SyncSetup(
            weight_bytes=self.sync_bytes(), tensors=self.synced_tensors(), sender=self.hardware("actor"),
            receiver=self.hardware("rollout"), receivers=scn.role_gpus("rollout"), receiver_tp=rollout.parallel.tp,
            trainer_gpus=trainer_gpus, trainer_nodes=-(-trainer_gpus // self._gpn("actor")), path=spec.path,
            senders=spec.senders, bucket_bytes=spec.bucket_bytes, delta_fraction=spec.changed_fraction,
            per_tensor_s=None if spec.per_tensor_ms is None else spec.per_tensor_ms * 1e-3,
            host_bytes_per_s=None if spec.host_gb_per_s is None else spec.host_gb_per_s * 1e9,
            same_node=scn.roles_in_one_nvlink_domain("actor", "rollout"),
            element_bytes=self._actor_model().weight_bytes, sender_node_gpus=self._gpn("actor"),
        )

    def sync_quantise_time(self) -> float:
        """A quantising refit's pass over the weights before they move: each of the actor's tp x pp
        model-parallel GPUs quantises its shard (costs/quantisation.py; 0 unquantised or for a LoRA adapter)."""
        model, served = self._actor_model(), self.served_model()
        if self.lora is not None or served is model:
            return 0.0
        return quantise_time(model, served.weight_bytes, self.hardware("actor"),
                             self.scenario.layout("actor").replica_gpus)

    def synced_tensors(self) -> int:
        """Weight tensors one sync sends: the model's, or the adapter's two per adapted module and layer."""
        model = self._actor_model()
        if self.lora is None:
            return model.weight_tensors
        return model.layers * 2 * (7 if self.lora.targets == "all-linear" else 4)

    def sync_bytes(self) -> float:
        """Bytes one weight sync moves: every weight (in the engines' format), or the LoRA adapter only."""
        return self.served_model().weight_bytes_total if self.lora is None else self._adapter_bytes()

    # ------------------------------------------------------------------ passes

    def phase_time(self, phase: str, role: str, seq_lens: np.ndarray) -> float:
        """Seconds of one forward pass (`old_log_prob`, `ref`, `values`, ...) or update (`update_*`) of `role`."""
        scn = self.scenario
        r = self._role(role)
        model, hw = scn.models[r.model], self.hardware(role)
        t = r.train
        layout = scn.layout(role)
        if phase.startswith("update_"):
            lora = {"adapters": self._adapters(model)} if self.lora is not None and role == "actor" else {}
            return train_pass_time(
                model, hw, seq_lens, layout.tp, layout.pp, self.dp_size(role), t.ppo_max_token_len_per_gpu,
                self.mini_batches, scn.algorithm.epochs, balance=t.balance_batch,
                overlap_grad_reduce=t.overlap_grad_reduce, shard_optimizer=True, gpus_per_node=self._gpn(role),
                grad_bytes=t.grad_comm_bytes_per_param, opts=t.pass_options(phase, role),
                balance_scope="batch" if t.long_context_costs else "mini_batch",
                clip_grad_norm=t.clip_grad_norm and t.long_context_costs, ep=layout.ep, cp=layout.context, **lora,
            )
        return forward_pass_time(
            model, hw, seq_lens, layout.tp, layout.pp, self.dp_size(role), t.ppo_max_token_len_per_gpu,
            t.balance_batch, t.pass_options(phase, role), ep=layout.ep, gpus_per_node=self._gpn(role),
            cp=layout.context,
        )

    def phase_mfu(self, phase: str, role: str, seq_lens: np.ndarray, seconds: float) -> float:
        """The pass's achieved share of its GPUs' peak (`mfu/<phase>`): its model FLOPs (`pass_model_flops`) over
        `seconds` x the role's GPUs x peak BF16 FLOP/s. A result of the operator-priced pass, not an input."""
        scn = self.scenario
        r = self._role(role)
        if seconds <= 0:
            return 0.0
        train = phase.startswith("update_")
        model = scn.models[r.model]
        adapters = self._adapters(model) if train and self.lora is not None and role == "actor" else None
        flops = pass_model_flops(model, seq_lens, train, scn.algorithm.epochs if train else 1, adapters)
        gpus = scn.layout(role).rank_gpus * self.dp_size(role)
        return flops / (seconds * gpus * self.hardware(role).peak_flops)
