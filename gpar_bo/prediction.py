"""Cached predictions of one fitted GPAR conditional at batched inputs.

Sampling GPAR evaluates conditional m at inputs that differ per sample path
(``x`` joined with that path's earlier outputs). Calling the inner
``SingleTaskGP.posterior`` there makes ``ExactGP`` expand its training data to
the ``samples x batch`` shape, which is slow and memory hungry. Instead the
training Cholesky factor and the weights ``K^{-1} (y - mu)`` are computed once
per ``GPARModel.posterior`` call and only the cross-covariances are evaluated
for the batched inputs.
"""

from __future__ import annotations

import torch
from botorch.models import SingleTaskGP
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor


class ConditionalPredictor:
    """The predictive distribution of one conditional, ready for batched inputs.

    Args:
        gp: A fitted single-output ``SingleTaskGP`` with a ``Normalize`` input
            transform with fixed bounds and a ``Standardize`` outcome transform.
        train_inputs: The conditional's untransformed training inputs
            (``n x D``: x joined with the earlier outputs it sees).
    """

    def __init__(self, gp: SingleTaskGP, train_inputs: Tensor) -> None:
        gp.eval()
        self.gp = gp
        with torch.no_grad():
            self.train_inputs = gp.input_transform(train_inputs)
            targets = gp.train_targets
            prior_mean = gp.mean_module(self.train_inputs)
            noise = gp.likelihood.noise.squeeze(-1)
            train_covar = gp.covar_module(self.train_inputs).to_dense()
            train_covar = train_covar + noise * torch.eye(
                len(targets), dtype=targets.dtype, device=targets.device
            )
            chol = psd_safe_cholesky(train_covar)
            # L^{-1} once, so every test batch costs one matrix product.
            self.chol_inv = torch.linalg.solve_triangular(
                chol, torch.eye(len(targets), dtype=chol.dtype), upper=False
            )
            self.weights = self.chol_inv.mT @ (
                self.chol_inv @ (targets - prior_mean).unsqueeze(-1)
            )
        tf = gp.outcome_transform
        self.y_mean = tf.means.squeeze()
        self.y_std = tf.stdvs.squeeze()
        self.noise = noise.detach() * self.y_std**2

    def __call__(self, Z: Tensor, joint: bool = True) -> tuple[Tensor, Tensor]:
        """Latent predictive mean and covariance at ``Z``, in output units.

        Args:
            Z: A ``batch_shape x q x D`` tensor of untransformed inputs.
            joint: Return the ``q x q`` covariance (True) or only its diagonal.

        Returns:
            The mean (``batch_shape x q``) and the covariance
            (``batch_shape x q x q``, or ``batch_shape x q`` if not joint).
        """
        Z = self.gp.input_transform(Z)
        # One (batch * q) x n kernel matrix: GPyTorch would otherwise expand
        # the training inputs to Z's batch shape and run tiny batched GEMMs.
        flat = Z.reshape(-1, Z.shape[-1])
        cross = self.gp.covar_module(flat, self.train_inputs).to_dense()
        cross = cross.view(*Z.shape[:-1], -1)
        mean = self.gp.mean_module(Z) + (cross @ self.weights).squeeze(-1)
        whitened = cross @ self.chol_inv.mT  # batch x q x n
        if joint:
            prior = self.gp.covar_module(Z).to_dense()
            covar = prior - whitened @ whitened.mT
        else:
            prior = self.gp.covar_module(Z, diag=True)
            covar = (prior - whitened.pow(2).sum(-1)).clamp_min(0.0)
        return mean * self.y_std + self.y_mean, covar * self.y_std**2
