"""Shared pieces of the `rlsim import` tests: fetching a framework wheel once per session, and checks.

The wheels come from the package registry with `pip download --no-deps` (what the issue asks: the
configs the frameworks really ship). Downloads are cached under ~/.cache/rlsim-test; without a
network the tests that need them are skipped with the reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("RLSIM_TEST_CACHE", Path.home() / ".cache" / "rlsim-test"))


def fetch_wheel(package: str, version: str) -> Path:
    """The unpacked wheel of package==version (downloaded once, then cached); skip when offline."""
    target = CACHE / f"{package}-{version}"
    if (target / ".complete").is_file():
        return target
    download = CACHE / "wheels"
    download.mkdir(parents=True, exist_ok=True)
    wheels = sorted(download.glob(f"{package}-{version}-*.whl"))
    if not wheels:
        try:
            run = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                 f"{package}=={version}", "-d", str(download)],
                capture_output=True, text=True, timeout=180,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            pytest.skip(f"offline: pip download {package}=={version} failed ({exc})")
        wheels = sorted(download.glob(f"{package}-{version}-*.whl"))
        if run.returncode != 0 or not wheels:
            last = (run.stderr or run.stdout).strip().splitlines()[-1:] or ["no output"]
            pytest.skip(f"offline: pip download {package}=={version} failed: {last[0]}")
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheels[0]) as wheel:
        wheel.extractall(target)
    (target / ".complete").write_text("ok")
    return target


def assert_complete(ledger) -> None:
    """Every leaf of the input is in exactly one of used / ignored / unknown, and nothing else is."""
    used, ignored, leaves = set(ledger.used), set(ledger.ignored), set(ledger.leaves)
    unknown = set(ledger.unknown)
    assert not used & ignored and not unknown & (used | ignored), sorted((used & ignored) | (unknown & ignored))[:5]
    everything = used | ignored | unknown
    assert everything == leaves, (sorted(leaves - everything)[:5], sorted(everything - leaves)[:5])


def error_lines(result) -> list[str]:
    """The non-empty stderr lines of a CliRunner result."""
    return [line for line in result.stderr.splitlines() if line.strip()]


def refused_in_one_line(runner, app, framework: str, config: Path, overrides: list[str]) -> str:
    """Run `rlsim import` expecting exit 2 with exactly one stderr line (no traceback); return it."""
    res = runner.invoke(app, ["import", framework, str(config), *overrides])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    lines = error_lines(res)
    assert len(lines) == 1, lines
    assert lines[0].startswith(str(config)), lines[0]
    return lines[0]
