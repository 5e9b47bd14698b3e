"""Inference engines as they are: per-family, per-version step costs that sit on top of the GPU's work.

A decode step on a real engine costs more than the roofline of its kernels: a fixed per-step cost
(kernel launches, sampling, scheduler work not hidden behind the GPU; much larger without CUDA
graphs: then every kernel's launch is paid on the host, layer by layer, `generation.launch_time`), host
work per running sequence (input preparation, detokenisation, Python scheduling in
vLLM before 0.6), and the latency of each of the 2 x layers tensor-parallel all-reduces, which at
decode sizes (a few KB) is all latency. `engine.kind` selects one row of `ENGINE_KINDS`; the GPU's
kernel efficiencies stay in the hardware profile.

`generic` keeps the hardware profile's own calibrated per-step cost (`decode_fixed_overhead_ms`, the
engine the profile was calibrated with) and its ring-hop collective latency: the behaviour of a
scenario that names no engine.

Every number cites docs/sources.md; `fitted` marks a constant set from a published number (that
number then cannot validate it), `derived` arithmetic on published numbers, `assumed` a documented
default with the measurement that would settle it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlsim.sim.hardware import HardwareProfile


@dataclass(frozen=True, kw_only=False)
class EngineKind:
    """Per-step costs of one engine family/version. Times in the units their names carry."""

    name: str
    step_overhead_ms: float | None  # per decode/prefill step with CUDA graphs; None: the hardware profile's
    eager_extra_ms: float  # added per step when CUDA graphs are off
    host_per_seq_us: float  # host time per running sequence per step, not overlapped with the GPU
    allreduce_latency_us: float | None  # per TP all-reduce at decode sizes; None: ring hops x profile latency
    attention_eta_mem: float | None = None  # HBM efficiency of decode attention's KV read; None: the profile's
    sources: dict[str, str] = field(default_factory=dict)
    # HBM efficiency of the linear layers' weight stream in decode; None: the profile's decode_eta_mem.
    weight_eta_mem: float | None = field(default=None, kw_only=True)


_FLASHINFER = (
    "assumed: paged decode-attention kernels (FlashInfer, FlashAttention) stream long KV at ~85% of HBM "
    "bandwidth, where a batch-1 GEMV reaches ~69% (docs/sources.md §9); added after the AReaL generation-"
    "scaling miss, not fitted to it; settle with a decode step-time sweep over context at fixed batch"
)

# SGLang's batch-1 decode step on two GPUs whose weight-read floors differ 3.4x (docs/sources.md §9):
# Llama-3-8B on H100, 7.06 ms (floor 4.79 ms), and Qwen2-7B on A30, 19.24 ms (floor 16.3 ms). One
# weight-streaming efficiency and one per-step cost fit both exactly: t = floor / eta + c + attention
# + layers x the profile's fixed kernel time per layer (h100-sxm's, from the operator fit; none on a30).
# A single efficiency with no per-step cost cannot (0.69 from the H100 point puts the A30 step at
# 23.8 ms, +24%). tests/test_engine_kinds.py re-runs the fit.
SGLANG_WEIGHT_ETA = 0.853
SGLANG_STEP_MS = 0.0662
_SGLANG_TWO_POINT = (
    "fitted: SGLang batch-1 decode steps, Llama-3-8B on H100 7.06 ms (PR #1401) and Qwen2-7B on A30 19.24 ms "
    "(§9), solved together for the weight-stream efficiency and the per-step cost (kernel launches, "
    "sampling, scheduler work not hidden behind the GPU); settle with bench_one_batch at batch 1 on one GPU "
    "for two model sizes"
)

ENGINE_KINDS: dict[str, EngineKind] = {
    k.name: k
    for k in (
        EngineKind(
            "generic", None, 0.0, 0.0, None, None,
            {"step_overhead_ms": "the hardware profile's decode_fixed_overhead_ms (calibrated per profile)",
             "allreduce_latency_us": "2(n-1) ring hops x the profile's collective_latency_us"},
        ),
        EngineKind(
            "vllm-0.3", 3.8, 2.2, 509.0, 20.0, None,
            {"step_overhead_ms": "derived: vLLM v0.6 blog, before v0.6 scheduling was 29% of a 13 ms step "
                                 "(docs/sources.md §2); the API server's 33% does not apply offline (verl)",
             "eager_extra_ms": "derived: SGLang PR #1401, 9.28 - 7.06 ms without/with CUDA graphs (§9); "
                              "used only on a profile without kernel_launch_us (else layers x kernels x launch)",
             "host_per_seq_us": "fitted: HybridFlow t_g=2 vs 8 cuts 7B generation by 60.3% (§5); "
                                "tests/test_engine_kinds.py re-runs the fit",
             "allreduce_latency_us": "assumed: NCCL small-message all-reduce over NVLink (vLLM 0.3 has no "
                                     "custom all-reduce); settle with nccl-tests all_reduce_perf at 8-64 KB"},
        ),
        EngineKind(
            "vllm-0.6", 0.49, 2.2, 8.0, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": "fitted: Lambda Labs vLLM benchmark (2024-09, v0.6), Llama-3-8B on 1xH100, "
                                 "10 concurrent prompts, median TPOT 7.50 ms (§9), at an assumed mean context of 1,000 "
                                 "tokens, on top of the operator-fitted h100-sxm kernels (docs/operators.md)",
             "eager_extra_ms": "derived: SGLang PR #1401, 9.28 - 7.06 ms without/with CUDA graphs (§9)",
             "host_per_seq_us": "assumed: v0.6 overlaps scheduling and output processing with the GPU "
                                "(vLLM v0.6 blog, §2); settle with a step-time vs batch sweep at fixed context",
             "allreduce_latency_us": "assumed: vLLM's custom one-shot all-reduce over NVLink; settle with "
                                     "nsys traces of a TP decode step"},
        ),
        EngineKind(
            "vllm-v1", 0.49, 2.2, 4.0, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": "derived: vllm-0.6's fitted value; full CUDA graphs (vLLM PR #16072: -7% "
                                 "median TPOT for small models, §9) would take it below zero, i.e. at the "
                                 "h100-sxm efficiencies nearly all of a V1 step is GPU work",
             "eager_extra_ms": "derived: SGLang PR #1401, 9.28 - 7.06 ms without/with CUDA graphs (§9)",
             "host_per_seq_us": "assumed: V1's scheduler and detokeniser run in separate processes",
             "allreduce_latency_us": "assumed: vLLM's custom one-shot all-reduce over NVLink"},
        ),
        EngineKind(
            "sglang-0.4", SGLANG_STEP_MS, 2.2, 4.0, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _SGLANG_TWO_POINT,
             "weight_eta_mem": _SGLANG_TWO_POINT,
             "eager_extra_ms": "derived: SGLang PR #1401, 9.28 - 7.06 ms without/with CUDA graphs (§9)",
             "host_per_seq_us": "assumed: SGLang's overlap scheduler hides most host work; settle with a "
                                "decode step-time vs batch sweep (bench_one_batch)",
             "allreduce_latency_us": "assumed: SGLang's custom all-reduce over NVLink"},
            weight_eta_mem=SGLANG_WEIGHT_ETA,
        ),
        EngineKind(
            "trtllm", None, 0.0, 0.0, None, None,
            {"step_overhead_ms": "the hardware profile's calibrated value: h100-sxm is fitted to NVIDIA NIM's "
                                 "ITL curve (§2), a TensorRT-LLM-backed engine",
             "allreduce_latency_us": "ring hops x the profile's collective_latency_us (as calibrated)"},
        ),
    )
}


@dataclass(frozen=True)
class EngineOverheads:
    """Resolved per-step costs of one engine on one GPU type, in seconds."""

    step_s: float
    host_per_seq_s: float
    allreduce_latency_s: float | None  # None: ring-hop latency of the hardware profile
    attention_eta_mem: float | None = None  # None: the hardware profile's decode_eta_mem
    weight_eta_mem: float | None = None  # None: the hardware profile's decode_eta_mem
    launch_per_kernel_s: float = 0.0  # host launch cost per kernel of an eager engine (0 with CUDA graphs)


def engine_overheads(
    kind: str,
    hw: HardwareProfile,
    cuda_graphs: bool = True,
    step_overhead_ms: float | None = None,
    host_per_seq_us: float | None = None,
    allreduce_latency_us: float | None = None,
) -> EngineOverheads:
    """The costs of `kind` on `hw`; explicit values (a scenario's engine settings) override the kind's."""
    k = ENGINE_KINDS[kind]
    step_ms = step_overhead_ms if step_overhead_ms is not None else k.step_overhead_ms
    if step_ms is None:
        step_ms = hw.decode_fixed_overhead_ms
    launch_s = 0.0
    if not cuda_graphs:  # eager: every kernel's launch, per layer (profile fitted to operators), else a flat cost
        if hw.kernel_launch_us is not None:
            launch_s = hw.kernel_launch_us * 1e-6
        else:
            step_ms += k.eager_extra_ms
    host = host_per_seq_us if host_per_seq_us is not None else k.host_per_seq_us
    ar = allreduce_latency_us if allreduce_latency_us is not None else k.allreduce_latency_us
    return EngineOverheads(
        step_ms * 1e-3, host * 1e-6, None if ar is None else ar * 1e-6, k.attention_eta_mem, k.weight_eta_mem,
        launch_s,
    )


def generic_overheads(hw: HardwareProfile, host_per_seq_s: float = 0.0) -> EngineOverheads:
    """The hardware profile's calibrated engine (what the cost functions assume when told nothing)."""
    return EngineOverheads(hw.decode_fixed_overhead_s, host_per_seq_s, None)
