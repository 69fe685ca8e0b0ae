"""The epoch loop every problem's classifier shares: seeded run, mini-batch epoch, recording.

A problem's ``train`` function builds its network and optimiser inside :func:`seeded_run`,
trains each epoch with :func:`minibatch_epoch` and hands a per-epoch step to
:func:`record_epochs`, which fills the :class:`~gpar_bo.problems.curves_io.TrainResult`
and asks the epoch callback whether to go on. What differs between problems (the
objective's penalties, a learning-rate schedule, how a diverged run is scored,
checkpoints) stays in the problem's module.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from gpar_bo.problems.curves_io import EpochCallback, TrainResult

__all__ = ["seeded_run", "minibatch_epoch", "record_epochs"]


@contextmanager
def seeded_run(seed: int) -> Iterator[tuple[TrainResult, torch.Generator]]:
    """A training run seeded by ``seed``: yields its empty result and its shuffling generator.

    The global torch RNG (initialisation, dropout masks) is forked and seeded, so a run
    neither depends on nor disturbs the caller's RNG state; the yielded CPU generator,
    also seeded with ``seed``, draws the batch order. On leaving the block the result's
    ``seconds`` is set to the block's wall-clock time.
    """
    result = TrainResult()
    start = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield result, torch.Generator().manual_seed(seed)
    result.seconds = time.perf_counter() - start


def minibatch_epoch(
    model: nn.Module,
    optimiser: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    batch_size: int,
    generator: torch.Generator,
    objective: Callable[[Tensor, Tensor], Tensor],
) -> bool:
    """One training epoch over ``(x, y)`` in shuffled mini-batches; True if every loss was finite.

    Args:
        model: the network, put in training mode here.
        optimiser: steps once per mini-batch.
        x: ``(n, d)`` inputs.
        y: ``(n,)`` labels.
        batch_size: examples per step (the last batch may be smaller).
        generator: draws the epoch's permutation of the ``n`` examples.
        objective: ``objective(logits, labels)``, the scalar loss minimised on a batch.
    """
    model.train()
    n = x.shape[0]
    order = torch.randperm(n, generator=generator)
    finite = True
    for begin in range(0, n, batch_size):
        idx = order[begin : begin + batch_size]
        loss = objective(model(x[idx]), y[idx])
        finite &= bool(torch.isfinite(loss))
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
    return finite


def record_epochs(
    result: TrainResult,
    epochs: int,
    run_epoch: Callable[[int], tuple[float, float]],
    callback: EpochCallback | None = None,
    after_epoch: Callable[[int], None] | None = None,
) -> TrainResult:
    """Run epochs ``result.epochs_run + 1 .. epochs`` and record their validation curve.

    Args:
        result: the run so far (empty, or restored from a checkpoint); filled in place.
        epochs: the last epoch of the run.
        run_epoch: ``run_epoch(epoch)`` trains epoch ``epoch`` (from 1) and returns its
            validation ``(loss, error)``.
        callback: called as ``callback(epoch, val_loss, val_error)`` after each epoch; a
            truthy return value stops the run.
        after_epoch: called with the epoch once it is recorded, before ``callback`` (e.g.
            to save a checkpoint that a stopped run resumes from).

    Returns:
        ``result``.
    """
    for epoch in range(result.epochs_run + 1, epochs + 1):
        val_loss, val_error = run_epoch(epoch)
        result.val_loss.append(val_loss)
        result.val_error.append(val_error)
        result.epochs_run = epoch
        if after_epoch is not None:
            after_epoch(epoch)
        if callback is not None and callback(epoch, val_loss, val_error):
            result.stopped_early = epoch < epochs
            break
    return result
