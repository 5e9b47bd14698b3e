"""Which publication each fitted constant was set from: the data behind `predicted` in `reproduce validation`.

A validation row is `predicted` only if no constant anywhere in the project (hardware profile, engine
kind, shipped scenario, cost-model form) was fitted to any number of the row's publication: leave one
source out. `FITTED` lists every such constant with the publication keys it was fitted to; each
validation row names one key of `PUBLICATIONS`; `is_predicted` derives the status. Nothing is marked
by hand: to fit a constant to a new publication, add it here and every row of that publication turns
`fitted`. tests/test_validation.py checks that every entry names a constant that exists, and that every
profile or engine-kind constant whose source says "calibrated"/"fitted" is listed.

A constant copied from another ("assumed: same as H100") carries the same publications; listing the
original is enough, since the status depends only on the set of publications.

`double_counted` lists every hardware-profile value that prices training, fitted to a system-level number
(not an operator profile), whose fit left out a mechanism term the training cost adds beside it
(tests/test_training_ops.py keeps it empty): such a value would count that term twice.
"""

from __future__ import annotations

from dataclasses import dataclass

# Publication keys: one per paper, blog post, issue, PR or benchmark (docs/sources.md section in brackets).
PUBLICATIONS: dict[str, str] = {
    "nvidia-nim-llama33-70b": "NVIDIA NIM benchmark, Llama-3.3-70B FP8 TP2 on 2xH100 (§2)",
    "vidur": "Vidur operator profiles, microsoft/vidur (§2, §12)",
    "frontier": "Frontier simulator's operator profiles, NetX-lab/Frontier (§9, §12)",
    "vllm-v0.6-blog": "vLLM v0.6 release blog (§2)",
    "sglang-blog": "SGLang blog, offline throughput on A100 (§2)",
    "infersim": "InferSim, SGLang on H20 (§2)",
    "verl-docs-rollout": "verl rollout docs: defaults and the CUDA-graph generation phase (§2)",
    "sglang-pr1401": "SGLang PR #1401, batch-1 decode steps (§9)",
    "sglang-a30-qwen2": "SGLang serving Qwen2-7B on an A30 at batch 1 (§9)",
    "lambda-vllm-2024-09": "Lambda Labs vLLM v0.6 benchmark, September 2024 (§9)",
    "vllm-pr16072": "vLLM PR #16072, full CUDA graphs (§9)",
    "megatron-lm": "Megatron-LM MFU on H100 (§3)",
    "llama3-paper": "Meta's Llama 3 paper, 405B MFU (§3)",
    "verl-perf-docs": "verl performance docs: MFU and DeepSeek-671B on H20 (§3)",
    "hybridflow": "HybridFlow, EuroSys'25 (§5)",
    "verl-one-step-off": "verl docs/advance/one_step_off.md (§6)",
    "verl-colocated-switch": "verl's colocated switch without offload, ~450 ms per step (§4)",
    "verl-pr116": "verl PR #116, weight sync on 8xL20 (§4)",
    "areal-paper": "AReaL, arXiv 2505.24298 (§3, §7, §9)",
    "areal-blog-v0.3": "AReaL v0.3 blog, generation scaling figure (§9)",
    "verl-issue-7203": "verl issue #7203, 8xH800 Qwen3.5-9B GRPO step breakdown (§9)",
    "verl-issue-1208": "verl issue #1208, 4xGH200 Qwen2.5-0.5B GRPO step breakdown (§9, §15)",
    "verl-issue-2751": "verl issue #2751, flat generation time 4-16 nodes (§9)",
    "roll-flash": "ROLL Flash introduction, rollout share (§8)",
    "verl-checkpoint-engine": "verl checkpoint-engine weight sync, off vs on (§4)",
    "verl-pr7291": "verl PR #7291 (commit 8de5fb446), multi-sender NCCL checkpoint engine on GH200 (§4)",
    "sglang-pr13824": "SGLang PR #13824, Qwen3-Next-80B sync one tensor at a time vs bucketed (§4)",
    "awesome-ml-sys-169": "zhaochenyang20/Awesome-ML-SYS-Tutorial #169, per-tensor RPC sync of a 16B MoE (§4)",
}

# Features of a publication's setup that rlsim states it does not model (docs/validation.md, "Outside the
# model's scope"). A row whose setup has one is scored apart, never in the predicted figures. The feature is
# read from the publication's description of its setup, never chosen from a row's error.
UNMODELLED: dict[str, str] = {
    "vision": "multimodal run: rlsim models no vision encoder and no image tokens",
}
# Unmodelled features of every row of a publication (a row may name its own, for one column of a table).
SETUP_FEATURES: dict[str, tuple[str, ...]] = {
    "verl-issue-7203": ("vision",),  # Qwen3.5-9B multimodal GRPO (docs/sources.md §9)
}


