"""`rlsim plan --ray ADDRESS`: candidate simulations spread over a Ray cluster (the sweep's Ray backend), a worker
killed on the way, and the same plan as on local processes."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from rlsim.sim.paths import shipped_dir
from rlsim.tools.plan import make_plan, parse_space

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                                 reason="Ray is not installed (pip install 'rlsim[ray]')")]

SCENARIO = shipped_dir("scenarios") / "hybridflow" / "ppo-llama-7b.yaml"
SPACE = {"gpus": [{"hardware": "a100-80gb", "counts": [16]}],
         "schedules": [{"kind": "hybridflow", "layouts": ["colocate", "split", "standalone"]}],
         "parallel": {"generation_tp": [1, 2, 4, 8], "training": [{"tp": 8, "pp": 1, "offload": "none"},
                                                                 {"tp": 8, "pp": 2, "offload": "optimizer"}]},
         "search": {"rungs": [1, 2]}}
# A local head: a Ray started by its own driver, which keeps it up until its stdin closes.
HEAD = ("import sys, ray\n"
        "ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)\n"
        "print(ray.get_runtime_context().gcs_address, flush=True)\n"
        "sys.stdin.read()\n"
        "ray.shutdown()\n")


def _wait_for_points(proc: subprocess.Popen, points: Path, k: int) -> list[Path]:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = sorted(points.glob("*.json")) if points.is_dir() else []
        if len(found) >= k:
            return found
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.kill()
    pytest.fail("the plan stored no points in time")


def test_plan_over_ray_with_a_worker_killed_gives_the_local_plan(tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(SPACE))
    local = make_plan(SCENARIO, parse_space(SPACE), tmp_path / "local", backend="local", workers=2)
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}  # a throwaway local cluster: no token to hand around
    head = subprocess.Popen([sys.executable, "-c", HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env=env)
    try:
        address = head.stdout.readline().strip()
        assert address, "the local Ray head did not start"
        out = tmp_path / "ray"
        proc = subprocess.Popen([sys.executable, "-m", "rlsim.tools.cli", "plan", str(SCENARIO), "--space", str(space),
                                 "--ray", address, "--out", str(out), "--quiet"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        found = _wait_for_points(proc, out / "points", 1)
        worker = json.loads(found[0].read_text())["pid"]
        assert worker != proc.pid  # it ran in a Ray worker, not in the driver
        os.kill(worker, signal.SIGKILL)
        stdout, stderr = proc.communicate(timeout=600)
        assert proc.returncode == 0, stdout + stderr
    finally:
        head.stdin.close()
        head.wait(timeout=120)
    assert "pruning:" in stdout
    pd.testing.assert_frame_equal(pd.read_csv(out / "plan.csv"), pd.read_csv(local.paths["csv"]))
