"""Funnel-MLP curve tables: resumable generation, determinism, file format, CLI and loading."""

from __future__ import annotations

import json
import logging
import signal
import time
from pathlib import Path

import pytest
import torch

from gpar_bo.cli import main
from gpar_bo.problems.curves_io import curve_columns, provenance_path, read_curve_rows, train_seed_for
from gpar_bo.problems.funnel_mlp import (
    HPARAM_NAMES,
    TabularData,
    generate_curves,
    load_curves,
    load_dataset,
    sample_settings,
    to_unit_cube,
)
from tests.fork_server import ForkServer

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tiny() -> TabularData:
    return load_dataset("digits", max_examples=90)


def without_seconds(rows: dict[int, list[float]]) -> dict[int, list[float]]:
    seconds = 1 + len(HPARAM_NAMES) + 1  # index, hyperparameters, train_seed, seconds
    return {i: row[:seconds] + row[seconds + 1:] for i, row in rows.items()}


def test_file_format_and_provenance(tmp_path: Path, tiny: TabularData) -> None:
    path = tmp_path / "c.csv"
    assert generate_curves(path, 3, seed=4, data=tiny, epochs=2, progress=False, command="cmd") == 3
    header, rows = read_curve_rows(path, HPARAM_NAMES)
    assert header == curve_columns(HPARAM_NAMES, 2) and header[:8] == [
        "index", "batch_size", "learning_rate", "momentum", "weight_decay", "num_layers",
        "max_units", "max_dropout"]
    assert header[8:] == ["train_seed", "seconds", "val_loss_1", "val_loss_2", "val_error_1", "val_error_2"]
    settings = sample_settings(3, 4)
    for i in range(3):  # raw hyperparameter values, exactly the sampled (and trained) ones
        assert rows[i][1:8] == settings[i].to_vector() and rows[i][8] == train_seed_for(4, i)
    first_row = path.read_text().splitlines()[1].split(",")
    assert first_row[1] == str(settings[0].batch_size)  # integers are written as integers
    prov = json.loads(provenance_path(path).read_text())
    assert prov["runs"][0]["command"] == "cmd"
    assert (prov["seed"], prov["n_settings"], prov["epochs"], prov["rows"], prov["complete"]) == (4, 3, 2, 3, True)
    assert (prov["dataset"], prov["n_train"], prov["n_val"]) == ("digits", tiny.n_train, tiny.n_val)
    assert "load_digits" in prov["data_source"] and "split_seed=0" in prov["data_source"]
    assert {"python", "torch", "numpy", "scikit-learn", "gpar-bo"} <= set(prov["versions"])
    assert {"platform", "cpu_count", "torch_threads"} <= set(prov["machine"])
    assert prov["search_space"]["learning_rate"] == {"low": 1e-4, "high": 0.1, "log": True, "integer": False}
    assert prov["runs"][0]["started"].endswith("Z") and prov["runs"][0]["rows_after"] == 3


def test_same_seed_same_rows(tmp_path: Path, tiny: TabularData) -> None:
    runs = []
    for name, seed in (("a", 0), ("b", 0), ("c", 1)):
        generate_curves(tmp_path / f"{name}.csv", 3, seed=seed, data=tiny, epochs=2, progress=False)
        runs.append(without_seconds(read_curve_rows(tmp_path / f"{name}.csv", HPARAM_NAMES)[1]))
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_resume_after_interruption_and_extension(
    tmp_path: Path, tiny: TabularData, caplog: pytest.LogCaptureFixture
) -> None:
    kwargs = dict(seed=2, data=tiny, epochs=2, progress=False)
    reference = tmp_path / "reference.csv"
    generate_curves(reference, 5, **kwargs)
    _, ref_rows = read_curve_rows(reference, HPARAM_NAMES)

    path = tmp_path / "c.csv"
    assert generate_curves(path, 5, max_new=2, **kwargs) == 2
    with open(path, "a") as handle:  # a kill in the middle of writing row 2
        handle.write("2,16,0.00")
    with caplog.at_level(logging.WARNING):
        assert generate_curves(path, 5, max_new=1, **kwargs) == 1
    assert "dropping partial last line" in caplog.text
    assert generate_curves(path, 5, **kwargs) == 2
    assert generate_curves(path, 5, **kwargs) == 0  # nothing left, nothing duplicated
    _, rows = read_curve_rows(path, HPARAM_NAMES)
    assert without_seconds(rows) == without_seconds(ref_rows)
    prov = json.loads(provenance_path(path).read_text())
    assert len(prov["runs"]) == 4 and [r["rows_after"] for r in prov["runs"]] == [2, 3, 5, 5]
    # A finished table extends with the next settings of the same seeded list.
    assert generate_curves(path, 6, **kwargs) == 1
    X, _ = load_curves(path)
    assert torch.equal(X, torch.tensor([hp.to_vector() for hp in sample_settings(6, 2)], dtype=torch.float64))
    assert json.loads(provenance_path(path).read_text())["n_settings"] == 6


