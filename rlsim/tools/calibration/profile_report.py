"""Output of a profile calibration: the fitted profile as YAML, and a printable report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import yaml

from rlsim.sim.api import HardwareProfile, profile_numeric_fields
from rlsim.tools.calibration.profile_fit import CalibrationResult

_FIELD_ORDER = ("name", "description", *profile_numeric_fields())


def write_profile(profile: HardwareProfile, path: str | Path, header: str | None = None) -> Path:
    """Write a profile as YAML loadable by `rlsim.sim.hardware.load_profile_file` (fields in schema order)."""
    data = profile.model_dump(exclude_none=True)
    ordered = {k: data[k] for k in _FIELD_ORDER if k in data}
    ordered["sources"] = {k: profile.sources[k] for k in profile_numeric_fields() if k in profile.sources}
    text = yaml.safe_dump(ordered, sort_keys=False, width=100, allow_unicode=True)
    if header:
        text = "".join(f"# {line}\n" for line in header.splitlines()) + text
    path = Path(path)
    path.write_text(text)
    return path


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def fmt(cells: Sequence[str]) -> str:
        padded = (c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, right, strict=True))
        return "  ".join(padded).rstrip()

    return [fmt(headers), "  ".join("-" * w for w in widths), *(fmt(r) for r in rows)]


def _relative(share: float | None) -> str:
    if share is None:
        return "—"
    return "±>999%" if share > 9.99 else f"±{share:.0%}"


def format_report(result: CalibrationResult) -> str:
    """A printable report: fitted parameters, then measured vs predicted per row."""
    out = [f"Calibration of {result.profile.name} from {result.sources_label}", ""]
    prow = [
        [p.name, f"{p.start:.4g}", f"{p.fitted:.4g}",
         _relative(p.relative_stderr), "yes" if p.informed else "no (kept)"]
        for p in result.params
    ]
    out += text_table(["parameter", "start", "fitted", "1σ (rows)", "informed"], prow, [False, True, True, True, False])
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
    out += text_table(
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
