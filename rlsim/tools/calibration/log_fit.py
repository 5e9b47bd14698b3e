"""Fit a scenario's named factors to a run's logged phase times by simulating it (`calibrate --from-log`).

The factors (rlsim/sim/scenario/calibration.py says where each one lands in a scenario):

- `decode_step_overhead_ms`: the engine's fixed cost per decode step: sets generation speed, most of
  all in the latency-bound tail of a long-response batch (informed by `generate` / `gen`);
- `train_mfu`, `forward_mfu`: training and forward-pass efficiency (`update_*`; `old_log_prob`, `ref`,
  `values`);
- `switch_overhead_s`: the colocated weight switch (verl's sync `gen` minus `generate_sequences`);
- `rule_reward_s_per_sample`: driver-side work (reward, advantages, bookkeeping) that fills the rest
  of a synchronous step (`step`);
- the response-length law, when the log has `response_length/{mean,max,clip_ratio}`: a lognormal with
  that clipped mean and clip ratio (closed form, no simulation).

Least squares (scipy `least_squares`, trust region) on log(simulated / logged) per phase, factors in log
space relative to their start, a tiny pull to the start so that what the log cannot see stays put.
Each residual evaluation is one simulation of the scenario (few steps: `sim_steps`), with the
candidate factors applied through the very overlay `--out` writes, so the fit and later predictions
mean the same thing. Deterministic: the scenario's seed is used for every simulation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares
from scipy.special import ndtr, ndtri

from rlsim.sim.api import LengthLaw
from rlsim.tools.calibration.logs import LoggedRun

# Phases a factor can move, and those compared in the fit (wait_prev_gen, a difference of two
# overlapped phases, and weight_sync, not modelled by a factor, are reported only).
FIT_PHASES = ("step", "gen", "generate", "old_log_prob", "ref", "values", "reward", "update_actor", "update_critic")
_PRIOR_WEIGHT = 1e-3
MOVED = 0.01  # a factor the fit changed by less than this share did not move
RESIDUAL_WARN_PCT = 15.0  # a fitted phase further than this from the log gets a warning
_DIFF_STEP = 0.02  # finite-difference step in log(factor): 2%, well above the simulation's event granularity


@dataclass(frozen=True)
class Factor:
    name: str
    informs: tuple[str, ...]
    lower: float
    upper: float


FACTORS = {
    f.name: f
    for f in (
        Factor("decode_step_overhead_ms", ("generate", "gen"), 0.01, 1000.0),
        Factor("train_mfu", ("update_actor", "update_critic"), 0.01, 1.0),
        Factor("forward_mfu", ("old_log_prob", "ref", "values"), 0.01, 1.0),
        Factor("switch_overhead_s", ("gen",), 1e-3, 1e5),
        Factor("rule_reward_s_per_sample", ("step", "reward"), 1e-7, 10.0),
    )
}


@dataclass
class PhaseRow:
    phase: str
    logged: float
    fitted: float | None
    used: bool

    @property
    def residual_pct(self) -> float | None:
        return None if self.fitted is None else 100.0 * (self.fitted - self.logged) / self.logged


@dataclass
class LogFit:
    """What the fit found: factors, the phase table of the final simulation, the band, notes."""

    factors: dict[str, float]
    start: dict[str, float]
    rows: list[PhaseRow]
    band_pct: float
    length_law: LengthLaw | None
    simulations: int
    hardware: str | None
    notes: list[str] = field(default_factory=list)
    parameter_error_pct: float = 0.0  # the residual spread per degree of freedom with the simulation's noise
    fit_residual_pct: float = 0.0  # how far the fitted simulation stays from the log (step, else the RMS phase)

    def moved(self, name: str) -> bool:
        """Whether the fit moved a factor from its start value (by more than 1%)."""
        return abs(self.factors[name] / self.start[name] - 1.0) > MOVED if self.start[name] else \
            self.factors[name] != 0


def simulated_phases(result) -> dict[str, float]:
    """Mean phase seconds of a simulation under the logs' names (verl's sync `gen` wraps the switch)."""
    means = result.measured_steps.mean(numeric_only=True)

    def col(name: str) -> float | None:
        value = means.get(f"timing_s/{name}")
        return None if value is None or not math.isfinite(value) else float(value)

    out = {p: col(p) for p in ("step", "wait_prev_gen", "old_log_prob", "ref", "values", "reward", "update_actor",
                               "update_critic")}
    generate = col("gen") if col("gen") is not None else col("generate_async")
    out["generate"] = generate
    out["gen"] = None if col("gen") is None else col("gen") + (col("update_weights") or 0.0)
    out["weight_sync"] = col("sync_rollout_weights") if col("sync_rollout_weights") is not None else col(
        "update_weights")
    return {k: v for k, v in out.items() if v is not None}


# ------------------------------------------------------------------------------------ length law


def _clipped_stats(mu: float, sigma: float, cap: float) -> tuple[float, float]:
    """(E[min(X, cap)], P(X >= cap)) of a lognormal(mu, sigma)."""
    z = (math.log(cap) - mu) / sigma
    clip = float(1.0 - ndtr(z))
    return math.exp(mu + sigma**2 / 2) * float(ndtr(z - sigma)) + cap * clip, clip


def fit_length_law(stats: dict[str, float], law: dict, notes: list[str]) -> LengthLaw | None:
    """A lognormal whose clipped mean (and clip ratio, when logged and > 0) match the log's."""
    if "length_mean" not in stats:
        return None
    if law.get("kind") != "lognormal" or law.get("truncated_fraction") is not None or law.get("mean_schedule"):
        notes.append(f"response length: the scenario's {law.get('kind')} law is kept (fitting takes a plain lognormal)")
        return None
    cap = float(law["max"])
    if stats.get("length_max", 0.0) > cap:
        cap = stats["length_max"]
        notes.append(f"response length: logged max {cap:g} is above the scenario's max: the cap is raised to it")
    clip = stats.get("length_clip_ratio", 0.0)
    target = stats["length_mean"]
    if not 0 < target < cap:
        raise ValueError(f"logged response_length/mean {target:g} must lie in (0, max {cap:g})")
    sigma0 = float(law["sigma"])
    if clip > 0:
        z = float(ndtri(1.0 - min(clip, 0.5)))

        def residuals(x):  # x = [log sigma]; mu from the clip ratio
            s = math.exp(x[0])
            return [math.log(_clipped_stats(math.log(cap) - s * z, s, cap)[0] / target)]

        s = math.exp(least_squares(residuals, [math.log(sigma0)], bounds=([-5.0], [math.log(10.0)])).x[0])
        mu = math.log(cap) - s * z
    else:
        s = sigma0

        def residuals(x):
            return [math.log(_clipped_stats(x[0], s, cap)[0] / target)]

        mu = float(least_squares(residuals, [math.log(target) - s**2 / 2]).x[0])
    mean, clip_fit = _clipped_stats(mu, s, cap)
    if abs(mean - target) > 0.01 * target:
        notes.append(f"response length: clipped mean {mean:.0f} vs logged {target:.0f} (clip ratio {clip:g} "
                     "cannot be met together with the mean)")
    return LengthLaw(mean=_round_sig(math.exp(mu + s**2 / 2)), sigma=_round_sig(s), max=int(round(cap)))


