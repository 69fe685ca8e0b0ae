"""The freeze-thaw loop: verdicts, pauses, resumptions and new trials as the policy
decides, the budget, reproducibility, a crash, a failed fit and bad jobs.

Jobs run in :class:`tests.tuning.fake_runner.FakeRunner` (the pause/resume protocol,
in process, one epoch per poll) on the toy problem's curves.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest
import torch
from ax.core.trial_status import TrialStatus

import gpar_bo.tuning.freeze_thaw as freeze_thaw_loop
import gpar_bo.tuning.snapshot as snapshot_module
from gpar_bo.freeze_thaw import Decision, FreezeThawPolicy
from gpar_bo.problems.toy import toy_problem
from gpar_bo.tuning.errors import TuneSettingsError
from gpar_bo.tuning.freeze_thaw import FreezeThawLoop
from gpar_bo.tuning.jobs import read_job
from gpar_bo.tuning.loop import tune
from gpar_bo.tuning.session import new_experiment
from gpar_bo.tuning.snapshot import POLICY_STATE, load_snapshot
from tests.helpers import without_bands
from tests.tuning.fake_runner import Crash, FakeRunner, fake_registries

EPOCHS = 4
#: The loop, not the quality of GPAR's fits, is under test: fits get a small budget.
RUN = {"poll_seconds": 0.0, "progress": False, "report_seconds": 1e9,
       "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 20}}}}


@pytest.fixture(autouse=True)
def _registries(monkeypatch: pytest.MonkeyPatch) -> None:
    """The snapshot encodes the fake runner like ``CurveRunner``."""
    monkeypatch.setattr(snapshot_module, "json_registries", fake_registries)
    torch.set_num_threads(1)


def _runner(out: Path, **kwargs) -> FakeRunner:
    problem = toy_problem(EPOCHS)
    return FakeRunner(problem.train, str(out / "runs"), problem.train_kwargs, max_workers=2,
                      final_step=EPOCHS, **kwargs)


def _run(out: Path, budget: int, seed: int = 0, **kwargs) -> tuple[dict, FakeRunner]:
    runner = _runner(out, **kwargs)
    report = tune(toy_problem(EPOCHS), out, budget, runner=runner, seed=seed, **RUN)
    return report, runner


def _last_status(out: Path, index: int) -> str | None:
    """The status of trial ``index``'s latest job run, from its progress file."""
    return (read_job(out / "runs" / f"trial_{index}.jsonl").status or {}).get("status")


class ScriptedPolicy:
    """Returns the given decisions and records what it was asked."""

    def __init__(self, decisions: list[Decision]) -> None:
        self.decisions, self.asked = list(decisions), []

    def decide(self, X, Y, paused, candidates=None, bounds=None, epochs_left=None) -> Decision:
        assert candidates is None and torch.equal(bounds, torch.tensor([[0.0] * 2, [1.0] * 2],
                                                                       dtype=X.dtype))
        self.asked.append((X.clone(), Y.clone(), paused.clone(), epochs_left))
        return self.decisions.pop(0)


def test_verdicts_pauses_resumptions_and_new_trials_follow_the_policy(tmp_path: Path) -> None:
    problem = toy_problem(EPOCHS)
    runner = _runner(tmp_path)
    experiment = new_experiment(problem, runner, "freeze-thaw")
    a, b, c = (torch.tensor(v, dtype=torch.double) for v in ([0.2, 0.7], [0.9, 0.1], [0.5, 0.5]))
    policy = ScriptedPolicy([
        Decision("start", -1, "test", candidate=a), Decision("start", -1, "test", candidate=b),
        # Both jobs await a verdict at epoch 1: trial 0 trains on, trial 1 gives its worker
        # to a new setting.
        Decision("resume", 0, "test"), Decision("start", -1, "test", candidate=c),
        # Trial 0 awaits at epoch 2, trial 2 at epoch 1, trial 1 is paused: resume trial 1
        # and continue trial 2, so trial 0 pauses.
        Decision("resume", 1, "test"), Decision("resume", 2, "test"),
    ])
    loop = FreezeThawLoop(experiment, runner, problem, budget_epochs=9, policy=policy)
    for _ in range(3):
        loop.step()
    assert runner.events == [
        ("start", 0, 0), ("start", 1, 0),
        ("pause", 1, 1), ("continue", 0, 1), ("start", 2, 0),
        ("pause", 0, 2), ("continue", 2, 1), ("resume", 1, 1),
    ]
    # The settings are the policy's (the toy space is the unit square itself).
    for index, x in enumerate((a, b, c)):
        assert experiment.trials[index].arms[0].parameters == pytest.approx(
            {"x1": float(x[0]), "x2": float(x[1])})
    # Jobs awaiting a verdict are offered as paused; a resumed or continued one is not
    # offered again within the same poll.
    assert [p.tolist() for _, _, p, _ in policy.asked] == [
        [], [False], [True, True], [False, True], [True, True, True], [True, False, True]]
    # The policy is told the budget left over the 2 workers, in epochs (9, then 2 and 4
    # trained): from the third poll on, less than a whole run of 4 epochs.
    assert [left for *_, left in policy.asked] == [4.5, 4.5, 3.5, 3.5, 2.5, 2.5]
    assert all(t.status == TrialStatus.RUNNING for t in experiment.trials.values())


