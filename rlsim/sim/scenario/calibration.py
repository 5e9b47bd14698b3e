"""A calibration overlay: factors fitted to one run's logs, applied to any scenario (`calibration:`).

`rlsim calibrate --from-log LOG --scenario S --out cal.yaml` writes a file whose top level is one
`calibration:` block. A scenario takes it as an inline block, or as a path (`calibration: cal.yaml`,
or on the command line `--set calibration=cal.yaml`, which works for run, sweep, compare and
sensitivity alike). The factors are named by what they mean, not by where they live, so an overlay
fitted on a colocated scenario applies to a split one with other pool names:

- `train_mfu`, `forward_mfu` -> `profile_overrides` of every pool holding a training / forward role
  (actor, critic, ref, and a reward model without an engine);
- `decode_step_overhead_ms` -> `roles.rollout.engine.step_overhead_ms`;
- `switch_overhead_s` -> `schedule.switch_overhead_s` (only a hybridflow schedule uses it);
- `rule_reward_s_per_sample` -> `algorithm.rule_reward_s_per_sample` (driver-side work per sample);
- `response_length` -> mean / sigma (/ max) of a lognormal `workload.response_length`, only with
  `apply_response_length: true`: the law describes the logged job's responses, which are part of the
  job, not of the cluster's calibration, so an overlay leaves the target's workload as it was unless
  asked (`rlsim run` prints which way it went).

The overlay wins over the scenario's own values. `band_pct` is the ± band the calibration carries
into predictions (`rlsim run` prints step time ± band). Pure dict transform: nothing is simulated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlsim.sim.scenario.errors import Problem

FactorName = Literal[
    "decode_step_overhead_ms", "train_mfu", "forward_mfu", "switch_overhead_s", "rule_reward_s_per_sample"
]
_TRAIN_ROLES = ("actor", "critic")
_FORWARD_ROLES = ("actor", "critic", "ref", "reward")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class PhaseFit(_Strict):
    """One logged phase: the logged mean, what the calibrated scenario simulates, and the residual."""

    logged_s: float
    fitted_s: float | None = None
    residual_pct: float | None = None
    used_in_fit: bool = True


class LengthLaw(_Strict):
    """A lognormal response-length law fitted to logged mean / max / clip ratio."""

    mean: float = Field(gt=0, description="Mean of the untruncated lognormal (the scenario's `mean`)")
    sigma: float = Field(gt=0, le=10)
    max: int | None = Field(default=None, gt=0, description="Cap (max_response_length); null keeps the target's")


class CalibrationSpec(_Strict):
    """Factors fitted by `rlsim calibrate --from-log`; see the module docstring for where each one goes."""

    fitted_from: str = Field(default="", description="The log, its format and the scenario it was fitted on")
    hardware: str | None = Field(default=None, description="GPU the factors were fitted on; other GPUs are refused")
    factors: dict[FactorName, float] = Field(default_factory=dict)
    response_length: LengthLaw | None = None
    apply_response_length: bool = Field(
        default=False, description="Replace the job's workload.response_length by `response_length` (opt-in: "
        "the logged job's lengths are workload, not a calibration factor)",
    )
    band_pct: float = Field(default=0.0, ge=0, description="± band (%) carried into predicted figures")
    phases: dict[str, PhaseFit] = Field(default_factory=dict, description="The fit, phase by phase (informative)")
    notes: list[str] = Field(default_factory=list)

    def factor_bounds_ok(self) -> list[str]:
        bad = [f"factors.{k}: must be > 0, got {v}" for k, v in self.factors.items() if not v > 0]
        bad += [f"factors.{k}: an efficiency must be <= 1, got {v}" for k, v in self.factors.items()
                if k.endswith("_mfu") and v > 1]
        return bad


def read_overlay(path: Path) -> dict:
    """The `calibration:` mapping of an overlay file (raises ValueError with one line)."""
    from rlsim.sim.yaml_input import YamlInputError, parse_yaml, read_text_bounded

    try:
        data, _ = parse_yaml(read_text_bounded(path))
    except FileNotFoundError:
        raise ValueError(f"calibration file {path} not found") from None
    except YamlInputError as exc:
        raise ValueError(f"{path}: {exc.message}") from None
    if not isinstance(data, dict) or set(data) != {"calibration"} or not isinstance(data["calibration"], dict):
        raise ValueError(f"{path}: expected one top-level `calibration:` mapping (as `rlsim calibrate --out` writes)")
    return data["calibration"]


def _overlay_mapping(value: Any, base_dir: Path | None) -> dict:
    if isinstance(value, dict):
        return value
    if not isinstance(value, str | Path):
        raise ValueError(f"expected a calibration block or the path of an overlay file, got {type(value).__name__}")
    path = Path(value).expanduser()
    if not path.is_absolute() and not path.exists() and base_dir is not None:
        path = Path(base_dir) / path  # relative to the scenario file when not found from here
    return read_overlay(path)


def apply_calibration(data: dict, base_dir: Path | None = None) -> tuple[dict, list[Problem]]:
    """Apply a scenario mapping's `calibration:` (block or file path) to the mapping itself.

    Returns the new mapping (the block inline, validated) and the problems found; on a problem the
    block is dropped so that validation reports nothing twice.
    """
    if data.get("calibration") is None:
        return data, []
    raw = None
    try:
        raw = _overlay_mapping(data["calibration"], base_dir)
        spec = CalibrationSpec.model_validate(raw)
    except ValueError as exc:  # ValidationError is a ValueError
        from rlsim.sim.scenario.messages import model_problems

        problems = (model_problems(exc, raw, ("calibration",), root=CalibrationSpec) if isinstance(exc, ValidationError)
                    else [Problem("calibration", str(exc))])
        return {k: v for k, v in data.items() if k != "calibration"}, problems
    problems = [Problem("calibration", line) for line in spec.factor_bounds_ok()]
    out = _deep_copy(data)
    out["calibration"] = spec.model_dump(mode="json")
    if not problems:
        problems += _apply_factors(out, spec)
    return out, problems


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def _dict_at(data: dict, *keys: str) -> dict | None:
    """The mapping at data[k1][k2]..., created where missing; None where something else is in the way."""
    node = data
    for key in keys:
        child = node.setdefault(key, {})
        if not isinstance(child, dict):
            return None
        node = child
    return node


def _role_pools(data: dict, roles: tuple[str, ...]) -> list[str]:
    """Pools holding any of `roles` (the reward role only when it runs forward passes, i.e. has no engine)."""
    out: list[str] = []
    for name in roles:
        role = (data.get("roles") or {}).get(name)
        if not isinstance(role, dict) or not isinstance(role.get("pool"), str):
            continue
        if name == "reward" and role.get("engine") is not None:
            continue
        if role["pool"] not in out:
            out.append(role["pool"])
    return out


def _apply_factors(data: dict, spec: CalibrationSpec) -> list[Problem]:
    problems: list[Problem] = []
    pools = (data.get("cluster") or {}).get("pools") or {}
    for factor, roles in (("train_mfu", _TRAIN_ROLES), ("forward_mfu", _FORWARD_ROLES)):
        if factor not in spec.factors:
            continue
        for pool in _role_pools(data, roles):
            spec_pool = pools.get(pool)
            if not isinstance(spec_pool, dict):
                continue  # validation reports the missing pool
            if spec.hardware and spec_pool.get("hardware") != spec.hardware:
                problems.append(Problem("calibration", f"{factor} was fitted on {spec.hardware}, pool {pool!r} is "
                                        f"{spec_pool.get('hardware')}: calibrate on that hardware"))
                continue
            target = _dict_at(spec_pool, "profile_overrides")
            if target is not None:
                target[factor] = spec.factors[factor]
    if "decode_step_overhead_ms" in spec.factors and isinstance((data.get("roles") or {}).get("rollout"), dict):
        engine = _dict_at(data["roles"]["rollout"], "engine")
        if engine is not None:
            engine["step_overhead_ms"] = spec.factors["decode_step_overhead_ms"]
    schedule = data.get("schedule")
    if "switch_overhead_s" in spec.factors and isinstance(schedule, dict) and schedule.get("kind") == "hybridflow":
        schedule["switch_overhead_s"] = spec.factors["switch_overhead_s"]
    if "rule_reward_s_per_sample" in spec.factors:
        algorithm = _dict_at(data, "algorithm")
        if algorithm is not None:
            algorithm["rule_reward_s_per_sample"] = spec.factors["rule_reward_s_per_sample"]
    if spec.response_length is not None and spec.apply_response_length:
        problems += _apply_length(data, spec.response_length)
    return problems


def _apply_length(data: dict, law: LengthLaw) -> list[Problem]:
    workload = data.get("workload")
    current = workload.get("response_length") if isinstance(workload, dict) else None
    if not isinstance(current, dict) or current.get("kind") != "lognormal":
        kind = current.get("kind") if isinstance(current, dict) else None
        return [Problem("calibration.response_length", f"applies to a lognormal workload.response_length, the "
                        f"scenario's is {kind!r}")]
    current.update(mean=law.mean, sigma=law.sigma)
    if law.max is not None:
        current["max"] = law.max
    return []
