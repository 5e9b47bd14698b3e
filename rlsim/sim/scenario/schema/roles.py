"""Scenario section `roles`: where actor, rollout, reference, critic and reward run, and how."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlsim.sim.limits import (  # sane upper bounds, shared with the file readers
    MAX_GPUS_PER_NODE,
    MAX_NODES,
    MAX_TOKENS,
)
from rlsim.sim.scenario.schema.base import Strict

# ---------------------------------------------------------------- roles

RoleName = Literal["actor", "rollout", "reference", "critic", "reward"]


class ParallelSpec(Strict):
    """Per-replica model parallelism; data parallelism = gpus / (tp * pp) unless given."""

    tp: int = Field(default=1, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE, description="Tensor parallel degree")
    pp: int = Field(
        default=1, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="Pipeline parallel degree (training and forward roles; an engine role has none: 1)",
    )
    dp: int | None = Field(
        default=None, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="Data parallel degree (default: derived)"
    )
    ep: int = Field(
        default=1, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="Expert parallel degree of an MoE model: its experts are sharded over ep GPUs instead of "
        "tensor-sliced, with a dispatch and a combine all-to-all per MoE layer (docs/operators.md). An engine "
        "role (SGLang --ep-size, vLLM enable_expert_parallel): ep divides tp. A training or forward role "
        "(Megatron expert_model_parallel_size): ep divides tp x dp",
    )
    cp: int = Field(
        default=1, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="Context parallel degree of a training or forward role: each micro-batch's sequences are split "
        "over cp GPUs (Megatron context_parallel_size, verl ulysses_sequence_parallel_size); data parallel = gpus / "
        "(tp x pp x cp). With cp_dynamic, the largest degree a micro-batch may use (docs/long-context.md)",
    )
    cp_kind: Literal["ring", "ulysses"] = Field(
        default="ring",
        description="ring: KV blocks passed around the cp ranks, overlapped with attention (Megatron / Transformer "
        "Engine); ulysses: all-to-alls of q, k, v and the output over the cp ranks (DeepSpeed-Ulysses, verl FSDP); "
        "needs the heads divisible by tp x cp",
    )
    cp_dynamic: bool = Field(
        default=False,
        description="Dynamic context parallelism: each micro-batch takes the degree (a divisor of cp) that costs its "
        "cp ranks the least time among those whose tokens per GPU fit ppo_max_token_len_per_gpu; short "
        "micro-batches run at 1, side by side",
    )


class QuantizationSpec(Strict):
    """Quantised rollout: the engines' weight and KV-cache formats while the trainer keeps BF16
    (costs/quantisation.py; docs/rollout-quantisation.md)."""

    weights: Literal["bf16", "fp8", "mxfp8", "nvfp4"] | None = Field(
        default=None,
        description="Weight format of the engines (block scales counted): fp8 blockwise 128x128 (vLLM/SGLang "
        "quantization=fp8), mxfp8, nvfp4 (FP4 tensor cores on Blackwell; elsewhere weight-only at the BF16 peak). "
        "The weight sync then moves the quantised bytes after a quantisation pass. Default: the model's weight_bytes",
    )
    kv_cache: Literal["bf16", "fp8"] | None = Field(
        default=None, description="KV-cache format (vLLM/SGLang kv_cache_dtype). Default: the model's kv_bytes"
    )


class SpeculativeSpec(Strict):
    """Speculative decoding in the engines (MTP heads, EAGLE drafts): each step proposes `k` tokens per sequence
    and verifies them in one pass over k + 1 positions (costs/speculative.py; docs/rollout-quantisation.md)."""

    k: int = Field(ge=1, le=16, description="Tokens the draft proposes per step (vLLM num_speculative_tokens)")
    draft_cost: float = Field(
        ge=0, le=1,
        description="One draft step's time as a fraction of a plain target decode step (an MTP or EAGLE head is one "
        "layer: about 1/layers of the weights; a draft model its own share). Its weights and KV per token are "
        "taken as the same fraction of the target's",
    )
    acceptance: float = Field(
        ge=0, le=1, description="Probability each proposed token is accepted, at the start of a sequence with the "
        "draft in step with the policy",
    )
    acceptance_drop_per_1k_tokens: float = Field(
        default=0.0, ge=0, le=1,
        description="Acceptance lost per 1,000 tokens of position in the sequence, prompt included (linear; the "
        "batch's mean position, half-way through each stretch between two batch changes)")
    acceptance_drop_per_version: float = Field(
        default=0.0, ge=0, le=1,
        description="Acceptance lost per policy version the draft is behind the engine's weights (linear)")
    draft_refresh_versions: int | None = Field(
        default=1, ge=1, le=MAX_TOKENS,
        description="The draft is retrained with the policy every this many versions (1: co-trained, as verl-SpeCo "
        "and MTP heads trained with the model; null: frozen at the first policy)",
    )

    def drift(self, version: int) -> int:
        """Versions the draft is behind engine weights of policy `version`."""
        return version if self.draft_refresh_versions is None else version % self.draft_refresh_versions


class DisaggregationSpec(Strict):
    """Prefill/decode-disaggregated rollout: the role's engines split into a prefill pool and decode engines, the
    prompt's KV moved from one to the other over `kv_link` (costs/pd_disagg.py; docs/rollout-quantisation.md)."""

    prefill_engines: int = Field(
        ge=1, le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="Engines of the role (tp GPUs each) that only prefill: one pool every decode engine shares")
    decode_engines: int = Field(
        ge=1, le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="Engines that only decode; prefill_engines + decode_engines = the role's GPUs / tp")
    kv_link: Literal["nvlink", "rdma", "pcie"] = Field(
        default="rdma",
        description="What carries the KV from a prefill engine's GPUs to a decode engine's (NIXL / Mooncake): nvlink "
        "(the profile's nvlink_gb_per_s, both in one NVLink domain), rdma (nic_gbit_per_s, one NIC per GPU) or pcie "
        "(pcie_gb_per_s, staged through the host), each GPU of the prefill engine sending its KV shard at once",
    )


