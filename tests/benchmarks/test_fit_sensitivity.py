"""How far the policy's predictive moves under rounding-size changes of its data: the
predictive of an end state, its summary over perturbations, and bad input."""

import numpy as np
import pytest

from benchmarks import fit_sensitivity as fs
from benchmarks import freeze_thaw_study as study


@pytest.fixture(scope="module")
def problem():
    return study.make_problem("quick")


@pytest.fixture(scope="module")
def trace(problem) -> dict:
    """An end state on the quick table: its four best settings finished, every eighth of
    the others paused at the first checkpoint."""
    order = problem.error[:, -1].argsort().tolist()
    return {"seed": 0, "trials": [
        *({"setting": s, "status": "completed", "epochs": problem.checkpoints[-1]} for s in order[:4]),
        *({"setting": s, "status": "stopped", "epochs": problem.checkpoints[0]} for s in order[4::8]),
    ]}


def test_predictive_is_reproducible_and_a_perturbation_changes_only_the_data(problem, trace) -> None:
    median, sd, seconds = fs.predictive(trace, problem, 0, None)
    paused = len(problem.error[:, -1].argsort().tolist()[4::8])
    assert median.shape == sd.shape == (paused,) and (sd > 0).all() and seconds > 0
    again, again_sd, _ = fs.predictive(trace, problem, 0, None)
    assert np.array_equal(median, again) and np.array_equal(sd, again_sd)
    # the medians are log errors of the paused runs, near their table values
    final = problem.error[problem.error[:, -1].argsort()[4::8], -1].log().numpy()
    assert np.abs(median - final).max() < 2.0
    # a run with nothing paused has nothing to predict
    finished = {"seed": 0, "trials": [t for t in trace["trials"] if t["status"] == "completed"]}
    assert fs.predictive(finished, problem, 0, None) is None


def test_optimiser_options_reach_the_fit(problem, trace, monkeypatch) -> None:
    seen = []
    original = fs.FreezeThawPolicy.__init__

    def recording(self, *args, **kwargs):
        seen.append(kwargs.get("fit_kwargs"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(fs.FreezeThawPolicy, "__init__", recording)
    options = {"optimizer_kwargs": {"options": {"ftol": 1e-3, "gtol": 1e-3}}}
    loose = fs.predictive(trace, problem, 0, options)
    assert seen == [options]
    default = fs.predictive(trace, problem, 0, None)
    assert not np.array_equal(loose[0], default[0])  # a looser fit stops elsewhere


def test_model_options_reach_the_policy(problem, trace, monkeypatch) -> None:
    seen = []
    original = fs.FreezeThawPolicy.__init__

    def recording(self, *args, **kwargs):
        seen.append(kwargs.get("gpar_options"))
        original(self, *args, **kwargs)

    monkeypatch.setattr(fs.FreezeThawPolicy, "__init__", recording)
    options = fs.curve_model_options(draw_scales="log")
    fs.predictive(trace, problem, 0, None, options)
    assert seen[-1] is options
    fs.predictive(trace, problem, 0, None)
    assert seen[-1] is None  # the policy's default model


def test_draw_scales_reach_every_prediction_and_the_rows(problem, trace, monkeypatch, tmp_path) -> None:
    import json

    seen = []

    def recording(trace, problem, k, fit_kwargs, gpar_options=None):
        seen.append(gpar_options)
        return np.zeros(2), np.ones(2), 1.0

    monkeypatch.setattr(fs, "predictive", recording)
    monkeypatch.setattr(fs, "method_traces", lambda runs, problems, method, seeds: {"quick": {0: trace}})
    runs = tmp_path / "runs.jsonl"
    runs.write_text("")
    fs.main(["--tables", "quick", "--seeds", "1", "--perturbations", "1", "--draw-scales", "log",
             "--runs", str(runs), "--out", str(tmp_path / "out")])
    assert len(seen) == 4 and all(options["draw_scales"] == "log" for options in seen)  # 2 settings x 2 fits
    rows = json.loads((tmp_path / "out" / "fit_sensitivity.json").read_text())["rows"]
    assert [row["draws"] for row in rows] == ["log", "log"]


def test_sensitivity_row_measures_shifts_in_predictive_sds() -> None:
    base = (np.array([0.0, 1.0]), np.array([1.0, 2.0]), 1.0)
    first = (np.array([0.5, 1.0]), np.array([1.0, 4.0]), 3.0)
    second = (np.array([0.0, -1.0]), np.array([2.0, 2.0]), 2.0)
    row = fs.sensitivity_row("toy", "default", [[base, first, second]])
    # shifts |0.5|/1, 0/2, 0/1, |-2|/2 and width ratios 1, 2, 2, 1
    assert row["predictions"] == 4
    assert row["shift_sd_mean"] == pytest.approx((0.5 + 0 + 0 + 1) / 4)
    assert row["shift_sd_max"] == pytest.approx(1.0)
    assert row["width_ratio"] == pytest.approx(1.5)
    assert row["fit_s"] == pytest.approx(2.0)


@pytest.mark.parametrize("argv, message", [
    (["--seeds", "0"], "--seeds and --perturbations must be >= 1"),
    (["--perturbations", "0"], "--seeds and --perturbations must be >= 1"),
    (["--ftol", "0"], "--ftol must be > 0"),
    (["--gtol", "-1"], "--gtol must be > 0"),
    (["--runs", "no/such/runs.jsonl"], "no runs file"),
    (["--tables", "nonsense"], "nonsense"),
    (["--draw-scales", "logit"], "invalid choice"),
])
def test_bad_input_is_one_line_before_any_fit(argv, message, capsys, tmp_path) -> None:
    with pytest.raises(SystemExit):
        fs.main([*argv, "--out", str(tmp_path)])
    assert message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
