"""`rlsim plan`: the space schema, layouts, bounds, the search and its evidence, and the findings it reproduces."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pandas as pd
import pytest
import yaml
from typer.testing import CliRunner

from rlsim.sim.paths import shipped_dir
from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import load_scenario
from rlsim.sim.simulate import simulate
from rlsim.tools.cli import app
from rlsim.tools.plan import make_plan, parse_space
from rlsim.tools.plan.candidates import enumerate_candidates
from rlsim.tools.plan.layouts import allocate, partitions
from rlsim.tools.plan.report import latest, plan_table
from rlsim.tools.plan.search import run_search
from rlsim.tools.reproduce import hybridflow_placement as hf

SCENARIOS = shipped_dir("scenarios")
cli = CliRunner()


def hybridflow_space(gpus: int, layouts: list[str]) -> dict:
    return {
        "gpus": [{"hardware": "a100-80gb", "counts": [gpus]}],
        "schedules": [{"kind": "hybridflow", "layouts": layouts}],
        "parallel": {"generation_tp": list(hf.GEN_TP),
                     "training": [{"tp": 8, "pp": pp, "offload": o} for pp, o in hf.TRAIN_CONFIGS]},
        "search": {"rungs": [1]},
    }


def test_space_errors_are_one_line_each_at_their_path():
    with pytest.raises(ScenarioError) as info:
        parse_space({"gpu": [], "schedules": [{"kind": "fully-async", "layouts": ["colocate"]}],
                     "search": {"rungs": [3, 1]}}, "space.yaml")
    lines = info.value.lines()
    assert "space.yaml: gpu: unknown key: did you mean gpus?" in lines
    assert any(line.startswith("space.yaml: schedules[0]:") and "disaggregated" in line for line in lines)
    assert any(line.startswith("space.yaml: search.rungs") or "rungs must be increasing" in line for line in lines)


def test_fifteen_groupings_of_ppo_models_and_standalone_sets_as_the_reproduction():
    groups = partitions(("actor", "critic", "reference", "reward"))
    assert len(groups) == 15 and len({tuple(g) for g in groups}) == 15
    for gpus, sets in hf.STANDALONE_GPUS.items():
        assert allocate(gpus, [4, 2, 1, 1], 8) == list(sets)


@pytest.mark.slow
@pytest.mark.parametrize(("model", "gpus", "layouts"), [("7b", 16, ["partitions"]),
                                                         ("34b", 128, ["colocate", "split", "standalone"])])
def test_hybridflow_plan_recovers_the_reproduction_winner(model, gpus, layouts):
    space = parse_space(hybridflow_space(gpus, layouts))
    cands = enumerate_candidates(hf.base_scenario(model), space)
    result = run_search(cands, "throughput", space.constraints, space.search)
    best = result.candidates[result.ranking[0].candidate]
    expected = hf.winners(hf.run_grid(models=(model,), gpus=(gpus,)))
    assert best.knobs["layout"] == expected["placement"].iloc[0]
    assert result.ranking[0].summary["throughput_tokens_per_s"] == pytest.approx(
        expected["throughput_tokens_per_s"].iloc[0], rel=1e-9)
    if layouts == ["partitions"]:
        assert len({c.knobs["sets"] for c in cands}) == 15
    # The bound is an upper bound on every simulated throughput, and pruning never dropped the winner.
    for e in result.evaluations:
        assert result.candidates[e.candidate].bound["throughput_tokens_per_s"] >= e.summary["throughput_tokens_per_s"]
    assert all("bound" in c.reason for c in cands if c.status == "pruned")


def _small_plan(tmp_path: Path, backend: str, name: str) -> pd.DataFrame:
    data = hybridflow_space(16, ["colocate", "split"])
    data["search"].update(batch=2, top_k=2)  # small batches: the bound prunes after the first ones
    outcome = make_plan(SCENARIOS / "hybridflow" / "ppo-llama-7b.yaml", parse_space(data), tmp_path / name,
                        backend=backend, workers=2)
    return pd.read_csv(outcome.paths["csv"])


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_same_seed_same_plan_serial_and_local(tmp_path):
    serial = _small_plan(tmp_path, "serial", "a")
    again = _small_plan(tmp_path, "serial", "b")
    local = _small_plan(tmp_path, "local", "c")
    pd.testing.assert_frame_equal(serial, again)
    pd.testing.assert_frame_equal(serial, local)
    assert set(serial["status"]) >= {"evaluated", "pruned"}


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install 'rlsim[ray]')")
def test_ray_gives_the_local_plan(tmp_path):
    pd.testing.assert_frame_equal(_small_plan(tmp_path, "ray", "r"), _small_plan(tmp_path, "local", "l"))


def test_outputs_are_evidence_and_recommendations_run(tmp_path):
    space = parse_space(hybridflow_space(16, ["colocate", "split", "standalone"]))
    outcome = make_plan(SCENARIOS / "hybridflow" / "ppo-llama-7b.yaml", space, tmp_path, backend="serial")
    table = pd.read_csv(outcome.paths["csv"])
    assert table.loc[table["status"] != "evaluated", "reason"].notna().all()
    assert outcome.paths["png"].stat().st_size > 10_000
    rec = outcome.paths["rec1"]
    scn = load_scenario(rec)  # what `rlsim run` loads
    assert scn.steps == 2 and sum(p.gpus for p in scn.cluster.pools.values()) == 16
    assert yaml.safe_load(rec.read_text())["schedule"]["placement"] == "colocate"
    text = outcome.paths["md"].read_text()
    assert "bottleneck phase: generate" in text and "would need" in text
    assert "MFU: " in text and "(MBU " in text and "/generate" in text  # busy is not useful, per pool and phase


@pytest.fixture(scope="module")
def areal_plan(tmp_path_factory):
    """AReaL's 1.5B job on the paper's 16-node cluster (docs/sources.md §9), split 50/50 or 75/25."""
    space = parse_space({"gpus": [{"hardware": "h800", "counts": [128]}], "generation_fraction": [0.5, 0.75],
                         "schedules": [{"kind": "fully-async"}], "search": {"rungs": [1], "top_k": 2}})
    outcome = make_plan(SCENARIOS / "async" / "areal-1.5b-fig5c.yaml", space, tmp_path_factory.mktemp("areal"),
                        backend="serial", prune=False)  # both splits simulated exactly, whichever leads
    return {result_label(outcome, e): e.summary for e in latest(outcome.result).values()}


def result_label(outcome, e) -> str:
    k = outcome.result.candidates[e.candidate].knobs
    return f"{k['gen_gpus']}+{k['train_gpus']}"


@pytest.mark.slow
def test_areal_split_candidates_are_the_shipped_setup_resized(areal_plan):
    """75/25 on 128 H800 is the paper's layout itself: the plan simulates it as `rlsim run` would, after the
    warm-up that covers eta = 4's head start (1 + 5 batches)."""
    shipped = simulate(load_scenario(SCENARIOS / "async" / "areal-1.5b-fig5c.yaml", ["steps=1", "warmup_steps=6"]))
    assert areal_plan["96+32"]["throughput_tokens_per_s"] == pytest.approx(
        shipped.summary["throughput_tokens_per_s"], rel=1e-9)
    assert set(areal_plan) == {"64+64", "96+32"}


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason=(
    "with the long-context training costs the 1.5B trainer is ~1.85x slower (docs/long-context.md, AReaL Fig. 5c) "
    "while generation is still ~2.4x too fast in a synchronous long-tail batch; 32 training GPUs then bound the "
    "step. Expected to pass again once per-step host/launch costs slow the generation tail (costs/generation.py)"))
