"""``gpar-bo generate-mnist-curves``: generate (or resume) a learning-curve data set."""

from __future__ import annotations

import argparse
import logging
import shlex
from pathlib import Path

__all__ = ["add_generate_parser", "run_generate"]


def add_generate_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``generate-mnist-curves`` sub-command on ``subparsers``."""
    p = subparsers.add_parser(
        "generate-mnist-curves",
        help="train MNIST MLPs at random grid settings and record their learning curves",
        description=(
            "Sample hyperparameter settings from the grid (seeded, without replacement), "
            "train each MLP for --epochs epochs and append its per-epoch validation loss "
            "and error to --out. Rerun the same command to resume an interrupted run."
        ),
    )
    p.add_argument("--out", type=Path, required=True, help="output CSV (provenance: same stem, .json)")
    p.add_argument("--n-settings", type=int, required=True, help="total settings in the file")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--epochs", type=int, default=21, help="epochs per setting (default 21)")
    p.add_argument("--data-dir", type=Path, default=None,
                   help="directory of MNIST-format IDX files (default: embedded 5k MNIST)")
    p.add_argument("--layers", type=int, nargs="+", default=[1, 2], choices=[1, 2, 3],
                   help="hidden-layer counts to sample (default 1 2, the authors' grid)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--max-new", type=int, default=None, help="stop after this many new settings")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run_generate)
    return p


def _canonical_command(args: argparse.Namespace) -> str:
    parts = ["gpar-bo", "generate-mnist-curves", "--out", str(args.out),
             "--n-settings", str(args.n_settings), "--seed", str(args.seed),
             "--epochs", str(args.epochs), "--layers", *map(str, args.layers),
             "--threads", str(args.threads)]
    if args.data_dir is not None:
        parts += ["--data-dir", str(args.data_dir)]
    return shlex.join(parts)


def run_generate(args: argparse.Namespace) -> int:
    import torch

    from gpar_bo.problems.curves_io import run_generation_command
    from gpar_bo.problems.mnist.curves import generate_curves
    from gpar_bo.problems.mnist.data import load_mnist
    from gpar_bo.problems.mnist.mlp import PAPER_GRID

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    # One thread is much faster than several for these small matmuls on few cores.
    torch.set_num_threads(args.threads)
    data = load_mnist(args.data_dir)
    grid = {**PAPER_GRID, "n_hidden_layers": tuple(sorted(set(args.layers)))}
    return run_generation_command(lambda: generate_curves(
        args.out, args.n_settings, seed=args.seed, data=data, epochs=args.epochs, grid=grid,
        progress=not args.no_progress, command=_canonical_command(args), max_new=args.max_new,
    ), args.out)