# ----------------------------------------------------------------------------------- timing fit


def _round_sig(x: float, digits: int = 4) -> float:
    return x if x == 0 or not math.isfinite(x) else round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


# Where an MFU fit starts when the profile has none (a start, not a value: the fit moves it).
NEUTRAL_MFU = {"train_mfu": 0.4, "forward_mfu": 0.5}


def start_values(scenario, logged: dict[str, float]) -> dict[str, float]:
    """Each factor the log informs, at the scenario's current value."""
    from rlsim.sim.costs import engine_overheads

    roles, out = scenario.roles, {}
    if "rollout" in roles and roles["rollout"].engine is not None and {"generate", "gen"} & set(logged):
        engine = roles["rollout"].engine
        hw = scenario.cluster.pools[roles["rollout"].pool].profile()
        out["decode_step_overhead_ms"] = engine_overheads(engine.kind, hw, True, engine.step_overhead_ms).step_s * 1e3
    train_hw = scenario.cluster.pools[roles["actor"].pool].profile() if "actor" in roles else None
    # Shipped profiles set no MFU (training is priced from operators): a fit starts an override from NEUTRAL_MFU.
    if train_hw is not None and {"update_actor", "update_critic"} & set(logged):
        out["train_mfu"] = train_hw.train_mfu or NEUTRAL_MFU["train_mfu"]
    if train_hw is not None and {"old_log_prob", "ref", "values"} & set(logged):
        out["forward_mfu"] = train_hw.forward_mfu or NEUTRAL_MFU["forward_mfu"]
    sched = scenario.schedule
    if (sched.kind == "hybridflow" and {"gen", "generate"} <= set(logged) and "rollout" in roles
            and scenario.roles_share_gpus("actor", "rollout")):
        out["switch_overhead_s"] = sched.switch_overhead_s or max(logged["gen"] - logged["generate"], 1.0)
    if "reward" not in roles and {"step", "reward"} & set(logged):
        out["rule_reward_s_per_sample"] = scenario.algorithm.rule_reward_s_per_sample or 1e-4
    return {k: min(max(v, FACTORS[k].lower), FACTORS[k].upper) for k, v in out.items()}


