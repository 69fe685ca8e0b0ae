"""Do a table's learning curves cross? Epoch-1 vs final rank agreement of a curve table.

```bash
python -m benchmarks.curve_crossing                                # the funnel-MLP digits table
python -m benchmarks.curve_crossing --table funnel_breast_cancer   # ... on breast cancer
python -m benchmarks.curve_crossing --table mnist                  # the 2,000-setting MNIST table
python -m benchmarks.curve_crossing --table funnel_classification  # the development funnel table
python -m benchmarks.curve_crossing --table mnist_study            # the development MNIST study set
```

Prints the number of settings, the Spearman correlation between the validation error after
epoch 1 and after the last epoch, the fraction of pairs of settings whose curves cross
(ordered strictly both at epoch 1 and at the end, but the other way round; pairs tied at
either end are left out), the best and median final errors, and the fraction of settings
that end no better than chance; and where the runs a search stops at epoch 1 end: the
final-error quantiles of the settings in the worst 40 % at epoch 1, split at its 60 % and
80 % quantiles (:func:`finals_by_first_error`); and how much the error of the best settings
changes from one epoch to the next, against the change two independent measurements on the
table's validation set would show (:func:`changes_against_binomial`).
"""

from __future__ import annotations

import argparse
import json
import math

import torch
from scipy.stats import spearmanr
from torch import Tensor

from benchmarks.bo.problems import DEV_FUNNEL_CSV, FUNNEL_CSV, MNIST_STUDY_CSV, funnel_table, mnist_table
from gpar_bo.measurement import BinomialNoise
from gpar_bo.problems.funnel_mlp import load_dataset

__all__ = ["changes_against_binomial", "crossing_stats", "finals_by_first_error"]

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


#: Quantile levels of the final error reported by :func:`finals_by_first_error`.
FINAL_QUANTILES = (0.05, 0.25, 0.5, 0.75, 0.95)


def finals_by_first_error(error: Tensor, edges: tuple[float, ...] = (0.6, 0.8)) -> list[dict]:
    """Where settings that start badly end: final-error quantiles by band of epoch-1 error.

    The bands run from each quantile in ``edges`` of the epoch-1 error to the next (the
    last to the worst setting), closed below, so the settings tied at an edge fall in the
    band above it and a band may hold more than its nominal share.

    Args:
        error: ``n x E`` validation errors.
        edges: Increasing quantile levels in (0, 1) of the epoch-1 error.

    Returns:
        One dict per band: its epoch-1 error range (``first_low``, ``first_high``), the
        ``share`` of settings in it, and the final error's quantiles ``final_q05`` ...
        ``final_q95`` (:data:`FINAL_QUANTILES`).
    """
    if error.dim() != 2 or error.shape[0] < 1 or not torch.isfinite(error).all():
        raise ValueError(f"error must be a finite n x E tensor; got shape {tuple(error.shape)}"
                         f"{'' if torch.isfinite(error).all() else ' with non-finite values'}.")
    if not edges or any(not 0 < q < 1 for q in edges) or any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"edges must increase within (0, 1); got {edges}.")
    first, last = error[:, 0], error[:, -1]
    cuts = [float(torch.quantile(first, q)) for q in edges]
    levels = torch.tensor(FINAL_QUANTILES, dtype=last.dtype)
    bands = []
    for low, high in zip(cuts, [*cuts[1:], math.inf]):
        members = (first >= low) & (first < high)
        if not members.any():
            continue
        finals = torch.quantile(last[members], levels)
        bands.append({
            "first_low": float(first[members].min()), "first_high": float(first[members].max()),
            "share": float(members.double().mean()),
            **{f"final_q{round(100 * q):02d}": float(v) for q, v in zip(FINAL_QUANTILES, finals)},
        })
    return bands


def changes_against_binomial(
    error: Tensor, num_examples: int, share: float = 0.25
) -> list[dict]:
    """Epoch-to-epoch changes of the best settings' error against binomial sampling noise.

    A validation error on ``num_examples`` examples has binomial sampling variance
    ``e (1 - e) / n``; if each epoch's error were an independent measurement, the change
    between two epochs would have variance ``2 e (1 - e) / n``. On a fixed validation set
    most of that sampling error is shared by every epoch of a run, so the changes are
    smaller: this measures by how much, which is what a model told the binomial noise
    (``gpar_bo.measurement.BinomialNoise``) as each checkpoint's own noise gets wrong.

    Args:
        error: ``n x E`` validation errors (``E >= 2``).
        num_examples: The validation set's size.
        share: The settings compared: the best ``share`` by final error.

    Returns:
        One dict each for the step from the middle epoch ``E // 2`` to the next and for the
        last step: the epochs, ``sd_change`` (the standard deviation of the change over the
        settings compared), ``sd_independent`` (the root mean of ``2 e (1 - e) / n`` at the
        two epochs' mean error) and their ``ratio``.
    """
    if error.dim() != 2 or error.shape[1] < 2 or not torch.isfinite(error).all():
        raise ValueError(f"error must be a finite n x E tensor with E >= 2; got shape {tuple(error.shape)}"
                         f"{'' if torch.isfinite(error).all() else ' with non-finite values'}.")
    variance = BinomialNoise(num_examples)  # checks num_examples
    if not 0 < share <= 1:
        raise ValueError(f"share must be in (0, 1]; got {share}.")
    last = error[:, -1]
    best = error[last <= torch.quantile(last, share)]
    if len(best) < 2:
        raise ValueError(f"share {share} of {len(error)} settings leaves fewer than 2 to compare.")
    steps = []
    for a in sorted({error.shape[1] // 2 - 1, error.shape[1] - 2}):
        change = best[:, a + 1] - best[:, a]
        level = best[:, a : a + 2].mean(-1)
        independent = float((2 * variance(level)).mean().sqrt())
        sd = float(change.std())
        steps.append({"from_epoch": a + 1, "to_epoch": a + 2, "sd_change": sd,
                      "sd_independent": independent, "ratio": sd / independent})
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", choices=[*(f"funnel_{name}" for name in (*FUNNEL_CSV, *DEV_FUNNEL_CSV)),
                                            "mnist", "mnist_study"],
                        default="funnel_digits")
    args = parser.parse_args()
    if args.table.startswith("mnist"):
        problem = mnist_table(**({"path": MNIST_STUDY_CSV} if args.table == "mnist_study" else {}))
        stats = crossing_stats(problem.error)
    else:
        name = args.table.removeprefix("funnel_")
        problem = funnel_table(name)
        stats = crossing_stats(problem.error, chance=chance_error(name))
    error = problem.error
    print(json.dumps({
        **stats, "finals_by_first_error": finals_by_first_error(error),
        "changes_against_binomial": changes_against_binomial(
            error, problem.measurement_noise.num_examples),
    }, indent=1))


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
