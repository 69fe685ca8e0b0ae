"""The funnel MLP as a tuning problem: Ax search space and the training job."""

from __future__ import annotations

import pytest

pytest.importorskip("ax")

from ax.core.parameter import ParameterType  # noqa: E402

from gpar_bo.problems.funnel_mlp import HPARAM_NAMES, sample_setting  # noqa: E402
from gpar_bo.problems.funnel_mlp.job import funnel_problem, train_funnel_mlp  # noqa: E402
from gpar_bo.tuning.jobs import resolve  # noqa: E402


def test_search_space() -> None:
    problem = funnel_problem(dataset="breast_cancer", epochs=7, seed=2, max_examples=50)
    params = {p.name: p for p in problem.parameters}
    assert list(params) == list(HPARAM_NAMES)
    assert (params["batch_size"].lower, params["batch_size"].upper) == (16, 512)
    assert params["batch_size"].parameter_type == ParameterType.INT and params["batch_size"].log_scale
    assert params["learning_rate"].log_scale and params["weight_decay"].log_scale
    assert params["max_units"].log_scale and params["max_units"].parameter_type == ParameterType.INT
    assert not params["momentum"].log_scale and not params["max_dropout"].log_scale
    assert (params["num_layers"].lower, params["num_layers"].upper) == (1, 5)
    assert problem.checkpoints.tolist() == list(range(1, 8)) and problem.metric == "val_error"
    assert problem.train_kwargs == {"dataset": "breast_cancer", "epochs": 7, "seed": 2, "max_examples": 50}
    assert resolve(problem.train) is train_funnel_mlp
    with pytest.raises(ValueError, match="unknown data set"):
        funnel_problem(dataset="iris")


def test_job_reports_every_epoch_until_told_to_stop() -> None:
    reports: list[tuple[float, dict[str, float]]] = []

    def report(epoch: float, values: dict[str, float]) -> bool:
        reports.append((epoch, values))
        return epoch >= 2

    train_funnel_mlp(sample_setting(0, 1).to_dict(), report, trial_index=0, dataset="breast_cancer",
                     epochs=5, max_examples=60)
    assert [e for e, _ in reports] == [1, 2]
    assert all(set(v) == {"val_error", "val_loss"} and 0 <= v["val_error"] <= 1 for _, v in reports)