@dataclass
class _Simulator:
    """Simulates the scenario mapping with a candidate overlay; caches by factor values."""

    data: dict
    source: str
    base_dir: Path | None
    overrides: list[str]
    length_law: LengthLaw | None
    cache: dict = field(default_factory=dict)

    def overlay(self, factors: dict[str, float]) -> dict:
        block: dict = {"factors": factors}
        if self.length_law is not None:  # the fit simulates the logged job itself: its lengths apply
            block |= {"response_length": self.length_law.model_dump(), "apply_response_length": True}
        return block

    def run(self, factors: dict[str, float]):
        from rlsim.sim.api import parse_scenario, simulate

        key = tuple(sorted((k, round(v, 12)) for k, v in factors.items()))
        if key not in self.cache:
            data = {**self.data, "calibration": self.overlay(factors)}
            scenario = parse_scenario(data, self.source, self.overrides, self.base_dir)
            self.cache[key] = simulate(scenario)
        return self.cache[key]


class _ChordJacobian:
    """Forward-difference Jacobian computed once, at the start, then reused (a chord Gauss-Newton).

    In log space every phase is close to linear in every factor (a phase time scales as 1/MFU, a
    step adds its parts), so the start's Jacobian stays good; reusing it costs one simulation per
    iteration instead of one per factor.
    """

    def __init__(self, residuals):
        self.residuals = residuals
        self.jac: np.ndarray | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.jac is None:
            f0 = self.residuals(x)
            cols = []
            for k in range(x.size):
                dx = np.zeros_like(x)
                dx[k] = _DIFF_STEP
                cols.append((self.residuals(x + dx) - f0) / _DIFF_STEP)
            self.jac = np.column_stack(cols)
        return self.jac


