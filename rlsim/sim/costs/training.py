"""Training and forward-only pass times: the one training-cost API of the simulator and of calibration.

(docs/sources.md, Design notes: Cost models; docs/sources.md §3.) A rank's busy time is priced from the operator
fit per micro-batch (costs/training_ops.py: linear layers, memory-bound operators, tensor-parallel all-reduces,
attention, fixed costs), stretched by the 1F1B pipeline bubble, plus whatever part of the data-parallel gradient
all-reduce is not hidden behind the backward pass (`exposed_grad_comm`, the overlap rule written once). The MFU
is a result (`pass_model_flops` over seconds x GPUs x peak). A profile or pool that sets `train_mfu` /
`forward_mfu` (an explicit override) prices every FLOP at it instead: model FLOPs / (GPUs x peak x MFU).

`train_pass_time` / `forward_pass_time` price a batch of sequences the way the simulator runs it. A pass over a
batch is as slow as its slowest data-parallel rank, so how sequences are dealt to ranks matters (verl's
`balance_batch` equalises tokens per rank; without it ranks take contiguous chunks). Within a rank,
dynamic batching packs sequences into micro-batches of at most `ppo_max_token_len_per_gpu` tokens;
their number sets the pipeline bubble.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

from rlsim.sim.costs.collectives import allreduce_time, ring_bandwidth_bytes_per_s
from rlsim.sim.costs.context_parallel import (
    cp_bandwidth,
    cp_pass_parts,
    dynamic_group_time,
    exchange_time,
    exposed_exchange,
    fitting_degrees,
    pack_micro_batches,
    pick_degree,
)
from rlsim.sim.costs.layout import ContextParallel, ParallelLayout
from rlsim.sim.costs.long_context import PLAIN, PassOptions, attention_flops, micro_batches, rank_parts
from rlsim.sim.costs.memory import expert_split
from rlsim.sim.costs.moe import TrainingEP
from rlsim.sim.costs.training_ops import OPTIMIZER_STEP_FIXED_S, rank_parts_ops
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

# Backward is two of the three matmul passes (activation grads + weight grads) per forward one.
BACKWARD_FRACTION = 2.0 / 3.0
# Adam step per parameter: read bf16 param, fp32 grad, master, m, v (18 B); write param, master, m, v (14 B).
ADAM_STEP_BYTES_PER_PARAM = 32.0
# clip_grad_norm_: read fp32 grads for the norm (4 B), rescale them in place (4 + 4 B).
GRAD_CLIP_BYTES_PER_PARAM = 12.0


def training_flops(model: ModelShape, tokens: float, seq_len_sq_sum: float) -> float:
    """6N per token plus causal attention 6*L*q_dim*sum(s^2) (forward + backward), as verl counts it.

    N is the active parameter count: an MoE token only multiplies through its routed experts. The
    attention term is the causal count: QK^T and PV are 4*q_dim*s^2 per layer in forward, halved by
    the causal mask that FlashAttention skips block by block, and tripled for backward. verl 0.9.1's
    `flops_counter._estimate_qwen2_flops` uses this 6*s^2 form (its older releases used 12, the
    unmasked count, which overstates a long-sequence pass by up to ~25%: docs/sources.md §3).
    """
    q_dim = model.heads * model.d_head
    return 6.0 * model.active_params * tokens + 6.0 * model.layers * q_dim * seq_len_sq_sum


def forward_flops(model: ModelShape, tokens: float, seq_len_sq_sum: float) -> float:
    """A forward pass is a third of training: 2N per token + 4*L*q_dim*sum(s^2)."""
    return training_flops(model, tokens, seq_len_sq_sum) / 3.0


def pass_model_flops(model: ModelShape, seq_lens: np.ndarray, train: bool, epochs: int = 1,
                     adapters: float | None = None) -> float:
    """Model FLOPs of a pass over `seq_lens` (what a reported MFU counts, verl's way): `training_flops` per epoch
    for an update (with LoRA adapters, the frozen base's weight gradients left out), `forward_flops` otherwise."""
    lens = np.asarray(seq_lens, dtype=np.float64)
    tokens, sq = float(lens.sum()), float(np.square(lens).sum())
    if not train:
        return forward_flops(model, tokens, sq)
    flops = training_flops(model, tokens, sq)
    if adapters is not None:
        flops += frozen_base_flops(model, tokens, adapters)
    return epochs * flops


def pipeline_bubble_factor(pp: int, micro_batches: int) -> float:
    """1F1B pipeline: m micro-batches take (m + pp - 1) slots of one micro-batch each."""
    if pp < 1 or micro_batches < 1:
        raise ValueError(f"pp ({pp}) and micro_batches ({micro_batches}) must be >= 1")
    return (micro_batches + pp - 1) / micro_batches


def grad_allreduce_time(
    model: ModelShape,
    hw: HardwareProfile,
    tp: int,
    pp: int,
    dp: int,
    gpus_per_node: int,
    grad_bytes: float = 2.0,
    params: float | None = None,
    ep: int = 1,
) -> float:
    """Ring all-reduce of each rank's gradient shard (grad_bytes*N/(tp*pp)) across its dp peers.

    The dp group is strided by tp*pp, so it leaves the node (and drops to NIC bandwidth) as soon as
    the whole tp*pp*dp job does. N counts every expert: all of them have gradients (`params`: only
    these have gradients, e.g. LoRA adapters). With expert parallelism (`ep` > 1) the expert gradients
    are reduced apart, over their expert-data-parallel ranks (costs/memory.expert_split).
    """
    bw = ring_bandwidth_bytes_per_s(hw, tp * pp * dp, gpus_per_node)
    if ep > 1 and model.num_experts and params is None:
        (dense, d_dp), (experts, e_dp) = expert_split(model, ParallelLayout(tp=tp, pp=pp, dp=dp, ep=ep))
        return (allreduce_time(grad_bytes * dense, d_dp, bw, hw.collective_latency_s)
                + allreduce_time(grad_bytes * experts, e_dp, bw, hw.collective_latency_s))
    size = grad_bytes * (model.params if params is None else params) / (tp * pp)
    return allreduce_time(size, dp, bw, hw.collective_latency_s)


def exposed_grad_comm(comm: float, compute: float, overlap_grad_reduce: bool) -> float:
    """The gradient all-reduce time left after hiding it behind backward (2/3 of compute, bubble excluded).

    With overlap, gradient buckets are reduced while backward still runs; without, all of it is exposed.
    """
    return max(0.0, comm - BACKWARD_FRACTION * compute) if overlap_grad_reduce else comm


def _busy(flops: float, hw: HardwareProfile, gpus: int, mfu: float, pp: int, micro_batches: int) -> tuple[float, float]:
    """(compute, pipeline bubble) seconds of `flops` on `gpus` GPUs at efficiency `mfu`."""
    compute = flops / (gpus * hw.peak_flops * mfu)
    return compute, compute * (pipeline_bubble_factor(pp, micro_batches) - 1.0)


# ------------------------------------------------------------ batches: DP split, micro- and mini-batches


def split_across_dp(seq_lens: np.ndarray, dp: int, balance: bool) -> list[np.ndarray]:
    """Deal sequences to dp ranks: balanced by tokens (longest first, to the lightest rank) or chunked."""
    seq_lens = np.asarray(seq_lens)
    return [seq_lens[idx] for idx in split_indices_across_dp(seq_lens, dp, balance)]


def update_plan(n_samples: int, mini_batches: int, epochs: int, dp: int, seq_lens: np.ndarray, balance: bool,
                balance_scope: str = "mini_batch"):
    """Sample indices per optimizer step and DP rank: epochs x mini-batches steps, each split over ranks.

    Every sample is trained exactly once per epoch. `balance_scope="mini_batch"` slices the batch into
    contiguous mini-batches and deals each one to the ranks. `"batch"` is verl's order (and AReaL's):
    the whole batch is dealt to the ranks once (balanced over the batch by `trainer.balance_batch`),
    then each rank slices its own share into mini-batches, so a mini-batch is balanced across ranks
    only on average and each optimizer step waits for its heaviest rank (docs/sources.md §11).
    """
    seq_lens = np.asarray(seq_lens)
    plan = []
    if balance_scope == "batch":
        shares = split_indices_across_dp(seq_lens[:n_samples], dp, balance)
        slices = [np.array_split(share, mini_batches) for share in shares]
        for _ in range(epochs):
            plan.extend([part[j] for part in slices] for j in range(mini_batches))
        return plan
    for _ in range(epochs):
        for idx in np.array_split(np.arange(n_samples), mini_batches):
            ranks = split_indices_across_dp(seq_lens[idx], dp, balance)
            plan.append([idx[r] for r in ranks])
    return plan


def split_indices_across_dp(seq_lens: np.ndarray, dp: int, balance: bool) -> list[np.ndarray]:
    """Like `split_across_dp`, returning positions instead of lengths."""
    n = len(seq_lens)
    if dp <= 1:
        return [np.arange(n)]
    if not balance:
        return list(np.array_split(np.arange(n), dp))
    lens = np.asarray(seq_lens)
    order = np.argsort(-lens, kind="stable")
    owner = np.empty(n, dtype=np.int64)
    if lens.dtype.kind in "iu" and n >= 2 * dp:
        _deal_in_rounds(order, lens[order].astype(np.int64), dp, owner)
        return [np.flatnonzero(owner == r) for r in range(dp)]
    heap = [(0, r) for r in range(dp)]  # (tokens so far, rank): the lightest rank, lowest index on ties
    for i, length in zip(order.tolist(), lens[order].tolist(), strict=True):
        load, r = heap[0]
        owner[i] = r
        heapq.heapreplace(heap, (load + length, r))
    return [np.flatnonzero(owner == r) for r in range(dp)]


def _deal_in_rounds(order: np.ndarray, sorted_lens: np.ndarray, dp: int, owner: np.ndarray) -> None:
    """The heap's deal (each sequence, longest first, to the lightest rank, lowest index on ties), a round at a time.

    A round takes the ranks from the lightest: the j-th next sequence goes to the j-th lightest rank for as long
    as that rank is lighter than every rank the round has loaded already (the heap would pick it too); the
    prefix that holds is dealt at once. Where rounds stay short (a few long sequences on light ranks), the heap
    deals the next dp sequences one by one. The same owners as the heap alone, bit for bit (integer lengths).
    """
    n = len(order)
    loads = np.zeros(dp, dtype=np.int64)
    ranks = np.arange(dp, dtype=np.int64)
    i = 0
    while i < n:
        m = min(dp, n - i)
        keys = loads * dp + ranks  # (load, rank) as one integer, in the heap's order
        by = np.argsort(keys, kind="stable")[:m]
        after = loads[by] + sorted_lens[i:i + m]
        lighter = keys[by][1:] < np.minimum.accumulate(after * dp + by)[:-1]
        k = m if lighter.all() else int(np.argmin(lighter)) + 1
        if k == m or k >= max(1, dp // 8):
            owner[order[i:i + k]] = by[:k]
            loads[by[:k]] = after[:k]
            i += k
            continue
        heap = list(zip(loads.tolist(), range(dp), strict=True))
        heapq.heapify(heap)
        stop = min(n, i + dp)
        for j, length in zip(order[i:stop].tolist(), sorted_lens[i:stop].tolist(), strict=True):
            load, r = heap[0]
            owner[j] = r
            heapq.heapreplace(heap, (load + length, r))
        for load, r in heap:
            loads[r] = load
        i = stop


def micro_batch_count(rank_tokens: float, token_budget: int) -> int:
    """Dynamic batching: ceil(tokens / budget) micro-batches (verl's rearrange_micro_batches)."""
    return max(1, math.ceil(rank_tokens / token_budget))


def optimizer_step_time(model: ModelShape, hw: HardwareProfile, tp: int, pp: int, dp: int, sharded: bool,
                        clip_grad_norm: bool = False, params: float | None = None) -> float:
    """Adam update: memory bound over the parameters a GPU owns (all of its shard, /dp when sharded).

    `clip_grad_norm` adds torch's clip_grad_norm_: one fp32 read of the gradients for the norm and an
    in-place rescale (read + write), 12 B per parameter (verl's actor grad_clip defaults to 1.0).
    `params`: the trained parameters when not all of the model's are (LoRA adapters).
    """
    params = (model.params if params is None else params) / (tp * pp) / (dp if sharded else 1)
    per_param = ADAM_STEP_BYTES_PER_PARAM + (GRAD_CLIP_BYTES_PER_PARAM if clip_grad_norm else 0.0)
    return params * per_param / hw.hbm_bytes_per_s


def frozen_base_flops(model: ModelShape, tokens: float, adapters: float) -> float:
    """What training LoRA adapters over a frozen base changes in a pass's FLOPs: the base's weight-gradient
    GEMMs (2N per token) are skipped, the adapters' own 6 x adapter params per token are added."""
    return (6.0 * adapters - 2.0 * model.active_params) * tokens


def rank_busy(train: bool, mfu: float | None, model, hw, rank, tp: int, pp: int, token_budget: int,
              opts: PassOptions, adapters: float | None = None, moe: TrainingEP | None = None) -> tuple[float, float]:
    """(compute, pipeline bubble) of one DP rank's pass (`adapters`: a LoRA update, see train_pass_time;
    `moe`: expert parallelism, whose all-to-alls count as busy time and stretch with the pipeline bubble).

    `mfu` None (every shipped profile): the pass is priced from the operator fit per micro-batch
    (costs/training_ops.py); a number (a profile or pool override, `rlsim calibrate`'s fit): every FLOP at it."""
    if moe is not None:
        compute, bubble = rank_busy(train, mfu, model, hw, rank, tp, pp, token_budget, opts, adapters)
        micro = micro_batches(rank, token_budget, opts)
        comm = moe.pass_time(rank, micro, train, opts.recompute)
        return compute + comm, bubble + comm * (pipeline_bubble_factor(pp, micro) - 1.0)
    lora = adapters is not None and train
    if mfu is None:  # priced from the operator fit, per micro-batch (costs/training_ops.py)
        compute = sum(rank_parts_ops(model, hw, rank, tp, pp, train, opts, token_budget,
                                     adapters if lora else None).values())
        return compute, compute * (pipeline_bubble_factor(pp, micro_batches(rank, token_budget, opts)) - 1.0)
    if opts.plain:  # the plain 6NT + attention-at-MFU model, exactly as before
        tokens = float(rank.sum())
        flops_fn = training_flops if train else forward_flops
        flops = flops_fn(model, tokens, float(np.square(rank, dtype=np.float64).sum()))
        if lora:
            flops += frozen_base_flops(model, tokens, adapters)
        return _busy(flops, hw, tp * pp, mfu, pp, micro_batch_count(tokens, token_budget))
    compute = sum(rank_parts(model, hw, rank, tp, pp, mfu, train, opts).values())
    if lora:
        compute += frozen_base_flops(model, float(rank.sum()), adapters) / (tp * pp * hw.peak_flops * mfu)
    return compute, compute * (pipeline_bubble_factor(pp, micro_batches(rank, token_budget, opts)) - 1.0)


def cp_rank_busy(train: bool, mfu: float | None, model, hw, rank, tp: int, pp: int, token_budget: int,
                 opts: PassOptions, cp: ContextParallel, gpus_per_node: int, adapters: float | None = None,
                 moe: TrainingEP | None = None) -> tuple[float, float]:
    """(compute, pipeline bubble) of one data-parallel rank of tp x pp x cp GPUs (costs/context_parallel.py).

    Static: verl's and Megatron's budget, `token_budget` x cp tokens per micro-batch, every micro-batch split over
    the cp GPUs. Dynamic: micro-batches of at most `token_budget` tokens, each at the degree `pick_degree` chooses
    among those that fit, run side by side on the cp GPUs (`dynamic_group_time`). `mfu` set (an override): each
    micro-batch's FLOPs at it over its GPUs, the ring's exchange hidden behind its attention FLOPs at the same MFU.
    """
    lora = adapters if (train and adapters is not None) else None

    def price(lens: np.ndarray, c: int, n: int) -> float:
        bw = cp_bandwidth(hw, tp, c, gpus_per_node)  # a degree-c group spans tp x c adjacent GPUs
        lens = np.asarray(lens, dtype=np.float64)
        tokens, sq = float(lens.sum()), float(np.square(lens).sum())
        if mfu is None:
            padded = float(len(lens) * lens.max()) if opts.padded else tokens
            return sum(cp_pass_parts(model, hw, tokens, sq, padded, n, c, cp.kind, bw, tp, pp, train, opts,
                                     lora).values())
        compute = rank_busy(train, mfu, model, hw, lens, tp, pp, token_budget * c, opts, adapters)[0] / c
        comm = n * exchange_time(cp.kind, model, hw, tokens / c / n, c, tp, pp, bw, train, opts.recompute)
        attention = attention_flops(model, sq / c, train) / (tp * pp * hw.peak_flops * mfu)
        return compute + exposed_exchange(cp.kind, comm, attention)

    rank = np.asarray(rank)
    if cp.dynamic:
        runs = []
        for mb in pack_micro_batches(rank, token_budget):
            costs = {c: price(mb, c, 1) for c in fitting_degrees(float(mb.sum()), token_budget, cp.degrees())}
            c = pick_degree(costs)
            runs.append((c, costs[c]))
        compute, micro = dynamic_group_time(runs, cp.cp), len(runs)
    else:
        micro = micro_batches(rank, token_budget * cp.cp, opts)
        compute = price(rank, cp.cp, micro)
    if moe is not None:  # the expert all-to-alls carry each GPU's share of the tokens
        compute += moe.pass_time(rank, micro, train, opts.recompute) / cp.cp
    return compute, compute * (pipeline_bubble_factor(pp, micro) - 1.0)


def _slowest_rank(train: bool, mfu: float, model, hw, ranks, tp: int, pp: int, token_budget: int,
                  opts: PassOptions = PLAIN, adapters: float | None = None, moe: TrainingEP | None = None,
                  cp: ContextParallel | None = None, gpus_per_node: int = 8):
    """(compute, bubble) of the slowest DP rank (busy = compute + pipeline bubble); None if all are empty."""
    worst = None
    for rank in ranks:
        if len(rank) == 0:
            continue
        if cp is not None:
            busy = cp_rank_busy(train, mfu, model, hw, rank, tp, pp, token_budget, opts, cp, gpus_per_node,
                                adapters, moe)
        else:
            busy = rank_busy(train, mfu, model, hw, rank, tp, pp, token_budget, opts, adapters, moe)
        if worst is None or sum(busy) > sum(worst):
            worst = busy
    return worst


def expert_parallel(model: ModelShape, hw: HardwareProfile, ep: int, tp: int, pp: int,
                    gpus_per_node: int) -> TrainingEP | None:
    """The all-to-all pricing of an expert-parallel role, None without EP (or for a dense model)."""
    if ep <= 1 or not model.num_experts:
        return None
    return TrainingEP(model, hw, ep, tp, pp, gpus_per_node)


def forward_pass_time(
    model: ModelShape,
    hw: HardwareProfile,
    seq_lens: np.ndarray,
    tp: int,
    pp: int,
    dp: int,
    token_budget: int,
    balance: bool = True,
    opts: PassOptions = PLAIN,
    ep: int = 1,
    gpus_per_node: int = 8,
    cp: ContextParallel | None = None,
) -> float:
    """Forward-only pass (old log-prob, reference, values, reward model) over the whole batch (`ep`: expert
    parallelism, two all-to-alls per MoE layer and micro-batch, costs/moe.py; `cp`: context parallelism, each
    of the dp ranks is tp x pp x cp GPUs, costs/context_parallel.py)."""
    moe = expert_parallel(model, hw, ep, tp, pp, gpus_per_node)
    worst = _slowest_rank(False, hw.forward_mfu, model, hw, split_across_dp(seq_lens, dp, balance), tp, pp,
                          token_budget, opts, moe=moe, cp=cp, gpus_per_node=gpus_per_node)
    return 0.0 if worst is None else sum(worst)


def train_pass_time(
    model: ModelShape,
    hw: HardwareProfile,
    seq_lens: np.ndarray,
    tp: int,
    pp: int,
    dp: int,
    token_budget: int,
    mini_batches: int,
    epochs: int,
    *,
    balance: bool = True,
    overlap_grad_reduce: bool = True,
    shard_optimizer: bool = True,
    gpus_per_node: int = 8,
    grad_bytes: float = 2.0,
    opts: PassOptions = PLAIN,
    balance_scope: str = "mini_batch",
    clip_grad_norm: bool = False,
    adapters: float | None = None,
    ep: int = 1,
    cp: ContextParallel | None = None,
) -> float:
    """PPO update: epochs x mini-batches optimizer steps, each as slow as its slowest DP rank.

    `grad_bytes`: DP traffic per parameter as an equivalent all-reduce (TrainSpec.grad_comm_bytes_per_param).
    `opts`: the long-context mechanisms priced (costs/long_context.py); `balance_scope`: see `update_plan`.
    `adapters`: LoRA over a frozen base (costs/lora.py): the base's weight gradients are not computed, and
    the optimizer and the gradient all-reduce cover these adapter parameters only. `ep`: expert parallelism
    (costs/moe.py): four all-to-alls per MoE layer and micro-batch (six with full recompute), expert
    gradients reduced over their own data-parallel ranks. `cp`: context parallelism (costs/context_parallel.py):
    each of the dp ranks is tp x pp x cp GPUs, and the gradients and the sharded optimizer span dp x cp ranks.
    """
    moe = expert_parallel(model, hw, ep, tp, pp, gpus_per_node)
    weight_ranks = dp * (cp.cp if cp is not None else 1)
    comm = grad_allreduce_time(model, hw, tp, pp, weight_ranks, gpus_per_node, grad_bytes, adapters, ep)
    opt = optimizer_step_time(model, hw, tp, pp, weight_ranks, shard_optimizer, clip_grad_norm, adapters)
    fixed = OPTIMIZER_STEP_FIXED_S if hw.train_mfu is None else 0.0  # an MFU override absorbs it
    seq_lens = np.asarray(seq_lens)
    total = 0.0
    for step in update_plan(len(seq_lens), mini_batches, epochs, dp, seq_lens, balance, balance_scope):
        worst = _slowest_rank(True, hw.train_mfu, model, hw, (seq_lens[idx] for idx in step), tp, pp,
                              token_budget, opts, adapters, moe, cp, gpus_per_node)
        if worst is None:
            continue
        compute, bubble = worst
        total += compute + bubble + exposed_grad_comm(comm, compute, overlap_grad_reduce) + opt + fixed
    return total
