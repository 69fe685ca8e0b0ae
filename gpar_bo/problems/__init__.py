"""Tuning problems: each problem (search space, training job, data) in a subpackage of its own."""
