"""`rlsim plan` with expert parallelism: the space varies ep, the scenario checks prune what cannot be, ep reaches
the simulated scenario, and the explanation of a winner says where the experts are sharded."""

from __future__ import annotations

import copy

import pytest
import yaml

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario, parse_scenario
from rlsim.sim.simulate import simulate
from rlsim.tools.plan import enumerate_candidates, load_space, make_plan, parse_space

SCENARIOS = shipped_dir("scenarios")
MOE = SCENARIOS / "sync" / "moe-qwen3-30b-a3b-ep.yaml"
SPACE = SCENARIOS / "plan" / "qwen3-30b-a3b-ep-space.yaml"


def moe_base() -> dict:
    return yaml.safe_load(MOE.read_text())


def space(gen_tp, gen_ep, training=None, top_k: int = 2) -> object:
    parallel = {"generation_tp": gen_tp, "generation_ep": gen_ep, "training_search": "all"}
    if training is not None:
        parallel["training"] = training
    return parse_space({"gpus": [{"hardware": "h100-sxm", "counts": [16]}],
                        "schedules": [{"kind": "hybridflow", "layouts": ["colocate"]}],
                        "parallel": parallel, "search": {"rungs": [1], "top_k": top_k}})


def check_messages(base: dict, overrides: dict[str, int]) -> list[str]:
    """The scenario checks' own one-line messages for the base scenario with `overrides` (dotted path -> ep)."""
    data = copy.deepcopy(base)
    for path, value in overrides.items():
        node = data
        *keys, last = path.split(".")
        for k in keys:
            node = node.setdefault(k, {})
        node[last] = value
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, source="x")
    return [f"{p.path}: {p.message}" for p in info.value.problems if ".ep" in p.path]


def test_space_reads_ep_axes_and_labels_them():
    s = load_space(SPACE)
    assert s.parallel.generation_ep == [1, 2, 4, 8]
    assert [t.ep for t in s.parallel.training] == [1, 2, 4, 8, 8]
    assert s.parallel.training[3].label == "tp1-pp1-ep8-optimizer"
    assert parse_space({"gpus": [{"hardware": "h100-sxm", "counts": [8]}], "schedules": [{"kind": "hybridflow"}],
                        "parallel": {"training": [{"tp": 8}]}}).parallel.training[0].label == "tp8-pp1-none"
    with pytest.raises(ScenarioError) as info:
        space([4], [1], [{"tp": 1, "ep": 0}])
    assert any("parallel.training[0].ep" in line for line in info.value.lines())


def test_ep_that_does_not_divide_the_engine_tp_is_pruned_with_the_checks_own_line():
    cands = enumerate_candidates(moe_base(), space([2, 4], [1, 2, 4, 8], [{"tp": 1, "ep": 8, "offload": "optimizer"}]))
    by_gen = {(c.knobs["gen_tp"], c.knobs["gen_ep"]): c for c in cands}
    assert len(by_gen) == 8
    refused = {k for k, c in by_gen.items() if c.status == "infeasible"}
    assert refused == {(2, 4), (2, 8), (4, 8)}  # ep must divide tp; the rest fit and run
    for tp, ep in refused:
        expected = check_messages(moe_base(), {"roles.rollout.parallel.tp": tp, "roles.rollout.parallel.ep": ep})
        assert len(expected) == 1 and by_gen[(tp, ep)].reason == expected[0]
        assert "must divide the engine's tp" in expected[0]
    assert by_gen[(4, 4)].label == "h100-sxm x16 colocate tg4 eg4 tp1-pp1-ep8-optimizer"