class EngineSpec(Strict):
    """Inference-engine settings (vLLM / SGLang names)."""

    gpu_memory_utilization: float = Field(
        default=0.5, gt=0, le=1, description="Fraction of total GPU memory the engine may use (verl default 0.5)"
    )
    max_num_seqs: int = Field(default=256, gt=0, le=MAX_TOKENS, description="Maximum running sequences per engine")
    max_num_batched_tokens: int = Field(
        default=8192, gt=0, le=MAX_TOKENS, description="Prefill tokens per engine step"
    )
    chunked_prefill: bool = Field(default=False, description="Piggyback prefill chunks on decode steps")
    enable_prefix_caching: bool = Field(default=True, description="Keep finished turns' KV for the next turn")
    activation_reserve_gb: float = Field(
        default=1.0, ge=0, description="Memory per GPU kept free for activations/CUDA graphs, GB (assumed)"
    )
    kind: Literal[
        "generic", "vllm-0.3", "vllm-0.5", "vllm-0.6", "vllm-v1", "vllm-v1-async", "sglang-0.4", "sglang-no-overlap",
        "trtllm", "trtllm-pytorch",
    ] = Field(
        default="generic",
        description="Engine family and version: selects its per-step cost, host work per step and per running "
        "sequence (exposed, or overlapped with the GPU), CUDA-graph batch sizes and TP all-reduce latency "
        "(rlsim/sim/costs/engine_kinds.py; `rlsim engines` lists them). `generic` uses the hardware profile's "
        "per-step cost (derived from its measured operators) and no host work",
    )
    cuda_graphs: bool = Field(
        default=True, description="Decode with CUDA graphs (verl rollout enforce_eager=False); off adds launch cost"
    )
    step_overhead_ms: float | None = Field(
        default=None, ge=0, description="Per-step fixed cost, ms (default: the engine kind's)"
    )
    host_overhead_per_seq_us: float | None = Field(
        default=None,
        ge=0, le=1e6,
        description="Host (CPU) time per running sequence per decode step, us: scheduling, input preparation, "
        "output processing (default: the engine kind's; DistServe's c*B term). Exposed unless the kind overlaps "
        "its host work with the GPU",
    )
    host_step_us: float | None = Field(
        default=None, ge=0, le=1e6,
        description="Host (CPU) time per engine step, us, beside the per-sequence term (default: the engine kind's)",
    )
    cuda_graph_max_batch: int | None = Field(
        default=None, gt=0, le=MAX_TOKENS,
        description="Largest batch captured as a CUDA graph (vLLM max cudagraph capture size, SGLang "
        "cuda_graph_max_bs); a batch is padded to the next captured size, a larger one runs eagerly "
        "(default: the engine kind's)",
    )
    allreduce_latency_us: float | None = Field(
        default=None, ge=0, description="Latency of one TP all-reduce at decode sizes, us (default: the engine kind's)"
    )

    quantization: QuantizationSpec | None = Field(
        default=None, description="Quantised weights and KV cache in the engines (default: the model's bytes)")
    speculative: SpeculativeSpec | None = Field(
        default=None, description="Speculative decoding (MTP / EAGLE); default off")
    disaggregation: DisaggregationSpec | None = Field(
        default=None, description="Prefill/decode-disaggregated engines (rollout role only); default off: every "
        "engine prefills and decodes")

    def shape(self, model):
        """The model as these engines hold it: its weight and KV bytes in the quantised formats."""
        q = self.quantization
        if q is None:
            return model
        from rlsim.sim.costs.quantisation import engine_shape

        return engine_shape(model, q.weights, q.kv_cache)

    def kv_capacity(self, model, hw, tp: int) -> float:
        """KV tokens one engine of `tp` GPUs holds for `model` (as `shape` returns it): what its share of memory
        keeps after the weights and the reserve, less a speculative draft's weights and KV per token."""
        from rlsim.sim.costs.memory import kv_capacity_tokens

        reserve = self.activation_reserve_gb * 1e9
        if self.speculative is None:
            return kv_capacity_tokens(model, hw, tp, self.gpu_memory_utilization, reserve)
        f = self.speculative.draft_cost
        return kv_capacity_tokens(model, hw, tp, self.gpu_memory_utilization,
                                  reserve + f * model.weight_bytes_total / tp) / (1.0 + f)

    def overheads(self, hw):
        """This engine's per-step costs on hardware `hw` (seconds)."""
        from rlsim.sim.costs.engine_kinds import engine_overheads

        return engine_overheads(
            self.kind, hw, self.cuda_graphs, self.step_overhead_ms, self.host_overhead_per_seq_us,
            self.allreduce_latency_us, self.host_step_us, self.cuda_graph_max_batch,
        )


