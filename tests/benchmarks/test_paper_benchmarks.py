"""Real-data loading and the paper benchmarks on small subsets (shapes, finite values, files)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from benchmarks import datasets, exchange, jura, report, scaling, speed


def test_load_jura_follows_the_protocol() -> None:
    data = datasets.load_jura()
    assert data.train_X.shape == (359, 2) and data.train_Y.shape == (359, 3)
    assert data.test_X.shape == (100, 2) and data.test_Cd.shape == (100,)
    # Cd hidden exactly at the 100 validation locations, which are training inputs.
    assert data.train_Y[:259].isfinite().all() and data.train_Y[259:, :2].isfinite().all()
    assert data.train_Y[259:, 2].isnan().all()
    assert torch.equal(data.train_X[259:], data.test_X)
    assert (data.test_Cd > 0).all()


@pytest.mark.parametrize("convention, sizes", [("paper", (51, 51, 51)), ("script", (51, 101, 151))])
def test_load_fx2007_blocks(convention: str, sizes: tuple[int, int, int]) -> None:
    data = datasets.load_fx2007(convention)
    assert data.rates.shape == data.train_Y.shape == data.test_mask.shape == (251, 13)
    assert data.days.shape == (251, 1)
    assert tuple(data.test_mask[:, data.target_indices()].sum(0).tolist()) == sizes
    assert data.test_mask.sum() == sum(sizes)
    observed = data.rates[~data.rates.isnan()]
    assert (observed > 0).all()
    # USD per unit: a Canadian dollar was worth roughly a US dollar in 2007.
    assert 0.8 < data.rates[:, data.names.index("CAD")].mean() < 1.1
    assert data.train_Y[data.test_mask].isnan().all()


def test_load_fx2007_rejects_unknown_convention() -> None:
    with pytest.raises(ValueError, match="convention"):
        datasets.load_fx2007("other")


@pytest.mark.slow  # left out of CI for time (docs/testing.md)
def test_jura_quick_writes_results(tmp_path: Path) -> None:
    rows = jura.main(["--quick", "--out", str(tmp_path)])
    assert [r["model"] for r in rows] == list(jura.MODELS)
    assert all(math.isfinite(r["MAE"]) and math.isfinite(r["MAE*"]) for r in rows)
    for suffix in ("md", "csv", "json", "png"):
        assert (tmp_path / f"jura_quick.{suffix}").stat().st_size > 0
    assert "command" in (tmp_path / "jura_quick.md").read_text()


@pytest.mark.slow  # left out of CI for time (docs/testing.md)
def test_exchange_predict_and_score_on_a_subset(tmp_path: Path) -> None:
    data = exchange.quick_subset(datasets.load_fx2007("paper"), step=24, others=1)
    order = list(range(len(data.names)))  # targets already last
    predictions = {}
    for model, _, markov, ftol in exchange.MODELS:
        prediction, seconds, evidence = exchange.predict(data, order, markov, ftol)
        assert prediction.shape == data.rates.shape and prediction.isfinite().all()
        assert math.isfinite(evidence)
        row = exchange.score(data, prediction)
        assert all(math.isfinite(v) and v >= 0 for v in row.values())
        predictions[("paper", model)] = prediction
    exchange.plot({"paper": data}, predictions, tmp_path / "fx.png")
    assert (tmp_path / "fx.png").stat().st_size > 0


def test_standardize_ignores_missing_values() -> None:
    Y = torch.tensor([[1.0, float("nan")], [3.0, 2.0], [5.0, 4.0]], dtype=torch.double)
    Z, mean, std = exchange.standardize(Y)
    assert torch.allclose(mean, torch.tensor([3.0, 3.0], dtype=torch.double))
    assert Z[0, 1].isnan() and torch.allclose(Z[1:, 1], torch.tensor([-1.0, 1.0], dtype=torch.double) / 2**0.5)


@pytest.mark.parametrize("conventions", speed.CONVENTIONS)
def test_speed_our_side(conventions: str) -> None:
    spec = speed.make_task(seed=0, n_train=12, n_test=20, num_samples=8, maxiter=20)
    ours = speed.run_ours({**spec, "conventions": conventions})
    assert torch.tensor(ours["means"]).shape == (20, 3)
    assert torch.tensor(ours["means_joint"]).shape == (20, 3)
    assert speed.smse(ours["means"], spec) < 1  # better than predicting each output's mean


def test_speed_summary(tmp_path: Path) -> None:
    run = {"fit_wall": 1.0, "fit_cpu": 1.0, "predict_wall": 0.1, "predict_cpu": 0.1,
           "predict_joint_wall": 0.5, "predict_joint_cpu": 0.5, "smse": 0.1, "smse_joint": 0.1}
    worse = {**run, "smse": 1.1}
    reference = {**run, "fit_wall": 10.0, "fit_cpu": 10.0}  # a stand-in, slower reference
    runs = {"paper": [run, worse], "botorch": [worse, worse], "reference": [reference, reference]}
    rows = speed.summarize("maxiter 20", runs)
    assert [r["implementation"] for r in rows][::2] == [
        "gpar_bo (paper), marginal samples", "gpar_bo (botorch), marginal samples", "reference gpar"]
    assert [r["seeds SMSE <= reference"] for r in rows] == [1, 2, 0, 2, 2]
    assert rows[0]["SMSE mean"] == pytest.approx(0.6)
    assert rows[0]["speed-up cpu"] == pytest.approx(10.1 / 1.1)
    speed.plot(rows, tmp_path / "speed.png")
    paths = report.write_results(tmp_path, "speed", "t", rows, "cmd", seeds=[0])
    assert all(p.stat().st_size > 0 for p in [tmp_path / "speed.png", *paths.values()])


@pytest.mark.parametrize("model", scaling.MODELS)
def test_scaling_fits_each_model(model: str, tmp_path: Path) -> None:
    result = scaling.run_one({"model": model, "n": 12, "m": 3, "seed": 0, "maxiter": 3})
    assert result["fit s"] > 0 and result["peak MB above start"] >= 0
    rows = [{"sweep": s, "model": model, "N": 12, "M": 3, "status": "ok", **result} for s in ("M", "N")]
    scaling.plot(rows, tmp_path / "scaling.png")
    assert (tmp_path / "scaling.png").stat().st_size > 0
