"""Cost models: pure functions of (model shape, hardware profile, parallelism, work) -> seconds or bytes."""

from rlsim.costs.collectives import (
    allgather_time,
    allreduce_time,
    broadcast_time,
    p2p_time,
    ring_bandwidth_bytes_per_s,
)
from rlsim.costs.generation import (
    DecodeCoefficients,
    decode_coefficients,
    decode_step_time,
    prefill_time,
    serving_itl,
    tp_allreduce_time,
)
from rlsim.costs.memory import (
    MemoryBreakdown,
    engine_memory_per_gpu,
    engine_weight_bytes_per_gpu,
    forward_memory_per_gpu,
    kv_capacity_tokens,
    training_activation_bytes,
    training_memory_per_gpu,
)
from rlsim.costs.offload import offload_bytes_per_gpu, offload_time, onload_time, pcie_transfer_time
from rlsim.costs.training import (
    TrainBreakdown,
    forward_flops,
    forward_time,
    forward_time_breakdown,
    grad_allreduce_time,
    pipeline_bubble_factor,
    train_time,
    train_time_breakdown,
    training_flops,
)

__all__ = [
    "DecodeCoefficients",
    "MemoryBreakdown",
    "TrainBreakdown",
    "allgather_time",
    "allreduce_time",
    "broadcast_time",
    "decode_coefficients",
    "decode_step_time",
    "engine_memory_per_gpu",
    "engine_weight_bytes_per_gpu",
    "forward_flops",
    "forward_memory_per_gpu",
    "forward_time",
    "forward_time_breakdown",
    "grad_allreduce_time",
    "kv_capacity_tokens",
    "offload_bytes_per_gpu",
    "offload_time",
    "onload_time",
    "p2p_time",
    "pcie_transfer_time",
    "pipeline_bubble_factor",
    "prefill_time",
    "ring_bandwidth_bytes_per_s",
    "serving_itl",
    "tp_allreduce_time",
    "train_time",
    "train_time_breakdown",
    "training_activation_bytes",
    "training_flops",
    "training_memory_per_gpu",
]
