r"""The freeze-thaw policy: whenever a worker is free, resume the paused run or start the
new setting with the highest index (:mod:`gpar_bo.freeze_thaw.index`).

Design choices and why:

* **Bounded work per decision.** New settings are scored on a random subset of at most
  ``num_candidates`` (the remaining settings of a table, or a scrambled Sobol set in a
  box): successive decisions draw fresh subsets, so a good setting is delayed rather
  than lost, and the model's ranking error among the best few percent outweighs the
  gain of scoring more. They are screened with a quarter of the paths, and only the
  few best are scored with all of them: a coarse index only needs to find the top,
  while the index compared with the paused runs' should be as precise as theirs. Paused runs are rescored lazily: each keeps the index it was
  last given; the index only falls as the incumbent falls, so stored indices are upper
  bounds as far as the incumbent goes; each decision rescores the runs never scored,
  the ``num_resumable`` best stored and the ``num_refresh`` least recently scored
  (so every stored value is refreshed in turn). The work per decision then does not
  grow with the number of paused runs; only GPAR's training sets grow. (A stored
  index can also rise as data arrive; ``paused_scoring="screen"`` screens the paused
  runs afresh at every decision instead, as new settings are screened. On the
  development tables it decided no better, so it is not the default.)
* **Hyperparameters** are re-optimised when the observed values grew by
  ``refit_growth`` since the last fit, starting from the last fit's values (warm
  start), and reloaded otherwise, so the expensive step happens geometrically rarely.
  Each refit after the first is spread over the next ``M`` decisions, one
  conditional each (``staged_refits``), so that no single decision pays for all of it.

**Warm-up.** GPAR needs two runs at the final checkpoint. Until then the policy starts
``num_initial`` random settings and pushes two runs to the end, one checkpoint at a time,
while the other workers start random settings at the first checkpoint
(``warm_up="screen"``). A push begins, while fewer than two runs have been pushed, with the
paused run that is best at its last checkpoint. With at least ``num_initial`` workers
reporting one at a time, the runs pushed are the first two to report, in effect random
settings; with fewer workers, the best of those screened so far. ``warm_up="push"`` (a
candidate) lets every worker freed in the warm-up push a screened run instead, and start a
new setting only when none is paused: no choice before the first fit is the model's, the
screens are mostly never continued, and the model and the incumbent need runs at the final
checkpoint. ``warm_up="halving"`` (a candidate) decides every warm-up step after the screens
as the policy decides whenever it has no model, by asynchronous successive halving (below),
told the budget as after the warm-up (only runs that can still finish): the deepest paused
run that stands in the top ``1/eta`` of the values recorded so far at its checkpoint is
pushed on, and a new setting is screened when none does (when no new setting is left or
none could finish, the deepest paused run is resumed). With at least ``num_initial``
workers the first run to report stands alone at the first checkpoint, so it is pushed, as
in the default; unlike the default, others follow only by standing in the top ``1/eta`` at
each checkpoint.

**Random resumes** (a candidate, off by default). GPAR's conditionals learn from the runs
that were continued, and the index, the warm-up and the guard below all continue runs for
their good prefixes, so the model never sees how the runs it leaves paused go on. A
fraction ``random_resume_fraction`` of the decisions after the warm-up resumes a paused
run drawn at random, by one checkpoint: an unbiased sample of the paused runs' next steps.

**Robustness.** A fraction ``model_free_fraction`` of the decisions, and every decision
for which the model cannot be fitted (and no earlier fit can be reloaded) or sampled, or
for which no sample path improves, follow asynchronous successive halving (promote a
paused run in the top ``1/eta`` of its checkpoint, else start a random setting), logged
with the reason. A refit (or a stage of one) that fails keeps the last fit until the
next refit; when a conditional changes form (it turns sparse on more data) so that its
last fit cannot be loaded, it is fitted at once. A misspecified
or failed model slows the search; it cannot stall it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass
from typing import Any, Literal

import torch
from botorch.fit import fit_gpytorch_mll
from torch import Tensor
from torch.quasirandom import SobolEngine

from gpar_bo.curve_model import LogIncrements, floor_zeros, resolve_gpar_options
from gpar_bo.freeze_thaw.index import FreezeThawIndex
from gpar_bo.model import GPARMarginalLogLikelihood, GPARModel
from gpar_bo.refit import mismatched_hyperparameters

__all__ = ["Decision", "FreezeThawPolicy"]

logger = logging.getLogger(__name__)

#: New settings (and, with ``paused_scoring="screen"``, paused runs) are screened with
#: ``num_samples // SCREEN_RATIO`` paths (and as many times fewer bins); the
#: ``NUM_FINALISTS`` best are scored with all paths, so the indices compared have the
#: same precision.
SCREEN_RATIO = 4
NUM_FINALISTS = 8


@dataclass(frozen=True)
class Decision:
    """What a free worker does next.

    Attributes:
        action: "resume" a paused run or "start" a new setting.
        index: The paused run's row in ``X`` (resume) or the candidate's row
            (start; -1 when ``candidate`` is a point of the box ``bounds``).
        reason: "gpar" (with a note when a refit failed and the last fit was
            kept, or when conditionals that changed form were refitted), "warm-up", "model-free" (the guard's share of decisions),
            "model-free: why" (a fallback) or "random resume" (the share of
            ``random_resume_fraction``).
        score: The winning stopping index (None unless decided by GPAR).
        candidate: The new setting (``d``), for "start".
    """

    action: Literal["resume", "start"]
    index: int
    reason: str
    score: float | None = None
    candidate: Tensor | None = None


class FreezeThawPolicy:
    r"""Freeze-thaw decisions from GPAR (see the module docstrings of :mod:`gpar_bo.freeze_thaw`).

    Args:
        epochs: Increasing epochs of the checkpoints at which runs report and pause.
        num_initial: Random settings screened at the first checkpoint before any
            run is pushed to the end.
        num_samples: GPAR sample paths per run and decision.
        num_candidates: New settings scored per decision (a random subset of the
            given candidates, or a Sobol set in the box ``bounds``).
        num_resumable: Paused runs with the best stored indices rescored per decision.
        num_refresh: Least recently scored paused runs rescored per decision.
        model_free_fraction: Share of decisions made by successive halving, as a
            guard against a misspecified model.
        random_resume_fraction: Share of decisions that resume a paused run drawn
            uniformly at random (among those that can still finish) by one
            checkpoint (a candidate; default 0). GPAR's conditionals are fitted on the
            runs that were continued, which every other rule picks for their good
            prefixes, so the model never sees how a run it leaves paused goes on and
            predicts for it the continued runs' course. Random resumes are an unbiased
            sample of the paused runs' next steps; most are runs at the first
            checkpoint, whose next step is the cheapest. Without such a run, GPAR decides.
        eta: Successive halving's reduction factor.
        warm_up: What the workers do until two runs reached the final checkpoint, after
            the ``num_initial`` screens: "screen" (default) pushes two runs to the end
            and starts random settings at the first checkpoint on the other workers;
            "push" (a candidate) pushes a screened run on every freed worker (the
            deepest paused run first, then the best at its last checkpoint) and starts a
            random setting only when no run is paused; "halving" (a candidate) decides
            by asynchronous successive halving among the runs that can still finish
            within ``epochs_left``, the policy's rule without a model.
        refit_growth: Re-optimise GPAR's hyperparameters when the number of
            observed values grew by more than this fraction since the last fit;
            in between, reload them (decisions stay cheap as data accumulate).
        staged_refits: Spread each refit after the first over the next ``M``
            decisions, one conditional per decision in output order, the others
            keeping their last fitted hyperparameters (default; False refits all
            conditionals in one decision). The conditionals are fitted separately,
            so this is the refit done in steps (each on the data of its decision):
            a decision then costs at most one conditional's fit instead of all
            ``M``. A stage whose fit fails keeps its conditional's last fit until
            the next refit.
        refit_trigger: What ``refit_growth`` counts: "total" (default) the observed
            values of all outputs, refitting every conditional (staged as above);
            "output" (a candidate) each conditional's own training rows, refitting
            only the conditionals whose rows grew by more than ``refit_growth`` since
            their last fit (with ``staged_refits``, one per decision, the most grown
            first). The conditionals are fitted separately, and the late ones, which
            the final predictions rest on, gain rows in relative terms far faster than
            the total, so under "total" they are decided on with fits from much less
            data (``benchmarks.fit_staleness``). On the development tables it decided
            no better at 4-5 times the CPU per decision, so it is not the default.
        paused_scoring: How paused runs are scored at each decision: "lazy" (default)
            rescores the ``num_resumable`` best stored indices, the ``num_refresh``
            least recently scored and the never scored; "screen" (a candidate) screens
            every paused run (a random ``num_candidates`` of them when there are more)
            with a quarter of the paths, as new settings are, and scores the
            ``NUM_FINALISTS`` best with all of them, so no index is stale: a stored
            index is an upper bound only as far as the incumbent goes, while the
            data that arrive after it can raise it.
        latent_paths: ``FreezeThawIndex``'s ``latent_paths`` (a candidate; default
            False): paths of latent increments, the final's observation noise added
            once, so that noise does not add up along a path.
        pending_finals: Score runs against the incumbent that the runs being trained
            to their final checkpoint will leave (``FreezeThawIndex``'s ``pending``; a
            candidate, default False): runs not ``paused`` that have observed the
            second-last checkpoint count as training to the end, so a run that ended
            there for good (stopped early, failed) would be read as one that is about
            to finish; ``gpar-bo tune`` does not turn it on.
        gpar_options: ``GPARModel`` options (default
            :func:`~gpar_bo.curve_model.curve_model_options`). The index is computed
            on log-error increments, so the model always has a ``LogIncrements``
            transform: options without an ``outcome_transform`` (or with None) get
            one, and any other transform is an error.
        fit_kwargs: Arguments of ``fit_gpytorch_mll``.
        seed: Seed of the random settings, the model-free draws, the random resumes and
            the samplers.
    """

    def __init__(
        self,
        epochs: Sequence[int],
        *,
        num_initial: int = 4,
        num_samples: int = 128,
        num_candidates: int = 256,
        num_resumable: int = 16,
        num_refresh: int = 4,
        model_free_fraction: float = 0.1,
        random_resume_fraction: float = 0.0,
        eta: float = 3.0,
        warm_up: Literal["screen", "push", "halving"] = "screen",
        refit_growth: float = 0.2,
        staged_refits: bool = True,
        refit_trigger: Literal["total", "output"] = "total",
        paused_scoring: Literal["lazy", "screen"] = "lazy",
        latent_paths: bool = False,
        pending_finals: bool = False,
        gpar_options: Mapping[str, Any] | None = None,
        fit_kwargs: Mapping[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        epochs = list(epochs)
        if not epochs or any(b <= a for a, b in zip(epochs, epochs[1:])) or epochs[0] < 1:
            raise ValueError(f"epochs must increase from >= 1; got {epochs}.")
        if len(epochs) < 2:
            raise ValueError("Freeze-thaw needs at least two checkpoints.")
        if num_initial < 2:
            raise ValueError(f"num_initial must be >= 2 (two runs are pushed); got {num_initial}.")
        if num_samples < 8 * SCREEN_RATIO or num_samples % (8 * SCREEN_RATIO):
            raise ValueError(
                f"num_samples must be a positive multiple of {8 * SCREEN_RATIO}; got {num_samples}."
            )
        if min(num_candidates, num_resumable) < 1 or num_refresh < 0:
            raise ValueError(
                "num_candidates and num_resumable must be >= 1 and num_refresh >= 0; got "
                f"{num_candidates}, {num_resumable} and {num_refresh}."
            )
        if not 0 <= model_free_fraction <= 1:
            raise ValueError(f"model_free_fraction must be in [0, 1]; got {model_free_fraction}.")
        if not (0 <= random_resume_fraction and model_free_fraction + random_resume_fraction <= 1):
            raise ValueError(
                "random_resume_fraction must be >= 0 and at most 1 - model_free_fraction; got "
                f"{random_resume_fraction} with model_free_fraction {model_free_fraction}."
            )
        if eta <= 1:
            raise ValueError(f"eta must be > 1; got {eta}.")
        if warm_up not in ("screen", "push", "halving"):
            raise ValueError(f"warm_up must be 'screen', 'push' or 'halving'; got {warm_up!r}.")
        if paused_scoring not in ("lazy", "screen"):
            raise ValueError(f"paused_scoring must be 'lazy' or 'screen'; got {paused_scoring!r}.")
        if refit_trigger not in ("total", "output"):
            raise ValueError(f"refit_trigger must be 'total' or 'output'; got {refit_trigger!r}.")
        if refit_growth < 0:
            raise ValueError(f"refit_growth must be >= 0; got {refit_growth}.")
        self.epochs = torch.tensor(epochs, dtype=torch.double)
        self.num_initial = num_initial
        self.num_samples = num_samples
        self.num_candidates = num_candidates
        self.num_resumable = num_resumable
        self.num_refresh = num_refresh
        self.model_free_fraction = model_free_fraction
        self.random_resume_fraction = random_resume_fraction
        self.eta = eta
        self.warm_up = warm_up
        self.refit_growth = refit_growth
        self.staged_refits = staged_refits
        self.refit_trigger = refit_trigger
        self.paused_scoring = paused_scoring
        self.latent_paths = latent_paths
        self.pending_finals = pending_finals
        options = resolve_gpar_options(gpar_options)
        if options.get("outcome_transform") is None:
            options["outcome_transform"] = LogIncrements()
        if not isinstance(options["outcome_transform"], LogIncrements):
            raise ValueError(
                "FreezeThawPolicy models log-error increments: gpar_options' outcome_transform "
                f"must be a LogIncrements or absent; got {options['outcome_transform']!r}."
            )
        self.gpar_options = options
        self.fit_kwargs = dict(fit_kwargs or {})
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)
        self.decisions = 0
        self._fitted: tuple[int, dict[str, Tensor]] | None = None  # (values, hyperparameters)
        self._stage: int | None = None  # the output a staged refit fits next
        self._fitted_rows: Tensor | None = None  # each conditional's rows at its last fit
        # Paused runs' stored indices: (setting, checkpoints observed) -> (index, decision).
        self._stored: dict[tuple, tuple[float, int]] = {}

    # ------------------------------------------------------------------ decide
    def decide(
        self,
        X: Tensor,
        Y: Tensor,
        paused: Tensor,
        candidates: Tensor | None = None,
        bounds: Tensor | None = None,
        epochs_left: float | None = None,
    ) -> Decision:
        r"""The next action of a free worker.

        Args:
            X: ``n x d`` settings of every run started so far (running, paused,
                finished).
            Y: ``n x M`` their values at the checkpoints (lower is better, e.g.
                validation errors; non-negative, an exact 0 read as half the smallest
                positive value, as the model reads it), NaN after each run's observed prefix
                (a row of NaN for a run that has not reported yet).
            paused: ``n`` bool, the runs that may be resumed.
            candidates: ``c x d`` new settings to choose from (e.g. a table's
                remaining settings), or None to search the box ``bounds``.
            bounds: ``2 x d`` bounds of the search space (when ``candidates`` is None).
            epochs_left: Epochs one worker can still train before a fixed budget runs
                out (the budget left divided by the workers, when every worker trains
                until it is spent), or None without such a budget. A run that
                cannot reach the final checkpoint within it cannot improve the result:
                GPAR's decisions then only resume runs that can and start new
                settings only while a whole run fits.

        Returns:
            The decision.
        """
        self._check(X, Y, paused, candidates, bounds)
        if epochs_left is not None and not (math.isfinite(epochs_left) and epochs_left >= 0):
            raise ValueError(f"epochs_left must be None or finite and >= 0; got {epochs_left}.")
        self.decisions += 1
        observed = (~Y.isnan()).sum(-1)
        M = len(self.epochs)
        finished = observed == M
        resumable, may_start = paused, True
        if epochs_left is not None:  # only runs that can still finish are worth an epoch
            trained = torch.cat([self.epochs.new_zeros(1), self.epochs]).to(observed.device)[observed]
            resumable = paused & (float(self.epochs[-1]) - trained <= epochs_left)
            may_start = float(self.epochs[-1]) <= epochs_left
        if int(finished.sum()) < 2:
            return self._warm_up(X, Y, paused, observed, candidates, bounds, resumable, may_start)
        if not (may_start or resumable.any()):  # no choice can change the result
            return self._successive_halving(
                Y, paused, observed, candidates, bounds,
                "model-free: no run can finish within the budget")
        # One draw picks the rule; the random resumes' band follows the guard's, so that a
        # share of 0 leaves every decision and the random stream as they were without it.
        draw = float(torch.rand(1, generator=self.generator))
        if draw < self.model_free_fraction:
            return self._successive_halving(
                Y, resumable, observed, candidates, bounds, "model-free", may_start)
        if draw < self.model_free_fraction + self.random_resume_fraction and resumable.any():
            rows = resumable.nonzero().squeeze(-1)
            row = int(rows[torch.randint(len(rows), (1,), generator=self.generator)])
            return Decision("resume", row, "random resume")
        # Not paused and one checkpoint from the end: being trained to it now.
        pending = (~paused & (observed == M - 1)) if self.pending_finals else None
        try:
            return self._gpar_decision(X, Y, resumable, observed, candidates, bounds, may_start, pending)
        except Exception as error:  # a failed fit or sampling must not stall the search
            logger.warning("GPAR decision failed (%s); deciding by successive halving.", error)
            return self._successive_halving(
                Y, resumable, observed, candidates, bounds, f"model-free: GPAR failed ({error})",
                may_start,
            )

    def _gpar_decision(
        self, X: Tensor, Y: Tensor, paused: Tensor, observed: Tensor,
        candidates: Tensor | None, bounds: Tensor | None, may_start: bool = True,
        pending: Tensor | None = None,
    ) -> Decision:
        """GPAR's choice among resuming ``paused`` runs and (if ``may_start``) new settings;
        ``pending``: ``n`` bool, the runs being trained to their final checkpoint (or None)."""
        reported = observed > 0
        model, note = self._model(X[reported], Y[reported])
        M = len(self.epochs)
        incumbent = float(floor_zeros(Y)[observed == M, -1].min())
        pending_X = None if pending is None else X[pending]
        acqf = FreezeThawIndex(
            model, self.epochs.to(X), incumbent, self.num_samples, seed=self.seed + self.decisions,
            latent_paths=self.latent_paths, pending=pending_X,
        )
        screen = FreezeThawIndex(
            model, acqf.epochs, incumbent, self.num_samples // SCREEN_RATIO,
            num_bins=8 // SCREEN_RATIO, seed=acqf.seed, latent_paths=self.latent_paths,
            pending=pending_X,
        )

        def finalists(Xs: Tensor, obs: Tensor) -> Tensor:
            """Positions of the ``NUM_FINALISTS`` best by the screening index (all if fewer)."""
            if len(Xs) <= NUM_FINALISTS:
                return torch.arange(len(Xs))
            return screen.index(Xs, obs).topk(NUM_FINALISTS).indices

        with torch.no_grad():
            if self.paused_scoring == "screen":
                rows = paused.nonzero().squeeze(-1)
                if len(rows) > self.num_candidates:
                    rows = rows[torch.randperm(len(rows), generator=self.generator)[: self.num_candidates]]
                rows = rows[finalists(X[rows], observed[rows])]
            else:
                rows = self._resumable(X, observed, paused)
            resume_scores = acqf.index(X[rows], observed[rows])
            if self.paused_scoring == "lazy":
                for row, score in zip(rows.tolist(), resume_scores.tolist()):
                    self._stored[self._key(X[row], observed[row])] = (score, self.decisions)
            new_rows, new_X = self._new_settings(candidates, bounds)
            if not may_start:  # drawn all the same: the random stream does not depend on it
                new_rows, new_X = new_rows[:0], new_X[:0]
            # Screen with fewer paths, then score the best with all of them.
            chosen = finalists(new_X, torch.zeros(len(new_X), dtype=torch.long))
            new_rows, new_X = new_rows[chosen], new_X[chosen]
            new_scores = acqf.index(new_X, torch.zeros(len(new_X), dtype=torch.long))
        best_resume = float(resume_scores.max()) if len(rows) else -math.inf
        best_new = float(new_scores.max()) if len(new_X) else -math.inf
        if max(best_resume, best_new) <= 0:
            return self._successive_halving(
                Y, paused, observed, candidates, bounds, "model-free: no path improves", may_start
            )
        reason = "gpar" + note
        if best_resume >= best_new:
            row = int(rows[resume_scores.argmax()])
            self._stored.pop(self._key(X[row], observed[row]), None)
            return Decision("resume", row, reason, best_resume)
        best = int(new_scores.argmax())
        return Decision("start", int(new_rows[best]), reason, best_new, new_X[best])

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """What the policy has learnt and drawn so far, for ``load_state_dict`` (e.g. in
        a later process that goes on deciding for the same runs): the last fit and its
        refit schedule, the stored indices of paused runs, the decision count, the seed
        (it seeds the fits and sample paths) and the random stream. The constructor's
        other arguments are not included."""
        return deepcopy({
            "epochs": self.epochs.tolist(),
            "seed": self.seed,
            "decisions": self.decisions,
            "generator": self.generator.get_state(),
            "fitted": self._fitted,
            "stage": self._stage,
            "fitted_rows": self._fitted_rows,
            "stored": self._stored,
        })

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Go on from ``state_dict()`` of a policy with the same arguments (other than the
        seed, which the state carries): the next decisions are those that policy would
        make, without refitting what it had fitted. Nothing changes unless all of the
        state loads.

        Raises:
            ValueError: The state is of a policy with other checkpoints.
            KeyError, RuntimeError, TypeError: The state is not a policy's state.
        """
        if list(state["epochs"]) != self.epochs.tolist():
            raise ValueError(f"The policy state is for checkpoints {list(state['epochs'])}, "
                             f"not {self.epochs.tolist()}.")
        generator = torch.Generator()
        generator.set_state(state["generator"])
        loaded = (int(state["seed"]), int(state["decisions"]), deepcopy(state["fitted"]),
                  state["stage"], deepcopy(state["fitted_rows"]), deepcopy(dict(state["stored"])))
        self.generator = generator
        (self.seed, self.decisions, self._fitted, self._stage, self._fitted_rows,
         self._stored) = loaded

    # -------------------------------------------------------------- predictions
    def final_error_samples(
        self, X: Tensor, Y: Tensor, rows: Tensor, num_draws: int = 8
    ) -> Tensor | None:
        r"""Samples of GPAR's predictive of runs' final errors (e.g. a report's bands).

        The model is the one the policy decides with: GPAR on log-error increments,
        with the hyperparameters of its last fit (fitted now, and not kept, if it
        has none), conditioned on every run's observed prefix. A run's predictive is
        ``FreezeThawIndex.final_paths``'s: the mixture over the sample paths of the
        log-normal final error along each, with the final checkpoint's observation
        noise (it predicts the error the run will report). ``num_draws`` draws per
        path, from a generator seeded with the policy's seed, sample the mixture.
        Nothing the policy keeps changes: its decisions are the same whether or not
        this is called.

        Args:
            X: ``n x d`` settings of every run started so far (as in ``decide``).
            Y: ``n x M`` their values at the checkpoints, NaN after each prefix.
            rows: ``b`` rows of the runs to predict, none at the final checkpoint
                (a run with no observed value gets the prediction for its setting).
            num_draws: Draws from each path's log-normal.

        Returns:
            ``(num_draws * num_samples) x b`` samples of the final errors, or None
            while fewer than two runs reached the final checkpoint (the policy's
            warm-up: it has no model yet).
        """
        observed = self._check_curves(X, Y).sum(-1)
        M = len(self.epochs)
        rows = torch.as_tensor(rows, dtype=torch.long)
        if rows.dim() != 1 or bool(((rows < 0) | (rows >= len(X))).any()):
            raise ValueError(f"rows must be a 1-d tensor of rows of X (0..{len(X) - 1}); "
                             f"got {rows.tolist()}.")
        if bool((observed[rows] == M).any()):
            raise ValueError("The runs to predict must not have reached the final checkpoint.")
        if num_draws < 1:
            raise ValueError(f"num_draws must be >= 1; got {num_draws}.")
        index = self._index_now(X, Y, observed)
        if index is None:
            return None
        with torch.no_grad():
            paths = index.final_paths(X[rows], observed[rows])
        generator = torch.Generator().manual_seed(self.seed)
        normals = torch.randn(num_draws, *paths.mean.shape, generator=generator, dtype=X.dtype)
        log_errors = paths.mean + paths.variance.clamp_min(0.0).sqrt() * normals
        return log_errors.exp().reshape(-1, len(rows))

    def model(self, X: Tensor, Y: Tensor) -> GPARModel:
        r"""The GPAR the policy decides with, on the runs that reported a value (e.g. to
        look at its conditionals or predict checkpoint by checkpoint).

        GPAR on log-error increments with the hyperparameters of the policy's last fit
        (fitted now, and not kept, if it has none), as ``final_error_samples`` uses it.
        Nothing the policy keeps changes.

        Args:
            X: ``n x d`` settings of every run started so far (as in ``decide``).
            Y: ``n x M`` their values at the checkpoints, NaN after each prefix.

        Returns:
            An evaluated ``GPARModel`` on the rows of ``X`` and ``Y`` with at least one
            observed value, in their order.

        Raises:
            ValueError: The curves are malformed (as in ``decide``), or no run reported a value.
        """
        reported = self._check_curves(X, Y)[:, 0]
        if not bool(reported.any()):
            raise ValueError("No run has reported a value: there is nothing to fit GPAR to.")
        return self._model(X[reported], Y[reported], keep=False)[0]

    def start_indices(self, X: Tensor, Y: Tensor, candidates: Tensor) -> Tensor | None:
        r"""The index each candidate would have as a new setting, now (e.g. to see where the
        model ranks settings a search never started).

        The model and the index are those of :meth:`final_error_samples`; ``decide``
        scores a random subset of the candidates with these indices (screened first with
        fewer paths, and on fresh quasi-random paths at each decision, so its values
        agree with these up to Monte Carlo error, with the last fit's hyperparameters:
        a decision that refits uses the new ones). Nothing the policy keeps changes.

        Args:
            X: ``n x d`` settings of every run started so far (as in ``decide``).
            Y: ``n x M`` their values at the checkpoints, NaN after each prefix.
            candidates: ``c x d`` new settings.

        Returns:
            ``c`` indices (expected reduction of the incumbent's error per epoch), or
            None while fewer than two runs reached the final checkpoint.

        Raises:
            ValueError: The curves or candidates are malformed (as in ``decide``), or the
                model's paths give a non-finite reward (``decide`` falls back instead).
        """
        observed = self._check_curves(X, Y).sum(-1)
        self._check_candidates(X, candidates)
        index = self._index_now(X, Y, observed)
        if index is None:
            return None
        with torch.no_grad():
            return index.index(candidates, torch.zeros(len(candidates), dtype=torch.long))

    def _index_now(self, X: Tensor, Y: Tensor, observed: Tensor) -> FreezeThawIndex | None:
        """The index under the model fitted to every reported run (the last fit's
        hyperparameters, ``_model(keep=False)``); None before two runs finished."""
        finished = observed == len(self.epochs)
        if int(finished.sum()) < 2:
            return None
        reported = observed > 0
        model, _ = self._model(X[reported], Y[reported], keep=False)
        return FreezeThawIndex(model, self.epochs.to(X), float(floor_zeros(Y)[finished, -1].min()),
                               self.num_samples, seed=self.seed, latent_paths=self.latent_paths)

    # ----------------------------------------------------------------- helpers
    def _check(
        self, X: Tensor, Y: Tensor, paused: Tensor, candidates: Tensor | None, bounds: Tensor | None
    ) -> None:
        M = len(self.epochs)
        if paused.shape != (X.shape[0],):
            raise ValueError(f"Expected paused of shape ({X.shape[0]},); got {tuple(paused.shape)}.")
        if paused.dtype != torch.bool:
            raise ValueError(f"paused must be a bool tensor; got {paused.dtype}.")
        observed = self._check_curves(X, Y)
        if (paused & ~observed[:, 0]).any():
            raise ValueError("A paused run must have reported at least one checkpoint.")
        if (paused & (observed.sum(-1) == M)).any():
            raise ValueError("A paused run must not have reached the final checkpoint.")
        if candidates is None and bounds is None:
            raise ValueError("Give candidates (new settings) or bounds of the search space.")
        if candidates is not None:
            self._check_candidates(X, candidates)
        if candidates is None and (
            bounds.shape != (2, X.shape[-1]) or not bool((bounds[0] <= bounds[1]).all())
        ):
            raise ValueError(f"bounds must be 2 x {X.shape[-1]} with lower <= upper.")

    @staticmethod
    def _check_candidates(X: Tensor, candidates: Tensor) -> None:
        """New settings must be ``c x d`` like ``X``, of its dtype, and finite."""
        if candidates.dim() != 2 or candidates.shape[-1] != X.shape[-1]:
            raise ValueError(f"candidates must be c x {X.shape[-1]}; got {tuple(candidates.shape)}.")
        if candidates.dtype != X.dtype:
            raise ValueError(f"candidates must have X's dtype {X.dtype}; got {candidates.dtype}.")
        if not bool(torch.isfinite(candidates).all()):
            raise ValueError("candidates must be finite (no NaN or infinity).")

    def _check_curves(self, X: Tensor, Y: Tensor) -> Tensor:
        """Check settings ``n x d`` and curves ``n x M``; return the observed mask."""
        M = len(self.epochs)
        if X.dim() != 2 or Y.shape != (X.shape[0], M):
            raise ValueError(f"Expected X n x d and Y n x {M}; got {tuple(X.shape)} and "
                             f"{tuple(Y.shape)}.")
        observed = ~Y.isnan()
        if (observed[:, 1:] & ~observed[:, :-1]).any():
            raise ValueError("Each run's values must be a prefix of its checkpoints (NaN after it).")
        if not (torch.isfinite(X).all() and (Y[observed] >= 0).all() and torch.isfinite(Y[observed]).all()):
            raise ValueError("Settings must be finite and observed values finite and non-negative.")
        return observed

    @staticmethod
    def _key(x: Tensor, observed: Tensor) -> tuple:
        return (*x.tolist(), int(observed))

    def _resumable(self, X: Tensor, observed: Tensor, paused: Tensor) -> Tensor:
        """The paused runs to score: never scored at their checkpoint, the best
        ``num_resumable`` stored and the ``num_refresh`` least recently scored."""
        rows = paused.nonzero().squeeze(-1).tolist()
        stored = {r: self._stored.get(self._key(X[r], observed[r])) for r in rows}
        fresh = [r for r in rows if stored[r] is None]
        old = [r for r in rows if stored[r] is not None]
        best = sorted(old, key=lambda r: -stored[r][0])[: self.num_resumable]
        rest = [r for r in old if r not in set(best)]
        stale = sorted(rest, key=lambda r: stored[r][1])[: self.num_refresh]
        return torch.tensor(sorted(fresh + best + stale), dtype=torch.long)

    def _new_settings(
        self, candidates: Tensor | None, bounds: Tensor | None
    ) -> tuple[Tensor, Tensor]:
        """Rows (-1 in a box) and settings of the new settings scored this decision."""
        if candidates is not None:
            rows = torch.arange(len(candidates))
            if len(candidates) > self.num_candidates:
                rows = torch.randperm(len(candidates), generator=self.generator)[: self.num_candidates]
            return rows, candidates[rows]
        seed = int(torch.randint(2**31 - 1, (1,), generator=self.generator))
        unit = SobolEngine(bounds.shape[-1], scramble=True, seed=seed).draw(self.num_candidates).to(bounds)
        return torch.full((self.num_candidates,), -1), bounds[0] + unit * (bounds[1] - bounds[0])

    def _random_new(self, candidates: Tensor | None, bounds: Tensor | None, reason: str) -> Decision:
        if candidates is not None:
            if len(candidates) == 0:
                raise ValueError("No candidate settings left to start.")
            row = int(torch.randint(len(candidates), (1,), generator=self.generator))
            return Decision("start", row, reason, candidate=candidates[row])
        unit = torch.rand(bounds.shape[-1], generator=self.generator, dtype=bounds.dtype)
        return Decision("start", -1, reason, candidate=bounds[0] + unit * (bounds[1] - bounds[0]))

    def _warm_up(
        self, X: Tensor, Y: Tensor, paused: Tensor, observed: Tensor,
        candidates: Tensor | None, bounds: Tensor | None, resumable: Tensor, may_start: bool,
    ) -> Decision:
        """Start ``num_initial`` settings; push two runs (``warm_up="push"``: a run on every
        freed worker), each the best paused one when its push begins, to the final checkpoint
        (``warm_up="halving"``: decide by successive halving instead, among the ``resumable``
        runs and, if ``may_start``, new settings: those that can still finish, as after the
        warm-up)."""
        out_of_candidates = candidates is not None and len(candidates) == 0
        if X.shape[0] < self.num_initial and not out_of_candidates:
            return self._random_new(candidates, bounds, "warm-up")
        if self.warm_up == "halving":
            if not (may_start or resumable.any()):  # no choice can change the result
                resumable, may_start = paused, True
            return self._successive_halving(Y, resumable, observed, candidates, bounds, "warm-up", may_start)
        # Runs that were resumed are being pushed (or were): paused past the first
        # checkpoint, or running with data (every run pauses when it reports). Push two.
        running = ~paused & (observed > 0) & (observed < len(self.epochs))
        pushed = (observed > 1) | running
        waiting = paused & pushed
        if waiting.any():
            row = int(torch.where(waiting, observed, -1).argmax())
            return Decision("resume", row, "warm-up")
        if (self.warm_up == "push" or int(pushed.sum()) < 2) and paused.any():
            last = Y.gather(-1, (observed - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1)
            row = int(torch.where(paused, last, math.inf).argmin())
            return Decision("resume", row, "warm-up")
        if out_of_candidates:
            return self._successive_halving(Y, paused, observed, candidates, bounds, "warm-up")
        return self._random_new(candidates, bounds, "warm-up")

    def _successive_halving(
        self, Y: Tensor, paused: Tensor, observed: Tensor,
        candidates: Tensor | None, bounds: Tensor | None, reason: str, may_start: bool = True,
    ) -> Decision:
        """Promote the deepest paused run in the top ``1/eta`` of its checkpoint, else start
        one (unless not ``may_start``: then resume the deepest paused run)."""
        for k in range(len(self.epochs) - 1, 0, -1):
            at_k = Y[observed >= k, k - 1]  # every value recorded at checkpoint k
            promotable = paused & (observed == k)
            if not promotable.any():
                continue
            values = Y[:, k - 1]
            better = (at_k.unsqueeze(0) < values.unsqueeze(-1)).sum(-1)  # n
            top = promotable & (better < math.ceil(len(at_k) / self.eta))
            if top.any():
                row = int(torch.where(top, values, math.inf).argmin())
                return Decision("resume", row, reason)
        if may_start and not (candidates is not None and len(candidates) == 0):
            return self._random_new(candidates, bounds, reason)
        if not paused.any():
            raise ValueError("Nothing to resume and no candidate settings left.")
        row = int(torch.where(paused, observed, -1).argmax())
        return Decision("resume", row, reason)

    def _model(self, X: Tensor, Y: Tensor, keep: bool = True) -> tuple[GPARModel, str]:
        """GPAR on the runs' values ``Y`` (modelled as log-error increments);
        hyperparameters refitted (warm-started) when the data grew enough, else
        reloaded; with ``staged_refits``, a refit in progress fits its next
        conditional. A failed refit (or stage) keeps the last fit until the next
        refit, so a fit that keeps failing is not paid for at every decision.
        Every conditional is fitted when there is no last fit; a conditional whose
        last fit no longer fits the model (it turned sparse on more data) is fitted
        at once, warm-started from what still fits.

        With ``keep=False`` (predictions that are not decisions) the last fit is
        reloaded whenever there is one, and a fit is not kept, so that the
        decisions do not depend on whether or when predictions were asked for.
        """
        model = self._new_model(X, Y)
        values = int((~Y.isnan()).sum())
        rows = (~Y.isnan()).sum(0)  # each conditional's training rows
        if self._fitted is None:
            self._fit(model)  # a failure leaves nothing to fall back on: decide's fallback
            if keep:
                self._fitted, self._fitted_rows = (values, model.hyperparameters()), rows
            return model.eval(), ""
        changed = mismatched_hyperparameters(model, self._fitted[1])
        if changed:
            return self._refit_changed(model, changed, keep)
        model.load_state_dict(self._fitted[1], strict=False)  # reloaded, or a warm start
        if not keep:
            return model.eval(), ""
        if self.refit_trigger == "output":
            return self._refit_grown_outputs(model, rows)
        if self._stage is None:
            if values <= (1 + self.refit_growth) * self._fitted[0]:
                return model.eval(), ""
            if self.staged_refits:  # growth counts from the staged refit's start
                self._stage, self._fitted = 0, (values, self._fitted[1])
        outputs = None if self._stage is None else [self._stage]
        note = ""
        try:
            self._fit(model, outputs)
            self._fitted = (self._fitted[0] if outputs else values, model.hyperparameters())
        except Exception as error:
            logger.warning("GPAR refit failed (%s); keeping the last fit.", error)
            note = f" (refit failed: {error}; last fit kept)"
            model = self._new_model(X, Y)
            model.load_state_dict(self._fitted[1], strict=False)
            if outputs is None:  # the next refit waits for the data to grow again
                self._fitted = (values, self._fitted[1])
        if self._stage is not None:
            self._stage = self._stage + 1 if self._stage + 1 < len(self.epochs) else None
        return model.eval(), note

    def _refit_grown_outputs(self, model: GPARModel, rows: Tensor) -> tuple[GPARModel, str]:
        """Refit (warm-started) the conditionals whose training rows grew by more than
        ``refit_growth`` since their last fit; with ``staged_refits`` only the most grown.
        A failed fit keeps the last one until its rows grow again."""
        growth = rows / self._fitted_rows.clamp_min(1)
        grown = (growth > 1 + self.refit_growth).nonzero().squeeze(-1)
        if not len(grown):
            return model.eval(), ""
        outputs = [int(grown[growth[grown].argmax()])] if self.staged_refits else grown.tolist()
        note = ""
        try:
            self._fit(model, outputs)
            self._fitted = (self._fitted[0], model.hyperparameters())
        except Exception as error:
            logger.warning("GPAR refit of outputs %s failed (%s); keeping the last fit.", outputs, error)
            note = f" (refit failed: {error}; last fit kept)"
            model.load_state_dict(self._fitted[1], strict=False)
        self._fitted_rows = self._fitted_rows.clone()
        self._fitted_rows[outputs] = rows[outputs]
        return model.eval(), note

    def _refit_changed(
        self, model: GPARModel, changed: list[str], keep: bool
    ) -> tuple[GPARModel, str]:
        """Fit the conditionals whose last fit no longer fits ``model`` (keys
        ``changed``), the others reloaded; a failed fit keeps their initial values
        until the next refit. The refit schedule is not otherwise changed."""
        own = model.hyperparameters()
        model.load_state_dict(
            {k: v for k, v in self._fitted[1].items() if k in own and own[k].shape == v.shape},
            strict=False,
        )
        # Keys are "conditionals.<output>.…"; fit every output if one is not.
        prefixes = [k.split(".")[:2] for k in changed]
        outputs = (sorted({int(p[1]) for p in prefixes})
                   if all(p[0] == "conditionals" and p[1:] and p[1].isdigit() for p in prefixes)
                   else None)
        logger.warning("GPAR's hyperparameters changed form (%s); refitting outputs %s.",
                       changed[0], "all" if outputs is None else outputs)
        note = f" (hyperparameters changed form at {changed[0]}: refitted)"
        try:
            self._fit(model, outputs)
        except Exception as error:
            logger.warning("GPAR refit failed (%s); keeping the initial values.", error)
            note = f" (hyperparameters changed form at {changed[0]}; refit failed: {error})"
        if keep:
            self._fitted = (self._fitted[0], model.hyperparameters())
        return model.eval(), note

    def _fit(self, model: GPARModel, outputs: list[int] | None = None) -> None:
        """Fit ``model``'s conditionals ``outputs`` (all by default), reproducibly."""
        with torch.random.fork_rng():  # fit retries draw from the global RNG
            torch.manual_seed(self.seed)
            fit_gpytorch_mll(
                GPARMarginalLogLikelihood(model.likelihood, model), outputs=outputs,
                **self.fit_kwargs,
            )

    def _new_model(self, X: Tensor, Y: Tensor) -> GPARModel:
        """An unfitted GPAR on ``Y`` with its own copy of the options' transform."""
        options = resolve_gpar_options(self.gpar_options)
        return GPARModel(X, Y, output_names=self.epochs.long().tolist(), **options)
