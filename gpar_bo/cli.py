"""The ``gpar-bo`` command line: one sub-command per job."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from gpar_bo.problems.funnel_mlp.cli import add_generate_parser as add_funnel_parser
from gpar_bo.problems.mnist.cli import add_generate_parser
from gpar_bo.tuning.cli import add_tune_parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpar-bo",
        description="GPAR for Bayesian optimisation of training runs.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    add_generate_parser(subparsers)
    add_funnel_parser(subparsers)
    add_tune_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
