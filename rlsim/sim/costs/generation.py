"""Generation costs: decode steps and prefill, as measured engines behave. Pure functions; the
inference engine only calls these.

A decode step is the sum of what a real engine runs one after another (docs/sources.md §2, §9):
- the linear layers: a smooth roofline sqrt(weights_read^2 + gemm_compute^2) of the weight read
  (HBM) and the GEMM work (2 N B FLOPs). It is flat in batch while the weight read dominates and
  bends up past ~128 tokens, as Vidur's and Frontier's per-operator profiles show (a flat
  max(compute, memory) is 25-35% low at 128-256 tokens);
- attention reading every running sequence's KV (or its FLOPs where those dominate): linear in the
  total context S;
- 2 x layers tensor-parallel all-reduces, each a latency plus its bytes;
- the engine's fixed per-step cost and its host work per step and per running sequence (`engine_kinds`),
  added where the engine does not overlap it with the GPU, a floor under the step where it does.

For a fixed batch B the step is affine in S, t = a(B) + b*S, and S grows by B per step, so the time
of n steps and the number of steps within a budget are closed forms: the engine schedules one event
per batch change, never one per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from rlsim.sim.costs.collectives import allreduce_time, ring_bandwidth_bytes_per_s
from rlsim.sim.costs.engine_kinds import EngineOverheads, generic_overheads
from rlsim.sim.costs.moe import (
    dense_read_and_flops,
    ep_read_and_flops,
    expert_gemm_time,
    expert_params,
    generation_alltoall_time,
    touched_share,
)
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape


def _series(first: float, g: float, n: int) -> float:
    """n steps whose first costs `first` and each next `g` more: the one closed form of `steps_time`."""
    return n * first + g * n * (n - 1) / 2.0


def kernels_per_layer(tp: int, moe: bool = False, ep: int = 1) -> int:
    """Kernels one layer launches in a decode or prefill step: two norms, QKV, rope, KV-cache write,
    attention, O, up (gate+up fused), activation, down, two residual adds, two all-reduces at TP > 1
    (vLLM's and SGLang's Llama layer), for an MoE layer gating, top-k, shuffle and a second grouped
    GEMM, and with expert parallelism its dispatch and combine (docs/operators.md)."""
    return 12 + (2 if tp > 1 else 0) + (4 if moe else 0) + (2 if moe and ep > 1 else 0)


def launch_time(model: ModelShape, tp: int, overheads: EngineOverheads, ep: int = 1, batch: int | None = None) -> float:
    """Host launch cost of one step's kernels when the engine runs eagerly (0 with CUDA graphs), or of a decode
    step at `batch` above the engine's largest captured CUDA graph."""
    per_kernel = overheads.launch_per_kernel_s if batch is None else overheads.launch_per_kernel_at(batch)
    return model.layers * kernels_per_layer(tp, model.num_experts > 0, ep) * per_kernel


