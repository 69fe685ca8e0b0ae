"""What a few random resumes would teach GPAR: the held-out next-step scores and their summary."""

import math

import pytest

from benchmarks import freeze_thaw_study as study
from benchmarks import random_resumes as rr


@pytest.fixture(scope="module")
def problem():
    return study.make_problem("quick")


def trace_of(problem) -> dict:
    """Four finished runs and every other setting paused at the first or second checkpoint."""
    order = problem.error[:, -1].argsort().tolist()
    checkpoints = problem.checkpoints
    return {"seed": 0, "trials": [
        *({"setting": s, "status": "completed", "epochs": checkpoints[-1]} for s in order[1:5]),
        *({"setting": s, "status": "stopped", "epochs": checkpoints[i % 2]}
          for i, s in enumerate([order[0], *order[5::2]])),
    ]}


def test_next_step_scores_judge_the_same_held_out_runs_for_every_k(problem) -> None:
    trace = trace_of(problem)
    scores = rr.next_step_scores(problem, trace, [0, 4], held_out=5)
    assert [s["K"] for s in scores] == [0, 4] and all(s["n"] == 5 for s in scores)
    for s in scores:
        assert len(s["pits"]) == len(s["nlpd"]) == 5
        assert all(0 <= p <= 1 for p in s["pits"]) and all(math.isfinite(v) for v in s["nlpd"])
    assert scores[0]["pits"] != scores[1]["pits"]  # the revealed steps changed the fit
    paused = sum(t["status"] == "stopped" for t in trace["trials"])
    assert rr.next_step_scores(problem, trace, [paused], held_out=1) == []  # none left to judge
    for reveal, held_out in (([], 5), ([-1], 5), ([0], 0)):
        with pytest.raises(ValueError, match="reveal must be"):
            rr.next_step_scores(problem, trace, reveal, held_out)


def test_summary_pools_the_seeds_pits() -> None:
    per_seed = {0: [{"K": 0, "n": 2, "pits": [0.1, 0.3], "nlpd": [1.0, 2.0]}],
                1: [{"K": 0, "n": 2, "pits": [0.6, 0.99], "nlpd": [3.0, 6.0]}]}
    (row,) = rr.summary("t", per_seed)
    assert (row["seeds"], row["n"], row["inside_50"], row["inside_95"]) == (2, 4, 0.5, 0.75)
    assert (row["below_95"], row["above_95"], row["nlpd"]) == (0.0, 0.25, 3.0)
    assert row["mean_pit"] == pytest.approx(0.4975)
