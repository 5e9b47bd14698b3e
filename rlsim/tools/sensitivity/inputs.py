"""What `rlsim sensitivity` varies: the inputs (calibrated constants, distributions) and their ranges."""


from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pydantic import BaseModel

from rlsim.sim.api import PoolSpec, Problem, Scenario, ScenarioError, profile_override_fields

DEFAULT_PCT = 20.0
METRICS = ("throughput_tokens_per_s", "gpu_idle_fraction")
# The hardware profile's calibrated constants (and the NIC, which testbeds often differ in).
CALIBRATED = (
    "decode_eta_mem",
    "decode_eta_compute",
    "decode_fixed_overhead_ms",
    "prefill_eta_compute",
    "small_ops_eta_mem",
    "collective_latency_us",
    "nic_gbit_per_s",
)
# The all-to-all latencies of expert parallelism (costs/moe.py): varied only on a pool where a role has ep > 1,
# the in-node one where an ep group fits in a node, the other where one spans nodes.
EP_CALIBRATED = ("p2p_latency_us", "p2p_latency_inter_node_us")
# The grouped expert GEMM's efficiencies (docs/operators.md, "MoE layers"): varied on a pool whose engines run an
# MoE model, where the profile has them.
MOE_CALIBRATED = ("moe_gemm_eta_mem", "moe_gemm_eta_compute")
# An engine whose host overhead is 0 is varied 0 -> this (µs per running sequence per decode step):
# between the overlapped engines (~4-8 µs) and vLLM before 0.6 (~500 µs).
HOST_OVERHEAD_ABSOLUTE_US = 50.0

METRIC_UNITS = {
    "throughput_tokens_per_s": "tokens/s",
    "throughput_tokens_per_s_per_gpu": "tokens/s per GPU",
    "samples_per_s": "samples/s",
    "gpu_idle_fraction": "fraction of GPU time",
    "step_time_s": "s",
    "staleness_mean": "policy versions",
    "cost_per_million_tokens_usd": "USD per 1M tokens",
}


class SensitivityError(ScenarioError):
    """Bad `--vary` / `--metric` input: one line per problem, exit code 2."""


@dataclass(frozen=True)
class Input:
    """One varied input: its dotted key, its base and its two sides, and the `--set` lines of each side."""

    key: str
    base: float | None
    low: float
    high: float
    low_sets: tuple[str, ...]
    high_sets: tuple[str, ...]
    note: str = ""

    @property
    def label(self) -> str:
        return short_label(self.key)

    @property
    def unit(self) -> str:
        return input_unit(self.key)


@dataclass
class SensitivityResult:
    scenario: str
    metric: str
    metrics: tuple[str, ...]
    inputs: list[Input]
    base_summary: dict
    table: pd.DataFrame  # one row per input, sorted by swing of `metric`
    skipped: list[str]  # inputs found but not varied, with why
    pct: float | None = None  # the default inputs' ± percentage (None: --vary)


# ---------------------------------------------------------------- names and units


def short_label(key: str) -> str:
    """`cluster.pools.gen.profile_overrides.train_mfu` -> `gen.train_mfu`; roles/workload prefixes dropped."""
    out = re.sub(r"^cluster\.pools\.([^.]+)\.profile_overrides\.", r"\1.", key)
    out = re.sub(r"^cluster\.pools\.", "", out)
    out = re.sub(r"^roles\.([^.]+)\.engine\.", r"\1.", out)
    out = re.sub(r"^workload\.agent\.", "agent.", out)
    out = re.sub(r"^workload\.", "", out)
    out = re.sub(r"^environments\.tools\.", "tool.", out)
    return out


