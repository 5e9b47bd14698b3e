"""Output that fits: README figure numbers reach their reproductions, and every reproduction writes a figure."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from rlsim.tools.cli import app
from rlsim.tools.reproduce import FIGURES, REPRODUCTIONS

runner = CliRunner()


def test_every_readme_figure_number_names_a_reproduction():
    assert sorted(FIGURES) == [f"F{i}" for i in range(1, 10)]
    assert set(FIGURES.values()) <= set(REPRODUCTIONS)


def test_reproduce_refuses_an_unknown_figure_number_in_one_line():
    res = runner.invoke(app, ["reproduce", "F10"])
    assert res.exit_code == 2 and "unknown name 'F10'" in res.output and len(res.output.strip().splitlines()) == 1


def test_reproduce_f3_by_its_figure_number(tmp_path, monkeypatch):
    """`rlsim reproduce f3` runs generation-tp (lower case too); the reproduction itself is stubbed: fast."""
    import rlsim.tools.reproduce as rep

    seen = []
    monkeypatch.setitem(rep.REPRODUCTIONS, "generation-tp", lambda out: seen.append(out) or "ok")
    res = runner.invoke(app, ["reproduce", "f3", "--out", str(tmp_path), "-q"])
    assert res.exit_code == 0, res.output
    assert seen == [tmp_path]


@pytest.mark.slow
def test_verl_one_step_off_writes_its_figure(tmp_path):
    from rlsim.tools.reproduce.async_rl import verl_report

    text = verl_report(tmp_path)
    assert (tmp_path / "step_parts.png").stat().st_size > 20_000 and "step_parts.png" in text


def test_validation_figure_draws_predicted_and_fitted_rows(tmp_path):
    import pandas as pd

    from rlsim.tools.report.style import save_figure
    from rlsim.tools.reproduce.validation import plot_errors

    table = pd.DataFrame({"name": ["a", "b", "c", "d"], "status": ["predicted", "predicted", "fitted", "predicted"],
                          "scope": ["", "", "", "vision"], "error_pct": [5.0, -20.0, 1.0, 300.0]})
    fig = plot_errors(table)
    assert len(fig.axes[0].patches) == 4
    assert save_figure(fig, tmp_path / "errors.png").stat().st_size > 5_000


def test_sweep_figures_show_fractions_in_percent():
    import pandas as pd

    from rlsim.tools.sweep.plot import plot_pareto, plot_sweep

    df = pd.DataFrame({"eta": [1, 2, 4, 8], "gpu_idle_fraction": [0.1, 0.2, 0.3, 0.4],
                       "throughput_tokens_per_s": [1e4, 2e4, 2.5e4, 2.6e4], "error": [None] * 4})
    fig = plot_sweep(df, "eta", "gpu_idle_fraction")
    fig.canvas.draw()
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels() if t.get_text()]
    assert labels and all(t.endswith("%") for t in labels), labels
    fig = plot_pareto(df, "gpu_idle_fraction", "throughput_tokens_per_s", maximize=(False, True))
    fig.canvas.draw()
    xlabels = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert xlabels and all(t.endswith("%") for t in xlabels) and len(xlabels) <= 8, xlabels
