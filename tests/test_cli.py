"""The command line: exit codes, one line per problem, no tracebacks, the results folder."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from rlsim.tools.cli import app

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
runner = CliRunner()


def test_validate_ok():
    res = runner.invoke(app, ["validate", str(QUICKSTART)])
    assert res.exit_code == 0, res.output
    assert "ok" in res.output


def test_validate_shows_where_each_role_runs():
    """ROLL's device mapping: the judge on GPUs 12-15 takes turns only with the roles that share them."""
    from rlsim.sim.scenario.loader import load_scenario
    from rlsim.sim.scenario.placement import placement_rows

    path = QUICKSTART.parent / "roll" / "rlvr-qwen2.5-7b-judge.yaml"
    rows = {r["role"]: r for r in placement_rows(load_scenario(path))}
    assert rows["reward"]["pool GPUs"] == "12-15" and rows["reward"]["layout"] == "4 engines x tp 1"
    assert rows["reward"]["takes turns with"] == "actor, reference"
    assert rows["rollout"]["pool GPUs"] == "0-11" and rows["actor"]["layout"] == "tp 1 x pp 1 x dp 16"
    res = runner.invoke(app, ["validate", str(path)])
    assert res.exit_code == 0 and "12-15" in res.output


def test_bad_overrides_exit_2_one_line_each_no_traceback():
    res = runner.invoke(app, ["validate", str(QUICKSTART), "--set", "steps=0", "--set", "seed=-1"])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert f"{QUICKSTART}: steps: must be > 0, got 0" in lines
    assert f"{QUICKSTART}: seed: must be >= 0, got -1" in lines
    assert "Traceback" not in res.output
    # Cross-field checks run once the schema is satisfied.
    res = runner.invoke(app, ["validate", str(QUICKSTART), "--set", "roles.rollout.parallel.tp=3"])
    assert res.exit_code == 2
    assert f"{QUICKSTART}: roles.rollout.parallel.tp: must divide gpus_per_node (8), got 3" in res.output


def test_unknown_override_path_is_an_error(tmp_path):
    res = runner.invoke(app, ["run", str(QUICKSTART), "--set", "algorithm.prompts_per_stepp=4", "--out", str(tmp_path)])
    assert res.exit_code == 2
    assert "prompts_per_stepp" in res.output and "unknown key" in res.output
    assert not (tmp_path / "summary.json").exists()


def test_malformed_yaml_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    res = runner.invoke(app, ["run", str(bad)])
    assert res.exit_code == 2
    assert str(bad) in res.output and "Traceback" not in res.output


def test_missing_file_exit_2(tmp_path):
    res = runner.invoke(app, ["validate", str(tmp_path / "nope.yaml")])
    assert res.exit_code == 2


def test_run_writes_contract_folder(tmp_path):
    res = runner.invoke(app, ["run", str(QUICKSTART), "--set", "steps=1", "--set", "algorithm.prompts_per_step=8",
                              "--out", str(tmp_path), "--no-plots"])
    assert res.exit_code == 0, res.output
    for name in ("summary.json", "steps.csv", "timeline.csv", "scenario.resolved.yaml", "meta.json"):
        assert (tmp_path / name).is_file(), name
    summary = json.loads((tmp_path / "summary.json").read_text())
    for key in ("step_time_s", "throughput_tokens_per_s", "throughput_tokens_per_s_per_gpu", "samples_per_s",
                "gpu_idle_fraction", "idle_fraction_by_pool", "busy_fraction_by_phase", "staleness_mean",
                "staleness_max", "num_gpus", "steps"):
        assert key in summary, key
    resolved = yaml.safe_load((tmp_path / "scenario.resolved.yaml").read_text())
    assert resolved["steps"] == 1 and resolved["algorithm"]["prompts_per_step"] == 8


def test_run_by_shipped_name(tmp_path):
    res = runner.invoke(app, ["run", "quickstart", "--set", "steps=1", "--set", "algorithm.prompts_per_step=4",
                              "--out", str(tmp_path), "--no-plots"])
    assert res.exit_code == 0, res.output


def test_schema_is_json_schema():
    res = runner.invoke(app, ["schema"])
    assert res.exit_code == 0
    schema = json.loads(res.output)
    assert schema["additionalProperties"] is False
    assert {"cluster", "models", "roles", "workload", "schedule"} <= set(schema["properties"])


def test_profiles_and_presets_list():
    res = runner.invoke(app, ["profiles"])
    assert res.exit_code == 0 and "h100-sxm" in res.output and "mi300x" in res.output
    res = runner.invoke(app, ["presets"])
    assert res.exit_code == 0 and "qwen3-30b-a3b" in res.output