@dataclass(frozen=True)
class FittedConstant:
    """One constant set from published numbers. `where` is a repo path; `constant` a key in it."""

    where: str
    constant: str
    fitted_to: tuple[str, ...]
    how: str
    # The mechanism terms (TRAINING_MECHANISMS) the simulator had on when the constant was fitted to a
    # system-level number: a training cost may add only those beside it (`double_counted`).
    includes: tuple[str, ...] = ()


FITTED: tuple[FittedConstant, ...] = (
    FittedConstant("hardware_profiles/h100-sxm.yaml", "prefill_eta_compute", ("vidur",),
                   "rlsim calibrate ops: large-token GEMM efficiency of Vidur's H100 profile"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "decode_eta_mem", ("vidur",),
                   "69% of HBM peak at 1 token, Llama-2-7B per-operator profile"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "decode_eta_compute", ("vidur",),
                   "67% of BF16 peak at 2048 tokens, Llama-2-7B per-operator profile"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "decode_eta_mem", ("vidur",),
                   "~71% of HBM peak at batch 1, Llama-3-8B per-operator profile"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "decode_eta_compute", ("vidur",),
                   "~65% of BF16 peak at 2048 tokens"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "prefill_eta_compute", ("vidur",),
                   "~65% of BF16 peak at 2048 tokens"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "gemm_fixed_us", ("vidur",),
                   "rlsim calibrate ops: fixed time per GEMM kernel"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "layer_small_ops_us", ("vidur",),
                   "rlsim calibrate ops: norms, rope, activation and adds per layer"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "collective_latency_us", ("vidur",),
                   "rlsim calibrate ops: NCCL all-reduce latency on a DGX"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "gemm_fixed_us", ("vidur",),
                   "rlsim calibrate ops: fixed time per GEMM kernel"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "layer_small_ops_us", ("vidur",),
                   "rlsim calibrate ops: norms, rope, activation and adds per layer"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "collective_latency_us", ("vidur",),
                   "rlsim calibrate ops: NCCL all-reduce latency on a DGX"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "p2p_latency_us", ("vidur",),
                   "rlsim calibrate ops: NCCL send/recv latency between two GPUs of a DGX"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "p2p_latency_inter_node_us", ("vidur",),
                   "rlsim calibrate ops: NCCL send/recv latency between two DGX nodes"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "p2p_latency_us", ("vidur",),
                   "rlsim calibrate ops: NCCL send/recv latency between two GPUs of a DGX"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "p2p_latency_inter_node_us", ("vidur",),
                   "rlsim calibrate ops: NCCL send/recv latency between two DGX nodes"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "kernel_launch_us", ("frontier",),
                   "rlsim calibrate ops: H800 host-timed minus kernel-only operator times"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "moe_layer_fixed_us", ("frontier",),
                   "ops_moe: gating, top-k, shuffle and grouped GEMM of a small MoE on H800"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "kernel_launch_us", ("frontier",),
                   "rlsim calibrate ops: H800 host-timed minus kernel-only operator times"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "moe_layer_fixed_us", ("frontier",),
                   "ops_moe: gating, top-k, shuffle and grouped GEMM of a small MoE on H800"),
    FittedConstant("hardware_profiles/h800.yaml", "kernel_launch_us", ("frontier",),
                   "rlsim calibrate ops: H800 host-timed minus kernel-only operator times"),
    FittedConstant("hardware_profiles/h100-sxm.yaml", "attention_fixed_us", ("frontier",),
                   "ops_attention: decode-attention kernel T0 + KV-cache write, Frontier H800 kernel-only rows"),
    FittedConstant("hardware_profiles/h800.yaml", "attention_fixed_us", ("frontier",),
                   "ops_attention: decode-attention kernel T0 + KV-cache write, Frontier H800 kernel-only rows"),
    FittedConstant("hardware_profiles/a100-80gb.yaml", "attention_fixed_us", ("frontier",),
                   "ops_attention: decode-attention kernel T0 + KV-cache write, Frontier A800 Llama-2-7B rows"),
    FittedConstant("hardware_profiles/h800.yaml", "moe_layer_fixed_us", ("frontier",),
                   "ops_moe: gating, top-k, shuffle and grouped GEMM of a small MoE on H800"),
    *(FittedConstant("hardware_profiles/a800.yaml", name, ("frontier",), f"rlsim calibrate ops --gpu a800: {how}")
      for name, how in (("decode_eta_mem", "weight-streaming efficiency, Frontier A800 Llama-2-7B rows"),
                        ("decode_eta_compute", "GEMM share of peak at 512 tokens, Frontier A800 Llama-2-7B rows"),
                        ("prefill_eta_compute", "GEMM share of peak at 4096 tokens, Frontier A800 Llama-2-7B rows"),
                        ("gemm_fixed_us", "fixed time per GEMM kernel, Frontier A800 Llama-2-7B rows"),
                        ("layer_small_ops_us", "norms, rope, activation and add per layer, Frontier A800 rows"),
                        ("collective_latency_us", "NCCL all-reduce latency, Frontier a800_dgx"),
                        ("kernel_launch_us", "H800 host-timed minus kernel-only operator times"),
                        ("moe_layer_fixed_us", "gating, top-k, shuffle and grouped GEMM of a small MoE on H800"),
                        ("attention_fixed_us", "decode-attention kernel T0 + KV-cache write, A800 Llama-2-7B"))),
    *(FittedConstant(f"hardware_profiles/{gpu}.yaml", name, ("frontier",), f"ops_moe: {how}")
      for gpu in ("a800", "a100-80gb")
      for name, how in (("moe_gemm_eta_mem", "grouped GEMM across EP and TP, Frontier A800 Qwen3-30B-A3B"),
                        ("moe_gemm_eta_compute", "grouped GEMM across EP and TP, Frontier A800 Qwen3-30B-A3B"),
                        ("moe_routing_per_token_us", "gating + top-k + shuffle per token, Frontier A800"))),
    *(FittedConstant(f"hardware_profiles/{gpu}.yaml", "small_ops_eta_mem", (pub,),
                     "rlsim calibrate ops: HBM share of a layer's norms, rope, activation and adds above the L2 knee")
      for gpu, pub in (("h100-sxm", "vidur"), ("a100-80gb", "vidur"), ("a800", "frontier"))),
    FittedConstant("rlsim/sim/costs/engine_kinds.py", "vllm-0.3.step_overhead_ms", ("vllm-v0.6-blog",),
                   "scheduling share (29%) of a 13 ms step"),
    FittedConstant("rlsim/sim/costs/engine_kinds.py", "vllm-0.3.host_per_seq_us", ("hybridflow",),
                   "t_g=2 vs t_g=8 cuts 7B generation by 60.3%"),
    FittedConstant("rlsim/sim/scenario/schema/schedule.py", "HybridFlowSpec.switch_overhead_s",
                   ("verl-colocated-switch",), "the default colocated switch cost, 150 ms load + 295 ms gc"),
    FittedConstant("rlsim/sim/costs/generation.py", "linear_layers_time", ("vidur",),
                   "the smooth-roofline form chosen on Vidur's A100 profile"),
    FittedConstant("scenarios/async/areal-1.5b-generation-scaling.yaml", "workload.response_length.sigma",
                   ("areal-blog-v0.3",), "lognormal spread fitted to the 8- and 128-GPU points"),
    FittedConstant("scenarios/async/verl-dapo-7b-h20-sync.yaml", "workload.response_length.mean",
                   ("verl-one-step-off",), "mean fitted so one-step-off's generation takes 458 s"),
    FittedConstant("scenarios/async/verl-dapo-7b-h20-sync.yaml", "algorithm.rule_reward_s_per_sample",
                   ("verl-one-step-off",), "the rest of the published sync step as CPU reward work"),
    FittedConstant("scenarios/async/verl-dapo-7b-h20-sync.yaml", "schedule.switch_overhead_s",
                   ("verl-one-step-off",), "published gen - gen_seq"),
    FittedConstant("scenarios/async/verl-dapo-7b-h20-sync-megatron.yaml", "algorithm.rule_reward_s_per_sample",
                   ("verl-one-step-off",), "the rest of the published sync step as CPU reward work"),
    FittedConstant("scenarios/async/verl-dapo-7b-h20-sync-megatron.yaml", "schedule.switch_overhead_s",
                   ("verl-one-step-off",), "published gen - gen_seq"),
    FittedConstant("rlsim/sim/costs/weight_sync.py", "ONE_SENDER_NIC_SHARE", ("verl-pr7291",),
                   "11 GB/s from one sender through a 25 GB/s NIC (GH200, 2 GB buckets)"),
    FittedConstant("rlsim/sim/costs/weight_sync.py", "ALL_SENDERS_NIC_SHARE", ("verl-pr7291",),
                   "30-32 GB/s from the 4 GPUs of one GH200 node, 25 GB/s NIC each"),
    FittedConstant("rlsim/sim/costs/weight_sync.py", "PER_TENSOR_S", ("sglang-pr13824", "awesome-ml-sys-169"),
                   "per-tensor-nccl: (130 - 7) s / 74.5k tensors; per-tensor-rpc: 200 s / 5.3k tensors"),
)