def test_resume_refuses_another_seed_or_epochs(tmp_path: Path, tiny: TabularData) -> None:
    path = tmp_path / "c.csv"
    generate_curves(path, 2, seed=0, data=tiny, epochs=1, progress=False)
    with pytest.raises(ValueError, match="another seed"):
        generate_curves(path, 2, seed=1, data=tiny, epochs=1, progress=False)
    with pytest.raises(ValueError, match="different number of epochs"):
        generate_curves(path, 2, seed=0, data=tiny, epochs=2, progress=False)
    with pytest.raises(ValueError, match="n_settings=1"):
        generate_curves(path, 1, seed=0, data=tiny, epochs=1, progress=False)
    with pytest.raises(ValueError, match="n_settings must be at least 1"):
        generate_curves(tmp_path / "d.csv", 0, data=tiny, epochs=1, progress=False)
    mnist_like = tmp_path / "m.csv"
    mnist_like.write_text("index,n_hidden_layers,train_seed,seconds\n")
    with pytest.raises(ValueError, match="learning-curve CSV header"):
        generate_curves(mnist_like, 1, data=tiny, epochs=1, progress=False)


def test_load_curves(tmp_path: Path, tiny: TabularData) -> None:
    path = tmp_path / "c.csv"
    generate_curves(path, 2, seed=0, data=tiny, epochs=3, progress=False)
    X, E = load_curves(path)
    assert X.shape == (2, 7) and E.shape == (2, 3) and ((E >= 0) & (E <= 1)).all()
    _, L = load_curves(path, epochs=(3, 1), metric="loss")
    assert L.shape == (2, 2) and (L > 0).all()
    assert ((to_unit_cube(X) >= 0) & (to_unit_cube(X) <= 1)).all()
    with pytest.raises(ValueError, match=r"unknown epoch\(s\) \[4\]"):
        load_curves(path, epochs=(1, 4))
    with pytest.raises(ValueError, match="unknown metric"):
        load_curves(path, metric="accuracy")


def test_cli_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["generate-funnel-curves", "--out", str(tmp_path / "c.csv")]
    for extra, message in (
        (["--n-settings", "0"], "must be a positive integer"),
        (["--n-settings", "2", "--dataset", "iris"], "invalid choice: 'iris'"),
        (["--n-settings", "2", "--epochs", "0"], "must be a positive integer"),
        (["--dataset", "digits"], "--n-settings"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            main(base + extra)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "c.csv").exists()


def test_cli_survives_kill_9(tmp_path: Path, fork_server: ForkServer) -> None:
    """``kill -9`` mid-run, then the same command: every setting once, finished rows unchanged."""
    out = tmp_path / "out" / "c.csv"
    argv = ["generate-funnel-curves", "--out", str(out), "--dataset", "breast_cancer",
            "--n-settings", "15", "--seed", "3", "--epochs", "3", "--max-examples", "60",
            "--no-progress"]
    # Forked after the heavy imports (tests/fork_server.py), as `python -m gpar_bo.cli`.
    child = fork_server.start(module="gpar_bo.cli", argv=argv, log=tmp_path / "cli.log")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and child.poll() is None:
            if out.exists() and len(out.read_bytes().splitlines()) >= 4:
                break
            time.sleep(0.02)
        killed = child.poll() is None
        child.send_signal(signal.SIGKILL)
    finally:
        child.wait()
    before = {i: row for i, row in read_curve_rows(out, HPARAM_NAMES)[1].items()}
    assert len(before) >= 3 or not killed
    assert main(argv) == 0
    _, rows = read_curve_rows(out, HPARAM_NAMES)
    assert sorted(rows) == list(range(15))
    assert all(rows[i] == row for i, row in before.items())
    assert len(out.read_text().splitlines()) == 16
    prov = json.loads(provenance_path(out).read_text())
    assert prov["complete"] and prov["dataset"] == "breast_cancer"
    assert "--max-examples 60" in prov["runs"][-1]["command"]


def test_cli_refuses_a_second_writer_of_the_same_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gpar_bo.tuning.lock import DirectoryLock

    out = tmp_path / "c.csv"
    argv = ["generate-funnel-curves", "--out", str(out), "--dataset", "breast_cancer",
            "--n-settings", "2", "--epochs", "2", "--max-examples", "60", "--no-progress"]
    with DirectoryLock(tmp_path, name="c.csv.lock", user="test"):
        assert main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert len(error.splitlines()) == 1 and "c.csv" in error and "in use by another" in error
    assert not out.exists()  # refused before any work
    assert main(argv) == 0 and len(out.read_text().splitlines()) == 3  # free again


def test_committed_table_loads() -> None:
    path = REPO / "benchmarks" / "data" / "digits_funnel_curves.csv"
    if not path.exists():
        pytest.skip("digits_funnel_curves.csv not generated")
    prov = json.loads(provenance_path(path).read_text())
    X, E = load_curves(path)
    assert X.shape == (prov["rows"], 7) and E.shape == (prov["rows"], prov["epochs"]) and prov["epochs"] == 50
    assert prov["complete"] == (prov["rows"] == prov["n_settings"])
    assert torch.equal(X, torch.tensor([hp.to_vector() for hp in sample_settings(X.shape[0], prov["seed"])],
                                       dtype=torch.float64))
    assert ((E >= 0) & (E <= 1)).all()
