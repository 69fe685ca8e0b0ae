"""One tuning process per output directory: a second one is refused at once, naming
the holder; the lock of a killed process is taken over."""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import pytest

from gpar_bo.tuning.runner import INTERRUPTED
from tests.fork_server import Forked, ForkServer

def _start(server: ForkServer, out: Path, max_trials: int) -> Forked:
    # Forked after the heavy imports (tests/fork_server.py); its log goes to a file.
    return server.start(module="tests.tuning.scripts", argv=[out, max_trials, 4, 0.5],
                        log=out.parent / f"tune-{time.monotonic_ns()}.log")


def _log(process: Forked) -> str:
    return process.output()


def test_a_second_process_is_refused_and_a_killed_holders_lock_taken_over(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, fork_server: ForkServer
) -> None:
    out = tmp_path / "out"
    first = _start(fork_server, out, 100)  # trains on far longer than this test looks
    try:
        deadline = time.monotonic() + 300  # a loaded machine starts processes slowly
        while not list((out / "runs").glob("trial_*.jsonl")):
            assert first.poll() is None, _log(first)[-3000:]
            assert time.monotonic() < deadline, "the first process did not get going"
            time.sleep(0.1)
        files_before = {p.name: p.read_text() for p in (out / "runs").glob("trial_*.jsonl")}
        second = _start(fork_server, out, 100)
        try:
            second.wait(timeout=300)
        finally:
            if second.poll() is None:
                second.kill_group()
        err = _log(second)
        assert second.returncode == 3, err[-3000:]
        assert f"pid {first.pid}" in err and "in use by another" in err
        assert first.poll() is None, "the first process must go on undisturbed"
        for name, text in files_before.items():  # the second touched none of its files
            assert (out / "runs" / name).read_text().startswith(text)
        # The second did not stop the first's running trials as "interrupted".
        assert not [p for p in (out / "runs").glob("*.verdict")
                    if INTERRUPTED in p.read_text()]
    finally:
        first.kill_group()
        first.wait()

    from gpar_bo.tuning.lock import LOCK_OWNER, DirectoryLock

    # The kernel released the killed holder's lock; its owner record names it.
    assert json.loads((out / LOCK_OWNER).read_text())["pid"] == first.pid
    with caplog.at_level(logging.WARNING, logger="gpar_bo.tuning.lock"):
        with DirectoryLock(out) as lock:
            assert lock.taken_over is not None and lock.taken_over["pid"] == first.pid
            assert json.loads((out / LOCK_OWNER).read_text())["pid"] == os.getpid()
    assert f"pid {first.pid}" in caplog.text and "killed" in caplog.text
    assert not (out / LOCK_OWNER).exists()  # a clean release leaves no owner record


def test_the_lock_is_exclusive_within_a_process_too(tmp_path: Path) -> None:
    from gpar_bo.tuning.lock import DirectoryLock, DirectoryLocked

    with DirectoryLock(tmp_path):
        with pytest.raises(DirectoryLocked, match=f"pid {os.getpid()}"):
            DirectoryLock(tmp_path).acquire()
    with DirectoryLock(tmp_path) as again:  # released on exit: free again
        assert again.taken_over is None


def test_the_cli_refuses_a_locked_directory_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from gpar_bo.cli import main
    from gpar_bo.tuning.lock import DirectoryLock

    with DirectoryLock(tmp_path):
        code = main(["tune", "--scheduler", "early-stopping", "--out", str(tmp_path), "--epochs", "3", "--budget", "6",
                     "--max-examples", "300", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("gpar-bo tune: error:")]
    assert len(lines) == 1 and f"pid {os.getpid()}" in lines[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tune.lock"]  # nothing started