def test_areal_75_25_beats_50_50(areal_plan):
    """AReaL's published layout (96 inference + 32 training GPUs, docs/sources.md §7, §9) beats an even split at
    steady state: 64 generation GPUs bound the step and leave the trainer idle."""
    assert areal_plan["96+32"]["throughput_tokens_per_s"] > 1.05 * areal_plan["64+64"]["throughput_tokens_per_s"]
    assert areal_plan["64+64"]["idle_fraction_by_pool.train"] > 0.3
    assert areal_plan["96+32"]["idle_fraction_by_pool.train"] < 0.05


@pytest.mark.parametrize(("schedule", "ahead"), [
    ({"kind": "hybridflow"}, 0),
    ({"kind": "fully-async", "max_head_offpolicyness": 4}, 5),
    ({"kind": "fully-async"}, 5),  # AReaL's default eta 4
    ({"kind": "fully-async", "max_head_offpolicyness": None}, 4),
    ({"kind": "fully-async", "max_head_offpolicyness": None, "staleness_threshold": 0.5}, 2),
    ({"kind": "one-step-off"}, 1),
    ({"kind": "roll", "async_generation_ratio": 1.5}, 2),
    ({"kind": "fully-async", "bogus": 1}, 0),
    # verl V1 warms up like AReaL's rule (the tools' own copy used to return 0: never warmed up)
    ({"kind": "verl-v1", "max_off_policy_threshold": 1}, 2),
    ({"kind": "verl-v1"}, 5),
    ({"kind": "verl-v1", "max_off_policy_threshold": 1, "parameter_sync_step": 4}, 8),  # 2 versions x 4 steps
    ({"kind": "fully-async", "max_head_offpolicyness": 1, "trigger_parameter_sync_step": 2}, 4),
    ({"kind": "fully-async", "max_trajectory_age_steps": 2, "trigger_parameter_sync_step": 3}, 3),  # trainer steps
    ({"kind": "generation-only"}, 0),
])
def test_async_head_start_sets_the_warmup(schedule, ahead):
    from rlsim.tools.plan.steady_state import head_start_batches, steady_state_warmup

    assert head_start_batches(schedule) == ahead
    assert steady_state_warmup(schedule, 0) == (1 + ahead if ahead else 0)
    assert steady_state_warmup(schedule, 9) == 9


