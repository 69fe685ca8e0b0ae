"""The report's legend names only what the plot draws; stop, pause and resume markers sit
where they happened."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest

from gpar_bo.tuning import report as report_module


def _axes(report: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    png = report_module._plot(report)
    assert png.startswith(b"\x89PNG")
    return figures[0].axes[0]


def _legend(report: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    legend = _axes(report, tmp_path, monkeypatch).get_legend()
    return [] if legend is None else [t.get_text() for t in legend.get_texts()]


def _trial(index: int, status: str, n: int, band: bool = False,
           resumed_at: tuple[int, ...] = ()) -> dict:
    entry = {"index": index, "status": status, "parameters": {"x": 0.1 * index},
             "steps": list(range(1, n + 1)), "values": [1.0 / s for s in range(1, n + 1)],
             "paused_at": list(resumed_at) + ([n] if status == "paused" else []),
             "resumed_at": list(resumed_at)}
    if band:
        entry["predicted_final"] = {"mean": 0.3, "median": 0.3, "q05": 0.2, "q95": 0.4}
    return entry


def _report(trials: list[dict]) -> dict:
    best = trials[0]
    return {"metric": "error", "minimize": True, "checkpoints": [1, 2, 3, 4],
            "scheduler": "early-stopping", "epochs_saved": 0, "epochs_not_trained": 0,
            "best": {"trial_index": best["index"], "parameters": best["parameters"],
                     "final": best["values"][-1], "steps": best["steps"],
                     "values": best["values"]},
            "trials": trials, "epochs_trained": sum(len(t["steps"]) for t in trials)}


def test_only_completed_trials_list_no_running_and_no_band(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    matplotlib.use("Agg")
    labels = _legend(_report([_trial(0, "completed", 4), _trial(1, "completed", 4)]),
                     tmp_path, monkeypatch)
    assert labels == ["best: trial 0 (0.25)", "completed"]


def test_every_style_drawn_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    matplotlib.use("Agg")
    trials = [_trial(0, "completed", 4), _trial(1, "stopped", 2, band=True),
              _trial(2, "running", 1, band=True), _trial(3, "failed", 2),
              _trial(4, "paused", 3, band=True, resumed_at=(1,)), _trial(5, "pending", 0)]
    labels = _legend(_report(trials), tmp_path, monkeypatch)
    assert labels == ["best: trial 0 (0.25)", "completed", "running", "paused", "stopped",
                      "failed", "resumed after a pause",
                      "GPAR final-value 90% band (early-stopping)"]


def test_pauses_and_resumptions_are_marked_where_they_happened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    matplotlib.use("Agg")
    trials = [_trial(0, "completed", 4, resumed_at=(2,)), _trial(1, "paused", 3, resumed_at=(1,))]
    axes = _axes(_report(trials), tmp_path, monkeypatch)

    def points(marker: str) -> list[tuple[float, float]]:
        return sorted((float(x), float(y)) for line in axes.get_lines()
                      if line.get_marker() == marker for x, y in zip(line.get_xdata(),
                                                                      line.get_ydata()))

    assert points(">") == [(1.0, 1.0), (2.0, 0.5)]  # each run resumed at its pause
    assert points("o") == [(3.0, pytest.approx(1 / 3))]  # where the paused run waits


def test_stop_markers_sit_at_the_epoch_each_run_stopped_and_the_title_counts_savings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    matplotlib.use("Agg")
    trials = [_trial(0, "completed", 4), _trial(1, "stopped", 2), _trial(2, "stopped", 3)]
    report = _report(trials)
    report["epochs_saved"] = 3
    axes = _axes(report, tmp_path, monkeypatch)
    markers = sorted((float(line.get_xdata()[0]), float(line.get_ydata()[0]))
                     for line in axes.get_lines()
                     if line.get_marker() == "x" and len(line.get_xdata()))
    assert markers == [(2.0, 0.5), (3.0, pytest.approx(1 / 3))]
    assert axes.get_title() == "3 trials, 9 epochs trained, 3 saved by early stopping"
    # Freeze-thaw saves nothing by a stop; the title says what it left untrained.
    report.update(scheduler="freeze-thaw", epochs_saved=None, epochs_not_trained=3)
    axes = _axes(report, tmp_path, monkeypatch)
    assert axes.get_title() == "3 trials, 9 epochs trained, 3 left by paused or stopped runs"
