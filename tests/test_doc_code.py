"""Every Python block in docs/ runs: the examples a contributor copies must work on today's code.

Blocks of one page run in order in one namespace (a later block may use an earlier one's names), from the
repository root. A block that defines a schedule class is also run as a schedule on a small scenario.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
PAGES = sorted(p for p in (ROOT / "docs").glob("*.md") if BLOCK.search(p.read_text()))


def test_the_docs_have_python_examples():
    assert PAGES, "no Python block found in docs/: the collector below would test nothing"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_python_block_runs(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for block in BLOCK.findall(page.read_text()):
        exec(compile(block, f"{page.name}", "exec"), namespace)  # noqa: S102 - our own docs, not input
    from rlsim.sim.schedules.rl_base import RLSchedule

    for obj in list(namespace.values()):
        if isinstance(obj, type) and issubclass(obj, RLSchedule) and obj is not RLSchedule:
            _run_as_hybridflow(obj, monkeypatch)


def _run_as_hybridflow(schedule_cls, monkeypatch) -> None:
    """Run a documented schedule class in place of the synchronous one on a two-step quickstart."""
    from rlsim.sim import schedules
    from rlsim.sim.api import load_scenario, simulate

    monkeypatch.setitem(schedules.SCHEDULES, "hybridflow", schedule_cls)
    scn = load_scenario(ROOT / "scenarios" / "quickstart.yaml",
                        ["steps=2", "warmup_steps=0", "algorithm.prompts_per_step=16"])
    res = simulate(scn)
    assert len(res.steps) == 2 and res.summary["throughput_tokens_per_s"] > 0