def test_plan_measures_async_layouts_after_the_head_start(tmp_path):
    """Candidates of an async schedule warm up past the backlog generation builds while the trainer waits."""
    base = yaml.safe_load((SCENARIOS / "async" / "areal-1.5b-h800.yaml").read_text())
    space = parse_space({"gpus": [{"hardware": "h800", "counts": [32]}], "generation_fraction": [0.5],
                         "schedules": [{"kind": "fully-async", "set": {"max_head_offpolicyness": [1, 4]}}]})
    warmups = {c.knobs["schedule_set"]: c.data["warmup_steps"] for c in enumerate_candidates(base, space)}
    assert warmups == {"max_head_offpolicyness=1": 3, "max_head_offpolicyness=4": 6}


@pytest.mark.slow
def test_async_generation_gpus_beyond_a_point_only_add_idle(tmp_path):
    space = yaml.safe_load((SCENARIOS / "plan" / "verl-async-generation-gpus.yaml").read_text())
    space["mixes"][0]["generation"]["gpus"] = [8, 16, 32]
    space["search"]["rungs"] = [1]
    outcome = make_plan(SCENARIOS / "async" / "verl-dapo-7b-h20-one-step-off.yaml", parse_space(space), tmp_path,
                        backend="serial")
    text = outcome.paths["md"].read_text()
    # With training priced from operators (update_actor on H20 slower than the old fitted MFU), generation saturates
    # the trainer already at 8 GPUs (it was 16): past that, more generation GPUs only add idle.
    assert "beyond 8 generation GPUs more only add idle time" in text
    table = plan_table(outcome.result).set_index("gen_gpus")
    assert table.loc[32, "idle_fraction_by_pool.gen"] > table.loc[16, "idle_fraction_by_pool.gen"] > \
        table.loc[8, "idle_fraction_by_pool.gen"]


