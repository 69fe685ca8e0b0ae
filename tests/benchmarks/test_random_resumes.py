"""What a few random resumes would teach GPAR: the held-out next-step scores, their summary
and the command's bad input."""

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
    paused = {t["setting"] for t in trace["trials"] if t["status"] == "stopped"}
    scores = rr.next_step_scores(problem, trace, [0, 4], held_out=5)
    assert [s["K"] for s in scores] == [0, 4] and all(s["n"] == 5 for s in scores)
    assert scores[0]["judged"] == scores[1]["judged"] and set(scores[0]["judged"]) <= paused
    assert scores[0]["revealed"] == [] and len(scores[1]["revealed"]) == 4
    assert set(scores[1]["revealed"]) <= paused and not set(scores[1]["revealed"]) & set(scores[0]["judged"])
    for s in scores:
        assert len(s["pits"]) == len(s["nlpd"]) == 5
        assert all(0 <= p <= 1 for p in s["pits"]) and all(math.isfinite(v) for v in s["nlpd"])
    assert scores[0]["pits"] != scores[1]["pits"]  # the revealed steps changed the fit
    assert rr.next_step_scores(problem, trace, [len(paused)], held_out=1) == []  # none left to judge
    for reveal, held_out in (([], 5), ([-1], 5), ([0], 0)):
        with pytest.raises(ValueError, match="reveal must be"):
            rr.next_step_scores(problem, trace, reveal, held_out)


def test_summary_pools_the_pits_and_pairs_the_seeds() -> None:
    def run(k, pits, nlpd):
        return {"K": k, "n": len(pits), "pits": pits, "nlpd": nlpd}

    per_seed = {0: [run(0, [0.1, 0.3], [1.0, 2.0]), run(5, [0.3, 0.4], [1.0, 1.0])],
                1: [run(0, [0.6, 0.99], [3.0, 6.0]), run(5, [0.99, 0.999], [5.0, 5.0])]}
    first, second = rr.summary("t", per_seed)
    assert (first["seeds"], first["n"], first["inside_50"], first["inside_95"]) == (2, 4, 0.5, 0.75)
    assert (first["below_95"], first["above_95"], first["nlpd"]) == (0.0, 0.25, 3.0)
    assert first["mean_pit"] == pytest.approx(0.4975) and first["seed_gap_50"] == 0.0
    assert first["seeds_nearer_50"] is None and first["seeds_lower_nlpd"] is None
    # Seed 0 now has both PITs inside (gap 0.5, was 0) and a lower NLPD; seed 1 none inside
    # (gap 0.5, was 0) and a higher one.
    assert (second["inside_50"], second["seed_gap_50"]) == (0.5, 0.5)
    assert (second["seeds_nearer_50"], second["seeds_lower_nlpd"]) == (0, 1)


def test_bad_arguments_are_one_line_errors(tmp_path, capsys) -> None:
    for argv in (["--seeds", "0"], ["--reveal", "-1"], ["--runs", str(tmp_path / "none.jsonl")],
                 ["--tables", "nope", "--runs", __file__]):
        with pytest.raises(SystemExit):
            rr.main([*argv, "--out", str(tmp_path)])
        message = capsys.readouterr().err.strip().splitlines()[-1]
        assert "error:" in message
