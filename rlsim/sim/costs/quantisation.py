"""Quantised rollout: the inference engines hold FP8 / MXFP8 / NVFP4 weights (and optionally an FP8 KV cache)
while the trainer keeps BF16 (docs/sources.md §15; docs/rollout-quantisation.md).

The engine then prices everything through a view of the model with the format's bytes per element
(`engine_shape`): the weights read per decode step, the engine's weight memory and so its KV capacity, the KV
bytes per token (capacity and the attention read), and the GEMM peak, which the hardware profile picks from
the bytes (`HardwareProfile.peak_flops_for`: the format's tensor cores where the GPU has them, else the weights
are dequantised into BF16 GEMMs). The weight sync moves the quantised bytes plus one quantisation pass over the
weights (`quantise_time`).
"""

from __future__ import annotations

from rlsim.sim.costs.long_context import ELEMENTWISE_HBM_ETA
from rlsim.sim.hardware import FP4_MAX_BYTES, FP8_MAX_BYTES, HardwareProfile
from rlsim.sim.model_shapes import ModelShape

# Bytes per weight, block scales included (format definitions, docs/sources.md §15):
# - fp8: E4M3 values with one FP32 scale per 128 x 128 block (DeepSeek-V3's blockwise FP8, vLLM/SGLang's
#   block-quantised fp8): 1 + 4 / 16384;
# - mxfp8: OCP Microscaling v1.0, E4M3 values with one E8M0 (1-byte) scale per 32 elements: 1 + 1 / 32;
# - nvfp4: E2M1 (4-bit) values with one E4M3 scale per 16 elements (the per-tensor FP32 scale is negligible):
#   0.5 + 1 / 16.
WEIGHT_BYTES = {"bf16": 2.0, "fp8": 1.0 + 4.0 / (128 * 128), "mxfp8": FP8_MAX_BYTES, "nvfp4": FP4_MAX_BYTES}
# Bytes per KV-cache element: vLLM / SGLang kv_cache_dtype fp8 (E4M3, per-tensor scales).
KV_BYTES = {"bf16": 2.0, "fp8": 1.0}
# A quantisation pass reads the BF16 weights and writes the quantised ones (plus the block scales): a
# memory-bound element-wise kernel, at the element-wise kernels' HBM efficiency (assumed, costs/long_context.py;
# settle by timing the refit's quantise kernel on one layer).
QUANTISE_HBM_ETA = ELEMENTWISE_HBM_ETA
# The trainer's weights are BF16 whatever the engine serves (costs/memory.py PARAM_BYTES_TRAIN).
TRAIN_WEIGHT_BYTES = 2.0


def engine_shape(model: ModelShape, weights: str | None, kv_cache: str | None) -> ModelShape:
    """The model as an engine holding `weights` and `kv_cache` formats sees it (None: the model's own bytes)."""
    update = {}
    if weights is not None:
        update["weight_bytes"] = WEIGHT_BYTES[weights]
    if kv_cache is not None:
        update["kv_bytes"] = KV_BYTES[kv_cache]
    if not update or all(getattr(model, k) == v for k, v in update.items()):
        return model
    return model.model_copy(update=update)


def quantise_time(model: ModelShape, quantised_bytes: float, hw: HardwareProfile, gpus: int) -> float:
    """One quantisation pass over the model's weights, split over `gpus` GPUs: read the BF16 weights and write
    `quantised_bytes` per parameter, memory bound (0 when the engine keeps the trainer's bytes)."""
    if quantised_bytes == TRAIN_WEIGHT_BYTES:
        return 0.0
    return model.params * (TRAIN_WEIGHT_BYTES + quantised_bytes) / (gpus * hw.hbm_bytes_per_s * QUANTISE_HBM_ETA)
