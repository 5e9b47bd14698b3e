"""Inference engines as they are: per-family, per-version step costs that sit on top of the GPU's work.

A decode step on a real engine costs more than the roofline of its kernels: a fixed per-step cost (the
kernels outside the layers, and scheduler work not hidden behind the GPU), each kernel's host launch
when the engine runs without CUDA graphs (layer by layer, `generation.launch_time`), host work per
running sequence (input preparation, detokenisation, Python scheduling in vLLM before 0.6), and the
latency of each of the 2 x layers tensor-parallel all-reduces, which at decode sizes (a few KB) is all
latency. `engine.kind` selects one row of `ENGINE_KINDS`; the GPU's kernel efficiencies and fixed
kernel times stay in the hardware profile.

Engines that replay CUDA graphs and overlap their host work with the GPU (vLLM 0.6 and V1, SGLang,
TensorRT-LLM, `generic`) take the hardware profile's `decode_fixed_overhead_ms`, which on the shipped
profiles is derived from measured operators (`graph_step_overhead_ms`): nothing in them is fitted to a
system-level step time. vLLM 0.3 adds its synchronous Python scheduler.

Every number cites docs/sources.md; `fitted` marks a constant set from a published number (that
number then cannot validate it), `derived` arithmetic on published or measured numbers, `assumed` a
documented default with the measurement that would settle it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlsim.sim.hardware import HardwareProfile

# Host launch cost per kernel for a profile without its own `kernel_launch_us`: the operator fit's value,
# Frontier's H800 host-timed minus kernel-only operator times (docs/operators.md; equal to h800.yaml's).
FALLBACK_KERNEL_LAUNCH_US = 3.71


def kernel_launch_us(hw: HardwareProfile) -> float:
    """The profile's host launch cost per kernel, or the operator fit's where the profile has none."""
    return hw.kernel_launch_us if hw.kernel_launch_us is not None else FALLBACK_KERNEL_LAUNCH_US


def graph_step_overhead_ms(hw: HardwareProfile) -> float:
    """Per-step cost of an engine that replays CUDA graphs and hides its host work, from measured operators.

    What a decode step runs outside its layers: the LM-head GEMM's fixed kernel time (`gemm_fixed_us`),
    the embedding lookup, final norm and sampling, priced as one layer's small memory-bound operators
    (`layer_small_ops_us`), and one host launch (`kernel_launch_us`, the graph launch). The shipped
    profiles' `decode_fixed_overhead_ms` is this value (tests/test_engine_kinds.py checks it).
    """
    if hw.gemm_fixed_us is None:
        raise ValueError(f"profile {hw.name!r} has no operator fit (gemm_fixed_us): no derived per-step cost")
    return (hw.gemm_fixed_us + (hw.layer_small_ops_us or 0.0) + kernel_launch_us(hw)) * 1e-3


@dataclass(frozen=True, kw_only=False)
class EngineKind:
    """Per-step costs of one engine family/version. Times in the units their names carry."""

    name: str
    step_overhead_ms: float | None  # per decode/prefill step with CUDA graphs; None: the hardware profile's
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
_GRAPH_STEP = (
    "derived: the hardware profile's decode_fixed_overhead_ms, on the shipped profiles the kernels a step runs "
    "outside its layers from measured operators (graph_step_overhead_ms, docs/operators.md); {host}"
)

ENGINE_KINDS: dict[str, EngineKind] = {
    k.name: k
    for k in (
        EngineKind(
            "generic", None, 0.0, None, None,
            {"step_overhead_ms": _GRAPH_STEP.format(host="no host work beyond it"),
             "allreduce_latency_us": "2(n-1) ring hops x the profile's collective_latency_us (operator fit)"},
        ),
        EngineKind(
            "vllm-0.3", 3.8, 509.0, 20.0, None,
            {"step_overhead_ms": "derived: vLLM v0.6 blog, before v0.6 scheduling was 29% of a 13 ms step "
                                 "(docs/sources.md §2); the API server's 33% does not apply offline (verl)",
             "host_per_seq_us": "fitted: HybridFlow t_g=2 vs 8 cuts 7B generation by 60.3% (§5); "
                                "tests/test_engine_kinds.py re-runs the fit; no published measurement of vLLM "
                                "0.3's host time per sequence replaces it; settle with a step-time vs batch "
                                "sweep of vLLM 0.3 at fixed context",
             "allreduce_latency_us": "assumed: NCCL small-message all-reduce over NVLink (vLLM 0.3 has no "
                                     "custom all-reduce); settle with nccl-tests all_reduce_perf at 8-64 KB"},
        ),
        EngineKind(
            "vllm-0.6", None, 8.0, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _GRAPH_STEP.format(
                 host="v0.6 overlaps scheduling and output processing with the GPU (vLLM v0.6 blog, §2); settle "
                      "with nsys traces of a batch-1 step"),
             "host_per_seq_us": "assumed: v0.6 overlaps scheduling and output processing with the GPU "
                                "(vLLM v0.6 blog, §2); settle with a step-time vs batch sweep at fixed context",
             "allreduce_latency_us": "assumed: vLLM's custom one-shot all-reduce over NVLink; settle with "
                                     "nsys traces of a TP decode step"},
        ),
        EngineKind(
            "vllm-v1", None, 4.0, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _GRAPH_STEP.format(
                 host="V1's scheduler and detokeniser run in separate processes; settle with nsys traces"),
             "host_per_seq_us": "assumed: V1's scheduler and detokeniser run in separate processes",
             "allreduce_latency_us": "assumed: vLLM's custom one-shot all-reduce over NVLink"},
        ),
        EngineKind(
            "sglang-0.4", None, 4.0, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _GRAPH_STEP.format(
                 host="SGLang's overlap scheduler runs the next batch's host work during this one; settle with "
                      "bench_one_batch at batch 1"),
             "host_per_seq_us": "assumed: SGLang's overlap scheduler hides most host work; settle with a "
                                "decode step-time vs batch sweep (bench_one_batch)",
             "allreduce_latency_us": "assumed: SGLang's custom all-reduce over NVLink"},
        ),
        EngineKind(
            "trtllm", None, 0.0, None, None,
            {"step_overhead_ms": _GRAPH_STEP.format(host="TensorRT-LLM's C++ runtime replays CUDA graphs"),
             "allreduce_latency_us": "ring hops x the profile's collective_latency_us (operator fit)"},
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
    if not cuda_graphs:  # eager: every kernel's launch, layer by layer (generation.launch_time)
        launch_s = kernel_launch_us(hw) * 1e-6
    host = host_per_seq_us if host_per_seq_us is not None else k.host_per_seq_us
    ar = allreduce_latency_us if allreduce_latency_us is not None else k.allreduce_latency_us
    return EngineOverheads(
        step_ms * 1e-3, host * 1e-6, None if ar is None else ar * 1e-6, k.attention_eta_mem, k.weight_eta_mem,
        launch_s,
    )


def generic_overheads(hw: HardwareProfile, host_per_seq_s: float = 0.0) -> EngineOverheads:
    """The hardware profile's own engine step (what the cost functions assume when told nothing)."""
    return EngineOverheads(hw.decode_fixed_overhead_s, host_per_seq_s, None)