def fitted_sources() -> frozenset[str]:
    """Every publication some constant was fitted to."""
    return frozenset(key for c in FITTED for key in c.fitted_to)


def is_predicted(source: str) -> bool:
    """True when no constant was fitted to any number of `source` (raises KeyError on an unknown key)."""
    if source not in PUBLICATIONS:
        raise KeyError(f"unknown publication {source!r}: add it to PUBLICATIONS")
    return source not in fitted_sources()


def scope_of(source: str, feature: str | None = None) -> str:
    """The unmodelled feature that puts a row outside the model's scope ("" when none); KeyError if unknown."""
    features = (*SETUP_FEATURES.get(source, ()), *((feature,) if feature else ()))
    for f in features:
        if f not in UNMODELLED:
            raise KeyError(f"unknown unmodelled feature {f!r}: add it to UNMODELLED (and docs/validation.md)")
    return features[0] if features else ""


def constant_exists(c: FittedConstant) -> bool:
    """Whether `c` names a real constant: a dotted key of a YAML file, an engine kind's field, or a function."""
    from rlsim.sim.api import shipped_dir

    if c.where.endswith(".yaml"):
        import yaml

        top, _, rest = c.where.partition("/")
        node = yaml.safe_load((shipped_dir(top) / rest).read_text())
        for part in c.constant.split("."):
            if not isinstance(node, dict) or part not in node:
                return False
            node = node[part]
        return True
    if c.where.endswith("engine_kinds.py"):
        from rlsim.sim.costs import ENGINE_KINDS

        kind, _, attr = c.constant.rpartition(".")
        return kind in ENGINE_KINDS and getattr(ENGINE_KINDS[kind], attr, None) is not None
    import importlib

    node = importlib.import_module(c.where.removesuffix(".py").replace("/", "."))
    for part in c.constant.split("."):
        fields = getattr(node, "model_fields", {})
        node = fields[part] if part in fields else getattr(node, part, None)
        if node is None:
            return False
    return True


