"""The committed result hashes of the shipped run scenarios (tests/golden/result_hashes.json) and the script
that makes them (benchmarks/result_hashes.py), shared by tests/test_golden.py and tests/test_kernel.py.

Beside them, tests/golden/test_scenarios.json: the same hashes of the small scenarios that tests build in
code (tests/test_event_cost.py, tests/test_report.py).

Regenerate after a change that is meant to move results (and say why in the commit):
`python benchmarks/result_hashes.py tests/golden/result_hashes.json` and `python tests/golden_hashes.py`.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "result_hashes.json"
GOLDEN_IN_TESTS = ROOT / "tests" / "golden" / "test_scenarios.json"

_spec = importlib.util.spec_from_file_location("result_hashes", ROOT / "benchmarks" / "result_hashes.py")
result_hashes_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(result_hashes_script)
result_hashes = result_hashes_script.result_hashes
hash_result = result_hashes_script.hash_result


def golden() -> dict[str, dict]:
    return json.loads(GOLDEN.read_text())


def scenario_path(name: str) -> Path:
    """'agentic/asearcher-7b.yaml' -> its path among the shipped scenarios."""
    return result_hashes_script.shipped_dir("scenarios") / name


def golden_in_tests() -> dict[str, dict]:
    return json.loads(GOLDEN_IN_TESTS.read_text())


def _in_test_scenarios() -> dict[str, dict]:
    """The scenarios tests build in code, by their key in GOLDEN_IN_TESTS."""
    import test_event_cost
    import test_report

    scenarios = {f"event_cost/{name}": make() for name, make in test_event_cost.CASES.items()}
    scenarios["report/tiny"] = test_report.TINY
    return scenarios


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from rlsim.sim.scenario.loader import parse_scenario
    from rlsim.sim.simulate import simulate

    hashes = {k: hash_result(simulate(parse_scenario(d, source=k))) for k, d in _in_test_scenarios().items()}
    GOLDEN_IN_TESTS.write_text(json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    print(f"{len(hashes)} in-test scenarios hashed into {GOLDEN_IN_TESTS}")
