"""Ax's ``Orchestrator`` for ``CurveRunner`` jobs that wait for verdicts (early stopping only).

Jobs of a :class:`~gpar_bo.tuning.runner.CurveRunner` wait after each checkpoint for a
verdict (:mod:`gpar_bo.tuning.jobs`). Ax's ``Orchestrator`` gives none, so
:class:`VerdictOrchestrator` adds them to each poll:

1. before the poll, it notes the jobs waiting and the step each waits after;
2. the poll (Ax's own) reads statuses, fetches every step reported, the noted ones
   included, and lets the early-stopping strategy stop trials: a stopped job gets
   "stop" while it waits, so it trains no epoch past the checkpoint of the decision.
   Jobs that train are not offered to the strategy: they were told to continue on the
   data it has, and a stop reaching one mid-epoch would land a checkpoint late (at the
   final one, a completed run recorded as stopped). They are judged at their next
   checkpoint;
3. every noted job the strategy did not stop, and still waiting at the same step,
   gets "continue";
4. trials whose job paused without being asked (no verdict came within the timeout,
   or the tuning process was restarted) are resumed from their checkpoint.

A job therefore waits about one poll interval per checkpoint (``OrchestratorOptions``'
``init_seconds_between_polls``; keep ``seconds_between_polls_backoff_factor=1.0`` so
the interval does not grow beyond the jobs' verdict timeout).
"""

from __future__ import annotations

from ax.core.trial_status import TrialStatus
from ax.orchestration.orchestrator import Orchestrator

from gpar_bo.tuning.runner import CurveRunner

__all__ = ["VerdictOrchestrator"]


class VerdictOrchestrator(Orchestrator):
    """An ``Orchestrator`` that gives ``CurveRunner`` jobs their verdicts at each poll.

    Used exactly like Ax's ``Orchestrator``; with any other runner it is that class.
    """

    _training: set[int] | None = None  # during a poll: the trials whose job trains

    @property
    def running_trial_indices(self) -> set[int]:
        """The running trials; during a poll, those whose job does not train (Ax's poll
        offers these to the early-stopping strategy)."""
        running = super().running_trial_indices
        return running if self._training is None else running - self._training

    def poll_and_process_results(self, poll_all_trial_statuses: bool = False) -> bool:
        runner = self.experiment.runner
        if not isinstance(runner, CurveRunner):
            return super().poll_and_process_results(poll_all_trial_statuses)
        running = [t for t in self.experiment.trials.values() if t.status == TrialStatus.RUNNING]
        # Noted before the poll's fetch, so the stopping strategy has seen these steps.
        waiting = runner.awaiting(running)
        self._training = runner.training(running)
        try:
            changed = super().poll_and_process_results(poll_all_trial_statuses)
        finally:
            self._training = None
        for index, step in waiting.items():
            trial = self.experiment.trials[index]
            if trial.status == TrialStatus.RUNNING and runner.awaiting([trial]).get(index) == step:
                runner.verdict(trial, "continue")
        still_running = [t for t in running if t.status == TrialStatus.RUNNING]
        for index in sorted(runner.paused(still_running)):
            runner.resume(self.experiment.trials[index])
        return changed
