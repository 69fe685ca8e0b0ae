"""Cached predictions of one fitted GPAR conditional at batched inputs.

Sampling GPAR evaluates conditional m at inputs that differ per sample path
(``x`` joined with that path's earlier outputs). Calling the inner
``SingleTaskGP.posterior`` there makes ``ExactGP`` expand its training data to
the ``samples x batch`` shape, which is slow and memory hungry. Instead the
training Cholesky factor and the weights ``K^{-1} (y - mu)`` are computed once
per ``GPARModel.posterior`` call, and test inputs are reduced to their mean and
"whitened" cross-covariances ``L^{-1} k(X_train, z)``, from which any
posterior covariance is one matrix product.

The exact predictive is GPyTorch's; the sparse one is the predictive of Titsias'
bound, which is GPyTorch's SGPR mean (without its default FITC-like diagonal
correction) and GPyTorch's SGPR covariance plus the prior's remainder ``K - Q``
(``tests/test_prediction.py`` pins both to GPyTorch).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from botorch.models import SingleTaskGP
from gpytorch.kernels import InducingPointKernel, Kernel
from gpytorch.settings import lazily_evaluate_kernels
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor
from torch.nn import Module, Parameter


class Features(NamedTuple):
    """A conditional's view of ``p`` test inputs (``batch x p x ...``)."""

    inputs: Tensor  # normalised inputs, batch x p x D
    mean: Tensor  # predictive mean in output units, batch x p
    whitened: Tensor  # cross @ root in output units, batch x p x (n or u)


def output_scaling(gp: SingleTaskGP) -> tuple[Tensor, Tensor]:
    """The scalar mean and standard deviation a conditional standardises by.

    ``(0, 1)`` for a conditional without an outcome transform (modelled in its
    outputs' own units).
    """
    transform = getattr(gp, "outcome_transform", None)
    if transform is None:
        zero = gp.train_targets.new_zeros(())
        return zero, zero + 1
    return transform.means.squeeze(), transform.stdvs.squeeze()


class ConditionalPredictor:
    """The predictive distribution of one conditional, ready for batched inputs.

    All quantities are in the conditional's output units (its ``Standardize``
    transform, if any, is undone). Every test input is reduced to a cross-covariance
    with a set of anchor inputs (the training inputs of an exact GP, or the
    inducing inputs of a sparse one): the mean is ``mu + cross @ weights`` and
    the posterior covariance is ``k(a, b) - (cross_a @ root)(cross_b @ root)^T``.

    Args:
        gp: A fitted single-output ``SingleTaskGP`` with a ``Normalize`` input
            transform with fixed bounds and a ``Standardize`` outcome transform
            or none; its kernel may be an ``InducingPointKernel`` (SGPR).
        train_inputs: The conditional's untransformed training inputs
            (``n x D``: x joined with the earlier outputs it sees).
    """

    def __init__(self, gp: SingleTaskGP, train_inputs: Tensor) -> None:
        gp.eval()
        # The modules that evaluate new inputs (not the GP: no back-reference).
        self.input_transform, self.mean_module = gp.input_transform, gp.mean_module
        self.y_mean, self.y_std = output_scaling(gp)
        covar = gp.covar_module
        self.kernel = covar.base_kernel if isinstance(covar, InducingPointKernel) else covar
        with torch.no_grad():
            inputs = gp.input_transform(train_inputs)
            residual = (gp.train_targets - gp.mean_module(inputs)).unsqueeze(-1)
            noise = gp.likelihood.noise.squeeze(-1)
            if isinstance(covar, InducingPointKernel):
                # A copy: learned inducing points may be changed in place later (e.g.
                # set to a hyperparameter draw's and back).
                self.anchors = covar.inducing_points.detach().clone()
                self.weights, root = _sparse_cache(
                    self.kernel, self.anchors, inputs, residual, noise
                )
            else:
                self.anchors = inputs
                self.weights, root = _exact_cache(self.kernel, inputs, residual, noise)
            self.root = root * self.y_std
        self.noise = noise.detach() * self.y_std**2

    def features(self, Z: Tensor) -> Features:
        """Mean and whitened cross-covariances at ``Z`` (``batch x p x D``)."""
        Z = self.input_transform(Z)
        # One (batch * p) x n kernel matrix: GPyTorch would otherwise expand
        # the training inputs to Z's batch shape and run tiny batched GEMMs.
        flat = Z.reshape(-1, Z.shape[-1])
        # Evaluated at once: every kernel matrix here is used dense right away, and
        # GPyTorch's lazy kernel tensors cost more in bookkeeping than these small
        # matrices cost to compute.
        with lazily_evaluate_kernels(False):
            cross = self.kernel(flat, self.anchors).to_dense().view(*Z.shape[:-1], -1)
        mean = self.mean_module(Z) + (cross @ self.weights).squeeze(-1)
        return Features(Z, mean * self.y_std + self.y_mean, cross @ self.root)

    def covariance(self, a: Features, b: Features) -> Tensor:
        """Posterior covariance between two sets of points (``batch x p x r``)."""
        with lazily_evaluate_kernels(False):  # as in ``features``
            prior = self.kernel(a.inputs, b.inputs).to_dense() * self.y_std**2
        return prior - a.whitened @ b.whitened.mT

    def variance(self, a: Features) -> Tensor:
        """Posterior variance at each point (``batch x p``)."""
        prior = self.kernel(a.inputs, diag=True) * self.y_std**2
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


