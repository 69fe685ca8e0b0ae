import pytest

from benchmarks.fit_staleness import fit_staleness


def test_first_decision_decides_with_a_cold_fit() -> None:
    # The policy's first GPAR decision fits from the initial values, so the hyperparameters
    # it decides with are the cold fit's, conditional by conditional.
    # (With the candidate's fits: the first fit has no warm start, so it is the same.)
    result = fit_staleness("quick", seed=0, finished=2, start_from_initial=True)
    assert result["finished"] >= 2 and result["decision"] > 0 and result["start_from_initial"]
    for key in ("log_evidence", "noise"):
        assert result["decided"][key] == result["cold_fit"][key]
        assert len(result["warm_refit"][key]) == len(result["decided"][key]) == 5


def test_bad_arguments_fail_before_any_work() -> None:
    with pytest.raises(ValueError, match="finished must be >= 2"):
        fit_staleness("quick", finished=1)
    with pytest.raises(ValueError, match="unknown table"):
        fit_staleness("no_such_table")
