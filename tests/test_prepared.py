"""The prediction cache's frozen copies of drawn kernels and means."""

from __future__ import annotations

from copy import deepcopy

import torch
from gpytorch.kernels import MaternKernel, ScaleKernel
from gpytorch.means import ConstantMean
from gpytorch.priors import GammaPrior

from gpar_bo.prediction import _frozen_copy


def test_a_frozen_copy_keeps_the_values_it_was_made_with() -> None:
    kernel = ScaleKernel(MaternKernel(ard_num_dims=3, lengthscale_prior=GammaPrior(3.0, 6.0)))
    kernel.base_kernel.lengthscale = torch.tensor([0.2, 0.5, 1.5])
    kernel.outputscale = 2.0
    mean = ConstantMean()
    mean.constant = 0.7
    X = torch.rand(5, 3, dtype=torch.double)
    kernel, mean = kernel.double(), mean.double()
    reference = deepcopy(kernel)(X).to_dense(), deepcopy(mean)(X)
    frozen_kernel, frozen_mean = _frozen_copy(kernel), _frozen_copy(mean)

    # The originals change (a draw set back to the fit): the copies do not.
    kernel.base_kernel.lengthscale = torch.ones(3, dtype=torch.double)
    kernel.outputscale = 0.1
    mean.constant = -3.0
    torch.testing.assert_close(frozen_kernel(X).to_dense(), reference[0], rtol=0, atol=0)
    torch.testing.assert_close(frozen_mean(X), reference[1], rtol=0, atol=0)
    assert not torch.allclose(kernel(X).to_dense(), reference[0])

    # Same structure and names; no parameter, buffer or submodule shared with the original.
    assert [n for n, _ in frozen_kernel.named_parameters()] == [n for n, _ in kernel.named_parameters()]
    ids = {id(t) for t in [*kernel.parameters(), *kernel.buffers(), *kernel.modules()]}
    copied = [*frozen_kernel.parameters(), *frozen_kernel.buffers(), *frozen_kernel.modules()]
    assert not ids & {id(t) for t in copied}
    # Its prior still reads the copy's own values.
    prior_value = frozen_kernel.base_kernel.lengthscale_prior.log_prob(frozen_kernel.base_kernel.lengthscale)
    torch.testing.assert_close(
        prior_value,
        kernel.base_kernel.lengthscale_prior.log_prob(torch.tensor([[0.2, 0.5, 1.5]], dtype=torch.double)),
    )
