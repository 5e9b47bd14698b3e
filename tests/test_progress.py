"""Long commands show a progress bar on a terminal (under a pseudo-terminal here); --quiet and pipes show none."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--set", "steps=2", "--set", "algorithm.prompts_per_step=8"]
CSV = str(ROOT / "hardware_profiles" / "measurements" / "nim_llama33_70b_fp8_h100.csv")


def _commands(tmp: Path) -> dict[str, list[str]]:
    return {
        "run": ["run", "quickstart", *SMALL, "--out", str(tmp / "run"), "--no-plots"],
        "compare": ["compare", "quickstart", *SMALL, "--out", str(tmp / "cmp"), "--no-plots"],
        "sweep": ["sweep", "quickstart", *SMALL, "--grid", "seed=1,2", "--backend", "serial", "--out", str(tmp / "sw")],
        "calibrate": ["calibrate", CSV, "--profile", "h100-sxm"],
        "reproduce": ["reproduce", "transition-cost", "--out", str(tmp / "rep")],
    }


def run_in_pty(args: list[str], cwd: Path) -> tuple[int, str]:
    """Run `rlsim ARGS` with stdout and stderr on a pseudo-terminal; return (exit code, everything printed)."""
    main, child = pty.openpty()
    env = {**os.environ, "RLSIM_PROGRESS_DELAY_S": "0", "TERM": "xterm", "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "rlsim.tools.cli", *args], cwd=cwd, stdin=child, stdout=child,
                            stderr=child, env=env, close_fds=True)
    os.close(child)
    chunks = []
    while True:
        try:
            data = os.read(main, 65536)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    return proc.wait(timeout=120), b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
@pytest.mark.parametrize("command", ["run", "compare", "sweep", "calibrate", "reproduce"])
def test_progress_on_a_terminal_and_none_when_quiet(command, tmp_path):
    args = _commands(tmp_path)[command]
    code, shown = run_in_pty(args, tmp_path)
    assert code == 0, shown
    assert "ETA" in shown and "\x1b[" in shown, shown[-2000:]  # a live rich bar: ANSI control + ETA column
    code, shown = run_in_pty([*args, "--quiet"], tmp_path)
    assert code == 0, shown
    assert "ETA" not in shown, shown[-2000:]


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_no_progress_when_piped(tmp_path):
    env = {**os.environ, "RLSIM_PROGRESS_DELAY_S": "0"}
    res = subprocess.run([sys.executable, "-m", "rlsim.tools.cli", *_commands(tmp_path)["run"]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "ETA" not in res.stderr + res.stdout and "\x1b[" not in res.stderr


def test_lazy_bar_silent_for_short_work():
    from rlsim.tools.cli.progress import LazyBar

    with LazyBar(enabled=True, delay_s=60) as bar:
        bar.begin("x", total=3)
        for i in range(3):
            bar(i + 1, 3)
    assert not bar.shown


def test_progress_callback_reports_every_step():
    from rlsim.tools.cli.common import load

    calls = []
    from rlsim.sim.simulate import simulate

    scn = load("quickstart", ["steps=2", "algorithm.prompts_per_step=4"])
    simulate(scn, progress=lambda done, total: calls.append((done, total)))
    assert calls and calls[-1][0] == calls[-1][1] and [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_simulation_bar_knows_its_total_from_the_start_so_it_can_show_an_eta():
    from rlsim.sim.paths import shipped_dir
    from rlsim.sim.scenario.loader import load_scenario
    from rlsim.tools.cli.progress import simulate_with_progress

    class Recorder:
        def __init__(self):
            self.begun, self.updates = None, []

        def begin(self, label, total=None, unit="steps"):
            self.begun = (label, total, unit)

        def update(self, done, total=None):
            self.updates.append((done, total))

    scn = load_scenario(shipped_dir("scenarios") / "quickstart.yaml", ["steps=2", "warmup_steps=1",
                                                                       "algorithm.prompts_per_step=8"])
    bar = Recorder()
    simulate_with_progress(scn, bar=bar)
    assert bar.begun[1] == 3 and bar.updates[-1] == (3, 3)
