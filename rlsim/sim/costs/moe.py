"""Expert parallelism (EP) of MoE layers: the dispatch/combine all-to-all and the busiest rank's share.

With `ep` > 1 an MoE layer's experts are sharded over `ep` GPUs (whole experts, or tensor-split over the
remaining tp / ep when ep < tp) instead of every expert being tensor-sliced over the whole TP group. Each
layer then moves every routed token copy to the GPU that owns its expert and back: two all-to-alls in a
forward pass (dispatch, combine), four with backward, six when full recompute re-runs the forward. The
GPU that receives the most routed tokens sets the layer's pace. docs/operators.md, "Expert parallelism".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from statistics import NormalDist

import numpy as np

from rlsim.sim.costs.collectives import alltoall_time
from rlsim.sim.costs.layout import ParallelLayout
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

# Activations cross the all-to-all in bf16, whatever the weights' dtype.
ACTIVATION_BYTES = 2.0


def expert_weights(hidden, ffn):
    """Weights of one expert (a gated MLP: gate, up and down, each hidden x ffn); numbers or arrays."""
    return 3 * hidden * ffn


def expert_params(model: ModelShape) -> float:
    """Parameters of all routed experts (gated MLPs); the router and everything else are not sharded by EP."""
    return float(model.layers * expert_weights(model.hidden, model.ffn) * model.num_experts)


def touched_fraction(tokens, num_experts, top_k):
    """Share of an MoE layer's experts a batch of `tokens` touches under uniform top-k routing:
    1 - (1 - k/E)^tokens (at least one token). Numbers, or arrays (calibration's rows) elementwise."""
    floor = np.maximum(tokens, 1) if isinstance(tokens, np.ndarray) else max(tokens, 1)
    return 1.0 - (1.0 - top_k / num_experts) ** floor


def touched_share(model: ModelShape, tokens: float) -> float:
    """`touched_fraction` of a model's experts."""
    return touched_fraction(tokens, model.num_experts, model.experts_per_token)


def grouped_gemm_work(touched, copies, hidden, ffn, weight_bytes):
    """(bytes read, FLOPs) of one MoE layer's grouped expert GEMM on one GPU: the `touched` experts' weights
    (each `ffn` wide on this GPU) read once, and `copies` routed token copies through gate, up and down
    (2 FLOPs per weight). Numbers or arrays; the cost is hypot(read / (BW eta_mem), FLOPs / (peak eta_compute))."""
    return touched * 3.0 * hidden * ffn * weight_bytes, copies * 6.0 * hidden * ffn


@cache
def max_normal_quantile(n: int) -> float:
    """Expected largest of n independent standard normals, Blom's (1958) closed form
    Phi^-1((n - 0.375) / (n + 0.25)): 0.59 for n = 2 (exact 0.56), 1.43 for n = 8 (exact 1.42)."""
    if n <= 1:
        return 0.0
    return NormalDist().inv_cdf((n - 0.375) / (n + 0.25))


def expected_max_count(trials: float, p: float, ranks: int, cap: float) -> float:
    """Expected largest of `ranks` Binomial(trials, p) counts, normal approximation, at most `cap`."""
    mean = trials * p
    busiest = mean + max_normal_quantile(ranks) * (trials * p * (1.0 - p)) ** 0.5
    return busiest if busiest < cap else cap


def token_imbalance(model: ModelShape, tokens: float, ep: int) -> float:
    """Routed tokens of the busiest EP rank over the mean (>= 1): each of tokens x k routed copies lands on a
    rank with probability 1/ep (uniform routing), and a token reaches at most min(k, experts per rank) there."""
    k = model.experts_per_token
    if ep <= 1 or tokens <= 0:
        return 1.0
    mean = tokens * k / ep
    cap = tokens * min(k, model.num_experts // ep)
    return expected_max_count(tokens * k, 1.0 / ep, ep, cap) / mean


def read_imbalance(model: ModelShape, tokens: float, ep: int) -> float:
    """Experts the busiest EP rank reads over the mean (>= 1): of its E / ep experts each is touched by a
    batch of `tokens` with probability p = 1 - (1 - k/E)^tokens (the engine's touched-expert estimate)."""
    if ep <= 1:
        return 1.0
    p = touched_share(model, tokens)
    local = model.num_experts / ep
    return expected_max_count(local, p, ep, local) / (local * p)


def ep_alltoall_time(hw: HardwareProfile, size_bytes: float, ep: int, gpus_per_node: int) -> float:
    """One all-to-all over `ep` GPUs of `size_bytes` per GPU.

    Inside a node (an NVLink domain, `hw.nvlink_domain`: NVL72 joins 72 GPUs of 18 hosts): the p2p latency +
    (ep-1)/ep of the buffer over NVLink. Across domains (ep packed onto domains of g GPUs): the share bound
    for other domains, (ep - g)/ep, crosses the GPU's NIC while the in-domain share (g - 1)/ep goes over
    NVLink at the same time; the slower of the two, plus the cross-node p2p latency.
    """
    if ep <= 1 or size_bytes <= 0:
        return 0.0
    domain = hw.nvlink_domain(gpus_per_node)  # a node, or an NVL72 rack's 72 GPUs
    if ep <= domain:
        return alltoall_time(size_bytes, ep, hw.intra_node_bytes_per_s(), hw.p2p_latency_s())
    off_node = size_bytes * (ep - domain) / ep / hw.nic_bytes_per_s
    on_node = size_bytes * (domain - 1) / ep / hw.intra_node_bytes_per_s()
    return hw.p2p_latency_s(inter_node=True) + (off_node if off_node > on_node else on_node)


def dispatch_bytes(model: ModelShape, tokens: float, ranks: int) -> float:
    """Bytes one GPU sends in a dispatch (or combine) of `tokens` tokens spread over `ranks` GPUs: its
    tokens x experts_per_token copies of the hidden state, bf16."""
    return tokens / ranks * model.experts_per_token * model.hidden * ACTIVATION_BYTES


def generation_alltoall_time(model: ModelShape, hw: HardwareProfile, ep: int, tokens: float,
                             gpus_per_node: int) -> float:
    """Dispatch + combine of one engine step over `tokens` tokens, every MoE layer (the batch's tokens are
    split over the EP ranks, as DP attention or SGLang's scatter before DeepEP dispatch does)."""
    if ep <= 1 or not model.num_experts or tokens <= 0:
        return 0.0
    return 2.0 * model.layers * ep_alltoall_time(hw, dispatch_bytes(model, tokens, ep), ep, gpus_per_node)


def ep_read_and_flops(model: ModelShape, tokens: float, ep: int) -> tuple[float, float]:
    """(weight bytes, active parameters) an EP engine step behaves as if it read and multiplied, counting
    the busiest rank's expert share times ep: the dense part as is, the experts scaled by the imbalances."""
    e, k = model.num_experts, model.experts_per_token
    experts = expert_params(model)
    touched = touched_share(model, tokens)
    dense = model.params - experts
    read = (dense + experts * touched * read_imbalance(model, tokens, ep)) * model.weight_bytes
    active_experts = experts * k / e
    flops_params = model.active_params - active_experts + active_experts * token_imbalance(model, tokens, ep)
    return read, flops_params


def expert_gemm_time(model: ModelShape, hw: HardwareProfile, tokens: float, tp: int, ep: int) -> float:
    """Seconds of every MoE layer's grouped expert GEMM (and the gating/top-k/shuffle per-token term) on the
    busiest GPU of a step over `tokens` tokens, with a profile that has the fitted form (`hw.moe_gemm_fitted`):
    per layer, hypot(read / (BW eta_mem), flops / (peak eta_compute)). A GPU holds
    E / ep experts, each tensor-split over max(1, tp / ep) GPUs; it reads the experts it touches (the busiest
    rank's, `read_imbalance`) and multiplies the routed token copies it receives (`token_imbalance`).
    docs/operators.md, "MoE layers". The layer's fixed cost stays `moe_layer_fixed_us` (kernel-only)."""
    if tokens <= 0:
        return 0.0
    e, k = model.num_experts, model.experts_per_token
    ep = max(ep, 1)
    ffn = model.ffn / ParallelLayout(tp=tp, ep=ep, engine=True).expert_tensor_split
    touched = e / ep * touched_share(model, tokens) * read_imbalance(model, tokens, ep)
    copies = tokens * k / ep * token_imbalance(model, tokens, ep)
    read_bytes, flop_count = grouped_gemm_work(touched, copies, model.hidden, ffn, model.weight_bytes)
    read = read_bytes / (hw.hbm_bytes_per_s * hw.moe_gemm_eta_mem)
    flops = flop_count / (hw.peak_flops_for(model.weight_bytes) * hw.moe_gemm_eta_compute)
    layer = (read * read + flops * flops) ** 0.5
    if hw.moe_routing_per_token_us is not None:
        layer += hw.moe_routing_per_token_us * 1e-6 * tokens / ep
    return model.layers * layer


def dense_read_and_flops(model: ModelShape) -> tuple[float, float]:
    """(weight bytes, active parameters per token) of an MoE model's parts outside its routed experts."""
    experts = expert_params(model)
    return (model.params - experts) * model.weight_bytes, model.active_params - experts * (
        model.experts_per_token / model.num_experts)


@dataclass(frozen=True)
class TrainingEP:
    """Expert parallelism of a training or forward-only role: all-to-alls per micro-batch of each DP rank."""

    model: ModelShape
    hw: HardwareProfile
    ep: int
    tp: int
    pp: int
    gpus_per_node: int

    def alltoalls(self, train: bool, recompute: str) -> int:
        """Per MoE layer and micro-batch: 2 forward, +2 backward, +2 when full recompute re-runs the forward."""
        if not train:
            return 2
        return 6 if recompute == "full" else 4

    def pass_time(self, rank_lens: np.ndarray, micro: int, train: bool, recompute: str) -> float:
        """Seconds one GPU of a DP rank spends in all-to-alls over a pass of `micro` micro-batches: each GPU
        sends its 1/tp of a micro-batch's tokens (sequence parallel) through its stage's layers / pp MoE layers."""
        tokens = float(np.sum(rank_lens))
        if tokens <= 0:
            return 0.0
        size = dispatch_bytes(self.model, tokens / micro, self.tp)
        one = ep_alltoall_time(self.hw, size, self.ep, self.gpus_per_node)
        return self.alltoalls(train, recompute) * self.model.layers / self.pp * micro * one