@dataclass(frozen=True)
class DecodeCoefficients:
    """Step time t(S) = max(intercept + slope*S + fixed, host_floor) for a fixed batch, S = total running context.

    `intercept` is the GPU work independent of context (linear layers, TP all-reduces), `fixed` the
    engine's per-step and per-sequence overheads that add to it (kept apart: chunked prefill shares a step's
    fixed cost with the decode it rides on). `host_floor` is the host time of an engine that overlaps its
    host work with the GPU step (vLLM V1 async scheduling, SGLang's overlap scheduler): a step lasts at least
    that long, so the host is exposed only where it outlasts the GPU (`engine_kinds`). 0: no overlapped host.
    """

    intercept: float
    slope: float
    fixed: float
    batch: int
    host_floor: float = 0.0

    def step_time(self, total_context: float) -> float:
        t = self.intercept + self.slope * total_context + self.fixed
        return t if t > self.host_floor else self.host_floor

    def _floored(self, first: float, g: float, n: int) -> int:
        """How many of n steps (the first costing `first` on the GPU, each next `g` more) the host floor sets."""
        h = self.host_floor
        if h <= first:
            return 0
        if g * n <= h - first:  # the floor outlasts every step's GPU work (g = 0 included)
            return n
        k = math.ceil((h - first) / g)
        return k if k < n else n

    def steps_time(self, s0: float, n: int) -> float:
        """Time of n consecutive steps starting at total context s0 (context grows by `batch` per step)."""
        if n <= 0:
            return 0.0
        first = self.intercept + self.fixed + self.slope * s0
        g = self.slope * self.batch
        k = self._floored(first, g, n)
        if k == 0:
            return _series(first, g, n)
        return k * self.host_floor + _series(first + g * k, g, n - k)

    def steps_within(self, s0: float, budget: float, n_max: int) -> int:
        """Largest n <= n_max whose steps fit in `budget` seconds (closed form, then an exact nudge)."""
        return self.steps_split(s0, budget, n_max)[0]

    def steps_split(
        self, s0: float, budget: float, n_max: int, t_max: float | None = None
    ) -> tuple[int, float, float | None]:
        """(n, steps_time(s0, n), steps_time(s0, n + 1) or None if n == n_max) for n = steps_within(...).

        An engine cutting a segment short needs all three (the steps done, and when the step in flight
        ends); the nudge below has already worked them out, so they come back with n. `t_max` is
        steps_time(s0, n_max) if the caller has it (the segment's planned length).
        """
        if budget <= 0 or n_max <= 0:
            return 0, 0.0, (None if n_max <= 0 else self.steps_time(s0, 1))
        if t_max is None:
            t_max = self.steps_time(s0, n_max)
        if t_max <= budget:
            return n_max, t_max, None
        first = self.intercept + self.fixed + self.slope * s0
        g = self.slope * self.batch
        k = self._floored(first, g, n_max)
        if not k:
            return _nudge(lambda m: _series(first, g, m), budget, n_max, self._series_within(first, g, budget, n_max))
        floor = self.host_floor  # the first k steps last host_floor each, then the GPU series from step k on
        if k * floor >= budget:
            n = int(budget / floor)
        else:
            n = k + self._series_within(first + g * k, g, budget - k * floor, n_max - k)
        return _nudge(lambda m: self.steps_time(s0, m), budget, n_max, n)

    @staticmethod
    def _series_within(first: float, g: float, budget: float, n_max: int) -> int:
        """The closed-form estimate of how many steps of the series (first, g) fit in `budget` (nudged after)."""
        if g > 0:  # g/2 n^2 + (first - g/2) n - budget = 0
            b = first - g / 2.0
            n = int((-b + math.sqrt(b * b + 2.0 * g * budget)) / g)
        else:
            n = int(budget / first) if first > 0 else n_max
        return 0 if n < 0 else (n_max if n > n_max else n)  # min(max(n, 0), n_max), without the builtins


def _nudge(t, budget: float, n_max: int, n: int) -> tuple[int, float, float | None]:
    """`steps_split`'s exact answer from an estimate n of the steps within `budget`, `t(m)` the time of m steps:
    (n, t(n), t(n + 1) or None at n_max)."""
    n = 0 if n < 0 else (n_max if n > n_max else n)  # min(max(n, 0), n_max), without the builtins
    t_n = t(n)
    while n > 0 and t_n > budget:
        n -= 1
        t_n = t(n)
    while n < n_max:
        t_next = t(n + 1)
        if t_next > budget:
            return n, t_n, t_next
        n, t_n = n + 1, t_next
    return n, t_n, None


def _weight_bytes_read(model: ModelShape, batch: int) -> float:
    """Weights streamed per step: an MoE step reads only the experts its tokens touch."""
    if not model.num_experts:
        return model.weight_bytes_total
    return (model.params - expert_params(model) * (1.0 - touched_share(model, batch))) * model.weight_bytes


def _step_work(model: ModelShape, hw: HardwareProfile, tokens: float, tp: int, ep: int) -> tuple[float, float, float]:
    """(weight bytes read, parameters multiplied per token, grouped expert GEMM seconds) of one engine step over
    `tokens` tokens, before the roofline: an MoE on a profile with the fitted grouped GEMM prices its experts
    apart (`moe.expert_gemm_time`); with expert parallelism otherwise, the experts are the busiest EP rank's."""
    if model.num_experts and hw.moe_gemm_fitted:
        read, flop_params = dense_read_and_flops(model)
        return read, flop_params, expert_gemm_time(model, hw, tokens, tp, ep)
    if ep > 1 and model.num_experts:
        read, flop_params = ep_read_and_flops(model, tokens, ep)
        return read, flop_params, 0.0
    return _weight_bytes_read(model, tokens), model.active_params, 0.0


