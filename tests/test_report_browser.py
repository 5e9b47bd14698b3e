"""The HTML report as a browser shows it: headless Chromium renders a real run's report, and the screenshot holds a
page (not blank, its title drawn) whose per-step table scrolls inside its box instead of widening the page.

CI installs Debian's chromium and sets RLSIM_REQUIRE_BROWSER=1, so there the test cannot skip; on a machine
without a browser it skips with the reason.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from rlsim.sim.api import load_scenario, simulate
from rlsim.sim.paths import shipped_dir

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]


def _browser() -> str:
    if BROWSER is None:
        if os.environ.get("RLSIM_REQUIRE_BROWSER"):
            pytest.fail("RLSIM_REQUIRE_BROWSER is set but no chromium is on PATH")
        pytest.skip("no headless browser on PATH (CI installs Debian's chromium)")
    return BROWSER


def _shot(page: Path, png: Path, width: int, tmp_path: Path) -> np.ndarray:
    import matplotlib.image as mpimg

    subprocess.run([_browser(), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", f"--window-size={width},1600",
                    f"--screenshot={png}", page.as_uri()], check=True, capture_output=True, timeout=120)
    return mpimg.imread(png)[..., :3]


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_the_report_renders_and_its_wide_table_scrolls_inside_the_page(tmp_path):
    from rlsim.tools.report.html import write_report
    from rlsim.tools.report.output import write_results

    res = simulate(load_scenario(shipped_dir("scenarios") / "quickstart.yaml",
                                 ["steps=1", "warmup_steps=0", "algorithm.prompts_per_step=16"]))
    write_results(res, tmp_path / "run", plots=False)
    page = write_report(tmp_path / "run")
    img = _shot(page, tmp_path / "wide.png", 1280, tmp_path)
    assert img.shape[1] == 1280 and img.std() > 0.05  # a drawn page, not a blank one
    title = img[20:70, 40:400]
    assert (title < 0.5).mean() > 0.02  # the dark title text is there
    # At a narrow window the per-step table (dozens of columns) scrolls in its own box: the page itself does not
    # widen, so the screenshot's rightmost columns still hold the page's white margin, not a table cut off.
    narrow = _shot(page, tmp_path / "narrow.png", 700, tmp_path)
    assert narrow.shape[1] == 700
    assert (narrow[:, -8:] > 0.9).all(axis=2).mean() > 0.999  # a table that widens the page: ~0.995