def test_training_ep_that_does_not_divide_tp_dp_or_num_experts_is_pruned():
    base = moe_base()
    cands = enumerate_candidates(base, space([4], [4], [{"tp": 1, "ep": 32, "offload": "optimizer"}]))
    [cand] = cands
    assert cand.status == "infeasible"
    assert "roles.actor.parallel.ep: must divide tp × dp (16)" in cand.reason
    assert "roles.reference.parallel.ep: must divide tp × dp (16)" in cand.reason
    base["models"]["qwen"]["num_experts"] = 120  # 16 divides tp x dp but not 120 experts
    [cand] = enumerate_candidates(base, space([4], [4], [{"tp": 1, "ep": 16, "offload": "optimizer"}]))
    expected = check_messages(base, {"roles.actor.parallel.ep": 16, "roles.reference.parallel.ep": 16})
    assert cand.status == "infeasible" and all(line in cand.reason for line in expected)
    assert any("num_experts (120), got 16" in line for line in expected)


def test_an_moe_actor_that_does_not_fit_is_told_the_ep_that_would():
    cands = enumerate_candidates(moe_base(), space([4], [1], [{"tp": 1, "ep": e, "offload": "optimizer"}
                                                              for e in (1, 2, 4)]))
    reasons = {c.knobs["train"]: c.reason for c in cands}
    assert reasons["tp1-pp1-ep1-optimizer"] == (
        "roles.actor: does not fit: needs 212.1 GB per GPU (weights 61.1, grads 122.1, optimizer 22.9, activations "
        "6.0) > 80.0 GB; fits with parallel.tp=4 or parallel.ep=8")
    assert reasons["tp1-pp1-ep4-optimizer"].endswith("fits with 32 GPUs for this role (data parallel 32) or "
                                                     "parallel.tp=2 or parallel.cp=2 or parallel.ep=8")
    # a dense model is never offered an ep
    dense = yaml.safe_load((SCENARIOS / "plan" / "qwen32b-grpo-512x16.yaml").read_text())
    dense["roles"]["actor"]["train"]["sharding"] = "megatron"
    with pytest.raises(ScenarioError) as info:
        parse_scenario(dense, source="x")
    assert any("does not fit" in line for line in info.value.lines())
    assert not any("parallel.ep" in line for line in info.value.lines())


def test_ep_on_a_dense_model_is_pruned():
    base = yaml.safe_load((SCENARIOS / "plan" / "qwen32b-grpo-512x16.yaml").read_text())
    s = parse_space({"gpus": [{"hardware": "h100-sxm", "counts": [32]}],
                     "schedules": [{"kind": "hybridflow", "layouts": ["colocate"]}],
                     "parallel": {"generation_tp": [4], "generation_ep": [1, 2]}})
    cands = {c.knobs["gen_ep"]: c for c in enumerate_candidates(base, s)}
    assert cands[1].status == "feasible"
    assert cands[2].status == "infeasible"
    assert cands[2].reason == ("roles.rollout.parallel.ep: 2 needs an MoE model, but model 'qwen' is dense "
                               "(num_experts 0)")
    [actor] = enumerate_candidates(base, parse_space({
        "gpus": [{"hardware": "h100-sxm", "counts": [32]}], "schedules": [{"kind": "hybridflow"}],
        "parallel": {"training": [{"tp": 1, "ep": 2}]}}))
    assert "roles.actor.parallel.ep: 2 needs an MoE model" in actor.reason


def test_ep_reaches_the_simulated_scenario():
    cands = enumerate_candidates(moe_base(), space([4], [1, 4], [{"tp": 2, "ep": 8, "offload": "optimizer"},
                                                                 {"tp": 2, "offload": "optimizer"}]))
    ok = {(c.knobs["gen_ep"], c.knobs["train"]): c.scenario for c in cands if c.scenario is not None}
    assert set(ok) == {(1, "tp2-pp1-ep8-optimizer"), (4, "tp2-pp1-ep8-optimizer"),
                       (1, "tp2-pp1-optimizer"), (4, "tp2-pp1-optimizer")}
    scn = ok[(4, "tp2-pp1-ep8-optimizer")]
    assert (scn.roles["rollout"].parallel.tp, scn.roles["rollout"].parallel.ep) == (4, 4)
    assert (scn.roles["actor"].parallel.tp, scn.roles["actor"].parallel.ep) == (2, 8)
    assert scn.roles["reference"].parallel.ep == 8
    # no ep in the training config: each role keeps the scenario's own (8)
    assert ok[(1, "tp2-pp1-optimizer")].roles["actor"].parallel.ep == 8
    # the all-to-alls and the busiest rank's share are in the simulated generation: ep 4 engines are slower
    gen = {ep: simulate(ok[(ep, "tp2-pp1-ep8-optimizer")].model_copy(update={"steps": 1, "warmup_steps": 0}))
           for ep in (1, 4)}
    assert gen[4].summary["step_time_s"] > gen[1].summary["step_time_s"]


