"""Learning-curve data sets: sampling, resumable generation, loading (X, Y)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from gpar_bo.cli import main
from gpar_bo.problems.mnist import HPARAM_NAMES, PAPER_GRID, load_mnist
from gpar_bo.problems.mnist.curves import (
    curve_columns,
    generate_curves,
    load_curves,
    provenance_path,
    read_curve_rows,
    sample_settings,
)
from gpar_bo.problems.mnist.data import MNISTData, write_idx

REPO = Path(__file__).resolve().parents[3]
# Small network only, so each test setting trains in milliseconds.
TINY_GRID = {**PAPER_GRID, "n_hidden_layers": (1,), "n_neurons": (50,)}


@pytest.fixture(scope="module")
def tiny_data() -> MNISTData:
    return load_mnist(max_examples=300)


def test_sampling_is_seeded_distinct_and_prefix_stable() -> None:
    a = sample_settings(50, seed=0)
    assert a == sample_settings(50, seed=0)
    assert sample_settings(20, seed=0) == a[:20]
    assert sample_settings(50, seed=1) != a
    assert len(set(a)) == 50
    for hp in a:
        hp.check_on_grid(PAPER_GRID)
    with pytest.raises(ValueError, match="distinct"):
        sample_settings(10, seed=0, grid={**TINY_GRID, "dropout": (0.0,), "log_learning_rate": (-3.0,),
                                           "log_l1": (-5.0,), "log_l2": (-5.0, -6.0)})


def test_generate_then_load_checkpoints(tmp_path: Path, tiny_data: MNISTData) -> None:
    path = tmp_path / "curves.csv"
    assert generate_curves(path, 3, seed=5, data=tiny_data, epochs=2, grid=TINY_GRID, progress=False) == 3
    header, rows = read_curve_rows(path)
    assert header == curve_columns(2) and sorted(rows) == [0, 1, 2]
    X, Y = load_curves(path, epochs=(2, 1), metric="loss")
    assert X.dtype == Y.dtype == torch.float64 and X.shape == (3, 6) and Y.shape == (3, 2)
    expected_x = torch.tensor([hp.to_vector() for hp in sample_settings(3, 5, TINY_GRID)], dtype=torch.float64)
    assert torch.equal(X, expected_x)
    assert torch.equal(Y[:, 0], torch.tensor([rows[i][header.index("val_loss_2")] for i in range(3)], dtype=torch.float64))
    assert torch.equal(Y[:, 1], torch.tensor([rows[i][header.index("val_loss_1")] for i in range(3)], dtype=torch.float64))
    _, E = load_curves(path, epochs=[1, 2])
    assert ((E >= 0) & (E <= 1)).all() and not torch.equal(E, Y.flip(1))
    prov = provenance_path(path)
    assert prov.exists() and '"seed": 5' in prov.read_text() and '"complete": true' in prov.read_text()


def test_load_curves_errors(tmp_path: Path, tiny_data: MNISTData) -> None:
    path = tmp_path / "curves.csv"
    generate_curves(path, 1, seed=0, data=tiny_data, epochs=2, grid=TINY_GRID, progress=False)
    with pytest.raises(ValueError, match=r"unknown epoch\(s\) \[5\]"):
        load_curves(path, epochs=(1, 5))
    with pytest.raises(ValueError, match="unknown metric 'accuracy'"):
        load_curves(path, epochs=(1,), metric="accuracy")


def test_resume_after_interruption(tmp_path: Path, tiny_data: MNISTData, caplog: pytest.LogCaptureFixture) -> None:
    kwargs = dict(seed=2, data=tiny_data, epochs=1, grid=TINY_GRID, progress=False)
    reference = tmp_path / "reference.csv"
    generate_curves(reference, 5, **kwargs)
    _, ref_rows = read_curve_rows(reference)

    path = tmp_path / "curves.csv"
    assert generate_curves(path, 5, max_new=3, **kwargs) == 3  # "interrupted" after 3
    # Simulate a kill in the middle of writing row 3: a partial trailing line.
    with open(path, "a") as handle:
        handle.write("3,1,50,0.")
    with caplog.at_level(logging.WARNING, logger="gpar_bo.problems.mnist.curves"):
        assert generate_curves(path, 5, **kwargs) == 2  # redoes 3, does 4; skips 0-2
    assert "dropping partial last line" in caplog.text
    lines = path.read_text().splitlines()
    assert len(lines) == 6 and all(line.count(",") == len(curve_columns(1)) - 1 for line in lines)
    _, rows = read_curve_rows(path)
    assert sorted(rows) == [0, 1, 2, 3, 4]
    for i in range(5):  # identical to an uninterrupted run, apart from the timing column
        assert rows[i][:8] == ref_rows[i][:8] and rows[i][9:] == ref_rows[i][9:]
    # Running again is a no-op: nothing duplicated.
    assert generate_curves(path, 5, **kwargs) == 0
    assert len(path.read_text().splitlines()) == 6
    assert len(json.loads(provenance_path(path).read_text())["runs"]) == 3
    # A last row cut inside its final number still parses, but lacks its newline: it
    # is not trusted, and redone.
    text = path.read_text()
    path.write_text(text[:-3])
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="gpar_bo.problems.mnist.curves"):
        assert generate_curves(path, 5, **kwargs) == 1
    assert "line 6 (no final newline)" in caplog.text
    _, rows = read_curve_rows(path)
    assert sorted(rows) == [0, 1, 2, 3, 4] and rows[4][9:] == ref_rows[4][9:]


def test_resume_refuses_a_different_seed_or_corruption(tmp_path: Path, tiny_data: MNISTData) -> None:
    path = tmp_path / "curves.csv"
    generate_curves(path, 2, seed=0, data=tiny_data, epochs=1, grid=TINY_GRID, progress=False)
    with pytest.raises(ValueError, match="another seed"):
        generate_curves(path, 2, seed=1, data=tiny_data, epochs=1, grid=TINY_GRID, progress=False)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + lines[1] + lines[1] + lines[2])
    with pytest.raises(ValueError, match="duplicate row for setting index 0"):
        read_curve_rows(path)
    path.write_text(lines[0] + "garbage\n" + lines[2])
    with pytest.raises(ValueError, match="line 2: malformed row"):
        read_curve_rows(path)


def test_cli_generates_from_an_idx_directory(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", rng.integers(0, 256, (60, 28, 28), dtype=np.uint8))
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", rng.integers(0, 10, 60, dtype=np.uint8))
    out = tmp_path / "out" / "c.csv"
    argv = ["generate-mnist-curves", "--out", str(out), "--n-settings", "2", "--seed", "0",
            "--epochs", "1", "--data-dir", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    X, Y = load_curves(out, epochs=(1,))
    assert X.shape == (2, 6) and Y.shape == (2, 1)
    assert "IDX directory" in provenance_path(out).read_text()
    assert "--data-dir" in provenance_path(out).read_text()


@pytest.mark.parametrize("name,rows", [("mnist_curves_study.csv", 291), ("mnist_curves_tabular.csv", 2000)])
def test_committed_data_sets_load(name: str, rows: int) -> None:
    path = REPO / "benchmarks" / "data" / name
    if not path.exists():
        pytest.skip(f"{name} not generated")
    X, Y = load_curves(path)
    prov = json.loads(provenance_path(path).read_text())
    # The provenance note states the row count; a complete file has all its settings.
    assert prov["n_settings"] == rows and X.shape[0] == prov["rows"]
    assert prov["complete"] == (X.shape[0] == rows)
    assert Y.shape[1] == 5 and X.shape[1] == len(HPARAM_NAMES) and torch.isfinite(X).all()
    assert torch.equal(X, torch.tensor([hp.to_vector() for hp in sample_settings(X.shape[0], prov["seed"])],
                                       dtype=torch.float64))
    assert ((Y >= 0) & (Y <= 1)).all()
