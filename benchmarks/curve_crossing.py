"""Do a table's learning curves cross? Epoch-1 vs final rank agreement of a curve table.

```bash
python -m benchmarks.curve_crossing                                # the funnel-MLP digits table
python -m benchmarks.curve_crossing --table funnel_breast_cancer   # ... on breast cancer
python -m benchmarks.curve_crossing --table mnist                  # the 2,000-setting MNIST table
python -m benchmarks.curve_crossing --table funnel_classification  # the development funnel table
```

Prints the number of settings, the Spearman correlation between the validation error after
epoch 1 and after the last epoch, the fraction of pairs of settings whose curves cross
(ordered strictly both at epoch 1 and at the end, but the other way round; pairs tied at
either end are left out), the best and median final errors, and the fraction of settings
that end no better than chance.
"""

from __future__ import annotations

import argparse
import json

import torch
from scipy.stats import spearmanr
from torch import Tensor

from benchmarks.bo.problems import DEV_FUNNEL_CSV, FUNNEL_CSV, funnel_table, mnist_table
from gpar_bo.problems.funnel_mlp import load_dataset

__all__ = ["crossing_stats"]

#: Final errors at or above this count as "chance or worse" on ten balanced classes, where
#: always guessing the majority class errs about 0.9: the margin takes in runs that barely learn.
CHANCE = 0.85
#: Tables store errors to 9 digits: a run that predicts the majority class exactly must not
#: fall below the majority-class error by rounding.
_ROUNDING = 1e-8


def _pairs(first: Tensor, last: Tensor) -> tuple[float, float]:
    """(fraction of strictly ordered pairs that cross, fraction of pairs tied at an end)."""
    d_first = torch.sign(first[:, None] - first[None, :])
    d_last = torch.sign(last[:, None] - last[None, :])
    upper = torch.triu(torch.ones_like(d_first, dtype=torch.bool), diagonal=1)
    ordered = upper & (d_first != 0) & (d_last != 0)
    crossing = ordered & (d_first != d_last)
    return int(crossing.sum()) / max(int(ordered.sum()), 1), 1 - int(ordered.sum()) / max(int(upper.sum()), 1)


def crossing_stats(error: Tensor, chance: float = CHANCE) -> dict[str, float]:
    """Rank agreement of the first and last columns of ``n x E`` error curves.

    Also over the better half of the settings by final error (the ones a tuner cares
    about), which leaves out most runs that never learn.

    Args:
        error: ``n x E`` validation errors.
        chance: final errors at or above this count as "chance or worse" (the default
            suits ten balanced classes; :func:`chance_error` gives it for others).
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
        "chance_or_worse_final_fraction": float((last >= chance - _ROUNDING).double().mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", choices=[*(f"funnel_{name}" for name in (*FUNNEL_CSV, *DEV_FUNNEL_CSV)),
                                            "mnist"],
                        default="funnel_digits")
    args = parser.parse_args()
    if args.table == "mnist":
        print(json.dumps(crossing_stats(mnist_table().error), indent=1))
        return
    name = args.table.removeprefix("funnel_")
    print(json.dumps(crossing_stats(funnel_table(name).error, chance=chance_error(name)), indent=1))


def chance_error(dataset: str) -> float:
    """The final error that counts as chance or worse on a funnel table's data set.

    :data:`CHANCE`, or the majority-class error where that is lower (a binary task's
    majority class errs far below 0.85, and a run that only predicts it has learnt nothing).
    """
    return min(CHANCE, majority_error(dataset))


def majority_error(dataset: str) -> float:
    """The validation error of always predicting the most frequent training class.

    On the split the committed tables were generated with (``load_dataset``'s defaults:
    split seed 0, a third held out; each table's ``.json`` records it).
    """
    data = load_dataset(dataset)
    majority = torch.as_tensor(data.y_train).mode().values
    return float((torch.as_tensor(data.y_val) != majority).double().mean())


if __name__ == "__main__":
    main()
