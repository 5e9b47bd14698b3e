"""Training and forward passes over a batch of sequences: DP split, dynamic micro-batches, mini-batches.

A pass over a batch is as slow as its slowest data-parallel rank, so how sequences are dealt to
ranks matters (verl's `balance_batch` equalises tokens per rank; without it ranks take contiguous
chunks). Within a rank, dynamic batching packs sequences into micro-batches of at most
`ppo_max_token_len_per_gpu` tokens; their number sets the pipeline bubble.
"""

from __future__ import annotations

import math

import numpy as np

from rlsim.costs.training import (
    BACKWARD_FRACTION,
    forward_time_breakdown,
    grad_allreduce_time,
    train_time_breakdown,
)
from rlsim.hardware import HardwareProfile
from rlsim.model_shapes import ModelShape

# Adam step per parameter: read bf16 param, fp32 grad, master, m, v (18 B); write param, master, m, v (14 B).
ADAM_STEP_BYTES_PER_PARAM = 32.0


def split_across_dp(seq_lens: np.ndarray, dp: int, balance: bool) -> list[np.ndarray]:
    """Deal sequences to dp ranks: balanced by tokens (longest first, to the lightest rank) or chunked."""
    seq_lens = np.asarray(seq_lens)
    return [seq_lens[idx] for idx in split_indices_across_dp(seq_lens, dp, balance)]


def update_plan(n_samples: int, mini_batches: int, epochs: int, dp: int, seq_lens: np.ndarray, balance: bool):
    """Sample indices per optimizer step and DP rank: epochs x mini-batches steps, each split over ranks.

    Every sample is trained exactly once per epoch (mini-batches are contiguous slices of the batch,
    as verl's `make_minibatch_iterator` without shuffling).
    """
    seq_lens = np.asarray(seq_lens)
    plan = []
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
    order = np.argsort(-np.asarray(seq_lens), kind="stable")
    load = np.zeros(dp)
    owner = np.empty(n, dtype=np.int64)
    for i in order:
        r = int(np.argmin(load))
        owner[i] = r
        load[r] += seq_lens[i]
    return [np.flatnonzero(owner == r) for r in range(dp)]


def micro_batch_count(rank_tokens: float, token_budget: int) -> int:
    """Dynamic batching: ceil(tokens / budget) micro-batches (verl's rearrange_micro_batches)."""
    return max(1, math.ceil(rank_tokens / token_budget))


def optimizer_step_time(model: ModelShape, hw: HardwareProfile, tp: int, pp: int, dp: int, sharded: bool) -> float:
    """Adam update: memory bound over the parameters a GPU owns (all of its shard, /dp when sharded)."""
    params = model.params / (tp * pp) / (dp if sharded else 1)
    return params * ADAM_STEP_BYTES_PER_PARAM / hw.hbm_bytes_per_s


def _slowest_rank(breakdown, model, hw, ranks, tp: int, pp: int, token_budget: int, **kw):
    """The breakdown of the slowest DP rank (busy = compute + pipeline bubble); None if all are empty."""
    worst = None
    for rank in ranks:
        if len(rank) == 0:
            continue
        tokens = float(rank.sum())
        b = breakdown(
            model, hw, tp * pp, tokens, float(np.square(rank, dtype=np.float64).sum()), tp=tp, pp=pp,
            micro_batches=micro_batch_count(tokens, token_budget), **kw,
        )
        if worst is None or b.compute + b.bubble > worst.compute + worst.bubble:
            worst = b
    return worst


def forward_pass_time(
    model: ModelShape,
    hw: HardwareProfile,
    seq_lens: np.ndarray,
    tp: int,
    pp: int,
    dp: int,
    token_budget: int,
    balance: bool = True,
) -> float:
    """Forward-only pass (old log-prob, reference, values, reward model) over the whole batch."""
    worst = _slowest_rank(forward_time_breakdown, model, hw, split_across_dp(seq_lens, dp, balance), tp, pp,
                          token_budget)
    return 0.0 if worst is None else worst.compute + worst.bubble


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
) -> float:
    """PPO update: epochs x mini-batches optimizer steps, each as slow as its slowest DP rank.

    `grad_bytes`: DP traffic per parameter as an equivalent all-reduce (TrainSpec.grad_comm_bytes_per_param).
    """
    comm = grad_allreduce_time(model, hw, tp, pp, dp, gpus_per_node, grad_bytes)
    opt = optimizer_step_time(model, hw, tp, pp, dp, shard_optimizer)
    seq_lens = np.asarray(seq_lens)
    total = 0.0
    for step in update_plan(len(seq_lens), mini_batches, epochs, dp, seq_lens, balance):
        worst = _slowest_rank(train_time_breakdown, model, hw, (seq_lens[idx] for idx in step), tp, pp,
                              token_budget, gpus_per_node=gpus_per_node)
        if worst is None:
            continue
        exposed = max(0.0, comm - BACKWARD_FRACTION * worst.compute) if overlap_grad_reduce else comm
        total += worst.compute + worst.bubble + exposed + opt
    return total
