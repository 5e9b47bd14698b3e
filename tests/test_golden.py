"""Golden results: every output table of every shipped run scenario, hashed, equals the committed hash.

A change that moves any number of any shipped result fails here; one meant to move results regenerates
tests/golden/result_hashes.json (benchmarks/result_hashes.py) and says why. Steps are capped at 2, as the
script does. Replaces tests that pinned 16-digit floats of single results.
"""

from __future__ import annotations

import pytest
from golden_hashes import golden, result_hashes, result_hashes_script, scenario_path

GOLDEN = golden()
QUICK = ["hybridflow/ppo-llama-7b.yaml", "async/areal-1.5b-generation-scaling.yaml",  # the fast layer's share
         "roll/rlvr-qwen2.5-7b-async.yaml"]


def test_golden_file_covers_every_shipped_run_scenario():
    root = result_hashes_script.shipped_dir("scenarios")
    assert sorted(GOLDEN) == sorted(str(p.relative_to(root)) for p in result_hashes_script.run_scenarios())


@pytest.mark.parametrize("name", QUICK)
def test_quick_scenarios_match_their_golden_hashes(name):
    assert result_hashes(scenario_path(name)) == GOLDEN[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(GOLDEN) - set(QUICK)))
def test_every_shipped_scenario_matches_its_golden_hashes(name):
    assert result_hashes(scenario_path(name)) == GOLDEN[name]
