"""A training job with a bug, for the tests of how a job's error is shown."""

from __future__ import annotations


def train(parameters, report, trial_index, epochs, checkpoint_dir=None):
    """Reports epoch 1, then divides by zero: every trial fails at epoch 2."""
    report(1, {"error": 0.5})
    return parameters["x1"] / 0  # the bug
