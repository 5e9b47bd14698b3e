"""Calibrate a hardware profile's efficiencies against measured timings (`rlsim calibrate`).

A measurement CSV (format: hardware_profiles/measurements/README.md) holds rows of four kinds:

- ``decode_step``: one decode step of `batch` sequences with `context` tokens of total context;
- ``serving_itl``: the steady-state inter-token latency of a serving benchmark at concurrency
  `batch` with `prompt_tokens` in / `output_tokens` out (rlsim.costs.generation.serving_itl);
- ``prefill``: one prefill iteration over `tokens` prompt tokens;
- ``train``: one optimizer pass over `tokens` tokens on `gpus` GPUs (`batch` sequences, optional).

`predict` prices a row with the same cost functions the simulator uses, and `fit` adjusts the
profile's efficiencies (`decode_eta_mem`, `decode_eta_compute`, `decode_fixed_overhead_ms`,
`prefill_eta_compute`, `train_mfu`) by Levenberg-Marquardt least squares on log(predicted/measured),
i.e. on relative error. Efficiencies are kept in (0, 1) and the overhead in (0, 100) ms through a
logistic reparametrisation; a parameter no row kind depends on is left untouched. A tiny pull
towards the starting value keeps parameters the data cannot see (e.g. the compute efficiency of a
decode that is memory-bound in every row) where they were, so the fit is deterministic and moves
only what the measurements inform; along directions the rows cannot separate (a serving ITL curve
fixes only an intercept and a slope) it likewise picks the point nearest the start, and the result
says so. The roofline max() has kinks where LM can stall, so a second, neutral start is tried and
kept when it fits clearly better. Pure numpy, no randomness.

For the CLI: `read_measurements(csv)` -> `fit(rows, load_profile(name))` -> `format_report(result)`
and `write_profile(result.profile, path)`.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from rlsim.costs.generation import decode_step_time, prefill_time, serving_itl
from rlsim.hardware import _NUMERIC_FIELDS, HardwareProfile
from rlsim.model_shapes import ModelShape, resolve_preset

KINDS = ("decode_step", "serving_itl", "prefill", "train")
COLUMNS = (
    "kind",
    "model",
    "hardware",
    "tp",
    "batch",
    "context",
    "tokens",
    "prompt_tokens",
    "output_tokens",
    "weight_bytes",
    "kv_bytes",
    "gpus",
    "seconds",
    "source",
)
_REQUIRED_HEADER = ("kind", "model", "seconds")
# Cells that must be filled for a row of each kind.
_REQUIRED_CELLS: dict[str, tuple[str, ...]] = {
    "decode_step": ("tp", "batch", "context"),
    "serving_itl": ("tp", "batch", "prompt_tokens", "output_tokens"),
    "prefill": ("tp", "tokens"),
    "train": ("gpus", "tokens"),
}
_INT_COLUMNS = ("tp", "batch", "context", "tokens", "prompt_tokens", "output_tokens", "gpus")
_FLOAT_COLUMNS = ("weight_bytes", "kv_bytes", "seconds")

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


class MeasurementError(ValueError):
    """A measurement file or row that cannot be used; the message names the file and line."""


@dataclass(frozen=True)
class Measurement:
    """One measured timing. Integer fields are None where the row's kind does not use them."""

    kind: str
    model: str
    seconds: float
    hardware: str = ""
    tp: int = 1
    batch: int | None = None
    context: int | None = None
    tokens: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    weight_bytes: float | None = None
    kv_bytes: float | None = None
    gpus: int | None = None
    source: str = ""
    file: str = ""
    line: int = 0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise MeasurementError(
                f"{self.where()}: kind must be one of {', '.join(KINDS)}, got {self.kind!r}"
            )
        if not self.seconds > 0:
            raise MeasurementError(f"{self.where()}: seconds must be > 0, got {self.seconds}")
        for name in _REQUIRED_CELLS[self.kind]:
            if getattr(self, name) is None:
                raise MeasurementError(f"{self.where()}: a {self.kind} row needs column {name!r}")
        if self.kind == "train" and self.gpus % self.tp:
            raise MeasurementError(f"{self.where()}: gpus ({self.gpus}) must be a multiple of tp ({self.tp})")
        try:
            self.shape()
        except (KeyError, ValueError) as exc:
            msg = exc.args[0] if exc.args else str(exc)
            raise MeasurementError(f"{self.where()}: model: {msg}") from None

    def where(self) -> str:
        return f"{self.file or '<measurement>'}" + (f": line {self.line}" if self.line else "")

    def shape(self) -> ModelShape:
        """The model preset with this row's weight/KV dtypes (preset defaults where empty)."""
        dims = resolve_preset(self.model)
        if self.weight_bytes is not None:
            dims["weight_bytes"] = self.weight_bytes
        if self.kv_bytes is not None:
            dims["kv_bytes"] = self.kv_bytes
        return ModelShape(preset=self.model, **dims)

    def describe(self) -> str:
        """Short label of the row's shape for reports."""
        if self.kind == "decode_step":
            return f"B={self.batch} ctx={self.context}"
        if self.kind == "serving_itl":
            return f"conc={self.batch} in={self.prompt_tokens} out={self.output_tokens}"
        if self.kind == "prefill":
            return f"T={self.tokens}"
        return f"tokens={self.tokens} gpus={self.gpus}"


