"""Training and forward-only pass times (docs/sources.md, Design notes: Cost models; docs/sources.md §3).

Time = model FLOPs / (GPUs x peak x MFU), stretched by the 1F1B pipeline bubble, plus whatever part
of the data-parallel gradient all-reduce is not hidden behind the backward pass. Tensor-parallel
communication inside a layer is not modelled separately: it is part of what the measured MFU absorbs.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlsim.costs.collectives import allreduce_time, ring_bandwidth_bytes_per_s
from rlsim.hardware import HardwareProfile
from rlsim.model_shapes import ModelShape

# Backward is two of the three matmul passes (activation grads + weight grads) per forward one.
BACKWARD_FRACTION = 2.0 / 3.0


def training_flops(model: ModelShape, tokens: float, seq_len_sq_sum: float) -> float:
    """6N per token plus causal attention 12*L*q_dim*sum(s^2), as in verl's flops_counter.

    N is the active parameter count: an MoE token only multiplies through its routed experts.
    """
    q_dim = model.heads * model.d_head
    return 6.0 * model.active_params * tokens + 12.0 * model.layers * q_dim * seq_len_sq_sum


def forward_flops(model: ModelShape, tokens: float, seq_len_sq_sum: float) -> float:
    """A forward pass is a third of training: 2N per token + 4*L*q_dim*sum(s^2)."""
    return training_flops(model, tokens, seq_len_sq_sum) / 3.0


def pipeline_bubble_factor(pp: int, micro_batches: int) -> float:
    """1F1B pipeline: m micro-batches take (m + pp - 1) slots of one micro-batch each."""
    if pp < 1 or micro_batches < 1:
        raise ValueError(f"pp ({pp}) and micro_batches ({micro_batches}) must be >= 1")
    return (micro_batches + pp - 1) / micro_batches


def _data_parallel(gpus: int, tp: int, pp: int) -> int:
    if tp < 1 or pp < 1 or gpus < tp * pp or gpus % (tp * pp):
        raise ValueError(f"{gpus} GPUs cannot be split into tp={tp} x pp={pp} model-parallel groups")
    return gpus // (tp * pp)


def grad_allreduce_time(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    pp: int,
    dp: int,
    gpus_per_node: int,
    grad_bytes: float = 2.0,
) -> float:
    """Ring all-reduce of each rank's gradient shard (grad_bytes*N/(tp*pp)) across its dp peers.

    The dp group is strided by tp*pp, so it leaves the node (and drops to NIC bandwidth) as soon as
    the whole tp*pp*dp job does. N counts every expert: all of them have gradients.
    """
    size = grad_bytes * model.params / (tp * pp)
    bw = ring_bandwidth_bytes_per_s(hw, tp * pp * dp, gpus_per_node)
    return allreduce_time(size, dp, bw, hw.collective_latency_s)


@dataclass(frozen=True)
class TrainBreakdown:
    """Seconds of one training (or forward-only) pass over a batch, by cause."""

    compute: float  # busy time: FLOPs / (gpus x peak x MFU)
    bubble: float  # idle pipeline slots added by 1F1B
    grad_comm: float  # full gradient all-reduce time
    grad_comm_exposed: float  # the part of it not hidden behind backward

    @property
    def total(self) -> float:
        return self.compute + self.bubble + self.grad_comm_exposed


def train_time_breakdown(
    model: ModelShape,
    hw: HardwareProfile,
    gpus: int,
    tokens: float,
    seq_len_sq_sum: float,
    *,
    tp: int = 1,
    pp: int = 1,
    micro_batches: int = 1,
    gpus_per_node: int = 8,
    overlap_grad_reduce: bool = True,
    mfu: float | None = None,
) -> TrainBreakdown:
    """Training step cost split into compute, pipeline bubble and gradient communication.

    With overlap, gradient buckets are reduced while backward still runs, so only the part of the
    all-reduce longer than the backward busy time (2/3 of compute, bubble excluded) is exposed.
    """
    dp = _data_parallel(gpus, tp, pp)
    eff = hw.train_mfu if mfu is None else mfu
    compute = training_flops(model, tokens, seq_len_sq_sum) / (gpus * hw.peak_flops * eff)
    bubble = compute * (pipeline_bubble_factor(pp, micro_batches) - 1.0)
    comm = grad_allreduce_time(model, hw, tp, pp, dp, gpus_per_node)
    exposed = max(0.0, comm - BACKWARD_FRACTION * compute) if overlap_grad_reduce else comm
    return TrainBreakdown(compute=compute, bubble=bubble, grad_comm=comm, grad_comm_exposed=exposed)


def train_time(
    model: ModelShape,
    hw: HardwareProfile,
    gpus: int,
    tokens: float,
    seq_len_sq_sum: float,
    *,
    tp: int = 1,
    pp: int = 1,
    micro_batches: int = 1,
    gpus_per_node: int = 8,
    overlap_grad_reduce: bool = True,
    mfu: float | None = None,
) -> float:
    """Seconds to train on `tokens` tokens (sum of squared sequence lengths `seq_len_sq_sum`)."""
    return train_time_breakdown(
        model, hw, gpus, tokens, seq_len_sq_sum, tp=tp, pp=pp, micro_batches=micro_batches,
        gpus_per_node=gpus_per_node, overlap_grad_reduce=overlap_grad_reduce, mfu=mfu,
    ).total


def forward_time_breakdown(
    model: ModelShape,
    hw: HardwareProfile,
    gpus: int,
    tokens: float,
    seq_len_sq_sum: float,
    *,
    tp: int = 1,
    pp: int = 1,
    micro_batches: int = 1,
    mfu: float | None = None,
) -> TrainBreakdown:
    """Forward-only pass (reference, old log-prob, values, reward): no gradients, so no all-reduce."""
    _data_parallel(gpus, tp, pp)
    eff = hw.forward_mfu if mfu is None else mfu
    compute = forward_flops(model, tokens, seq_len_sq_sum) / (gpus * hw.peak_flops * eff)
    bubble = compute * (pipeline_bubble_factor(pp, micro_batches) - 1.0)
    return TrainBreakdown(compute=compute, bubble=bubble, grad_comm=0.0, grad_comm_exposed=0.0)


def forward_time(
    model: ModelShape,
    hw: HardwareProfile,
    gpus: int,
    tokens: float,
    seq_len_sq_sum: float,
    *,
    tp: int = 1,
    pp: int = 1,
    micro_batches: int = 1,
    mfu: float | None = None,
) -> float:
    """Seconds of a forward-only pass: forward FLOPs / (gpus x peak x forward MFU) x bubble factor."""
    return forward_time_breakdown(
        model, hw, gpus, tokens, seq_len_sq_sum, tp=tp, pp=pp, micro_batches=micro_batches, mfu=mfu
    ).total
