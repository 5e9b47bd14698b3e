"""Scenario loading: every bad input gets its exact `file: dotted.path: message` line.

See docs/sources.md, Design notes: Bad input.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rlsim.sim.hardware import available_profiles, load_profile, profiles_dir
from rlsim.sim.model_shapes import preset_names
from rlsim.sim.scenario import (
    Problem,
    Scenario,
    ScenarioError,
    apply_overrides,
    check_scenario,
    dump_scenario,
    load_scenario,
    parse_scenario,
)
from rlsim.sim.scenario.schema import ModelSpec

SRC = "scenario.yaml"

BASE: dict[str, Any] = {
    "name": "tiny",
    "steps": 3,
    "cluster": {"pools": {"gen": {"hardware": "h100-sxm", "nodes": 2, "gpus_per_node": 8}}},
    "models": {"policy": {"preset": "qwen2.5-7b"}},
    "roles": {
        "rollout": {"pool": "gen", "model": "policy", "parallel": {"tp": 2}, "engine": {}},
    },
    "algorithm": {"kind": "grpo", "prompts_per_step": 8, "samples_per_prompt": 4, "mini_batches": 2},
    "workload": {
        "prompt_length": {"kind": "fixed", "value": 512},
        "response_length": {"kind": "lognormal", "mean": 1000, "sigma": 1.0, "max": 4096},
    },
    "schedule": {"kind": "generation-only"},
}


@pytest.fixture
def base() -> dict[str, Any]:
    """A minimal valid scenario (a fresh copy: tests mutate it)."""
    return copy.deepcopy(BASE)


def lines(data: Any, overrides: list[str] | tuple[str, ...] = (), **kw: Any) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, SRC, overrides, **kw)
    return info.value.lines()


def load_lines(path: Path, overrides: list[str] | tuple[str, ...] = ()) -> list[str]:
    with pytest.raises(ScenarioError) as info:
        load_scenario(path, overrides)
    return [line.replace(str(path), "FILE") for line in info.value.lines()]


def needs_profile(name: str) -> None:
    if name not in available_profiles():
        pytest.skip(f"hardware profile {name} not shipped")


# ---------------------------------------------------------------- valid scenarios


def test_minimal_scenario_is_valid(base):
    scn = parse_scenario(base, SRC)
    assert isinstance(scn, Scenario)
    assert scn.roles["rollout"].engine.gpu_memory_utilization == 0.5
    assert scn.cluster.pools["gen"].gpus == 16
    assert check_scenario(scn) == []


def test_preset_resolves_and_alias_too(base):
    base["models"]["other"] = {"preset": "deepseek-r1-distill-qwen-7b"}
    scn = parse_scenario(base, SRC)
    for name in ("policy", "other"):
        m = scn.models[name]
        assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.vocab) == (28, 3584, 28, 4, 18944, 152064)


def test_explicit_dims_override_preset(base):
    base["models"]["policy"].update(layers=4, weight_bytes=1)
    m = parse_scenario(base, SRC).models["policy"]
    assert (m.layers, m.hidden, m.weight_bytes) == (4, 3584, 1)


def test_set_steps(base):
    assert parse_scenario(base, SRC, ["steps=2"]).steps == 2


def test_set_nested_scalar_and_string(base):
    scn = parse_scenario(base, SRC, ["roles.rollout.parallel.tp=4", "cluster.pools.gen.hardware=h100-sxm"])
    assert scn.roles["rollout"].parallel.tp == 4


def test_set_hardware_profile_h20(base):
    needs_profile("h20")
    scn = parse_scenario(base, SRC, ["cluster.pools.gen.hardware=h20"])
    assert scn.cluster.pools["gen"].hardware == "h20"


def test_set_mapping_replaces_a_distribution(base):
    scn = parse_scenario(base, SRC, ["workload.response_length={kind: fixed, value: 10}"])
    assert scn.workload.response_length.kind == "fixed"
    assert scn.workload.response_length.value == 10


def test_set_creates_missing_sections(base):
    scn = parse_scenario(base, SRC, ["roles.reference.pool=gen", "roles.reference.model=policy"])
    assert scn.roles["reference"].pool == "gen"


def test_set_into_null_section(base):
    base["roles"]["rollout"]["engine"] = None
    scn = parse_scenario(base, SRC, ["roles.rollout.engine.max_num_seqs=64"])
    assert scn.roles["rollout"].engine.max_num_seqs == 64


def test_apply_overrides_lists_mappings_and_deep_copy():
    data = {"a": {"b": 1}, "l": [1, 2]}
    out = apply_overrides(data, ["a.c=[1, 2]", "x.y.z={k: v}", "a.b=hello", "l.1=5", "e=", "n=null"])
    assert out == {
        "a": {"b": "hello", "c": [1, 2]},
        "l": [1, 5],
        "x": {"y": {"z": {"k": "v"}}},
        "e": "",
        "n": None,
    }
    assert data == {"a": {"b": 1}, "l": [1, 2]}


def test_apply_overrides_raises_on_malformed():
    with pytest.raises(ScenarioError) as info:
        apply_overrides({"a": 1}, ["a.b=2"], source="x.yaml")
    assert info.value.lines() == ["x.yaml: --set a.b=2: a is 1, not a mapping"]


def test_dump_parse_round_trip(base, tmp_path):
    scn = parse_scenario(base, SRC, ["steps=2"])
    text = dump_scenario(scn)
    assert parse_scenario(yaml.safe_load(text), SRC) == scn
    assert text.index("name:") < text.index("cluster:") < text.index("schedule:")  # schema order, not sorted
    path = tmp_path / "scenario.resolved.yaml"
    path.write_text(text)
    assert load_scenario(path) == scn


def test_load_scenario_file_with_overrides(base, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base))
    scn = load_scenario(path, ["steps=5", "roles.rollout.parallel.tp=8"])
    assert (scn.steps, scn.roles["rollout"].parallel.tp) == (5, 8)


def test_empirical_path_is_relative_to_the_scenario_file(base, tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "lens.csv").write_text("id,tokens\n1,100\n2,2000\n")
    base["workload"]["response_length"] = {"kind": "empirical", "path": "data/lens.csv", "column": "tokens"}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base))
    monkeypatch.chdir("/")
    scn = load_scenario(path)
    assert scn.workload.response_length.path == str(tmp_path / "data" / "lens.csv")
    assert parse_scenario(yaml.safe_load(dump_scenario(scn))) == scn  # absolute: the dump works anywhere


# ---------------------------------------------------------------- schema errors


def test_unknown_top_level_key(base):
    base["stpes"] = 2
    assert lines(base) == ["scenario.yaml: stpes: unknown key: did you mean steps?"]


def test_unknown_nested_key(base):
    base["roles"]["rollout"]["engine"]["gpu_mem_util"] = 0.9
    assert lines(base) == ["scenario.yaml: roles.rollout.engine.gpu_mem_util: unknown key"]


def test_unknown_role_has_no_noise_below_it(base):
    base["roles"]["actr"] = {"pool": "gen"}
    assert lines(base) == [
        "scenario.yaml: roles.actr: unknown key (expected one of actor, rollout, reference, critic, reward): "
        "did you mean actor?"
    ]


def test_wrong_types(base):
    base["steps"] = "abc"
    base["cluster"]["pools"]["gen"]["nodes"] = 1.5
    base["roles"]["rollout"]["engine"]["chunked_prefill"] = "maybe"
    base["cluster"]["pools"]["gen"]["hardware"] = 3
    assert lines(base) == [
        "scenario.yaml: steps: expected an integer, got 'abc'",
        "scenario.yaml: cluster.pools.gen.hardware: expected a string, got 3",
        "scenario.yaml: cluster.pools.gen.nodes: expected an integer, got 1.5",
        "scenario.yaml: roles.rollout.engine.chunked_prefill: expected true or false, got 'maybe'",
    ]


def test_section_of_wrong_type(base):
    base["roles"]["rollout"]["parallel"] = 4
    assert lines(base) == ["scenario.yaml: roles.rollout.parallel: expected a mapping, got 4"]


def test_zero_and_negative_sizes(base):
    base["cluster"]["pools"]["gen"]["nodes"] = 0
    base["roles"]["rollout"]["gpus"] = -3
    base["roles"]["rollout"]["engine"]["gpu_memory_utilization"] = 1.5
    base["workload"]["prompt_length"]["value"] = 0
    assert lines(base) == [
        "scenario.yaml: cluster.pools.gen.nodes: must be > 0, got 0",
        "scenario.yaml: roles.rollout.gpus: must be > 0, got -3",
        "scenario.yaml: roles.rollout.engine.gpu_memory_utilization: must be <= 1, got 1.5",
        "scenario.yaml: workload.prompt_length.value: must be > 0, got 0",
    ]


def test_missing_and_empty_sections(base):
    del base["workload"]
    base["models"] = {}
    assert lines(base) == ["scenario.yaml: models: must not be empty", "scenario.yaml: workload: required"]


def test_literal_choice(base):
    base["algorithm"]["kind"] = "ppo2"
    assert lines(base) == [
        "scenario.yaml: algorithm.kind: must be one of generate, ppo, grpo, dapo, remax, rloo, got 'ppo2': did you "
        "mean ppo?"
    ]


def test_discriminator_tag_stripped_from_path(base):
    base["workload"]["response_length"]["sigma"] = -1
    base["workload"]["response_length"]["mu"] = 1
    assert lines(base) == [
        "scenario.yaml: workload.response_length.sigma: must be > 0, got -1",
        "scenario.yaml: workload.response_length.mu: unknown key",
    ]


def test_invalid_and_missing_discriminator(base):
    base["workload"]["response_length"] = {"kind": "gauss", "mean": 3}
    base["workload"]["prompt_length"] = {"value": 3}
    assert lines(base) == [
        "scenario.yaml: workload.prompt_length: kind required (one of fixed, uniform, lognormal, empirical)",
        "scenario.yaml: workload.response_length: kind must be one of fixed, uniform, lognormal, empirical, "
        "got 'gauss'",
    ]


def test_model_validator_message_is_kept(base):
    base["workload"]["response_length"] = {"kind": "uniform", "min": 10, "max": 5}
    assert lines(base) == ["scenario.yaml: workload.response_length: min (10) must be <= max (5)"]


def test_unknown_model_preset(base):
    base["models"]["policy"]["preset"] = "gpt-5"
    assert lines(base) == [
        f"scenario.yaml: models.policy: unknown model preset 'gpt-5' (known: {', '.join(preset_names())})"
    ]


def test_several_schema_problems_reported_together(base):
    base["seed"] = -1
    base["extra"] = True
    base["roles"]["rollout"]["parallel"]["tp"] = "two"
    base["schedule"]["dispatch"] = "random"
    assert lines(base) == [
        "scenario.yaml: seed: must be >= 0, got -1",
        "scenario.yaml: roles.rollout.parallel.tp: expected an integer, got 'two'",
        "scenario.yaml: schedule.dispatch: must be one of round-robin, chunked, least-loaded, got 'random'",
        "scenario.yaml: extra: unknown key",
    ]


def test_top_level_not_a_mapping():
    assert lines([1, 2]) == ["scenario.yaml: expected a mapping at the top level, got a list"]


# ---------------------------------------------------------------- semantic checks


def test_tp_must_divide_gpus_per_node(base):
    base["roles"]["rollout"]["parallel"]["tp"] = 3
    assert lines(base) == ["scenario.yaml: roles.rollout.parallel.tp: must divide gpus_per_node (8), got 3"]


def test_role_asks_more_gpus_than_pool(base):
    base["roles"]["rollout"]["gpus"] = 32
    assert lines(base) == ["scenario.yaml: roles.rollout.gpus: asks 32 GPUs but pool 'gen' has 16"]


def test_replicas_must_tile_the_role(base):
    base["roles"]["rollout"].update(gpus=12, parallel={"tp": 8})
    assert lines(base) == [
        "scenario.yaml: roles.rollout.parallel: tp × pp = 8 must divide the role's 12 GPUs"
    ]


def test_explicit_dp_must_match(base):
    base["roles"]["rollout"]["parallel"].update(tp=4, dp=2)
    assert lines(base) == [
        "scenario.yaml: roles.rollout.parallel.dp: tp × pp × dp = 4 × 1 × 2 = 8 must equal the role's 16 GPUs"
    ]


def test_unknown_hardware_profile(base):
    base["cluster"]["pools"]["gen"]["hardware"] = "h1000"
    assert lines(base) == [
        "scenario.yaml: cluster.pools.gen.hardware: unknown hardware profile 'h1000' "
        f"(known: {', '.join(available_profiles())})"
    ]


def test_unknown_pool_and_model_references(base):
    base["roles"]["rollout"].update(pool="train", model="actor")
    assert lines(base) == [
        "scenario.yaml: roles.rollout.pool: unknown pool 'train' (pools: gen)",
        "scenario.yaml: roles.rollout.model: unknown model 'actor' (models: policy)",
    ]


def test_rollout_role_needs_engine_and_must_exist(base):
    base["roles"]["rollout"]["engine"] = None
    assert lines(base) == ["scenario.yaml: roles.rollout.engine: required for the rollout role"]
    base["roles"] = {"actor": {"pool": "gen", "model": "policy"}}
    assert lines(base) == [
        "scenario.yaml: roles.rollout: required (every schedule generates with the rollout role)"
    ]


def test_mini_batches_must_divide_samples(base):
    base["algorithm"]["mini_batches"] = 3
    assert lines(base) == [
        "scenario.yaml: algorithm.mini_batches: must divide prompts_per_step × samples_per_prompt "
        "(8 × 4 = 32), got 3"
    ]


def test_several_semantic_problems_reported_together(base):
    base["cluster"]["pools"]["train"] = {"hardware": "tpu-v9", "nodes": 1}
    base["roles"]["rollout"]["parallel"]["tp"] = 3
    base["roles"]["actor"] = {"pool": "train", "model": "policy", "gpus": 16}
    base["roles"]["reference"] = {"pool": "nowhere", "model": "policy"}
    assert lines(base) == [
        "scenario.yaml: cluster.pools.train.hardware: unknown hardware profile 'tpu-v9' "
        f"(known: {', '.join(available_profiles())})",
        "scenario.yaml: roles.rollout.parallel.tp: must divide gpus_per_node (8), got 3",
        "scenario.yaml: roles.actor.gpus: asks 16 GPUs but pool 'train' has 8",
        "scenario.yaml: roles.reference.pool: unknown pool 'nowhere' (pools: gen, train)",
    ]


def test_model_does_not_fit_rollout_engine():
    needs_profile("l40s")
    data = copy.deepcopy(BASE)
    data["cluster"]["pools"]["gen"]["hardware"] = "l40s"
    data["models"]["policy"]["preset"] = "llama-2-70b"
    data["roles"]["rollout"]["parallel"]["tp"] = 1
    hbm = load_profile("l40s").hbm_gb
    assert lines(data) == [
        "scenario.yaml: roles.rollout.parallel.tp: model does not fit: weights 138.0 GB per engine "
        f"+ reserve 1.0 GB > usable {0.5 * hbm:.1f} GB (0.5 × {hbm:g} GB × 1 GPU)"
    ]


def test_kv_cache_must_hold_one_sequence(base):
    base["roles"]["rollout"]["parallel"]["tp"] = 1
    base["roles"]["rollout"]["engine"]["gpu_memory_utilization"] = 0.22
    base["workload"]["response_length"] = {"kind": "fixed", "value": 32768}
    assert lines(base) == [
        "scenario.yaml: roles.rollout.parallel.tp: KV cache holds 23,881 tokens per engine, less than one "
        "sequence of 33280 tokens (max prompt 512 + max response 32768); usable 17.6 GB "
        "(0.22 × 80 GB × 1 GPU), weights 15.2 GB"
    ]


def test_training_and_forward_roles_must_fit(base):
    from rlsim.sim.costs.memory import forward_memory_per_gpu, training_memory_per_gpu

    base["models"]["big"] = {"preset": "llama-2-70b"}
    base["roles"]["actor"] = {"pool": "gen", "model": "big", "gpus": 8, "parallel": {"tp": 8}}
    base["roles"]["reference"] = {"pool": "gen", "model": "big", "gpus": 8}
    scn_model = ModelSpec.model_validate({"preset": "llama-2-70b"})
    hw = load_profile("h100-sxm")
    # A micro-batch holds ppo_max_token_len_per_gpu (16384 by default) tokens under dynamic batching.
    train = training_memory_per_gpu(scn_model, hw, 8, 1, 1, 16384)
    fwd = forward_memory_per_gpu(scn_model, hw, 1, 1, 16384)
    assert not train.fits and not fwd.fits
    got = lines(base)
    assert len(got) == 2
    # the training role's line ends with what fits: more GPUs (data parallel) shard a 70B model's states
    assert got[0].startswith(f"scenario.yaml: roles.actor: does not fit: {train.describe()}; fits with ")
    assert "GPUs for this role (data parallel" in got[0]
    assert got[1] == f"scenario.yaml: roles.reference: does not fit: {fwd.describe()}; fits with parallel.tp=2"
    assert "> 80.0 GB" in train.describe()


def test_empirical_csv_problems(base, tmp_path):
    (tmp_path / "bad.csv").write_text("length\n12\nabc\n-4\n")
    (tmp_path / "ok.csv").write_text("tokens\n12\n")
    base["workload"]["prompt_length"] = {"kind": "empirical", "path": "missing.csv"}
    base["workload"]["response_length"] = {"kind": "empirical", "path": "bad.csv"}
    bad = tmp_path / "bad.csv"
    assert lines(base, base_dir=tmp_path) == [
        f"scenario.yaml: workload.prompt_length.path: file not found: {tmp_path / 'missing.csv'}",
        f"scenario.yaml: workload.response_length.column: {bad} line 3: expected a positive integer "
        "in column 'length', got 'abc' (2 bad values)",
    ]
    base["workload"]["response_length"]["path"] = "ok.csv"
    base["workload"]["response_length"]["column"] = "tokens"
    assert lines(base, ["workload.prompt_length.path=ok.csv"], base_dir=tmp_path) == [
        f"scenario.yaml: workload.prompt_length.column: no column 'length' in {tmp_path / 'ok.csv'} "
        "(columns: tokens)"
    ]
    ovs = ["workload.prompt_length.path=ok.csv", "workload.prompt_length.column=tokens"]
    scn = parse_scenario(base, SRC, ovs, base_dir=tmp_path)
    assert scn.workload.prompt_length.path == str(tmp_path / "ok.csv")


# ---------------------------------------------------------------- overrides gone wrong


def test_override_path_that_does_not_exist(base):
    assert lines(base, ["roles.rollout.engine.gpu_util=0.9", "cluster.pool.gen.nodes=2"]) == [
        "scenario.yaml: --set cluster.pool.gen.nodes=2: cluster.pool: unknown key: did you mean pools?",
        "scenario.yaml: --set roles.rollout.engine.gpu_util=0.9: roles.rollout.engine.gpu_util: unknown key",
    ]


def test_override_mapping_with_unknown_key(base):
    assert lines(base, ["roles.rollout.engine={max_seqs: 4}"]) == [
        "scenario.yaml: --set roles.rollout.engine={max_seqs: 4}: roles.rollout.engine.max_seqs: unknown key: did you "
        "mean max_num_seqs?"
    ]


def test_file_typo_is_not_blamed_on_an_override(base):
    base["roles"]["rollout"]["engine"]["typo"] = 1
    assert lines(base, ["roles.rollout.engine.max_num_seqs=4"]) == [
        "scenario.yaml: roles.rollout.engine.typo: unknown key"
    ]


def test_override_into_a_scalar(base):
    assert lines(base, ["steps.x=1"]) == ["scenario.yaml: --set steps.x=1: steps is 3, not a mapping"]
    assert lines(base, ["cluster.pools.gen.hardware.name=x"]) == [
        "scenario.yaml: --set cluster.pools.gen.hardware.name=x: cluster.pools.gen.hardware is 'h100-sxm', "
        "not a mapping"
    ]


def test_malformed_overrides(base):
    assert lines(base, ["steps", "=2", "roles..tp=2", "steps={a"]) == [
        "scenario.yaml: --set steps: expected dotted.path=value",
        "scenario.yaml: --set =2: expected dotted.path=value",
        "scenario.yaml: --set roles..tp=2: empty element in path 'roles..tp'",
        "scenario.yaml: --set steps={a: cannot parse value: invalid YAML at line 1, column 3: "
        "expected ',' or '}', but got '<stream end>' (while parsing a flow mapping)",
    ]


def test_override_value_errors_keep_the_schema_path(base):
    assert lines(base, ["steps=abc", "roles.rollout.parallel.tp=3"]) == [
        "scenario.yaml: steps: expected an integer, got 'abc'",
    ]


# ---------------------------------------------------------------- files


def test_malformed_yaml_file(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("steps: 3\nroles: [1, 2\nseed: 1\n")
    assert load_lines(path) == [
        "FILE: invalid YAML at line 3, column 5: expected ',' or ']', but got ':' "
        "(while parsing a flow sequence)"
    ]


def test_yaml_python_tags_are_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text('x: !!python/object/apply:os.system ["echo pwned"]\n')
    assert load_lines(path) == [
        "FILE: invalid YAML at line 1, column 4: could not determine a constructor for the tag "
        "'tag:yaml.org,2002:python/object/apply:os.system'"
    ]


def test_duplicate_keys_are_refused(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("steps: 3\nseed: 1\nsteps: 4\n")
    assert load_lines(path) == ["FILE: steps: duplicate key (lines 1 and 3)"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- 1\n- 2\n", "expected a mapping at the top level, got a list"),
        ("just a string\n", "expected a mapping at the top level, got 'just a string'"),
        ("# nothing\n", "empty file, expected a scenario mapping"),
    ],
)
def test_file_that_is_not_a_mapping(tmp_path, text, message):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    assert load_lines(path) == [f"FILE: {message}"]


def test_missing_file(tmp_path):
    assert load_lines(tmp_path / "nope.yaml") == ["FILE: file not found"]


def test_problem_line_format():
    assert Problem("a.b", "bad").line("f.yaml") == "f.yaml: a.b: bad"
    assert Problem("", "bad").line("f.yaml") == "f.yaml: bad"


def test_hardware_yaml_path_is_relative_to_the_scenario_file(base, tmp_path):
    profile = yaml.safe_load((profiles_dir() / "h100-sxm.yaml").read_text())
    profile["name"] = "my-gpu"
    (tmp_path / "hw").mkdir()
    (tmp_path / "hw" / "my-gpu.yaml").write_text(yaml.safe_dump(profile))
    base["cluster"]["pools"]["gen"]["hardware"] = "hw/my-gpu.yaml"
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base))
    scn = load_scenario(path)
    assert scn.cluster.pools["gen"].hardware == str(tmp_path / "hw" / "my-gpu.yaml")


# ---------------------------------------------------------------- robustness: never a traceback


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
        out.append((*prefix, "new_key"))
    return out


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 70000),
    st.floats(-2, 2, allow_nan=False),
    st.text(max_size=8),
    st.sampled_from(["fixed", "lognormal", "empirical", "gen", "policy", "h100-sxm", "rollout"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.sampled_from(["kind", "value", "tp", "pool", "x"]), st.integers(-1, 9), max_size=2),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_paths(BASE)), _VALUES), min_size=1, max_size=3))
def test_any_mutation_is_valid_or_a_clean_scenario_error(mutations):
    data = copy.deepcopy(BASE)
    for path, value in mutations:
        node = data
        for key in path[:-1]:
            if not isinstance(node, dict):
                break
            node = node.setdefault(key, {})
        else:
            if isinstance(node, dict):
                node[path[-1]] = value
    try:
        parse_scenario(data, SRC)
    except ScenarioError as exc:
        assert exc.lines() and all(line.startswith("scenario.yaml: ") for line in exc.lines())
        assert all("\n" not in line for line in exc.lines())


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(alphabet="abcdelmnoprstuw.=[]{}:,0123456789 -_'\"", max_size=20), max_size=3))
def test_any_override_is_applied_or_a_clean_scenario_error(overrides):
    try:
        parse_scenario(copy.deepcopy(BASE), SRC, overrides)
    except ScenarioError as exc:
        assert all(line.startswith("scenario.yaml: ") for line in exc.lines())
