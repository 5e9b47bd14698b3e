"""`rlsim import nemo-rl` and `rlsim import slime`: NeMo-RL's GRPO recipes (their `defaults:` chain), slime's
launch scripts (flags in bash arrays, a sourced model script, read as text and never run), the schedules each
maps to, and bad input. Fixtures: unmodified copies in tests/fixtures/import/{nemo-rl,slime} (Apache-2.0)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from import_helpers import assert_complete, error_lines
from typer.testing import CliRunner

from rlsim.sim.scenario.errors import ScenarioError
from rlsim.tools.cli import app
from rlsim.tools.importers.command import run_import
from rlsim.tools.importers.hydra import Resolver
from rlsim.tools.importers.nemo_rl import load_nemo_rl_config
from rlsim.tools.importers.slime_script import flags_of, read_script

FIXTURES = Path(__file__).parent / "fixtures" / "import"
NEMO = FIXTURES / "nemo-rl"
FP8 = NEMO / "grpo_math_8B_megatron_fp8.yaml"
SLIME = FIXTURES / "slime"
SLIME_MOE = SLIME / "run-qwen3-30B-A3B.sh"
SLIME_4B = SLIME / "run-qwen3-4B.sh"
ASYNC = ["grpo.async_grpo.enabled=true", "policy.generation.colocated.enabled=false",
         "policy.generation.colocated.resources.gpus_per_node=4"]
runner = CliRunner()


def _assumed(imported) -> str:
    return "\n".join(f"{a.what}: {a.value}" for a in imported.ledger.assumed)


# ---------------------------------------------------------------- NeMo-RL


def test_nemo_rl_defaults_chain_merges_every_file_under_the_recipe():
    config, chain = load_nemo_rl_config(FP8, [])
    assert [p.name for p in chain] == ["grpo_math_8B_megatron_fp8.yaml", "grpo_math_8B_megatron.yaml",
                                       "grpo_math_1B_megatron.yaml", "grpo_math_1B.yaml"]
    assert config["policy"]["generation"]["vllm_cfg"]["gpu_memory_utilization"] == 0.5  # the recipe itself
    assert config["policy"]["megatron_cfg"]["pipeline_model_parallel_size"] == 2  # 8B_megatron
    assert config["policy"]["megatron_cfg"]["fp8_cfg"]["fp8_recipe"] == "blockwise"
    assert config["grpo"]["async_grpo"]["in_flight_weight_updates"] is False  # only in the 1B base
    assert config["policy"]["optimizer"] is None  # a null in 8B_megatron replaces the base's mapping
    assert config["policy"]["sequence_packing"]["train_mb_tokens"] == 4096  # ${mul:4096, 1} (NeMo-RL's resolver)
    assert "defaults" not in config


def test_nemo_rl_fp8_recipe_imports_runs_and_lists_every_key(tmp_path):
    out = tmp_path / "nemo.yaml"
    res = runner.invoke(app, ["import", "nemo-rl", str(FP8), "--out", str(out)])
    assert res.exit_code == 0, res.output
    for heading in ("used (", "ignored (", "assumed ("):
        assert heading in res.stdout
    assert "policy.megatron_cfg.pipeline_model_parallel_size = 2  ->  roles.actor.parallel.pp" in res.stdout
    assert "FP8 training" in res.stdout  # fp8_cfg: listed, not modelled
    assert "policy.generation.vllm_cfg.precision = fp8  ->  roles.rollout.engine.quantization.weights" in res.stdout
    scn = yaml.safe_load(out.read_text())
    assert scn["schedule"] == {"kind": "hybridflow", "placement": "colocate"}
    assert scn["cluster"]["pools"] == {"main": {"hardware": "h100-sxm", "nodes": 1, "gpus_per_node": 8}}
    assert scn["algorithm"] == {"kind": "grpo", "prompts_per_step": 64, "samples_per_prompt": 32, "epochs": 1,
                                "mini_batches": 4}  # 64 x 32 / train_global_batch_size 512
    assert scn["models"]["policy"] == {"preset": "llama-3.1-8b"}
    assert scn["roles"]["actor"]["parallel"] == {"tp": 1, "pp": 2}
    assert scn["roles"]["actor"]["train"]["sharding"] == "megatron"
    assert "reference" in scn["roles"]  # reference_policy_kl_penalty 0.01
    assert scn["roles"]["rollout"]["engine"]["gpu_memory_utilization"] == 0.5
    assert scn["roles"]["rollout"]["engine"]["quantization"] == {"weights": "fp8"}  # quantised rollout
    run = runner.invoke(app, ["run", str(out), "--set", "steps=1", "--out", str(tmp_path / "run"), "--no-plots",
                              "-q"])
    assert run.exit_code == 0, run.output
    assert (tmp_path / "run" / "summary.json").is_file()

    imported = run_import("nemo-rl", FP8, [])
    assert_complete(imported.ledger)
    assert not imported.ledger.unknown
    assert "prompt cap" in _assumed(imported)  # data.max_input_seq_length is the whole 4096-token budget


@pytest.mark.parametrize(("extra", "expected"), [
    ([], {"in_flight_weight_updates": False, "interrupt": "drain"}),
    (["grpo.async_grpo.in_flight_weight_updates=true"], {"in_flight_weight_updates": True, "interrupt": "keep"}),
    (["grpo.async_grpo.in_flight_weight_updates=true", "grpo.async_grpo.recompute_kv_cache_after_weight_updates=true"],
     {"in_flight_weight_updates": False, "interrupt": "recompute"}),
])
def test_nemo_rl_async_grpo_is_fully_async_with_its_age_bound(extra, expected):
    imported = run_import("nemo-rl", NEMO / "grpo_math_8B.yaml",
                          [*ASYNC, "grpo.async_grpo.max_trajectory_age_steps=2", *extra])
    scn = imported.scenario
    assert scn.schedule.kind == "fully-async"
    assert scn.schedule.max_trajectory_age_steps == 2
    assert scn.schedule.max_head_offpolicyness == 2 and scn.schedule.drop_stale
    assert scn.schedule.in_flight_weight_updates is expected["in_flight_weight_updates"]
    assert scn.schedule.interrupt == expected["interrupt"]
    # one node: generation takes colocated.resources.gpus_per_node of its 8 GPUs, training the rest
    assert scn.role_gpu_range("rollout") == (0, 4) and scn.cluster.pools["gen"].gpus_per_node == 4
    assert scn.cluster.pools["train"].gpus_per_node == 4
    assert scn.roles["actor"].train.sharding == "fsdp"  # grpo_math_8B trains with DTensor
    assert_complete(imported.ledger)


def test_nemo_rl_sync_non_colocated_on_nodes_of_its_own():
    imported = run_import("nemo-rl", FP8, ["cluster.num_nodes=4", "policy.generation.colocated.enabled=false",
                                           "policy.generation.colocated.resources.num_nodes=1"])
    scn = imported.scenario
    assert scn.schedule.kind == "hybridflow" and scn.schedule.placement == "custom"
    assert (scn.cluster.pools["train"].nodes, scn.cluster.pools["gen"].nodes) == (3, 1)
    assert scn.roles["rollout"].pool == "gen" and scn.roles["actor"].pool == "train"


def test_nemo_rl_force_on_policy_ratio_skips_the_old_logprob_pass():
    scn = run_import("nemo-rl", FP8, ["loss_fn.force_on_policy_ratio=true"]).scenario
    assert scn.schedule.recompute_logprob is False


@pytest.mark.parametrize(("overrides", "where", "needle"), [
    (["grpo.async_grpo.enabled=true"], "policy.generation.colocated.enabled", "async GRPO needs generation"),
    (["policy.train_global_batch_size=500"], "policy.train_global_batch_size", "does not divide"),
    (["policy.generation.vllm_cfg.tensor_parallel_size=3"], "policy.generation.vllm_cfg.tensor_parallel_size",
     "does not divide"),
    (["policy.generation.backend=megatron"], "policy.generation.backend", "is not imported"),
])
def test_nemo_rl_bad_recipes_are_one_line_each(overrides, where, needle):
    res = runner.invoke(app, ["import", "nemo-rl", str(FP8), *overrides])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = error_lines(res)
    assert len(lines) == 1 and lines[0].startswith(f"{FP8}: {where}: ") and needle in lines[0], lines


def test_nemo_rl_defaults_loop_and_missing_parent_are_refused(tmp_path):
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text('defaults: "b.yaml"\npolicy: {}\n')
    b.write_text('defaults: "a.yaml"\n')
    with pytest.raises(ScenarioError, match="loops"):
        run_import("nemo-rl", a, [])
    b.write_text('defaults: ["missing.yaml"]\n')
    with pytest.raises(ScenarioError, match="'missing.yaml' .* not found"):
        run_import("nemo-rl", a, [])


def test_resolver_calls_a_registered_function_on_typed_arguments():
    data = {"a": 3, "b": {"c": "${mul:${a}, 4}", "d": "${max:${a}, ${.e}}", "e": 7}}
    out = Resolver(data, "x", {"mul": lambda x, y: x * y, "max": max}).resolve_all()
    assert out["b"]["c"] == 12 and out["b"]["d"] == 7


# ---------------------------------------------------------------- slime


def test_slime_script_arrays_and_sourced_model_are_read_as_text():
    script = read_script(SLIME_MOE)
    assert script.entry == "train.py"
    assert [p.name for p in script.sourced] == ["qwen3-30B-A3B.sh"]
    flags, stray = flags_of(script.args)
    assert not stray
    assert flags["--num-experts"] == 128 and flags["--moe-router-topk"] == 8  # from the sourced MODEL_ARGS
    assert flags["--rotary-base"] == 1000000  # "${MODEL_ARGS_ROTARY_BASE:-1000000}": the default
    assert flags["--eval-prompt-data"] == ["aime", "/root/aime-2024/aime-2024.jsonl"]
    assert "--wandb-project" not in flags  # commented out inside WANDB_ARGS
    assert "$(seq 16 8 256)" in script.unresolved and "${MOE_LAYER_FREQ}" in script.unresolved


def test_slime_moe_script_imports_runs_and_lists_every_flag(tmp_path):
    out = tmp_path / "slime.yaml"
    res = runner.invoke(app, ["import", "slime", str(SLIME_MOE), "--out", str(out)])
    assert res.exit_code == 0, res.output
    for heading in ("used (", "ignored (", "assumed ("):
        assert heading in res.stdout
    assert "--rollout-batch-size = 32  ->  algorithm.prompts_per_step" in res.stdout
    assert "$(seq 16 8 256)" in res.stdout  # what the shell would compute is said, not run
    scn = yaml.safe_load(out.read_text())
    assert scn["schedule"] == {"kind": "hybridflow", "placement": "colocate"}  # --colocate
    assert scn["models"]["policy"]["num_experts"] == 128 and scn["models"]["policy"]["ffn"] == 768
    assert scn["models"]["policy"]["kv_heads"] == 4 and scn["models"]["policy"]["tied_embeddings"] is False
    assert scn["roles"]["actor"]["parallel"] == {"tp": 4, "pp": 1, "ep": 8}
    assert scn["roles"]["actor"]["train"]["ppo_max_token_len_per_gpu"] == 20480
    assert scn["roles"]["actor"]["train"]["param_offload"] is True  # --colocate implies --offload
    assert scn["roles"]["rollout"]["parallel"] == {"tp": 8}
    assert scn["algorithm"]["mini_batches"] == 1  # 32 x 8 / --global-batch-size 256
    run = runner.invoke(app, ["run", str(out), "--set", "steps=1", "--out", str(tmp_path / "run"), "--no-plots",
                              "-q"])
    assert run.exit_code == 0, run.output
    imported = run_import("slime", SLIME_MOE, [])
    assert_complete(imported.ledger)
    assert "--moe-layer-freq" in _assumed(imported)


def test_slime_machine_dependent_gpu_count_is_assumed_then_given():
    imported = run_import("slime", SLIME_4B, [])
    assert "--actor-num-gpus-per-node = ${NUM_GPUS}" in _assumed(imported)
    assert imported.scenario.cluster.pools["main"].gpus_per_node == 8
    given = run_import("slime", SLIME_4B, ["--actor-num-gpus-per-node", "4"]).scenario
    assert given.cluster.pools["main"].gpus_per_node == 4


def _script(tmp_path: Path, entry: str, flags: str) -> Path:
    marker = tmp_path / "ran"
    path = tmp_path / "run.sh"
    path.write_text(f"#!/bin/bash\ntouch {marker}\nSCRIPT_DIR=\"$(cd -- \"$(dirname -- \"${{BASH_SOURCE[0]}}\")\" "
                    "&>/dev/null && pwd)\"\n"
                    f"source \"${{SCRIPT_DIR}}/models/qwen3-4B.sh\"\n"
                    "ARGS=(\n   --rollout-batch-size 16   # prompts\n   --n-samples-per-prompt 8\n"
                    "   --global-batch-size 64\n   --rollout-max-response-len 4096\n)\n"
                    f"python3 {entry} --actor-num-nodes 1 --actor-num-gpus-per-node 8 ${{MODEL_ARGS[@]}} "
                    f"${{ARGS[@]}} {flags}\n")
    (tmp_path / "models").mkdir(exist_ok=True)
    (tmp_path / "models" / "qwen3-4B.sh").write_text((SLIME / "models" / "qwen3-4B.sh").read_text())
    return path


@pytest.mark.parametrize(("entry", "flags", "kind"), [
    ("train.py", "--rollout-num-gpus 8", "hybridflow"),
    ("train_async.py", "--rollout-num-gpus 8", "one-step-off"),
    ("train.py", "--rollout-num-gpus 8 --max-policy-version-lag 2", "fully-async"),
])
def test_slime_disaggregated_schedules(tmp_path, entry, flags, kind):
    path = _script(tmp_path, entry, flags)
    imported = run_import("slime", path, [])
    scn = imported.scenario
    assert not (tmp_path / "ran").exists()  # the script was read, never run
    assert scn.schedule.kind == kind
    assert scn.cluster.pools["gen"].nodes * scn.cluster.pools["gen"].gpus_per_node == 8
    assert scn.roles["rollout"].pool == "gen" and scn.roles["actor"].pool == "train"
    assert scn.algorithm.mini_batches == 2  # 16 x 8 / 64
    if kind == "fully-async":
        assert scn.schedule.max_head_offpolicyness == 2 and scn.schedule.drop_stale
    assert_complete(imported.ledger)


@pytest.mark.parametrize(("entry", "flags", "where", "needle"), [
    ("train_async.py", "--colocate", "--colocate", "needs rollout GPUs of its own"),
    ("train.py", "", "--rollout-num-gpus", "without --colocate"),
    ("train.py", "--colocate --global-batch-size 48", "--global-batch-size", "does not divide"),
    ("train.py", "--colocate --rollout-num-gpus-per-engine 3", "--rollout-num-gpus-per-engine", "do not divide"),
])
def test_slime_bad_scripts_are_one_line_each(tmp_path, entry, flags, where, needle):
    path = _script(tmp_path, entry, flags)
    res = runner.invoke(app, ["import", "slime", str(path)])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = error_lines(res)
    assert len(lines) == 1 and lines[0].startswith(f"{path}: {where}: ") and needle in lines[0], lines


def test_slime_script_without_a_train_command_is_refused(tmp_path):
    path = tmp_path / "x.sh"
    path.write_text("echo hello\n")
    with pytest.raises(ScenarioError, match="not a slime launch script"):
        run_import("slime", path, [])


@pytest.mark.parametrize(("text", "needle"), [
    (b"\x00\xff\xfe", "not UTF-8"),
    (b'A=(\n --x 1\n)\npython3 train.py ${A[@]} "unclosed\n', "cannot be split as shell words"),
    (b"source ./run.sh\npython3 train.py --rollout-batch-size x --colocate\n", "expected an integer"),
])
def test_slime_hostile_scripts_are_one_line(tmp_path, text, needle):
    path = tmp_path / "run.sh"
    path.write_bytes(text)
    res = runner.invoke(app, ["import", "slime", str(path)])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    lines = error_lines(res)
    assert len(lines) == 1 and needle in lines[0], lines
