"""`rlsim import roll` and `rlsim import areal`: ROLL fixtures (device mappings, judge, async, agentic),
AReaL's real default config (the PPOConfig dataclass defaults of areal 1.0.4 from the package registry,
dumped as an AReaL run dumps its config), AReaL fixtures in the 1.0 and 0.x layouts, and bad input."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from import_helpers import assert_complete, error_lines, fetch_wheel, refused_in_one_line
from typer.testing import CliRunner

from rlsim.sim.scenario.errors import ScenarioError
from rlsim.tools.cli import app
from rlsim.tools.importers.areal_alloc import parse_allocation
from rlsim.tools.importers.command import run_import
from rlsim.tools.importers.roll_layout import parse_device_mapping

FIXTURES = Path(__file__).parent / "fixtures" / "import"
ROLL_JUDGE = FIXTURES / "roll" / "rlvr" / "rlvr_config.yaml"
ROLL_ASYNC = FIXTURES / "roll" / "rlvr" / "rlvr_config_async.yaml"
ROLL_AGENTIC = FIXTURES / "roll" / "agentic" / "agentic_sokoban.yaml"
AREAL_GSM8K = FIXTURES / "areal" / "gsm8k_grpo.yaml"
AREAL_BOBA = FIXTURES / "areal" / "boba_v03.yaml"
runner = CliRunner()


# ---------------------------------------------------------------- ROLL


@pytest.mark.parametrize(("text", "gpus"), [
    ("list(range(0,8))", list(range(8))),
    ("list(range(8, 16))", list(range(8, 16))),
    ("list(range(0,16,2))", list(range(0, 16, 2))),
    ("list(range(4))", [0, 1, 2, 3]),
    ("[0, 1, 2]", [0, 1, 2]),
    ("list(range(0,2))+list(range(4,6))", [0, 1, 4, 5]),
    ([3, 4], [3, 4]),
])
def test_device_mapping_strings_are_parsed_without_eval(text, gpus):
    assert parse_device_mapping(text) == gpus


@pytest.mark.parametrize("text", ["__import__('os').getcwd()", "list(range(0,8)) * 2", "range(0,8)", "list(range(8,0))",
                                  "[0, -1]", True, "[]"])
def test_device_mapping_refuses_anything_else(text):
    with pytest.raises(ValueError):
        parse_device_mapping(text)


def test_roll_colocated_rlvr_with_a_judge_keeps_rolls_gpu_ranges(tmp_path):
    imported = run_import("roll", ROLL_JUDGE, [])
    scn = imported.scenario
    assert scn.schedule.kind == "hybridflow" and scn.schedule.placement == "custom"
    assert scn.schedule.judge_scoring == "sample"
    assert scn.role_gpu_range("actor") == (0, 16) and scn.role_gpu_range("rollout") == (0, 12)
    assert scn.role_gpu_range("reward") == (12, 16) and scn.roles["reward"].engine is not None
    assert (scn.roles["actor"].parallel.tp, scn.roles["actor"].train.sharding) == (2, "megatron")
    # 64 x 8 samples; an update takes 1 x 32 x (16 / TP 2) = 256 samples -> 2 updates
    assert (scn.algorithm.prompts_per_step, scn.algorithm.samples_per_prompt, scn.algorithm.mini_batches) == (64, 8, 2)
    assert scn.algorithm.judge_output_tokens == 100 and scn.algorithm.rule_reward_workers == 8
    assert "deepspeed_zero3.zero_optimization.stage" in imported.ledger.ignored  # composed from the defaults list
    assert_complete(imported.ledger)


@pytest.mark.slow
def test_roll_async_puts_generation_on_its_own_pool_and_runs(tmp_path):
    out = tmp_path / "roll.yaml"
    res = runner.invoke(app, ["import", "roll", str(ROLL_ASYNC), "--out", str(out), "--set",
                              "workload.response_length.mean=600"])
    assert res.exit_code == 0, res.output
    scn = yaml.safe_load(out.read_text())
    assert scn["schedule"] == {"kind": "roll", "async_generation_ratio": 1}
    assert scn["cluster"]["pools"]["gen"]["nodes"] * scn["cluster"]["pools"]["gen"]["gpus_per_node"] == 8
    assert scn["roles"]["rollout"]["parallel"]["tp"] == 2  # num_gpus_per_worker
    assert scn["roles"]["actor"]["train"]["sharding"] == "fsdp"  # DeepSpeed ZeRO-3 via ${deepspeed_zero3}
    assert scn["roles"]["rollout"]["engine"]["gpu_memory_utilization"] == 0.8  # SGLang mem_fraction_static
    run = runner.invoke(app, ["run", str(out), "--set", "steps=1", "--out", str(tmp_path / "run"), "--no-plots",
                              "-q"])
    assert run.exit_code == 0, run.output


def test_roll_agentic_becomes_multi_turn_trajectories():
    imported = run_import("roll", ROLL_AGENTIC, [])
    scn = imported.scenario
    assert (scn.algorithm.prompts_per_step, scn.algorithm.samples_per_prompt) == (32, 8)
    assert scn.workload.agent.turns.max == 10 and scn.workload.agent.tokens_per_turn.max == 128
    assert scn.workload.agent.max_context_tokens == 8192
    assert scn.environments.pools["envs"].concurrency == 256
    assert any("environment step latency" in a.what for a in imported.ledger.assumed)
    assert_complete(imported.ledger)


@pytest.mark.parametrize(("overrides", "where", "what"), [
    (["actor_infer.device_mapping=[0,2,4]"], "actor_infer.device_mapping", "not one contiguous run"),
    (["actor_infer.device_mapping=list(range(0,8))", "+async_generation_ratio=1"], "async_generation_ratio",
     "needs actor_infer on GPUs of its own"),
    (["actor_train.training_args.gradient_accumulation_steps=3"], "gradient_accumulation_steps",
     "does not divide"),
    (["actor_infer.strategy_args.strategy_name=trtllm"], "strategy_name", "unknown generation strategy"),
    (["actor_train.device_mapping=exec('x')"], "actor_train.device_mapping", "cannot read"),
])
def test_roll_bad_values_exit_2_with_one_line_each(overrides, where, what):
    line = refused_in_one_line(runner, app, "roll", ROLL_JUDGE, overrides)
    assert where in line and what in line, line


def test_a_verl_config_given_to_roll_is_named_as_verl():
    res = runner.invoke(app, ["import", "roll", str(FIXTURES / "verl" / "dapo_run_dump.yaml")])
    assert res.exit_code == 2
    assert error_lines(res) == [f"{FIXTURES / 'verl' / 'dapo_run_dump.yaml'}: this is a verl config, not roll: "
                                "use `rlsim import verl`"]


# ---------------------------------------------------------------- AReaL allocation strings


@pytest.mark.parametrize(("text", "expect"), [
    ("sglang:d4t2+fsdp:d8", [("sglang", 8, 2, 1, 0), ("fsdp", 8, 1, 1, 1)]),
    ("sglang.d64p1m1+d32p2m1", [("sglang", 64, 1, 1, 0), ("megatron", 64, 1, 2, 1)]),
    ("vllm[rollout]:d2+megatron[actor]:d2t2p2", [("vllm", 2, 1, 1, 0), ("megatron", 8, 2, 2, 1)]),
    ("sglang:d8|fsdp:d8", [("sglang", 8, 1, 1, 0), ("fsdp", 8, 1, 1, 0)]),
    ("sglang[r]:d2+fsdp[a]:d4|fsdp[c]:d4", [("sglang", 2, 1, 1, 0), ("fsdp", 4, 1, 1, 1), ("fsdp", 4, 1, 1, 1)]),
])
def test_areal_allocation_both_syntaxes(text, expect):
    got = [(c.backend, c.gpus, c.tp, c.pp, c.group) for c in parse_allocation(text)]
    assert got == expect


@pytest.mark.parametrize("text", ["sglang.d4+fsdp.d4", "tensorrt:d4", "sglang:d4x2", "fsdp:d4d2",
                                  "megatron:(attn:d1p12t4|ffn:d1p12e4)", "d4x2"])
def test_areal_allocation_errors(text):
    with pytest.raises(ValueError):
        parse_allocation(text)


# ---------------------------------------------------------------- AReaL configs


def _areal_defaults(cli_args: Path, cls: str = "PPOConfig") -> dict:
    """The dataclass defaults of AReaL's experiment config, as `save_config` dumps them (asdict), read
    from the source with `ast` (importing areal needs torch, hydra, uvloop ...)."""
    classes = {n.name: n for n in ast.parse(cli_args.read_text()).body if isinstance(n, ast.ClassDef)}

    def value(node):
        if isinstance(node, ast.Name):
            if node.id in ("MISSING",):
                return "???"
            if node.id in classes:
                return build(node.id, {})
            return {"list": [], "dict": {}}.get(node.id, node.id)
        if isinstance(node, ast.Lambda):
            return value(node.body)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in classes:
            return build(node.func.id, {k.arg: value(k.value) for k in node.keywords})
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("int", "float"):
            return {"int": int, "float": float}[node.func.id](value(node.args[0]))
        if isinstance(node, ast.Tuple | ast.List):
            return [value(e) for e in node.elts]
        if isinstance(node, ast.Attribute):
            return node.attr  # enum members: their names equal their values in cli_args.py
        try:
            return ast.literal_eval(node)
        except ValueError:
            return ast.unparse(node)

    def build(name: str, given: dict) -> dict:
        node, out = classes[name], {}
        for base in node.bases:
            if isinstance(base, ast.Name) and base.id in classes:
                out.update(build(base.id, {}))
        for stmt in node.body:
            if not isinstance(stmt, ast.AnnAssign) or "ClassVar" in ast.unparse(stmt.annotation):
                continue
            v = stmt.value
            if isinstance(v, ast.Call) and getattr(v.func, "id", "") == "field":
                kw = {k.arg: k.value for k in v.keywords}
                out[stmt.target.id] = value(kw["default"]) if "default" in kw else \
                    value(kw["default_factory"]) if "default_factory" in kw else "???"
            else:
                out[stmt.target.id] = value(v) if v is not None else "???"
        out.update(given)
        return out

    return build(cls, {})


@pytest.fixture(scope="session")
def areal_default_dump(tmp_path_factory) -> Path:
    root = fetch_wheel("areal", "1.0.4")
    data = _areal_defaults(root / "areal" / "api" / "cli_args.py")
    path = tmp_path_factory.mktemp("areal") / "areal_1.0.4_defaults.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_areal_default_dump_needs_the_engines_named(areal_default_dump):
    """AReaL's own defaults leave both backends MISSING (???): refused, one line per missing engine."""
    res = runner.invoke(app, ["import", "areal", str(areal_default_dump)])
    assert res.exit_code == 2
    lines = error_lines(res)
    assert len(lines) == 2 and "rollout.backend: no rollout engine" in lines[0] and "actor.backend" in lines[1]


