"""The outputs the README and the docs show are what today's code prints: the README's sweep table,
reproduction headline and plan ranking, the sizing example's answers, and the cheapest tables of
docs/reproductions.md (verl one-step-off, the HybridFlow placement winners) are re-run here and compared
line by line (they had gone stale once, unnoticed)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from rlsim.tools.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SIZING = (ROOT / "docs" / "sizing.md").read_text()
REPRODUCTIONS = (ROOT / "docs" / "reproductions.md").read_text()
runner = CliRunner()


def _readme_block_after(command_start: str) -> list[str]:
    """The lines of the first plain ``` block that follows the bash block starting with `command_start`."""
    at = README.index(command_start)
    at = README.index("```", at) + 3  # past the command's own block
    block = re.search(r"```\n(.*?)```", README[at:], flags=re.S)
    assert block, command_start
    return [ln.rstrip() for ln in block.group(1).splitlines() if ln.strip()]


def _run(args: list[str]) -> list[str]:
    result = runner.invoke(app, args, terminal_width=200)
    assert result.exit_code == 0, result.output
    return [ln.rstrip() for ln in result.output.splitlines()]


def _squash(line: str) -> str:
    return " ".join(line.replace("│", " ").split())


@pytest.mark.slow
def test_sweep_table_is_current(tmp_path):
    shown = _readme_block_after("rlsim sweep async/areal-1.5b-h800")
    rows = [_squash(ln) for ln in shown if re.match(r"\s+\d+\s+\d+\s", ln)]
    assert len(rows) == 6
    out = {_squash(ln) for ln in _run(["sweep", "async/areal-1.5b-h800", "--set", "steps=2",
                                       "--grid", "schedule.max_head_offpolicyness=0,1,4",
                                       "--grid", "algorithm.prompts_per_step=32,64",
                                       "--out", str(tmp_path / "sweep"), "-q"])}
    for row in rows:
        assert row in out, row


@pytest.fixture(scope="module")
def hybridflow_placement(tmp_path_factory):
    """`rlsim reproduce hybridflow-placement` once for this module (~15 s): its printed lines and its folder."""
    out_dir = tmp_path_factory.mktemp("hybridflow-placement")
    return _run(["reproduce", "hybridflow-placement", "--out", str(out_dir), "-q"]), out_dir


@pytest.mark.slow
def test_reproduction_headline_is_current(hybridflow_placement):
    shown = _readme_block_after("rlsim reproduce hybridflow-placement")
    assert len(shown) >= 3 and shown[0].startswith("HybridFlow placement grid")
    out = {_squash(ln) for ln in hybridflow_placement[0]}
    for line in shown:
        assert _squash(line) in out, line


def _reproductions_section(heading: str) -> str:
    at = REPRODUCTIONS.index(heading)
    end = REPRODUCTIONS.find("\n## ", at + len(heading))
    return REPRODUCTIONS[at:] if end < 0 else REPRODUCTIONS[at:end]


def _table_rows(section: str, first_cell: str) -> list[list[str]]:
    """Cells (bold marks dropped) of the Markdown table rows whose first cell matches `first_cell`."""
    rows = []
    for line in section.splitlines():
        cells = [c.strip().replace("**", "") for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(first_cell, cells[0]):
            rows.append(cells)
    return rows


def _pct(x: float) -> str:
    return f"{x:+.1f}%".replace("-", "\u2212")


@pytest.mark.slow
def test_reproductions_verl_one_step_off_table_is_current(tmp_path):
    rows = _table_rows(_reproductions_section("## verl one-step-off vs synchronous"), r"sync|one-step-off|speedup")
    assert len(rows) == 10, rows
    _run(["reproduce", "verl-one-step-off", "--out", str(tmp_path), "-q"])
    table = pd.read_csv(tmp_path / "table.csv")
    table = table[table["backend"] == "fsdp2"].set_index(["mode", "column"])
    for run, timing, published, simulated, error in rows:
        column = timing if run == "speedup" else "timing_s/" + timing.split(" (")[0]
        row = table.loc[(run, column)]
        fmt = "{:.2f}" if run == "speedup" else "{:.0f}"
        assert (published, simulated) == (fmt.format(row["published_s"]), fmt.format(row["simulated_s"])), (run, timing)
        if error == "\u2014":  # no error shown where rlsim has no such wait
            assert round(row["simulated_s"]) == 0, (run, timing)
        else:
            assert error == _pct(row["error_pct"]), (run, timing)


@pytest.mark.slow
def test_reproductions_placement_winners_are_current(hybridflow_placement):
    section = _reproductions_section("## HybridFlow placement")
    rows = _table_rows(section, r"llama-\d+b")
    assert len(rows) >= 15, rows
    out_dir = hybridflow_placement[1]
    table = pd.read_csv(out_dir / "table.csv")
    table = table[table["feasible"]]
    best = table.loc[table.groupby(["model", "gpus"])["throughput_tokens_per_s"].idxmax()]
    winners = {(r.model, int(r.gpus)): r.placement for r in best.itertuples()}
    shown = {(row[0], int(row[1])): row[5].split()[0] for row in rows}
    assert shown == winners
    findings = pd.read_csv(out_dir / "findings.csv")
    marks = {(row[0], int(row[1])): row[5].split()[1] for row in rows if len(row[5].split()) > 1}
    assert marks == {(f.name.split(" on ")[0], int(f.name.split(" on ")[1].split()[0])): "\u2713" if f.passed
                     else "\u2717" for f in findings.itertuples()}
    count = re.search(r"(\d+) of HybridFlow's (\d+) placement\s+findings hold", section)
    assert count, "finding count sentence"
    assert (int(count.group(1)), int(count.group(2))) == (int(findings["passed"].sum()), len(findings))


@pytest.mark.slow
def test_plan_ranking_is_current(tmp_path):
    shown = _readme_block_after("rlsim plan scenarios/plan/qwen32b-grpo-512x16.yaml")
    ranked = [_squash(ln) for ln in shown if re.match(r"\s+\d\s+\S+ x\d", ln)]
    assert len(ranked) == 3
    out = {_squash(ln) for ln in _run(["plan", "scenarios/plan/qwen32b-grpo-512x16.yaml", "--space",
                                       "scenarios/plan/qwen32b-grpo-h100-vs-h20.yaml", "--out", str(tmp_path)])}
    for row in ranked:
        assert row in out, row


@pytest.mark.slow
def test_sizing_example_is_current(tmp_path):
    at = SIZING.index("$ rlsim plan hybridflow/grpo-qwen2.5-7b-h100 --target")
    block = SIZING[at:SIZING.index("```", at)]
    answers = [_squash(ln) for ln in block.splitlines() if re.match(r" (h100-sxm|h20)\s+1\s", ln)]
    assert len(answers) == 2
    out = {_squash(ln) for ln in _run(["plan", "hybridflow/grpo-qwen2.5-7b-h100", "--target", "tokens_per_s=20000",
                                       "--gpu", "h100-sxm:64", "--gpu", "h20:96", "--out", str(tmp_path)])}
    for row in answers:
        assert row in out, row
