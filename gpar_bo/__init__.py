"""gpar-bo: GPAR as a BoTorch model for Bayesian optimisation of training runs."""
