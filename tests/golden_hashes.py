"""The committed result hashes of the shipped run scenarios (tests/golden/result_hashes.json) and the script
that makes them (benchmarks/result_hashes.py), shared by tests/test_golden.py and tests/test_kernel.py.

Regenerate after a change that is meant to move results (and say why in the commit):
`python benchmarks/result_hashes.py tests/golden/result_hashes.json`.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "result_hashes.json"

_spec = importlib.util.spec_from_file_location("result_hashes", ROOT / "benchmarks" / "result_hashes.py")
result_hashes_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(result_hashes_script)
result_hashes = result_hashes_script.result_hashes


def golden() -> dict[str, dict]:
    return json.loads(GOLDEN.read_text())


def scenario_path(name: str) -> Path:
    """'agentic/asearcher-7b.yaml' -> its path among the shipped scenarios."""
    return result_hashes_script.shipped_dir("scenarios") / name
