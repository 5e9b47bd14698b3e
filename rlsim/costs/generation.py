"""Generation costs: decode steps (roofline max of compute and memory, plus TP all-reduce and a fixed
per-step overhead) and prefill. Pure functions; the inference engine only calls these.

Between two changes of an engine's running batch every sequence gains one token per step, so the
total context S grows by B per step and the step time is max(affine, affine) in the step index.
`DecodeCoefficients` sums and inverts that in closed form: the engine schedules one event per
batch change, never one per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlsim.costs.collectives import allreduce_time, ring_bandwidth_bytes_per_s
from rlsim.hardware import HardwareProfile
from rlsim.model_shapes import ModelShape


def _affine_sum(a: float, g: float, i: int, j: int) -> float:
    """sum_{k=i}^{j-1} (a + g*k)."""
    n = j - i
    if n <= 0:
        return 0.0
    return n * a + g * (i + j - 1) * n / 2.0


@dataclass(frozen=True)
class DecodeCoefficients:
    """Step time t(S) = max(c0 + c1*S, m0 + m1*S) + fixed for a fixed batch size, S = total context."""

    compute0: float
    compute1: float
    mem0: float
    mem1: float
    fixed: float
    batch: int

    def step_time(self, total_context: float) -> float:
        s = total_context
        return max(self.compute0 + self.compute1 * s, self.mem0 + self.mem1 * s) + self.fixed

    def steps_time(self, s0: float, n: int) -> float:
        """Time of n consecutive steps starting at total context s0 (context grows by `batch` per step)."""
        if n <= 0:
            return 0.0
        b = self.batch
        ac, gc = self.compute0 + self.compute1 * s0, self.compute1 * b
        am, gm = self.mem0 + self.mem1 * s0, self.mem1 * b
        total = n * self.fixed
        # compute - memory = (ac - am) + (gc - gm) k changes sign at most once.
        cross = (am - ac) / (gc - gm) if gc != gm else math.inf  # where compute and memory meet
        if not math.isfinite(cross):  # parallel (or numerically parallel) lines: one branch throughout
            return total + (_affine_sum(ac, gc, 0, n) if ac >= am else _affine_sum(am, gm, 0, n))
        k = min(max(math.ceil(cross), 0), n)
        if gc > gm:  # memory-bound first, compute-bound from k on
            return total + _affine_sum(am, gm, 0, k) + _affine_sum(ac, gc, k, n)
        return total + _affine_sum(ac, gc, 0, k) + _affine_sum(am, gm, k, n)

    def steps_within(self, s0: float, budget: float, n_max: int) -> int:
        """Largest n <= n_max whose steps fit in `budget` seconds (binary search on the closed form)."""
        if budget <= 0 or n_max <= 0:
            return 0
        if self.steps_time(s0, n_max) <= budget:
            return n_max
        lo, hi = 0, n_max  # steps_time(lo) <= budget < steps_time(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.steps_time(s0, mid) <= budget:
                lo = mid
            else:
                hi = mid
        return lo


def _weight_bytes_read(model: ModelShape, batch: int) -> float:
    """Weights streamed per step: an MoE step reads only the experts its tokens touch."""
    if not model.num_experts:
        return model.weight_bytes_total
    e, k = model.num_experts, model.experts_per_token
    touched = 1.0 - (1.0 - k / e) ** max(batch, 1)
    expert_params = model.layers * 3 * model.hidden * model.ffn * e
    return (model.params - expert_params * (1.0 - touched)) * model.weight_bytes


def tp_allreduce_time(
    model: ModelShape, hw: HardwareProfile, tp: int, tokens: int, gpus_per_node: int = 8
) -> float:
    """Two activation all-reduces per layer (attention out, MLP out) of tokens x hidden elements.

    TP beyond one node (tp > gpus_per_node) runs its all-reduces over the NICs.
    """
    if tp <= 1:
        return 0.0
    size = tokens * model.hidden * 2.0  # activations stay bf16 even with fp8 weights
    bw = ring_bandwidth_bytes_per_s(hw, tp, gpus_per_node)
    return 2 * model.layers * allreduce_time(size, tp, bw, hw.collective_latency_s)


def decode_coefficients(
    model: ModelShape, hw: HardwareProfile, tp: int, batch: int, host_per_seq_s: float = 0.0
) -> DecodeCoefficients:
    """Coefficients of the decode step time for `batch` running sequences on a `tp`-GPU engine.

    `host_per_seq_s` is host work per running sequence per step that the engine does not overlap with
    the GPU (DistServe's c*B term, REFERENCE.md section 2): scheduling, input preparation, sampler
    bookkeeping, detokenisation. Engines that overlap their scheduler with the GPU have ~0; vLLM
    before v0.6 spent 29% of its step time scheduling (REFERENCE.md section 2).
    """
    peak = hw.peak_flops_for(model.weight_bytes) * tp * hw.decode_eta_compute
    bw = hw.hbm_bytes_per_s * tp * hw.decode_eta_mem
    q_dim = model.heads * model.d_head
    return DecodeCoefficients(
        compute0=2.0 * model.active_params * batch / peak,
        compute1=4.0 * model.layers * q_dim / peak,
        mem0=_weight_bytes_read(model, batch) / bw,
        mem1=model.kv_bytes_per_token / bw,
        fixed=hw.decode_fixed_overhead_s + tp_allreduce_time(model, hw, tp, batch) + host_per_seq_s * batch,
        batch=batch,
    )


def decode_step_time(
    model: ModelShape, hw: HardwareProfile, tp: int, batch: int, total_context: float, host_per_seq_s: float = 0.0
) -> float:
    """One decode step: max(compute, memory) / efficiencies + TP all-reduce + fixed and per-sequence overhead."""
    return decode_coefficients(model, hw, tp, batch, host_per_seq_s).step_time(total_context)


def prefill_time(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    new_tokens: float,
    new_tokens_sq: float | None = None,
    cached_cross: float = 0.0,
) -> float:
    """One prefill iteration over `new_tokens` prompt tokens.

    Causal attention costs 2*L*q_dim*T^2 per sequence of T new tokens (`new_tokens_sq` = sum of T_i^2,
    default a single sequence) plus 4*L*q_dim*T*P for new tokens attending a cached prefix of P
    (`cached_cross` = sum of T_i * P_i). Weights are streamed once per iteration, so tiny prefills are
    memory bound; the engine's fixed step overhead and the TP all-reduces are paid once.
    """
    if new_tokens <= 0:
        return 0.0
    sq = new_tokens**2 if new_tokens_sq is None else new_tokens_sq
    q_dim = model.heads * model.d_head
    flops = 2.0 * model.active_params * new_tokens + 2.0 * model.layers * q_dim * (sq + 2.0 * cached_cross)
    compute = flops / (hw.peak_flops_for(model.weight_bytes) * tp * hw.prefill_eta_compute)
    memory = _weight_bytes_read(model, int(new_tokens)) / (hw.hbm_bytes_per_s * tp * hw.decode_eta_mem)
    comm = tp_allreduce_time(model, hw, tp, int(new_tokens))
    return max(compute, memory) + hw.decode_fixed_overhead_s + comm


def serving_itl(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
) -> float:
    """Steady-state inter-token latency of a serving benchmark at fixed concurrency.

    Every request in flight finishes once per `output_tokens` decode steps and is replaced by a new
    one whose prefill stalls the batch, so a request sees (concurrency-1)/output_tokens foreign
    prefills per token on top of the decode step (mean context prompt + output/2). This is how a
    measured ITL curve such as NIM's (REFERENCE.md section 2) maps onto the decode/prefill costs.
    """
    ctx = concurrency * (prompt_tokens + output_tokens / 2.0)
    step = decode_step_time(model, hw, tp, concurrency, ctx)
    stall = (concurrency - 1) / output_tokens * prefill_time(model, hw, tp, prompt_tokens)
    return step + stall
