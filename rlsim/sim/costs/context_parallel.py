"""Context parallelism in training and forward passes: each micro-batch's sequences split over cp GPUs
(docs/long-context.md, "Context parallelism"; docs/sources.md, "Context parallelism").

Both kinds give every GPU of a cp group 1/cp of each micro-batch's tokens, so the linear layers, the memory-bound
operators, the tensor-parallel all-reduces and the log-prob passes run on tokens / cp per GPU, and causal attention's
s^2 work is split evenly (Megatron splits each sequence into 2 x cp chunks and gives rank i chunks i and 2cp-1-i, so
every rank gets the same share of the causal triangle). What differs is the exchange and the attention kernel:

- **ring** (Megatron-Core / Transformer Engine, `cp_comm_type: p2p`): each GPU keeps its query chunk and passes its
  K and V chunk around the cp ranks, cp - 1 steps per layer; step j computes attention against the block received at
  step j - 1 while the next one is sent, so the exchange is hidden behind attention unless it is longer (exposed:
  what the KV traffic takes beyond the attention time). The backward pass sends K and V again plus their gradients
  (twice the forward traffic). Each attention call works on a block of s / cp queries against s / cp keys, so
  FlashAttention-2 runs at its efficiency for length s / cp, not s (`long_context.attention_efficiency`).
- **ulysses** (DeepSpeed-Ulysses, verl's FSDP `ulysses_sequence_parallel_size`): an all-to-all before attention turns
  "tokens / cp, all heads" into "all tokens, heads / cp" for q, k and v, and one after it turns the output back; the
  backward pass does the same with the gradients. Attention then runs on whole sequences (FA2 at length s) over
  heads / cp. The all-to-alls are on the critical path (not overlapped). K and V heads fewer than cp are repeated to
  cp (verl repeats them), and the heads must divide by tp x cp.

**Dynamic context parallelism** (verl Megatron `dynamic_context_parallel`; docs/sources.md, "Context
parallelism"): the degree is chosen per micro-batch from its lengths instead of one static degree for the longest
sequence. verl 0.9.1 hands the whole data x context parallel group (all GPUs over tp x pp) to Megatron-Core's
scheduler with a token budget per rank (`max_seqlen_per_dp_cp_rank`); a sequence needs at least its length over the
budget ranks, and each group of ranks is contiguous and aligned to its size (`verl/utils/dynamic_cp_scheduler.py`).
rlsim packs a rank's sequences into micro-batches of at most `ppo_max_token_len_per_gpu` tokens (a longer sequence
alone), gives each the degree among the powers of two dividing `cp` whose tokens per GPU fit the budget and that
costs the group the least GPU time (degree x seconds), and lets the cp GPUs run micro-batches side by side: the
group is busy for its GPU time over cp, or for its longest micro-batch if that is longer (assumed ideal packing:
Megatron-Core's scheduler is not in verl's wheel; docs/long-context.md says what would settle it).
"""

from __future__ import annotations

import numpy as np

from rlsim.sim.costs.collectives import alltoall_time, ring_bandwidth_bytes_per_s
from rlsim.sim.costs.long_context import PassOptions, attention_time
from rlsim.sim.costs.training_ops import pass_parts
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

# Bytes per activation element exchanged (bf16 q, k, v, output and their gradients).
ACT_BYTES = 2.0


def cp_bandwidth(hw: HardwareProfile, tp: int, cp: int, gpus_per_node: int) -> float:
    """Per-GPU bandwidth of a cp group: Megatron orders ranks tp, then cp, so a group spans tp x cp adjacent GPUs,
    NVLink while that fits in one NVLink domain, the NIC beyond it."""
    return ring_bandwidth_bytes_per_s(hw, tp * cp, gpus_per_node)


def kv_heads_per_gpu(model: ModelShape, tp: int) -> float:
    """K/V heads a tensor-parallel GPU holds (replicated when tp exceeds them)."""
    return max(model.kv_heads / tp, 1.0)


def ring_exchange_time(model: ModelShape, hw: HardwareProfile, tokens_per_gpu: float, cp: int, tp: int, pp: int,
                       bandwidth: float) -> float:
    """One forward pass's KV ring on one pipeline stage: per layer, cp - 1 sends of the GPU's K and V block."""
    if cp <= 1 or tokens_per_gpu <= 0:
        return 0.0
    block = 2.0 * kv_heads_per_gpu(model, tp) * model.d_head * ACT_BYTES * tokens_per_gpu
    return model.layers / pp * (cp - 1) * (block / bandwidth + hw.collective_latency_s)


def ulysses_exchange_time(model: ModelShape, hw: HardwareProfile, tokens_per_gpu: float, cp: int, tp: int, pp: int,
                          bandwidth: float) -> float:
    """One forward pass's all-to-alls on one pipeline stage: per layer, q, k, v in (K/V heads repeated up to cp)
    and the attention output back, each GPU keeping 1/cp and sending the rest."""
    if cp <= 1 or tokens_per_gpu <= 0:
        return 0.0
    kv = max(kv_heads_per_gpu(model, tp), cp)
    q = model.heads / tp
    qkv = (q + 2.0 * kv) * model.d_head * ACT_BYTES * tokens_per_gpu
    out = q * model.d_head * ACT_BYTES * tokens_per_gpu
    lat = hw.collective_latency_s
    return model.layers / pp * (alltoall_time(qkv, cp, bandwidth, lat) + alltoall_time(out, cp, bandwidth, lat))