def tp_allreduce_time(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    tokens: int,
    gpus_per_node: int = 8,
    latency_s: float | None = None,
) -> float:
    """Two activation all-reduces per layer (attention out, MLP out) of tokens x hidden elements.

    `latency_s` is one all-reduce's fixed latency (an engine's custom one-shot all-reduce, or NCCL's
    small-message latency); None keeps the ring form, 2(tp-1) hops of the profile's latency. At decode
    sizes (a few KB) the latency is nearly all of it. TP beyond one node runs over the NICs.
    """
    if tp <= 1:
        return 0.0
    size = tokens * model.hidden * 2.0  # activations stay bf16 even with fp8 weights
    bw = ring_bandwidth_bytes_per_s(hw, tp, gpus_per_node)
    if latency_s is None:
        one = allreduce_time(size, tp, bw, hw.collective_latency_s)
    else:
        one = allreduce_time(size, tp, bw, 0.0) + latency_s
    return 2 * model.layers * one


def linear_layers_time(
    model: ModelShape, hw: HardwareProfile, tp: int, tokens: int, eta_mem: float | None = None, ep: int = 1
) -> float:
    """The linear layers of one step over `tokens` tokens: a smooth roofline of weight read and GEMMs.

    sqrt(read^2 + compute^2) matches Vidur's Llama-3-8B/A100 operator profile within 4% at 1, 128,
    256 and 2048 tokens and Frontier's Llama-2-7B/H800 profile (7.1 -> 7.6 ms from 1 to 128 tokens),
    where max(read, compute) is 26% low at 128 tokens (docs/sources.md §2, §9). `eta_mem` is the
    engine's weight-streaming efficiency (an engine kind's); default the profile's `decode_eta_mem`.
    A profile fitted to operators (`rlsim calibrate ops`, docs/operators.md) adds each layer's fixed
    kernel time (4 GEMMs' fixed cost and the norms, rope, activation and adds), which is what keeps a
    many-layer model at high TP from looking faster than its kernels. With expert parallelism (`ep` > 1)
    the experts' read and GEMMs are the busiest EP rank's (costs/moe.py). A profile with the fitted grouped
    GEMM (`moe_gemm_*`) prices the experts with it (`moe.expert_gemm_time`) beside the dense roofline.
    """
    return linear_roofline(model, hw, tp, tokens, hw.decode_eta_compute, eta_mem, ep)


def linear_roofline(model: ModelShape, hw: HardwareProfile, tp: int, tokens: float, eta_compute: float,
                    eta_mem: float | None = None, ep: int = 1) -> float:
    """The operator-fitted linear layers over `tokens` tokens at GEMM share of peak `eta_compute`: the one form
    decode steps (`linear_layers_time`, at `decode_eta_compute`) and training micro-batches
    (costs/training_ops.py, at `HardwareProfile.gemm_eta_compute(tokens)`) are priced with.

    sqrt(weight read^2 + GEMM compute^2), plus every layer's fixed kernel time (4 GEMMs' fixed cost and the
    small memory-bound operators at decode sizes, `layer_fixed_s`) and an MoE layer's fixed cost.
    """
    weight_read, flop_params, gemm = _step_work(model, hw, tokens, tp, ep)
    read = weight_read / (hw.hbm_bytes_per_s * tp * (eta_mem or hw.decode_eta_mem))
    compute = 2.0 * flop_params * tokens / (hw.peak_flops_for(model.weight_bytes) * tp * eta_compute)
    fixed = hw.layer_fixed_s
    if model.num_experts and hw.moe_layer_fixed_us is not None:
        fixed += hw.moe_layer_fixed_us * 1e-6  # gating, top-k routing, token shuffle, grouped-GEMM fixed cost
    return math.hypot(read, compute) + gemm + model.layers * fixed


def attention_seconds_per_context_token(
    model: ModelShape, hw: HardwareProfile, tp: int, eta_mem: float | None = None, queries: int = 1
) -> float:
    """Decode attention per token of running context: its KV read, or its FLOPs where those dominate.

    `eta_mem` is the attention kernel's HBM efficiency (an engine property); default the profile's. `queries`:
    positions per sequence attending at once (a speculative verification step's k + 1), one KV read for all.
    """
    kv = model.kv_bytes_per_token / (hw.hbm_bytes_per_s * tp * (eta_mem or hw.decode_eta_mem))
    flops = 4.0 * model.layers * model.heads * model.d_head / (
        hw.peak_flops_for(model.weight_bytes) * tp * hw.decode_eta_compute
    )
    if queries != 1:
        flops *= queries
    return max(kv, flops)


