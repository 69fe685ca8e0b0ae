"""``kill -9`` of a tuning process at any moment loses, reruns and overwrites nothing.

One output directory goes through three crashes, each at another kind of moment, then a
resume that runs to the end:

1. the whole process group is killed the moment a new job's progress file appears
   (the job has just started; before write-ahead, the snapshot did not know it yet);
2. only the tuning process is killed, at a random moment while trials run (its
   workers notice and exit on their own, possibly after the resume began);
3. the process kills itself in the middle of a snapshot write (temporary file half
   written, not yet renamed).

After every crash the progress files are recorded; the checks are the same whatever
the moment: every file recorded is still there and begins with what was recorded
(append-only: no job was rerun over it), every file belongs to exactly one trial, each
trial's data holds exactly the epochs its file reports, and the report's epoch count
is the number of epochs the files report.

The toy job is resumable, so the jobs a crash interrupts are paused (by the next run's
reconciliation) and resumed from their checkpoint: at the end every trial reported
epochs 1..E exactly once each, none lost and none trained twice.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from ax.core.trial_status import TrialStatus

from gpar_bo.problems.toy import toy_problem
from gpar_bo.tuning.jobs import read_job, read_progress
from gpar_bo.tuning.loop import tune
from gpar_bo.tuning.snapshot import load_snapshot
from tests.fork_server import Forked, ForkServer
from tests.tuning.scripts import LIGHT

EPOCHS = LIGHT["min_epochs"]  # epochs of a trial (none is stopped before its last)
SECONDS = 0.15
SEED = 20240611  # the random kill moment; printed on failure to reproduce


def _start(server: ForkServer, out: Path, max_trials: int, *extra: str) -> Forked:
    # Forked after the heavy imports (tests/fork_server.py); its log goes to a file.
    # Its own session, so that killing its process group takes its workers down too.
    return server.start(module="tests.tuning.scripts",
                        argv=[out, max_trials, EPOCHS, SECONDS, *extra],
                        log=out.parent / f"tune-{time.monotonic_ns()}.log")


def _log(process: Forked) -> str:
    return process.output()[-3000:]


def _files(out: Path) -> dict[int, str]:
    runs = out / "runs"
    if not runs.is_dir():
        return {}
    return {int(p.stem.split("_")[1]): p.read_text() for p in runs.glob("trial_*.jsonl")}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for(condition: Callable[[], object], process: Forked | None, what: str,
              timeout: float = 300.0) -> None:
    # Generous: on a loaded 2-core machine a process and its workers take a minute to start.
    deadline = time.monotonic() + timeout
    while not condition():
        if process is not None and process.poll() is not None:
            pytest.fail(f"the tuning process ended ({process.returncode}) before {what}: "
                        f"{_log(process)}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def _check_nothing_lost(recorded: dict[int, str], out: Path) -> None:
    now = _files(out)
    for index, text in recorded.items():
        assert index in now, f"trial {index}'s progress file disappeared"
        # A complete line recorded must still be there; a last line cut by the kill is
        # only ever completed by the job that was writing it, which died.
        complete = text[: text.rfind("\n") + 1]
        assert now[index].startswith(complete), (
            f"trial {index}'s progress file was rewritten (a job ran over it)")


def _steps(text: str, tmp: Path) -> list[float]:
    path = tmp / "probe.jsonl"
    path.write_text(text)
    return [step for step, _ in read_progress(path)[0]]


@pytest.mark.long
def test_kill_9_at_any_moment_loses_nothing(tmp_path: Path, fork_server: ForkServer) -> None:
    out = tmp_path / "out"
    rng = random.Random(SEED)
    recorded: dict[int, str] = {}

    # 1. The group, right as a job starts: the first progress file after trial 1's.
    process = _start(fork_server, out, 100)
    _wait_for(lambda: 2 in _files(out), process, "trial 2 started")
    process.kill_group()
    process.wait()
    recorded = _files(out)

    # 2. The tuning process alone, at a random moment once its first new job runs.
    process = _start(fork_server, out, 100)
    known = set(recorded)
    _wait_for(lambda: set(_files(out)) - known, process, "a new trial after resuming")
    time.sleep(rng.uniform(0.0, 2.0))
    process.send_signal(signal.SIGKILL)
    process.wait()
    # Its workers exit by themselves (exit_with_parent) once it is gone.
    workers = {read_job(path).started["pid"] for path in (out / "runs").glob("trial_*.jsonl")
               if read_job(path).status is None and read_job(path).started}
    _wait_for(lambda: not any(_alive(pid) for pid in workers), None, "its workers to exit", 20)
    _check_nothing_lost(recorded, out)
    recorded = _files(out)

    # 3. In the middle of a snapshot write (its k-th, k at random).
    process = _start(fork_server, out, 100, str(rng.randint(3, 8)))
    process.wait(timeout=300)
    assert process.returncode == -signal.SIGKILL, _log(process)
    _check_nothing_lost(recorded, out)
    recorded = _files(out)

    # The resume that runs to the end, in this process.
    before = len(recorded)
    report = tune(toy_problem(EPOCHS, SECONDS), out, 10**4, **LIGHT, max_trials=before + 2)
    _check_nothing_lost(recorded, out)

    files = _files(out)
    experiment, _ = load_snapshot(out / "snapshot.json")
    assert sorted(experiment.trials) == sorted(files), "a trial without a file or vice versa"
    df = experiment.lookup_data().full_df
    df = df[df["metric_name"] == "error"]
    for index, text in files.items():
        trial = experiment.trials[index]
        assert trial.status.is_terminal, (index, trial.status)
        expected = _steps(text, tmp_path)
        got = sorted(df[df["trial_index"] == index]["step"].tolist())
        assert got == sorted(expected), f"trial {index}: data {got}, its file {expected}"
        if len(expected) == EPOCHS:
            assert trial.status in (TrialStatus.COMPLETED, TrialStatus.EARLY_STOPPED)
        # Resumed from its last checkpoint: no reported epoch lost, none trained twice.
        assert expected == list(range(1, EPOCHS + 1)), f"trial {index}: {expected}"
        assert trial.status == TrialStatus.COMPLETED, (index, trial.status)
    trained = sum(len(_steps(text, tmp_path)) for text in files.values())
    assert report["epochs_trained"] == trained
    assert len(experiment.trials) >= before + 1
    paused = [i for i, text in files.items() if '"status": "paused"' in text]
    assert paused, "no crash interrupted a job: the resume path went untested"
