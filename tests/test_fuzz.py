"""Fuzzing: mutated shipped scenarios, run in-process under a wall-clock alarm.

Every example takes a shipped scenario, shrinks it (one step, a few prompts) and mutates a few of
its values: plausible ones (zero, one, a tenth, ten times, a probability of 1) and hostile ones (NaN,
inf, negative, huge, the wrong type, a removed key, an unknown key). Then it must either be refused
with a ScenarioError, or simulate to the end in a few seconds with a finite summary whose fractions
lie in [0, 1]. Anything else fails: another exception (a crash), the alarm (a hang, or a run that
can never finish), a NaN/inf in the summary (a result that lies).

RLSIM_FUZZ_EXAMPLES sets the number of examples (default 500, about 10 s on one core); e.g.
`RLSIM_FUZZ_EXAMPLES=5000 pytest -n 0 tests/test_fuzz.py` for a long campaign.
"""

from __future__ import annotations

import copy
import math
import os
import re
import shutil
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rlsim.sim.scenario.errors import ScenarioError
from rlsim.sim.scenario.loader import parse_scenario, read_yaml
from rlsim.sim.simulate import simulate
from rlsim.tools.cli.common import shipped_scenarios

EXAMPLES = int(os.environ.get("RLSIM_FUZZ_EXAMPLES", "500"))
RUN_TIMEOUT_S = 20.0  # a shrunk scenario simulates in well under a second
SMALL = {"steps": 1, "warmup_steps": 0}
SMALL_ALGORITHM = {"prompts_per_step": 4, "mini_batches": 1}
SMALL_SCHEDULE = {"consumer_batch_size": 4, "max_concurrent_rollouts": 8, "ppo_mini_batch_size": 4,
                  "require_batches": 1}
# Keys whose growth only makes a run longer (the bounds are tested in test_reliability.py): kept small.
SIZE_CAPS = {"steps": 2, "warmup_steps": 1, "prompts_per_step": 8, "samples_per_prompt": 8, "nodes": 4,
             "consumer_batch_size": 8, "max_concurrent_rollouts": 16, "ppo_mini_batch_size": 8,
             "require_batches": 2, "epochs": 2, "mini_batches": 4, "concurrency": 4096}
FRACTION_WORDS = {"fraction", "ratio", "share"}  # words of a summary key that make its value a fraction


class Hang(Exception):
    """The alarm rang: the simulation ran past RUN_TIMEOUT_S."""


# A loop that spins is caught by its CPU time, which a loaded machine does not stretch (a 20,000-example
# campaign beside other jobs saw a `calibrate ops` fit pass its 60 s of wall time once, and not on the rerun);
# a read that blocks uses no CPU, so wall time stops it too, WALL_SLACK times later.
WALL_SLACK = 10