def test_calibrate_prints_errors_and_writes_profile(tmp_path):
    csv = ROOT / "hardware_profiles" / "measurements" / "nim_llama33_70b_fp8_h100.csv"
    out = tmp_path / "fitted.yaml"
    res = runner.invoke(app, ["calibrate", str(csv), "--profile", "h100-sxm", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert out.is_file()
    assert "h100-sxm" in out.read_text()


def test_calibrate_bad_csv_exit_2(tmp_path):
    bad = tmp_path / "m.csv"
    bad.write_text("kind,seconds\nwarp,1\n")
    res = runner.invoke(app, ["calibrate", str(bad), "--profile", "h100-sxm"])
    assert res.exit_code == 2
    assert "Traceback" not in res.output


def test_packages_list_covers_every_subpackage():
    """pyproject lists packages explicitly (to ship hardware_profiles/ and scenarios/); keep it complete."""
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"rlsim"} | {
        "rlsim." + ".".join(p.parent.relative_to(ROOT / "rlsim").parts)
        for p in (ROOT / "rlsim").rglob("__init__.py")
        if p.parent != ROOT / "rlsim"
    }
    assert found <= listed, found - listed
    assert {"rlsim.hardware_profiles", "rlsim.scenarios"} <= listed


def test_installed_wheel_finds_shipped_data(tmp_path, monkeypatch):
    """Inside a wheel the data sits at site-packages/rlsim/<name>/, with no checkout around it."""
    import rlsim.sim.paths as paths

    pkg = tmp_path / "site-packages" / "rlsim"
    (pkg / "hardware_profiles").mkdir(parents=True)
    monkeypatch.setattr(paths, "_PACKAGE", pkg)
    assert paths.shipped_dir("hardware_profiles") == pkg / "hardware_profiles"


SMALL = ["--set", "steps=1", "--set", "algorithm.prompts_per_step=4"]


def test_scenarios_lists_every_shipped_one_on_one_line():
    from rlsim.tools.cli.common import shipped_scenarios

    res = runner.invoke(app, ["scenarios"])
    assert res.exit_code == 0, res.output
    paths = shipped_scenarios()
    assert len(paths) >= 15 and not any("sweeps" in p.parts for p in paths)
    for name in ("quickstart", "async/areal-1.5b-h800", "roll/swe-sandbox"):
        assert sum(ln.split()[0] == name for ln in res.output.splitlines() if ln.strip()) == 1, name


def test_shipped_scenario_resolves_by_name_from_any_folder(tmp_path, monkeypatch):
    from rlsim.tools.cli.common import resolve_scenario_path

    monkeypatch.chdir(tmp_path)
    assert resolve_scenario_path("areal-1.5b-h800") == ROOT / "scenarios" / "async" / "areal-1.5b-h800.yaml"
    assert resolve_scenario_path("async/areal-1.5b-h800").is_file()
    res = runner.invoke(app, ["validate", "areal-1.5b-h800"])
    assert res.exit_code == 0, res.output


def test_run_refuses_to_overwrite_a_different_run_without_force(tmp_path):
    out = str(tmp_path / "r")
    assert runner.invoke(app, ["run", "quickstart", *SMALL, "--out", out, "--no-plots", "-q"]).exit_code == 0
    again = runner.invoke(app, ["run", "quickstart", *SMALL, "--out", out, "--no-plots", "-q"])
    assert again.exit_code == 0, again.output  # the same run: overwritten
    other = runner.invoke(app, ["run", "quickstart", *SMALL, "--set", "seed=5", "--out", out, "--no-plots"])
    assert other.exit_code == 2 and "--force" in other.output and "Traceback" not in other.output
    forced = runner.invoke(app, ["run", "quickstart", *SMALL, "--set", "seed=5", "--out", out, "--no-plots", "--force"])
    assert forced.exit_code == 0
    assert "seed: 5" in (tmp_path / "r" / "scenario.resolved.yaml").read_text()


def test_no_plots_lists_no_figures(tmp_path):
    res = runner.invoke(app, ["run", "quickstart", *SMALL, "--out", str(tmp_path), "--no-plots"])
    assert res.exit_code == 0 and ".png" not in res.output and "summary.json" in res.output


def test_run_seeds_gives_mean_and_interval(tmp_path):
    import pandas as pd

    res = runner.invoke(app, ["run", "quickstart", *SMALL, "--seeds", "3", "--out", str(tmp_path), "--no-plots"])
    assert res.exit_code == 0, res.output
    assert "±" in res.output and "3 seeds" in res.output
    reps = pd.read_csv(tmp_path / "seeds.csv", index_col="seed")
    ci = pd.read_csv(tmp_path / "summary_ci.csv", index_col="metric")
    assert len(reps) == 3 and reps.index.nunique() == 3
    thr = reps["throughput_tokens_per_s"]
    assert abs(ci.at["throughput_tokens_per_s", "mean"] - thr.mean()) < 1e-6 * thr.mean()
    assert ci.at["throughput_tokens_per_s", "ci95"] == pytest.approx(4.303 * thr.std() / 3**0.5, rel=1e-6)


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_compare_seeds_and_report(tmp_path):
    res = runner.invoke(app, ["compare", "quickstart", "quickstart", *SMALL, "--seeds", "2", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "compare_ci95.csv").is_file() and (tmp_path / "compare.png").is_file()
    run_dir = next(p for p in tmp_path.iterdir() if p.is_dir())
    res = runner.invoke(app, ["report", str(run_dir)])
    assert res.exit_code == 0, res.output
    page = (run_dir / "report.html").read_text()
    assert page.count("<svg") >= 3 and "ui.perfetto.dev" in page and "Scenario as resolved" in page
    assert "<script" not in page and "src='http" not in page and 'href="http' not in page
    bad = runner.invoke(app, ["report", str(tmp_path / "nothing")])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def test_nothing_imports_the_cli():
    """The CLI calls the library, never the other way round (issue 15: walls that hold)."""
    import re

    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "rlsim").rglob("*.py")
        if p.relative_to(ROOT / "rlsim").parts[:2] != ("tools", "cli")
        and re.search(r"^\s*(from rlsim\.tools\.cli\b|from rlsim\.tools import cli\b|import rlsim\.tools\.cli\b)",
                      p.read_text(), re.M)
    ]
    assert not offenders, offenders