def decode_coefficients(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    batch: int,
    host_per_seq_s: float = 0.0,
    overheads: EngineOverheads | None = None,
    ep: int = 1,
    gpus_per_node: int = 8,
) -> DecodeCoefficients:
    """Coefficients of the decode step time for `batch` running sequences on a `tp`-GPU engine.

    Every layer also runs the decode-attention and KV-write kernels, whose fixed time (`attention_fixed_us`,
    fitted to Frontier's attention profiles, docs/operators.md) is paid once per layer and step.

    `overheads` are the engine's per-step costs (`engine_kinds.engine_overheads`); without them the
    hardware profile's calibrated per-step cost and `host_per_seq_s` apply (DistServe's c*B term,
    docs/sources.md §2: host work per running sequence that the engine does not hide behind the GPU).
    With expert parallelism (`ep` > 1, `gpus_per_node` to place it) every MoE layer adds its dispatch and
    combine all-to-alls to the intercept, and its experts are the busiest EP rank's (costs/moe.py).
    """
    o = overheads if overheads is not None else generic_overheads(hw, host_per_seq_s)
    padded = o.graph_batch(batch)  # a CUDA-graph replay computes the captured size's batch
    intercept = linear_layers_time(model, hw, tp, padded, o.weight_eta_mem, ep) + tp_allreduce_time(
        model, hw, tp, padded, latency_s=o.allreduce_latency_s)
    if ep > 1:
        intercept += generation_alltoall_time(model, hw, ep, batch, gpus_per_node)
    return DecodeCoefficients(
        intercept=intercept,
        slope=attention_seconds_per_context_token(model, hw, tp, o.attention_eta_mem),
        fixed=o.step_s + launch_time(model, tp, o, ep, batch) + o.exposed_host_s(batch)
        + model.layers * hw.attention_fixed_s,
        batch=batch,
        host_floor=o.host_floor_s(batch),
    )


def decode_step_time(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    batch: int,
    total_context: float,
    host_per_seq_s: float = 0.0,
    overheads: EngineOverheads | None = None,
    ep: int = 1,
    gpus_per_node: int = 8,
) -> float:
    """One decode step: linear layers + attention over the context + TP all-reduces + engine overheads (+ the
    expert-parallel all-to-alls and busiest rank at `ep` > 1)."""
    return decode_coefficients(model, hw, tp, batch, host_per_seq_s, overheads, ep, gpus_per_node).step_time(
        total_context)


def prefill_time(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    new_tokens: float,
    new_tokens_sq: float | None = None,
    cached_cross: float = 0.0,
    overheads: EngineOverheads | None = None,
    ep: int = 1,
    gpus_per_node: int = 8,
) -> float:
    """One prefill iteration over `new_tokens` prompt tokens.

    Causal attention costs 2*L*q_dim*T^2 per sequence of T new tokens (`new_tokens_sq` = sum of T_i^2,
    default a single sequence) plus 4*L*q_dim*T*P for new tokens attending a cached prefix of P
    (`cached_cross` = sum of T_i * P_i). Weights are streamed once per iteration, so tiny prefills are
    memory bound; the engine's fixed step cost and the TP all-reduces are paid once. `ep`, `gpus_per_node`:
    expert parallelism as in `decode_coefficients`.
    """
    if new_tokens <= 0:
        return 0.0
    sq = new_tokens**2 if new_tokens_sq is None else new_tokens_sq
    return PrefillCost(model, hw, tp, overheads, ep, gpus_per_node).time(new_tokens, sq, cached_cross)