class TrainSpec(Strict):
    """How a model role trains and runs forward passes (verl actor/critic/ref knob names)."""

    ppo_max_token_len_per_gpu: int = Field(
        default=16384, gt=0, le=MAX_TOKENS,
        description="Dynamic-batching token budget of one micro-batch per GPU (verl)",
    )
    balance_batch: bool = Field(
        default=True, description="Equalise tokens across DP ranks (verl trainer.balance_batch)"
    )
    sharding: Literal["megatron", "fsdp"] = Field(
        default="megatron",
        description="megatron: distributed optimizer (optimizer states sharded over DP); fsdp: params, grads "
        "and optimizer states all sharded",
    )
    param_offload: bool = Field(default=False, description="Keep params in host memory outside this role's phases")
    grad_offload: bool = Field(default=False, description="Keep grads in host memory outside training")
    optimizer_offload: bool = Field(default=False, description="Keep optimizer states in host memory outside training")
    activation_checkpointing: bool = True
    overlap_grad_reduce: bool = Field(default=True, description="Overlap the DP gradient all-reduce with backward")
    grad_reduce_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32",
        description="dtype of the DP gradient reduction: Megatron-LM forces fp32 for bf16 training "
        "(accumulate_allreduce_grads_in_fp32); verl's FSDP mixed precision defaults reduce_dtype to fp32",
    )

    long_context_costs: bool = Field(
        default=True,
        description="Price what long sequences cost beyond 6·N·T: attention at FlashAttention-2's length-dependent "
        "efficiency, log-prob/entropy passes over the vocabulary, activation recompute, padding "
        "and each optimizer step waiting for its heaviest data-parallel rank (docs/long-context.md); false: the "
        "plain model (every FLOP at the profile's MFU, each mini-batch balanced across ranks, no clip pass), for "
        "profiles whose MFU was fitted to a published step under it",
    )
    activation_recompute: Literal["auto", "full", "selective", "none"] = Field(
        default="auto",
        description="Recompute in backward: full re-runs each decoder layer's forward (verl FSDP's default "
        "enable_gradient_checkpointing=True; AReaL's gradient_checkpointing=True), selective the core attention "
        "(Megatron), none (Megatron-Core's default). auto: full if activation_checkpointing else none",
    )
    logprob_kernel: Literal["fused", "fp32"] = Field(
        default="fused",
        description="Log-prob/entropy over the vocabulary: fused = verl with flash-attn's Triton cross-entropy on bf16 "
        "logits; fp32 = log_softmax(logits.float()) materialised (AReaL, OpenRLHF)",
    )
    packing: Literal["dynamic", "padded"] = Field(
        default="dynamic",
        description="dynamic: remove-padding + token-budget micro-batches (verl use_remove_padding + use_dynamic_bsz, "
        "set by verl's GRPO/DAPO recipes); padded: every sequence padded to the batch's longest",
    )
    micro_batch_size_per_gpu: int | None = Field(
        default=None, gt=0, le=MAX_TOKENS,
        description="padded: sequences per micro-batch (verl ppo_micro_batch_size_per_gpu); default: token budget",
    )
    clip_grad_norm: bool = Field(
        default=True, description="clip_grad_norm_ before each optimizer step (verl actor grad_clip 1.0)"
    )

    @property
    def recompute(self) -> str:
        """The resolved activation recompute mode."""
        if self.activation_recompute != "auto":
            return self.activation_recompute
        return "full" if self.activation_checkpointing else "none"

    def pass_options(self, phase: str, role: str):
        """Which long-context mechanisms a phase of this role prices (rlsim.sim.costs.long_context)."""
        from rlsim.sim.costs.long_context import PLAIN, PassOptions

        if not self.long_context_costs:
            return PLAIN
        vocab = role in ("actor", "reference")  # the critic and reward model end in a value head
        return PassOptions(
            attention=True, logits=self.logprob_kernel if vocab else None,
            entropy=phase == "old_log_prob",  # verl's compute_log_prob(calculate_entropy=True)
            recompute=self.recompute if phase.startswith("update_") else "none",
            padded=self.packing == "padded", micro_batch_seqs=self.micro_batch_size_per_gpu,
        )

    @property
    def grad_comm_bytes_per_param(self) -> float:
        """DP traffic per parameter per update, as the bytes of an equivalent ring all-reduce.

        An all-reduce moves 2x its size; Megatron's distributed optimizer reduce-scatters the gradients
        and all-gathers the bf16 params ((g + 2) / 2); FSDP all-gathers the params twice (forward and
        backward) and reduce-scatters the gradients ((g + 4) / 2).
        """
        grad = 4.0 if self.grad_reduce_dtype == "fp32" else 2.0
        return (grad + 2.0) / 2.0 if self.sharding == "megatron" else (grad + 4.0) / 2.0


class RoleSpec(Strict):
    pool: str
    model: str = Field(description="Key into `models`")
    gpus: int | None = Field(
        default=None, gt=0, le=MAX_NODES * MAX_GPUS_PER_NODE,
        description="GPUs of the pool this role uses (default: all)"
    )
    gpu_offset: int = Field(
        default=0,
        ge=0,
        description="First GPU of the pool this role uses: it holds GPUs [gpu_offset, gpu_offset + gpus) (ROLL's "
        "device_mapping). Roles on overlapping GPUs take turns; roles on disjoint GPUs of one pool run concurrently",
    )
    parallel: ParallelSpec = Field(default_factory=ParallelSpec)
    engine: EngineSpec | None = Field(
        default=None, description="Required for the rollout role; on the reward role: an LLM judge served by engines"
    )
    train: TrainSpec = Field(default_factory=TrainSpec, description="Training / forward settings")