# Publications that measured single operators (kernels, collectives): a constant fitted to them prices one
# kernel and is part of no system-level time, so no mechanism term can count it twice. Every other publication
# is a system-level number (a step or phase time, an MFU).
OPERATOR_PUBLICATIONS = frozenset({"vidur", "frontier"})
# The terms a training or forward pass adds beside its operators (costs/training_ops.py, costs/long_context.py,
# costs/training.py): a system-level efficiency fitted without one of them already holds what that term adds.
TRAINING_MECHANISMS = ("attention", "logits", "recompute", "padding", "rank_imbalance", "clip_grad_norm",
                       "micro_batch_fixed", "optimizer_step_fixed", "host_launches")
# The hardware-profile fields a training or forward pass is priced with.
TRAINING_PROFILE_FIELDS = ("train_mfu", "forward_mfu", "decode_eta_mem", "decode_eta_compute", "prefill_eta_compute",
                           "gemm_fixed_us", "layer_small_ops_us", "small_ops_eta_mem", "kernel_launch_us",
                           "collective_latency_us", "moe_gemm_eta_mem", "moe_gemm_eta_compute",
                           "moe_routing_per_token_us", "moe_layer_fixed_us")


def double_counted(fitted: tuple[FittedConstant, ...] = FITTED) -> list[str]:
    """One line per profile value fitted to a system-level number that the training cost prices together with a
    mechanism term its fit did not include (the same cost counted twice); empty when there is none."""
    out = []
    for c in fitted:
        system = sorted(set(c.fitted_to) - OPERATOR_PUBLICATIONS)
        if not c.where.startswith("hardware_profiles/") or c.constant not in TRAINING_PROFILE_FIELDS or not system:
            continue
        missing = [m for m in TRAINING_MECHANISMS if m not in c.includes]
        if missing:
            out.append(f"{c.where} {c.constant}: fitted to {', '.join(system)} (a system-level number) without "
                       f"{', '.join(missing)}, which the training cost adds beside it: refit it with them on, or "
                       "derive it from operators")
    return out
