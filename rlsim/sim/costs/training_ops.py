"""Training and forward passes priced from the operator fit, per micro-batch (docs/operators.md, "Training").

The same fitted curves as generation, at the tokens of each micro-batch. One micro-batch of T tokens on a
tp-GPU model-parallel group (a pipeline stage runs 1/pp of it):

- **forward**: the linear layers' smooth roofline at T tokens (`generation.linear_roofline`, the decode
  step's form, at the GEMM share of peak the operator fit gives at T, `HardwareProfile.gemm_eta_compute`),
  which carries every layer's fixed kernel time (4 GEMMs' fixed cost and the small operators at decode
  sizes); the memory-bound operators' bytes (two norms, rope, activation, two residual adds:
  `layer_memory_elements`, the operator fit's own counts) at their fitted HBM share `small_ops_eta_mem`;
  two tensor-parallel all-reduces per layer (`generation.tp_allreduce_time`); causal attention at
  FlashAttention-2's length-dependent efficiency (`long_context.attention_time`), per sequence.
- **backward**: every forward GEMM Y = XW has two in backward, the activation gradient dX = dY W^T and the
  weight gradient dW = X^T dY. Each multiplies the same three dimensions (M tokens, N, K) in another order,
  so backward does twice the forward GEMM work and reads the weights (and writes their gradients) once
  more; it is priced as twice the forward's linear roofline at the same T, on the same fitted curve
  (`BACKWARD_GEMM_FACTOR`; assumed: the fit has no backward kernels; a torch profiler trace of one
  micro-batch's backward GEMMs at 1k-32k tokens would settle it). The memory-bound operators run twice
  (their backward reads the saved input and the incoming gradient and writes the gradient), the
  all-reduces once more (the activation gradients), attention 2.5 times its forward (FA2's recompute).
- **host**: training runs eagerly, every kernel launched from Python: a micro-batch takes at least its
  launches (kernels per layer x layers x passes x `kernel_launch_us`); larger ones hide them.
- **fixed**: `MICRO_BATCH_FIXED_S` per micro-batch and `OPTIMIZER_STEP_FIXED_S` per optimizer step
  (assumed; see below).

The long-context mechanisms (`PassOptions`) are added once each: full recompute re-runs the forward of
the decoder layers (its linear work scaled to their share of the parameters: the lm_head is not re-run),
selective the attention's forward; the log-prob passes over the vocabulary; padding runs the linear
layers and logits on padded tokens. Nothing here is an MFU: the MFU is what the simulator reports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlsim.sim.costs.generation import kernels_per_layer, linear_roofline, tp_allreduce_time
from rlsim.sim.costs.long_context import (
    PassOptions,
    _logit_passes,
    attention_time,
    layer_params,
    logits_time,
    micro_batches,
)
from rlsim.sim.hardware import HardwareProfile
from rlsim.sim.model_shapes import ModelShape

# Backward GEMM work over forward (dX = dY W^T and dW = X^T dY per forward GEMM); see the module docstring.
BACKWARD_GEMM_FACTOR = 2.0
# The memory-bound operators' backward moves about twice their forward's bytes (assumed, same trace would settle it).
SMALL_OPS_BACKWARD_FACTOR = 2.0
# Assumed fixed costs beyond the kernels (docs/operators.md, "Training"): per micro-batch, the trainer's Python
# around it (moving the micro-batch to the GPU, the loss, FSDP's or Megatron's hooks, the loss scalar's sync):
# 5 ms; per optimizer step, zeroing the gradients, the grad-norm sync and the scheduler: 20 ms. A torch profiler
# trace of one update with 1, 4 and 16 micro-batches per optimizer step would settle both (the intercepts of the
# update's time against micro-batches and against optimizer steps).
MICRO_BATCH_FIXED_S = 5e-3
OPTIMIZER_STEP_FIXED_S = 20e-3


def layer_memory_elements(hidden: float, heads: float, kv_heads: float, head_dim: float, ffn: float, tp: float,
                          gated: bool = True) -> dict[str, float]:
    """Elements read plus written per token by each memory-bound operator of one layer on one of `tp` GPUs (the
    operator fit's counts, `rlsim calibrate ops`): the norms read and write the hidden state, the gated
    activation reads two ffn/tp halves and writes one, rope reads and writes the q and k heads, a residual add
    reads two hidden states and writes one; the embedding lookup reads and writes one hidden state."""
    return {
        "input_layernorm": 2.0 * hidden,
        "post_attention_layernorm": 2.0 * hidden,
        "emb": 2.0 * hidden,
        "add": 3.0 * hidden,
        "mlp_act": ffn / tp * (3 if gated else 2),
        "attn_rope": 2.0 * (heads + kv_heads) * head_dim / tp,
    }


def small_ops_bytes_per_token(model: ModelShape, tp: int) -> float:
    """HBM bytes one layer's memory-bound operators move per token (bf16): two norms, rope, activation, two adds."""
    e = layer_memory_elements(model.hidden, model.heads, model.kv_heads, model.d_head, model.ffn, tp)
    per_token = e["input_layernorm"] + e["post_attention_layernorm"] + e["attn_rope"] + e["mlp_act"] + 2 * e["add"]
    if model.num_experts:
        per_token += e["mlp_act"] * (model.experts_per_token - 1)  # each routed copy's activation
    return 2.0 * per_token


def _bf16(model: ModelShape) -> ModelShape:
    """Training runs in bf16 whatever the rollout's weight format (an fp8 preset trains its bf16 master)."""
    return model if model.weight_bytes == 2.0 else model.model_copy(update={"weight_bytes": 2.0})


@dataclass(frozen=True)
class MicroBatchCost:
    """Seconds of one micro-batch's forward on one pipeline stage's tp GPUs (the whole model / pp), by part."""

    linear: float  # the linear layers' roofline and every layer's fixed kernel time
    small_ops: float  # the memory-bound operators' bytes
    tp_comm: float  # two tensor-parallel all-reduces per layer
    launches: float  # host time launching the forward's kernels (eager)


def micro_batch_forward(model: ModelShape, hw: HardwareProfile, tp: int, pp: int, tokens: float,
                        ep: int = 1) -> MicroBatchCost:
    """One micro-batch of `tokens` tokens through one stage (1/pp of the layers), forward only."""
    model = _bf16(model)
    if tokens <= 0:
        return MicroBatchCost(0.0, 0.0, 0.0, 0.0)
    linear = linear_roofline(model, hw, tp, tokens, hw.gemm_eta_compute(tokens))
    small = model.layers * small_ops_bytes_per_token(model, tp) * tokens / (hw.hbm_bytes_per_s * hw.small_ops_eta)
    comm = tp_allreduce_time(model, hw, tp, int(tokens))
    launches = model.layers * kernels_per_layer(tp, model.num_experts > 0, ep) * (hw.kernel_launch_us or 0.0) * 1e-6
    return MicroBatchCost(linear / pp, small / pp, comm / pp, launches / pp)


def rank_parts_ops(model: ModelShape, hw: HardwareProfile, seq_lens: np.ndarray, tp: int, pp: int, train: bool,
                   opts: PassOptions, token_budget: int, adapters: float | None = None,
                   ep: int = 1) -> dict[str, float]:
    """Seconds of one DP rank's pass over `seq_lens` from operators, by part (before the pipeline bubble).

    The rank's tokens are cut into `micro_batches` equal micro-batches (dynamic batching balances them; padded
    ones hold `micro_batch_seqs` sequences at the batch's longest). `adapters`: LoRA over a frozen base, whose
    weight-gradient GEMMs are skipped (half the backward GEMMs) and whose adapters train at the same share of peak.
    """
    lens = np.asarray(seq_lens, dtype=np.float64)
    if not len(lens) or lens.sum() <= 0:
        return {}
    tokens, sq = float(lens.sum()), float(np.square(lens).sum())
    padded = float(len(lens) * lens.max()) if opts.padded else tokens
    return pass_parts(model, hw, tokens, sq, padded, micro_batches(lens, token_budget, opts), tp, pp, train, opts,
                      adapters, ep)


def pass_parts(model: ModelShape, hw: HardwareProfile, tokens: float, sq: float, padded: float, n: int, tp: int,
               pp: int, train: bool, opts: PassOptions, adapters: float | None = None, ep: int = 1) -> dict[str, float]:
    """`rank_parts_ops` from the rank's totals: `tokens`, sum of squared lengths `sq`, `padded` tokens the linear
    layers run on, `n` micro-batches."""
    if tokens <= 0:
        return {}
    per = padded / n
    fwd = micro_batch_forward(model, hw, tp, pp, per, ep)
    gpus = tp * pp
    attn_fwd = attention_time(model, hw, tokens, sq, gpus, train=False)
    lora = train and adapters is not None
    if train:
        gemm = 1.0 + (1.0 if lora else BACKWARD_GEMM_FACTOR)
        parts = {
            "linear": n * gemm * fwd.linear,
            "small_ops": n * (1.0 + SMALL_OPS_BACKWARD_FACTOR) * fwd.small_ops,
            "tp_comm": n * 2.0 * fwd.tp_comm,
            "attention": attention_time(model, hw, tokens, sq, gpus, train=True),
        }
        passes = 3.0
        if lora:
            eta = hw.gemm_eta_compute(per)
            parts["linear"] += 6.0 * adapters * padded / (gpus * hw.peak_flops * eta)
    else:
        parts = {"linear": n * fwd.linear, "small_ops": n * fwd.small_ops, "tp_comm": n * fwd.tp_comm,
                 "attention": attn_fwd}
        passes = 1.0
    parts["recompute"] = 0.0
    if train and opts.recompute == "full":
        share = layer_params(model) / model.active_params
        parts["recompute"] = n * (fwd.linear * share + fwd.small_ops + fwd.tp_comm) + attn_fwd
        passes += 1.0
    elif train and opts.recompute == "selective":
        parts["recompute"] = attn_fwd
    parts["logits"] = 0.0
    if opts.logits is not None:
        parts["logits"] = logits_time(model, hw, padded, tp, opts.logits, _logit_passes(train, opts.entropy))
    gpu_per_micro = sum(parts.values()) / n
    parts["host"] = n * max(0.0, passes * fwd.launches - gpu_per_micro)  # launches the GPU work does not hide
    parts["fixed"] = n * MICRO_BATCH_FIXED_S
    return parts
