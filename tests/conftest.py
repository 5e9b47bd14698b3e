"""Test-session settings shared by every test module.

Hypothesis: in CI (`CI` set) property tests are derandomized and have no per-example deadline, so a
shared, loaded 2-core runner can neither draw a new failing example on one run only nor trip a
timing deadline; locally they keep hypothesis's defaults (fresh examples every run).
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, database=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


# CPU budget of a test run (`RLSIM_TEST_CPU_BUDGET_S`, set by .ci/run for the fast layer): every process of the
# run (the controller and each xdist worker) adds its CPU seconds to a file of its own in one folder; the
# controller, which finishes last, sums them and fails the run past the budget. Wall time on a shared machine
# says little; CPU seconds say what the suite costs.
_BUDGET = os.environ.get("RLSIM_TEST_CPU_BUDGET_S")


def pytest_sessionfinish(session, exitstatus):
    if not _BUDGET:
        return
    import time
    from pathlib import Path

    folder = Path(os.environ.get("RLSIM_TEST_CPU_DIR", ".pytest-cpu"))
    folder.mkdir(exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker:  # a worker: leave its share for the controller
        (folder / f"{worker}.cpu").write_text(f"{time.process_time():.3f}\n")
        return
    used = time.process_time() + sum(float(p.read_text()) for p in folder.glob("*.cpu"))
    for p in folder.glob("*.cpu"):
        p.unlink()
    budget = float(_BUDGET)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    line = f"test CPU: {used:.0f} CPU-s over all processes (budget {budget:.0f})"
    if reporter is not None:
        reporter.write("\n")  # past the progress dots' line
        reporter.write_line(line)
    if used > budget and session.exitstatus == 0:
        if reporter is not None:
            reporter.write_line(f"FAILED: the run took {used:.0f} CPU-s, past its budget of {budget:.0f}")
        session.exitstatus = 1
