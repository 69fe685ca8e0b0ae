"""Do a table's learning curves cross? Epoch-1 vs final rank agreement of a curve table.

```bash
python -m benchmarks.curve_crossing                 # the funnel-MLP digits table
python -m benchmarks.curve_crossing --table mnist   # the 2,000-setting MNIST table
```

Prints the number of settings, the Spearman correlation between the validation error after
epoch 1 and after the last epoch, the fraction of pairs of settings whose curves cross
(ordered strictly both at epoch 1 and at the end, but the other way round; pairs tied at
either end are left out), and the best and median final errors.
"""

from __future__ import annotations

import argparse
import json

import torch
from scipy.stats import spearmanr
from torch import Tensor

from benchmarks.bo.problems import funnel_table, mnist_table

__all__ = ["crossing_stats"]


def _pairs(first: Tensor, last: Tensor) -> tuple[float, float]:
    """(fraction of strictly ordered pairs that cross, fraction of pairs tied at an end)."""
    d_first = torch.sign(first[:, None] - first[None, :])
    d_last = torch.sign(last[:, None] - last[None, :])
    upper = torch.triu(torch.ones_like(d_first, dtype=torch.bool), diagonal=1)
    ordered = upper & (d_first != 0) & (d_last != 0)
    crossing = ordered & (d_first != d_last)
    return int(crossing.sum()) / max(int(ordered.sum()), 1), 1 - int(ordered.sum()) / max(int(upper.sum()), 1)


def crossing_stats(error: Tensor) -> dict[str, float]:
    """Rank agreement of the first and last columns of ``n x E`` error curves.

    Also over the better half of the settings by final error (the ones a tuner cares
    about), which leaves out most runs that never learn.
    """
    first, last = error[:, 0], error[:, -1]
    best_half = last.argsort()[: max(2, len(last) // 2)]
    crossing, tied = _pairs(first, last)
    half_crossing, _ = _pairs(first[best_half], last[best_half])
    return {
        "settings": error.shape[0],
        "spearman_first_final": float(spearmanr(first, last).statistic),
        "crossing_fraction": crossing,
        "tied_pair_fraction": tied,
        "best_half_spearman_first_final": float(
            spearmanr(first[best_half], last[best_half]).statistic
        ),
        "best_half_crossing_fraction": half_crossing,
        "best_final": float(last.min()),
        "median_final": float(last.median()),
        "chance_or_worse_final_fraction": float((last >= 0.85).double().mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", choices=["funnel_digits", "mnist"], default="funnel_digits")
    args = parser.parse_args()
    problem = mnist_table() if args.table == "mnist" else funnel_table("digits")
    print(json.dumps(crossing_stats(problem.error), indent=1))


if __name__ == "__main__":
    main()
