"""Ax integration: GPAR generation strategy (more to come)."""

from gpar_bo.ax.generation import GPARCurveModel, checkpoint_indices, gpar_generation_strategy

__all__ = ["GPARCurveModel", "checkpoint_indices", "gpar_generation_strategy"]
