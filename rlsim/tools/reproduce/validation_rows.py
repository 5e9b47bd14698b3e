"""Validation rows from publications nothing in rlsim was fitted to: step breakdowns and throughputs.

Each row is built from a scenario (scenarios/validation/) or a cost function with the published setup;
what the publication leaves out is assumed, and said so where the row is built. A row carries its
publication key (rlsim/tools/reproduce/provenance.py): whether it is predicted is derived there.
"""

from __future__ import annotations

from rlsim.sim.api import load_profile, load_scenario, shipped_dir, simulate

# Published step breakdowns, seconds (docs/sources.md §9, "Reported step breakdowns").
VERL_7203 = {"timing_s/gen": 29.0, "timing_s/old_log_prob": 84.0, "timing_s/ref": 82.0,
             "timing_s/update_actor": 91.0, "timing_s/update_weights": 3.5, "timing_s/step": 290.0}
VERL_1208 = {"timing_s/gen": 74.02, "timing_s/old_log_prob": 3.57, "timing_s/ref": 3.42,
             "timing_s/update_actor": 14.30, "timing_s/step": 96.55}
# Ratios inside one reported step: they do not depend on the batch size the issues leave out.
STEP_RATIOS = (("timing_s/ref", "timing_s/old_log_prob"), ("timing_s/update_actor", "timing_s/old_log_prob"),
               ("timing_s/gen", "timing_s/step"))
BREAKDOWNS = (
    ("verl #7203 Qwen3.5-9B 8xH800", "verl-issue-7203", "verl-7203-qwen3.5-9b-h800.yaml", VERL_7203),
    ("verl #1208 Qwen2.5-0.5B 4xGH200", "verl-issue-1208", "verl-1208-qwen2.5-0.5b-gh200.yaml", VERL_1208),
)


def _phase_means(scenario: str, overrides=()) -> dict[str, float]:
    res = simulate(load_scenario(shipped_dir("scenarios") / "validation" / scenario, list(overrides)))
    return res.measured_steps.mean(numeric_only=True).to_dict()


def step_breakdown_rows() -> list[dict]:
    """Each published phase (absolute seconds) and the within-step ratios, per issue."""
    rows = []
    for label, source, scenario, published in BREAKDOWNS:
        sim = _phase_means(scenario)
        for col, pub in published.items():
            rows.append({"name": f"{label} {col} (s)", "source": source, "cite": "docs/sources.md §9",
                         "quantity": "absolute", "published": pub, "simulated": sim[col]})
        for num, den in STEP_RATIOS:
            rows.append({"name": f"{label} {num.split('/')[1]} / {den.split('/')[1]}", "source": source,
                         "cite": "docs/sources.md §9", "quantity": "ratio",
                         "published": published[num] / published[den], "simulated": sim[num] / sim[den]})
    return rows


def sglang_blog_row() -> dict:
    """SGLang blog: Llama-3-8B BF16 offline on one A100, about 4,000 tokens/s.

    Assumed (the blog's setup is not in docs/sources.md): decode-bound offline serving at 256 running
    sequences (SGLang's usual cap) with a mean context of 1,000 tokens; output tokens per second.
    """
    from rlsim.sim.api import ModelShape, resolve_preset
    from rlsim.sim.costs import decode_step_time, engine_overheads

    a100 = load_profile("a100-80gb")
    l3 = ModelShape(**resolve_preset("llama-3-8b"))
    batch, ctx = 256, 1000
    step = decode_step_time(l3, a100, 1, batch, batch * ctx, overheads=engine_overheads("sglang-0.4", a100))
    return {"name": "SGLang blog Llama-3-8B A100 offline throughput (tok/s)", "source": "sglang-blog",
            "cite": "docs/sources.md §2", "quantity": "absolute", "published": 4000.0, "simulated": batch / step}


def verl_cuda_graph_row() -> dict:
    """verl: turning vLLM CUDA graphs on shortened one generation phase from 85 s to 62 s.

    Assumed (the run is not described): the colocated GRPO scenario shipped for 7B on 16 H100
    (scenarios/hybridflow/grpo-qwen2.5-7b-h100.yaml) with verl's rollout of the time, vLLM 0.6.
    """
    base = shipped_dir("scenarios") / "hybridflow" / "grpo-qwen2.5-7b-h100.yaml"
    gen = []
    for graphs in ("true", "false"):
        over = ["roles.rollout.engine.kind=vllm-0.6", f"roles.rollout.engine.cuda_graphs={graphs}"]
        gen.append(float(simulate(load_scenario(base, over)).measured_steps["timing_s/gen"].mean()))
    return {"name": "verl generation phase with / without vLLM CUDA graphs", "source": "verl-docs-rollout",
            "cite": "docs/sources.md §2", "quantity": "ratio", "published": 62.0 / 85.0, "simulated": gen[0] / gen[1]}


