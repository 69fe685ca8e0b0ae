"""Loaders for the paper's real data sets (section 5), in the paper's protocols.

The files live in ``benchmarks/data/jura`` and ``benchmarks/data/fx2007`` (see the
READMEs there for provenance and terms).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

DATA = Path(__file__).resolve().parent / "data"

#: The outputs to predict in the exchange-rate task, pinned last in this order.
FX_TARGETS = ("CAD", "JPY", "AUD")
#: 0-based, inclusive row ranges of each target's test block under both conventions:
#: the paper's text (CAD days 50-100, JPY 100-150, AUD 150-200, 1-based) and the
#: authors' script (wesselb/wbml ``exchange.py``: every block starts at row 49, which
#: keeps the training data closed downwards in the order CAD, JPY, AUD).
FX_TEST_BLOCKS = {
    "paper": {"CAD": (49, 99), "JPY": (99, 149), "AUD": (149, 199)},
    "script": {"CAD": (49, 99), "JPY": (49, 149), "AUD": (49, 199)},
}


@dataclass
class JuraData:
    """Jura: inputs in km, outputs (Ni, Zn, Cd) with Cd hidden at the test locations.

    ``train_X`` is ``359 x 2`` (259 prediction then 100 validation locations),
    ``train_Y`` is ``359 x 3`` with NaN Cd in the last 100 rows, ``test_X`` is the
    ``100 x 2`` validation locations and ``test_Cd`` their true cadmium (``100``).
    """

    train_X: Tensor
    train_Y: Tensor
    test_X: Tensor
    test_Cd: Tensor
    output_names: tuple[str, ...] = ("Ni", "Zn", "Cd")


def load_jura(data_dir: Path = DATA / "jura") -> JuraData:
    """The Jura task of the paper (Goovaerts' protocol)."""
    prediction = pd.read_csv(data_dir / "prediction.csv")
    validation = pd.read_csv(data_dir / "validation.csv")
    outputs = ["Ni", "Zn", "Cd"]
    hidden = validation[outputs].assign(Cd=np.nan)
    X = pd.concat([prediction[["Xloc", "Yloc"]], validation[["Xloc", "Yloc"]]]).to_numpy()
    Y = pd.concat([prediction[outputs], hidden]).to_numpy()
    as_tensor = lambda a: torch.tensor(a, dtype=torch.double)  # noqa: E731
    return JuraData(
        train_X=as_tensor(X),
        train_Y=as_tensor(Y),
        test_X=as_tensor(validation[["Xloc", "Yloc"]].to_numpy()),
        test_Cd=as_tensor(validation["Cd"].to_numpy()),
    )


@dataclass
class FXData:
    """Exchange rates 2007 in USD per unit, with the test blocks hidden.

    ``days`` is ``251 x 1`` (trading day 0..250), ``rates`` the full ``251 x 13``
    rates (NaN where the source is missing), ``train_Y`` the same with the test
    blocks set to NaN, ``test_mask`` a ``251 x 13`` bool mask of the test blocks.
    """

    days: Tensor
    rates: Tensor
    train_Y: Tensor
    test_mask: Tensor
    names: tuple[str, ...]

    def target_indices(self) -> list[int]:
        """Column indices of CAD, JPY and AUD."""
        return [self.names.index(name) for name in FX_TARGETS]


def load_fx2007(convention: str = "paper", data_dir: Path = DATA / "fx2007") -> FXData:
    """The 2007 exchange-rate task under a test-block ``convention`` ("paper" or "script")."""
    if convention not in FX_TEST_BLOCKS:
        raise ValueError(f"convention must be one of {sorted(FX_TEST_BLOCKS)}; got {convention!r}.")
    frame = pd.read_csv(data_dir / "fxdata2007.csv")
    quoted = frame.iloc[:, 3:]  # FOREIGN per USD
    names = tuple(column.split("/")[0] for column in quoted.columns)
    rates = torch.tensor(1.0 / quoted.to_numpy(dtype=float), dtype=torch.double)  # USD per unit
    test_mask = torch.zeros_like(rates, dtype=torch.bool)
    for name, (first, last) in FX_TEST_BLOCKS[convention].items():
        test_mask[first : last + 1, names.index(name)] = True
    train_Y = rates.masked_fill(test_mask, float("nan"))
    days = torch.arange(len(frame), dtype=torch.double).unsqueeze(-1)
    return FXData(days=days, rates=rates, train_Y=train_Y, test_mask=test_mask, names=names)