def _exact_cache(
    kernel: Kernel, inputs: Tensor, residual: Tensor, noise: Tensor
) -> tuple[Tensor, Tensor]:
    """Weights ``(K + s I)^{-1} r`` and root ``L^{-T}`` of an exact GP."""
    eye = torch.eye(len(inputs), dtype=inputs.dtype, device=inputs.device)
    chol = psd_safe_cholesky(kernel(inputs).to_dense() + noise * eye)
    # L^{-1} once, so every test batch costs one matrix product.
    chol_inv = torch.linalg.solve_triangular(chol, eye, upper=False)
    return chol_inv.mT @ (chol_inv @ residual), chol_inv.mT


def _sparse_cache(
    kernel: Kernel, inducing: Tensor, inputs: Tensor, residual: Tensor, noise: Tensor
) -> tuple[Tensor, Tensor]:
    r"""Weights and root of the SGPR predictive (Titsias, 2009).

    With ``A = K_uu + K_un K_nu / s`` the mean is ``k_zu A^{-1} K_un r / s`` and
    the covariance ``k(a, b) - k_au (K_uu^{-1} - A^{-1}) k_ub``. Explicit
    inverses of ``K_uu`` are badly conditioned, so with ``K_uu = L L^T`` and
    ``Phi = L^{-1} K_un / sqrt(s)`` everything goes through the eigenvalues
    ``lambda`` of ``Phi Phi^T = V diag(lambda) V^T``:
    ``K_uu^{-1} - A^{-1} = L^{-T} V diag(lambda / (1 + lambda)) V^T L^{-1}``.
    Costs ``O(n u^2)``.
    """
    scale = noise.sqrt()
    chol = psd_safe_cholesky(kernel(inducing).to_dense())
    phi = torch.linalg.solve_triangular(chol, kernel(inducing, inputs).to_dense(), upper=False)
    phi = phi / scale
    eigenvalues, eigenvectors = torch.linalg.eigh(phi @ phi.mT)
    eigenvalues = eigenvalues.clamp_min(0.0)
    inner = eigenvectors @ ((eigenvectors.mT @ (phi @ residual)) / (1 + eigenvalues).unsqueeze(-1))
    weights = torch.linalg.solve_triangular(chol.mT, inner, upper=True) / scale
    shrunk = eigenvectors * (eigenvalues / (1 + eigenvalues)).sqrt()
    return weights, torch.linalg.solve_triangular(chol.mT, shrunk, upper=True)


class StackedPredictor:
    """One conditional's predictors under several hyperparameter draws, evaluated together.

    GPyTorch's kernels and means broadcast over parameters stacked along a leading
    dimension, so the ``K`` draws' kernel matrices come from one call instead of ``K``.
    The samples of a draw of paths are split into ``K`` equal contiguous blocks, block
    ``c`` drawn with predictor ``c`` (as ``GPARPosterior``'s loop over the chains does);
    :meth:`for_samples` gives the view that evaluates ``s`` such samples.

    Args:
        predictors: The ``K`` predictors, with the same anchors (exact conditionals
            on the same data; learned inducing points differ between draws).

    Raises:
        ValueError: The predictors' anchors differ.
    """

    def __init__(self, predictors: list[ConditionalPredictor]) -> None:
        first = predictors[0]
        if any(not torch.equal(p.anchors, first.anchors) for p in predictors):
            raise ValueError("Stacked predictors must share their anchors.")
        self.num_chains = len(predictors)
        self.input_transform, self.y_mean, self.y_std = first.input_transform, first.y_mean, first.y_std
        # Evaluated at K x B x points x D inputs: draw k's parameters for its B batches.
        self.kernel = stack_modules([p.kernel for p in predictors])
        self.mean_module = stack_modules([p.mean_module for p in predictors])
        self.anchors = first.anchors
        self.weights = torch.stack([p.weights for p in predictors])  # K x n x 1
        self.root = torch.stack([p.root for p in predictors])  # K x n x r
        self.noises = torch.stack([p.noise.reshape(()) for p in predictors])  # K

    def for_samples(self, num_samples: int) -> "_StackedSamples":
        """The view that evaluates ``num_samples`` samples, a multiple of the draws."""
        if num_samples % self.num_chains:
            raise ValueError(f"{num_samples} samples do not split over {self.num_chains} draws.")
        return _StackedSamples(self, num_samples)


