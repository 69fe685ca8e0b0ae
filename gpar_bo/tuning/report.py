"""The tuning report: best configuration, every learning curve, GPAR's final-value bands.

``write_report`` writes ``report.json`` and ``report.png`` for an experiment whose
objective is a learning-curve metric: the best completed trial and its curve, all
curves (early-stopped ones marked at the checkpoint where they stopped), the epochs
each stop saved, and, for trials that have not reached the final checkpoint (running,
paused or stopped), GPAR's predicted final value with a 90% band.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from ax.core.experiment import Experiment
from ax.core.trial_status import TrialStatus

from gpar_bo.ax.checkpoints import Checkpoints
from gpar_bo.ax.curves import experiment_curves, objective_metric, observed_checkpoints
from gpar_bo.ax.early_stopping import GPAREarlyStoppingStrategy
from gpar_bo.tuning.jobs import read_job

__all__ = ["build_report", "write_report"]


def build_report(
    experiment: Experiment, checkpoints: Checkpoints, strategy: GPAREarlyStoppingStrategy
) -> dict[str, Any]:
    """The report as a JSON-serialisable dict.

    Args:
        experiment: The tuning experiment.
        checkpoints: The steps at which the objective is reported.
        strategy: The early-stopping strategy, whose GPAR model gives the
            predicted bands (on the same checkpoints).

    Returns:
        ``{"metric", "minimize", "checkpoints", "best", "trials", "epochs_trained",
        "epochs_saved"}``; ``best`` is None until a trial reaches the final checkpoint.
        Each trial has ``index``, ``status``, ``parameters``, ``steps``, ``values``,
        ``stopped``, ``paused`` (its job is paused, the trial RUNNING), ``epochs_saved``
        (for a stopped trial, the checkpoints after the one it stopped at: epochs it
        did not train; else 0) and, if it did not reach the final checkpoint,
        ``predicted_final`` (``mean``, ``q05``, ``q95``). ``epochs_saved`` in the
        report is their sum.
    """
    name, minimize = objective_metric(experiment)
    curves = experiment_curves(experiment, name, checkpoints)
    samples, _ = strategy.final_value_samples(experiment, curves=curves)
    trials, best = [], None
    for row, index in enumerate(curves.trial_indices):
        observed = ~torch.isnan(curves.Y[row])
        trial = experiment.trials[index]
        steps = observed_checkpoints(curves.Y[row], checkpoints)
        stopped = trial.status == TrialStatus.EARLY_STOPPED
        progress = trial.run_metadata.get("progress_file")
        entry: dict[str, Any] = {
            "index": index,
            "status": trial.status.name,
            "parameters": dict(trial.arms[0].parameters),
            "steps": steps,
            "values": curves.Y[row][observed].tolist(),
            "stopped": stopped,
            "paused": trial.status == TrialStatus.RUNNING and progress is not None
            and read_job(progress).paused,
            # A stopped job trains no checkpoint after the one it stopped at.
            "epochs_saved": sum(c > steps[-1] for c in checkpoints.tolist())
            if stopped and steps else 0,
        }
        if index in samples:
            s = samples[index].double()
            entry["predicted_final"] = {
                "mean": float(s.mean()),
                "q05": float(s.quantile(0.05)),
                "q95": float(s.quantile(0.95)),
            }
        trials.append(entry)
        # Reaching the final checkpoint, not the status, makes a final value: a trial
        # stopped during its final epoch finishes it.
        if bool(observed[-1]) and (
            best is None or (entry["values"][-1] < best["final"]) == minimize
        ):
            best = {"trial_index": index, "parameters": entry["parameters"],
                    "final": entry["values"][-1], "steps": entry["steps"],
                    "values": entry["values"]}
    return {
        "metric": name,
        "minimize": minimize,
        "checkpoints": checkpoints.tolist(),
        "best": best,
        "trials": trials,
        "epochs_trained": sum(len(t["steps"]) for t in trials),
        "epochs_saved": sum(t["epochs_saved"] for t in trials),
    }


def _plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    final = report["checkpoints"][-1]
    for trial in report["trials"]:
        style = {"color": "0.6", "lw": 1.0, "alpha": 0.8}
        if trial["stopped"]:
            style.update(color="tab:red", ls="--", alpha=0.6)
        elif trial["status"] == "RUNNING":
            style.update(color="tab:blue", alpha=0.9)
        ax.plot(trial["steps"], trial["values"], **style)
        if trial["stopped"]:  # where the run stopped: its last epoch is the decision's
            ax.plot(trial["steps"][-1], trial["values"][-1], "x", color="tab:red")
        if "predicted_final" in trial:
            p = trial["predicted_final"]
            color = "tab:red" if trial["stopped"] else "tab:blue"
            ax.errorbar(final, p["mean"], yerr=[[p["mean"] - p["q05"]], [p["q95"] - p["mean"]]],
                        fmt="o", ms=3, color=color, alpha=0.5, capsize=2)
    if report["best"] is not None:
        best = report["best"]
        ax.plot(best["steps"], best["values"], color="black", lw=2.5,
                label=f"best: trial {best['trial_index']} ({best['final']:.4g})")
    # Legend proxies for the styles above, only for what was drawn.
    trials = report["trials"]
    grey = {t["status"] for t in trials if not t["stopped"] and t["status"] != "RUNNING"}
    if grey:
        ax.plot([], [], color="0.6", label=" / ".join(
            {"COMPLETED": "completed", "FAILED": "failed"}.get(s, s.lower())
            for s in sorted(grey)))
    if any(t["stopped"] for t in trials):
        ax.plot([], [], color="tab:red", ls="--", marker="x", label="early-stopped")
    if any(t["status"] == "RUNNING" for t in trials):
        ax.plot([], [], color="tab:blue", label="running")
    for stopped, color in ((False, "tab:blue"), (True, "tab:red")):
        if any("predicted_final" in t and t["stopped"] == stopped for t in trials):
            ax.errorbar([], [], yerr=[], fmt="o", color=color, alpha=0.5,
                        label="GPAR final-value 90% band"
                              + (" (early-stopped)" if stopped else ""))
    ax.set_xlabel("epoch")
    ax.set_ylabel(report["metric"])
    title = f"{len(report['trials'])} trials, {report['epochs_trained']} epochs trained"
    if report.get("epochs_saved"):
        title += f", {report['epochs_saved']} saved by early stopping"
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0]:  # an empty report draws nothing to name
        ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_report(
    experiment: Experiment,
    checkpoints: Checkpoints,
    strategy: GPAREarlyStoppingStrategy,
    directory: str | Path,
) -> dict[str, Any]:
    """Write ``report.json`` and ``report.png`` to ``directory`` (see ``build_report``);
    return the report."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    report = build_report(experiment, checkpoints, strategy)
    partial = directory / "report.json.partial"
    partial.write_text(json.dumps(report, indent=2))
    os.replace(partial, directory / "report.json")
    _plot(report, directory / "report.png")
    return report
