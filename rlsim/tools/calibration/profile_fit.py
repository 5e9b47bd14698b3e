"""Fit a hardware profile's efficiencies to measured timings (`rlsim calibrate MEASUREMENTS.csv --profile`).

`fit` adjusts the profile's efficiencies (`decode_eta_mem`, `decode_eta_compute`,
`decode_fixed_overhead_ms`, `prefill_eta_compute`, `train_mfu`) by Levenberg-Marquardt least squares
on log(predicted/measured), i.e. on relative error, pricing each row with `measurements.predict` (the
simulator's cost functions). Efficiencies are kept in (0, 1) and the overhead in (0, 100) ms through a
logistic reparametrisation; a parameter no row kind depends on is left untouched. A tiny pull
towards the starting value keeps parameters the data cannot see (e.g. the compute efficiency of a
decode that is memory-bound in every row) where they were, so the fit is deterministic and moves
only what the measurements inform; along directions the rows cannot separate (a serving ITL curve
fixes only an intercept and a slope) it likewise picks the point nearest the start, and the result
says so. The roofline max() has kinks where LM can stall, so a second, neutral start is tried and
kept when it fits clearly better. Pure numpy, no randomness.

For the CLI: `read_measurements(csv)` -> `fit(rows, load_profile(name))` -> `format_report(result)`
and `write_profile(result.profile, path)` (rlsim.tools.calibration.profile_report).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from rlsim.sim.api import HardwareProfile
from rlsim.tools.calibration.measurements import Measurement, predict

FITTABLE = (
    "decode_eta_mem",
    "decode_eta_compute",
    "decode_fixed_overhead_ms",
    "prefill_eta_compute",
    "train_mfu",
)
DEFAULT_PARAMS = FITTABLE
# Which profile parameters the predicted time of a row of each kind depends on.
INFORMS: dict[str, tuple[str, ...]] = {
    "decode_step": ("decode_eta_mem", "decode_eta_compute", "decode_fixed_overhead_ms"),
    "serving_itl": (
        "decode_eta_mem",
        "decode_eta_compute",
        "decode_fixed_overhead_ms",
        "prefill_eta_compute",
    ),
    "prefill": ("prefill_eta_compute", "decode_eta_mem", "decode_fixed_overhead_ms"),
    "train": ("train_mfu",),
}
# Upper bound of each parameter in its natural unit (lower bound 0, both exclusive in the fit).
_UPPER = {name: 1.0 for name in FITTABLE} | {"decode_fixed_overhead_ms": 100.0}

# A plausible mid-range start, tried as well in case the caller's start stalls on a roofline kink.
_NEUTRAL = {
    "decode_eta_mem": 0.7,
    "decode_eta_compute": 0.6,
    "decode_fixed_overhead_ms": 5.0,
    "prefill_eta_compute": 0.6,
    "train_mfu": 0.4,
}
_PRIOR_WEIGHT = 1e-3  # pull towards the start, in logit units: negligible next to a 0.1% data residual
_SSE_TOL = 1e-8  # sums of squared log-ratios closer than this (~1e-4 relative error) count as equal
_SIGNIFICANT_DIGITS = 4  # fitted values are rounded to this many significant digits
_INFORMED_TOL = 1e-7  # |d log(pred) / d logit| below this on every row: the data does not see it
LOOSE_RELATIVE_STDERR = 0.25  # a fitted value whose 1-sigma error exceeds this share of it is flagged


@dataclass(frozen=True)
class RowResult:
    measurement: Measurement
    predicted: float
    measured: float

    @property
    def error_pct(self) -> float:
        return (self.predicted - self.measured) / self.measured * 100.0


@dataclass(frozen=True)
class ParamResult:
    name: str
    start: float
    fitted: float
    informed: bool  # the fitted predictions depend on it (False: kept at its start value)
    # One standard error from the rows alone (residual scatter through the fit's Jacobian, in the
    # parameter's units). None: not informed, or no spare row to estimate the scatter (rows <= parameters).
    stderr: float | None = None

    @property
    def relative_stderr(self) -> float | None:
        return None if self.stderr is None or self.fitted == 0 else self.stderr / abs(self.fitted)


@dataclass
class CalibrationResult:
    profile: HardwareProfile  # the fitted profile (values and `sources` updated)
    start: HardwareProfile
    params: list[ParamResult]
    rows: list[RowResult]
    iterations: int
    converged: bool
    sources_label: str
    identified: int = 0  # independent parameter combinations the rows determine
    notes: list[str] = field(default_factory=list)

    @property
    def abs_errors_pct(self) -> list[float]:
        return [abs(r.error_pct) for r in self.rows]

    @property
    def mean_abs_error_pct(self) -> float:
        return float(np.mean(self.abs_errors_pct))

    @property
    def max_abs_error_pct(self) -> float:
        return float(np.max(self.abs_errors_pct))


def _to_logit(value: float, upper: float) -> float:
    x = min(max(value / upper, 1e-9), 1.0 - 1e-9)
    return math.log(x / (1.0 - x))


def _from_logit(u: float, upper: float) -> float:
    u = min(max(u, -40.0), 40.0)
    return upper / (1.0 + math.exp(-u)) if u >= 0 else upper * math.exp(u) / (1.0 + math.exp(u))


def _round_sig(x: float, digits: int = _SIGNIFICANT_DIGITS) -> float:
    if x == 0 or not math.isfinite(x):
        return x
    return round(x, digits - 1 - int(math.floor(math.log10(abs(x)))))


def _levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray], u0: np.ndarray, max_iter: int = 200
) -> tuple[np.ndarray, int, bool]:
    """Minimise ||residuals(u)||^2 with a central-difference Jacobian; deterministic."""
    u = u0.astype(float).copy()
    r = residuals(u)
    cost = float(r @ r)
    lam = 1e-3
    for it in range(1, max_iter + 1):
        jac = np.empty((r.size, u.size))
        for k in range(u.size):
            h = 1e-6 * max(1.0, abs(u[k]))
            up, dn = u.copy(), u.copy()
            up[k] += h
            dn[k] -= h
            jac[:, k] = (residuals(up) - residuals(dn)) / (2 * h)
        grad = jac.T @ r
        hess = jac.T @ jac
        damp = np.maximum(np.diag(hess), 1e-12)
        improved = False
        while lam < 1e12:
            step = np.linalg.solve(hess + lam * np.diag(damp), -grad)
            u_new = u + step
            r_new = residuals(u_new)
            cost_new = float(r_new @ r_new)
            if cost_new < cost:
                improved = True
                break
            lam *= 10.0
        if not improved:
            return u, it, True  # no descent direction left: a (local) minimum
        gain = cost - cost_new
        u, r, cost = u_new, r_new, cost_new
        lam = max(lam / 10.0, 1e-12)
        if gain <= 1e-10 * max(cost, 1e-30) or float(np.max(np.abs(step))) < 1e-10:
            return u, it, True
    return u, max_iter, False


def _solve(residuals_towards, log_ratios, u0: np.ndarray, neutral: np.ndarray, notes: list[str]):
    """LM from the caller's start; if a neutral start fits clearly better, polish it back towards u0.

    The roofline max() has kinks where LM can stall (e.g. a start so compute-poor that decode is
    compute-bound). The prior stays anchored at the caller's start values.
    """
    u, iterations, converged = _levenberg_marquardt(residuals_towards(u0), u0)
    sse = float(np.sum(log_ratios(u) ** 2))
    u_alt, it_alt, _ = _levenberg_marquardt(residuals_towards(neutral), neutral)
    sse_alt = float(np.sum(log_ratios(u_alt) ** 2))
    if sse - sse_alt > max(1e-3 * sse, _SSE_TOL):
        u_pol, it_polish, converged = _levenberg_marquardt(residuals_towards(u0), u_alt)
        iterations += it_alt + it_polish
        # The pull back to the start may drag the solution onto the same kink: keep it only if the
        # data still fits as well.
        u = u_pol if float(np.sum(log_ratios(u_pol) ** 2)) <= sse_alt * (1.0 + 1e-3) + _SSE_TOL else u_alt
        notes.append("the fit from the start values stalled; the result comes from a neutral start")
    return u, iterations, converged


def _identification(log_ratios, u: np.ndarray, free: list[str], n_rows: int, notes: list[str]):
    """Which parameters the data sees at the solution (a memory-bound decode hides eta_compute), how
    many independent combinations of them it determines, and the Jacobian (rows x free, in logits)."""
    jac = np.zeros((n_rows, len(free)))
    for k in range(len(free)):
        h = 1e-4
        up, dn = u.copy(), u.copy()
        up[k] += h
        dn[k] -= h
        jac[:, k] = (log_ratios(up) - log_ratios(dn)) / (2 * h)
    informed = {p: bool(np.max(np.abs(jac[:, k])) > _INFORMED_TOL) for k, p in enumerate(free)}
    seen = [k for k, p in enumerate(free) if informed[p]]
    identified = 0
    if seen:
        cols = jac[:, seen] / np.linalg.norm(jac[:, seen], axis=0)
        sv = np.linalg.svd(cols, compute_uv=False)
        identified = int(np.sum(sv > 1e-6 * sv[0]))
        if identified < len(seen):
            names = ", ".join(free[k] for k in seen)
            notes.append(
                f"the rows determine only {identified} independent combination(s) of the {len(seen)} "
                f"parameters they inform ({names}); along the rest the fit stays as close to the start "
                "values as the data allows, so add rows of other shapes (e.g. decode_step at several "
                "batch sizes, prefill rows) to pin them separately"
            )
    return informed, identified, jac


def _standard_errors(jac: np.ndarray, residuals: np.ndarray, u: np.ndarray, free: list[str],
                     informed: dict[str, bool]) -> dict[str, float]:
    """1-sigma errors of the informed parameters from the rows alone: s^2 (J^T J)^-1 with s^2 the residual
    variance on n - k degrees of freedom, carried from logits to values (dp/du = p (1 - p / upper)).

    Only when there is a spare row (n > k) and J^T J can be inverted; a parameter the rows barely move
    gets a large error, which is the point: it says which fitted constants are guesses.
    """
    seen = [k for k, p in enumerate(free) if informed[p]]
    n = residuals.size
    if not seen or n <= len(seen):
        return {}
    j = jac[:, seen]
    jtj = j.T @ j
    if np.linalg.cond(jtj) > 1e14:
        return {}
    s2 = float(residuals @ residuals) / (n - len(seen))
    var_u = s2 * np.diag(np.linalg.inv(jtj))
    out = {}
    for idx, k in enumerate(seen):
        name = free[k]
        value = _from_logit(float(u[k]), _UPPER[name])
        out[name] = abs(value * (1.0 - value / _UPPER[name])) * math.sqrt(max(float(var_u[idx]), 0.0))
    return out


def _fitted_profile(profile: HardwareProfile, free, u, informed, start_values, label: str) -> HardwareProfile:
    """The profile with the fitted values (4 significant digits) and their sources."""
    update: dict[str, float] = {}
    sources = dict(profile.sources)
    for k, p in enumerate(free):
        value = _round_sig(_from_logit(float(u[k]), _UPPER[p]))
        if not informed[p] and math.isclose(value, start_values[p], rel_tol=1e-3):
            continue  # not seen by the data: keep the start value and its source
        update[p] = value
        sources[p] = f"calibrated by rlsim calibrate from {label}" + (
            "" if informed[p] else " (bound only: the rows stop depending on it at this value)"
        )
    return HardwareProfile.model_validate({**profile.model_dump(), **update, "sources": sources})


def _check_rows(rows: list[Measurement], params: tuple[str, ...], profile: HardwareProfile, notes: list[str]):
    if not rows:
        raise ValueError("no measurements to fit")
    bad = [p for p in params if p not in FITTABLE]
    if bad:
        raise ValueError(f"cannot fit {', '.join(bad)} (fittable: {', '.join(FITTABLE)})")
    hardware = sorted({m.hardware for m in rows if m.hardware})
    if len(hardware) > 1:
        raise ValueError(
            f"measurements come from several GPUs ({', '.join(hardware)}): fit one hardware profile at a time"
        )
    if hardware and hardware[0] != profile.name:
        notes.append(f"measurements are labelled {hardware[0]!r}, fitted into profile {profile.name!r}")


def start_value(profile: HardwareProfile, name: str) -> float:
    """The profile's value of a fitted parameter; `train_mfu`, which shipped profiles leave unset (training is
    priced from operators until a fit sets it as an override), starts from the neutral 0.4."""
    value = getattr(profile, name)
    return float(_NEUTRAL[name] if value is None else value)


def fit(
    measurements: Sequence[Measurement],
    profile: HardwareProfile,
    params: Iterable[str] = DEFAULT_PARAMS,
    *,
    sources_label: str | None = None,
) -> CalibrationResult:
    """Fit the profile parameters in `params` that the measurements inform; return the fitted profile.

    Residuals are log(predicted / measured) (relative error, symmetric in over/under-prediction).
    Fitted values are rounded to 4 significant digits, and the reported per-row errors are those of
    the rounded profile, i.e. of exactly what `write_profile` writes.
    """
    rows, params, notes = list(measurements), tuple(params), []
    _check_rows(rows, params, profile, notes)
    kinds = {m.kind for m in rows}
    free = [p for p in params if any(p in INFORMS[k] for k in kinds)]
    label = sources_label or ", ".join(sorted({m.file for m in rows if m.file})) or "measurements"

    measured = np.array([m.seconds for m in rows])
    start_values = {p: start_value(profile, p) for p in free}
    u0 = np.array([_to_logit(start_values[p], _UPPER[p]) for p in free])

    def log_ratios(u: np.ndarray) -> np.ndarray:
        hw = profile.model_copy(update={p: _from_logit(float(x), _UPPER[p]) for p, x in zip(free, u, strict=True)})
        return np.log(np.array([predict(m, hw) for m in rows]) / measured)

    def residuals_towards(anchor: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        return lambda u: np.concatenate([log_ratios(u), _PRIOR_WEIGHT * (u - anchor)])

    if free:
        neutral = np.array([_to_logit(_NEUTRAL[p], _UPPER[p]) for p in free])
        u, iterations, converged = _solve(residuals_towards, log_ratios, u0, neutral, notes)
    else:
        u, iterations, converged = u0, 0, True
        notes.append("no requested parameter is informed by these rows: nothing fitted")
    informed, identified, jac = _identification(log_ratios, u, free, len(rows), notes)
    stderr = _standard_errors(jac, log_ratios(u), u, free, informed)
    fitted = _fitted_profile(profile, free, u, informed, start_values, label)
    param_results = [
        ParamResult(p, start_value(profile, p), start_value(fitted, p), p in informed and informed[p],
                    stderr.get(p))
        for p in params
    ]
    loose = [f"{r.name} ({'±>999%' if r.relative_stderr > 9.99 else f'±{r.relative_stderr:.0%}'})"
             for r in param_results if r.relative_stderr is not None and r.relative_stderr > LOOSE_RELATIVE_STDERR]
    if loose:
        notes.append(
            f"loosely determined by these rows, one standard error above {LOOSE_RELATIVE_STDERR:.0%} of the value: "
            f"{', '.join(loose)}; treat those fitted values as guesses, hold them with --params, or add rows "
            "that move them"
        )
    if not converged:
        notes.append("Levenberg-Marquardt stopped at the iteration limit")
    return CalibrationResult(
        profile=fitted, start=profile, params=param_results,
        rows=[RowResult(m, predict(m, fitted), m.seconds) for m in rows],
        iterations=iterations, converged=converged, sources_label=label, identified=identified, notes=notes,
    )
