"""The tuning report: every run told apart, GPAR's final-value bands, epochs, the best run.

``write_report`` writes three files for an experiment whose objective is a
learning-curve metric, each replaced atomically (a reader never sees half of one):

* ``report.json`` (:func:`build_report`): the settings, the best configuration and
  its curve, and every trial: its status, its curve, the epochs at which it was
  paused and resumed, the epochs it trained and did not train, and, for an open run,
  GPAR's predicted final value with a 90% band;
* ``report.png``: every curve, styled by status, with pauses, resumptions and stops
  marked on it, the bands at the final epoch and the best curve in black;
* ``report.html``: one self-contained page with the settings, the totals, the best
  configuration, the plot (embedded) and a table of every trial.

**Statuses.** ``completed`` (reached the final checkpoint), ``running`` (training,
awaiting its verdict, or started or resumed and waiting for a worker), ``paused``
(its job paused at a checkpoint and may be resumed; the trial is RUNNING in Ax), ``stopped``
(EARLY_STOPPED in Ax, by the early-stopping strategy; freeze-thaw pauses its unfinished
runs when the budget ends and stops none), ``failed``
(FAILED or ABANDONED in Ax) and ``pending`` (decided, its job not started).
``paused_at`` lists the epoch of every pause, ``resumed_at`` those after which
the run was started again (read from the trial's progress file,
:class:`gpar_bo.tuning.jobs.JobRecord`); a run paused now or stopped while paused has
one pause more than resumptions.

**Epochs** are in the checkpoints' unit (epochs in ``gpar-bo tune``):

* ``epochs_trained``: the last checkpoint a run reported; the report's total is the
  epochs spent.
* ``epochs_not_trained``: for a paused or stopped run, the final checkpoint minus
  the last it reported: what training it to the end would still cost. 0 for other
  runs (a running run goes on; a failed run was not left by a decision).
* ``epochs_saved`` (the report's total only): under early stopping, the
  ``epochs_not_trained`` of the stopped runs: a stop is a decision, and a stopped run
  trains no epoch past the checkpoint it was decided at. Under freeze-thaw it is
  ``null``: the policy pauses runs and never stops one; a paused run may still be
  resumed, also by a later run with a larger budget. There, ``epochs_not_trained`` says what the policy left untrained.

**Bands** come from the model of the scheduler that ran, through its
``final_value_samples(experiment, curves=...)``: under early stopping the
strategy's GPAR on the metric
(:meth:`gpar_bo.ax.early_stopping.GPAREarlyStoppingStrategy.final_value_samples`),
under freeze-thaw the policy's own GPAR on log-error increments
(:meth:`gpar_bo.tuning.freeze_thaw.FreezeThawLoop.final_value_samples`, from
:meth:`gpar_bo.freeze_thaw.FreezeThawPolicy.final_error_samples`). Open runs
(running, paused, stopped) with at least one value short of the final checkpoint
get one once the model exists; :func:`final_value_band` turns samples into the
sample mean and the 5% and 95% quantiles.
"""

from __future__ import annotations

import base64
import html
import io
import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import torch
from ax.core.base_trial import BaseTrial
from ax.core.experiment import Experiment
from ax.core.trial_status import TrialStatus
from torch import Tensor

from gpar_bo.ax.checkpoints import Checkpoints
from gpar_bo.ax.curves import (
    ExperimentCurves,
    experiment_curves,
    objective_metric,
    observed_checkpoints,
)
from gpar_bo.tuning.atomic import atomic_write_bytes, atomic_write_text
from gpar_bo.tuning.jobs import JobRecord, read_job
from gpar_bo.tuning.runner import CurveRunner

__all__ = [
    "BAND_LEVEL",
    "REPORT_FILES",
    "STATUSES",
    "FinalValueSamples",
    "build_report",
    "final_value_band",
    "render_html",
    "write_report",
]

#: The files ``write_report`` writes.
REPORT_FILES = ("report.json", "report.png", "report.html")
#: A trial's status in the report (see the module docstring).
STATUSES = ("completed", "running", "paused", "stopped", "failed", "pending")
#: The probability of the final-value bands (between the 5% and 95% quantiles).
BAND_LEVEL = 0.9
#: Whose model the bands come from, by scheduler.
_BAND_MODELS = {
    "freeze-thaw": "the freeze-thaw policy's GPAR on log-error increments (FreezeThawPolicy)",
    "early-stopping": "the early-stopping strategy's GPAR on the metric "
                      "(GPAREarlyStoppingStrategy)",
}
_OPEN = ("running", "paused", "stopped")
_AX_STATUS = {TrialStatus.COMPLETED: "completed", TrialStatus.EARLY_STOPPED: "stopped",
              TrialStatus.FAILED: "failed", TrialStatus.ABANDONED: "failed"}