def test_cli_bad_space_exits_2_with_one_line(tmp_path):
    bad = tmp_path / "space.yaml"
    bad.write_text("gpus: [{hardware: h100-sxm, counts: [12]}]\nschedules: [{kind: hybridflow}]\nfoo: 1\n")
    res = cli.invoke(app, ["plan", "quickstart", "--space", str(bad), "--out", str(tmp_path / "o")])
    assert res.exit_code == 2
    assert "foo: unknown key" in res.output and "Traceback" not in res.output
    assert "counts must be whole 8-GPU nodes" in res.output


def test_cli_plan_writes_the_folder(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(hybridflow_space(16, ["colocate", "split"])))
    res = cli.invoke(app, ["plan", "hybridflow/ppo-llama-7b", "--space", str(space), "--out", str(tmp_path / "o"),
                           "--backend", "serial", "--quiet", "--max-gpus", "16"])
    assert res.exit_code == 0, res.output
    assert "a100-80gb x16 colocate tg1" in res.output
    assert (tmp_path / "o" / "plan.csv").is_file() and (tmp_path / "o" / "pareto.png").is_file()


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("optuna") is None,
                    reason="optuna not installed (pip install 'rlsim[plan]')")
def test_large_space_sampled_by_seeded_nsga2_finds_the_winner():
    data = hybridflow_space(16, ["partitions"])
    data["search"].update(exhaustive_limit=10, trials=16, batch=4)
    space = parse_space(data)
    runs = []
    for _ in range(2):
        cands = enumerate_candidates(hf.base_scenario("7b"), space)
        result = run_search(cands, "throughput", space.constraints, space.search, seed=3)
        runs.append([(e.candidate, e.objective) for e in result.evaluations])
    assert result.sampler == "optuna NSGA-II" and runs[0] == runs[1]
    assert len({e.candidate for e in result.evaluations}) <= 16
    assert any(c.status == "not-sampled" for c in cands)
    assert result.candidates[result.ranking[0].candidate].label == "a100-80gb x16 colocate tg1 tp8-pp1-none"


# ---------------------------------------------------------------- pruning, progress, resume, the flag typed


def _pruned_and_exact(tmp_path: Path, layouts: list[str]):
    space = parse_space(hybridflow_space(16, layouts))
    scenario = SCENARIOS / "hybridflow" / "ppo-llama-7b.yaml"
    pruned = make_plan(scenario, space, tmp_path / "pruned", backend="serial").result
    exact = make_plan(scenario, space, tmp_path / "exact", backend="serial", prune=False).result
    return pruned, exact


def test_a_pruned_plan_gives_the_exact_plans_answer(tmp_path):
    pruned, exact = _pruned_and_exact(tmp_path, ["colocate", "split", "standalone"])
    best = [r.candidates[r.ranking[0].candidate].label for r in (pruned, exact)]
    assert best[0] == best[1]
    # the winner's evaluation is the exact one, bit for bit
    assert pruned.ranking[0].summary == exact.ranking[0].summary and pruned.ranking[0].mode == "exact"
    feasible = sum(c.status != "infeasible" for c in exact.candidates)
    p = pruned.pruning
    assert p.bounded + p.screened + p.exact == feasible and p.exact < feasible  # every tier accounted for
    assert exact.pruning.exact == feasible and not exact.screen
    assert {c.status for c in exact.candidates} <= {"feasible", "infeasible"}
    screened = [c for c in pruned.candidates if c.status == "screened"]
    assert all(c.reason.startswith("screen (aggregate mode)") for c in screened)
    assert p.line().startswith(f"pruning: {p.bounded} bounded out (analytic), {p.screened} screened out")


class _Recording:
    def __init__(self):
        self.totals, self.done = [], 0

    def add(self, n):
        self.totals.append(n)

    def advance(self):
        self.done += 1