@contextmanager
def alarm(seconds: float) -> Iterator[None]:
    """Raise Hang in this (main) thread after `seconds` of this process's CPU time, or WALL_SLACK x `seconds`
    of wall time."""

    def ring(signum, frame):
        clock = "CPU" if signum == signal.SIGPROF else "wall"
        raise Hang(f"no result after {seconds * (1 if clock == 'CPU' else WALL_SLACK):g} {clock} s")

    previous = {sig: signal.signal(sig, ring) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.setitimer(signal.ITIMER_REAL, seconds * WALL_SLACK)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.setitimer(signal.ITIMER_REAL, 0)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _shrunk(data: dict) -> dict:
    out = copy.deepcopy(data)
    out.update(SMALL)
    algorithm = out.setdefault("algorithm", {})
    algorithm.update(SMALL_ALGORITHM)
    algorithm["samples_per_prompt"] = min(int(algorithm.get("samples_per_prompt", 1)), 4)
    schedule = out.get("schedule") or {}
    for key, value in SMALL_SCHEDULE.items():
        if schedule.get(key) is not None:
            schedule[key] = value
    return out


def _bases() -> list[tuple[str, dict, Path]]:
    """(name, shrunk mapping, folder) of every shipped scenario that validates once shrunk."""
    bases = []
    for path in shipped_scenarios():
        data = read_yaml(path)
        if "cluster" not in data:
            continue  # not a scenario (a plan space)
        small = _shrunk(data)
        try:
            parse_scenario(small, str(path), (), path.parent)
        except ScenarioError:
            continue
        bases.append((path.stem, small, path.parent))
    return bases


BASES = _bases()


def _plausible(value: Any) -> list[Any]:
    """Values a person could type for this one: the edges of its range and an order of magnitude."""
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [0, 1, 2, value + 1, max(value - 1, 0), value * 10, value // 10, 128, 129]
    if isinstance(value, float):
        return [0.0, 1.0, 0.5, 1e-9, value * 10, value / 10, 0.999]
    if isinstance(value, str):
        return ["", value.upper(), value + "x"]
    if isinstance(value, list):
        return [[], value[:1], value * 2]
    if isinstance(value, dict):
        return [{}]
    return [0, "x"]


HOSTILE = [None, -1, -0.5, float("nan"), float("inf"), float("-inf"), 10**18, 1e300, "x", True, [], {},
           [1, 2], {"kind": "fixed", "value": 1}]
DELETE = object()
UNKNOWN_KEY = object()


@st.composite
def mutated(draw) -> tuple[str, dict, Path, list]:
    from fuzz_inputs import leaves  # the one walk over a nested mapping (imported lazily like the other rooms)

    name, data, folder = draw(st.sampled_from(BASES))
    data = copy.deepcopy(data)
    done = []
    for _ in range(draw(st.integers(1, 3))):
        paths = leaves(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        current = parent[path[-1]]
        value = draw(st.sampled_from([*_plausible(current)] * 6 + [*HOSTILE, DELETE, UNKNOWN_KEY]))
        value = value if value is DELETE or value is UNKNOWN_KEY else copy.deepcopy(value)  # never share HOSTILE's
        if value is DELETE:
            del parent[path[-1]]
        elif value is UNKNOWN_KEY:
            if isinstance(current, dict):
                current["no_such_key"] = 1
        else:
            cap = SIZE_CAPS.get(str(path[-1]))
            if cap is not None and isinstance(value, int | float) and not isinstance(value, bool) and value > cap:
                value = cap  # growing a batch only makes the run slower, never more interesting
            parent[path[-1]] = value
        done.append((path, "delete" if value is DELETE else "unknown key" if value is UNKNOWN_KEY else value))
    return name, data, folder, done


def _bad_numbers(summary: dict, at: str = "") -> list[str]:
    """Summary entries that are NaN/inf, or fractions outside [0, 1]."""
    bad = []
    for key, value in summary.items():
        where = f"{at}{key}"
        if isinstance(value, dict):
            bad += _bad_numbers(value, f"{where}.")
        elif isinstance(value, float | int) and not isinstance(value, bool):
            if not math.isfinite(value):
                bad.append(f"{where} = {value}")
            elif FRACTION_WORDS & set(re.split(r"[._/]", where)) and not -1e-9 <= value <= 1 + 1e-9:
                bad.append(f"{where} = {value} (a fraction)")
    return bad


def one_line_each(exc: ScenarioError, source: str) -> None:
    assert exc.lines() and all(line.startswith(source) and "\n" not in line for line in exc.lines()), exc.lines()
    assert not any("Input should" in line or "errors.pydantic.dev" in line for line in exc.lines()), exc.lines()


def check_one(data: dict, folder: Path, source: str = "fuzz.yaml") -> str:
    """'refused' or 'ran'; raises AssertionError (or Hang) on anything else."""
    with alarm(RUN_TIMEOUT_S):
        try:
            scenario = parse_scenario(data, source, (), folder)
        except ScenarioError as exc:
            one_line_each(exc, source)
            return "refused"
        try:
            result = simulate(scenario)
        except ScenarioError as exc:  # found only by running: a result that would not be finite
            one_line_each(exc, f"scenario {scenario.name!r}")
            return "refused"
    check_invariants(result)
    return "ran"


def check_invariants(result) -> None:
    """Every accepted run: finite numbers, GPU time per pool within capacity, samples and tokens accounted."""
    bad = _bad_numbers(result.summary)
    assert not bad, f"non-finite or out-of-range summary values: {bad}"
    for name, frame in (("steps", result.steps), ("timeline", result.timeline)):
        numbers = frame.select_dtypes("number").to_numpy(float)
        assert numbers.size == 0 or np.isfinite(numbers).all(), f"non-finite values in {name}"
    samples = result.samples.select_dtypes("number").to_numpy(float)
    assert not np.isinf(samples).any(), "infinite values in samples"
    end = float(result.meta["simulated_time_s"])
    assert math.isfinite(end) and end >= 0
    sizes = {name: pool.gpus for name, pool in result.scenario.cluster.pools.items()}
    timeline = result.timeline
    for pool, rows in timeline.groupby("pool"):
        assert (rows["end_s"] >= rows["start_s"]).all() and (rows["start_s"] >= -1e-9).all()
        assert (rows["end_s"] <= end * (1 + 1e-9) + 1e-9).all(), f"pool {pool}: busy after the run ended"
        starts, ends, gpus = rows["start_s"].to_numpy(), rows["end_s"].to_numpy(), rows["gpus"].to_numpy()
        times = np.concatenate([ends - 1e-9 * np.maximum(1, np.abs(ends)), starts])
        deltas = np.concatenate([-gpus, gpus])
        busy = np.cumsum(deltas[np.lexsort((deltas, times))])
        assert busy.max() <= sizes[pool], f"pool {pool}: {busy.max()} GPUs busy at once, it has {sizes[pool]}"
        gpu_s = float(((ends - starts) * gpus).sum())
        assert gpu_s <= sizes[pool] * end * (1 + 1e-9) + 1e-6, f"pool {pool}: {gpu_s} GPU-s > capacity"
    tokens = result.summary
    if "tokens_generated" in tokens:
        parts = [tokens[k] for k in ("tokens_trained", "tokens_discarded", "tokens_in_flight")]
        assert min(parts) >= 0 and sum(parts) == tokens["tokens_generated"], f"tokens not accounted: {parts}"
    if "trajectories_launched" in tokens:
        ends_ = sum(tokens[f"trajectories_{k}"] for k in ("completed", "failed", "aborted", "dropped"))
        assert ends_ == tokens["trajectories_launched"], "every trajectory ends exactly once"
    frame = result.samples
    if len(frame):
        assert frame["sample_id"].is_unique, "a sample counted twice"
        assert (frame["prompt_tokens"] >= 0).all() and (frame["response_tokens"] >= 0).all()
        done = frame.dropna(subset=["arrival_s", "finished_s"])
        assert (done["finished_s"] >= done["arrival_s"] - 1e-9).all(), "a sample finished before it arrived"


@pytest.mark.slow  # over 2 s alone: the slow layer (CI runs it)
def test_every_shrunk_shipped_scenario_runs():
    """The fuzzer's starting points are real: each shipped scenario, shrunk, runs cleanly."""
    assert len(BASES) >= 15, [b[0] for b in BASES]
    for name, data, folder in BASES:
        assert check_one(data, folder, name) == "ran", name


@pytest.mark.slow
@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(mutated())
def test_mutated_shipped_scenarios_never_crash_hang_or_lie(case):
    name, data, folder, mutations = case
    try:
        event(check_one(data, folder, name))
    except Hang as exc:
        pytest.fail(f"{name} with {mutations}: hang ({exc})")
    except AssertionError as exc:
        pytest.fail(f"{name} with {mutations}: {exc}")
    except Exception as exc:  # a crash: any exception but the scenario error
        pytest.fail(f"{name} with {mutations}: {type(exc).__name__}: {exc}")


# ---------------------------------------------------------------- the newer rooms (tests/fuzz_inputs.py)

SMALL_EXAMPLES = int(os.environ.get("RLSIM_FUZZ_EXAMPLES", "0")) or None  # set: every test takes that many


def examples(default: int) -> int:
    return SMALL_EXAMPLES or default


@st.composite
def featured(draw) -> tuple[str, dict, Path, list]:
    from fuzz_inputs import apply_features

    name, data, folder = draw(st.sampled_from(BASES))
    data, done = apply_features(draw, data, TRACE_DIR)
    return name, data, folder, done


TRACE_DIR = Path(os.environ.get("RLSIM_FUZZ_TMP", "/tmp")) / f"rlsim-fuzz-{os.getpid()}"
TRACE_DIR.mkdir(parents=True, exist_ok=True)


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(featured())
def test_engine_kinds_length_shapes_traces_drain_and_calibration_never_crash_hang_or_lie(case):
    _run_case(*case)


@st.composite
def mutated_import(draw) -> tuple[str, Path, dict, list]:
    from fuzz_inputs import IMPORTS, mutate_tree

    framework, path = draw(st.sampled_from(IMPORTS))
    data, done = draw(mutate_tree(yaml.safe_load(path.read_text())))
    return framework, path, data, done


@pytest.mark.slow
@settings(max_examples=examples(40), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(mutated_import())
def test_mutated_framework_configs_import_in_one_line_or_run(case):
    """An import gives a scenario that validates (and, shrunk, runs cleanly) or one line per problem."""
    from rlsim.tools.importers.command import run_import

    framework, original, data, mutations = case
    path = original.parent / f"fuzz{os.getpid()}-{original.name}"  # beside it: its Hydra defaults resolve
    try:
        path.write_text(yaml.safe_dump(data, allow_unicode=True))
        with alarm(RUN_TIMEOUT_S):
            imported = run_import(framework, path, [])
    except ScenarioError as exc:
        assert exc.lines() and all("\n" not in line for line in exc.lines()), exc.lines()
        event("import refused")
        return
    except Hang as exc:
        pytest.fail(f"{original.name} with {mutations}: import hangs ({exc})")
    except Exception as exc:
        pytest.fail(f"{original.name} with {mutations}: {type(exc).__name__}: {exc}")
    finally:
        path.unlink(missing_ok=True)
    ledger = imported.ledger
    assert set(ledger.used) | set(ledger.ignored) | set(ledger.unknown) == set(ledger.leaves)
    try:
        event("imported, then " + check_one(_shrunk(yaml.safe_load(imported.text)), original.parent, "imported.yaml"))
    except (AssertionError, Hang) as exc:
        pytest.fail(f"{original.name} with {mutations}, imported: {exc}")


@st.composite
def mutated_log_case(draw):
    from fuzz_inputs import mutated_log

    return draw(mutated_log())


@settings(max_examples=examples(150), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(mutated_log_case())
def test_mutated_metrics_logs_read_or_refuse_in_one_line(case):
    from rlsim.tools.calibration.logs import LogError, read_log

    suffix, content, mutations = case
    path = TRACE_DIR / f"log{suffix}"
    path.write_bytes(content)
    try:
        with alarm(RUN_TIMEOUT_S):
            logged = read_log(path)
    except LogError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc), (mutations, str(exc))
        event("log refused")
        return
    except Exception as exc:
        pytest.fail(f"log with {mutations}: {type(exc).__name__}: {exc}")
    event("log read")
    means = logged.means()
    assert means and all(math.isfinite(v) for v in means.values()), (mutations, means)
    assert all("\n" not in w for w in logged.warnings)


@st.composite
def mutated_space(draw):
    from fuzz_inputs import SPACES, mutate_tree

    base, space = draw(st.sampled_from(SPACES))
    data, done = draw(mutate_tree(space))
    return base, data, done


@settings(max_examples=examples(60), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(mutated_space())
def test_mutated_plan_spaces_enumerate_or_refuse_in_one_line(case):
    from rlsim.tools.cli.common import resolve_scenario_path
    from rlsim.tools.plan.candidates import enumerate_candidates
    from rlsim.tools.plan.space import parse_space

    base, data, mutations = case
    try:
        with alarm(RUN_TIMEOUT_S):
            space = parse_space(data, "space.yaml")
            path = resolve_scenario_path(base)
            candidates = enumerate_candidates(read_yaml(path), space, path.parent)
    except ScenarioError as exc:
        one_line_each(exc, "space.yaml")
        event("space refused")
        return
    except Hang as exc:
        pytest.fail(f"{base} space with {mutations}: hang ({exc})")
    except Exception as exc:
        pytest.fail(f"{base} space with {mutations}: {type(exc).__name__}: {exc}")
    statuses = {c.status for c in candidates}
    assert statuses <= {"feasible", "infeasible", "pruned", "not-sampled"}, statuses
    event(f"space enumerated ({'some' if 'feasible' in statuses else 'no'} feasible)")


def _run_case(name: str, data: dict, folder: Path, features: list) -> str:
    try:
        outcome = check_one(data, folder, name)
        event(outcome)
        return outcome
    except Hang as exc:
        pytest.fail(f"{name} with {features}: hang ({exc})")
    except AssertionError as exc:
        pytest.fail(f"{name} with {features}: {exc}")
    except Exception as exc:
        pytest.fail(f"{name} with {features}: {type(exc).__name__}: {exc}")


@st.composite
def roomed(draw) -> tuple[str, dict, Path, list]:
    from fuzz_inputs import apply_rooms

    kinds = draw(st.sampled_from([("hybridflow",), ("fully-async", "verl-v1"), ("fully-async", "verl-v1"), ()]))
    name, data, folder = draw(st.sampled_from([b for b in BASES if not kinds or b[1]["schedule"]["kind"] in kinds]))
    data, done = apply_rooms(draw, data)
    return name, data, folder, done


@pytest.mark.slow
@settings(max_examples=examples(100), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(roomed())
def test_lending_resplit_inflight_affinity_lora_tail_resharding_and_moe_never_crash_hang_or_lie(case):
    name, data, folder, rooms = case
    outcome = _run_case(name, data, folder, rooms)
    agent = "agent" if (data.get("workload") or {}).get("agent") else ""
    for room in rooms:  # each room reached, and whether it ran or was refused (the statistics show both)
        event(f"room: {room[0]}{' (agent)' if agent and room[0] == 'verl-v1' else ''} {outcome}")


_CASE_NUMBERS = iter(range(10**9))  # a fresh folder per example


@st.composite
def ops_folder_case(draw):
    from fuzz_inputs import mutated_ops_folder

    return draw(mutated_ops_folder())


@pytest.mark.slow
@settings(max_examples=examples(60), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(ops_folder_case())
def test_calibrate_ops_on_damaged_folders_fits_what_is_there_or_refuses_in_one_line(case):
    """Every fit whose rows are present runs; the others are skipped with a note; nothing prints nan or inf."""
    from rlsim.sim.hardware import load_profile
    from rlsim.tools.calibration.ops_data import OpsDataError
    from rlsim.tools.calibration.ops_run import GPU_PROFILES, format_result, run_ops

    gpu, files, mutations = case
    root = TRACE_DIR / f"ops-{next(_CASE_NUMBERS)}"
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_bytes(content)
    (root / "compute" / gpu).mkdir(parents=True, exist_ok=True)
    hw = load_profile(GPU_PROFILES[gpu])
    try:
        with alarm(3 * RUN_TIMEOUT_S):  # a dense GEMM kind's fit takes seconds
            text = format_result(run_ops(root, gpu, (), hw.peak_flops, hw.hbm_bytes_per_s, root / "out"))
    except OpsDataError as exc:
        assert "\n" not in str(exc) and str(root) in str(exc), (mutations, str(exc))
        event("ops refused")
        return
    except Hang as exc:
        pytest.fail(f"{gpu} folder with {mutations}: hang ({exc})")
    except Exception as exc:
        pytest.fail(f"{gpu} folder with {mutations}: {type(exc).__name__}: {exc}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    event("ops fitted" + (" with notes" if "note:" in text or "skipped" in text else ""))
    figures = "\n".join(ln for ln in text.splitlines() if not ln.startswith("  note:"))  # notes name nan rows
    assert not re.search(r"\b(nan|inf)\b", figures, re.IGNORECASE), (mutations, text)


@st.composite
def plan_target_case(draw) -> list[str]:
    from fuzz_inputs import plan_target_args

    return draw(plan_target_args())


@pytest.mark.slow
@settings(max_examples=examples(30), deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(plan_target_case())
def test_plan_target_sizes_or_refuses_in_one_line(args):
    """`plan --target`: an answer (exit 0), no size reaching the target (exit 1), or one line (exit 2)."""
    from typer.testing import CliRunner

    from rlsim.tools.cli import app

    out = TRACE_DIR / f"plan-{next(_CASE_NUMBERS)}"
    small = ["--set", "steps=1", "--set", "warmup_steps=0", "--set", "algorithm.prompts_per_step=4"]
    try:
        with alarm(3 * RUN_TIMEOUT_S):
            res = CliRunner().invoke(app, ["plan", "quickstart", *small, "--backend", "serial", "-q", *args,
                                           "--out", str(out)])
    except Hang as exc:
        pytest.fail(f"plan {args}: hang ({exc})")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    text = res.stdout + res.stderr
    crashed = res.exception is not None and not isinstance(res.exception, SystemExit)
    assert not crashed and "Traceback" not in text, (args, repr(res.exception), text[-1500:])
    assert res.exit_code in (0, 1, 2), (args, res.exit_code, text[-1500:])
    if res.exit_code == 2:  # the one line may quote the bad value (nan, inf)
        assert len([ln for ln in res.stderr.splitlines() if ln.strip()]) == 1, (args, res.stderr)
    else:
        assert not re.search(r"\b(nan|inf)%?\b", res.stdout, re.IGNORECASE), (args, res.stdout[-1500:])
    event(f"plan exit {res.exit_code}")
