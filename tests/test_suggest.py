""""Did you mean ...?" (rlsim/sim/suggest.py): the helper, and every place a typo is met with it."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import parse_scenario
from rlsim.sim.suggest import closest, did_you_mean
from rlsim.tools.importers.command import run_import
from rlsim.tools.importers.vocabulary import vocabulary
from rlsim.tools.plan.space import parse_space

FIXTURES = Path(__file__).parent / "fixtures" / "import"
BASE = {
    "name": "tiny", "steps": 1,
    "cluster": {"pools": {"gen": {"hardware": "h100-sxm", "nodes": 1, "gpus_per_node": 8}}},
    "models": {"policy": {"preset": "qwen2.5-7b"}},
    "roles": {"rollout": {"pool": "gen", "model": "policy", "parallel": {"tp": 2},
                          "engine": {"gpu_memory_utilization": 0.5}}},
    "algorithm": {"kind": "generate", "prompts_per_step": 4, "samples_per_prompt": 2},
    "workload": {"prompt_length": {"kind": "fixed", "value": 128},
                 "response_length": {"kind": "lognormal", "mean": 300, "sigma": 0.8, "max": 1024}},
    "schedule": {"kind": "generation-only"},
}


def problems(change) -> list[str]:
    data = copy.deepcopy(BASE)
    change(data)
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(data, "s.yaml")
    return caught.value.lines()


def test_the_helper_finds_close_names_only():
    assert closest("tensor_model_paralel_size", ["tensor_model_parallel_size", "pipeline_model_parallel_size"]) == [
        "tensor_model_parallel_size"]
    assert closest("H100_SXM", ["h100-sxm", "h20"]) == ["h100-sxm"]  # case and - / _ do not count
    assert closest("gpu", ["gpus", "counts"]) == ["gpus"]
    assert closest("banana", ["gpus", "counts"]) == []  # nothing close: no guess
    assert closest("gpus", ["gpus", "counts"]) == []  # known: nothing to suggest
    assert did_you_mean("stpes", ["steps", "seed"]) == ": did you mean steps?"
    assert did_you_mean("zzz", ["steps"]) == ""


@pytest.mark.parametrize("change, expected", [
    (lambda d: d.update(stpes=2), "s.yaml: stpes: unknown key: did you mean steps?"),
    (lambda d: d["roles"]["rollout"]["engine"].update(max_num_seq=4),
     "roles.rollout.engine.max_num_seq: unknown key: did you mean max_num_seqs?"),
    (lambda d: d["roles"]["rollout"]["engine"].update(kind="sglang-0.5"), "got 'sglang-0.5': did you mean sglang-0.4?"),
    (lambda d: d["workload"]["response_length"].update(kind="lognormall"), "did you mean lognormal?"),
    (lambda d: d["workload"]["response_length"].update(truncated_fractoin=0.1),
     "workload.response_length.truncated_fractoin: unknown key: did you mean truncated_fraction?"),
    (lambda d: d["cluster"]["pools"]["gen"].update(hardware="h100_sxmm"),  # h100_sxm itself is h100-sxm
     "unknown hardware profile 'h100_sxmm': did you mean h100-sxm?"),
    (lambda d: d.update(calibration={"factors": {"train_mf": 0.4}}),
     "calibration.factors.train_mf: unknown key (expected one of"),
    (lambda d: d.update(calibration={"band_pcnt": 5}), "calibration.band_pcnt: unknown key: did you mean band_pct?"),
])
def test_scenario_typos_get_the_closest_known_name(change, expected):
    found = problems(change)
    assert any(expected in line for line in found), found
    assert all("\n" not in line and "Input should" not in line for line in found)


def test_plan_space_typos_suggest_the_spaces_own_fields():
    with pytest.raises(ScenarioError) as caught:
        parse_space({"gpus": [{"hardware": "h100-sxm", "countz": [8]}], "schedules": [{"kind": "hybridflow"}]},
                    "space.yaml")
    assert any("gpus[0].countz: unknown key: did you mean counts?" in line for line in caught.value.lines())


def test_roll_and_areal_flag_keys_close_to_their_own_and_leave_other_keys_alone():
    roll, areal = vocabulary("roll"), vocabulary("areal")
    assert roll.check("actor_train.training_args.per_device_train_batch_sizes") == (
        ": did you mean actor_train.training_args.per_device_train_batch_size?")
    assert roll.check("actor_train.training_args.per_device_train_batch_size") is None
    assert roll.check("custom_envs.MyOwnEnvironment.max_steps") is None  # a user's name: not judged
    assert areal.check("gconfig.n_sample") == ": did you mean gconfig.n_samples?"
    assert areal.check("gconfig.n_samples") is None


def test_a_misspelt_roll_key_is_listed_unknown_not_ignored(tmp_path):
    source = FIXTURES / "roll" / "rlvr" / "rlvr_config.yaml"
    data = yaml.safe_load(source.read_text())
    data["actor_train"]["training_args"]["gradient_accumulation_stepz"] = 4
    path = source.parent / f"typo-{tmp_path.name}.yaml"  # beside it: its Hydra defaults resolve
    try:
        path.write_text(yaml.safe_dump(data))
        ledger = run_import("roll", path, []).ledger
    finally:
        path.unlink(missing_ok=True)
    key = "actor_train.training_args.gradient_accumulation_stepz"
    assert ledger.unknown[key] == ": did you mean actor_train.training_args.gradient_accumulation_steps?"
    assert key not in ledger.ignored
