"""Per-GPU memory: inference-engine KV capacity and the "does it fit" check for training, forward-only
passes and rollout engines (docs/sources.md, Design notes: Cost models; docs/sources.md §3 "Memory").

A placement that does not fit must be reported, not simulated: an RL schedule that silently runs a
70B actor on 8 GPUs would produce a plausible-looking but impossible timeline. All byte counts are
per GPU; capacities are in bytes (1 GB = 1e9 bytes, as in the hardware profiles).
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.sim.costs.layout import ParallelLayout
from rlsim.sim.costs.moe import expert_params
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

# Training keeps bf16 parameters regardless of the serving dtype (fp8 serving weights are a cast).
PARAM_BYTES_TRAIN = 2.0
# Bytes per token per layer of one transformer layer's stored activations with 16-bit activations,
# sequence parallelism and flash attention (no s^2 score term): 34*h bytes (Korthikanti et al. 2022,
# "Reducing Activation Recomputation in Large Transformer Models", eq. 1 is s*b*h*(34 + 5*a*s/h)
# bytes, with the 2 bytes per element already folded into the 34).
LAYER_ACTIVATION_BYTES_PER_HIDDEN = 34.0
# With full activation checkpointing only each layer's input (h bf16 elements = 2h bytes) is kept.
CHECKPOINT_BYTES_PER_HIDDEN = 2.0
# Logits are materialised in fp32 for the log-prob / loss computation.
LOGIT_BYTES = 4.0

_GB = 1e9


def engine_weight_bytes_per_gpu(model: ModelShape, tp: int) -> float:
    """Weights held by each GPU of a `tp`-way tensor-parallel inference engine."""
    return model.weight_bytes_total / tp


def kv_capacity_tokens(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    gpu_memory_utilization: float,
    activation_reserve_bytes_per_gpu: float,
) -> float:
    """Tokens of KV cache an engine can hold (vLLM/SGLang pre-allocate what is left of their share).

    `gpu_memory_utilization` is a fraction of total HBM (verl's default 0.5), as in vLLM. May return
    <= 0: the caller reports that the model does not fit.
    """
    usable = hw.hbm_bytes * gpu_memory_utilization * tp
    free = usable - model.weight_bytes_total - tp * activation_reserve_bytes_per_gpu
    return free / model.kv_bytes_per_token


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU by category, against the bytes usable on that GPU (`capacity`)."""

    weights: float
    grads: float
    optimizer: float
    activations: float
    kv: float
    capacity: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer + self.activations + self.kv

    @property
    def fits(self) -> bool:
        return self.total <= self.capacity

    def describe(self) -> str:
        """One line in GB, e.g. 'needs 93.1 GB per GPU (weights 17.6, ...) > 80.0 GB'."""
        parts = [f"weights {self.weights / _GB:.1f}"]
        for name in ("grads", "optimizer", "activations", "kv"):
            value = getattr(self, name)
            if value > 0:
                parts.append(f"{name} {value / _GB:.1f}")
        op = "<=" if self.fits else ">"
        needs = f"needs {self.total / _GB:.1f} GB per GPU ({', '.join(parts)})"
        return f"{needs} {op} {self.capacity / _GB:.1f} GB"


def _layer_activation_bytes(model: ModelShape, tokens: float, tp: int) -> float:
    """One layer's full stored activations for `tokens` tokens, split over the TP (+SP) group."""
    return LAYER_ACTIVATION_BYTES_PER_HIDDEN * model.hidden * tokens / tp


def training_activation_bytes(
    model: ModelShape, tp: int, micro_batch_tokens: float, activation_checkpointing: bool = True
) -> float:
    """Activation bytes per GPU for one micro-batch in flight.

    With checkpointing: every layer's input plus one layer being recomputed in the backward pass.
    Pipeline parallelism does not divide this: under 1F1B the first stage holds `pp` micro-batches
    of L/pp layers each, i.e. L layers' worth (Korthikanti et al. 2022, section 4.2.3).
    """
    if activation_checkpointing:
        kept = CHECKPOINT_BYTES_PER_HIDDEN * model.hidden * model.layers * micro_batch_tokens / tp
        return kept + _layer_activation_bytes(model, micro_batch_tokens, tp)
    return _layer_activation_bytes(model, micro_batch_tokens, tp) * model.layers


def training_memory_per_gpu(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    pp: int,
    dp: int,
    micro_batch_tokens: float,
    *,
    shard_optimizer: bool = True,
    shard_grads: bool = True,
    shard_params: bool = False,
    grad_bytes: float = 4.0,
    optimizer_bytes_per_param: float = 12.0,
    activation_checkpointing: bool = True,
    ep: int = 1,
) -> MemoryBreakdown:
    """Mixed-precision Adam training state per GPU (docs/sources.md §3 "Memory").

    bf16 params 2N, grads `grad_bytes`*N (fp32 by default), Adam fp32 master + m + v 12N, all split
    over tp*pp model-parallel ranks and, when sharded (ZeRO-1/2/3, FSDP), over the dp ranks. N counts
    every MoE expert: expert weights are stored and optimised even when few are active per token.
    With expert parallelism (`ep` > 1) the experts are split over the expert group (ep x Megatron's expert
    tensor split, costs/layout.py) instead of tp, and their sharded state over the expert data-parallel ranks
    (`expert_split`).
    """
    weights, grads, optimizer = training_state_bytes(
        model, tp, pp, dp, shard_optimizer=shard_optimizer, shard_grads=shard_grads, shard_params=shard_params,
        grad_bytes=grad_bytes, optimizer_bytes_per_param=optimizer_bytes_per_param, ep=ep)
    activations = training_activation_bytes(model, tp, micro_batch_tokens, activation_checkpointing)
    return MemoryBreakdown(
        weights=weights, grads=grads, optimizer=optimizer, activations=activations, kv=0.0,
        capacity=hw.hbm_bytes,
    )


def training_state_bytes(
    model: ModelShape, tp: int, pp: int, dp: int, *, shard_optimizer: bool, shard_grads: bool, shard_params: bool,
    grad_bytes: float, optimizer_bytes_per_param: float = 12.0, ep: int = 1,
) -> tuple[float, float, float]:
    """(weights, grads, optimizer) bytes per GPU of a training role (`training_memory_per_gpu`); also what host
    offload moves (costs/offload.py). With `ep` > 1 the experts are split over the expert group of each stage."""
    if ep > 1 and model.num_experts:
        (dense, d_dp), (experts, e_dp) = expert_split(model, ParallelLayout(tp=tp, pp=pp, dp=dp, ep=ep))
        weights, grads, optimizer = (
            per * (dense / (d_dp if shard else 1) + experts / (e_dp if shard else 1))
            for per, shard in ((PARAM_BYTES_TRAIN, shard_params), (grad_bytes, shard_grads),
                               (optimizer_bytes_per_param, shard_optimizer)))
        return weights, grads, optimizer
    n_model = model.params / (tp * pp)
    weights = PARAM_BYTES_TRAIN * n_model / (dp if shard_params else 1)
    grads = grad_bytes * n_model / (dp if shard_grads else 1)
    optimizer = optimizer_bytes_per_param * n_model / (dp if shard_optimizer else 1)
    return weights, grads, optimizer


def expert_split(model: ModelShape, layout: ParallelLayout) -> tuple[tuple[float, int], ...]:
    """((non-expert parameters per GPU, their data-parallel ranks), (expert parameters per GPU, theirs)).

    The non-expert parameters are split over tp x pp and replicated over dp; the experts are split over the
    expert group of each stage (ep x Megatron's expert tensor split) and pp, and replicated over the expert
    data-parallel ranks (costs/layout.py, the one rule the reshard reads too).
    """
    experts = expert_params(model)
    return ((model.params - experts) / layout.replica_gpus, layout.dp), (experts / layout.expert_group_gpus,
                                                                         layout.expert_dp)


def forward_memory_per_gpu(
    model: ModelShape, hw: HardwareProfile, tp: int, pp: int, micro_batch_tokens: float, ep: int = 1
) -> MemoryBreakdown:
    """Forward-only pass (reference / old log-prob / value): weights, one live layer, fp32 logits.

    No activations are kept between layers, but the logits (vocab x tokens, fp32) of the micro-batch
    exist at once and are often the peak for large-vocabulary models.
    """
    if ep > 1 and model.num_experts:
        (dense, _), (experts, _) = expert_split(model, ParallelLayout(tp=tp, pp=pp, ep=ep))
        weights = (dense + experts) * model.weight_bytes
    else:
        weights = model.weight_bytes_total / (tp * pp)
    activations = _layer_activation_bytes(model, micro_batch_tokens, tp)
    activations += model.vocab * micro_batch_tokens * LOGIT_BYTES / tp
    return MemoryBreakdown(
        weights=weights, grads=0.0, optimizer=0.0, activations=activations, kv=0.0, capacity=hw.hbm_bytes
    )
