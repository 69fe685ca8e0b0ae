"""Kernels of GPAR's conditionals: the families of table 2 of the paper.

Conditional m sees the inputs ``(x, y_window)``: the ``d`` input columns first,
then the earlier outputs it depends on. All columns arrive normalised to the
unit cube. Under BoTorch's conventions (the default) the first conditional (no
earlier outputs) gets BoTorch's default ``SingleTaskGP`` kernel, so a one-output
GPAR is exactly a ``SingleTaskGP``; under the paper's, every kernel has a
variance and no prior.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from botorch.models.utils.gpytorch_modules import (
    get_covar_module_with_dim_scaled_prior,
)
from gpytorch.kernels import AdditiveKernel, Kernel, LinearKernel, ScaleKernel
from torch import Tensor


class KernelFamily(str, Enum):
    """How conditional m depends on the earlier outputs y (paper, table 2).

    - ``L`` (GPAR-L): ``k_x(x) + k_linear(y)``; jointly Gaussian outputs.
    - ``NL`` (GPAR-NL): ``k_x(x) + k_eq(y)``; nonlinear dependence on y.
    - ``L_NL`` (GPAR-L-NL): ``k_x(x) + k_linear(y) + k_eq(y)``.
    - ``NL_X`` (nonlinear, input-dependent): ``k_x(x) + k_eq((x, y))``; the
      dependence on earlier outputs may vary with x.
    - ``L_NL_X``: ``k_x(x) + k_linear(y) + k_eq((x, y))``, NL-X with GPAR-L-NL's linear
      term: away from the earlier outputs it was fitted on, a conditional follows
      their linear trend, with a variance that grows with the distance, instead of
      reverting to its constant mean.
    """

    L = "L"
    NL = "NL"
    L_NL = "L-NL"
    NL_X = "NL-X"
    L_NL_X = "L-NL-X"


class Conventions(str, Enum):
    """How each conditional GP is specified and fitted.

    - ``BOTORCH`` ("botorch", the default): BoTorch's ``SingleTaskGP``
      defaults. Each conditional standardises its targets, learns a constant
      mean and is fitted maximum a posteriori under BoTorch's length-scale and
      noise priors; the first conditional's kernel has no variance of its own
      (its standardised targets have unit variance).
    - ``PAPER`` ("paper"): as in the paper's synthetic experiments and the
      authors' ``gpar`` package with ``normalise_y=False``. Zero-mean GPs on the
      outputs as given, a variance on every kernel, and maximum likelihood
      without priors. The model fits them in units of their root mean square
      (not centred, so the GPs stay zero-mean), so that its starting values
      and bounds do not depend on the outputs' units.
    """

    BOTORCH = "botorch"
    PAPER = "paper"


class DenseLinearKernel(LinearKernel):
    """``LinearKernel`` that returns a dense matrix.

    GPyTorch's linear kernel returns a low-rank operator; added to the dense
    EQ terms, ``AdditiveKernel`` then takes a root decomposition (a jittered
    Cholesky) of the dense part at every evaluation, which is slow and fails
    for near-singular blocks. A dense result makes the sum a plain addition.
    """

    def forward(self, x1: Tensor, x2: Tensor, diag: bool = False, **params: Any) -> Tensor:
        return super().forward(x1, x2, diag=diag, **params).to_dense()


def input_kernels(covar_module: Kernel, x_dims: int) -> list[Kernel]:
    """The length-scale kernels of a conditional that act on the x columns alone.

    Kernels over earlier outputs and NL-X's joint kernel over ``(x, y)`` are
    left out; so is the ``InducingPointKernel`` wrapper of a sparse conditional.

    Args:
        covar_module: A conditional's kernel (from ``conditional_kernel``,
            possibly wrapped in an ``InducingPointKernel``).
        x_dims: Number of input dimensions ``d``.
    """

    def on_inputs_only(kernel: Kernel) -> bool:
        if not getattr(kernel, "has_lengthscale", False):
            return False
        if kernel.active_dims is None:  # the first conditional sees only x
            return kernel.lengthscale.shape[-1] == x_dims
        return bool((kernel.active_dims < x_dims).all())

    return [kernel for kernel in covar_module.modules() if on_inputs_only(kernel)]


def conditional_kernel(
    family: KernelFamily | str,
    x_dims: int,
    y_dims: int,
    use_rbf_kernel: bool = True,
    conventions: Conventions | str = Conventions.BOTORCH,
) -> Kernel:
    """Build the kernel of one GPAR conditional.

    Args:
        family: The kernel family (a ``KernelFamily`` or its value, e.g. "L-NL").
        x_dims: Number of input dimensions ``d`` (columns ``0..d-1``).
        y_dims: Number of earlier outputs the conditional sees (columns
            ``d..d+y_dims-1``).
        use_rbf_kernel: EQ (RBF) kernel on x if True (the paper's choice),
            Matern-5/2 otherwise; kernels over earlier outputs are always EQ.
        conventions: BoTorch's (length-scale priors; no variance on the first
            conditional's kernel) or the paper's (no priors; a variance on every
            stationary kernel). See ``Conventions``.

    Returns:
        A kernel over ``x_dims + y_dims`` columns with ARD length scales,
        started where BoTorch starts them.
    """
    family = KernelFamily(family)
    paper = Conventions(conventions) is Conventions.PAPER

    def stationary(ard_num_dims: int, active_dims: list[int] | None, rbf: bool = True) -> Kernel:
        kernel = get_covar_module_with_dim_scaled_prior(
            ard_num_dims=ard_num_dims, active_dims=active_dims, use_rbf_kernel=rbf
        )
        if paper:
            # The same kernel, constraint and starting length scales, without the prior.
            plain = type(kernel)(
                ard_num_dims=ard_num_dims,
                active_dims=active_dims,
                lengthscale_constraint=kernel.raw_lengthscale_constraint,
            )
            plain.lengthscale = kernel.lengthscale.detach()
            kernel = plain
        return kernel

    x_cols = list(range(x_dims))
    y_cols = list(range(x_dims, x_dims + y_dims))
    if y_dims == 0:
        k_x = stationary(x_dims, None, use_rbf_kernel)
        return ScaleKernel(k_x) if paper else k_x
    parts: list[Kernel] = [ScaleKernel(stationary(x_dims, x_cols, use_rbf_kernel))]
    if family in (KernelFamily.L, KernelFamily.L_NL, KernelFamily.L_NL_X):
        parts.append(DenseLinearKernel(ard_num_dims=y_dims, active_dims=y_cols))
    if family in (KernelFamily.NL, KernelFamily.L_NL):
        parts.append(ScaleKernel(stationary(y_dims, y_cols)))
    if family in (KernelFamily.NL_X, KernelFamily.L_NL_X):
        parts.append(ScaleKernel(stationary(x_dims + y_dims, None)))
    return AdditiveKernel(*parts)
