"""Smoke test of the MLP study (`python -m benchmarks.mlp_study --quick` on a tiny subset)."""

from __future__ import annotations

import csv
import math

import pytest
import torch

from benchmarks import mlp_study


@pytest.fixture(scope="module")
def study():
    return mlp_study


def test_split_follows_the_protocol(study) -> None:
    from gpar_bo.problems.mnist import load_curves

    X, Y = load_curves(study.DATA, study.EPOCHS)
    split = study.make_split(X, Y, seed=3)
    assert split.counts == [175, 124, 88, 64, 44]
    assert split.X_train.shape == (175, 6) and split.X_test.shape == (116, 6)
    assert not split.Y_test.isnan().any()
    observed = ~split.Y_train.isnan()
    assert (observed[:, 1:] <= observed[:, :-1]).all()  # closed downwards
    # Train and test settings are disjoint, and the split depends only on the seed.
    train = {tuple(x.tolist()) for x in split.X_train}
    assert not train & {tuple(x.tolist()) for x in split.X_test}
    again = study.make_split(X, Y, seed=3)
    assert torch.equal(again.X_train, split.X_train)
    assert study.reach_counts(60) == [60, 43, 30, 22, 15]


@pytest.mark.slow  # left out of CI for time (docs/testing.md)
def test_quick_study_writes_results(study, tmp_path) -> None:
    out = tmp_path / "results"
    argv = ["--quick", "--seeds", "0", "--n-train", "50", "--n-test", "30",
            "--models", "GPAR-L-NL", "IGP", "ICM", "SLFM", "LKGP", "--maxiter", "30",
            "--out", str(out), "--no-progress"]
    assert study.main(argv) == 0
    for suffix in ("md", "csv", "png", "json"):
        assert (out / f"mlp_study.{suffix}").stat().st_size > 0
    with open(out / "mlp_study.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {r["model"] for r in rows} == {"GPAR-L-NL", "IGP", "ICM", "SLFM", "LKGP"}
    assert len(rows) == 5 * len(study.EPOCHS)
    for row in rows:
        assert math.isfinite(float(row["smse_mean"])) and float(row["smse_mean"]) >= 0
        assert math.isfinite(float(row["nlpd_mean"]))
        assert float(row["fit_seconds"]) > 0
    text = (out / "mlp_study.md").read_text()
    assert "python -m benchmarks.mlp_study --quick" in text and "Failures" not in text