def test_areal_default_dump_with_backends_validates_runs_and_is_complete(areal_default_dump, tmp_path):
    overrides = ["rollout.backend=sglang:d4", "actor.backend=fsdp:d4", "train_dataset.batch_size=32",
                 "rollout.consumer_batch_size=32", "gconfig.n_samples=4", "gconfig.max_new_tokens=2048",
                 "actor.gradient_checkpointing=true"]
    out = tmp_path / "areal.yaml"
    res = runner.invoke(app, ["import", "areal", str(areal_default_dump), *overrides, "--out", str(out)])
    assert res.exit_code == 0, res.output
    scn = yaml.safe_load(out.read_text())
    assert scn["schedule"]["kind"] == "fully-async" and scn["schedule"]["max_head_offpolicyness"] == 0
    assert scn["algorithm"]["mini_batches"] == 4  # actor.ppo_n_minibatches default
    assert scn["roles"]["rollout"]["engine"]["gpu_memory_utilization"] == 0.9  # sglang.mem_fraction_static
    run = runner.invoke(app, ["run", str(out), "--set", "steps=1", "--out", str(tmp_path / "run"), "--no-plots",
                              "-q"])
    assert run.exit_code == 0, run.output
    imported = run_import("areal", areal_default_dump, overrides)
    assert_complete(imported.ledger)
    assert len(imported.ledger.leaves) > 300


