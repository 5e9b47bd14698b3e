"""`rlsim import verl`: verl 0.9.1's own shipped configs (fetched from the package registry), a
resolved run dump, Hydra-style overrides, and one clear line for every bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from import_helpers import assert_complete, error_lines, fetch_wheel, refused_in_one_line
from typer.testing import CliRunner

from rlsim.sim.model_shapes import resolve_preset
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.tools.cli import app
from rlsim.tools.importers.command import run_import
from rlsim.tools.importers.common import flatten
from rlsim.tools.importers.draft import report_lines
from rlsim.tools.importers.hydra import Composer, Resolver
from rlsim.tools.importers.shapes import preset_for, shape_from_hf_config

FIXTURES = Path(__file__).parent / "fixtures" / "import"
DUMP = FIXTURES / "verl" / "dapo_run_dump.yaml"
runner = CliRunner()


@pytest.fixture(scope="session")
def verl_root() -> Path:
    return fetch_wheel("verl", "0.9.1")


@pytest.fixture(scope="session")
def trainer_config(verl_root) -> Path:
    return verl_root / "verl" / "trainer" / "config"


def _resolved(path: Path, search=()) -> dict:
    return Resolver(Composer(path, list(search)).compose({}), str(path)).resolve_all()


@pytest.mark.parametrize("name", ["ppo_trainer", "ppo_megatron_trainer"])
def test_composer_reproduces_verls_own_generated_config(trainer_config, name):
    """verl ships the Hydra-composed result of each trainer config: ours must match it key for key."""
    ours = flatten(_resolved(trainer_config / f"{name}.yaml"))
    generated = yaml.safe_load((trainer_config / f"_generated_{name}.yaml").read_text())
    theirs = flatten(Resolver(generated, "generated").resolve_all())
    assert set(theirs) <= set(ours)
    assert set(ours) - set(theirs) == {"model_engine"}  # the `_global_` group choice; Hydra's dump drops it
    # PyYAML reads `1e-6` as a string where OmegaConf reads a float: the only values allowed to differ.
    differ = {k for k in theirs if ours[k] != theirs[k]}
    assert all(float(ours[k]) == float(theirs[k]) for k in differ), differ
    assert len(theirs) > 900


@pytest.mark.slow
def test_shipped_default_imports_validates_runs_and_lists_every_key(trainer_config, tmp_path):
    out = tmp_path / "verl_default.yaml"
    res = runner.invoke(app, ["import", "verl", str(trainer_config / "ppo_trainer.yaml"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    for heading in ("used (", "ignored (", "assumed ("):
        assert heading in res.stdout
    assert "actor_rollout_ref.rollout.tensor_model_parallel_size = 2  ->  roles.rollout.parallel.tp" in res.stdout
    scenario = yaml.safe_load(out.read_text())
    assert scenario["algorithm"]["prompts_per_step"] == 1024  # data.train_batch_size
    assert scenario["algorithm"]["mini_batches"] == 4  # 1024 / ppo_mini_batch_size 256
    assert scenario["algorithm"]["kind"] == "ppo" and "critic" in scenario["roles"]  # adv_estimator: gae
    assert scenario["cluster"]["pools"]["main"] == {"hardware": "h100-sxm", "nodes": 1, "gpus_per_node": 8}
    run = runner.invoke(app, ["run", str(out), "--set", "steps=1", "--out", str(tmp_path / "run"), "--no-plots",
                              "-q"])
    assert run.exit_code == 0, run.output
    assert (tmp_path / "run" / "summary.json").is_file()

    imported = run_import("verl", trainer_config / "ppo_trainer.yaml", [])
    assert_complete(imported.ledger)
    assert set(imported.ledger.leaves) == set(flatten(_resolved(trainer_config / "ppo_trainer.yaml")))
    whats = " ".join(a.what for a in imported.ledger.assumed)
    for needed in ("response-length", "GPU model", "rollout engine"):
        assert needed in whats


def test_printed_ignored_list_covers_each_key_under_its_own_reason(trainer_config):
    """The grouped `a.b.*` patterns are complete: each ignored key matches a pattern of its reason only."""
    ledger = run_import("verl", trainer_config / "ppo_trainer.yaml", []).ledger
    patterns: dict[str, list[str]] = {}
    lines = report_lines(ledger)
    ignored = lines[next(i for i, ln in enumerate(lines) if ln.startswith("ignored (")) + 1:]
    assert all(len(ln) <= 80 or "," not in ln.rstrip(",") for ln in ignored)  # wrapped; one long key may overrun
    reason_text, reason = "", None
    for line in ignored:  # "  reason (n):" (possibly wrapped), then its keys on "    a, b, ..." lines
        if line.startswith("    "):
            if reason is None:
                reason = reason_text.strip().rsplit(" (", 1)[0]
                patterns[reason] = []
            patterns[reason] += [p.strip() for p in line.split(",") if p.strip()]
        else:
            reason_text = (reason_text + " " + line.strip()) if reason is None else line.strip()
            reason = None

    def matches(key, pattern):
        return key.startswith(pattern[:-1]) if pattern.endswith("*") else key == pattern

    for key, reason in ledger.ignored.items():
        owners = {r for r, pats in patterns.items() if any(matches(key, p) for p in pats)}
        assert owners == {reason}, (key, owners)


def test_megatron_config_maps_parallel_sizes_offload_and_the_reference(trainer_config):
    imported = run_import("verl", trainer_config / "ppo_megatron_trainer.yaml", [
        "actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2",
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2", "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.megatron.param_offload=true", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.rollout.n=16", "trainer.nnodes=2"])
    roles = imported.scenario.roles
    assert (roles["actor"].parallel.tp, roles["actor"].parallel.pp) == (2, 2)
    assert roles["actor"].train.sharding == "megatron" and roles["actor"].train.param_offload
    assert "reference" in roles and "critic" not in roles
    assert roles["rollout"].engine.kind == "sglang-0.4"
    assert imported.scenario.algorithm.samples_per_prompt == 16
    assert imported.scenario.cluster.pools["main"].nodes == 2
    assert_complete(imported.ledger)


def test_a_rollout_with_pipeline_stages_is_refused_in_one_line(trainer_config):
    line = refused_in_one_line(runner, app, "verl", trainer_config / "ppo_trainer.yaml", [
        "actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.pipeline_model_parallel_size=2"])
    assert "actor_rollout_ref.rollout.pipeline_model_parallel_size: 2: rlsim models an inference engine" in line


def test_one_step_off_recipe_gets_its_own_rollout_pool(verl_root, trainer_config):
    cfg = verl_root / "verl" / "experimental" / "one_step_off_policy" / "config" / "one_step_off_ppo_trainer.yaml"
    imported = run_import("verl", cfg, ["actor_rollout_ref.rollout.name=vllm", "trainer.nnodes=2",
                                        "trainer.n_gpus_per_node=6", "rollout.n_gpus_per_node=4",
                                        "algorithm.adv_estimator=grpo"])
    scn = imported.scenario
    assert scn.schedule.kind == "one-step-off"
    assert scn.cluster.pools["gen"].gpus == 4 and scn.cluster.pools["train"].gpus == 12
    assert scn.roles["rollout"].pool == "gen" and scn.roles["actor"].pool == "train"
    assert imported.ledger.used["rollout.n_gpus_per_node"] == "cluster.pools.gen.gpus_per_node"
    assert_complete(imported.ledger)


def test_fully_async_recipe_maps_verls_staleness_knobs(verl_root):
    cfg = verl_root / "verl" / "experimental" / "fully_async_policy" / "config" / "fully_async_ppo_trainer.yaml"
    imported = run_import("verl", cfg, [
        "actor_rollout_ref.rollout.name=vllm", "data.train_batch_size=0", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.ppo_mini_batch_size=32", "actor_rollout_ref.rollout.n=8",
        "async_training.require_batches=2", "async_training.partial_rollout=false"])
    sched = imported.scenario.schedule
    assert sched.kind == "fully-async" and sched.verl_rule
    assert (sched.staleness_threshold, sched.trigger_parameter_sync_step) == (0.1, 4)
    assert (sched.require_batches, sched.ppo_mini_batch_size) == (2, 32)
    assert sched.interrupt == "drain"  # partial_rollout: false
    assert sched.recompute_logprob is False  # use_rollout_log_probs / bypass_mode
    assert imported.scenario.algorithm.prompts_per_step == 64
    assert "rollout.n" in imported.ledger.ignored  # the recipe's top-level rollout.n is never read by verl
    assert_complete(imported.ledger)


def test_fully_async_with_a_train_batch_size_is_refused_in_one_line(verl_root):
    cfg = verl_root / "verl" / "experimental" / "fully_async_policy" / "config" / "fully_async_ppo_trainer.yaml"
    res = runner.invoke(app, ["import", "verl", str(cfg), "actor_rollout_ref.rollout.name=vllm"])
    assert res.exit_code == 2
    lines = error_lines(res)
    assert len(lines) == 1 and "data.train_batch_size" in lines[0] and "set data.train_batch_size=0" in lines[0]


def test_resolved_run_dump_maps_the_mini_batch_size_to_a_count_and_keeps_dynamic_batching(tmp_path):
    imported = run_import("verl", DUMP, [])
    scn = imported.scenario
    assert (scn.algorithm.prompts_per_step, scn.algorithm.samples_per_prompt) == (512, 16)
    assert scn.algorithm.mini_batches == 16  # 512 prompts / ppo_mini_batch_size 32 prompts
    assert scn.algorithm.kind == "dapo"  # filter_groups.enable
    assert scn.roles["actor"].train.ppo_max_token_len_per_gpu == 24576
    assert scn.roles["actor"].train.param_offload and scn.roles["actor"].train.optimizer_offload
    assert scn.models["policy"].layers == 28  # Qwen2.5-Math-7B matched by name
    assert scn.workload.response_length.max == 20480
    assert imported.ledger.used["actor_rollout_ref.model.path"].startswith("models.policy.preset = qwen2.5-math-7b")
    assert_complete(imported.ledger)


def test_overrides_take_verls_hydra_forms():
    imported = run_import("verl", DUMP, ["actor_rollout_ref.rollout.n=4", "++trainer.nnodes=4",
                                         "+trainer.my_note=hello", "~trainer.logger"])
    assert imported.scenario.algorithm.samples_per_prompt == 4
    assert imported.scenario.cluster.pools["main"].nodes == 4
    assert imported.ledger.unknown["trainer.my_note"] == ""  # not a verl key, and close to none: unknown, no guess
    assert "trainer.logger" not in imported.ledger.leaves


def test_model_config_json_sets_the_shape(tmp_path):
    shape = shape_from_hf_config(FIXTURES / "hf" / "qwen2.5-1.5b-config.json")
    preset = resolve_preset("qwen2.5-1.5b")
    assert {k: shape[k] for k in preset} == preset
    imported = run_import("verl", DUMP, [], model_config=FIXTURES / "hf" / "qwen2.5-1.5b-config.json")
    assert imported.scenario.models["policy"].hidden == 1536
    assert "--model-config" in imported.ledger.used["actor_rollout_ref.model.path"]


@pytest.mark.parametrize(("path", "preset"), [
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
    ("/models/Qwen2.5-Math-7B", "qwen2.5-math-7b"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "deepseek-r1-distill-qwen-1.5b"),
    ("meta-llama/Llama-3.3-70B-Instruct", "llama-3.3-70b"),
    ("~/models/deepseek-llm-7b-chat", None),
    ("Qwen/Qwen2.5-72B", "qwen2.5-72b"),
])
def test_model_path_matches_a_preset_by_name(path, preset):
    assert preset_for(path) == preset


def test_interpolations_resolve_like_omegaconf():
    data = {"a": {"b": 3, "c": "${.b}", "d": "${oc.select:a.missing,${a.b}}", "e": "x-${a.b}-${oc.select:z,null}"},
            "f": "${oc.select:a.b,7}", "g": "${oc.select:nope,[1, 2]}"}
    out = Resolver(data, "t").resolve_all()
    assert out["a"] == {"b": 3, "c": 3, "d": 3, "e": "x-3-null"}
    assert (out["f"], out["g"]) == (3, [1, 2])
    with pytest.raises(ScenarioError, match="refers to itself"):
        Resolver({"x": "${y}", "y": "${x}"}, "t").resolve_all()


def _write(tmp_path, name, text) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("overrides", "where", "what"), [
    (["actor_rollout_ref.rollout.tensor_model_parallel_size=3"], "tensor_model_parallel_size", "does not divide"),
    (["data.train_batch_size=100"], "ppo_mini_batch_size", "does not divide data.train_batch_size (100)"),
    (["actor_rollout_ref.rollout.name=hf"], "actor_rollout_ref.rollout.name", "unknown rollout engine 'hf'"),
    (["trainer.nnodes=0"], "trainer.nnodes", "expected an integer >= 1"),
    (["actor_rollout_ref.actor.strategy=deepspeed"], "actor_rollout_ref.actor.strategy", "unknown strategy"),
    (["trainer.no_such_key=1"], "override trainer.no_such_key=1", "+trainer.no_such_key="),
    (["+trainer.nnodes=2"], "override +trainer.nnodes=2", "already in the config"),
    (["actor_rollout_ref.hybrid_engine=false"], "actor_rollout_ref.hybrid_engine", "separate rollout pool"),
])
def test_bad_values_exit_2_with_one_line_each(overrides, where, what):
    line = refused_in_one_line(runner, app, "verl", DUMP, overrides)
    assert where in line and what in line, line


def test_two_problems_give_two_lines():
    res = runner.invoke(app, ["import", "verl", str(DUMP), "actor_rollout_ref.rollout.name=hf",
                              "data.train_batch_size=100"])
    assert res.exit_code == 2 and len(error_lines(res)) == 2


@pytest.mark.parametrize(("text", "what"), [
    ("rollout_batch_size: 64\nactor_infer: {}\nactor_train: {}\n", "this is a roll config, not verl"),
    ("allocation_mode: sglang:d4+fsdp:d4\ngconfig: {}\n", "this is a areal config, not verl"),
    ("just: a mapping\n", "not a verl config"),
    ("a: [1, 2\n", "invalid YAML"),
    ("- a list\n", "expected a mapping"),
    ("defaults:\n  - no_such_base\n  - _self_\n", "config 'no_such_base' not found"),
])
def test_wrong_or_broken_configs_exit_2_in_one_line(tmp_path, text, what):
    res = runner.invoke(app, ["import", "verl", str(_write(tmp_path, "c.yaml", text))])
    assert res.exit_code == 2, res.output
    lines = error_lines(res)
    assert len(lines) == 1 and what in lines[0], lines


def test_missing_file_exits_2(tmp_path):
    res = runner.invoke(app, ["import", "verl", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2 and error_lines(res) == [f"{tmp_path / 'nope.yaml'}: file not found"]


def test_set_flag_replaces_an_assumption_and_bad_scenarios_are_refused():
    imported = run_import("verl", DUMP, [], sets=["workload.response_length.mean=900"])
    assert imported.scenario.workload.response_length.mean == 900
    with pytest.raises(ScenarioError):
        run_import("verl", DUMP, [], hardware="no-such-gpu")


def test_without_out_the_scenario_goes_to_stdout_and_the_lists_to_stderr():
    res = runner.invoke(app, ["import", "verl", str(DUMP)])
    assert res.exit_code == 0
    assert yaml.safe_load(res.stdout)["algorithm"]["prompts_per_step"] == 512
    assert "used (" in res.stderr and "assumed (" in res.stderr


def test_a_config_group_choice_on_the_command_line_switches_to_megatron(trainer_config):
    imported = run_import("verl", trainer_config / "ppo_trainer.yaml", [
        "model_engine=megatron", "actor_rollout_ref.rollout.name=vllm", "algorithm.adv_estimator=grpo",
        "actor_rollout_ref.actor.megatron.param_offload=true",
        "actor_rollout_ref.actor.megatron.optimizer_offload=true"])
    assert imported.scenario.roles["actor"].train.sharding == "megatron"
    assert "actor_rollout_ref.actor.megatron.tensor_model_parallel_size" in imported.ledger.used


def test_a_misspelt_key_is_unknown_with_a_guess_and_the_default_taken_is_assumed(tmp_path):
    """A typo must not pass for a knob rlsim does not model, nor silently leave the default in place."""
    config = yaml.safe_load(DUMP.read_text())
    rollout = config["actor_rollout_ref"]["rollout"]
    rollout["tensor_model_paralel_size"] = rollout.pop("tensor_model_parallel_size")
    typo = tmp_path / "typo.yaml"
    typo.write_text(yaml.safe_dump(config))
    imported = run_import("verl", typo, [])
    ledger = imported.ledger
    key = "actor_rollout_ref.rollout.tensor_model_paralel_size"
    assert key not in ledger.ignored
    assert ledger.unknown[key] == ": did you mean actor_rollout_ref.rollout.tensor_model_parallel_size?"
    assumed = [a for a in ledger.assumed if a.what.startswith("actor_rollout_ref.rollout.tensor_model_parallel_size")]
    assert len(assumed) == 1 and assumed[0].value == 1 and "roles.rollout.parallel.tp" in assumed[0].what
    assert_complete(ledger)
    report = "\n".join(report_lines(ledger))
    assert f"unknown key {key}: did you mean actor_rollout_ref.rollout.tensor_model_parallel_size?" in report
    assert "# Unknown keys" in imported.text and key in imported.text
    res = runner.invoke(app, ["import", "verl", str(typo)])
    assert res.exit_code == 0 and "did you mean actor_rollout_ref.rollout.tensor_model_parallel_size?" in res.stderr


def test_the_verl_vocabulary_is_verls_own_composed_keys(verl_root, trainer_config):
    """The shipped key list is verl 0.9.1's (regenerated here), and no key of its trainer config is unknown."""
    from import_helpers import verl_vocabulary

    from rlsim.tools.importers.vocabulary import _FOLDER, vocabulary

    shipped = [ln for ln in (_FOLDER / "verl.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert shipped == verl_vocabulary(verl_root)
    vocab = vocabulary("verl")
    keys = flatten(_resolved(trainer_config / "ppo_trainer.yaml"))
    assert keys and all(vocab.check(k) is None for k in keys), [k for k in keys if vocab.check(k) is not None][:5]


def test_import_prints_assumed_keys_first_one_per_line(trainer_config):
    ledger = run_import("verl", trainer_config / "ppo_trainer.yaml", []).ledger
    lines = report_lines(ledger)
    assert lines[0] == f"assumed ({len(ledger.assumed)}):"
    assert all("[set with" in ln for ln in lines[1:1 + len(ledger.assumed)])
    assert lines[1 + len(ledger.assumed)].startswith("used (")