def input_unit(key: str) -> str:
    """A unit for an input, from the name's suffix (the schema's names carry their unit)."""
    name = key.rsplit(".", 1)[-1]
    for suffix, unit in (
        ("_gbit_per_s", "Gbit/s"), ("_ms", "ms"), ("_us", "µs"), ("_s", "s"), ("_tflops", "TFLOP/s"),
        ("_gb_per_s", "GB/s"), ("_tb_per_s", "TB/s"), ("_gb", "GB"),
    ):
        if name.endswith(suffix):
            return unit
    if "eta" in name or "mfu" in name or "fraction" in name or "ratio" in name:
        return "fraction"
    if re.search(r"(length|tokens_per_turn)\.(mean|min|max|value)$", key) or key.endswith("tokens_per_turn"):
        return "tokens"
    if key.endswith("turns") or ".turns." in key:
        return "turns"
    if re.search(r"\.latency(\.(median|value|min|max))?$", key):
        return "s"
    return ""


def metric_unit(metric: str) -> str:
    return METRIC_UNITS.get(metric, "")


def format_number(value: float | None) -> str:
    """Compact, for tables and labels."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int) or float(value).is_integer() and abs(value) >= 1:
        return f"{int(value):,}" if abs(value) >= 1e4 else f"{int(value)}"
    return f"{value:,.0f}" if abs(value) >= 1e4 else f"{value:.4g}"


def _yaml_number(value: float) -> str:
    """A number as a `--set` value that yaml.safe_load reads back exactly (YAML 1.1 needs `1.0e-05`)."""
    if isinstance(value, int):
        return str(value)
    text = repr(float(value))
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


# ---------------------------------------------------------------- bounds and sides


def _bounds(metadata: Sequence[Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in metadata:
        for kind in ("gt", "ge", "lt", "le"):
            value = getattr(item, kind, None)
            if value is not None:
                out[kind] = value
    return out


def _clip(value: float, bounds: dict[str, float], integer: bool) -> float:
    value = round(value) if integer else float(f"{value:.12g}")  # 0.32, not 0.32000000000000006
    if "ge" in bounds:
        value = max(value, bounds["ge"])
    if "le" in bounds:
        value = min(value, bounds["le"])
    if "gt" in bounds and value <= bounds["gt"]:
        value = bounds["gt"] + 1 if integer else bounds["gt"] + max(abs(bounds["gt"]) * 1e-6, 1e-9)
    if "lt" in bounds and value >= bounds["lt"]:
        value = bounds["lt"] - 1 if integer else bounds["lt"] - max(abs(bounds["lt"]) * 1e-6, 1e-9)
    return int(value) if integer else float(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _scaled_input(
    key: str, base: float, pct_low: float, pct_high: float, bounds: dict[str, float], note: str = ""
) -> Input:
    integer = isinstance(base, int)
    low = _clip(base * (1 - pct_low / 100), bounds, integer)
    high = _clip(base * (1 + pct_high / 100), bounds, integer)
    clipped = []
    if not math.isclose(low, base * (1 - pct_low / 100)) and not integer:
        clipped.append("low")
    if not math.isclose(high, base * (1 + pct_high / 100)) and not integer:
        clipped.append("high")
    if clipped:
        note = "; ".join(filter(None, [note, f"{' and '.join(clipped)} clipped to the valid range"]))
    return Input(key, base, low, high, (f"{key}={_yaml_number(low)}",), (f"{key}={_yaml_number(high)}",), note)


# ---------------------------------------------------------------- looking a dotted path up


def lookup(scn: Scenario, key: str) -> tuple[Any, dict[str, float]]:
    """The current value at a `--set` dotted path of a validated scenario, and the field's bounds.

    `cluster.pools.P.profile_overrides.F` reads the pool's effective hardware profile (F need not be
    overridden yet); a pool's unset `nic_gbit_per_s` reads the profile's. Raises KeyError(why).
    """
    parts = key.split(".")
    node: Any = scn
    bounds: dict[str, float] = {}
    for i, part in enumerate(parts):
        rest = parts[i + 1:]
        if isinstance(node, PoolSpec) and part == "profile_overrides" and len(rest) == 1:
            from rlsim.sim.api import HardwareProfile

            field = rest[0]
            if field not in profile_override_fields():
                raise KeyError(f"not a hardware profile number; known: {', '.join(profile_override_fields())}")
            value = getattr(node.profile(), field)
            if value is None:
                raise KeyError(f"{field} is not set on this pool's profile: " + (
                    "training and forward passes are priced from the operator fit and their MFU is a result "
                    "(vary the fitted efficiencies instead, e.g. prefill_eta_compute)" if field.endswith("_mfu")
                    else "nothing to vary"))
            return value, _bounds(HardwareProfile.model_fields[field].metadata)
        if isinstance(node, BaseModel):
            fields = type(node).model_fields
            if part not in fields:
                where = ".".join(parts[:i]) or "the scenario"
                raise KeyError(f"{where} has no key {part!r} (keys: {', '.join(fields)})")
            bounds = _bounds(fields[part].metadata)
            value = getattr(node, part)
            if value is None and isinstance(node, PoolSpec) and part == "nic_gbit_per_s" and not rest:
                value = node.profile().nic_gbit_per_s
            node = value
        elif isinstance(node, dict):
            if part not in node:
                where = ".".join(parts[:i])
                raise KeyError(f"{where} has no key {part!r} (keys: {', '.join(map(str, node))})")
            node, bounds = node[part], {}
        elif isinstance(node, list) and re.fullmatch(r"-?\d+", part) and -len(node) <= int(part) < len(node):
            node, bounds = node[int(part)], {}
        else:
            raise KeyError(f"{'.'.join(parts[:i])} is not a mapping")
    return node, bounds


# ---------------------------------------------------------------- default inputs


def _distribution_inputs(
    prefix: str, dist: BaseModel, pct: float, skipped: list[str], center_only: bool = False
) -> list[Input]:
    """A length/latency distribution's shape parameters, as the distribution declares them (`shape_fields`:
    caps and lower bounds are not among them).

    `center_only`: just what moves its centre (`centre_fields`: a lognormal's mean or median, a fixed value,
    a uniform law's min and max scaled together) - for agent turns / tokens per turn and tool latencies.
    """
    kind = getattr(dist, "kind", type(dist).__name__)
    fields = type(dist).model_fields
    names = dist.centre_fields if center_only else dist.shape_fields
    if not names:
        skipped.append(f"{prefix}: {kind} distribution (no shape parameter: resampled from a file), not varied")
        return []
    if center_only and len(names) > 1:
        return [_centre_input(prefix, dist, names, pct)]
    out = []
    for name in names:
        value = getattr(dist, name)
        if value is None:
            continue
        if value == 0:
            skipped.append(f"{prefix}.{name}: 0 (off), ±{pct:g}% would not change it; use --vary {prefix}.{name}=lo:hi")
            continue
        out.append(_scaled_input(f"{prefix}.{name}", value, pct, pct, _bounds(fields[name].metadata)))
    return out


def _centre_input(prefix: str, dist: BaseModel, names: tuple[str, ...], pct: float) -> Input:
    """Several fields that move a law's centre together (a uniform law's min and max): each scaled by ±pct, the
    input read as the law's mean (`expectation()`) on each side."""
    fields = type(dist).model_fields
    sides = []
    for factor in (1 - pct / 100, 1 + pct / 100):
        new = {n: _clip(getattr(dist, n) * factor, _bounds(fields[n].metadata), isinstance(getattr(dist, n), int))
               for n in names}
        sides.append((dist.model_copy(update=new).expectation(),
                      tuple(f"{prefix}.{n}={_yaml_number(v)}" for n, v in new.items())))
    (low, low_sets), (high, high_sets) = sides
    return Input(f"{prefix}.mean", dist.expectation(), low, high, low_sets, high_sets,
                 f"{dist.kind}: {' and '.join(names)} scaled together")