# verl PR #116 (8x L20, TP4): seconds to sync weights over NCCL between processes (docs/sources.md §4).
VERL_PR116_NCCL = (("Qwen2.5-3B", 1.02), ("Qwen2.5-7B", 0.79), ("Llama-3-8B", 0.70))


def verl_pr116_rows() -> list[dict]:
    """NCCL weight sync between a trainer process and a TP4 vLLM engine on one 8x L20 node.

    verl's sync of that time broadcast one tensor per NCCL call: rlsim's `per-tensor-nccl` path
    (costs/weight_sync.py, its per-call cost taken from SGLang #13824, not from this PR), from one sender over the
    node's PCIe (no NVLink). The L20 is taken as the l40s profile (same 48 GB GDDR6 at 864 GB/s and PCIe Gen4 x16,
    no NVLink; NVIDIA datasheets). The 3B model is Qwen2.5-3B's shape (config.json); the PR's exact 3B/7B models
    are assumed Qwen2.5. The same-process column is scored by validation_sync.py (the colocated transition's
    gather + load); the gloo column is not: rlsim has no model of a collective through host memory.
    """
    from rlsim.sim.api import ModelShape, resolve_preset
    from rlsim.sim.costs import SyncSetup, sync_time

    hw = load_profile("l40s")
    shapes = {"Qwen2.5-3B": ModelShape(**resolve_preset("qwen2.5-3b")),
              "Qwen2.5-7B": ModelShape(**resolve_preset("qwen2.5-7b")),
              "Llama-3-8B": ModelShape(**resolve_preset("llama-3-8b"))}
    rows = []
    for name, pub in VERL_PR116_NCCL:
        m = shapes[name]
        sync = SyncSetup(m.weight_bytes_total, m.weight_tensors, hw, hw, receivers=4, receiver_tp=4, trainer_gpus=4,
                         trainer_nodes=1, path="per-tensor-nccl", same_node=True)
        rows.append({"name": f"verl PR #116 {name} NCCL weight sync, 8xL20 TP4 (s)", "source": "verl-pr116",
                     "cite": "docs/sources.md §4", "quantity": "absolute", "published": pub,
                     "params_b": round(m.params / 1e9, 1), "simulated": sync_time(sync)})
    return rows


def infersim_row() -> dict:
    """InferSim: SGLang decoding Qwen3-8B FP8 on one H20, 2682 tokens per GPU per second (docs/sources.md §2).

    Generated tokens per second of scenarios/validation/infersim-qwen3-8b-fp8-h20.yaml (its header lists
    what is assumed: the batch and lengths are not published in docs/sources.md).
    """
    res = simulate(load_scenario(shipped_dir("scenarios") / "validation" / "infersim-qwen3-8b-fp8-h20.yaml"))
    step = res.measured_steps.iloc[0]
    return {"name": "InferSim Qwen3-8B FP8 H20 SGLang decode throughput (tok/s per GPU)", "source": "infersim",
            "cite": "docs/sources.md §2", "quantity": "absolute", "published": 2682.0,
            "simulated": float(step["response_tokens"] / step["timing_s/gen"]) / res.scenario.role_gpus("rollout")}


def vllm_blog_row() -> dict:
    """vLLM v0.6 blog: before v0.6, Llama-3-8B on one H100 emitted a token every 13 ms under light load.

    vllm-0.3's step overhead was fitted to this blog (provenance.FITTED): the row is fitted. Light load is
    taken as one running sequence with a 512-token context (as the batch-1 rows of the engine kinds).
    """
    from rlsim.sim.api import ModelShape, resolve_preset
    from rlsim.sim.costs import decode_step_time, engine_overheads

    h100 = load_profile("h100-sxm")
    l3 = ModelShape(**resolve_preset("llama-3-8b"))
    return {"name": "vLLM before v0.6 Llama-3-8B H100 decode step under light load (s)", "source": "vllm-v0.6-blog",
            "cite": "docs/sources.md §2", "quantity": "absolute", "published": 13e-3,
            "simulated": decode_step_time(l3, h100, 1, 1, 512, overheads=engine_overheads("vllm-0.3", h100))}


def published_breakdown_rows() -> list[dict]:
    from rlsim.tools.reproduce.validation_sync import checkpoint_engine_rows, pr116_same_process_rows

    nccl = verl_pr116_rows()
    by_model = {name: (pub, row["simulated"]) for (name, pub), row in zip(VERL_PR116_NCCL, nccl, strict=True)}
    return [*step_breakdown_rows(), sglang_blog_row(), verl_cuda_graph_row(), *nccl,
            *pr116_same_process_rows(by_model), *checkpoint_engine_rows(), infersim_row(), vllm_blog_row()]
