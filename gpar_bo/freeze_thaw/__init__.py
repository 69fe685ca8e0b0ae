r"""Freeze-thaw scheduling with GPAR: give the next epochs to the run expected to pay most.

Runs are paused at every checkpoint. Whenever a worker is free, the policy compares,
on one scale, resuming each paused run to its next checkpoint with starting a new
setting at its first checkpoint, and takes the best action.

* :mod:`gpar_bo.freeze_thaw.index`: the scale on which runs and new settings are
  compared, a Gittins index per epoch from GPAR's sample paths
  (:class:`FreezeThawIndex`, :func:`stopping_index`);
* :mod:`gpar_bo.freeze_thaw.policy`: :class:`FreezeThawPolicy`, which keeps the model
  fitted, scores paused runs and new settings on that scale, and falls back to
  successive halving where the model cannot decide.

The design and its reasons are in each module's docstring; results in
``docs/freeze_thaw.md`` and ``benchmarks/results/freeze_thaw_writeup.md``.
"""

from gpar_bo.freeze_thaw.index import (
    FinalPaths,
    FreezeThawIndex,
    expected_improvement_lognormal,
    stopping_index,
)
from gpar_bo.freeze_thaw.policy import Decision, FreezeThawPolicy

__all__ = [
    "Decision",
    "FinalPaths",
    "FreezeThawIndex",
    "FreezeThawPolicy",
    "expected_improvement_lognormal",
    "stopping_index",
]