def test_the_progress_total_is_fixed_up_front_and_reached(tmp_path):
    space = parse_space(hybridflow_space(16, ["colocate", "split"]))
    cands = enumerate_candidates(yaml.safe_load((SCENARIOS / "hybridflow" / "ppo-llama-7b.yaml").read_text()), space)
    progress = _Recording()
    run_search(cands, "throughput", space.constraints, space.search, progress=progress)
    assert progress.totals == [sum(c.status != "infeasible" for c in cands)]  # one total, before anything ran
    assert progress.done == progress.totals[0]


def test_a_rerun_reads_every_simulation_back_from_the_points(tmp_path, monkeypatch):
    from rlsim.tools.plan import search

    space = parse_space(hybridflow_space(16, ["colocate", "split"]))
    scenario = SCENARIOS / "hybridflow" / "ppo-llama-7b.yaml"
    first = make_plan(scenario, space, tmp_path, backend="serial")
    assert len(list((tmp_path / "points").glob("*.json"))) == len(first.result.evaluations) + len(first.result.screen)
    before = (tmp_path / "plan.csv").read_text()

    def no_simulation(task):
        raise AssertionError("simulated again")

    monkeypatch.setattr(search, "timed_point", no_simulation)
    again = make_plan(scenario, space, tmp_path, backend="serial")
    assert (tmp_path / "plan.csv").read_text() == before
    assert again.result.candidates[again.result.ranking[0].candidate].label == \
        first.result.candidates[first.result.ranking[0].candidate].label


@pytest.mark.slow
def test_a_plan_killed_with_sigkill_resumes_to_the_same_plan(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(hybridflow_space(16, ["colocate", "split", "standalone"])))
    cmd = [sys.executable, "-m", "rlsim.tools.cli", "plan", "hybridflow/ppo-llama-7b", "--space", str(space),
           "--backend", "serial", "--quiet"]
    subprocess.run([*cmd, "--out", str(tmp_path / "whole")], check=True, capture_output=True)
    proc = subprocess.Popen([*cmd, "--out", str(tmp_path / "killed")], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    points = tmp_path / "killed" / "points"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(points.glob("*.json")) if points.is_dir() else []) < 2:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    stored = len(list(points.glob("*.json")))
    assert stored >= 2
    subprocess.run([*cmd, "--out", str(tmp_path / "killed")], check=True, capture_output=True)
    assert (tmp_path / "killed" / "plan.csv").read_text() == (tmp_path / "whole" / "plan.csv").read_text()


def test_cli_plan_prints_the_pruning_line_and_exact_turns_it_off(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(hybridflow_space(16, ["colocate", "split"])))
    args = ["plan", "hybridflow/ppo-llama-7b", "--space", str(space), "--backend", "serial", "--quiet"]
    res = cli.invoke(app, [*args, "--out", str(tmp_path / "p")])
    assert res.exit_code == 0, res.output
    assert re.search(r"pruning: \d+ bounded out \(analytic\), \d+ screened out \(aggregate mode, > 10% behind the "
                     r"best or the target\), \d+ simulated exactly", " ".join(res.output.split()))  # wrapped
    res = cli.invoke(app, [*args, "--exact", "--out", str(tmp_path / "e")])
    assert res.exit_code == 0, res.output
    assert "pruning off (--exact)" in res.output


@pytest.mark.parametrize("address", ["http://10.0.0.1:8265", "10.0.0.1", ""])
def test_a_bad_ray_address_names_the_flag_typed(tmp_path, address):
    res = cli.invoke(app, ["plan", "quickstart", "--target", "tokens_per_s=1000", "--ray", address,
                           "--out", str(tmp_path / "o")])
    assert res.exit_code == 2, res.output
    assert f"--ray {address}" in res.output or f"--ray {address!r}" in res.output
    assert "--ray-address" not in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()  # refused before anything is written
