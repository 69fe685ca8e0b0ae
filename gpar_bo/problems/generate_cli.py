"""What every ``gpar-bo generate-*-curves`` sub-command shares: options, recorded command, run.

A problem's CLI module registers its sub-command with :func:`add_generator_parser` plus
its own data options, and runs it through :func:`run_generation_command`, which records
:func:`canonical_command` in the table's provenance note.
"""

from __future__ import annotations

import argparse
import logging
import shlex
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = ["positive_int", "add_generator_parser", "canonical_command", "run_generation_command"]

logger = logging.getLogger(__name__)


def positive_int(text: str) -> int:
    """An ``argparse`` type: a whole number >= 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def add_generator_parser(
    subparsers: argparse._SubParsersAction,
    command: str,
    *,
    help: str,
    description: str,
    epochs: int,
    run: Callable[[argparse.Namespace], int],
) -> argparse.ArgumentParser:
    """Register a generator sub-command with the options every curve table takes.

    ``--out``, ``--n-settings``, ``--seed``, ``--epochs`` (default ``epochs``),
    ``--threads``, ``--max-new`` and ``--no-progress``; the problem adds its own data
    options to the parser this returns. ``run(args)`` runs the command.
    """
    parser = subparsers.add_parser(command, help=help, description=description)
    parser.add_argument("--out", type=Path, required=True,
                        help="output CSV (provenance: same stem, .json)")
    parser.add_argument("--n-settings", type=positive_int, required=True,
                        help="total settings in the file")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    parser.add_argument("--epochs", type=positive_int, default=epochs,
                        help=f"epochs per setting (default {epochs})")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch threads (default 1)")
    parser.add_argument("--max-new", type=positive_int, default=None,
                        help="stop after this many new settings")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.set_defaults(run=run)
    return parser


def canonical_command(command: str, args: argparse.Namespace, options: Sequence[str]) -> str:
    """The command line that makes the same table: ``gpar-bo command --option value ...``.

    Args:
        command: the sub-command's name.
        args: the parsed arguments.
        options: the ``args`` attributes to write, in order (``n_settings`` is written
            ``--n-settings``); a ``None`` value is left out, a list gives several values.
    """
    parts = ["gpar-bo", command]
    for name in options:
        value = getattr(args, name)
        if value is None:
            continue
        values = value if isinstance(value, (list, tuple)) else [value]
        parts += ["--" + name.replace("_", "-"), *map(str, values)]
    return shlex.join(parts)


def run_generation_command(args: argparse.Namespace, generate: Callable[[], int]) -> int:
    """Run a curve generator as a ``gpar-bo`` sub-command; its exit status.

    Sets up logging and ``args.threads`` torch threads (one thread is much faster than
    several for these small networks on few cores), then calls ``generate()`` (which
    loads the data and returns the number of new settings). ``kill PID`` (SIGTERM)
    unwinds like Ctrl-C, so the provenance note records the rows written before the stop
    (``kill -9`` loses only the note's last update); a second process on the same file is
    refused with one line on stderr (status 2).
    """
    import torch

    from gpar_bo.tuning.lock import DirectoryLocked

    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    torch.set_num_threads(args.threads)

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        new = generate()
    except DirectoryLocked as error:
        print(f"gpar-bo: error: {error}", file=sys.stderr)
        return 2
    logger.info("%s: %d new settings written", args.out, new)
    return 0