def test_areal_1_0_per_engine_backends_and_colocated_ref():
    imported = run_import("areal", AREAL_GSM8K, [])
    scn = imported.scenario
    assert scn.schedule.kind == "fully-async" and scn.schedule.max_head_offpolicyness == 2
    assert scn.schedule.max_concurrent_rollouts == 256 and scn.schedule.recompute_logprob
    assert scn.roles["rollout"].pool == "gen" and scn.roles["reference"].pool == scn.roles["actor"].pool == "train"
    assert scn.models["policy"].hidden == 1536  # Qwen2.5-1.5B-Instruct
    assert (scn.algorithm.prompts_per_step, scn.algorithm.samples_per_prompt) == (256, 4)
    assert_complete(imported.ledger)


def test_areal_old_layout_and_allocation():
    imported = run_import("areal", AREAL_BOBA, [])
    scn = imported.scenario
    assert scn.cluster.pools["gen"].gpus == 64 and scn.cluster.pools["train"].gpus == 64
    assert (scn.roles["actor"].parallel.pp, scn.roles["actor"].train.sharding) == (2, "megatron")
    assert scn.workload.response_length.max == 27648 and scn.algorithm.mini_batches == 4
    assert any("old allocation" in a.what for a in imported.ledger.assumed)
    assert_complete(imported.ledger)


