"""``gpar-bo generate-funnel-curves``: generate (or resume) a funnel-MLP learning-curve table."""

from __future__ import annotations

import argparse

from gpar_bo.problems.funnel_mlp.data import DATASETS
from gpar_bo.problems.generate_cli import (
    add_generator_parser,
    canonical_command,
    positive_int,
    run_generation_command,
)

__all__ = ["add_generate_parser", "run_generate"]

COMMAND = "generate-funnel-curves"


def add_generate_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``generate-funnel-curves`` sub-command on ``subparsers``."""
    p = add_generator_parser(
        subparsers, COMMAND, epochs=50, run=run_generate,
        help="train LCBench-style funnel MLPs on a bundled scikit-learn data set and record "
             "their learning curves",
        description=(
            "Sample hyperparameter settings uniformly from the LCBench search space (seeded "
            "by (seed, index)), train each funnel MLP with SGD and cosine annealing for "
            "--epochs epochs and append its per-epoch validation loss and error to --out. "
            "Rerun the same command to resume an interrupted run, or with a larger "
            "--n-settings to extend a finished table with the next settings of the same list."
        ),
    )
    p.add_argument("--dataset", choices=sorted(DATASETS), default="digits",
                   help="scikit-learn bundled data set (default digits)")
    p.add_argument("--split-seed", type=int, default=0, help="train/validation split seed (default 0)")
    p.add_argument("--max-examples", type=positive_int, default=None,
                   help="use a seeded subset of this many examples (smoke runs)")
    return p


def run_generate(args: argparse.Namespace) -> int:
    from gpar_bo.problems.funnel_mlp.curves import generate_curves
    from gpar_bo.problems.funnel_mlp.data import load_dataset

    command = canonical_command(COMMAND, args, (
        "out", "dataset", "n_settings", "seed", "epochs", "split_seed", "threads", "max_examples"))
    return run_generation_command(args, lambda: generate_curves(
        args.out, args.n_settings, seed=args.seed,
        data=load_dataset(args.dataset, split_seed=args.split_seed, max_examples=args.max_examples),
        epochs=args.epochs, progress=not args.no_progress, command=command, max_new=args.max_new,
    ))
