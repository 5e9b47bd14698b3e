"""Inference engines as they are: per-family, per-version step costs that sit on top of the GPU's work.

A decode step on a real engine costs more than the roofline of its kernels: a fixed per-step cost (the
kernels outside the layers, and scheduler work not hidden behind the GPU), each kernel's host launch
when the engine runs without CUDA graphs (layer by layer, `generation.launch_time`), host work per
running sequence (input preparation, detokenisation, Python scheduling in vLLM before 0.6), and the
latency of each of the 2 x layers tensor-parallel all-reduces, which at decode sizes (a few KB) is all
latency. `engine.kind` selects one row of `ENGINE_KINDS`; the GPU's kernel efficiencies and fixed
kernel times stay in the hardware profile.

Every kind but vLLM 0.3 takes the hardware profile's `decode_fixed_overhead_ms` for the GPU side of a
step, which on the shipped profiles is derived from measured operators (`graph_step_overhead_ms`): nothing
in it is fitted to a system-level step time. On top of it sits the engine's host (CPU) work per step, the
two-term model of docs/sources.md §13: host = h_step + h_seq x running sequences. An engine that does not
overlap its host work with the GPU (vLLM V0, vLLM V1 without async scheduling, SGLang with the overlap
scheduler off) exposes all of it; one that does (vLLM V1 async scheduling, SGLang's overlap scheduler,
TensorRT-LLM's PyTorch backend) exposes max(0, host - GPU step) plus whatever bubble its source still
measures. CUDA graphs are captured for batches up to `graph_max_batch` ([1, 2, 4] then multiples of 8,
vLLM's rule): a batch is padded up to the next captured size, and a larger one runs eagerly, paying every
kernel's launch. vLLM 0.3 keeps its fitted per-step and per-sequence costs (the HybridFlow fit).

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
    host_step_us: float = field(default=0.0, kw_only=True)  # host time per step (h_step), beside host_per_seq_us
    # Whether host_step_us + host_per_seq_us x B runs while the GPU computes (exposed: max(0, host - GPU step)).
    host_overlap: bool = field(default=False, kw_only=True)
    host_bubble_us: float = field(default=0.0, kw_only=True)  # GPU idle per step an overlapping engine still shows
    graph_max_batch: int | None = field(default=None, kw_only=True)  # largest CUDA-graph batch; None: no limit


_FLASHINFER = (
    "assumed: paged decode-attention kernels (FlashInfer, FlashAttention) stream long KV at ~85% of HBM "
    "bandwidth, where a batch-1 GEMV reaches ~69% (docs/sources.md §9); added after the AReaL generation-"
    "scaling miss, not fitted to it; settle with a decode step-time sweep over context at fixed batch"
)
_GRAPH_STEP = (
    "derived: the hardware profile's decode_fixed_overhead_ms, on the shipped profiles the kernels a step runs "
    "outside its layers from measured operators (graph_step_overhead_ms, docs/operators.md); {host}"
)

# Host work per step, docs/sources.md §13 (REFERENCE §13). Each is derived from one published row and cited at
# its kind; the system-level rows (NIM, SGLang batch 1, AReaL, verl generation) stay predictions.
V0_HOST_STEP_US = 3900.0  # vllm #6854: ~4 ms GPU idle per decode step at small batch, less one sequence's output
V0_HOST_PER_SEQ_US = 103.0  # vllm #6913: output processing 0.2 ms at batch 1, 3.4 ms at batch 32
MULTI_STEP = 8  # vLLM 0.6 multi-step scheduling: the host step once per k decode steps (k assumed)
V1_HOST_STEP_US = 400.0  # vllm PR #42131: ~0.4 ms framework overhead per decode-only step
V1_HOST_PER_SEQ_US = 1.1  # vllm PR #46112: update_from_output 0.142 ms at 128 running, 0.287 ms at 256
SGLANG_HOST_STEP_US = 740.0  # sglang PR #38131: 2.745 -> 2.006 ms per batch-1 step with the overlap scheduler
TRTLLM_PYTORCH_BUBBLE_US = 580.0  # TensorRT-LLM #13957
TRTLLM_PYTORCH_HOST_STEP_US = 2000.0  # TensorRT-LLM PR #10273: scheduling ~4.4% of a 45 ms host step
TRTLLM_PYTORCH_HOST_PER_SEQ_US = (45_000.0 - TRTLLM_PYTORCH_HOST_STEP_US) / 1536  # the rest, per sequence (#10273)

_V0_STEP = ("derived: vllm issue #6854, ~4 ms of GPU idle per decode step (sampled-token copy, pythonising, input "
            "preparation, scheduler; Llama-3-8B TP1, CUDA graphs) less one sequence's output processing "
            "(docs/sources.md §13)")
_V0_SEQ = ("derived: vllm issue #6913, output processing 0.2 ms at batch 1 and 3.4 ms at batch 32 (Llama-3-70B FP8, "
           "4xH100): the slope per running sequence (docs/sources.md §13)")
_V1_STEP = "derived: vllm PR #42131, ~0.4 ms of framework overhead per decode-only step (docs/sources.md §13)"
_V1_SEQ = ("derived: vllm PR #46112, Scheduler.update_from_output 0.142 ms at 128 running and 0.287 ms at 256 "
           "(docs/sources.md §13)")
_SGLANG_STEP = ("derived: sglang PR #38131, 2.745 -> 2.006 ms per batch-1 step with the overlap scheduler on: the "
                "host work it hides (docs/sources.md §13)")
_SGLANG_SEQ = ("assumed: vLLM V1's per-sequence output update (PR #46112); settle with an nsys trace of "
               "batch-1/8/32 decode steps with the overlap scheduler off")
_GRAPHS_256 = "vLLM V0 captures batch sizes 1, 2, 4, 8, ..., 256 (its _BATCH_SIZES_TO_CAPTURE); larger runs eager"
_GRAPHS_512 = "vLLM V1 captures up to 512 by default (cudagraph_capture_sizes); larger runs eager"
_GRAPHS_SGLANG = ("SGLang's default cuda_graph_max_bs of 160 (server args; larger GPUs may raise it); a larger batch "
                  "runs without graphs")
_CUSTOM_AR = "assumed: vLLM's custom one-shot all-reduce over NVLink; settle with nsys traces of a TP decode step"

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
            "vllm-0.5", None, V0_HOST_PER_SEQ_US, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _GRAPH_STEP.format(host="plus V0's host step below"),
             "host_step_us": _V0_STEP,
             "host_per_seq_us": _V0_SEQ,
             "host_overlap": "vLLM V0 before 0.6 runs scheduler, input preparation and output processing between "
                             "GPU steps (docs/sources.md §13)",
             "graph_max_batch": _GRAPHS_256,
             "allreduce_latency_us": _CUSTOM_AR},
            host_step_us=V0_HOST_STEP_US, graph_max_batch=256,
        ),
        EngineKind(
            "vllm-0.6", None, V0_HOST_PER_SEQ_US / MULTI_STEP, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _GRAPH_STEP.format(host="plus V0's host step once per multi-step round"),
             "host_step_us": f"derived: V0's host step ({_V0_STEP}) paid once per {MULTI_STEP} scheduler steps "
                             "(multi-step scheduling, docs/sources.md §13; k = 8 assumed: vLLM's examples use "
                             "8-10); settle with nsys traces of a multi-step decode round",
             "host_per_seq_us": f"derived: V0's output processing ({_V0_SEQ}) once per {MULTI_STEP} steps",
             "host_overlap": "assumed: what multi-step leaves runs between GPU steps",
             "graph_max_batch": _GRAPHS_256,
             "allreduce_latency_us": _CUSTOM_AR},
            host_step_us=V0_HOST_STEP_US / MULTI_STEP, graph_max_batch=256,
        ),
        EngineKind(
            "vllm-v1", None, V1_HOST_PER_SEQ_US, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _GRAPH_STEP.format(host="plus V1's host step below"),
             "host_step_us": _V1_STEP,
             "host_per_seq_us": _V1_SEQ,
             "host_overlap": "vLLM V1 without async scheduling (its default before async scheduling is switched "
                             "on) schedules each step after the last one's outputs are back: docs/sources.md §13 "
                             "measures the 0.4 ms as ~30% of TPOT, so it is exposed",
             "graph_max_batch": _GRAPHS_512,
             "allreduce_latency_us": _CUSTOM_AR},
            host_step_us=V1_HOST_STEP_US, graph_max_batch=512,
        ),
        EngineKind(
            "vllm-v1-async", None, V1_HOST_PER_SEQ_US, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _GRAPH_STEP.format(host="plus V1's host step where it outlasts the GPU step"),
             "host_step_us": _V1_STEP,
             "host_per_seq_us": _V1_SEQ,
             "host_overlap": "vLLM V1 with async scheduling schedules step n+1 while step n runs on the GPU",
             "graph_max_batch": _GRAPHS_512,
             "allreduce_latency_us": _CUSTOM_AR},
            host_step_us=V1_HOST_STEP_US, host_overlap=True, graph_max_batch=512,
        ),
        EngineKind(
            "sglang-0.4", None, V1_HOST_PER_SEQ_US, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _GRAPH_STEP.format(host="plus SGLang's host step where it outlasts the GPU step"),
             "host_step_us": _SGLANG_STEP,
             "host_per_seq_us": _SGLANG_SEQ,
             "host_overlap": "SGLang's overlap scheduler (on by default since 0.4) prepares the next batch while "
                             "this one runs",
             "graph_max_batch": _GRAPHS_SGLANG,
             "allreduce_latency_us": "assumed: SGLang's custom all-reduce over NVLink"},
            host_step_us=SGLANG_HOST_STEP_US, host_overlap=True, graph_max_batch=160,
        ),
        EngineKind(
            "sglang-no-overlap", None, V1_HOST_PER_SEQ_US, 8.0, 0.85,
            {"attention_eta_mem": _FLASHINFER,
             "step_overhead_ms": _GRAPH_STEP.format(host="plus SGLang's host step, exposed"),
             "host_step_us": _SGLANG_STEP,
             "host_per_seq_us": _SGLANG_SEQ,
             "host_overlap": "--disable-overlap-schedule: the host step runs between GPU steps (PR #38131's 'off')",
             "graph_max_batch": _GRAPHS_SGLANG,
             "allreduce_latency_us": "assumed: SGLang's custom all-reduce over NVLink"},
            host_step_us=SGLANG_HOST_STEP_US, graph_max_batch=160,
        ),
        EngineKind(
            "trtllm-pytorch", None, TRTLLM_PYTORCH_HOST_PER_SEQ_US, None, None,
            {"step_overhead_ms": _GRAPH_STEP.format(host="plus the bubble below"),
             "host_per_seq_us": "derived: TensorRT-LLM PR #10273, a 45 ms host step at batch 1,536 (GPT-OSS-120B, "
                                "GB200) less its ~2 ms of scheduling, per running sequence (docs/sources.md §13)",
             "host_step_us": "derived: TensorRT-LLM PR #10273, scheduling ~4.4% of the 45 ms host step",
             "host_bubble_us": "derived: TensorRT-LLM issue #13957, ~580 us of host work per iteration still exposed "
                               "as GPU idle with the one-step overlap (Llama-3.1-8B FP8, B200, 64 concurrent)",
             "host_overlap": "TensorRT-LLM's PyTorch backend overlaps one step of host work",
             "graph_max_batch": "assumed: TensorRT-LLM tech blog 20 pads to captured sizes and reports the cost "
                                "above batch 128; settle with the engine's cuda_graph_config.batch_sizes",
             "allreduce_latency_us": "ring hops x the profile's collective_latency_us (operator fit)"},
            host_step_us=TRTLLM_PYTORCH_HOST_STEP_US, host_overlap=True, host_bubble_us=TRTLLM_PYTORCH_BUBBLE_US,
            graph_max_batch=128,
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
    host_step_s: float = 0.0  # host time per step (h_step), beside host_per_seq_s x running sequences
    host_overlap: bool = False  # the host time runs during the GPU step: exposed only where it outlasts it
    host_bubble_s: float = 0.0  # GPU idle per step that an overlapping engine still shows
    graph_max_batch: int | None = None  # largest CUDA-graph batch (padded up to a captured size); None: no limit
    eager_launch_per_kernel_s: float = 0.0  # launch cost per kernel of a batch above graph_max_batch

    def host_s(self, batch: int) -> float:
        """The engine's host time of one step at `batch` running sequences (h_step + h_seq x batch)."""
        return self.host_step_s + self.host_per_seq_s * batch

    def exposed_host_s(self, batch: int) -> float:
        """Host time that adds to every step: all of it without overlap, only the bubble with it."""
        return self.host_bubble_s if self.host_overlap else self.host_s(batch)

    def host_floor_s(self, batch: int) -> float:
        """The shortest step an overlapping engine can run (its host time plus the bubble); 0 without overlap."""
        return self.host_s(batch) + self.host_bubble_s if self.host_overlap else 0.0

    def graph_batch(self, batch: int) -> int:
        """The batch a CUDA-graph replay computes: padded up to the next captured size (1, 2, 4, then multiples
        of 8); a batch above `graph_max_batch` runs eagerly, unpadded."""
        if self.graph_max_batch is None or batch > self.graph_max_batch or batch <= 2:
            return batch
        return 4 if batch <= 4 else -(-batch // 8) * 8

    def launch_per_kernel_at(self, batch: int) -> float:
        """Launch cost per kernel of a step at `batch`: an eager engine's, or a graph engine's above its largest
        captured batch."""
        if self.graph_max_batch is not None and batch > self.graph_max_batch:
            return self.eager_launch_per_kernel_s
        return self.launch_per_kernel_s


def engine_overheads(
    kind: str,
    hw: HardwareProfile,
    cuda_graphs: bool = True,
    step_overhead_ms: float | None = None,
    host_per_seq_us: float | None = None,
    allreduce_latency_us: float | None = None,
    host_step_us: float | None = None,
    graph_max_batch: int | None = None,
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
    h_step = host_step_us if host_step_us is not None else k.host_step_us
    ar = allreduce_latency_us if allreduce_latency_us is not None else k.allreduce_latency_us
    graphs = (graph_max_batch if graph_max_batch is not None else k.graph_max_batch) if cuda_graphs else None
    return EngineOverheads(
        step_ms * 1e-3, host * 1e-6, None if ar is None else ar * 1e-6, k.attention_eta_mem, k.weight_eta_mem,
        launch_s, h_step * 1e-6, k.host_overlap, k.host_bubble_us * 1e-6, graphs,
        kernel_launch_us(hw) * 1e-6 if graphs is not None else 0.0,
    )


def generic_overheads(hw: HardwareProfile, host_per_seq_s: float = 0.0) -> EngineOverheads:
    """The hardware profile's own engine step (what the cost functions assume when told nothing)."""
    return EngineOverheads(hw.decode_fixed_overhead_s, host_per_seq_s, None)
