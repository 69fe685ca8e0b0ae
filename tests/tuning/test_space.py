"""Search-space files (``gpar_bo.tuning.space``): every parameter kind becomes Ax's own
parameter, and every bad file or job is one line naming the file, before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ax.core.parameter import ChoiceParameter, FixedParameter, ParameterType, RangeParameter

from gpar_bo.tuning import problem_from_space
from gpar_bo.tuning.errors import TuneSettingsError

JOB = "gpar_bo.problems.toy:train_toy_curves"
ROOT = Path(__file__).resolve().parents[2]


def _space(**changes) -> dict:
    space = {"metric": "error", "epochs": 4, "parameters": [
        {"name": "x1", "type": "range", "bounds": [0.0, 1.0]},
        {"name": "x2", "type": "range", "bounds": [0.0, 1.0]}]}
    return {**space, **changes}


def test_every_parameter_kind_becomes_axs_parameter(tmp_path: Path) -> None:
    path = tmp_path / "space.json"
    path.write_text(json.dumps(_space(name="toy", budget=30, tracking_metrics=["loss"],
                                      train_kwargs={"noise_std": 0.01}, parameters=[
        {"name": "x1", "type": "range", "bounds": [1e-4, 0.1], "log_scale": True},
        {"name": "x2", "type": "range", "bounds": [1, 4], "value_type": "int"},
        {"name": "act", "type": "choice", "values": ["relu", "tanh", "gelu"]},
        {"name": "batch", "type": "fixed", "value": 64}])))
    problem = problem_from_space(JOB, path)
    x1, x2, act, batch = problem.parameters
    assert isinstance(x1, RangeParameter) and x1.log_scale and (x1.lower, x1.upper) == (1e-4, 0.1)
    assert isinstance(x2, RangeParameter) and x2.parameter_type == ParameterType.INT
    assert isinstance(act, ChoiceParameter) and act.values == ["relu", "tanh", "gelu"]
    assert not act.is_ordered  # Ax's default for three strings
    assert isinstance(batch, FixedParameter) and batch.value == 64
    assert (problem.name, problem.metric, problem.epochs, problem.budget) == ("toy", "error", 4, 30)
    assert problem.train == JOB and problem.tracking_metrics == ["loss"]
    # The job is given the run's length from the file.
    assert problem.train_kwargs == {"epochs": 4, "noise_std": 0.01}


def test_a_mapping_works_like_a_file_and_the_name_defaults_to_the_job() -> None:
    problem = problem_from_space(JOB, _space())
    assert problem.name == "train_toy_curves" and problem.budget is None
    assert [p.name for p in problem.parameters] == ["x1", "x2"]


def test_checkpoints_are_the_files_or_every_epoch() -> None:
    assert problem_from_space(JOB, _space(checkpoints=[1, 3, 4])).checkpoints.tolist() == [1, 3, 4]
    assert problem_from_space(JOB, _space()).checkpoints.tolist() == [1, 2, 3, 4]


def test_the_shipped_toy_space_file_loads() -> None:
    problem = problem_from_space(JOB, ROOT / "examples" / "toy_space.json")
    assert problem.metric == "error" and problem.budget == 40
    assert problem.checkpoints.tolist() == [1, 2, 4, 8]


BAD_SPACES = {
    "unknown top-level key": (_space(epoch=3), "unknown keys ['epoch']"),
    "missing metric": ({k: v for k, v in _space().items() if k != "metric"},
                       "missing key 'metric'"),
    "epochs not an integer": (_space(epochs=2.5), "'epochs' must be an integer >= 1"),
    "epochs zero": (_space(epochs=0), "'epochs' must be an integer >= 1"),
    "bad budget": (_space(budget=-1), "'budget' must be an integer >= 1"),
    "checkpoints not increasing": (_space(checkpoints=[1, 3, 2, 4]),
                                   "'checkpoints' must be increasing whole epochs >= 1"),
    "checkpoints of fractions": (_space(checkpoints=[0.5, 4]),
                                 "'checkpoints' must be increasing whole epochs >= 1"),
    "checkpoints not a list": (_space(checkpoints=4), "'checkpoints' must be increasing"),
    "checkpoints short of the run": (_space(checkpoints=[1, 2]),
                                     "the last checkpoint must be the final epoch 4"),
    "no parameters": (_space(parameters=[]), "'parameters' must be a non-empty list"),
    "unknown type": (_space(parameters=[{"name": "x1", "type": "rnge", "bounds": [0, 1]}]),
                     "parameters[0] ('x1'): 'type' must be one of range, choice, fixed"),
    "derived type": (_space(parameters=[{"name": "x1", "type": "derived"}]),
                     "'type' must be one of range, choice, fixed"),
    "missing bounds": (_space(parameters=[{"name": "x1", "type": "range"}]),
                       "parameters[0] ('x1'): Bounds are required"),
    "reversed bounds": (_space(parameters=[{"name": "x1", "type": "range", "bounds": [1, 0]}]),
                        "Upper bound of x1 must be strictly larger than lower"),
    "log of zero": (_space(parameters=[{"name": "x1", "type": "range", "bounds": [0, 1],
                                        "log_scale": True}]), "cannot take log"),
    "unknown parameter key": (_space(parameters=[{"name": "x1", "type": "range",
                                                  "bounds": [0, 1], "scale": "log"}]),
                              "Unexpected keys {'scale'}"),
    "missing name": (_space(parameters=[{"type": "range", "bounds": [0, 1]}]),
                     "parameters[0]: missing key 'name'"),
    "duplicate names": (_space(parameters=[{"name": "x1", "type": "range", "bounds": [0, 1]},
                                           {"name": "x1", "type": "range", "bounds": [0, 2]}]),
                        "parameters[1] ('x1'): duplicate parameter name 'x1'"),
    "mixed choice": (_space(parameters=[{"name": "x1", "type": "choice", "values": [1, "a"]}]),
                     "not of the same type"),
    "only fixed": (_space(parameters=[{"name": "x1", "type": "fixed", "value": 1}]),
                   "at least one range or choice parameter"),
    "epochs in train_kwargs": (_space(train_kwargs={"epochs": 3}), "belongs at the top level"),
    "kwarg the job lacks": (_space(train_kwargs={"nois_std": 0.1}),
                            "unexpected keyword argument 'nois_std'"),
}


@pytest.mark.parametrize("case", list(BAD_SPACES))
def test_a_bad_space_is_one_line_naming_the_file(case: str, tmp_path: Path) -> None:
    space, message = BAD_SPACES[case]
    path = tmp_path / "space.json"
    path.write_text(json.dumps(space))
    with pytest.raises(TuneSettingsError) as error:
        problem_from_space(JOB, path)
    text = str(error.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text, text


@pytest.mark.parametrize("content,message", [
    ("{not json", "not valid JSON"), ("[1, 2]", "expected a JSON object, got a list")])
def test_a_file_that_is_not_a_json_object_is_one_line(tmp_path: Path, content: str,
                                                      message: str) -> None:
    path = tmp_path / "space.json"
    path.write_text(content)
    with pytest.raises(TuneSettingsError, match=message):
        problem_from_space(JOB, path)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(TuneSettingsError, match="cannot read it: No such file"):
        problem_from_space(JOB, tmp_path / "nope.json")


@pytest.mark.parametrize("job,message", [
    ("gpar_bo.problems.toy", "must be 'package.module:function'"),
    ("gpar_bo.no_such_module:train", "cannot import 'gpar_bo.no_such_module': "
                                     "ModuleNotFoundError"),
    ("gpar_bo.problems.toy:no_such_train", "has no 'no_such_train'"),
    ("gpar_bo.problems.toy:__all__", "'__all__' is not callable (a list)"),
    ("gpar_bo.tuning.jobs:read_job", "cannot be called as train(parameters, report, "
                                     "trial_index, epochs=...)"),
])
def test_a_job_that_cannot_run_is_one_line(job: str, message: str) -> None:
    with pytest.raises(TuneSettingsError) as error:
        problem_from_space(job, _space())
    assert message in str(error.value) and "\n" not in str(error.value), str(error.value)