def exchange_passes(kind: str, train: bool, recompute: str) -> float:
    """Forward-pass exchanges a pass makes: 1 forward-only; training adds the backward (ring: K, V again and their
    gradients, 2; ulysses: the gradients' all-to-alls, 1) and one more forward when recompute re-runs attention."""
    if not train:
        return 1.0
    passes = 1.0 + (2.0 if kind == "ring" else 1.0)
    return passes + (1.0 if recompute in ("full", "selective") else 0.0)


def exchange_time(kind: str, model: ModelShape, hw: HardwareProfile, tokens_per_gpu: float, cp: int, tp: int, pp: int,
                  bandwidth: float, train: bool, recompute: str = "none") -> float:
    """Seconds of cp traffic one micro-batch of `tokens_per_gpu` tokens per GPU makes in a pass (before overlap)."""
    one = (ring_exchange_time if kind == "ring" else ulysses_exchange_time)(model, hw, tokens_per_gpu, cp, tp, pp,
                                                                              bandwidth)
    return one * exchange_passes(kind, train, recompute)


def exposed_exchange(kind: str, comm: float, attention: float) -> float:
    """What the cp traffic adds to a pass: the ring hides behind attention (only its excess shows); the
    all-to-alls are all exposed."""
    return max(0.0, comm - attention) if kind == "ring" else comm


def cp_pass_parts(model: ModelShape, hw: HardwareProfile, tokens: float, sq: float, padded: float, n: int, c: int,
                  kind: str, bandwidth: float, tp: int, pp: int, train: bool, opts: PassOptions,
                  adapters: float | None = None) -> dict[str, float]:
    """`training_ops.pass_parts` of `n` equal micro-batches (rank totals `tokens`, `sq`, `padded`) split over `c`
    GPUs, plus `cp_attention` (the ring's shorter attention blocks) and `cp_comm` (the exchange left exposed)."""
    if c <= 1:
        return pass_parts(model, hw, tokens, sq, padded, n, tp, pp, train, opts, adapters)
    parts = pass_parts(model, hw, tokens / c, sq / c, padded / c, n, tp, pp, train, opts, adapters)
    if not parts:
        return parts
    gpus = tp * pp
    recompute = train and opts.recompute in ("full", "selective")
    attention = parts["attention"] + (attention_time(model, hw, tokens / c, sq / c, gpus, False) if recompute else 0.0)
    parts["cp_attention"] = 0.0
    if kind == "ring":
        # FA2 at block length s / c: the stretch term h x tokens per sequence stays whole instead of / c.
        rest = tokens * (1.0 - 1.0 / c)
        parts["cp_attention"] = attention_time(model, hw, rest, 0.0, gpus, train) + (
            attention_time(model, hw, rest, 0.0, gpus, False) if recompute else 0.0)
        attention += parts["cp_attention"]
    comm = n * exchange_time(kind, model, hw, tokens / c / n, c, tp, pp, bandwidth, train, opts.recompute)
    parts["cp_comm"] = exposed_exchange(kind, comm, attention)
    return parts


def pack_micro_batches(seq_lens: np.ndarray, token_budget: int) -> list[np.ndarray]:
    """Dynamic CP's micro-batches: first-fit decreasing into bins of `token_budget` tokens; a longer sequence
    alone (it needs a cp degree of at least its length over the budget)."""
    lens = np.sort(np.asarray(seq_lens, dtype=np.float64))[::-1]
    bins: list[list[float]] = []
    room: list[float] = []
    for s in lens.tolist():
        for i, free in enumerate(room):
            if s <= free:
                bins[i].append(s)
                room[i] -= s
                break
        else:
            bins.append([s])
            room.append(token_budget - s)
    return [np.array(b) for b in bins]


def fitting_degrees(tokens: float, token_budget: int, degrees: tuple[int, ...]) -> tuple[int, ...]:
    """Degrees at which a micro-batch's tokens per GPU fit the budget (the largest alone when none does)."""
    fit = tuple(d for d in degrees if tokens / d <= token_budget)
    return fit or (max(degrees),)


def pick_degree(costs: dict[int, float]) -> int:
    """The degree that costs the cp group the least GPU time (degree x seconds); the smaller on ties."""
    return min(costs, key=lambda d: (d * costs[d], d))


def dynamic_group_time(micro: list[tuple[int, float]], cp: int) -> float:
    """Seconds a cp group takes for micro-batches run at (degree, seconds): its GPU time spread over its cp GPUs
    (ideal packing), or its longest micro-batch when that is longer."""
    if not micro:
        return 0.0
    return max(sum(d * t for d, t in micro) / cp, max(t for _, t in micro))
