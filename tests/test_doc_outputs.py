"""The outputs the README and the sizing guide show are what today's code prints: the README's sweep table,
reproduction headline and plan ranking, and the sizing example's answers, are re-run here and compared line
by line (they had gone stale once, unnoticed)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlsim.tools.cli import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
SIZING = (ROOT / "docs" / "sizing.md").read_text()
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


@pytest.mark.slow
def test_reproduction_headline_is_current(tmp_path):
    shown = _readme_block_after("rlsim reproduce hybridflow-placement")
    assert len(shown) >= 3 and shown[0].startswith("HybridFlow placement grid")
    out = {_squash(ln) for ln in _run(["reproduce", "hybridflow-placement", "--out", str(tmp_path), "-q"])}
    for line in shown:
        assert _squash(line) in out, line


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
