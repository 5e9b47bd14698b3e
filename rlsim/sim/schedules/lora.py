"""LoRA RL on any training schedule: what changes when the actor trains adapters over a frozen base.

The costs are in rlsim/sim/costs/lora.py; the phases' (the actor's update trains and all-reduces the
adapter only, a weight sync moves the adapter's bytes only) in rlsim/sim/costs/phase_costs.py. This
module applies them to the engines: they pay the LoRA kernels in every step.
"""

from __future__ import annotations

from rlsim.sim.costs.lora import lora_step_overhead_s


def serve_adapter(engines: list, lora) -> None:
    """Each engine's per-step cost grows by its LoRA kernels (decode and prefill steps alike)."""
    shared: dict = {}  # identical replicas keep sharing one decode-coefficient table, now with the overhead
    for e in engines:
        e.add_step_overhead(lora_step_overhead_s(e.model, e.hw, e.tp, lora.rank, lora.targets, lora.kernel_us * 1e-6),
                            shared)