def _host_overhead(role: str, engine: BaseModel, hw) -> float:
    """The engine's host time per running sequence (µs): its own value, else its engine kind's."""
    value = getattr(engine, "host_overhead_per_seq_us", None)
    if value is not None:
        return value
    overheads = getattr(engine, "overheads", None)
    if overheads is None:
        return 0.0
    try:
        return float(getattr(overheads(hw), "host_per_seq_s", 0.0)) * 1e6
    except Exception:  # an engine model this module does not know: treat as unset
        return 0.0


def default_inputs(scn: Scenario, pct: float = DEFAULT_PCT) -> tuple[list[Input], list[str]]:
    """What to vary when no `--vary` is given, discovered from the scenario; and what was skipped, with why."""
    inputs: list[Input] = []
    skipped: list[str] = []
    for name, pool in scn.cluster.pools.items():
        unused = _unused_constants(scn, name)
        if unused:
            skipped.append(f"cluster.pools.{name}: {', '.join(unused)}: nothing on this pool uses them")
        for field in [f for f in CALIBRATED if f not in unused] + _ep_constants(scn, name) + _moe_constants(scn, name):
            if field == "nic_gbit_per_s" and pool.nic_gbit_per_s is not None:
                key = f"cluster.pools.{name}.nic_gbit_per_s"
            else:
                key = f"cluster.pools.{name}.profile_overrides.{field}"
            value, bounds = lookup(scn, key)
            if value is None:
                skipped.append(f"{key}: not in the profile (derived from collective_latency_us)")
                continue
            if value == 0:
                skipped.append(f"{key}: 0 in the profile, ±{pct:g}% would not change it")
                continue
            inputs.append(_scaled_input(key, value, pct, pct, bounds))
    for role_name in ("rollout", "reward"):
        role = scn.roles.get(role_name)
        if role is None or role.engine is None:
            continue
        key = f"roles.{role_name}.engine.host_overhead_per_seq_us"
        base = _host_overhead(role_name, role.engine, scn.cluster.pools[role.pool].profile())
        if base == 0:
            high = HOST_OVERHEAD_ABSOLUTE_US
            inputs.append(Input(
                key, 0.0, 0.0, high, (f"{key}=0.0",), (f"{key}={_yaml_number(high)}",),
                f"base 0: varied absolutely, 0 -> {high:g} µs",
            ))
        else:
            _, bounds = lookup(scn, key)
            inputs.append(_scaled_input(key, base, pct, pct, bounds))
    agent = scn.workload.agent
    if agent is None:
        inputs += _distribution_inputs("workload.response_length", scn.workload.response_length, pct, skipped)
    else:
        skipped.append("workload.response_length: multi-turn trajectories use workload.agent instead")
    if agent is not None:
        for name in ("turns", "tokens_per_turn"):
            inputs += _distribution_inputs(f"workload.agent.{name}", getattr(agent, name), pct, skipped, True)
        used_tools = [t for t, p in agent.tool_mix.items() if p > 0]
    else:
        used_tools = []
    for tool in used_tools:
        spec = scn.environments.tools.get(tool)
        if spec is not None:
            inputs += _distribution_inputs(f"environments.tools.{tool}.latency", spec.latency, pct, skipped, True)
    kept = []
    for inp in inputs:
        if inp.low == inp.base == inp.high:
            skipped.append(f"{inp.key}: {format_number(inp.base)}, ±{pct:g}% rounds back to it")
        else:
            kept.append(inp)
    return kept, skipped


