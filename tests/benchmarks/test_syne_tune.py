"""Syne Tune 0.13.0 via its own virtualenv: the driver's epoch accounting on a tiny table.

Skipped when the Syne Tune venv is absent (``benchmarks/syne_tune/setup_venv.sh``;
its python is ``$GPAR_BO_SYNETUNE_PYTHON`` or ``~/.cache/gpar-bo/synetune/bin/python``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.bo.harness import TabularProblem
from benchmarks.bo.problems import synthetic_problem
from benchmarks.syne_tune.methods import (
    SyneTuneUnavailable,
    run_syne_tune,
    syne_tune_available,
    syne_tune_python,
)
from benchmarks.syne_tune.route import replay_matches

needs_venv = pytest.mark.skipif(
    not syne_tune_available(),
    reason="Syne Tune venv absent: run benchmarks/syne_tune/setup_venv.sh "
    "or set GPAR_BO_SYNETUNE_PYTHON",
)


@pytest.fixture(scope="module")
def tiny() -> TabularProblem:
    return synthetic_problem(n=40, d=2, seed=3)


def check_accounting(trace: dict, problem: TabularProblem, budget: int) -> None:
    """The harness's accounting: what every trace must satisfy."""
    finals = problem.final_error.tolist()
    trials = trace["trials"]
    assert trace["consumed"] <= budget
    # Every epoch consumed was trained by exactly one trial: resumes cost only the rest.
    assert sum(t["epochs"] for t in trials) == trace["consumed"]
    settings = [t["setting"] for t in trials]
    assert len(set(settings)) == len(settings)
    assert all(0 <= s < problem.X.shape[0] for s in settings)
    for t in trials:
        if t["status"] == "completed":
            assert t["epochs"] == problem.epochs
        elif t["status"] == "stopped":
            assert t["epochs"] in problem.checkpoints[:-1]
        else:
            assert t["status"] == "running" and t["epochs"] < problem.epochs
    epochs, incumbents = trace["epochs"], trace["incumbent_error"]
    completed = [t for t in trials if t["status"] == "completed"]
    assert len(epochs) == len(incumbents) == len(completed) > 0
    assert all(a < b for a, b in zip(epochs, epochs[1:]))
    assert epochs[-1] <= budget
    assert all(b <= a for a, b in zip(incumbents, incumbents[1:]))
    assert set(incumbents) <= {finals[t["setting"]] for t in completed}
    assert incumbents[-1] == min(finals[t["setting"]] for t in completed)
    assert len(trace["suggest_seconds"]) == len(trace["suggest_observed"]) >= len(trials)


@needs_venv
def test_asha_accounting_and_exact_replay(tiny: TabularProblem) -> None:
    budget = 150
    trace = run_syne_tune("ASHA", tiny, seed=0, budget=budget, workers=3)
    assert trace["method"] == "syne_asha" and trace["syne_tune"]["version"] == "0.13.0"
    assert trace["consumed"] == budget
    assert any(t["status"] == "stopped" for t in trace["trials"])
    check_accounting(trace, tiny, budget)
    # The harness's ASHA fed the same settings makes the same decisions at the same epochs
    # (the synthetic errors have no ties, where Syne Tune's float quantile could differ).
    assert replay_matches(tiny, trace, budget, 3)
    assert replay_matches(tiny, trace, budget, 3, rule="syne_tune")


def test_syne_tune_rule_differs_from_the_harness_only_by_rounding_at_ties() -> None:
    from benchmarks.syne_tune.route import syne_tune_continues

    rng = np.random.default_rng(0)
    for n in range(1, 60):
        values = rng.random(n).tolist()
        for value in values:
            lower = sum(v < value for v in values)
            assert syne_tune_continues(values, value, 1 / 3) == (lower < math.ceil(n / 3))
    # A tie: the cutoff 1/3 * v + 2/3 * v rounds below v, so Syne Tune stops the trial
    # (the harness continues it: only 2 of the 8 values are strictly lower).
    v = 0.0996398559
    assert not syne_tune_continues([0.01, 0.02, v, v, 0.2, 0.3, 0.4, 0.5], v, 1 / 3)


@needs_venv
def test_asha_promotion_resumes_cost_only_the_remaining_epochs(tiny: TabularProblem) -> None:
    budget = 200
    trace = run_syne_tune("ASHA", tiny, seed=1, budget=budget, workers=3, scheduler_type="promotion")
    assert trace["method"] == "syne_asha_promotion"
    assert trace["syne_tune"]["resumes"] > 0
    assert any(t["resumes"] > 0 and t["status"] == "completed" for t in trace["trials"])
    check_accounting(trace, tiny, budget)


@needs_venv
def test_table_exhausted_ends_cleanly(tiny: TabularProblem) -> None:
    budget = 2000  # more than training all 40 settings to the end (840 epochs)
    trace = run_syne_tune("ASHA", tiny, seed=2, budget=budget, workers=4)
    assert len(trace["trials"]) == tiny.X.shape[0]
    assert trace["consumed"] < budget
    check_accounting(trace, tiny, budget)


def test_missing_python_is_one_clear_line(tmp_path) -> None:
    with pytest.raises(SyneTuneUnavailable, match="setup_venv.sh") as error:
        syne_tune_python(tmp_path / "no-python")
    assert "\n" not in str(error.value)
    assert not syne_tune_available(tmp_path / "no-python")


def test_the_driver_exits_when_the_study_that_started_it_is_killed(tmp_path) -> None:
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    def running(pid: int) -> bool:  # a re-parented process may stay a zombie: that is gone
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
        except FileNotFoundError:
            return False

    pid_file = tmp_path / "pid"
    driver = (f"import os, time; from benchmarks.syne_tune.driver import exit_with_parent; "
              f"exit_with_parent(interval=0.05); open({str(pid_file)!r}, 'w').write(str(os.getpid())); "
              f"time.sleep(60)")
    # A parent that starts the driver and waits for it, killed as a study would be.
    parent = subprocess.Popen(
        [sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {driver!r}])"],
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, "PYTHONPATH": "."},
    )
    deadline = time.monotonic() + 30
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the driver did not start"
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    assert running(pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while running(pid):
        assert time.monotonic() < deadline, "the driver outlived its parent"
        time.sleep(0.05)