def test_training_ep_skips_a_dense_critic():
    """The config's ep goes to the actor and the other roles of an MoE model; a dense critic keeps ep 1."""
    base = moe_base()
    base["models"]["critic"] = {"preset": "qwen2.5-0.5b"}
    base["roles"]["critic"] = {"pool": "main", "model": "critic", "train": {"sharding": "fsdp"}}
    base["algorithm"]["kind"] = "ppo"
    [cand] = enumerate_candidates(base, space([4], [4], [{"tp": 1, "ep": 4, "offload": "all"}]))
    roles = cand.data["roles"]
    assert (roles["actor"]["parallel"]["ep"], roles["reference"]["parallel"]["ep"]) == (4, 4)
    assert "ep" not in roles["critic"]["parallel"]


def test_plan_explains_the_expert_parallel_winner(tmp_path):
    s = space([4], [1, 4], [{"tp": 2, "ep": 8, "offload": "optimizer"}, {"tp": 2, "ep": 1, "offload": "optimizer"}])
    outcome = make_plan(MOE, s, tmp_path, backend="serial")
    text = outcome.paths["md"].read_text()
    assert "## 1. h100-sxm x16 colocate tg4 eg1 tp2-pp1-ep8-optimizer" in text
    assert ("expert parallel: actor and reference ep 8 over tp x dp = 16 ranks (1/8 of the experts per GPU, "
            "expert data parallel 2)") in text
    assert "rollout ep 4 of each engine's tp 4 (32 experts per GPU, whole experts)" in text  # the runner-up
    assert "no candidate without expert parallelism ran to the end (1 in the space" in text  # ep 1 does not fit
    rec = load_scenario(outcome.paths["rec1"])  # what `rlsim run` loads
    assert rec.roles["actor"].parallel.ep == 8 and rec.roles["rollout"].parallel.ep == 1


def test_plan_compares_the_winner_with_the_best_plan_without_expert_parallelism(tmp_path):
    s = space([4], [1], [{"tp": 2, "ep": 8, "offload": "optimizer"}, {"tp": 4, "ep": 1, "offload": "all"}], top_k=1)
    text = make_plan(MOE, s, tmp_path, backend="serial").paths["md"].read_text()
    assert "## 1. h100-sxm x16 colocate tg4 eg1 tp2-pp1-ep8-optimizer" in text
    assert "- best without expert parallelism h100-sxm x16 colocate tg4 eg1 tp4-pp1-ep1-all: would need" in text


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_shipped_ep_space_plans_quickly(tmp_path):
    outcome = make_plan(MOE, load_space(SPACE), tmp_path, backend="serial")
    result = outcome.result
    statuses = [c.status for c in result.candidates]
    assert len(statuses) == 60 and statuses.count("infeasible") == 42
    best = result.candidates[result.ranking[0].candidate]
    assert best.scenario.roles["actor"].parallel.ep == 8  # ep 1, 2 and 4 actors do not fit beside the engines
    assert result.cpu_s < 60
    # the bound prices the engines' all-to-alls (tighter at ep > 1) and stays above every simulated throughput
    for e in result.evaluations:
        assert result.candidates[e.candidate].bound["throughput_tokens_per_s"] >= e.summary["throughput_tokens_per_s"]
    bounds = {c.knobs["gen_ep"]: c.bound["throughput_tokens_per_s"] for c in result.candidates
              if c.bound and c.knobs["gen_tp"] == 8 and c.knobs["train"] == "tp1-pp1-ep8-optimizer"}
    assert bounds[1] > bounds[2] > bounds[8]