def _parse_cell(value: str, column: str, where: str) -> int | float | None:
    text = value.strip()
    if text == "":
        return None
    if column in _INT_COLUMNS:
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not (math.isfinite(number) and number == int(number) and number > 0):
            raise MeasurementError(f"{where}: column {column!r}: expected a positive integer, got {text!r}")
        return int(number)
    try:
        number = float(text)
    except ValueError:
        raise MeasurementError(f"{where}: column {column!r}: expected a number, got {text!r}") from None
    if not (math.isfinite(number) and number > 0):
        raise MeasurementError(f"{where}: column {column!r}: expected a positive number, got {text!r}")
    return number


def read_measurements(path: str | Path) -> list[Measurement]:
    """Read and validate a measurement CSV (columns: see `COLUMNS`; lines starting with # are comments).

    Unknown columns are errors (a typo must not silently drop a value); columns a file does not use
    may be omitted; cells that a row's kind does not need may be empty.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise MeasurementError(f"{path}: cannot read measurements: {exc.strerror or exc}") from None
    lines = [
        (i, ln) for i, ln in enumerate(text.splitlines(), start=1) if ln.strip() and not ln.startswith("#")
    ]
    if not lines:
        raise MeasurementError(f"{path}: no header line (expected columns {', '.join(COLUMNS)})")
    header_line, header_text = lines[0]
    header = [h.strip() for h in next(csv.reader([header_text]))]
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise MeasurementError(
            f"{path}: line {header_line}: unknown column(s) {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(COLUMNS)})"
        )
    missing = [h for h in _REQUIRED_HEADER if h not in header]
    if missing:
        raise MeasurementError(f"{path}: line {header_line}: missing column(s) {', '.join(missing)}")
    duplicated = sorted({h for h in header if header.count(h) > 1})
    if duplicated:
        raise MeasurementError(f"{path}: line {header_line}: duplicated column(s) {', '.join(duplicated)}")

    rows: list[Measurement] = []
    for line_no, row_text in lines[1:]:
        where = f"{path.name}: line {line_no}"
        cells = next(csv.reader([row_text]))
        if len(cells) != len(header):
            raise MeasurementError(f"{where}: expected {len(header)} cells, got {len(cells)}")
        raw = dict(zip(header, cells, strict=True))
        values: dict = {}
        for column, cell in raw.items():
            if column in _INT_COLUMNS or column in _FLOAT_COLUMNS:
                values[column] = _parse_cell(cell, column, where)
            else:
                values[column] = cell.strip()
        if values.get("seconds") is None:
            raise MeasurementError(f"{where}: column 'seconds' is empty")
        if not values.get("model"):
            raise MeasurementError(f"{where}: column 'model' is empty")
        if values.get("tp") is None:
            values.pop("tp", None)  # default 1
        rows.append(Measurement(**values, file=path.name, line=line_no))
    if not rows:
        raise MeasurementError(f"{path}: no measurement rows")
    return rows


# ----------------------------------------------------------------------------------------- predict


def _train_time_fn() -> Callable | None:
    try:
        from rlsim.costs.training import train_time  # written in parallel; optional
    except ImportError:
        return None
    return train_time


def _train_seconds(m: Measurement, shape: ModelShape, hw: HardwareProfile) -> float:
    tokens = float(m.tokens or 0)
    # `batch` sequences of equal length -> sum of squared lengths; unknown -> no attention term.
    seq_sq_sum = tokens * tokens / m.batch if m.batch else 0.0
    train_time = _train_time_fn()
    if train_time is not None:
        return float(train_time(shape, hw, m.gpus, tokens, seq_sq_sum, tp=m.tp))
    # 6N per token plus verl's attention term 12 * sum(s^2) * head_dim * heads * layers.
    q_dim = shape.heads * shape.d_head
    flops = 6.0 * shape.active_params * tokens + 12.0 * seq_sq_sum * q_dim * shape.layers
    return flops / (m.gpus * hw.peak_flops * hw.train_mfu)


def predict(measurement: Measurement, profile: HardwareProfile) -> float:
    """Seconds the cost models predict for a measured row on `profile`."""
    m = measurement
    shape = m.shape()
    if m.kind == "decode_step":
        return decode_step_time(shape, profile, m.tp, m.batch, float(m.context))
    if m.kind == "serving_itl":
        return serving_itl(shape, profile, m.tp, m.batch, m.prompt_tokens, m.output_tokens)
    if m.kind == "prefill":
        return prefill_time(shape, profile, m.tp, float(m.tokens))
    return _train_seconds(m, shape, profile)


# --------------------------------------------------------------------------------------------- fit


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
    rows = list(measurements)
    if not rows:
        raise ValueError("no measurements to fit")
    params = tuple(params)
    bad = [p for p in params if p not in FITTABLE]
    if bad:
        raise ValueError(f"cannot fit {', '.join(bad)} (fittable: {', '.join(FITTABLE)})")
    notes: list[str] = []
    hardware = sorted({m.hardware for m in rows if m.hardware})
    if len(hardware) > 1:
        raise ValueError(
            f"measurements come from several GPUs ({', '.join(hardware)}): fit one hardware profile at a time"
        )
    if hardware and hardware[0] != profile.name:
        notes.append(f"measurements are labelled {hardware[0]!r}, fitted into profile {profile.name!r}")
    kinds = {m.kind for m in rows}
    free = [p for p in params if any(p in INFORMS[k] for k in kinds)]
    files = sorted({m.file for m in rows if m.file})
    label = sources_label or ", ".join(files) or "measurements"

    measured = np.array([m.seconds for m in rows])
    start_values = {p: float(getattr(profile, p)) for p in free}
    u0 = np.array([_to_logit(start_values[p], _UPPER[p]) for p in free])

    def with_values(u: np.ndarray) -> HardwareProfile:
        update = {p: _from_logit(float(x), _UPPER[p]) for p, x in zip(free, u, strict=True)}
        return profile.model_copy(update=update)

    def log_ratios(u: np.ndarray) -> np.ndarray:
        hw = with_values(u)
        return np.log(np.array([predict(m, hw) for m in rows]) / measured)

    def residuals_towards(anchor: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
        return lambda u: np.concatenate([log_ratios(u), _PRIOR_WEIGHT * (u - anchor)])

    if free:
        u, iterations, converged = _levenberg_marquardt(residuals_towards(u0), u0)
        # The roofline max() has kinks where LM can stall (e.g. a start so compute-poor that decode is
        # compute-bound). Also try a neutral start; keep it only if it fits the data clearly better,
        # then slide back towards the caller's start values (the prior stays anchored there).
        neutral = np.array([_to_logit(_NEUTRAL[p], _UPPER[p]) for p in free])
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
    else:
        u, iterations, converged = u0, 0, True
        notes.append("no requested parameter is informed by these rows: nothing fitted")

    # Which parameters the data actually sees at the solution (a memory-bound decode hides eta_compute),
    # and how many independent combinations of them it determines.
    jac = np.zeros((len(rows), len(free)))
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
    fitted = HardwareProfile.model_validate({**profile.model_dump(), **update, "sources": sources})
    row_results = [RowResult(m, predict(m, fitted), m.seconds) for m in rows]
    param_results = [
        ParamResult(p, float(getattr(profile, p)), float(getattr(fitted, p)), p in informed and informed[p])
        for p in params
    ]
    if not converged:
        notes.append("Levenberg-Marquardt stopped at the iteration limit")
    return CalibrationResult(
        profile=fitted,
        start=profile,
        params=param_results,
        rows=row_results,
        iterations=iterations,
        converged=converged,
        sources_label=label,
        identified=identified,
        notes=notes,
    )


# -------------------------------------------------------------------------------------- output


_FIELD_ORDER = ("name", "description", *_NUMERIC_FIELDS)


def write_profile(profile: HardwareProfile, path: str | Path, header: str | None = None) -> Path:
    """Write a profile as YAML loadable by `rlsim.hardware.load_profile_file` (fields in schema order)."""
    data = profile.model_dump(exclude_none=True)
    ordered = {k: data[k] for k in _FIELD_ORDER if k in data}
    ordered["sources"] = {k: profile.sources[k] for k in _NUMERIC_FIELDS if k in profile.sources}
    text = yaml.safe_dump(ordered, sort_keys=False, width=100, allow_unicode=True)
    if header:
        text = "".join(f"# {line}\n" for line in header.splitlines()) + text
    path = Path(path)
    path.write_text(text)
    return path


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def fmt(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True))
        return "  ".join(padded).rstrip()

    return [fmt(headers), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)]


def format_report(result: CalibrationResult) -> str:
    """A printable report: fitted parameters, then measured vs predicted per row."""
    out = [f"Calibration of {result.profile.name} from {result.sources_label}", ""]
    prow = [
        [p.name, f"{p.start:.4g}", f"{p.fitted:.4g}", "yes" if p.informed else "no (kept)"]
        for p in result.params
    ]
    out += _table(["parameter", "start", "fitted", "informed"], prow, [False, True, True, False])
    out.append("")
    rrow = [
        [
            str(r.measurement.line or i + 1),
            r.measurement.kind,
            r.measurement.model,
            str(r.measurement.tp),
            r.measurement.describe(),
            f"{r.measured * 1e3:.3f}",
            f"{r.predicted * 1e3:.3f}",
            f"{r.error_pct:+.1f}",
        ]
        for i, r in enumerate(result.rows)
    ]
    out += _table(
        ["line", "kind", "model", "tp", "shape", "measured ms", "predicted ms", "error %"],
        rrow,
        [True, False, False, True, False, True, True, True],
    )
    out.append("")
    out.append(
        f"mean |error| {result.mean_abs_error_pct:.1f}%, max |error| {result.max_abs_error_pct:.1f}% "
        f"over {len(result.rows)} rows ({result.iterations} iterations"
        f"{'' if result.converged else ', NOT converged'})"
    )
    out += [f"note: {n}" for n in result.notes]
    return "\n".join(out)