class FinalValueSamples(Protocol):
    """A model of final values: ``GPAREarlyStoppingStrategy`` or ``FreezeThawLoop``."""

    def final_value_samples(
        self, experiment: Experiment, curves: ExperimentCurves | None = None
    ) -> tuple[Mapping[int, Tensor], float | None]:
        """Samples of the final value of unfinished trials, by trial index, and the
        incumbent."""


def final_value_band(samples: Tensor) -> dict[str, float]:
    """``{"mean", "median", "q05", "q95"}`` of samples of a final value (``num_samples``):
    the sample mean and median and the quantiles that bound the central ``BAND_LEVEL``
    band. The band is drawn around the median: GPAR's final values are log-normal
    mixtures, whose mean can lie above the band when a run's future is very uncertain."""
    s = samples.detach().double().flatten()
    tail = (1 - BAND_LEVEL) / 2
    return {"mean": float(s.mean()), "median": float(s.median()), "q05": float(s.quantile(tail)),
            "q95": float(s.quantile(1 - tail))}


def _number(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)


def _job(trial: BaseTrial) -> JobRecord:
    progress = trial.run_metadata.get("progress_file")
    return read_job(progress) if progress is not None else JobRecord()


def _paused(experiment: Experiment) -> set[int]:
    """RUNNING trials whose job is paused: the runner's answer if it has the pause
    protocol (a resumed job waiting for a worker is not paused), else the progress
    files'."""
    running = [t for t in experiment.trials.values() if t.status == TrialStatus.RUNNING]
    if isinstance(experiment.runner, CurveRunner):
        return set(experiment.runner.paused(running))
    return {t.index for t in running if _job(t).paused}


