"""GPAR's fitted conditionals prepared for prediction, and the caches around them.

``GPARModel.posterior`` hands ``GPARPosterior`` one ``PreparedConditionals``: the
conditionals' predictors (each a Cholesky factorisation), their windows, and the
training runs whose observed prefixes the posterior conditions on. It is built
by a ``PredictorCache`` only when the model changed, as acquisition optimisation
asks for many posteriors of the same model.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import torch
from botorch.models import SingleTaskGP
from linear_operator.utils.errors import NotPSDError
from torch import Tensor

from gpar_bo.conditionals import conditional_inputs
from gpar_bo.laplace import set_trainable_raw, trainable_raw
from gpar_bo.prediction import ConditionalPredictor, StackedPredictor, _frozen_copy


def same_tensors(a: Sequence[Tensor], b: Sequence[Tensor]) -> bool:
    """Whether two tensor sequences match pairwise in shape, dtype, device and
    values, NaN equal to NaN (the key of the predictor and shared-draw caches;
    ``torch.equal`` alone ignores the dtype and treats NaN as unequal)."""
    return len(a) == len(b) and all(
        x.shape == y.shape
        and x.dtype == y.dtype
        and x.device == y.device
        and torch.equal(x.isnan(), y.isnan())
        and torch.equal(x.nan_to_num(), y.nan_to_num())
        for x, y in zip(a, b)
    )


class SharedBlockCache:
    """The last draw of the points shared by all t-batches, with its key, per chain
    of predictors (``slot``; one per hyperparameter draw, and one for the draws stacked).

    One entry per chain suffices: within an ``optimize_acqf`` call the shared points
    (qLogNEI's baseline, ``X_pending``) and their normals stay fixed while the
    candidates move, so every evaluation after the first reuses the draw. The
    entry holds what one call computes anyway (per output, ``s x k x k``
    Cholesky factors for ``s`` samples of ``k`` shared points whose inputs
    depend on the sample path), so it keeps a call's peak memory until the
    shared points, the normals or the model change.
    """

    def __init__(self) -> None:
        self._entries: dict[int, tuple[tuple[Tensor, ...], Any]] = {}

    def lookup(self, key: tuple[Tensor, ...], slot: int = 0) -> Any:
        """The draw stored in ``slot`` if ``key`` equals its key elementwise, else None."""
        stored_key, value = self._entries.get(slot, ((), None))
        return value if same_tensors(key, stored_key) else None

    def store(self, key: tuple[Tensor, ...], value: Any, slot: int = 0) -> None:
        # Copies: the caller may reuse (e.g. refill) the key tensors in place.
        self._entries[slot] = (tuple(t.detach().clone() for t in key), value)


@dataclass(frozen=True)
class PreparedConditionals:
    """Everything a ``GPARPosterior`` needs from the model, fixed at preparation.

    Attributes:
        predictors: Each conditional's predictor with its fitted hyperparameters, in
            output order.
        chains: The chains of predictors samples are drawn with: one per
            hyperparameter draw (see ``GPARModel``'s ``hyperparameter_draws``), or
            ``(predictors,)``.
        windows: For each conditional, the earlier outputs it sees.
        train_X: The ``n x d`` training inputs.
        observed: ``n x M`` bool, True where a training run observed an output.
        fed_Y: ``n x M`` values fed into later conditionals (observed, imputed
            or denoised; anything where not observed).
        denoise: Whether later conditionals see latent values (D-GPAR).
        shared_draws: The draw of points shared by all t-batches, reused while
            this preparation lives (see ``GPARPosterior``); a cache of derived
            values, the only part that changes.
        stacked: With hyperparameter draws, per conditional the predictor every chain
            shares or a ``StackedPredictor`` of the chains' ones; None without draws
            or when the chains' predictors cannot be stacked.
    """

    predictors: tuple[ConditionalPredictor, ...]
    chains: tuple[tuple[ConditionalPredictor, ...], ...]
    windows: tuple[tuple[int, ...], ...]
    train_X: Tensor
    observed: Tensor
    fed_Y: Tensor
    denoise: bool
    shared_draws: SharedBlockCache = field(default_factory=SharedBlockCache, compare=False)
    stacked: tuple | None = None

    @property
    def num_outputs(self) -> int:
        return len(self.predictors)

    def observed_prefix(self, X: Tensor, Y: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """Observed values (to feed forward) of the training runs equal to X.

        A point that equals a training input uses that run's observed outputs;
        if several runs share the input, the one with the longest prefix.

        Args:
            X: A ``batch_shape x q x d`` tensor.
            Y: ``n x M`` values of the training runs to return instead of
                ``fed_Y`` (e.g. the modelled observations).

        Returns:
            ``batch_shape x q x M`` values and a bool mask of observed outputs.
        """
        matches = (X.detach().unsqueeze(-2) == self.train_X).all(-1)  # b x q x n
        lengths = self.observed.sum(-1).to(X)
        score = torch.where(matches, lengths, -1.0)
        best = score.argmax(-1)
        mask = self.observed[best] & matches.any(-1, keepdim=True)
        values = torch.where(mask, (self.fed_Y if Y is None else Y)[best], 0.0)
        return values, mask


class PredictorCache:
    """The last ``PreparedConditionals`` of a model, and the state it was built for.

    Like GPyTorch's prediction cache, but keyed on the hyperparameter values,
    the conditional modules and the training data rather than on ``train()``,
    so edits in eval mode cannot leave it stale.
    """

    def __init__(self) -> None:
        self._conditionals: list[SingleTaskGP] = []  # the modules themselves, not copies
        self._state: list[Tensor] = []
        self._prepared: PreparedConditionals | None = None

    def get(
        self,
        conditionals: Sequence[SingleTaskGP],
        windows: Sequence[Sequence[int]],
        train_X: Tensor,
        observed: Tensor,
        fed_Y: Tensor,
        denoise: bool,
        draws: Sequence[Tensor | None] = (),
    ) -> PreparedConditionals:
        """The prepared conditionals, rebuilt only if anything they depend on changed.

        Args:
            conditionals: The fitted conditionals, in output order.
            windows: The earlier outputs each conditional sees.
            train_X: ``n x d`` training inputs.
            observed: ``n x M`` bool observation mask.
            fed_Y: ``n x M`` values fed into later conditionals.
            denoise: Whether later conditionals see latent values.
            draws: Per conditional, ``K x P`` hyperparameter draws (``trainable_raw``
                vectors) or None (it keeps its fit in every chain); empty: no draws.
        """
        conditionals = list(conditionals)
        drawn = [d for d in draws if d is not None]
        state = [
            t.detach() for gp in conditionals for t in chain(gp.parameters(), gp.buffers())
        ] + [train_X, observed, fed_Y] + drawn
        if (
            self._prepared is None
            or len(conditionals) != len(self._conditionals)
            or any(a is not b for a, b in zip(conditionals, self._conditionals))
            or not same_tensors(state, self._state)
        ):
            inputs = [conditional_inputs(train_X, fed_Y, w, observed[:, m])
                      for m, w in enumerate(windows)]
            predictors = tuple(ConditionalPredictor(gp, x) for gp, x in zip(conditionals, inputs))
            chains = (predictors,)
            stacked = None
            if drawn:
                num_draws = len(drawn[0])
                chains = tuple(
                    tuple(
                        predictor if theta is None else _drawn_predictor(gp, x, theta[k], predictor)
                        for predictor, gp, x, theta in zip(predictors, conditionals, inputs, draws)
                    )
                    for k in range(num_draws)
                )
                stacked = _stacked_chains(chains)
            self._prepared = PreparedConditionals(
                predictors=predictors,
                chains=chains,
                windows=tuple(tuple(w) for w in windows),
                train_X=train_X.clone(),
                observed=observed.clone(),
                fed_Y=fed_Y.clone(),
                denoise=denoise,
                stacked=stacked,
            )
            self._conditionals = conditionals
            self._state = [t.clone() for t in state]
        return self._prepared


def _stacked_chains(chains: tuple) -> tuple | None:
    """Per conditional, the predictor every chain shares or the chains' predictors stacked;
    None if some cannot be stacked (their anchors differ)."""
    columns = list(zip(*chains))
    try:
        stacked = [column[0] if all(p is column[0] for p in column) else StackedPredictor(list(column))
                   for column in columns]
    except ValueError:
        return None
    for column, predictor in zip(columns, stacked):
        if isinstance(predictor, StackedPredictor):  # held once: the chains keep slices
            for c, drawn in enumerate(column):
                drawn.weights, drawn.root = predictor.weights[c], predictor.root[c]
    return tuple(stacked)


def _drawn_predictor(
    gp: SingleTaskGP, inputs: Tensor, theta: Tensor, fitted: ConditionalPredictor
) -> ConditionalPredictor:
    """The predictor of ``gp`` with raw hyperparameters ``theta``; the fit's predictor
    ``fitted``, with a warning, if the draw's covariance cannot be factorised. ``gp``
    is left as it was."""
    fit = trainable_raw(gp)
    set_trainable_raw(gp, theta)
    try:
        predictor = ConditionalPredictor(gp, inputs)
        # A predictor evaluates its kernel and mean when called: it keeps copies that
        # hold the draw (the rest of the GP, its data, is not copied).
        predictor.kernel = _frozen_copy(predictor.kernel)
        predictor.mean_module = _frozen_copy(predictor.mean_module)
        return predictor
    except NotPSDError as error:
        warnings.warn(f"A hyperparameter draw's covariance is not positive definite ({error}); "
                      "that draw predicts with the fitted hyperparameters.", RuntimeWarning, stacklevel=4)
        return fitted
    finally:
        set_trainable_raw(gp, fit)
