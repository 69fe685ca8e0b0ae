"""``gpar-bo generate-mnist-curves``: generate (or resume) a learning-curve data set."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpar_bo.problems.generate_cli import (
    add_generator_parser,
    canonical_command,
    run_generation_command,
)

__all__ = ["add_generate_parser", "run_generate"]

COMMAND = "generate-mnist-curves"


def add_generate_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``generate-mnist-curves`` sub-command on ``subparsers``."""
    p = add_generator_parser(
        subparsers, COMMAND, epochs=21, run=run_generate,
        help="train MNIST MLPs at random grid settings and record their learning curves",
        description=(
            "Sample hyperparameter settings from the grid (seeded, without replacement), "
            "train each MLP for --epochs epochs and append its per-epoch validation loss "
            "and error to --out. Rerun the same command to resume an interrupted run."
        ),
    )
    p.add_argument("--data-dir", type=Path, default=None,
                   help="directory of MNIST-format IDX files (default: embedded 5k MNIST)")
    p.add_argument("--layers", type=int, nargs="+", default=[1, 2], choices=[1, 2, 3],
                   help="hidden-layer counts to sample (default 1 2, the authors' grid)")
    return p


def run_generate(args: argparse.Namespace) -> int:
    from gpar_bo.problems.mnist.curves import generate_curves
    from gpar_bo.problems.mnist.data import load_mnist
    from gpar_bo.problems.mnist.mlp import PAPER_GRID

    grid = {**PAPER_GRID, "n_hidden_layers": tuple(sorted(set(args.layers)))}
    command = canonical_command(COMMAND, args, (
        "out", "n_settings", "seed", "epochs", "layers", "threads", "data_dir"))
    return run_generation_command(args, lambda: generate_curves(
        args.out, args.n_settings, seed=args.seed, data=load_mnist(args.data_dir),
        epochs=args.epochs, grid=grid, progress=not args.no_progress, command=command,
        max_new=args.max_new,
    ))
