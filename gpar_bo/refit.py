"""Refit a model's hyperparameters only once its data have grown enough.

A model rebuilt on slightly more data (one more finished learning curve) seldom
needs new hyperparameters: ``RefitSchedule`` re-optimises them when the data
have grown by a set fraction since the last fit, and otherwise loads the last
fitted ones into the new model. It works with any BoTorch model whose
``load_state_dict`` takes ``keep_transforms`` (``GPARModel`` and BoTorch's
GPyTorch models): only hyperparameters are carried over, and the new model keeps
what it derives from its own data (input/outcome transforms, constraint bounds).

Example:
    >>> schedule = RefitSchedule(lambda m: fit_gpytorch_mll(
    ...     ExactMarginalLogLikelihood(m.likelihood, m)), refit_growth=0.2)
    >>> schedule.fit_or_reload(SingleTaskGP(X[:10], Y[:10]), size=10)  # fits
    True
    >>> schedule.fit_or_reload(SingleTaskGP(X[:11], Y[:11]), size=11)  # reloads
    False
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from botorch.models.model import Model
from torch import Tensor

from gpar_bo.model import _derived_from_data

__all__ = ["RefitSchedule", "hyperparameters", "mismatched_hyperparameters"]


def hyperparameters(model: Model) -> dict[str, Tensor]:
    """A copy of ``model``'s state without what it derives from its own data."""
    return {
        k: v.detach().clone() for k, v in model.state_dict().items() if not _derived_from_data(k)
    }


def mismatched_hyperparameters(model: Model, fitted: dict[str, Tensor]) -> list[str]:
    """The keys by which ``fitted`` hyperparameters do not fit ``model``.

    Args:
        model: A model whose ``state_dict`` is compared (without its data-derived entries).
        fitted: Hyperparameters, e.g. ``hyperparameters(other_model)``.

    Returns:
        The keys missing from either or of another shape (e.g. a GPAR conditional
        that turned sparse on more data), sorted; empty if ``fitted`` can be loaded.
    """
    own = {k: v for k, v in model.state_dict().items() if not _derived_from_data(k)}
    return sorted(
        k for k in own.keys() | fitted.keys()
        if k not in own or k not in fitted or own[k].shape != fitted[k].shape
    )


class RefitSchedule:
    """Refit when the data grew by more than ``refit_growth``, else reload the last fit.

    Args:
        fit: Optimises a model's hyperparameters in place.
        refit_growth: Refit once the data size exceeds the size at the last fit by
            more than this fraction; 0 refits whenever the data grew.

    Attributes:
        hyperparameters: The last fitted hyperparameters (None before the first fit).
        fitted_size: The data size at the last fit.
    """

    def __init__(self, fit: Callable[[Model], Any], refit_growth: float = 0.0) -> None:
        if not refit_growth >= 0:
            raise ValueError(f"refit_growth must be >= 0; got {refit_growth}.")
        self.fit = fit
        self.refit_growth = refit_growth
        self.hyperparameters: dict[str, Tensor] | None = None
        self.fitted_size = 0

    def needs_fit(self, size: int) -> bool:
        """Whether a model on ``size`` data points gets its hyperparameters refitted."""
        return self.hyperparameters is None or size > (1 + self.refit_growth) * self.fitted_size

    def fit_or_reload(self, model: Model, size: int) -> bool:
        """Fit ``model`` (on ``size`` data points) or load the last fitted
        hyperparameters into it; leaves it in eval mode.

        Returns:
            Whether the model was fitted.
        """
        if not self.needs_fit(size):
            self.reload(model)
            return False
        self.fit(model)
        model.eval()
        self.hyperparameters = hyperparameters(model)
        self.fitted_size = size
        return True

    def reload(self, model: Model) -> None:
        """Load the last fitted hyperparameters into ``model`` (eval mode); it keeps
        its own transforms.

        Raises:
            RuntimeError: Nothing was fitted yet.
            ValueError: The hyperparameters are not those of ``model``'s kind
                (e.g. a GPAR conditional that turned sparse on more data).
        """
        if self.hyperparameters is None:
            raise RuntimeError("No fitted hyperparameters yet: call fit_or_reload first.")
        mismatched = mismatched_hyperparameters(model, self.hyperparameters)
        if mismatched:
            key = mismatched[0]
            raise ValueError(
                f"The fitted hyperparameters do not fit the new model (e.g. {key!r}); "
                "refit it instead."
            )
        model.load_state_dict(self.hyperparameters, strict=False, keep_transforms=False)
        model.eval()
