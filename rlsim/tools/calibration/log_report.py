"""Output of `rlsim calibrate --from-log`: the phase table, and the overlay file other runs take."""

from __future__ import annotations

from pathlib import Path

import yaml

from rlsim.tools.calibration.log_fit import RESIDUAL_WARN_PCT, LogFit
from rlsim.tools.calibration.logs import LoggedRun
from rlsim.tools.calibration.profile_report import text_table


def overlay_block(fit: LogFit, logged: LoggedRun, scenario_name: str) -> dict:
    """The `calibration:` mapping (rlsim.sim.scenario.calibration.CalibrationSpec) of a fit."""
    block: dict = {
        "fitted_from": f"{logged.path.name} ({logged.framework} {logged.syntax}, {len(logged.steps)} steps) on "
                       f"scenario {scenario_name}",
        "hardware": fit.hardware,
        "factors": dict(fit.factors),
    }
    if fit.length_law is not None:
        block["response_length"] = fit.length_law.model_dump()
        block["apply_response_length"] = False  # the target job keeps its own lengths unless asked
    block["band_pct"] = fit.band_pct
    block["phases"] = {
        r.phase: {"logged_s": round(r.logged, 3), "fitted_s": None if r.fitted is None else round(r.fitted, 3),
                  "residual_pct": None if r.residual_pct is None else round(r.residual_pct, 2), "used_in_fit": r.used}
        for r in fit.rows
    }
    block["notes"] = list(fit.notes)
    return block


def write_overlay(block: dict, path: str | Path) -> Path:
    """Write `calibration: {...}` as YAML; `rlsim run S --set calibration=PATH` applies it."""
    header = ("# rlsim calibration overlay, written by `rlsim calibrate --from-log`.\n"
              "# Apply with: rlsim run SCENARIO --set calibration=THIS_FILE (also sweep, compare, sensitivity).\n"
              "# response_length is the logged job's; it replaces a scenario's own only with\n"
              "# apply_response_length: true.\n")
    path = Path(path)
    path.write_text(header + yaml.safe_dump({"calibration": block}, sort_keys=False, width=110, allow_unicode=True))
    return path


def format_fit(fit: LogFit, logged: LoggedRun, scenario_name: str) -> str:
    """Printable report: factors (start -> fitted), then logged vs fitted per phase, band and notes."""
    out = [f"Calibration of scenario {scenario_name} from {logged.path.name} "
           f"({logged.framework} {logged.syntax}, {len(logged.steps)} steps; {fit.simulations} simulations)", ""]
    frows = [[n, f"{fit.start[n]:.4g}", f"{v:.4g}", "yes" if fit.moved(n) else "no"] for n, v in fit.factors.items()]
    out += text_table(["factor", "start", "fitted", "moved"], frows, [False, True, True, False])
    if fit.length_law is not None:
        law = fit.length_law
        out += ["", f"response length: lognormal mean {law.mean:g}, sigma {law.sigma:g}, max {law.max}"]
    prow = [[r.phase, f"{r.logged:.1f}", "—" if r.fitted is None else f"{r.fitted:.1f}",
             "—" if r.residual_pct is None else f"{r.residual_pct:+.1f}", "yes" if r.used else "no"]
            for r in fit.rows]
    out += [""] + text_table(["phase", "logged s", "fitted s", "residual %", "in fit"], prow,
                             [False, True, True, True, False])
    out += ["", f"band carried into predictions: ± {fit.band_pct:.1f}% (the larger of the parameters' error "
            f"{fit.parameter_error_pct:.1f}% and the fit's residual {fit.fit_residual_pct:.1f}%)"]
    out += fit_warnings(fit)
    out += [f"note: {n}" for n in fit.notes]
    return "\n".join(out)


# A factor fitted more than this many times away from its start value is not a correction but a different job.
IMPLAUSIBLE_RATIO = 4.0


def fit_warnings(fit: LogFit) -> list[str]:
    """One line per way the fit failed: a fitted phase left far from the log, or no factor moved."""
    out = [f"warning: {r.phase} stays {r.residual_pct:+.1f}% off the log after fitting (> {RESIDUAL_WARN_PCT:g}%)"
           for r in fit.rows if r.used and r.residual_pct is not None and abs(r.residual_pct) > RESIDUAL_WARN_PCT]
    if fit.factors and not any(fit.moved(n) for n in fit.factors):
        out.append("warning: no factor moved: the log did not change the model; the overlay only carries the band")
    for name, value in fit.factors.items():  # a good fit with absurd factors fits another job, not this one
        start = fit.start.get(name) or 0.0
        ratio = value / start if start > 0 and value > 0 else 1.0
        if ratio > IMPLAUSIBLE_RATIO or ratio < 1.0 / IMPLAUSIBLE_RATIO:
            out.append(f"warning: {name} fitted to {value:.4g}, {max(ratio, 1 / ratio):.1f}x "
                       f"{'above' if ratio > 1 else 'below'} its start {start:g}: is the log from this scenario's "
                       "job and cluster? Predictions from this overlay are not to be trusted")
    return out


def band_lines(summary: dict, calibration) -> list[str]:
    """What a calibrated run prints: the one band (the calibration's, which replaces the uncalibrated validation
    band), the predicted figures with it, and what the overlay did to the job's workload."""
    band = calibration.band_pct
    lines = [f"band ± {band:.1f}% = the calibration's (fit to {calibration.fitted_from}; it replaces the "
             "uncalibrated model's validation band)"]
    for key, label, unit in (("step_time_s", "step time", "s"), ("throughput_tokens_per_s", "throughput", "tok/s")):
        value = summary.get(key)
        if isinstance(value, int | float):
            lines.append(f"  {label} {value:,.1f} {unit} ± {value * band / 100:,.1f} ({band:.1f}%)")
    return lines + workload_lines(calibration)


def workload_lines(calibration) -> list[str]:
    """One line when the overlay carries the logged response lengths: applied (opt-in) or left alone."""
    law = calibration.response_length
    if law is None:
        return []
    text = f"lognormal mean {law.mean:g}, sigma {law.sigma:g}" + ("" if law.max is None else f", max {law.max}")
    if calibration.apply_response_length:
        return [f"workload.response_length replaced by the log's ({text}): apply_response_length: true"]
    return [f"workload unchanged: the log's response lengths ({text}) are not applied (apply_response_length: "
            "true in the overlay to use them)"]
