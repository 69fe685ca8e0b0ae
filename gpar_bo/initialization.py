"""Starting values for GPAR's hyperparameters before fitting.

BoTorch starts every length scale at the mode of its dimension-scaled prior
(about 0.2 in normalised units for one input). For rapidly varying outputs,
such as the paper's synthetic ``y1`` (period 0.2 on [0, 1]), L-BFGS-B started
there often stops in the "everything is noise" optimum. The paper's scripts
start the input length scales at 0.1 instead; this sets such a starting value
without changing the priors or the model. Small conditionals are also fitted
from short length scales on x automatically (``GPARModel.custom_fit``); a
starting value set here replaces BoTorch's default as the first start.
"""

from __future__ import annotations

import torch

from gpar_bo.kernels import input_kernels
from gpar_bo.model import GPARModel


def set_input_lengthscales(model: GPARModel, lengthscale: float) -> GPARModel:
    """Start every kernel over x alone at ``lengthscale`` (normalised units).

    Kernels over earlier outputs (and NL-X's joint kernel) keep BoTorch's
    starting values. Call before ``fit_gpytorch_mll``.

    Args:
        model: An unfitted ``GPARModel`` (x is normalised to [0, 1]^d).
        lengthscale: The starting length scale for every x dimension.

    Returns:
        The same model, for chaining.
    """
    d = model.train_X.shape[-1]
    for gp in model.conditionals:
        for kernel in input_kernels(gp.covar_module, d):
            kernel.lengthscale = torch.full_like(kernel.lengthscale, lengthscale)
    return model
