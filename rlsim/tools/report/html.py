"""One self-contained HTML file for a results folder: tables, figures as inline SVG, the scenario.

Nothing is fetched when it opens (no scripts, no external styles or fonts), so it can be mailed or
attached to an issue and read offline. Works for a run folder (summary.json), a sweep folder
(results.csv) and a plan folder (plan.csv); figures already in the folder are embedded as well.
"""

from __future__ import annotations

import base64
import html
import io
import json
from pathlib import Path

import pandas as pd

from rlsim.tools.report.formats import show
from rlsim.tools.report.uncertainty import flat_metrics

CSS = """body{font:14px/1.45 system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px;margin:.5em 0}td,th{padding:2px 8px;border-bottom:1px solid #eee}
td.n{text-align:right;font-variant-numeric:tabular-nums}th{text-align:left;background:#f6f6f6}
pre{background:#f6f6f6;padding:1em;overflow:auto;font-size:12px}.fig svg,.fig img{max-width:100%;height:auto}
.scroll{max-height:28em;max-width:100%;overflow:auto}.scroll th{position:sticky;top:0}
.wide td,.wide th{white-space:nowrap}td.label{white-space:pre}details{margin:.5em 0}"""

PERFETTO = (
    "Open <a href='https://ui.perfetto.dev'>ui.perfetto.dev</a> (or <code>chrome://tracing</code>) and "
    "drag <a href='trace.json'><code>trace.json</code></a> from this folder onto it: one process per pool, "
    "one thread per GPU group or engine. The trace stays on your machine (Perfetto runs in the browser)."
)


def folder_kind(folder: Path) -> str | None:
    """'run', 'sweep' or 'plan' by the file that marks each folder; None if none is there."""
    for kind, marker in (("run", "summary.json"), ("sweep", "results.csv"), ("plan", "plan.csv")):
        if (Path(folder) / marker).is_file():
            return kind
    return None


def svg(fig) -> str:
    """A figure as inline SVG markup (closed after rendering)."""
    import matplotlib.pyplot as plt

    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _frame(df: pd.DataFrame, max_rows: int = 200, wide: bool = False) -> str:
    """A DataFrame as an HTML table, numbers right-aligned and formatted by column kind; in a box that scrolls
    both ways (a wide table, `wide`, keeps each cell on one line and scrolls sideways instead of squeezing)."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    rows = []
    for _, r in df.head(max_rows).iterrows():
        cells = []
        for c, v in r.items():
            number = isinstance(v, int | float) and not isinstance(v, bool)
            text = show(str(c), v) if number else ("" if v is None or v != v else str(v))
            cells.append(f"<td{' class=n' if number else ''}>{html.escape(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    more = f"<p>… {len(df) - max_rows} more rows in the CSV.</p>" if len(df) > max_rows else ""
    kind = "scroll wide" if wide else "scroll"
    return f"<div class='{kind}'><table><tr>{head}</tr>{''.join(rows)}</table></div>{more}"


def _images(folder: Path, skip: set[str]) -> list[str]:
    """Figures already in the folder (SVG inline, PNG as data URIs)."""
    out = []
    for path in sorted(folder.glob("*.svg")) + sorted(folder.glob("*.png")):
        if path.stem in skip:
            continue
        if path.suffix == ".svg":
            body = path.read_text()
            body = body[body.index("<svg"):] if "<svg" in body else ""
        else:
            data = base64.b64encode(path.read_bytes()).decode()
            body = f"<img alt='{html.escape(path.name)}' src='data:image/png;base64,{data}'>"
        out.append(f"<h3>{html.escape(path.name)}</h3><div class=fig>{body}</div>")
    return out


def _labelled(flat: dict[str, float], tables) -> str:
    """The run's summary as `rlsim run` prints it: rows named for people, in reading order (output.metric_rows)."""
    from rlsim.tools.report.output import metric_rows, phase_means

    values = dict(flat)
    if not tables.steps.empty:
        values.update({f"timing_s/{k}": v for k, v in phase_means(tables.steps).items()})
    rows = [("scenario", tables.name or ""), ("GPUs", show("num_gpus", values.get("num_gpus"))),
            ("measured steps", show("steps", values.get("steps"))), *metric_rows(values, None, tables.pool_gpus)]
    body = "".join(f"<tr><td class=label>{html.escape(label)}</td><td class=n>{html.escape(value)}</td></tr>"
                   for label, value in rows)
    return f"<div class=scroll><table><tr><th>metric</th><th>value</th></tr>{body}</table></div>"


