"""``gpar-bo study``: the MLP validation-error study of issue 5.

The runner lives in the repository's ``benchmarks/mlp_study.py`` (it needs the committed
study data beside it); this module loads it by path, so the sub-command works from a
source checkout (``pip install -e .``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["add_study_parser", "load_study_module"]

STUDY_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "mlp_study.py"


def load_study_module() -> ModuleType:
    """Import ``benchmarks/mlp_study.py`` of this checkout."""
    if "gpar_bo_mlp_study" in sys.modules:
        return sys.modules["gpar_bo_mlp_study"]
    if not STUDY_SCRIPT.exists():
        raise SystemExit(
            f"{STUDY_SCRIPT} not found: `gpar-bo study` runs from a source checkout "
            "of gpar-bo (pip install -e .)"
        )
    spec = importlib.util.spec_from_file_location("gpar_bo_mlp_study", STUDY_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpar_bo_mlp_study"] = module
    spec.loader.exec_module(module)
    return module


def add_study_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Register the ``study`` sub-command on ``subparsers``."""
    p = subparsers.add_parser(
        "study",
        help="MLP validation-error study: GPAR vs IGP, ICM, SLFM and LatentKroneckerGP",
        description=(
            "Run the paper's MLP study protocol (section 5) on "
            "benchmarks/data/mnist_curves_study.csv: per seed, 175 training settings "
            "(most runs stopped early) and 116 test settings; report SMSE per checkpoint, "
            "log loss and fit time per model, and write .md/.csv/.png results."
        ),
    )
    if STUDY_SCRIPT.exists():
        load_study_module().build_parser(p)
    else:  # an installed package without the benchmarks: fail only when used
        p.add_argument("args", nargs=argparse.REMAINDER)
    p.set_defaults(run=_run_study)
    return p


def _run_study(args: argparse.Namespace) -> int:
    study = load_study_module()
    args.argv = sys.argv[2:] if len(sys.argv) > 1 and sys.argv[1] == "study" else None
    return study.run(args)
