"""gpar-bo: GPAR as a BoTorch model for Bayesian optimisation of training runs."""

from gpar_bo.curve_model import LogIncrements, curve_model_options
from gpar_bo.kernels import KernelFamily
from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.posterior import GPARPosterior

__all__ = [
    "GPARMarginalLogLikelihood",
    "GPARModel",
    "GPARPosterior",
    "KernelFamily",
    "LogIncrements",
    "curve_model_options",
]