def build_report(
    experiment: Experiment,
    checkpoints: Checkpoints,
    bands: FinalValueSamples,
    *,
    scheduler: str = "early-stopping",
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The report as a JSON-serialisable dict (see the module docstring).

    Args:
        experiment: The tuning experiment.
        checkpoints: The steps at which the objective is reported.
        bands: The scheduler's model of final values (on the same checkpoints): the
            early-stopping strategy, or the freeze-thaw loop (its policy's model).
        scheduler: ``"early-stopping"`` or ``"freeze-thaw"``: which scheduler ran
            (it decides what ``epochs_saved`` means).
        settings: The run's settings (budget, workers, ...), reported as given.

    Returns:
        ``{"metric", "minimize", "scheduler", "settings", "checkpoints", "bands",
        "best", "trials", "epochs_trained", "epochs_not_trained", "epochs_saved"}``.
        ``bands`` is ``{"level", "model"}``; ``best`` (``trial_index``,
        ``parameters``, ``final``, ``steps``, ``values``) is the trial with the best
        value at the final checkpoint, None until one reaches it. Each trial (every
        trial with an arm) has ``index``, ``status``, ``parameters``, ``steps``,
        ``values``, ``paused_at``, ``resumed_at``, ``epochs_trained``,
        ``epochs_not_trained`` and, for an open run with a band,
        ``predicted_final`` (``final_value_band``).

    Raises:
        ValueError: ``scheduler`` is neither of the two.
    """
    if scheduler not in _BAND_MODELS:
        raise ValueError(f"scheduler must be one of {sorted(_BAND_MODELS)}; got {scheduler!r}.")
    name, minimize = objective_metric(experiment)
    curves = experiment_curves(experiment, name, checkpoints)
    samples, _ = bands.final_value_samples(experiment, curves=curves)
    rows = {index: row for row, index in enumerate(curves.trial_indices)}
    final = checkpoints.tolist()[-1]
    paused = _paused(experiment)
    trials, best = [], None
    for index, trial in sorted(experiment.trials.items()):
        if not trial.arms:
            continue
        job = _job(trial)
        status = (("paused" if index in paused else "running")
                  if trial.status == TrialStatus.RUNNING
                  else _AX_STATUS.get(trial.status, "pending"))
        steps: list[float] = []
        values: list[float] = []
        if index in rows:
            y = curves.Y[rows[index]]
            steps = observed_checkpoints(y, checkpoints)
            values = y[~torch.isnan(y)].tolist()
        trained = steps[-1] if steps else 0
        resumed = list(job.resumes)
        if status == "running" and job.paused and job.pauses:
            resumed.append(job.pauses[-1])  # resumed, its job not started yet
        entry: dict[str, Any] = {
            "index": index,
            "status": status,
            "parameters": dict(trial.arms[0].parameters),
            "steps": steps,
            "values": values,
            "paused_at": [_number(s) for s in job.pauses],
            "resumed_at": [_number(s) for s in resumed],
            "epochs_trained": _number(trained),
            "epochs_not_trained": _number(final - trained)
            if status in ("paused", "stopped") else 0,
        }
        if status in _OPEN and index in samples:
            entry["predicted_final"] = final_value_band(samples[index])
        trials.append(entry)
        # Reaching the final checkpoint, not the status, makes a final value: a trial
        # stopped during its final epoch finishes it.
        if steps and steps[-1] == final and (
            best is None or (values[-1] < best["final"]) == minimize
        ):
            best = {"trial_index": index, "parameters": entry["parameters"],
                    "final": values[-1], "steps": steps, "values": values}
    not_trained = sum(t["epochs_not_trained"] for t in trials)
    return {
        "metric": name,
        "minimize": minimize,
        "scheduler": scheduler,
        "settings": dict(settings or {}),
        "checkpoints": checkpoints.tolist(),
        "bands": {"level": BAND_LEVEL, "model": _BAND_MODELS[scheduler]},
        "best": best,
        "trials": trials,
        "epochs_trained": _number(sum(t["epochs_trained"] for t in trials)),
        "epochs_not_trained": _number(not_trained),
        "epochs_saved": _number(sum(t["epochs_not_trained"] for t in trials
                                    if t["status"] == "stopped"))
        if scheduler == "early-stopping" else None,
    }


# ------------------------------------------------------------------------- plot
#: Line style and end marker of each status (the end marker sits at the last epoch).
_STYLES: dict[str, dict[str, Any]] = {
    "completed": {"color": "0.6", "lw": 1.0, "alpha": 0.8},
    "running": {"color": "tab:blue", "lw": 1.0, "alpha": 0.9},
    "paused": {"color": "tab:orange", "lw": 1.0, "ls": ":", "alpha": 0.9},
    "stopped": {"color": "tab:red", "lw": 1.0, "ls": "--", "alpha": 0.6},
    "failed": {"color": "0.3", "lw": 0.8, "ls": "-.", "alpha": 0.6},
}
_END_MARKERS = {"paused": {"marker": "o", "mfc": "white"}, "stopped": {"marker": "x"}}


def _plot(report: dict[str, Any]) -> bytes:
    """``report.png``'s bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    final = report["checkpoints"][-1]
    trials = [t for t in report["trials"] if t["steps"]]
    for trial in trials:
        style = _STYLES[trial["status"]]
        ax.plot(trial["steps"], trial["values"], **style)
        at = dict(zip(trial["steps"], trial["values"]))
        resumed = [s for s in trial["resumed_at"] if s in at]
        if resumed:  # where a pause ended: the run went on from this checkpoint
            ax.plot(resumed, [at[s] for s in resumed], ">", ms=5, color=style["color"])
        if trial["status"] in _END_MARKERS:  # where the run stopped or is paused
            ax.plot(trial["steps"][-1], trial["values"][-1], ls="none", color=style["color"],
                    **_END_MARKERS[trial["status"]])
        if "predicted_final" in trial:
            p = trial["predicted_final"]
            ax.errorbar(final, p["median"], yerr=[[p["median"] - p["q05"]], [p["q95"] - p["median"]]],
                        fmt="o", ms=3, color=style["color"], alpha=0.5, capsize=2)
    if report["best"] is not None:
        best = report["best"]
        ax.plot(best["steps"], best["values"], color="black", lw=2.5,
                label=f"best: trial {best['trial_index']} ({best['final']:.4g})")
    # Legend proxies for the styles above, only for what was drawn.
    drawn = {t["status"] for t in trials}
    for status in STATUSES:
        if status in drawn:
            ax.plot([], [], **_STYLES[status], **_END_MARKERS.get(status, {}), label=status)
    if any(t["resumed_at"] for t in trials):
        ax.plot([], [], ">", ms=5, color="black", label="resumed after a pause")
    if any("predicted_final" in t for t in trials):
        ax.errorbar([], [], yerr=[], fmt="o", color="black", alpha=0.5,
                    label=f"GPAR final-value {BAND_LEVEL:.0%} band ({report['scheduler']})")
    ax.set_xlabel("epoch")
    ax.set_ylabel(report["metric"])
    title = f"{len(report['trials'])} trials, {report['epochs_trained']} epochs trained"
    if report.get("epochs_saved"):
        title += f", {report['epochs_saved']} saved by early stopping"
    elif report.get("epochs_saved") is None and report.get("epochs_not_trained"):
        title += f", {report['epochs_not_trained']} left by paused or stopped runs"
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:  # an empty report draws nothing to name
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    return buffer.getvalue()


# ------------------------------------------------------------------------- page
def _cell(value: Any) -> str:
    if value is None:
        return "&ndash;"
    if isinstance(value, float):
        return html.escape(f"{value:.4g}")
    return html.escape(str(value))


def _band(trial: Mapping[str, Any]) -> str:
    p = trial.get("predicted_final")
    if p is None:
        return "&ndash;"
    return f"{_cell(p['median'])} [{_cell(p['q05'])}, {_cell(p['q95'])}]"


def _pauses(trial: Mapping[str, Any]) -> str:
    parts = []
    if trial["paused_at"]:
        parts.append("paused at " + ", ".join(_cell(s) for s in trial["paused_at"]))
    if trial["resumed_at"]:
        parts.append("resumed at " + ", ".join(_cell(s) for s in trial["resumed_at"]))
    return "; ".join(parts) or "&ndash;"


def _table(header: list[str], rows: list[tuple[str, list[str]]]) -> str:
    """An HTML table; ``header`` and cells are already escaped; rows are
    ``(class, cells)``."""
    head = "".join(f"<th>{h}</th>" for h in header)
    body = "\n".join(
        ("<tr>" if not css else f'<tr class="{css}">')
        + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
        for css, cells in rows)
    return f"<table>\n<tr>{head}</tr>\n{body}\n</table>"


_CSS = """
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
th { background: #f3f3f3; }
tr.best td { background: #fff3b0; font-weight: bold; }
img { max-width: 100%; }
"""


def render_html(report: Mapping[str, Any], png: bytes) -> str:
    """``report.html``: one self-contained page (the plot embedded as base64) with
    the settings, the totals, the best configuration and a table of every trial,
    the best one highlighted. Every name and value from the report is escaped."""
    best = report["best"]
    best_index = None if best is None else best["trial_index"]
    names: list[str] = []
    for trial in report["trials"]:
        names += [n for n in trial["parameters"] if n not in names]
    counts = Counter(t["status"] for t in report["trials"])
    budget = report["settings"].get("budget_epochs")
    totals = [
        ("trials", f"{len(report['trials'])} ("
         + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]) + ")"),
        ("epochs trained", _cell(report["epochs_trained"])
         + ("" if budget is None else f" of a budget of {_cell(budget)}")),
        ("epochs not trained by paused or stopped runs", _cell(report["epochs_not_trained"])),
        ("epochs saved by early stopping", "not counted: freeze-thaw pauses runs and "
         "stops none" if report["epochs_saved"] is None
         else _cell(report["epochs_saved"])),
        ("final-value bands", f"{report['bands']['level']:.0%}, from "
         + html.escape(report["bands"]["model"])),
    ]
    sections = [
        f"<h1>gpar-bo tune: {html.escape(str(report['metric']))} "
        f"({'minimised' if report['minimize'] else 'maximised'})</h1>",
        "<h2>Settings</h2>",
        _table(["setting", "value"], [("", [html.escape(str(k)), _cell(v)]) for k, v in
                                      {"scheduler": report["scheduler"],
                                       **report["settings"]}.items()]),
        "<h2>Totals</h2>",
        _table(["total", "value"], [("", [html.escape(k), v]) for k, v in totals]),
        "<h2>Best configuration</h2>",
        "<p>No trial has reached the final checkpoint yet.</p>" if best is None else
        f"<p>Trial {_cell(best['trial_index'])}: final {html.escape(str(report['metric']))} "
        f"{_cell(best['final'])}.</p>"
        + _table(["parameter", "value"], [("", [html.escape(str(k)), _cell(v)])
                                          for k, v in best["parameters"].items()]),
        "<h2>Learning curves</h2>",
        f'<img alt="learning curves" src="data:image/png;base64,'
        f'{base64.b64encode(png).decode()}">',
        "<h2>Trials</h2>",
        _table(
            ["trial", "status", "pauses", *(html.escape(str(n)) for n in names),
             "epochs trained", f"last {html.escape(str(report['metric']))}",
             f"predicted final [{report['bands']['level']:.0%} band]"],
            [("best" if t["index"] == best_index else "",
              [_cell(t["index"]), html.escape(t["status"]), _pauses(t),
               *(_cell(t["parameters"].get(n)) for n in names), _cell(t["epochs_trained"]),
               _cell(t["values"][-1] if t["values"] else None), _band(t)])
             for t in report["trials"]]),
    ]
    return ("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f"<title>gpar-bo tune report</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            + "\n".join(sections) + "\n</body>\n</html>\n")


def write_report(
    experiment: Experiment,
    checkpoints: Checkpoints,
    bands: FinalValueSamples,
    directory: str | Path,
    *,
    scheduler: str = "early-stopping",
    settings: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``report.json``, ``report.png`` and ``report.html`` to ``directory``, each
    atomically (see :func:`build_report` for the arguments); return the report."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    report = build_report(experiment, checkpoints, bands, scheduler=scheduler,
                          settings=settings)
    atomic_write_text(directory / "report.json", json.dumps(report, indent=2))
    png = _plot(report)
    atomic_write_bytes(directory / "report.png", png)
    atomic_write_text(directory / "report.html", render_html(report, png))
    return report
