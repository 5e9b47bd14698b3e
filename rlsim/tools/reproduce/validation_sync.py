"""Validation rows of weight syncs, each from a shipped scenario (scenarios/validation/) with the published setup.

- verl PR #116, FSDP and vLLM in one process (docs/sources.md §4): the colocated transition's weight parts
  (gather + load) of verl-pr116-fsdp-vllm-l20.yaml, and their ratio to the NCCL cross-process column.
- verl's checkpoint-engine benchmark (§4): the disaggregated sync of verl-checkpoint-engine-h100.yaml, once on
  the path verl took without the checkpoint engine (one NCCL broadcast per tensor, `per-tensor-nccl`) and once
  with it (2 GB buckets from one sender, after a gather across trainer nodes: `bucketed`), and the on/off ratio.
  The 4 + 4 ranks of the 7B rows share one node, so their sync moves over NVLink; the larger ones cross the NICs.
  Nothing is fitted to these rows (costs/weight_sync.py says where each constant comes from).
"""

from __future__ import annotations

from rlsim.sim.api import load_scenario, shipped_dir, simulate

# verl PR #116, FSDP -> vLLM TP4 in one process on 8x L20 (docs/sources.md §4), seconds.
VERL_PR116_SAME_PROCESS = (("Qwen2.5-3B", "qwen2.5-3b", 0.236), ("Qwen2.5-7B", "qwen2.5-7b", 0.547),
                           ("Llama-3-8B", "llama-3-8b", 0.570))
# verl checkpoint engine (docs/sources.md §4): model, preset, ranks per side, seconds off -> on.
VERL_CHECKPOINT_ENGINE = (("Qwen2.5-7B", "qwen2.5-7b", 4, 0.12, 0.02),
                          ("Qwen3-30B-A3B", "qwen3-30b-a3b", 16, 15.76, 4.38),
                          ("Qwen3-235B-A22B", "qwen3-235b-a22b", 64, 58.57, 23.70))


def _first_step(scenario: str, overrides: list[str]):
    res = simulate(load_scenario(shipped_dir("scenarios") / "validation" / scenario, overrides))
    return res.measured_steps.iloc[0], res.scenario


def pr116_same_process_rows(nccl: dict[str, tuple[float, float]]) -> list[dict]:
    """Gather + load of the colocated transition, and its ratio to the NCCL sync (`nccl`: model -> published,
    rlsim's seconds)."""
    rows = []
    for name, preset, published in VERL_PR116_SAME_PROCESS:
        step, scn = _first_step("verl-pr116-fsdp-vllm-l20.yaml", [f"models.policy.preset={preset}"])
        sim = float(step["timing_s/transition/gather"] + step["timing_s/transition/load"])
        params_b = round(scn.models["policy"].params / 1e9, 1)
        common = {"source": "verl-pr116", "cite": "docs/sources.md §4", "params_b": params_b}
        rows.append({"name": f"verl PR #116 {name} FSDP+vLLM same-process weight sync, 8xL20 TP4 (s)",
                     "quantity": "absolute", "published": published, "simulated": sim, **common})
        rows.append({"name": f"verl PR #116 same process / NCCL, {name}", "quantity": "ratio",
                     "published": published / nccl[name][0], "simulated": sim / nccl[name][1],
                     **common})
    return rows


def checkpoint_engine_overrides(preset: str, ranks: int) -> list[str]:
    """verl-checkpoint-engine-h100.yaml for one benchmark size: both sides on one pool of 8-GPU nodes, the trainer
    on GPUs [0, ranks) and the engines on [ranks, 2 ranks) (4 + 4 ranks share one node)."""
    over = [f"models.policy.preset={preset}", f"roles.rollout.parallel.tp={min(ranks, 8)}",
            f"cluster.pools.node.nodes={-(-2 * ranks // 8)}", f"roles.actor.gpus={ranks}",
            f"roles.rollout.gpu_offset={ranks}", f"roles.rollout.gpus={ranks}"]
    if ranks >= 64:
        over.append("roles.actor.parallel.tp=2")  # so the 235B-A22B actor's training state fits (not in the sync)
    return over


def checkpoint_engine_rows() -> list[dict]:
    """verl's sync without the checkpoint engine (one tensor per call) and with it (bucketed), and their ratio."""
    rows = []
    for name, preset, ranks, off, on in VERL_CHECKPOINT_ENGINE:
        over = checkpoint_engine_overrides(preset, ranks)
        sim = {}
        for column, path in (("off", "per-tensor-nccl"), ("on", "bucketed")):
            step, scn = _first_step("verl-checkpoint-engine-h100.yaml", [*over, f"schedule.weight_sync.path={path}"])
            sim[column] = float(step["timing_s/sync_rollout_weights"])
        label = f"verl checkpoint engine {name} {ranks}->{ranks} ranks"
        common = {"source": "verl-checkpoint-engine", "cite": "docs/sources.md §4",
                  "params_b": round(scn.models["policy"].params / 1e9, 1)}
        rows += [
            {"name": f"{label}, off (s)", "quantity": "absolute", "published": off, "simulated": sim["off"], **common},
            {"name": f"{label}, on (s)", "quantity": "absolute", "published": on, "simulated": sim["on"], **common},
            {"name": f"{label}, on / off", "quantity": "ratio", "published": on / off,
             "simulated": sim["on"] / sim["off"], **common},
        ]
    return rows