_DECODE_CONSTANTS = ("decode_eta_mem", "decode_eta_compute", "decode_fixed_overhead_ms", "prefill_eta_compute")


def _unused_constants(scn: Scenario, pool: str) -> list[str]:
    """Calibrated constants no role on `pool` uses: the decode ones need an engine there (the GEMM shares of
    peak, or a trained or forward role), the memory-bound operators' share a trained or forward role."""
    roles = {name: role for name, role in scn.roles.items() if role.pool == pool}
    engines = any(role.engine is not None for role in roles.values())
    trained = any(name in ("actor", "critic") for name in roles)
    forwards = any(name in ("actor", "critic", "reference") or role.engine is None for name, role in roles.items()
                   if name != "rollout")
    # The GEMM shares of peak price the training and forward passes too (costs/training_ops.py).
    unused = [] if engines else [c for c in _DECODE_CONSTANTS if not ((trained or forwards) and "compute" in c)]
    unused += [] if trained or forwards else ["small_ops_eta_mem"]
    return unused


def _ep_constants(scn: Scenario, pool: str) -> list[str]:
    """The all-to-all latencies roles on `pool` pay: an ep group within a node pays the in-node one, one wider
    than a node the cross-node one (costs/moe.py `ep_alltoall_time`)."""
    per_node = scn.cluster.pools[pool].gpus_per_node
    eps = [role.parallel.ep for role in scn.roles.values() if role.pool == pool and role.parallel.ep > 1
           and scn.models[role.model].num_experts]
    return [field for field, used in zip(EP_CALIBRATED, (any(ep <= per_node for ep in eps),
                                                        any(ep > per_node for ep in eps)), strict=True) if used]