def _run_sections(folder: Path) -> tuple[str, list[str]]:
    from rlsim.tools.report.output import load_run
    from rlsim.tools.report.plots import PLOTS

    summary, tables = load_run(folder)
    flat = flat_metrics(summary)
    parts = ["<h2>Summary</h2>" + _labelled(flat, tables)]
    rows = pd.DataFrame({"metric": list(flat), "value": [show(k, v) for k, v in flat.items()]})
    parts.append("<details><summary>every summary.json key</summary>" + _frame(rows) + "</details>")
    steps = tables.steps.drop(columns=[c for c in tables.steps.columns if c.startswith("perf/")], errors="ignore")
    parts.append("<h2>Per step</h2>" + _frame(steps, wide=True))
    figures = []
    for kind in ("gantt", "breakdown", "idle"):
        stem, make = PLOTS[kind]
        figures.append(f"<h3>{stem}</h3><div class=fig>{svg(make(tables))}</div>")
    parts.append("<h2>Figures</h2>" + "".join(figures))
    extra = _images(folder, {PLOTS[k][0] for k in ("gantt", "breakdown", "idle")})
    if extra:
        parts.append("<h2>Other figures in the folder</h2>" + "".join(extra))
    parts.append("<h2>Trace</h2><p>" + PERFETTO + "</p>")
    resolved = folder / "scenario.resolved.yaml"
    if resolved.is_file():
        parts.append("<h2>Scenario as resolved</h2><pre>" + html.escape(resolved.read_text()) + "</pre>")
    meta = folder / "meta.json"
    if meta.is_file():
        parts.append("<h2>Run metadata</h2><pre>" + html.escape(json.dumps(json.loads(meta.read_text()), indent=2))
                     + "</pre>")
    return tables.name or folder.name, parts


def _table_sections(folder: Path, csv: str, title: str) -> tuple[str, list[str]]:
    table = pd.read_csv(folder / csv)
    parts = [f"<h2>{title} ({len(table)} rows, {csv})</h2>" + _frame(table)]
    images = _images(folder, set())
    if images:
        parts.append("<h2>Figures</h2>" + "".join(images))
    for name in ("sweep.json", "sweep.yaml"):
        if (folder / name).is_file():
            parts.append(f"<h2>{name}</h2><pre>" + html.escape((folder / name).read_text()) + "</pre>")
    return folder.name, parts


def render_report(folder: Path) -> str:
    """The HTML text of the report for a run, sweep or plan folder (ValueError if it is none of them)."""
    from rlsim.tools.report.style import apply_style

    folder = Path(folder)
    kind = folder_kind(folder)
    if kind is None:
        raise ValueError(f"{folder}: not a run, sweep or plan folder (no summary.json, results.csv or plan.csv)")
    apply_style()
    if kind == "run":
        name, parts = _run_sections(folder)
    elif kind == "sweep":
        name, parts = _table_sections(folder, "results.csv", "Sweep results")
    else:
        name, parts = _table_sections(folder, "plan.csv", "Plan")
    title = f"rlsim {kind}: {html.escape(name)}"
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title><style>{CSS}</style>"
            f"</head><body><h1>{title}</h1>" + "\n".join(parts) + "</body></html>\n")


def write_report(folder: Path, out: Path | None = None) -> Path:
    """Write FOLDER/report.html (or `out`) and return its path."""
    target = Path(out) if out else Path(folder) / "report.html"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(render_report(folder), encoding="utf-8")
    return target
