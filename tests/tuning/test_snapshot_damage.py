"""Recovery from a damaged snapshot: a truncated, empty or malformed ``snapshot.json``
is a one-line error that names the file and the damage; ``recover=True`` (``--recover``)
resumes from the last good copy, or rebuilds the run from ``runs/``, keeping every
trial and epoch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpar_bo.cli import main
from gpar_bo.problems.toy import toy_problem
from gpar_bo.tuning.loop import tune
from gpar_bo.tuning.snapshot import load_snapshot
from tests.helpers import FAST_GPAR as FAST

EPOCHS = 3


def _steps(experiment) -> dict[int, list[float]]:
    df = experiment.lookup_data().full_df
    return {int(t): sorted(g["step"].tolist()) for t, g in df.groupby("trial_index")}


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small finished toy run: three Sobol trials of three epochs."""
    out = tmp_path_factory.mktemp("finished") / "out"
    tune(toy_problem(EPOCHS), out, 100, scheduler="early-stopping", num_sobol_trials=3, workers=2, poll_seconds=0.1,
         progress=False, max_trials=3)
    return out


def _contents(runs: Path) -> dict[str, bytes]:
    """Every file under ``runs/``: progress and verdict files, checkpoints."""
    return {str(p.relative_to(runs)): p.read_bytes() for p in runs.rglob("*") if p.is_file()}


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "out"
    shutil.copytree(run, out)
    for name in ("tune.lock", "tune.lock.owner"):
        (out / name).unlink(missing_ok=True)
    return out


def _damage(path: Path, how: str) -> str:
    text = path.read_text()
    if how == "truncated":
        path.write_text(text[: len(text) // 2])
        return "not valid JSON"
    if how == "empty":
        path.write_text("")
        return "empty"
    if how == "not a snapshot":
        path.write_text(json.dumps({"experiment": json.loads(text)["experiment"]}))
        return "no 'generation_strategy' entry"
    snapshot = json.loads(text)  # Ax-level damage: a trial without its status
    del next(iter(snapshot["experiment"]["trials"].values()))["status"]
    path.write_text(json.dumps(snapshot))
    return "Ax cannot decode it"


def _curves(out: Path) -> tuple[dict, dict]:
    experiment, _ = load_snapshot(out / "snapshot.json")
    return ({i: (t.status, t.arms[0].parameters) for i, t in experiment.trials.items()},
            _steps(experiment))


@pytest.mark.parametrize("how", ["truncated", "empty", "not a snapshot", "Ax-level"])
def test_a_damaged_snapshot_is_a_clear_error_and_the_last_good_copy_resumes(
    how: str, finished_run: Path, tmp_path: Path
) -> None:
    out = _copy(finished_run, tmp_path)
    trials, steps = _curves(out)
    damage = _damage(out / "snapshot.json", how)
    damaged = (out / "snapshot.json").read_text()
    runs = _contents(out / "runs")
    from gpar_bo.tuning.snapshot import SnapshotDamaged

    with pytest.raises(SnapshotDamaged) as error:
        tune(toy_problem(EPOCHS), out, 100, scheduler="early-stopping", num_sobol_trials=3, progress=False, max_trials=3)
    message = str(error.value)
    assert str(out / "snapshot.json") in message and damage in message
    assert "--recover" in message and "last good copy" in message and "\n" not in message

    report = tune(toy_problem(EPOCHS), out, 100, scheduler="early-stopping", num_sobol_trials=3, progress=False,
                  max_trials=3, recover=True)
    assert _curves(out) == (trials, steps)  # every trial, status and epoch
    assert report["epochs_trained"] == 3 * EPOCHS
    assert (out / "snapshot.json.damaged").read_text() == damaged  # kept, not deleted
    assert _contents(out / "runs") == runs


def test_without_a_good_copy_the_run_is_rebuilt_from_its_progress_files(
    finished_run: Path, tmp_path: Path
) -> None:
    out = _copy(finished_run, tmp_path)
    trials, steps = _curves(out)
    _damage(out / "snapshot.json", "truncated")
    _damage(out / "snapshot.json.bak", "empty")
    from gpar_bo.tuning.snapshot import SnapshotDamaged

    with pytest.raises(SnapshotDamaged, match="rebuild the experiment from the 3 progress"):
        tune(toy_problem(EPOCHS), out, 100, scheduler="early-stopping", num_sobol_trials=3, progress=False, max_trials=3)
    # The fourth trial is GPAR's: small fitting and acquisition budgets (the rebuild is
    # under test, not the fit).
    report = tune(toy_problem(EPOCHS), out, 100, scheduler="early-stopping", num_sobol_trials=3, progress=False,
                  max_trials=4, recover=True, **FAST)
    rebuilt, rebuilt_steps = _curves(out)
    assert {i: rebuilt[i] for i in trials} == trials and len(rebuilt) == 4
    assert {i: rebuilt_steps[i] for i in steps} == steps
    assert report["epochs_trained"] == sum(len(s) for s in rebuilt_steps.values())


def test_the_cli_reports_a_damaged_snapshot_in_one_line(
    finished_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = _copy(finished_run, tmp_path)
    _damage(out / "snapshot.json", "truncated")
    code = main(["tune", "--scheduler", "early-stopping", "--out", str(out), "--epochs", "3", "--budget", "6",
                 "--max-examples", "300", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("gpar-bo tune: error:")]
    assert len(lines) == 1 and str(out / "snapshot.json") in lines[0]
    assert "not valid JSON" in lines[0] and "--recover" in lines[0]
