"""LoRA RL on any training schedule: what changes when the actor trains adapters over a frozen base.

The costs are in rlsim/sim/costs/lora.py; this module applies them to a schedule's entities: the
engines pay the LoRA kernels in every step, the actor's update trains and all-reduces the adapter
only, and a weight sync (NCCL or shared storage) moves the adapter's bytes only.
"""

from __future__ import annotations

from rlsim.sim.costs.lora import adapter_bytes, adapter_params, lora_step_overhead_s


def serve_adapter(engines: list, lora) -> None:
    """Each engine's per-step cost grows by its LoRA kernels (decode and prefill steps alike)."""
    shared: dict = {}  # identical replicas keep sharing one decode-coefficient table, now with the overhead
    for e in engines:
        e.add_step_overhead(lora_step_overhead_s(e.model, e.hw, e.tp, lora.rank, lora.targets, lora.kernel_us * 1e-6),
                            shared)


def update_kwargs(model, lora) -> dict:
    """`train_pass_time` keywords for an adapter update: frozen-base FLOPs, adapter-only optimizer and grads."""
    return {"adapters": adapter_params(model, lora.rank, lora.targets)}


def adapter_view(model, lora):
    """The model as a weight transfer sees it when only the adapter moves: its bytes are the adapter's."""
    return model.model_copy(update={"weight_bytes": sync_bytes(model, lora) / model.params})


def sync_bytes(model, lora) -> float:
    return adapter_bytes(model, lora.rank, lora.targets)


def store_sync_time(model, lora) -> float:
    """Shared storage: the trainer writes the adapter once, every engine reads it (in parallel)."""
    return 2 * sync_bytes(model, lora) / (lora.store_gb_per_s * 1e9)