@pytest.mark.long
def test_a_run_keeps_to_the_budget_and_is_reproducible(tmp_path: Path) -> None:
    budget = 22
    report, runner = _run(tmp_path / "a", budget)
    kinds = {event for event, _, _ in runner.events}
    assert kinds >= {"start", "continue", "pause", "resume"}
    assert runner.epochs_trained == report["epochs_trained"] == budget
    experiment, strategy = load_snapshot(tmp_path / "a" / "snapshot.json")
    assert strategy is None
    # No job trains; runs the budget left unfinished stay paused (RUNNING in Ax).
    statuses = {t.status for t in experiment.trials.values()}
    assert statuses <= {TrialStatus.COMPLETED, TrialStatus.RUNNING}
    assert TrialStatus.COMPLETED in statuses
    running = [t for t in experiment.trials.values() if t.status == TrialStatus.RUNNING]
    assert all(_last_status(tmp_path / "a", t.index) == "paused" for t in running)
    assert report["best"] is not None

    again, runner_again = _run(tmp_path / "b", budget)
    assert runner_again.events == runner.events
    assert [t["parameters"] for t in again["trials"]] == [t["parameters"] for t in report["trials"]]
    # The other scheduler cannot take over this directory.
    with pytest.raises(TuneSettingsError, match="was tuned with --scheduler freeze-thaw"):
        tune(toy_problem(EPOCHS), tmp_path / "a", budget + 10, scheduler="early-stopping",
             **RUN)


def test_a_crash_loses_no_trial_and_paused_runs_stay_resumable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    budget = 26
    with pytest.raises(Crash):
        _run(tmp_path, budget, crash_at_poll=9)
    # kill -9: the snapshot is the one of the crash moment, whatever the process's
    # clean-up wrote after it.
    shutil.copy(tmp_path / "snapshot.json.crash", tmp_path / "snapshot.json")
    before, _ = load_snapshot(tmp_path / "snapshot.json")
    files = {p.name: p.read_text() for p in (tmp_path / "runs").iterdir()}
    paused = {i for i, t in before.trials.items()
              if t.status == TrialStatus.RUNNING
              and '"status": "paused"' in files[f"trial_{i}.jsonl"].splitlines()[-1]}
    assert paused, "the crash should find paused runs"
    # Jobs that were training or awaiting a verdict died with the process; their
    # checkpoints hold every epoch they reported, so they come back paused.
    died = {i for i, t in before.trials.items()
            if t.status == TrialStatus.RUNNING and i not in paused}
    assert died, "the crash should find jobs that were training or awaiting a verdict"

    class ResumeFirst(FreezeThawPolicy):
        """The policy, except that its first decision resumes a paused run."""

        resumed_first = False

        def decide(self, X, Y, paused, candidates=None, bounds=None, epochs_left=None):
            if not self.resumed_first and paused.any():
                self.resumed_first = True
                return Decision("resume", int(paused.nonzero()[0]), "test")
            return super().decide(X, Y, paused, candidates, bounds, epochs_left)

    monkeypatch.setattr(freeze_thaw_loop, "FreezeThawPolicy", ResumeFirst)
    report, runner = _run(tmp_path, budget)
    after, _ = load_snapshot(tmp_path / "snapshot.json")
    assert set(before.trials) <= set(after.trials)
    for name, text in files.items():  # never overwritten
        assert (tmp_path / "runs" / name).read_text().startswith(text)
    for index in paused | died:  # resumed after the crash, or paused to the end; never failed
        resumed = any(e == ("resume", index, e[2]) for e in runner.events)
        assert resumed or _last_status(tmp_path, index) == "paused"
        assert after.trials[index].status != TrialStatus.FAILED
    # The first decision after the crash resumed a run paused before it, from its
    # checkpoint: it trains on from the next epoch.
    # (Jobs that died before their first report are restarted before any decision.)
    event, index, step = next(e for e in runner.events if e[0] == "resume" and e[2] > 0)
    assert index in paused and step == len(before.lookup_data(
        trial_indices=[index]).full_df)
    assert report["epochs_trained"] <= budget


