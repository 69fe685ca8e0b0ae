"""The tuning report: statuses, pauses and resumptions, the scheduler's bands, epochs and
the HTML page, on a freeze-thaw run of the toy job (in :class:`FakeRunner`) and on
hand-made reports."""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path

import pytest
import torch
from ax.core.trial_status import TrialStatus

from gpar_bo.freeze_thaw import FreezeThawPolicy
from gpar_bo.problems.toy import toy_problem
from gpar_bo.tuning.freeze_thaw import FreezeThawLoop
from gpar_bo.tuning.jobs import read_job
from gpar_bo.tuning.report import BAND_LEVEL, _plot, final_value_band, render_html, write_report
from gpar_bo.tuning.session import new_experiment
from tests.tuning.fake_runner import FakeRunner

EPOCHS = 4
#: The runner's job states, as the report names them (a job queued for a worker,
#: new or resumed, has been started: running).
EXPECTED_STATUS = {"completed": "completed", "stopped": "stopped", "paused": "paused",
                   "training": "running", "awaiting": "running", "queued": "running"}


@pytest.fixture(scope="module")
def freeze_thaw_run(tmp_path_factory: pytest.TempPathFactory):
    """A freeze-thaw run stepped until runs of every kind exist; one paused run is
    then stopped (as at the end of a budget). Returns the loop, runner and report."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("run")
    problem = toy_problem(EPOCHS)
    runner = FakeRunner(problem.train, str(out / "runs"), problem.train_kwargs,
                        max_workers=2, final_step=EPOCHS)
    experiment = new_experiment(problem, runner, "freeze-thaw")
    policy = FreezeThawPolicy(
        list(range(1, EPOCHS + 1)), num_samples=32, num_candidates=16, seed=0,
        fit_kwargs={"optimizer_kwargs": {"options": {"maxiter": 40}}})
    loop = FreezeThawLoop(experiment, runner, problem, budget_epochs=1000, policy=policy)

    def states() -> set[str]:
        return {job["state"] for job in runner.jobs.values()}

    for _ in range(40):
        loop.step()
        resumed = {i for e, i, _ in runner.events if e == "resume"}
        paused = {i for i, job in runner.jobs.items() if job["state"] == "paused"}
        if ({"completed", "training"} <= states() and len(paused - resumed) >= 1
                and len(paused) >= 2 and resumed
                and sum(j["state"] == "completed" for j in runner.jobs.values()) >= 2):
            break
    else:
        pytest.fail(f"no run of every kind after 40 polls: {sorted(states())}")
    # A paused run that was never resumed is stopped, as a budget's end stops them.
    stopped = min(i for i, job in runner.jobs.items()
                  if job["state"] == "paused" and i not in resumed)
    runner.verdict(experiment.trials[stopped], "stop", "test")
    loop.step()  # as in a run, the report follows a poll and its decisions
    assert experiment.trials[stopped].status == TrialStatus.EARLY_STOPPED
    settings = {"budget_epochs": 1000, "<b>note</b>": "a & b"}
    report = write_report(experiment, problem.checkpoints, loop, out, scheduler="freeze-thaw",
                          settings=settings)
    return loop, runner, report, out


def test_freeze_thaw_report_tells_every_run_apart(freeze_thaw_run) -> None:
    loop, runner, report, out = freeze_thaw_run
    assert json.loads((out / "report.json").read_text()) == report
    trials = {t["index"]: t for t in report["trials"]}
    assert set(trials) == set(loop.experiment.trials)
    statuses = {t["status"] for t in trials.values()}
    assert {"completed", "running", "paused", "stopped"} <= statuses
    assert any(t["resumed_at"] for t in trials.values())
    for index, trial in trials.items():
        job = runner.jobs[index]
        assert trial["status"] == EXPECTED_STATUS[job["state"]], index
        # The pauses and resumptions the runner carried out, at their epochs.
        assert trial["paused_at"] == [s for e, i, s in runner.events if e == "pause" and i == index]
        assert trial["resumed_at"] == [s for e, i, s in runner.events
                                       if e == "resume" and i == index]
        assert trial["steps"] == [float(s) for s in range(1, job["step"] + 1)]
        assert trial["epochs_trained"] == job["step"]
        assert trial["epochs_not_trained"] == (
            EPOCHS - job["step"] if trial["status"] in ("paused", "stopped") else 0)
    assert report["epochs_trained"] == runner.epochs_trained
    assert report["epochs_not_trained"] == sum(t["epochs_not_trained"] for t in trials.values())
    # Freeze-thaw stops no run by a decision on it: nothing is called saved.
    assert report["epochs_saved"] is None
    finished = [t for t in trials.values() if t["epochs_trained"] == EPOCHS]
    best = min(finished, key=lambda t: t["values"][-1])
    assert report["best"]["trial_index"] == best["index"]


def test_freeze_thaw_bands_are_the_policys_predictive(freeze_thaw_run) -> None:
    loop, _, report, _ = freeze_thaw_run
    assert "freeze-thaw policy" in report["bands"]["model"] and report["bands"]["level"] == 0.9
    trials, X, Y = loop._curves()
    observed = (~Y.isnan()).sum(-1)
    rows = ((observed > 0) & (observed < EPOCHS)).nonzero().squeeze(-1)
    samples = loop.policy.final_error_samples(X, Y, rows)
    expected = {trials[r]: final_value_band(samples[:, k]) for k, r in enumerate(rows.tolist())}
    banded = {t["index"]: t["predicted_final"] for t in report["trials"]
              if "predicted_final" in t}
    # Every open run with a value short of the end has the policy's band, no other.
    assert banded == expected
    assert {t["index"] for t in report["trials"] if t["status"] in ("running", "paused",
                                                                        "stopped")
            and 0 < t["epochs_trained"] < EPOCHS} == set(banded)
    for band in banded.values():
        assert band["q05"] < band["mean"] < band["q95"]


def test_freeze_thaw_page_lists_every_trial_escaped_with_the_plot(freeze_thaw_run) -> None:
    _, _, report, out = freeze_thaw_run
    page = (out / "report.html").read_text()
    assert "<b>note</b>" not in page and html.escape("<b>note</b>") in page
    assert "a &amp; b" in page
    embedded = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page).group(1)
    assert base64.b64decode(embedded) == (out / "report.png").read_bytes()
    rows = re.findall(r"<tr(?: class=\"best\")?><td>(\d+)</td><td>(\w+)</td>", page)
    assert [(int(i), s) for i, s in rows] == [(t["index"], t["status"])
                                              for t in report["trials"]]
    best = re.findall(r'<tr class="best"><td>(\d+)</td>', page)
    assert best == [str(report["best"]["trial_index"])]
    assert not list(out.glob(".*.tmp"))  # written atomically: no temporary left


def _report(parameters: dict, status: str = "completed", **extra) -> dict:
    trial = {"index": 0, "status": status, "parameters": parameters, "steps": [1.0, 2.0],
             "values": [0.5, 0.25], "paused_at": [], "resumed_at": [], "epochs_trained": 2,
             "epochs_not_trained": 0}
    return {"metric": "val_error", "minimize": True, "scheduler": "early-stopping",
            "settings": {}, "checkpoints": [1.0, 2.0],
            "bands": {"level": BAND_LEVEL, "model": "m"}, "best": None, "trials": [trial],
            "epochs_trained": 2, "epochs_not_trained": 0, "epochs_saved": 0, **extra}


def test_page_escapes_parameter_names_and_values() -> None:
    page = render_html(_report({"<script>alert(1)</script>": "x<y", "lr": 0.5}), b"png")
    assert "<script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "x&lt;y" in page
    assert base64.b64encode(b"png").decode() in page
    assert "No trial has reached the final checkpoint yet." in page


def test_a_band_is_the_samples_mean_median_and_central_quantiles() -> None:
    samples = torch.arange(1, 101, dtype=torch.double)
    band = final_value_band(samples)
    assert band == {"mean": 50.5, "median": 50.0, "q05": pytest.approx(5.95), "q95": pytest.approx(95.05)}


def test_the_plot_draws_a_band_whose_mean_lies_above_it() -> None:
    # A log-normal with a wide log-scale: its mean is above its 95 % quantile (the README's
    # toy job once crashed the plot with such a band).
    samples = torch.randn(4096, generator=torch.Generator().manual_seed(0), dtype=torch.double).mul(4).exp()
    band = final_value_band(samples)
    assert band["mean"] > band["q95"] and band["q05"] <= band["median"] <= band["q95"]
    trial = {"index": 0, "status": "paused", "steps": [1], "values": [0.5], "resumed_at": [],
             "predicted_final": band}
    report = {"checkpoints": [1, 2], "trials": [trial], "best": None, "scheduler": "freeze-thaw",
              "metric": "error", "epochs_trained": 1, "epochs_saved": None, "epochs_not_trained": 1}
    assert _plot(report).startswith(b"\x89PNG")


def test_progress_files_record_pauses_and_resumptions(tmp_path: Path) -> None:
    lines = [{"trial": 0}, {"started": {}}, {"step": 1, "values": {}},
             {"status": "paused", "step": 1}, {"started": {}}, {"step": 2, "values": {}},
             {"status": "paused", "step": 2}, {"status": "stopped", "step": 2}]
    path = tmp_path / "trial_0.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    job = read_job(path)
    assert job.pauses == [1.0, 2.0] and job.resumes == [1.0] and job.runs == 2
    # A job that died before its first report is started again from scratch: no pause.
    path.write_text("".join(json.dumps(line) + "\n" for line in [
        {"trial": 0}, {"started": {}}, {"status": "paused", "step": None}, {"started": {}}]))
    job = read_job(path)
    assert job.pauses == [] and job.resumes == [] and job.runs == 2
