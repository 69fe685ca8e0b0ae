"""Cached predictions of one fitted GPAR conditional at batched inputs.

Sampling GPAR evaluates conditional m at inputs that differ per sample path
(``x`` joined with that path's earlier outputs). Calling the inner
``SingleTaskGP.posterior`` there makes ``ExactGP`` expand its training data to
the ``samples x batch`` shape, which is slow and memory hungry. Instead the
training Cholesky factor and the weights ``K^{-1} (y - mu)`` are computed once
per ``GPARModel.posterior`` call, and test inputs are reduced to their mean and
"whitened" cross-covariances ``L^{-1} k(X_train, z)``, from which any
posterior covariance is one matrix product.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from botorch.models import SingleTaskGP
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor


class Features(NamedTuple):
    """A conditional's view of ``p`` test inputs (``batch x p x ...``)."""

    inputs: Tensor  # normalised inputs, batch x p x D
    mean: Tensor  # predictive mean in output units, batch x p
    whitened: Tensor  # L^{-1} k(X_train, z) in output units, batch x p x n


class ConditionalPredictor:
    """The predictive distribution of one conditional, ready for batched inputs.

    All quantities are in the conditional's output units (its ``Standardize``
    transform is undone).

    Args:
        gp: A fitted single-output ``SingleTaskGP`` with a ``Normalize`` input
            transform with fixed bounds and a ``Standardize`` outcome transform.
        train_inputs: The conditional's untransformed training inputs
            (``n x D``: x joined with the earlier outputs it sees).
    """

    def __init__(self, gp: SingleTaskGP, train_inputs: Tensor) -> None:
        gp.eval()
        self.gp = gp
        tf = gp.outcome_transform
        self.y_mean = tf.means.squeeze()
        self.y_std = tf.stdvs.squeeze()
        with torch.no_grad():
            self.train_inputs = gp.input_transform(train_inputs)
            targets = gp.train_targets
            prior_mean = gp.mean_module(self.train_inputs)
            noise = gp.likelihood.noise.squeeze(-1)
            train_covar = gp.covar_module(self.train_inputs).to_dense()
            eye = torch.eye(len(targets), dtype=targets.dtype, device=targets.device)
            chol = psd_safe_cholesky(train_covar + noise * eye)
            # L^{-1} once, so every test batch costs one matrix product.
            chol_inv = torch.linalg.solve_triangular(chol, eye, upper=False)
            self.weights = chol_inv.mT @ (chol_inv @ (targets - prior_mean).unsqueeze(-1))
            self.scaled_chol_inv = chol_inv * self.y_std
        self.noise = noise.detach() * self.y_std**2

    def features(self, Z: Tensor) -> Features:
        """Mean and whitened cross-covariances at ``Z`` (``batch x p x D``)."""
        Z = self.gp.input_transform(Z)
        # One (batch * p) x n kernel matrix: GPyTorch would otherwise expand
        # the training inputs to Z's batch shape and run tiny batched GEMMs.
        flat = Z.reshape(-1, Z.shape[-1])
        cross = self.gp.covar_module(flat, self.train_inputs).to_dense()
        cross = cross.view(*Z.shape[:-1], -1)
        mean = self.gp.mean_module(Z) + (cross @ self.weights).squeeze(-1)
        return Features(Z, mean * self.y_std + self.y_mean, cross @ self.scaled_chol_inv.mT)

    def covariance(self, a: Features, b: Features) -> Tensor:
        """Posterior covariance between two sets of points (``batch x p x r``)."""
        prior = self.gp.covar_module(a.inputs, b.inputs).to_dense() * self.y_std**2
        return prior - a.whitened @ b.whitened.mT

    def variance(self, a: Features) -> Tensor:
        """Posterior variance at each point (``batch x p``)."""
        prior = self.gp.covar_module(a.inputs, diag=True) * self.y_std**2
        return (prior - a.whitened.pow(2).sum(-1)).clamp_min(0.0)

    def __call__(self, Z: Tensor, joint: bool = True) -> tuple[Tensor, Tensor]:
        """Latent predictive mean and covariance at ``Z``, in output units.

        Args:
            Z: A ``batch_shape x q x D`` tensor of untransformed inputs.
            joint: Return the ``q x q`` covariance (True) or only its diagonal.

        Returns:
            The mean (``batch_shape x q``) and the covariance
            (``batch_shape x q x q``, or ``batch_shape x q`` if not joint).
        """
        features = self.features(Z)
        covar = self.covariance(features, features) if joint else self.variance(features)
        return features.mean, covar
