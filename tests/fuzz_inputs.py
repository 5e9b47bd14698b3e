"""Hypothesis strategies for tests/test_fuzz.py: the rooms beyond a scenario file.

- `featured`: a shrunk shipped scenario with the newer features switched on at random (engine kinds,
  length shapes with truncation, group correlation, drift and replayed traces, drain mode, calibration
  overlays), plausible and hostile values mixed;
- `mutated_import`: a framework config (verl dump, ROLL, AReaL fixtures) with values replaced, keys
  removed or misspelt, sections turned into scalars;
- `mutated_log`: a metrics log (the fixtures of `rlsim calibrate --from-log`) with lines dropped,
  repeated or cut, fields added, numbers replaced, NUL bytes and huge fields;
- `mutated_space`: a shipped plan space with values replaced, keys removed or misspelt.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml
from hypothesis import strategies as st

ROOT = Path(__file__).parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
ENGINE_KINDS = ["generic", "vllm-0.3", "vllm-0.6", "vllm-v1", "sglang-0.4", "trtllm"]
INTERRUPTS = ["keep", "recompute", "abort-resume", "abort-discard", "drain"]
FACTORS = ["decode_step_overhead_ms", "train_mfu", "forward_mfu", "switch_overhead_s", "rule_reward_s_per_sample"]
HOSTILE = [None, -1, 0, -0.5, float("nan"), float("inf"), 10**18, 1e300, 5e-324, "x", True, [], {}, [1, 2]]

IMPORTS = [
    ("verl", FIXTURES / "import" / "verl" / "dapo_run_dump.yaml"),
    ("roll", FIXTURES / "import" / "roll" / "rlvr" / "rlvr_config.yaml"),
    ("roll", FIXTURES / "import" / "roll" / "rlvr" / "rlvr_config_async.yaml"),
    ("roll", FIXTURES / "import" / "roll" / "agentic" / "agentic_sokoban.yaml"),
    ("areal", FIXTURES / "import" / "areal" / "gsm8k_grpo.yaml"),
    ("areal", FIXTURES / "import" / "areal" / "boba_v03.yaml"),
]
LOGS = sorted((FIXTURES / "logs").iterdir())


def _plan_spaces() -> list[tuple[str, dict]]:
    """(base scenario named in the space's header comment, space mapping) of every shipped plan space."""
    out = []
    for path in sorted((ROOT / "scenarios" / "plan").glob("*.yaml")):
        text = path.read_text()
        data = yaml.safe_load(text)
        found = re.search(r"rlsim plan (\S+) --space", text)
        if isinstance(data, dict) and "cluster" not in data and found:
            out.append((found.group(1), data))
    return out


SPACES = _plan_spaces()


# ---------------------------------------------------------------- shared mutation of a nested mapping


def leaves(node: Any, at: tuple = ()) -> list[tuple]:
    paths = [at] if at else []
    if isinstance(node, dict):
        for key, value in node.items():
            paths += leaves(value, (*at, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            paths += leaves(value, (*at, i))
    return paths


def _typo(key: str, draw) -> str:
    if len(key) < 3:
        return key + "x"
    i = draw(st.integers(1, len(key) - 1))
    return draw(st.sampled_from([key[:i] + key[i + 1:], key[:i] + key[i] + key[i:], key[:i] + "x" + key[i:]]))


@st.composite
def mutate_tree(draw, data: dict, rounds: tuple[int, int] = (1, 3)) -> tuple[dict, list]:
    """Replace values (plausible and hostile), delete keys, misspell keys, turn mappings into scalars."""
    data = copy.deepcopy(data)
    done = []
    for _ in range(draw(st.integers(*rounds))):
        paths = leaves(data)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        key, current = path[-1], parent[path[-1]]
        action = draw(st.sampled_from(["value", "value", "hostile", "delete", "typo", "scalar"]))
        if action == "delete":
            del parent[key]
        elif action == "typo" and isinstance(key, str):
            parent[_typo(key, draw)] = parent.pop(key)
        elif action == "scalar":
            parent[key] = draw(st.sampled_from([True, 1.5, "x", None]))
        elif action == "hostile":
            parent[key] = copy.deepcopy(draw(st.sampled_from(HOSTILE)))
        else:
            parent[key] = _plausible(current, draw)
        done.append((path, action))
    return data, done


def _plausible(value: Any, draw) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return draw(st.sampled_from([0, 1, 2, value + 1, max(value - 1, 0), value * 10, value // 10, 3, 7]))
    if isinstance(value, float):
        return draw(st.sampled_from([0.0, 1.0, 0.5, 1e-9, value * 10, value / 10, 0.999]))
    if isinstance(value, str):
        return draw(st.sampled_from(["", value.upper(), value + "x", "vllm", "sglang", "megatron"]))
    if isinstance(value, list):
        return draw(st.sampled_from([[], value[:1], value * 2]))
    return {}


# ---------------------------------------------------------------- scenarios with the newer features


@st.composite
def length_shape(draw) -> dict:
    """A lognormal response length with the shaping keys (truncation, group correlation, drift)."""
    cap = draw(st.sampled_from([64, 512, 4096]))
    shape: dict[str, Any] = {"kind": "lognormal", "mean": draw(st.sampled_from([16, 200, 1500, 50_000])),
                             "sigma": draw(st.sampled_from([0.05, 0.6, 1.2, 3.0])), "max": cap}
    if draw(st.booleans()):
        shape["truncated_fraction"] = draw(st.sampled_from([None, 0.0, 1e-17, 1e-12, 1e-6, 0.05, 0.5, 0.99, 1.0]))
    if draw(st.booleans()):
        shape["group_correlation"] = draw(st.sampled_from([0.0, 0.3, 0.9, 1.0, 1.5]))
    if draw(st.booleans()):
        shape["wrong_fraction"] = draw(st.sampled_from([0.0, 0.5, 1.0]))
        shape["wrong_length_ratio"] = draw(st.sampled_from([0.1, 1.0, 3.0]))
    if draw(st.booleans()):
        stage = {"from_step": draw(st.sampled_from([0, 1, 2])), "mean": draw(st.sampled_from([50, 800, 3000]))}
        if draw(st.booleans()):
            stage.update(to_mean=draw(st.sampled_from([10, 2000])), steps=draw(st.sampled_from([1, 3])))
        if draw(st.booleans()):
            stage["max"] = draw(st.sampled_from([1, 32, cap, cap * 2]))
        shape["mean_schedule"] = [stage]
    return shape


@st.composite
def calibration_block(draw) -> dict:
    factors = {name: draw(st.sampled_from([0.0, 0.01, 0.3, 1.0, 2.0, 50.0]))
               for name in draw(st.lists(st.sampled_from(FACTORS), max_size=3, unique=True))}
    block: dict[str, Any] = {"factors": factors}
    if draw(st.booleans()):
        block["response_length"] = {"mean": draw(st.sampled_from([1, 300, 5000])),
                                    "sigma": draw(st.sampled_from([0.1, 0.9, 10.5]))}
    if draw(st.booleans()):
        block["band_pct"] = draw(st.sampled_from([-1, 0, 5, 300]))
    return block


@st.composite
def trace_rows(draw) -> str:
    """A length-trace CSV: mostly good pairs, sometimes hostile rows."""
    header = draw(st.sampled_from(["prompt_len,response_len", "arrived_at,num_prefill_tokens,num_decode_tokens"]))
    width = header.count(",") + 1
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        nums = [str(draw(st.integers(1, 4096))) for _ in range(width)]
        if draw(st.integers(0, 9)) == 0:
            nums[draw(st.integers(0, width - 1))] = draw(st.sampled_from(["0", "-3", "nan", "1e30", "x", ""]))
        rows.append(",".join(nums))
    return "\n".join([header, *rows]) + "\n"


def apply_features(draw, data: dict, folder: Path) -> tuple[dict, list]:
    """Switch on a random set of features in a scenario mapping; the trace CSV is written into `folder`."""
    data = copy.deepcopy(data)
    done = []
    rollout = (data.get("roles") or {}).get("rollout")
    if isinstance(rollout, dict) and draw(st.booleans()):
        rollout.setdefault("engine", {})["kind"] = draw(st.sampled_from(ENGINE_KINDS))
        done.append(("engine.kind", rollout["engine"]["kind"]))
    workload = data.get("workload") or {}
    single_turn = workload.get("agent") is None and "length_trace" not in workload
    choice = draw(st.sampled_from(["shape", "trace", "none"])) if single_turn else "none"
    if choice == "shape":
        workload["response_length"] = draw(length_shape())
        done.append(("response_length", workload["response_length"]))
    elif choice == "trace":
        path = folder / f"trace-{draw(st.integers(0, 10**6))}.csv"
        path.write_text(draw(trace_rows()))
        workload.pop("prompt_length", None)
        workload.pop("response_length", None)
        workload["length_trace"] = {"path": str(path), "order": draw(st.sampled_from(["sequential", "shuffle"]))}
        done.append(("length_trace", path.read_text()[:200]))
    schedule = data.get("schedule") or {}
    if schedule.get("kind") == "fully-async" and draw(st.booleans()):
        schedule["interrupt"] = draw(st.sampled_from(INTERRUPTS))
        done.append(("interrupt", schedule["interrupt"]))
    if draw(st.integers(0, 2)) == 0:
        data["calibration"] = draw(calibration_block())
        done.append(("calibration", data["calibration"]))
    return data, done


# ---------------------------------------------------------------- logs


@st.composite
def mutated_log(draw) -> tuple[str, bytes, list]:
    path = draw(st.sampled_from(LOGS))
    lines = path.read_bytes().splitlines(keepends=True)
    done = []
    for _ in range(draw(st.integers(1, 3))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["drop", "repeat", "cut", "field", "number", "nul", "huge", "blank"]))
        line = lines[i]
        if action == "drop":
            del lines[i]
        elif action == "repeat":
            lines.insert(i, line)
        elif action == "cut":
            lines[i] = line[: draw(st.integers(0, max(0, len(line) - 1)))]
        elif action == "field":
            lines[i] = line.rstrip(b"\n") + b",extra,fields\n"
        elif action == "number":
            numbers = list(re.finditer(rb"-?\d+(\.\d+)?", line))
            if numbers:
                m = draw(st.sampled_from(numbers))
                new = draw(st.sampled_from([b"nan", b"inf", b"-1", b"0", b"1e400", b"", b"1e308", b"5e-324"]))
                lines[i] = line[: m.start()] + new + line[m.end():]
        elif action == "nul":
            lines[i] = line[:1] + b"\x00" + line[1:]
        elif action == "huge":
            lines[i] = line.rstrip(b"\n") + b"," + b"y" * 140_000 + b"\n"
        else:
            lines[i] = b"\n"
        done.append((i, action))
    return path.suffix, b"".join(lines), done
