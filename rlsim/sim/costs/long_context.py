"""What a long RL sequence costs in a training or forward pass beyond 6·N·T (docs/sources.md §11).

The passes are priced from the operator fit per micro-batch (costs/training_ops.py), or, under an explicit
MFU override, every FLOP at that MFU (`rank_parts` below, the causal attention ones included). Four mechanisms
grow faster than that with sequence length or vocabulary and are priced here on their own, per data-parallel
rank (the operator-priced pass always prices attention at FA2's efficiency):

- **attention kernel efficiency**: FlashAttention-2's causal forward+backward reaches a fraction of
  peak that rises with sequence length s as `ceiling * s / (s + FA2_HALF_TOKENS)` (fitted to the FA2
  paper's A100 curve), and is capped on Hopper by what FA2 reaches there (it does not use Hopper's
  asynchronous tensor-core instructions). With the per-sequence efficiency the whole batch's attention
  time needs only sum(s) and sum(s^2): sum(s^2 / eff(s)) = (sum(s^2) + h * sum(s)) / ceiling.
- **log-probs and entropy over the vocabulary**: the lm_head GEMM is in 6N (verl counts it), but the
  temperature scaling, log-softmax and entropy over T x V logits are memory-bound elementwise passes
  whose bytes per logit depend on the implementation (`LOGIT_BYTES`).
- **activation recompute**: gradient checkpointing re-runs each decoder layer's forward in backward
  (`full`: +1 forward of the layers, lm_head excluded; `selective`: the core attention only).
- **padding**: without remove-padding, the linear layers and logits run on every sequence padded to
  the batch's longest (attention itself is unpadded by FlashAttention's varlen path).

Rank imbalance (the step waits for the slowest rank) and the optimizer step live in `training.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

# FlashAttention-2 paper (Dao 2023), Fig. 4-style benchmark on A100 80GB, causal, head dim 128,
# forward+backward: ~88 TFLOP/s at 512 tokens and ~189 at 16k (0.28 and 0.61 of the 312 peak). The two
# points fix `ceiling * s / (s + h)`: h = 650 tokens, ceiling 0.634 of peak (docs/sources.md §11).
FA2_HALF_TOKENS = 650.0
FA2_PEAK_FRACTION = 0.634
# FA2's backward does 2.5x the forward's FLOPs (it recomputes the attention matrix): forward + backward 3.5x.
FA2_TRAIN_WORK = 3.5
# Same paper: FA2 on H100 SXM reaches up to 335 TFLOP/s forward+backward (at 16k: ceiling 348 TFLOP/s).
FA2_CEILING_FLOPS = 348e12

# Bytes of HBM traffic per logit (token x vocab entry / tp) of each elementwise pass, counted from the
# code (docs/sources.md §11, documented defaults, not measurements):
# - `fused` (verl with flash-attn installed): in-place temperature division of bf16 logits (r+w 4),
#   flash-attn's Triton cross-entropy reads them once (2); backward reads logits and writes the grad
#   in place (4) and scales it (4); entropy = logsumexp - sum(softmax * logits) in bf16: softmax r+w 4,
#   logsumexp 2 reads 4, product r 4 + w 2, sum r 2 -> 18 (plus its backward of about the same).
# - `fp32` (AReaL, OpenRLHF: log_softmax(logits.float() / T)): upcast r 2 + w 4, division r+w 8,
#   log-softmax two reduction reads + r+w (16), gather ~0 -> 34; backward 26; entropy in fp32 32.
LOGIT_BYTES = {
    "fused": {"forward": 6.0, "backward": 8.0, "entropy": 18.0},
    "fp32": {"forward": 34.0, "backward": 26.0, "entropy": 32.0},
}
# Achieved fraction of HBM bandwidth of large elementwise kernels (assumed; a profiler trace of the
# log-prob pass would settle it).
ELEMENTWISE_HBM_ETA = 0.85


@dataclass(frozen=True)
class PassOptions:
    """Which long-context mechanisms a pass prices. The default prices none (the plain 6·N·T model)."""

    attention: bool = False  # attention at FA2's length-dependent efficiency instead of the MFU
    logits: str | None = None  # "fused" / "fp32": price the log-prob passes over T x V
    entropy: bool = False  # this pass also computes the entropy over the vocabulary
    recompute: str = "none"  # "full" / "selective" / "none" (training passes only)
    padded: bool = False  # no remove-padding: linear layers and logits on sequences padded to the longest
    micro_batch_seqs: int | None = None  # padded: sequences per micro-batch (verl ppo_micro_batch_size_per_gpu)

    @property
    def plain(self) -> bool:
        return self == PLAIN


PLAIN = PassOptions()


def attention_efficiency(hw: HardwareProfile, seq_len: float | np.ndarray) -> float | np.ndarray:
    """FA2 causal forward+backward efficiency (fraction of peak) at sequence length `seq_len`."""
    return attention_ceiling_flops(hw) / hw.peak_flops * seq_len / (seq_len + FA2_HALF_TOKENS)


def attention_ceiling_flops(hw: HardwareProfile) -> float:
    """FLOP/s FA2 approaches at long sequences: 0.634 of peak, at most the H100 figure."""
    return min(FA2_PEAK_FRACTION * hw.peak_flops, FA2_CEILING_FLOPS)


def attention_flops(model: ModelShape, seq_len_sq_sum: float, train: bool) -> float:
    """Causal attention FLOPs: 2*L*q_dim*sum(s^2) forward (4*L*q*s^2 halved by the mask), x3 with backward."""
    fwd = 2.0 * model.layers * model.heads * model.d_head * seq_len_sq_sum
    return 3.0 * fwd if train else fwd


def attention_time(model: ModelShape, hw: HardwareProfile, tokens: float, seq_len_sq_sum: float, gpus: int,
                   train: bool) -> float:
    """Seconds of causal attention at FA2's per-sequence efficiency: sum_i work(s_i) / eff(s_i).

    The kernel's work is what FA2's benchmark counts: the forward, and a backward of 2.5x the forward
    (it recomputes QK^T: five matmuls against two), so a training pass does 3.5x the forward FLOPs.
    """
    stretched = seq_len_sq_sum + FA2_HALF_TOKENS * tokens
    work = attention_flops(model, stretched, train=False) * (FA2_TRAIN_WORK if train else 1.0)
    return work / (gpus * attention_ceiling_flops(hw))


def layer_params(model: ModelShape) -> float:
    """Parameters inside the decoder layers (what activation recompute re-runs): all but embeddings."""
    return model.active_params - model.vocab * model.hidden * (1 if model.tied_embeddings else 2)


def logits_time(model: ModelShape, hw: HardwareProfile, tokens: float, tp: int, kind: str, passes) -> float:
    """Memory-bound elementwise passes over `tokens` x vocab/tp logits (vocab-parallel under TP)."""
    per_logit = sum(LOGIT_BYTES[kind][p] for p in passes)
    return tokens * model.vocab / tp * per_logit / (hw.hbm_bytes_per_s * ELEMENTWISE_HBM_ETA)


def _logit_passes(train: bool, entropy: bool) -> tuple[str, ...]:
    passes = ("forward", "backward") if train else ("forward",)
    if entropy:
        passes += ("entropy", "entropy") if train else ("entropy",)  # its backward about as heavy
    return passes


def rank_parts(model: ModelShape, hw: HardwareProfile, seq_lens: np.ndarray, tp: int, pp: int, mfu: float,
               train: bool, opts: PassOptions) -> dict[str, float]:
    """Seconds of one DP rank's pass over `seq_lens`, by mechanism (before the pipeline bubble).

    `dense` is 6N (2N forward) per token at the MFU; `attention` the causal attention (at the MFU in the
    plain model, at FA2's efficiency with `opts.attention`); the rest are zero unless enabled.
    """
    gpus = tp * pp
    lens = np.asarray(seq_lens, dtype=np.float64)
    tokens, sq = float(lens.sum()), float(np.square(lens).sum())
    padded_tokens = float(len(lens) * lens.max()) if (opts.padded and len(lens)) else tokens
    flops_per_param = 6.0 if train else 2.0
    rate = gpus * hw.peak_flops * mfu
    parts = {"dense": flops_per_param * model.active_params * padded_tokens / rate}
    if opts.attention:
        parts["attention"] = attention_time(model, hw, tokens, sq, gpus, train)
    else:
        parts["attention"] = attention_flops(model, sq, train) / rate
    parts["recompute"] = 0.0
    if train and opts.recompute in ("full", "selective"):
        fwd_attn = parts["attention"] / (FA2_TRAIN_WORK if opts.attention else 3.0)
        layers = 2.0 * layer_params(model) * padded_tokens / rate if opts.recompute == "full" else 0.0
        parts["recompute"] = layers + fwd_attn
    parts["logits"] = 0.0
    if opts.logits is not None:
        # Pipeline parallelism: only the last stage holds the lm_head, and the other stages wait for it.
        parts["logits"] = logits_time(model, hw, padded_tokens, tp, opts.logits, _logit_passes(train, opts.entropy))
    return parts


def micro_batches(seq_lens: np.ndarray, token_budget: int, opts: PassOptions) -> int:
    """Micro-batches of one rank: dynamic batching by token budget, or fixed sequence counts when padded."""
    n = len(seq_lens)
    if opts.padded and opts.micro_batch_seqs:
        return max(1, -(-n // opts.micro_batch_seqs))
    return max(1, -(-int(np.sum(seq_lens)) // token_budget))