def _moe_constants(scn: Scenario, pool: str) -> list[str]:
    """The grouped-GEMM efficiencies, where an engine on `pool` runs an MoE model and its profile has them."""
    if not any(role.pool == pool and role.engine is not None and scn.models[role.model].num_experts
               for role in scn.roles.values()):
        return []
    profile = scn.cluster.pools[pool].profile()
    return [f for f in MOE_CALIBRATED if getattr(profile, f) is not None]


# ---------------------------------------------------------------- --vary


_PCT = re.compile(r"^(?:±|\+-|\+/-)?\s*(\d+(?:\.\d+)?)\s*%$")


def parse_vary(scn: Scenario, spec: str) -> Input:
    """`key=±20%` (also `+-20%`, `20%`) or `key=lo:hi` (absolute values); raises SensitivityError."""
    key, sep, raw = spec.partition("=")
    key, raw = key.strip(), raw.strip()

    def bad(why: str) -> SensitivityError:
        return SensitivityError("--vary", [Problem(spec, why)])

    if not sep or not key or not raw:
        raise bad("expected dotted.path=±P% or dotted.path=lo:hi")
    try:
        base, bounds = lookup(scn, key)
    except KeyError as exc:
        raise bad(f"{key}: {exc.args[0]}") from None
    if base is not None and not _is_number(base):
        raise bad(f"{key} is {type(base).__name__ if not isinstance(base, BaseModel) else 'a mapping'}, not a number")
    m = _PCT.match(raw)
    if m:
        pct = float(m.group(1))
        if base is None:
            raise bad(f"{key} is unset (null): give absolute values, {key}=lo:hi")
        if not 0 < pct < 100 and any(k in bounds for k in ("gt", "ge")) or pct <= 0:
            raise bad(f"percentage must be > 0{' and < 100 for a positive field' if pct > 0 else ''}, got {raw}")
        if base == 0:
            raise bad(f"{key} is 0: ±{pct:g}% would not change it; give absolute values, {key}=lo:hi")
        return _scaled_input(key, base, pct, pct, bounds)
    lo_text, colon, hi_text = raw.partition(":")
    if not colon:
        raise bad(f"expected ±P% or lo:hi, got {raw!r}")
    try:
        lo, hi = (float(t) for t in (lo_text, hi_text))
    except ValueError:
        raise bad(f"lo and hi must be numbers, got {raw!r}") from None
    if lo > hi:
        raise bad(f"lo ({lo:g}) must be <= hi ({hi:g})")
    if isinstance(base, int):
        if not (lo.is_integer() and hi.is_integer()):
            raise bad(f"{key} is an integer, got {raw!r}")
        lo, hi = int(lo), int(hi)
    return Input(key, base, lo, hi, (f"{key}={_yaml_number(lo)}",), (f"{key}={_yaml_number(hi)}",), "absolute")


# ---------------------------------------------------------------- running