@pytest.mark.parametrize(("overrides", "where", "what"), [
    (["rollout.consumer_batch_size=64"], "rollout.consumer_batch_size", "set them equal"),
    (["rollout.backend=sglang:d8", "cluster.n_gpus_per_node=4", "cluster.n_nodes=2"], "cluster.n_nodes",
     "needs 12 GPUs"),
    (["rollout.backend=fsdp:d4"], "rollout.backend", "training backend"),
    (["rollout.backend=sglang:d4x"], "rollout.backend", "cannot read"),
    (["actor.ppo_n_minibatches=3"], "actor.ppo_n_minibatches", "do not divide"),
])
def test_areal_bad_values_exit_2_with_one_line_each(overrides, where, what):
    line = refused_in_one_line(runner, app, "areal", AREAL_GSM8K, overrides)
    assert where in line and what in line, line


def test_roll_config_given_to_areal_is_named():
    with pytest.raises(ScenarioError, match="this is a roll config, not areal"):
        run_import("areal", ROLL_JUDGE, [])


def test_the_areal_vocabulary_is_areals_own_field_names(areal_default_dump):
    """The shipped name list is AReaL 1.0.4's (regenerated here); its default config has no unknown key."""
    from import_helpers import areal_vocabulary

    from rlsim.tools.importers.vocabulary import _FOLDER

    shipped = [ln for ln in (_FOLDER / "areal.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    assert shipped == areal_vocabulary(fetch_wheel("areal", "1.0.4"))
    overrides = ["rollout.backend=sglang:d4", "actor.backend=fsdp:d4", "train_dataset.batch_size=32",
                 "rollout.consumer_batch_size=32", "gconfig.n_samples=4", "gconfig.max_new_tokens=2048",
                 "actor.gradient_checkpointing=true"]
    ledger = run_import("areal", areal_default_dump, overrides).ledger
    assert len(ledger.leaves) > 300 and not ledger.unknown


def test_an_empty_device_mapping_list_names_no_gpu():
    """Found by the 20,000-example fuzz run: `device_mapping: []` crashed the layout with an IndexError."""
    from rlsim.tools.importers.roll_layout import parse_device_mapping

    with pytest.raises(ValueError, match="names no GPU"):
        parse_device_mapping([])