class PrefillCost:
    """`prefill_time` for one engine (model, GPU, tp, engine kind), with what does not depend on the batch
    worked out once: an engine prefills once per admission round, and an agentic run has one per turn.

    Its `time` gives exactly `prefill_time`'s value (the same products, in the same order).
    """

    __slots__ = ("_model", "_hw", "_tp", "_latency_s", "_step_s", "_flops_per_token", "_flops_per_sq",
                 "_compute_rate", "_memory_rate", "_dense_memory", "_ep", "_gpus_per_node", "_gemm")

    def __init__(self, model: ModelShape, hw: HardwareProfile, tp: int, overheads: EngineOverheads | None = None,
                 ep: int = 1, gpus_per_node: int = 8):
        o = overheads if overheads is not None else generic_overheads(hw)
        self._model, self._hw, self._tp = model, hw, tp
        self._ep = ep if model.num_experts else 1
        self._gpus_per_node = gpus_per_node
        # A prefill iteration pays the engine's host step too (scheduling, input preparation) where it is exposed.
        self._latency_s = o.allreduce_latency_s
        self._step_s = o.step_s + launch_time(model, tp, o, self._ep) + o.exposed_host_s(0)
        self._flops_per_token = 2.0 * model.active_params
        self._flops_per_sq = 2.0 * model.layers * (model.heads * model.d_head)
        self._compute_rate = hw.peak_flops_for(model.weight_bytes) * tp * hw.prefill_eta_compute
        self._memory_rate = hw.hbm_bytes_per_s * tp * hw.decode_eta_mem
        # A dense model streams all its weights whatever the batch (an MoE only the experts it touches).
        self._dense_memory = None if model.num_experts else _weight_bytes_read(model, 1) / self._memory_rate
        self._gemm = bool(model.num_experts) and hw.moe_gemm_fitted

    def time(self, new_tokens: float, new_tokens_sq: float, cached_cross: float = 0.0) -> float:
        """One iteration over `new_tokens` new tokens (sum of squares `new_tokens_sq`, cross term as above).

        A named method rather than `__call__`: calling an instance goes through C and a fresh interpreter
        frame, a method call does not (an engine calls this once per admission round)."""
        if new_tokens <= 0:
            return 0.0
        if self._gemm or self._ep > 1:
            return self._ep_time(new_tokens, new_tokens_sq, cached_cross)
        flops = self._flops_per_token * new_tokens + self._flops_per_sq * (new_tokens_sq + 2.0 * cached_cross)
        compute = flops / self._compute_rate
        memory = self._dense_memory
        if memory is None:
            memory = _weight_bytes_read(self._model, int(new_tokens)) / self._memory_rate
        tp = self._tp
        comm = 0.0 if tp <= 1 else tp_allreduce_time(self._model, self._hw, tp, int(new_tokens),
                                                     latency_s=self._latency_s)
        return (memory if memory > compute else compute) + self._step_s + comm  # max(), without the builtin

    def rounds(self, total: float, new_tokens_sq: float, cached_cross: float,
               max_batched_tokens: int) -> tuple[int, float]:
        """(iterations, seconds) of prefilling `total` new tokens (sum of squares, cross term as in `time`) in chunks of
        at most `max_batched_tokens`: an engine's admission round, and a prefill pool's batch (costs/pd_disagg.py)."""
        iters = math.ceil(total / max_batched_tokens) or 1  # (total >= 0)
        return iters, iters * self.time(total / iters, new_tokens_sq / iters, cached_cross / iters)

    def _ep_time(self, new_tokens: float, new_tokens_sq: float, cached_cross: float) -> float:
        """`time` of an expert-parallel engine (the busiest EP rank's experts and the all-to-alls added), or of
        an MoE on a profile with the fitted grouped GEMM (its experts priced by `moe.expert_gemm_time`)."""
        model, hw, tp, ep = self._model, self._hw, self._tp, self._ep
        read, flop_params, gemm = _step_work(model, hw, new_tokens, tp, ep)
        flops = 2.0 * flop_params * new_tokens + self._flops_per_sq * (new_tokens_sq + 2.0 * cached_cross)
        compute, memory = flops / self._compute_rate, read / self._memory_rate
        comm = tp_allreduce_time(model, hw, tp, int(new_tokens), latency_s=self._latency_s)
        comm += generation_alltoall_time(model, hw, ep, new_tokens, self._gpus_per_node)
        return max(memory, compute) + gemm + self._step_s + comm


def serving_itl(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    concurrency: int,
    prompt_tokens: int,
    output_tokens: int,
    overheads: EngineOverheads | None = None,
) -> float:
    """Steady-state inter-token latency of a serving benchmark at fixed concurrency.

    Every request in flight finishes once per `output_tokens` decode steps and is replaced by a new
    one whose prefill stalls the batch, so a request sees (concurrency-1)/output_tokens foreign
    prefills per token on top of the decode step (mean context prompt + output/2). This is how a
    measured ITL curve such as NIM's (docs/sources.md §2) maps onto the decode/prefill costs.
    """
    ctx = concurrency * (prompt_tokens + output_tokens / 2.0)
    step = decode_step_time(model, hw, tp, concurrency, ctx, overheads=overheads)
    stall = (concurrency - 1) / output_tokens * prefill_time(model, hw, tp, prompt_tokens, overheads=overheads)
    return step + stall
