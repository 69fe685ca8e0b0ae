"""``gpar-bo generate-funnel-curves``: generate (or resume) a funnel-MLP learning-curve table."""

from __future__ import annotations

import argparse
import logging
import shlex
from pathlib import Path

from gpar_bo.problems.funnel_mlp.data import DATASETS

__all__ = ["add_generate_parser", "run_generate"]


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def add_generate_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``generate-funnel-curves`` sub-command on ``subparsers``."""
    p = subparsers.add_parser(
        "generate-funnel-curves",
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
    p.add_argument("--out", type=Path, required=True, help="output CSV (provenance: same stem, .json)")
    p.add_argument("--dataset", choices=sorted(DATASETS), default="digits",
                   help="scikit-learn bundled data set (default digits)")
    p.add_argument("--n-settings", type=_positive, required=True, help="total settings in the file")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument("--epochs", type=_positive, default=50, help="epochs per setting (default 50)")
    p.add_argument("--split-seed", type=int, default=0, help="train/validation split seed (default 0)")
    p.add_argument("--threads", type=_positive, default=1, help="torch threads (default 1)")
    p.add_argument("--max-examples", type=_positive, default=None,
                   help="use a seeded subset of this many examples (smoke runs)")
    p.add_argument("--max-new", type=_positive, default=None, help="stop after this many new settings")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(run=run_generate)
    return p


def _canonical_command(args: argparse.Namespace) -> str:
    parts = ["gpar-bo", "generate-funnel-curves", "--out", str(args.out), "--dataset", args.dataset,
             "--n-settings", str(args.n_settings), "--seed", str(args.seed),
             "--epochs", str(args.epochs), "--split-seed", str(args.split_seed),
             "--threads", str(args.threads)]
    if args.max_examples is not None:
        parts += ["--max-examples", str(args.max_examples)]
    return shlex.join(parts)


def run_generate(args: argparse.Namespace) -> int:
    import torch

    from gpar_bo.problems.curves_io import run_generation_command
    from gpar_bo.problems.funnel_mlp.curves import generate_curves
    from gpar_bo.problems.funnel_mlp.data import load_dataset

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")

    torch.set_num_threads(args.threads)
    data = load_dataset(args.dataset, split_seed=args.split_seed, max_examples=args.max_examples)
    return run_generation_command(lambda: generate_curves(
        args.out, args.n_settings, seed=args.seed, data=data, epochs=args.epochs,
        progress=not args.no_progress, command=_canonical_command(args), max_new=args.max_new,
    ), args.out)