class _StackedSamples:
    """A ``StackedPredictor`` for ``s`` samples: ``features``, ``covariance``,
    ``variance`` and ``noise`` as ``ConditionalPredictor``'s, with the samples' leading
    dimension (inputs with a leading 1 are the same for every sample and are expanded;
    ``noise`` is each sample's, an ``s`` tensor)."""

    def __init__(self, stacked: StackedPredictor, num_samples: int) -> None:
        self.stacked, self.num_samples = stacked, num_samples
        self.per_chain = num_samples // stacked.num_chains
        self.noise = stacked.noises.repeat_interleave(self.per_chain)  # per sample: s

    def _by_chain(self, inputs: Tensor) -> Tensor:
        return inputs.reshape(self.stacked.num_chains, -1, inputs.shape[-1])

    def features(self, Z: Tensor) -> Features:
        st = self.stacked
        Z = st.input_transform(Z)
        same = Z.shape[0] == 1  # the same inputs for every sample: once per draw
        flat = Z.reshape(1, -1, Z.shape[-1]) if same else self._by_chain(Z)  # (1 | K) x N x D
        with lazily_evaluate_kernels(False):
            cross = st.kernel(flat.unsqueeze(1), st.anchors).to_dense().squeeze(1)  # K x N x n
        mean = st.mean_module(flat.unsqueeze(1)).squeeze(1) + (cross @ st.weights).squeeze(-1)
        mean = mean * st.y_std + st.y_mean
        whitened = cross @ st.root
        Z = Z.expand(self.num_samples, *Z.shape[1:])
        if same:  # each draw's values for each of its samples
            mean, whitened = (t.unsqueeze(1).expand(t.shape[0], self.per_chain, *t.shape[1:])
                              for t in (mean, whitened))
        shape = Z.shape[:-1]
        return Features(Z, mean.reshape(shape), whitened.reshape(*shape, -1))

    def covariance(self, a: Features, b: Features) -> Tensor:
        """Each sample's posterior covariance under its draw (``s x batch x p x r``).

        Inputs that every sample shares are evaluated once per sample here, not once per
        draw: ``GPARPosterior._stacks`` keeps large such blocks on the loop."""
        st = self.stacked
        x1, x2 = (f.inputs.expand(self.num_samples, *f.inputs.shape[1:]) for f in (a, b))
        # K x (s_c * batch) x points x D: each draw's kernel over its own samples' points.
        with lazily_evaluate_kernels(False):
            prior = st.kernel(*(x.reshape(st.num_chains, -1, *x.shape[-2:]) for x in (x1, x2)))
        prior = prior.to_dense().reshape(*x1.shape[:-1], x2.shape[-2]) * st.y_std**2
        return prior - a.whitened @ b.whitened.mT

    def variance(self, a: Features) -> Tensor:
        st = self.stacked
        with lazily_evaluate_kernels(False):
            prior = st.kernel(self._by_chain(a.inputs).unsqueeze(1), diag=True) * st.y_std**2
        return (prior.view(a.mean.shape) - a.whitened.pow(2).sum(-1)).clamp_min(0.0)


def stack_modules(modules: Sequence[Module]) -> Module:
    """A frozen copy of ``modules[0]`` whose parameters are the modules' values stacked
    along a new leading dimension and a singleton one after it (the modules differ only
    in their parameters' values): module ``k``'s values apply to inputs ``k x B x ...``,
    whatever ``B``."""
    stacked = _frozen_copy(modules[0])
    values = [dict(module.named_parameters()) for module in modules]
    for name, _ in list(stacked.named_parameters()):
        *path, leaf = name.split(".")
        owner = stacked
        for attribute in path:
            owner = getattr(owner, attribute)
        value = torch.stack([v[name].detach() for v in values])
        owner._parameters[leaf] = Parameter(value.unsqueeze(1), requires_grad=False)
    return stacked


def _frozen_copy(module: Module) -> Module:
    """A copy of ``module`` that keeps its parameters' and buffers' current values when
    the original's change (e.g. when a draw is set back to the fit).

    Each submodule is copied shallowly with new parameter and buffer dicts holding
    detached clones; what does not change with the hyperparameters (priors' and
    constraints' settings, functions) is shared. ``copy.deepcopy`` would copy all of it,
    at several times the cost, for every draw and conditional of every new model.
    """
    frozen = type(module).__new__(type(module))  # not copy.copy: GPyTorch's shares __dict__
    state = frozen.__dict__
    state.update(module.__dict__)
    state["_parameters"] = {
        name: None if p is None else Parameter(p.detach().clone(), requires_grad=False)
        for name, p in module._parameters.items()
    }
    state["_buffers"] = {
        name: None if b is None else b.clone() for name, b in module._buffers.items()
    }
    state["_modules"] = {
        name: None if m is None else _frozen_copy(m) for name, m in module._modules.items()
    }
    state.pop("_memoize_cache", None)  # GPyTorch's caches belong to the original's values
    return frozen
