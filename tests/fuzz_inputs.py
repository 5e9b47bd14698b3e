"""Hypothesis strategies for tests/test_fuzz.py: the rooms beyond a scenario file.

- `featured`: a shrunk shipped scenario with the newer features switched on at random (engine kinds,
  length shapes with truncation, group correlation, drift and replayed traces, drain mode, calibration
  overlays), plausible and hostile values mixed;
- `mutated_import`: a framework config (verl dump, ROLL, AReaL fixtures) with values replaced, keys
  removed or misspelt, sections turned into scalars;
- `mutated_log`: a metrics log (the fixtures of `rlsim calibrate --from-log`) with lines dropped,
  repeated or cut, fields added, numbers replaced, NUL bytes and huge fields;
- `mutated_space`: a shipped plan space with values replaced, keys removed or misspelt;
- `apply_rooms`: a shrunk shipped scenario with the newer schedules' rooms switched on (verl V1 lending and
  colocate_async, online re-splitting, in-flight weight updates, affinity routing, LoRA, tail re-sharding
  with the placement shortcuts, MoE expert parallelism, a GPU without NVLink);
- `mutated_ops_folder`: a small operator-profile folder for `rlsim calibrate ops` with rows of one
  parallelism dropped, files header-only, empty or removed, columns removed, cells nan / inf / 0 / text;
- `plan_target_args`: `rlsim plan --target ... --gpu ...` options, plausible and hostile.
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


# ---------------------------------------------------------------- the rooms of the newer schedules

HARDWARE = ["h100-sxm", "a100-80gb", "h20", "l40s", "mi300x"]  # l40s: PCIe only, no NVLink
_TRAINING_KINDS = ("hybridflow", "one-step-off", "fully-async", "verl-v1")  # schedule.lora
_ASYNC_ONLY = ("interrupt", "staleness_threshold", "partial_rollout", "in_flight_weight_updates",
               "max_trajectory_age_steps")  # fully-async keys verl-v1 has not


def _pick(draw, plausible: list, hostile: list | None = None) -> Any:
    """Mostly a plausible value, now and then a hostile one."""
    if hostile and draw(st.integers(0, 5)) == 0:
        return copy.deepcopy(draw(st.sampled_from(hostile)))
    return draw(st.sampled_from(plausible))


def apply_rooms(draw, data: dict) -> tuple[dict, list]:
    """Switch on the newer schedules' rooms in a scenario mapping, at random and mostly where they belong:
    verl V1 lending and colocate_async (a fully-async scenario may become verl-v1 first), online re-splitting,
    in-flight weight updates and trajectory age, affinity routing, LoRA, tail re-sharding with the placement
    shortcuts, MoE expert parallelism, and a GPU without NVLink."""
    data = copy.deepcopy(data)
    done: list = []
    schedule = data.setdefault("schedule", {})
    kind = schedule.get("kind")
    if kind == "fully-async" and draw(st.booleans()):
        for key in _ASYNC_ONLY:
            schedule.pop(key, None)
        schedule["kind"] = kind = "verl-v1"
        done.append(("kind", "verl-v1"))
    if kind == "verl-v1" and draw(st.integers(0, 3)) > 0:
        mode = draw(st.sampled_from(["separate_async", "colocate_async"]))
        schedule["trainer_mode"] = mode
        schedule.pop("resplit", None)
        lend: dict[str, Any] = {"enable_switch": mode == "separate_async" or draw(st.integers(0, 4)) == 0}
        if draw(st.booleans()):
            lend["switch_threshold_ratio"] = _pick(draw, [0.0, 0.1, 0.5, 1.0], [-1, 2.0, float("nan")])
        if draw(st.booleans()):
            lend["adaptive_switch_threshold"] = draw(st.booleans())
        if draw(st.booleans()):
            lend["engine_start_s"] = _pick(draw, [0.0, 1.0, 30.0, 600.0], [-1, 1e300])
        schedule["hybrid_rollout"] = lend
        if draw(st.booleans()):
            schedule["switch_overhead_s"] = _pick(draw, [0.0, 0.3, 5.0])
        done.append(("verl-v1", mode, lend))
    if kind in ("fully-async", "verl-v1"):
        if draw(st.integers(0, 2)) == 0 and not (schedule.get("hybrid_rollout") or {}).get("enable_switch") \
                and schedule.get("trainer_mode") != "colocate_async":
            resplit: dict[str, Any] = {}
            trigger = draw(st.sampled_from(["interval_steps", "imbalance", "queue_groups", "none"]))
            if trigger != "none":
                resplit[trigger] = _pick(draw, {"interval_steps": [1, 2], "imbalance": [0.0, 0.2, 1.0],
                                                "queue_groups": [1, 4, 64]}[trigger], [0, -1, None])
            for key, values in (("window", [1, 3]), ("min_gain", [0.0, 0.1, 0.9]), ("reconfig_s", [0.0, 5.0, 1e4])):
                if draw(st.booleans()):
                    resplit[key] = draw(st.sampled_from(values))
            schedule["resplit"] = resplit
            done.append(("resplit", resplit))
        if draw(st.integers(0, 2)) == 0:
            routing: dict[str, Any] = {"policy": draw(st.sampled_from(["least-loaded", "affinity",
                                                                       "affinity-bounded"]))}
            if draw(st.booleans()):
                routing["load_bound"] = _pick(draw, [0.0, 0.25, 1.0, 10.0], [-0.5, float("inf")])
            schedule["routing"] = routing
            done.append(("routing", routing))
    if kind == "fully-async" and draw(st.integers(0, 2)) == 0:
        for key in ("interrupt", "partial_rollout", "staleness_threshold", "max_head_offpolicyness"):
            schedule.pop(key, None)
        schedule["in_flight_weight_updates"] = True
        if draw(st.booleans()):
            schedule["max_trajectory_age_steps"] = _pick(draw, [0, 1, 2, 4], [-1, 10**6])
        done.append(("in-flight updates", schedule.get("max_trajectory_age_steps")))
    if kind in _TRAINING_KINDS and draw(st.integers(0, 3)) == 0:
        lora: dict[str, Any] = {"rank": _pick(draw, [1, 8, 32, 256], [0, 4097])}
        if draw(st.booleans()):
            lora["targets"] = draw(st.sampled_from(["all-linear", "attention"]))
        if draw(st.booleans()):
            lora["sync"] = draw(st.sampled_from(["nccl", "store"]))
        schedule["lora"] = lora
        done.append(("lora", lora))
    if kind == "hybridflow" and draw(st.booleans()):
        tail: dict[str, Any] = {}
        for key, values, hostile in (("factor", [1, 2, 4, 8], [0, 3, 1000]),
                                     ("threshold", [0.01, 0.05, 0.5, 1.0], [0.0, -0.1, float("nan")]),
                                     ("mode", ["migrate", "recompute"], ["teleport"]),
                                     ("restart_s", [0.0, 1.0, 1000.0], [-1])):
            if draw(st.booleans()):
                tail[key] = _pick(draw, values, hostile)
        schedule["tail_reshard"] = tail
        done.append(("tail_reshard", tail))
    if kind == "hybridflow" and draw(st.integers(0, 2)) == 0:
        schedule["placement"] = draw(st.sampled_from(["colocate", "split", "standalone", "disaggregated"]))
        done.append(("placement", schedule["placement"]))
    roles = data.get("roles") or {}
    rollout = roles.get("rollout")
    if isinstance(rollout, dict) and draw(st.integers(0, 3)) == 0:
        models = data.get("models") or {}
        if draw(st.booleans()) and rollout.get("model") in models:
            models[rollout["model"]] = {"preset": "qwen3-30b-a3b"}  # an MoE policy in place of the dense one
        ep = _pick(draw, [1, 2, 4, 8], [3, 16, 0])
        for role in roles.values():
            if isinstance(role, dict) and isinstance(role.get("parallel"), dict) and draw(st.booleans()):
                role["parallel"]["ep"] = ep
        rollout.setdefault("parallel", {})["ep"] = ep
        done.append(("moe ep", ep, models.get(rollout.get("model"))))
    pools = (data.get("cluster") or {}).get("pools") or {}
    if pools and draw(st.integers(0, 3)) == 0:
        gpu = draw(st.sampled_from(HARDWARE))
        for pool in pools.values():
            if isinstance(pool, dict):
                pool["hardware"] = gpu
        done.append(("hardware", gpu))
    return data, done


# ---------------------------------------------------------------- calibrate ops folders

OPS = ROOT / "hardware_profiles" / "operators"
# (GPU, {path in the folder: (source file, keep every n-th data row)}): small folders that fit in well under a second
# and still hold every kind of file `calibrate ops` reads (dense, linear_op with its kernel-only twin, moe, network).
OPS_FOLDERS = [
    ("h100", {"compute/h100/microsoft/phi-2/mlp.csv": (OPS / "vidur/compute/h100/microsoft/phi-2/mlp.csv", 6),
              "network/h100_dgx/all_reduce.csv": (OPS / "vidur/network/h100_dgx/all_reduce.csv", 8),
              "network/h100_dgx/send_recv.csv": (OPS / "vidur/network/h100_dgx/send_recv.csv", 8)}),
    ("a800", {"compute/a800/meta-llama/Llama-2-7b-hf/mlp.csv":
              (OPS / "frontier/compute/a800/meta-llama/Llama-2-7b-hf/mlp.csv", 2),
              "compute/a800/qwen3-a3b-30b-moe/moe.csv": (OPS / "frontier/compute/a800/qwen3-a3b-30b-moe/moe.csv", 25),
              "network/a800_dgx/all_reduce.csv": (OPS / "frontier/network/a800_dgx/all_reduce.csv", 10)}),
    ("h800", {f"compute/h800/Llama-3.1-405B-Instruct-FP8/{name}":
              (OPS / f"frontier/compute/h800/Llama-3.1-405B-Instruct-FP8/{name}", 2)
              for name in ("linear_op.csv", "linear_op_kernel_only.csv")}),
]
CELLS = ["nan", "NaN", "inf", "-inf", "0", "-1", "", "x", "1e308", "5e-324", "1e400", "8", "1"]


GEMM_TIMES = re.compile(r"time_stats\.(attn_pre_proj|attn_post_proj|mlp_up_proj|mlp_down_proj)\.")


def _thinned(path: Path, every: int, gemms: bool) -> list[list[str]]:
    """Every `every`-th row of a CSV; without `gemms` the dense GEMMs' time columns are left out (each GEMM
    kind's fit takes seconds whatever its rows, the memory-bound operators' a few milliseconds)."""
    import csv

    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    keep = [j for j, name in enumerate(rows[0]) if gemms or not GEMM_TIMES.match(name)]
    return [[r[j] for j in keep if j < len(r)] for r in [rows[0], *rows[1::every]]]


@st.composite
def mutated_ops_folder(draw) -> tuple[str, dict[str, bytes], list]:
    """An operator-profile folder (relative path -> bytes) with files, rows, columns and cells damaged: rows of
    one parallelism dropped (no EP 8, no TP 8), header-only or empty files, a file removed, a column removed,
    cells set to nan / inf / 0 / text, a ragged row, a NUL byte."""
    import csv
    import io

    gpu, sources = draw(st.sampled_from(OPS_FOLDERS))
    gemms = draw(st.integers(0, 19)) == 19  # the dense GEMM fits (seconds each) in one example of twenty
    tables = {name: _thinned(path, every, gemms) for name, (path, every) in sources.items()}
    done: list = [("with the GEMMs' columns" if gemms else "no GEMM columns")]
    for _ in range(draw(st.integers(1, 4))):
        name = draw(st.sampled_from(sorted(tables)))
        rows = tables[name]
        action = draw(st.sampled_from(["cell", "cell", "cell", "drop-value", "header-only", "empty", "remove",
                                       "column", "ragged", "nul"]))
        if action == "remove":
            del tables[name]
            if not tables:
                break
        elif action == "header-only":
            del rows[1:]
        elif action == "empty":
            del rows[:]
        elif action == "column" and rows and rows[0]:
            j = draw(st.integers(0, len(rows[0]) - 1))
            for r in rows:
                del r[j:j + 1]
        elif action == "drop-value" and len(rows) > 1:
            j = draw(st.integers(0, len(rows[0]) - 1))
            value = draw(st.sampled_from(sorted({r[j] for r in rows[1:] if j < len(r)} or {""})))
            rows[1:] = [r for r in rows[1:] if j >= len(r) or r[j] != value]  # e.g. every EP 8 row
            action = f"drop {rows[0][j]}={value}"
        elif action == "ragged" and len(rows) > 1:
            rows[draw(st.integers(1, len(rows) - 1))].extend(["1", "2"])
        elif action == "nul" and len(rows) > 1:
            rows[draw(st.integers(1, len(rows) - 1))][0] += "\x00"
        elif action == "cell" and len(rows) > 1:
            i, j = draw(st.integers(1, len(rows) - 1)), draw(st.integers(0, len(rows[0]) - 1))
            if j < len(rows[i]):
                rows[i][j] = draw(st.sampled_from(CELLS))
                action = f"cell {rows[0][j]}={rows[i][j]!r}"
        done.append((name, action))
    files = {}
    for name, rows in tables.items():
        out = io.StringIO()
        csv.writer(out).writerows(rows)
        files[name] = out.getvalue().encode()
    return gpu, files, done


# ---------------------------------------------------------------- plan --target

TARGETS = ["tokens_per_s=500", "tokens_per_s=1e6", "step_time_s=60", "step_time_s=0.001", "steps=10,deadline_h=1",
           "steps=1.5,deadline_h=1", "tokens_per_s=0", "tokens_per_s=-1", "tokens_per_s=nan", "tokens_per_s=inf",
           "tokens_per_s=x", "tokens_per_s=", "tokens_per_s=1e12", "step_time_s=1e308", "steps=1e12,deadline_h=1",
           "steps=1,deadline_h=5e-324", "tokens_per_s=5e-324", "steps=10", "deadline_h=2", "throughput=5",
           "tokens_per_s=500,step_time_s=9", "", ",", "tokens_per_s=500,"]
PLAUSIBLE_TARGETS = 5  # the first five targets and GPU types are plausible, the rest edges and hostile
PLAUSIBLE_GPUS = 5
GPU_TYPES = ["h100-sxm:1", "h100-sxm:2", "a100-80gb:2", "h20:2", "l40s:2", "h100-sxm:0", "h100-sxm:-3",
             "h100-sxm:x", "h100-sxm:1.5", "h100-sxm:1e20", "h100-sxm:99999999999999999999", "h100x:2", ":", "",
             "H100-SXM:2"]


@st.composite
def plan_target_args(draw) -> list[str]:
    """`rlsim plan` arguments with --target and --gpu options, mostly small, sometimes hostile."""
    # One in three draws from the plausible heads of the lists, so that some searches reach an answer (exit 0)
    args = ["--target", draw(st.sampled_from(TARGETS[:PLAUSIBLE_TARGETS] if draw(st.integers(0, 2)) == 0
                                             else TARGETS))]
    gpus = GPU_TYPES[:PLAUSIBLE_GPUS] if draw(st.integers(0, 2)) == 0 else GPU_TYPES
    for gpu in draw(st.lists(st.sampled_from(gpus), min_size=1, max_size=2)):
        args += ["--gpu", gpu]
    if draw(st.integers(0, 3)) == 0:
        args += ["--budget-usd-per-hour", draw(st.sampled_from(["1", "0", "-1", "nan", "1e300"]))]
    if draw(st.integers(0, 3)) == 0:
        args += ["--max-gpus", draw(st.sampled_from(["1", "2", "0", "-1"]))]
    return args
