"""LoRA RL costs: adapter size, the frozen-base training FLOPs, and the engine's per-step LoRA kernels.

A LoRA adapter of rank r on a linear layer of shape (d_in, d_out) adds r x (d_in + d_out) trainable
parameters (A: d_in x r, B: r x d_out). Training the adapters over a frozen base still runs the forward
pass through the base and the backward pass through it for the activation gradients, but skips the
base's weight-gradient GEMMs: of the 6N FLOPs per token of full training, 2N (the weight gradients)
disappear, and the adapters add their own 6 x adapter_params. Attention has no weights, so its
forward and backward FLOPs are unchanged. The optimizer and the data-parallel gradient all-reduce
cover the adapter parameters only; the weight sync moves the adapter only (the base never changes).

An inference engine serving an adapter (vLLM's punica kernels) runs two extra skinny GEMMs per adapted
module and decode step: shrink (d_in -> r) and expand (r -> d_out), on its merged linear layers
(QKV, O, gate-up, down). Each is a tiny kernel: its time is a kernel floor plus reading the adapter's
weights from HBM.
"""

from __future__ import annotations

from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

# The engine's adapted linear layers per transformer layer (vLLM merges QKV and gate-up into one each).
MERGED_MODULES = {"all-linear": 4, "attention": 2}


def _module_shapes(model: ModelShape, targets: str) -> list[tuple[int, int, int]]:
    """(d_in, d_out, copies) of each adapted linear layer of one transformer layer."""
    h, q, kv = model.hidden, model.heads * model.d_head, model.kv_heads * model.d_head
    shapes = [(h, q, 1), (h, kv, 1), (h, kv, 1), (q, h, 1)]  # q, k, v, o
    if targets == "all-linear":
        experts = max(model.num_experts, 1)
        shapes += [(h, model.ffn, experts), (h, model.ffn, experts), (model.ffn, h, experts)]  # gate, up, down
    elif targets != "attention":
        raise ValueError(f"unknown LoRA targets {targets!r}: all-linear or attention")
    return shapes


def adapter_params(model: ModelShape, rank: int, targets: str = "all-linear") -> float:
    """Trainable parameters of a rank-`rank` adapter on every layer's target modules."""
    per_layer = sum(rank * (d_in + d_out) * copies for d_in, d_out, copies in _module_shapes(model, targets))
    return float(model.layers * per_layer)


def adapter_bytes(model: ModelShape, rank: int, targets: str = "all-linear") -> float:
    """What an adapter sync moves: its parameters at the model's weight precision."""
    return adapter_params(model, rank, targets) * model.weight_bytes


def lora_step_overhead_s(
    model: ModelShape, hw: HardwareProfile, tp: int, rank: int, targets: str, kernel_s: float
) -> float:
    """Seconds one engine step spends in LoRA kernels: 2 per merged module and layer, plus the adapter read.

    The adapter is sharded over the engine's `tp` GPUs like the layers it adapts.
    """
    kernels = 2 * MERGED_MODULES[targets] * model.layers
    return kernels * kernel_s + adapter_bytes(model, rank, targets) / tp / hw.hbm_bytes_per_s