def fit_log(
    data: dict, source: str, base_dir: Path | None, logged: LoggedRun, overrides: list[str], max_sims: int = 60,
) -> LogFit:
    """Fit the factors the log informs; `data` is the scenario mapping, `overrides` its --set list."""
    from rlsim.sim.api import parse_scenario

    notes: list[str] = []
    phases = logged.phase_means()
    data = {**data, "calibration": None}  # a calibration already in the scenario is replaced, not stacked
    base = parse_scenario(data, source, overrides, base_dir)
    law = fit_length_law(logged.length_stats(), base.workload.response_length.model_dump(), notes)
    sim = _Simulator(data, source, base_dir, overrides, law)
    start = start_values(base, phases)
    names = list(start)
    first = simulated_phases(sim.run(start))
    _check_seconds(phases, first)
    used = [p for p in FIT_PHASES if p in phases and p in first]
    logged_v = np.array([phases[p] for p in used])

    def factors_at(x: np.ndarray) -> dict[str, float]:
        return {n: start[n] * math.exp(float(v)) for n, v in zip(names, x, strict=True)}

    def residuals(x: np.ndarray) -> np.ndarray:
        got = simulated_phases(sim.run(factors_at(x)))
        fitted = np.array([max(got.get(p, 0.0), 1e-9) for p in used])
        return np.concatenate([np.log(fitted / logged_v), _PRIOR_WEIGHT * x])

    if names and used:
        lo = np.array([math.log(FACTORS[n].lower / start[n]) for n in names])
        hi = np.array([math.log(FACTORS[n].upper / start[n]) for n in names])
        sol = least_squares(residuals, np.zeros(len(names)), jac=_ChordJacobian(residuals), bounds=(lo, hi),
                            xtol=1e-2, ftol=1e-3, max_nfev=max_sims)
        factors = {n: _round_sig(v) for n, v in factors_at(sol.x).items()}
        if sol.status == 0:
            notes.append(f"the fit stopped at {max_sims} simulations before converging")
    else:
        factors = dict(start)
        notes.append("the log informs no factor of this scenario: nothing fitted")
    unseen = sorted({p for n in FACTORS for p in FACTORS[n].informs} & set(phases) - set(used))
    if unseen:
        notes.append(f"logged but not simulated by this scenario: {', '.join(unseen)}")
    final = sim.run(factors)
    got = simulated_phases(final)
    rows = [PhaseRow(p, v, got.get(p), p in used) for p, v in phases.items()]
    hardware = base.cluster.pools[base.roles["actor"].pool].hardware if "actor" in base.roles else None
    param = _band_pct(rows, len(names), final, notes)
    resid = fit_residual_pct(rows)
    # The band a calibrated run carries: the larger of the parameters' error and what the fit left unexplained.
    return LogFit(factors, start, rows, round(max(param, resid), 1), law, len(sim.cache), hardware, notes,
                  param, resid)


# A logged step this many times the scenario's own (before fitting) is not the same job in seconds: a log in
# milliseconds is 1000x. No factor within its bounds (FACTORS) closes a gap of this size.
MS_RATIO = 30.0


def _check_seconds(logged: dict[str, float], simulated: dict[str, float]) -> None:
    """Refuse a log whose step is MS_RATIO times the scenario's simulated step: milliseconds, not seconds."""
    step, sim = logged.get("step"), simulated.get("step")
    if step and sim and step > MS_RATIO * sim:
        raise ValueError(f"logged step time {step:,.0f} s is {step / sim:,.0f}x the scenario's simulated {sim:,.1f} s: "
                         "are these milliseconds? rlsim reads seconds (divide the timings by 1000)")


def fit_residual_pct(rows: list[PhaseRow]) -> float:
    """|residual| of the step time where the log has it, else the RMS over the fitted phases (%)."""
    step = next((r for r in rows if r.phase == "step" and r.residual_pct is not None), None)
    if step is not None:
        return round(abs(step.residual_pct), 1)
    resid = [r.residual_pct for r in rows if r.used and r.residual_pct is not None]
    return round(math.sqrt(sum(x * x for x in resid) / len(resid)), 1) if resid else 0.0


def _band_pct(rows: list[PhaseRow], n_factors: int, result, notes: list[str]) -> float:
    """± band (%): the residual spread over the fitted phases (per degree of freedom left), in quadrature
    with the simulation's own step-to-step noise on a mean step time."""
    resid = [r.residual_pct for r in rows if r.used and r.residual_pct is not None]
    dof = len(resid) - n_factors
    spread = math.sqrt(sum(x * x for x in resid) / dof) if dof > 0 else 0.0
    if dof <= 0:
        notes.append(f"{len(resid)} logged phases for {n_factors} factors: the parameters' error holds only the "
                     "simulation's step-to-step noise (the band takes the fit's residual when larger)")
    steps = result.measured_steps["timing_s/step"].to_numpy(dtype=float)
    noise = 100.0 * float(np.std(steps, ddof=1) / np.mean(steps) / math.sqrt(len(steps))) if len(steps) > 1 else 0.0
    return round(math.hypot(spread, noise), 1)
