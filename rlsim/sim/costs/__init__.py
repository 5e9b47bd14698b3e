"""Cost models: pure functions of (model shape, hardware profile, parallelism, work) -> seconds or bytes.

The surface the tools price single operations through (calibration, planning bounds, reproductions), beside
the simulation API (rlsim.sim.api). Re-exported lazily: importing the package loads none of these until one
is used.
"""

from __future__ import annotations

from rlsim._lazy import lazy_exports

_WHERE = {
    "allgather_time": "rlsim.sim.costs.collectives",
    "allreduce_time": "rlsim.sim.costs.collectives",
    "decode_coefficients": "rlsim.sim.costs.generation",
    "decode_step_time": "rlsim.sim.costs.generation",
    "DecodeCoefficients": "rlsim.sim.costs.generation",
    "ENGINE_KINDS": "rlsim.sim.costs.engine_kinds",
    "engine_overheads": "rlsim.sim.costs.engine_kinds",
    "engine_weight_bytes_per_gpu": "rlsim.sim.costs.memory",
    "exposed_grad_comm": "rlsim.sim.costs.training",
    "forward_flops": "rlsim.sim.costs.training",
    "forward_memory_per_gpu": "rlsim.sim.costs.memory",
    "forward_pass_time": "rlsim.sim.costs.training",
    "grad_allreduce_time": "rlsim.sim.costs.training",
    "grouped_gemm_work": "rlsim.sim.costs.moe",
    "kv_capacity_tokens": "rlsim.sim.costs.memory",
    "layer_memory_elements": "rlsim.sim.costs.training_ops",
    "linear_layers_time": "rlsim.sim.costs.generation",
    "MemoryBreakdown": "rlsim.sim.costs.memory",
    "offload_bytes_per_gpu": "rlsim.sim.costs.offload",
    "offload_time": "rlsim.sim.costs.offload",
    "pcie_transfer_time": "rlsim.sim.costs.offload",
    "pipeline_bubble_factor": "rlsim.sim.costs.training",
    "prefill_time": "rlsim.sim.costs.generation",
    "reshard_bytes_per_gpu": "rlsim.sim.costs.resharding",
    "reshard_redundant_bytes_per_gpu": "rlsim.sim.costs.resharding",
    "reshard_time": "rlsim.sim.costs.resharding",
    "ring_bandwidth_bytes_per_s": "rlsim.sim.costs.collectives",
    "serving_itl": "rlsim.sim.costs.generation",
    "sync_parts": "rlsim.sim.costs.weight_sync",
    "sync_time": "rlsim.sim.costs.weight_sync",
    "SyncSetup": "rlsim.sim.costs.weight_sync",
    "touched_fraction": "rlsim.sim.costs.moe",
    "tp_allreduce_time": "rlsim.sim.costs.generation",
    "train_pass_time": "rlsim.sim.costs.training",
    "training_activation_bytes": "rlsim.sim.costs.memory",
    "training_flops": "rlsim.sim.costs.training",
    "training_memory_per_gpu": "rlsim.sim.costs.memory",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