def test_paused_runs_outlive_the_budget_and_a_larger_budget_resumes_them(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, runner = _run(tmp_path, 12)
    decided = torch.load(tmp_path / POLICY_STATE, weights_only=True)["decisions"]
    assert decided > 0  # the policy's state is kept beside the snapshot
    experiment, _ = load_snapshot(tmp_path / "snapshot.json")
    paused = {i for i, t in experiment.trials.items() if t.status == TrialStatus.RUNNING}
    assert paused, "the budget should end with paused runs"
    assert all(_last_status(tmp_path, i) == "paused" for i in paused)
    assert not any(e[0] == "stop" for e in runner.events)
    assert {t["index"] for t in first["trials"] if t["status"] == "paused"} == paused
    assert runner.epochs_trained == first["epochs_trained"] <= 12
    steps = {i: len(experiment.lookup_data(trial_indices=[i]).full_df) for i in paused}

    # The same budget: nothing to do, the same report.
    again, runner = _run(tmp_path, 12)
    assert runner.events == [] and without_bands(again) == without_bands(first)
    banded = [{t["index"] for t in r["trials"] if "predicted_final" in t} for r in (first, again)]
    assert banded[0] == banded[1]  # the same open runs get bands (from a refit)

    # A larger budget: the policy sees the paused runs and resumes some of them, each
    # at the epoch after the one it paused at.
    with caplog.at_level(logging.INFO, logger="gpar_bo.tuning.freeze_thaw"):
        more, runner = _run(tmp_path, 20)
    # It went on from its saved state (its last fit, not a refit of every conditional).
    assert f"goes on from its saved state ({decided} decisions)" in caplog.text
    assert torch.load(tmp_path / POLICY_STATE, weights_only=True)["decisions"] > decided
    resumed: dict[int, int] = {}
    for event, index, step in runner.events:
        if event == "resume" and index in paused:
            resumed.setdefault(index, step)
    assert resumed and all(step == steps[i] for i, step in resumed.items())
    for trial in more["trials"]:  # every epoch once, in order
        assert trial["steps"] == list(range(1, len(trial["steps"]) + 1))
    assert more["epochs_trained"] == first["epochs_trained"] + runner.epochs_trained <= 20

    # A damaged policy state is named, and the policy refits on the curves instead.
    (tmp_path / POLICY_STATE).write_bytes(b"not a policy state")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="gpar_bo.tuning.freeze_thaw"):
        last, runner = _run(tmp_path, 20)
    assert "policy state" in caplog.text and "could not be loaded" in caplog.text
    assert runner.events == [] and last["epochs_trained"] == more["epochs_trained"]


def test_a_failed_fit_falls_back_to_successive_halving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("no fit today")

    monkeypatch.setattr("gpar_bo.freeze_thaw.policy.fit_gpytorch_mll", broken)
    with caplog.at_level(logging.INFO, logger="gpar_bo.tuning.freeze_thaw"):
        report, runner = _run(tmp_path, 20)
    reasons = [r.getMessage() for r in caplog.records if "freeze-thaw: " in r.getMessage()]
    assert any("model-free: GPAR failed (no fit today)" in r for r in reasons)
    assert not any(r.endswith("(gpar)") for r in reasons)
    assert runner.epochs_trained == report["epochs_trained"] == 20


def test_runs_that_report_an_error_of_zero_are_decided_on_by_gpar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    toy_curve = FakeRunner._curve

    def reaching_zero(self, trial) -> list[float]:  # a perfect validation score from epoch 2
        return [v if epoch == 0 else 0.0 for epoch, v in enumerate(toy_curve(self, trial))]

    monkeypatch.setattr(FakeRunner, "_curve", reaching_zero)
    with caplog.at_level(logging.INFO, logger="gpar_bo.tuning.freeze_thaw"):
        report, runner = _run(tmp_path, 22)
    reasons = [r.getMessage() for r in caplog.records if "freeze-thaw: " in r.getMessage()]
    assert any(r.endswith("(gpar)") for r in reasons)
    assert not any("GPAR failed" in r for r in reasons)
    assert not any("No final-value bands" in r.getMessage() for r in caplog.records)
    assert report["best"] is not None and runner.epochs_trained == report["epochs_trained"] == 22


def test_a_job_that_cannot_pause_is_one_clear_error_before_anything_starts(
    tmp_path: Path,
) -> None:
    with pytest.raises(TuneSettingsError, match="takes no 'checkpoint_dir' keyword .*"
                                                "scheduler early-stopping"):
        _run(tmp_path, 20, resumable=False)
    assert not (tmp_path / "snapshot.json").exists()


def test_settings_are_checked_before_anything_starts(tmp_path: Path) -> None:
    with pytest.raises(TuneSettingsError, match="scheduler must be one of"):
        tune(toy_problem(EPOCHS), tmp_path, 20, scheduler="hyperband", **RUN)
    with pytest.raises(TuneSettingsError, match="at least 2 epochs"):
        tune(toy_problem(1), tmp_path, 20, **RUN)
    one_checkpoint = toy_problem(EPOCHS)
    one_checkpoint.checkpoint_epochs = [EPOCHS]
    with pytest.raises(TuneSettingsError, match="at least 2 checkpoints"):
        tune(one_checkpoint, tmp_path, 20, **RUN)
    one_checkpoint.checkpoint_epochs = [1, EPOCHS + 1]
    with pytest.raises(TuneSettingsError, match="the last checkpoint must be the final epoch"):
        tune(one_checkpoint, tmp_path, 20, scheduler="early-stopping", **RUN)
    assert not (tmp_path / "snapshot.json").exists()
