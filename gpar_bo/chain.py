r"""GPAR's chain of conditionals on its training data.

Conditional m trains on the runs that observed output m. Its inputs are x joined
with the values fed from the earlier outputs in its window: the observations or,
where imputing (missing earlier outputs) or denoising (D-GPAR), the earlier
conditionals' posterior means at those runs. So the fed values depend on the
fitted earlier conditionals, and are recomputed in output order whenever their
hyperparameters change. ``TrainingChain`` keeps the data and the fed values; the
conditionals themselves are the model's modules, passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import InducingPointKernel
from torch import Tensor

from gpar_bo import conditionals as spec
from gpar_bo.kernels import Conventions, KernelFamily
from gpar_bo.prediction import ConditionalPredictor


@dataclass(frozen=True)
class ChainOptions:
    """How the conditionals are specified and what they are fed (see ``GPARModel``)."""

    family: KernelFamily
    conventions: Conventions
    use_rbf_kernel: bool
    markov: int | None
    impute: bool
    denoise: bool
    num_inducing: int | None
    learn_inducing_points: bool
    noise_prior: str = "lognormal"


class TrainingChain:
    """The conditionals' training data and the values fed between them.

    Args:
        train_X: ``n x d`` inputs.
        modelled_Y: ``n x M`` modelled outputs (after the outcome transform),
            NaN where not observed.
        observed: ``n x M`` bool, True where an output is observed.
        options: The chain's options.
        modelled_Yvar: ``n x M`` known measurement variances of ``modelled_Y``, or
            None: each conditional's noise is then at least their floor
            (``conditionals.noise_floor``).
    """

    def __init__(
        self,
        train_X: Tensor,
        modelled_Y: Tensor,
        observed: Tensor,
        options: ChainOptions,
        modelled_Yvar: Tensor | None = None,
    ) -> None:
        self.train_X, self.observed, self.options = train_X, observed, options
        self.modelled_Y, self.modelled_Yvar = modelled_Y, modelled_Yvar
        #: ``n x M`` values fed into later conditionals: observations, overwritten
        #: by posterior means where imputing or denoising.
        self.fed_Y = modelled_Y.clone()

    @property
    def num_outputs(self) -> int:
        return self.modelled_Y.shape[-1]

    def window(self, m: int) -> list[int]:
        """The earlier outputs conditional ``m`` sees."""
        return spec.window(m, self.options.markov)

    def inputs(self, m: int, rows: Tensor | slice = slice(None)) -> Tensor:
        """``rows x D`` untransformed inputs of conditional ``m``."""
        return spec.conditional_inputs(self.train_X, self.fed_Y, self.window(m), rows)

    def training_data(self, m: int) -> tuple[Tensor, Tensor]:
        """Conditional ``m``'s inputs and targets: the rows that observed output ``m``."""
        rows = self.observed[:, m]
        return self.inputs(m, rows), self.modelled_Y[rows, m : m + 1]

    def new_conditional(self, m: int, earlier: Sequence[SingleTaskGP]) -> SingleTaskGP:
        """The unfitted GP of conditional ``m``, given the conditionals before it."""
        inputs, targets = self.training_data(m)
        variances = None
        if self.modelled_Yvar is not None:
            variances = self.modelled_Yvar[self.observed[:, m], m : m + 1]
        bounds = spec.input_bounds(
            [self.train_X]
            + [self.modelled_Y[self.observed[:, j], j : j + 1] for j in self.window(m)]
        )
        return spec.conditional_gp(
            inputs,
            targets,
            bounds,
            x_dims=self.train_X.shape[-1],
            family=self.options.family,
            use_rbf_kernel=self.options.use_rbf_kernel,
            conventions=self.options.conventions,
            inducing_inputs=self._inducing_inputs(m, len(targets), earlier),
            learn_inducing_points=self.options.learn_inducing_points,
            noise_prior=self.options.noise_prior,
            target_variances=variances,
        )

    def rebuilt(
        self, m: int, gp: SingleTaskGP, earlier: Sequence[SingleTaskGP]
    ) -> SingleTaskGP:
        """Conditional ``m`` (``gp``) with its hyperparameters on its current data."""
        inputs, targets = self.training_data(m)
        inducing = None
        if self._fixed_inducing(gp):
            inducing = self._inducing_inputs(m, len(targets), earlier)
        return spec.with_training_data(gp, inputs, targets, inducing)

    def depends_on_fit(self, m: int, gp: SingleTaskGP) -> bool:
        """Whether conditional ``m``'s (inducing) inputs come from earlier fits."""
        if m == 0:
            return False
        return self.options.impute or self.options.denoise or self._fixed_inducing(gp)

    def feed(self, m: int, gp: SingleTaskGP) -> None:
        """Impute and/or denoise output ``m`` where later conditionals need it."""
        rows = spec.fed_rows(self.observed, m, self.options.impute, self.options.denoise)
        if not rows.any():
            return
        predictor = ConditionalPredictor(gp, self.inputs(m, self.observed[:, m]))
        with torch.no_grad():
            mean, _ = predictor(self.inputs(m, rows).unsqueeze(-2), joint=False)
        self.fed_Y[rows, m] = mean.squeeze(-1)

    def refeed(self, conditionals: list[SingleTaskGP], rebuild_all: bool = False) -> None:
        """Recompute the fed values in order, rebuilding the conditionals that see them.

        Args:
            conditionals: The conditionals, replaced in place where rebuilt.
            rebuild_all: Rebuild every conditional (e.g. to re-express its targets
                under loaded statistics), not only those whose inputs depend on fits.
        """
        self.fed_Y = self.modelled_Y.clone()
        for m in range(self.num_outputs):
            if rebuild_all or self.depends_on_fit(m, conditionals[m]):
                conditionals[m] = self.rebuilt(m, conditionals[m], conditionals[:m])
            self.feed(m, conditionals[m])

    def _fixed_inducing(self, gp: SingleTaskGP) -> bool:
        sparse = isinstance(gp.covar_module, InducingPointKernel)
        return sparse and not self.options.learn_inducing_points

    def _inducing_inputs(
        self, m: int, num_rows: int, earlier: Sequence[SingleTaskGP]
    ) -> Tensor | None:
        """Conditional ``m``'s untransformed inducing inputs, or None if it is exact."""
        num = spec.num_inducing(self.options.num_inducing, num_rows)
        if not num:
            return None
        predictors = [
            ConditionalPredictor(gp, self.inputs(j, self.observed[:, j]))
            for j, gp in enumerate(earlier[:m])
        ]
        x = spec.regular_inputs(self.train_X, num)
        return spec.inducing_inputs(
            x, predictors, [self.window(j) for j in range(m)], self.window(m)
        )
