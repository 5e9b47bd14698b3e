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


def verl_vocabulary(verl_root: Path) -> list[str]:
    """Every dotted path of verl's composed trainer and recipe configs: rlsim/tools/importers/vocab/verl.txt."""
    import yaml

    from rlsim.tools.importers.common import flatten
    from rlsim.tools.importers.hydra import Composer, Resolver

    config = verl_root / "verl" / "trainer" / "config"
    datas = [yaml.safe_load((config / f"_generated_{name}.yaml").read_text())
             for name in ("ppo_trainer", "ppo_megatron_trainer", "ppo_torchtitan_trainer", "ppo_veomni_trainer")]
    for recipe in ("one_step_off_policy/config/one_step_off_ppo_trainer.yaml",
                   "one_step_off_policy/config/one_step_off_ppo_megatron_trainer.yaml",
                   "fully_async_policy/config/fully_async_ppo_trainer.yaml",
                   "fully_async_policy/config/fully_async_ppo_megatron_trainer.yaml"):
        path = verl_root / "verl" / "experimental" / recipe
        datas.append(Resolver(Composer(path, [config]).compose({}), str(path)).resolve_all())
    paths = {"model_engine"}  # the Hydra group choice verl's composed configs carry
    for data in datas:
        for key in flatten(data):
            parts = key.split(".")
            paths.update(".".join(parts[:n]) for n in range(1, len(parts) + 1))
    return sorted(paths)


def areal_vocabulary(areal_root: Path) -> list[str]:
    """Every field name of AReaL's config dataclasses: rlsim/tools/importers/vocab/areal.txt."""
    import ast

    tree = ast.parse((areal_root / "areal" / "api" / "cli_args.py").read_text())
    return sorted({st.target.id for node in ast.walk(tree) if isinstance(node, ast.ClassDef) for st in node.body
                   if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)})
