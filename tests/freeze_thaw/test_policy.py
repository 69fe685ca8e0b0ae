"""The GPAR freeze-thaw policy: its decisions, refits, fallbacks and its harness adapter."""

from __future__ import annotations

from collections.abc import Callable

import math

import pytest
import torch

import gpar_bo.conditionals as conditionals
from benchmarks.bo.freeze_thaw import GPARFreezeThaw, GPARFreezeThawNoHorizon
from benchmarks.bo.harness import simulate
from benchmarks.bo.problems import synthetic_problem
from gpar_bo.freeze_thaw import (
    FreezeThawIndex,
    FreezeThawPolicy,
    expected_improvement_lognormal,
    stopping_index,
)
from gpar_bo.freeze_thaw import index as index_module
from gpar_bo.freeze_thaw import policy as policy_module
from gpar_bo.model import GPARModel
from gpar_bo.refit import mismatched_hyperparameters

EPOCHS = [1, 2, 4]
#: Small and deterministic: no model-free decisions, few paths and candidates, short fits
#: (the tests are of the decisions' logic; GPAR's fits are tested in tests/test_model.py).
FAST = {"num_samples": 64, "num_candidates": 16, "model_free_fraction": 0.0,
        "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 20}}}}


def curves(x: torch.Tensor) -> torch.Tensor:
    """Flat-ish curves whose level grows with x: ``n x 3`` errors at EPOCHS."""
    t = torch.tensor(EPOCHS, dtype=torch.double)
    level = (0.05 + 0.4 * x).unsqueeze(-1)
    return level + 0.1 * level * t**-1.0


def state() -> tuple[torch.Tensor, torch.Tensor]:
    """Finished runs across x, and paused runs at the first checkpoint (rows 8..)."""
    x = torch.cat([torch.linspace(0.2, 1.0, 8), torch.tensor([0.0, 0.6, 0.8, 0.9])])
    Y = curves(x)
    Y[8:, 1:] = float("nan")
    return x.unsqueeze(-1).double(), Y.double()


# ------------------------------------------------------------------ the decisions
def test_policy_continues_the_run_whose_prefix_is_clearly_best() -> None:
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    candidates = torch.linspace(0.5, 1.0, 6, dtype=torch.double).unsqueeze(-1)
    decision = FreezeThawPolicy(EPOCHS, **FAST).decide(X, Y, paused, candidates)
    assert decision.action == "resume" and decision.index == 8 and decision.reason == "gpar"
    assert decision.score > 0


def test_pending_finals_score_against_the_runs_being_trained_to_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    X, Y = state()
    Y[8, :2] = curves(X[8].squeeze(-1).unsqueeze(0))[0, :2]  # the best run, at the second-last checkpoint
    paused = ~Y[:, -1].isfinite()
    paused[8] = False  # being trained to its final checkpoint by another worker
    candidates = torch.tensor([[0.0], [0.05], [0.1]], dtype=torch.double)  # settings that can beat the incumbent
    seen = []
    original = policy_module.FreezeThawIndex.__init__

    def record(self, *args, pending=None, **kwargs):
        seen.append(pending)
        original(self, *args, pending=pending, **kwargs)

    monkeypatch.setattr(policy_module.FreezeThawIndex, "__init__", record)
    default = FreezeThawPolicy(EPOCHS, **FAST).decide(X, Y, paused, candidates)
    assert seen == [None, None]
    seen.clear()
    pending = FreezeThawPolicy(EPOCHS, pending_finals=True, **FAST).decide(X, Y, paused, candidates)
    assert len(seen) == 2 and all(torch.equal(p, X[[8]]) for p in seen)  # the decision's index and its screen
    # The leader will finish below today's incumbent: every other run is worth less.
    assert default.reason == pending.reason == "gpar" and 0 < pending.score < default.score
    # With no run being trained to the end, the same decision as without the option.
    paused[8] = True
    again = [FreezeThawPolicy(EPOCHS, pending_finals=flag, **FAST).decide(X, Y, paused, candidates)
             for flag in (False, True)]
    assert [(d.action, d.index, d.reason, d.score) for d in again] == [(d.action, d.index, d.reason, d.score) for d in again[::-1]]


def test_policy_starts_a_new_setting_when_every_paused_run_is_hopeless() -> None:
    X, Y = state()
    Y[8, 0] = curves(torch.tensor([0.95], dtype=torch.double))[0, 0]  # the good paused run is now bad too
    X[8] = 0.95
    paused = ~Y[:, -1].isfinite()
    candidates = torch.tensor([[0.0], [0.05], [0.7]], dtype=torch.double)
    decision = FreezeThawPolicy(EPOCHS, **FAST).decide(X, Y, paused, candidates)
    assert decision.action == "start" and decision.index in (0, 1)
    assert torch.equal(decision.candidate, candidates[decision.index])


def test_with_a_budget_only_runs_that_can_still_finish_are_trained() -> None:
    X, Y = state()  # paused runs have trained 1 of 4 epochs
    paused = ~Y[:, -1].isfinite()
    candidates = torch.tensor([[0.0], [0.05], [0.7]], dtype=torch.double)

    def decide(level, epochs_left):
        X[8], Y[8, 0] = level, curves(torch.tensor([level], dtype=torch.double))[0, 0]
        return FreezeThawPolicy(EPOCHS, **FAST).decide(X, Y, paused, candidates, epochs_left=epochs_left)

    free = decide(0.1, None)
    assert free.action == "start"  # a better new setting is the best bet, given time
    for ample in (4.0, 1e9):  # a whole run fits: the same decision
        again = decide(0.1, ample)
        assert (again.action, again.index, again.score) == (free.action, free.index, free.score)
    late = decide(0.1, 3.5)  # the paused runs can finish (3 epochs to train), a new one cannot
    assert (late.action, late.index, late.reason) == ("resume", 8, "gpar")
    hopeless = decide(0.95, 3.5)  # no path improves: the fallback starts nothing either
    assert hopeless.action == "resume" and hopeless.reason == "model-free: no path improves"
    assert decide(0.1, 2.0).reason == "model-free: no run can finish within the budget"


def test_a_zero_error_counts_as_half_the_smallest_positive_one() -> None:
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    candidates = torch.linspace(0.5, 1.0, 6, dtype=torch.double).unsqueeze(-1)
    zero = Y.clone()
    zero[0, -1] = 0.0  # a perfect score on a finite validation set
    floored = zero.clone()
    floored[0, -1] = zero[~zero.isnan() & (zero > 0)].min() / 2  # read as half the smallest
    decisions = [FreezeThawPolicy(EPOCHS, **FAST).decide(X, y, paused, candidates) for y in (floored, zero)]
    assert decisions[1].reason == "gpar"  # decided by the model, not by a fallback
    first, second = ((d.action, d.index, d.score) for d in decisions)
    assert first == second


def test_random_resumes_draw_uniformly_among_the_runs_that_can_still_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    X, Y = state()
    Y[9, 1] = curves(X[9, 0])[1]  # one paused run is a checkpoint further: 2 epochs to go
    paused = ~Y[:, -1].isfinite()
    candidates = torch.linspace(0.5, 1.0, 6, dtype=torch.double).unsqueeze(-1)
    policy = FreezeThawPolicy(EPOCHS, **{**FAST, "random_resume_fraction": 1.0})
    rows = []
    for _ in range(200):
        decision = policy.decide(X, Y, paused, candidates, epochs_left=2.5)
        assert (decision.action, decision.reason, decision.score) == ("resume", "random resume", None)
        rows.append(decision.index)
    assert policy._fitted is None  # no GPAR fit for a random resume
    assert rows == [9] * 200  # the only run that can finish within 2.5 epochs
    rows = [policy.decide(X, Y, paused, candidates).index for _ in range(400)]
    counts = torch.bincount(torch.tensor(rows), minlength=len(X))
    assert counts[:8].sum() == 0 and bool(((counts[8:] > 65) & (counts[8:] < 135)).all())  # 100 +- 4 sd
    # Which rule decides (GPAR's decisions are stubbed): the share; with no run to resume,
    # GPAR; in the warm-up, the warm-up; with a share of 0, one draw per decision, as before.
    monkeypatch.setattr(FreezeThawPolicy, "_gpar_decision", lambda self, *args: policy_module.Decision(
        "start", 0, "gpar"))
    mixed = FreezeThawPolicy(EPOCHS, **{**FAST, "random_resume_fraction": 0.5}, seed=1)
    reasons = [mixed.decide(X, Y, paused, candidates).reason for _ in range(200)]
    assert 70 <= reasons.count("random resume") <= 130 and reasons.count("gpar") == 200 - reasons.count("random resume")
    assert policy.decide(X, Y, torch.zeros_like(paused), candidates).reason == "gpar"
    warming = Y.clone()
    warming[1:8, 1:] = float("nan")  # one run finished: the warm-up
    assert policy.decide(X, warming, ~warming[:, -1].isfinite(), candidates).reason == "warm-up"
    zero = FreezeThawPolicy(EPOCHS, **FAST, seed=3)
    zero.decide(X, Y, paused, candidates)
    reference = torch.Generator().manual_seed(3)
    torch.rand(1, generator=reference)
    assert torch.equal(zero.generator.get_state(), reference.get_state())


def test_policy_searches_a_box_without_candidates() -> None:
    X, Y = state()
    paused = torch.zeros(len(X), dtype=torch.bool)  # nothing to resume
    bounds = torch.tensor([[0.0], [1.0]], dtype=torch.double)
    decision = FreezeThawPolicy(EPOCHS, **FAST).decide(X, Y, paused, bounds=bounds)
    assert decision.action == "start" and decision.index == -1
    assert 0 <= float(decision.candidate) <= 0.3  # the good end of the box


def test_policy_falls_back_when_the_fit_fails(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("no convergence")

    monkeypatch.setattr(policy_module, "fit_gpytorch_mll", broken)
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    candidates = torch.rand(5, 1, dtype=torch.double)
    with caplog.at_level("WARNING", logger="gpar_bo.freeze_thaw.policy"):
        decision = FreezeThawPolicy(EPOCHS, **FAST).decide(X, Y, paused, candidates)
    assert decision.reason.startswith("model-free: GPAR failed") and "no convergence" in decision.reason
    assert "no convergence" in caplog.text


def test_policy_falls_back_on_a_non_finite_reward(monkeypatch: pytest.MonkeyPatch) -> None:
    # A NaN reward used to zero its run's index silently; now the decision says why it fell back.
    monkeypatch.setattr(index_module, "expected_improvement_lognormal",
                        lambda mean, std, incumbent: torch.full_like(mean, float("nan")))
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    decision = FreezeThawPolicy(EPOCHS, **FAST).decide(X, Y, paused, torch.rand(5, 1, dtype=torch.double))
    assert decision.reason.startswith("model-free: GPAR failed") and "reward must be finite" in decision.reason


@pytest.mark.parametrize("staged_refits", [True, False])
def test_policy_reuses_the_last_fit_when_a_refit_fails(
    monkeypatch: pytest.MonkeyPatch, staged_refits: bool
) -> None:
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    candidates = torch.rand(5, 1, dtype=torch.double)
    policy = FreezeThawPolicy(EPOCHS, staged_refits=staged_refits, **FAST)
    policy.decide(X[:-2], Y[:-2], paused[:-2], candidates)

    def broken(*args, **kwargs):
        raise RuntimeError("no convergence")

    monkeypatch.setattr(policy_module, "fit_gpytorch_mll", broken)
    policy.refit_growth = 0.0  # any growth refits
    decision = policy.decide(X, Y, paused, candidates)
    assert decision.reason.startswith("gpar (refit failed: no convergence")


def record_fits(monkeypatch: pytest.MonkeyPatch) -> tuple[list[list[int]], Callable]:
    """Record the conditionals each fit fits into the last list of ``fitted`` (append one per
    decision); returns ``fitted`` and the recording ``custom_fit``, to patch back in."""
    fitted: list[list[int]] = []
    real = GPARModel.custom_fit

    def recorded(model, mll=None, outputs=None, **kwargs):
        fitted[-1].extend(range(model.num_outputs) if outputs is None else outputs)
        return real(model, mll, outputs=outputs, **kwargs)

    monkeypatch.setattr(GPARModel, "custom_fit", recorded)
    return fitted, recorded


def test_refits_are_staged_one_conditional_per_decision_unless_turned_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fitted, recorded = record_fits(monkeypatch)
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    candidates = torch.rand(5, 1, dtype=torch.double)
    options = {"refit_growth": 0.0, **FAST,
               "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 10}}}}
    full = FreezeThawPolicy(EPOCHS, staged_refits=False, **options)
    for n in range(8, 11):  # one more run each decision: any growth starts a refit
        fitted.append([])
        full.decide(X[:n], Y[:n], paused[:n], candidates)
    assert fitted == [[0, 1, 2]] * 3  # without staging, every refit fits all conditionals
    fitted.clear()
    policy = FreezeThawPolicy(EPOCHS, **options)  # staged by default
    for n in range(8, 13):
        fitted.append([])
        policy.decide(X[:n], Y[:n], paused[:n], candidates)
    # The first fit whole, then a refit over three decisions, then the next one.
    assert fitted == [[0, 1, 2], [0], [1], [2], [0]]

    def broken(model, mll=None, outputs=None, **kwargs):
        fitted[-1].extend(range(model.num_outputs) if outputs is None else outputs)
        raise RuntimeError("no convergence")

    monkeypatch.setattr(GPARModel, "custom_fit", broken)
    fitted.append([])
    assert "refit failed" in policy.decide(X, Y, paused, candidates).reason
    monkeypatch.setattr(GPARModel, "custom_fit", recorded)
    fitted.append([])
    policy.decide(X, Y, paused, candidates)
    assert fitted[-2:] == [[1], [2]]  # the failed stage keeps its last fit; the refit goes on

    monkeypatch.setattr(GPARModel, "custom_fit", broken)
    fitted.append([])
    assert "refit failed" in full.decide(X, Y, paused, candidates).reason
    monkeypatch.setattr(GPARModel, "custom_fit", recorded)
    fitted.append([])
    full.decide(X, Y, paused, candidates)
    assert fitted[-2:] == [[0, 1, 2], []]  # a failed refit waits for the data to grow again


def test_a_restored_policy_decides_and_refits_as_the_one_it_was_saved_from(
    monkeypatch: pytest.MonkeyPatch, tmp_path,
) -> None:
    fitted, _ = record_fits(monkeypatch)
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    # More candidates than it scores: each decision draws its subset from its random stream.
    candidates = torch.rand(20, 1, dtype=torch.double)
    options = {"refit_growth": 0.0, **FAST, "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 10}}}}
    saved = FreezeThawPolicy(EPOCHS, **options)
    for n in (8, 9):  # the first fit, then a staged refit under way
        fitted.append([])
        saved.decide(X[:n], Y[:n], paused[:n], candidates)
    assert fitted == [[0, 1, 2], [0]]
    torch.save(saved.state_dict(), tmp_path / "policy.pt")  # as gpar-bo tune keeps it
    restored = FreezeThawPolicy(EPOCHS, seed=7, **options)  # the state carries the seed
    untouched = restored.state_dict()
    damaged = torch.load(tmp_path / "policy.pt", weights_only=True)
    del damaged["stored"]
    with pytest.raises(KeyError):
        restored.load_state_dict(damaged)
    assert restored.state_dict()["seed"] == 7 and restored.decisions == untouched["decisions"] == 0
    restored.load_state_dict(torch.load(tmp_path / "policy.pt", weights_only=True))
    fitted.clear()
    decisions = {}
    for name, policy in (("saved", saved), ("restored", restored)):
        for n in (10, 11):
            fitted.append([])
            decisions.setdefault(name, []).append(policy.decide(X[:n], Y[:n], paused[:n], candidates))
    assert fitted[:2] == fitted[2:] == [[1], [2]]  # the refit's next stages, none from scratch
    assert [(d.action, d.index, d.reason, d.score) for d in decisions["saved"]] == [
        (d.action, d.index, d.reason, d.score) for d in decisions["restored"]]
    fitted.append([])
    FreezeThawPolicy(EPOCHS, **options).decide(X[:10], Y[:10], paused[:10], candidates)
    assert fitted[-1] == [0, 1, 2]  # without the state, a policy fits everything first
    with pytest.raises(ValueError, match=r"policy state is for checkpoints \[1.0, 2.0, 4.0\]"):
        FreezeThawPolicy([1, 2, 8]).load_state_dict(saved.state_dict())


def test_output_trigger_refits_the_conditionals_whose_rows_grew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fitted, recorded = record_fits(monkeypatch)
    X, Y = state()  # rows per output: 12, 8, 8
    grown = Y.clone()
    grown[8, 1] = curves(X[8, 0].reshape(1))[0, 1]  # paused run 8 reaches the second checkpoint
    paused = ~Y[:, -1].isfinite()
    candidates = torch.rand(5, 1, dtype=torch.double)
    options = {"refit_growth": 0.05, "refit_trigger": "output", **FAST,
               "fit_kwargs": {"optimizer_kwargs": {"options": {"maxiter": 10}}}}
    steps = [(10, Y), (11, grown), (11, grown), (11, grown)]
    policy = FreezeThawPolicy(EPOCHS, **options)
    for n, values in steps:
        fitted.append([])
        policy.decide(X[:n], values[:n], paused[:n], candidates)
    # Rows 10, 8, 8 at the first fit; then 11, 9, 8: output 1 grew most (9 / 8), then output 0.
    assert fitted == [[0, 1, 2], [1], [0], []]
    fitted.clear()
    full = FreezeThawPolicy(EPOCHS, staged_refits=False, **options)
    for n, values in steps[:3]:
        fitted.append([])
        full.decide(X[:n], values[:n], paused[:n], candidates)
    assert fitted == [[0, 1, 2], [0, 1], []]
    with pytest.raises(ValueError, match="refit_trigger must be"):
        FreezeThawPolicy(EPOCHS, refit_trigger="values")


def test_policy_refits_a_conditional_that_turns_sparse_at_once(
    monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    fitted: list[list[int]] = []
    real = GPARModel.custom_fit

    def recorded(model, mll=None, outputs=None, **kwargs):
        fitted[-1].extend(range(model.num_outputs) if outputs is None else outputs)
        return real(model, mll, outputs=outputs, **kwargs)

    def broken(model, mll=None, outputs=None, **kwargs):
        fitted[-1].extend(range(model.num_outputs) if outputs is None else outputs)
        raise RuntimeError("no convergence")

    monkeypatch.setattr(GPARModel, "custom_fit", recorded)
    monkeypatch.setattr(conditionals, "SPARSE_ABOVE", 10)  # 11+ first-checkpoint rows: sparse
    monkeypatch.setattr(conditionals, "DEFAULT_NUM_INDUCING", 4)
    X, Y = state()  # 12 runs at the first checkpoint, 8 at the others
    paused = ~Y[:, -1].isfinite()
    candidates = torch.rand(5, 1, dtype=torch.double)
    policies = [FreezeThawPolicy(EPOCHS, refit_growth=10.0, **FAST) for _ in range(2)]  # no growth refits
    for policy in policies:
        fitted.append([])
        policy.decide(X[:10], Y[:10], paused[:10], candidates)
    last = policies[0]._fitted[1]
    fitted.append([])
    policies[0].final_error_samples(X, Y, torch.tensor([8]))  # a prediction keeps nothing
    assert policies[0]._fitted[1] is last
    fitted.append([])
    with caplog.at_level("WARNING", logger="gpar_bo.freeze_thaw.policy"):
        decision = policies[0].decide(X, Y, paused, candidates)
    # Only the conditional that turned sparse is fitted, the others reloaded.
    assert fitted == [[0, 1, 2], [0, 1, 2], [0], [0]]
    assert "changed form" in decision.reason and "changed form" in caplog.text
    assert all(torch.equal(policies[0]._fitted[1][k], v) for k, v in last.items()
               if not k.startswith("conditionals.0."))
    model, note = policies[0]._model(X, Y, keep=False)
    assert note == "" and mismatched_hyperparameters(model, policies[0]._fitted[1]) == []

    monkeypatch.setattr(GPARModel, "custom_fit", broken)
    fitted.append([])
    assert "refit failed" in policies[1].decide(X, Y, paused, candidates).reason
    fitted.append([])
    assert policies[1].decide(X, Y, paused, candidates).reason == "gpar"  # not retried
    assert fitted[-2:] == [[0], []]


def test_work_per_decision_does_not_grow_with_the_paused_runs() -> None:
    policy = FreezeThawPolicy(EPOCHS, num_resumable=3, num_refresh=2, **{**FAST, "num_candidates": 4})
    n = 50
    X = torch.rand(n, 1, dtype=torch.double)
    observed = torch.ones(n, dtype=torch.long)
    paused = torch.ones(n, dtype=torch.bool)
    for row in range(n - 1):  # every run but the last was scored; row 0 longest ago
        policy._stored[policy._key(X[row], observed[row])] = (float(row % 10), row)
    rows = policy._resumable(X, observed, paused).tolist()
    assert len(rows) == 1 + 3 + 2  # never scored, best stored, least recently scored
    assert n - 1 in rows and {9, 19, 29} <= set(rows) and {0, 1} <= set(rows)


def test_screened_scoring_screens_every_paused_run_and_picks_the_fresh_best(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 8 finished runs and 12 paused ones at the first checkpoint: more than NUM_FINALISTS,
    # so the paused runs are screened (the lazy default, never having scored them,
    # scores all 12 with every path instead).
    x = torch.cat([torch.linspace(0.2, 1.0, 8), torch.linspace(0.0, 0.9, 12)]).unsqueeze(-1).double()
    Y = curves(x.squeeze(-1))
    Y[8:, 1:] = float("nan")
    paused = ~Y[:, -1].isfinite()
    candidates = torch.rand(4, 1, dtype=torch.double)
    scored: list[int] = []
    index = FreezeThawIndex.index
    monkeypatch.setattr(FreezeThawIndex, "index",
                        lambda self, X, observed: scored.append(len(X)) or index(self, X, observed))
    policy = FreezeThawPolicy(EPOCHS, paused_scoring="screen", **FAST)
    decision = policy.decide(x, Y.double(), paused, candidates)
    # Screened: all 12 paused runs, then the 8 best with all paths, then the new settings.
    assert scored[:2] == [12, policy_module.NUM_FINALISTS]
    # Row 8 (x = 0) has the best prefix of all; it must win over every other paused run.
    assert (decision.action, decision.index) == ("resume", 8)
    again = FreezeThawPolicy(EPOCHS, paused_scoring="screen", **FAST).decide(x, Y.double(), paused, candidates)
    assert again == decision  # reproducible given the seed
    # More paused runs than num_candidates: a random num_candidates of them are screened.
    scored.clear()
    FreezeThawPolicy(EPOCHS, paused_scoring="screen", **{**FAST, "num_candidates": 10}).decide(
        x, Y.double(), paused, candidates)
    assert scored[:2] == [10, policy_module.NUM_FINALISTS]


def test_warm_up_screens_then_pushes_the_two_best() -> None:
    policy = FreezeThawPolicy(EPOCHS, num_initial=3, **FAST)
    candidates = torch.rand(10, 1, dtype=torch.double)
    empty = torch.empty(0, 1, dtype=torch.double)
    decision = policy.decide(empty, torch.empty(0, 3), torch.empty(0, dtype=torch.bool), candidates)
    assert (decision.action, decision.reason) == ("start", "warm-up")
    X = torch.tensor([[0.1], [0.2], [0.3]], dtype=torch.double)
    Y = torch.tensor([[0.5, math.nan, math.nan], [0.2, math.nan, math.nan], [0.3, math.nan, math.nan]])
    paused = torch.tensor([True, True, True])
    decision = policy.decide(X, Y.double(), paused, candidates)
    assert (decision.action, decision.index) == ("resume", 1)


def test_a_pushing_warm_up_continues_screened_runs_where_the_default_screens() -> None:
    candidates = torch.rand(10, 1, dtype=torch.double)
    X = torch.tensor([[0.1], [0.2], [0.3], [0.4]], dtype=torch.double)
    nan = math.nan
    # Runs 0 and 1 are being pushed (running past the first checkpoint); 2 and 3 wait at it.
    Y = torch.tensor([[0.5, 0.4, nan], [0.2, nan, nan], [0.3, nan, nan], [0.25, nan, nan]]).double()
    paused = torch.tensor([False, False, True, True])
    screen = FreezeThawPolicy(EPOCHS, num_initial=3, **FAST).decide(X, Y, paused, candidates)
    push = FreezeThawPolicy(EPOCHS, num_initial=3, warm_up="push", **FAST).decide(X, Y, paused, candidates)
    assert (screen.action, screen.reason) == ("start", "warm-up")
    assert (push.action, push.index, push.reason) == ("resume", 3, "warm-up")  # the best waiting
    # A pushed run that paused past the first checkpoint goes first, in either warm-up.
    deeper = torch.tensor([True, False, True, True])
    for warm_up in ("screen", "push"):
        decision = FreezeThawPolicy(EPOCHS, num_initial=3, warm_up=warm_up, **FAST).decide(X, Y, deeper, candidates)
        assert (decision.action, decision.index) == ("resume", 0)
    # Nothing paused: a new setting, in either warm-up.
    decision = FreezeThawPolicy(EPOCHS, num_initial=3, warm_up="push", **FAST).decide(
        X, Y, torch.zeros(4, dtype=torch.bool), candidates)
    assert (decision.action, decision.reason) == ("start", "warm-up")


def test_a_halving_warm_up_pushes_runs_in_the_top_third_of_their_checkpoint() -> None:
    candidates = torch.rand(10, 1, dtype=torch.double)
    X = torch.tensor([[0.1], [0.2], [0.3], [0.4]], dtype=torch.double)
    nan = math.nan
    # Runs 0 and 1 are being pushed; 2 and 3 wait at the first checkpoint, both below the
    # top third (2 of the 4 values recorded there).
    Y = torch.tensor([[0.5, 0.4, nan], [0.2, nan, nan], [0.6, nan, nan], [0.7, nan, nan]]).double()
    paused = torch.tensor([False, False, True, True])
    decide = {w: FreezeThawPolicy(EPOCHS, num_initial=3, warm_up=w, **FAST).decide(X, Y, paused, candidates)
              for w in ("screen", "push", "halving")}
    assert (decide["halving"].action, decide["halving"].reason) == ("start", "warm-up")
    assert (decide["push"].action, decide["push"].index) == ("resume", 2)
    # Run 2 now leads the first checkpoint: halving pushes it, the default (two pushed) screens.
    Y[2, 0] = 0.1
    decide = {w: FreezeThawPolicy(EPOCHS, num_initial=3, warm_up=w, **FAST).decide(X, Y, paused, candidates)
              for w in ("screen", "halving")}
    assert (decide["halving"].action, decide["halving"].index, decide["halving"].reason) == ("resume", 2, "warm-up")
    assert decide["screen"].action == "start"
    # A run paused deeper but outside the top third there is passed over; the default pushes it on.
    Y[0, 1], Y[1, 1] = 0.9, 0.1
    deeper = torch.tensor([True, False, True, True])
    decide = {w: FreezeThawPolicy(EPOCHS, num_initial=3, warm_up=w, **FAST).decide(X, Y, deeper, candidates)
              for w in ("screen", "halving")}
    assert (decide["halving"].action, decide["halving"].index) == ("resume", 2)
    assert (decide["screen"].action, decide["screen"].index) == ("resume", 0)
    # The first run to report stands alone at its checkpoint: it is pushed.
    first = torch.full((4, 3), math.nan, dtype=torch.double)
    first[2, 0] = 0.9
    decision = FreezeThawPolicy(EPOCHS, num_initial=3, warm_up="halving", **FAST).decide(
        X, first, torch.tensor([False, False, True, False]), candidates)
    assert (decision.action, decision.index) == ("resume", 2)


def test_a_halving_warm_up_is_told_the_budget_as_the_policy_is_after_it() -> None:
    candidates = torch.rand(10, 1, dtype=torch.double)
    X = torch.rand(5, 1, dtype=torch.double)
    nan = math.nan
    # Run 0 (paused at the second checkpoint) is outside the top third there, runs 2 and 3
    # (paused at the first) outside it there: halving screens a new setting...
    Y = torch.tensor([[0.5, 0.9, nan], [0.2, 0.1, nan], [0.6, nan, nan], [0.7, nan, nan],
                      [0.3, nan, nan]]).double()
    paused = torch.tensor([True, False, True, True, False])
    policy = FreezeThawPolicy(EPOCHS, num_initial=3, warm_up="halving", **FAST)
    assert policy.decide(X, Y, paused, candidates).action == "start"
    # ...unless only 2.5 epochs are left per worker: then only run 0 can still finish.
    decision = FreezeThawPolicy(EPOCHS, num_initial=3, warm_up="halving", **FAST).decide(
        X, Y, paused, candidates, epochs_left=2.5)
    assert (decision.action, decision.index, decision.reason) == ("resume", 0, "warm-up")


def test_with_as_many_workers_as_screens_the_warm_up_pushes_the_first_runs_to_report() -> None:
    # What the docs say of the harness's 4 workers: the default pushes runs 0 and 1 (the
    # first to report, whatever their errors), the candidate all four; no fit (warm-up only).
    problem = synthetic_problem(n=40, seed=0)
    depth, first = {}, {}
    for method in (GPARFreezeThaw(), GPARFreezeThaw(warm_up="push")):
        trace = simulate(method, problem, 0, budget=40, workers=4)
        depth[method.policy.warm_up] = [t["epochs"] for t in trace.trials]
        first[method.policy.warm_up] = [float(problem.error[t["setting"], 0]) for t in trace.trials]
    assert min(depth["screen"][:2]) > 1 and max(depth["screen"][2:]) == 1
    assert min(first["screen"][:2]) > max(first["screen"][2:4])  # here the worst two of four
    assert min(depth["push"][:4]) > 1 and len(depth["push"]) == 4


def test_final_error_samples_are_the_models_predictive_and_change_no_decision() -> None:
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    candidates = torch.rand(5, 1, generator=torch.Generator().manual_seed(1), dtype=torch.double)
    rows = torch.tensor([8, 9, 11])
    asked, quiet = FreezeThawPolicy(EPOCHS, **FAST), FreezeThawPolicy(EPOCHS, **FAST)
    short = Y.clone()
    short[:, 1:] = math.nan  # no run finished: no model yet
    assert asked.final_error_samples(X, short, rows) is None
    # Asked before any fit: it fits, and keeps nothing.
    samples = asked.final_error_samples(X, Y, rows)
    assert asked._fitted is None and samples.shape == (8 * FAST["num_samples"], 3)
    first = [p.decide(X, Y, paused, candidates) for p in (asked, quiet)]
    # Asked after a fit, on grown data: it reloads that fit, and keeps nothing either.
    grown = Y.clone()
    grown[8, 1] = curves(X[8])[0, 1]
    fitted = asked._fitted
    again = asked.final_error_samples(X, grown, rows)
    assert asked._fitted is fitted
    second = [p.decide(X, grown, ~grown[:, -1].isfinite(), candidates) for p in (asked, quiet)]
    for a, b in (first, second):
        assert (a.action, a.index, a.score) == (b.action, b.index, b.score)
    assert torch.equal(asked.generator.get_state(), quiet.generator.get_state())
    # The samples are those of the mixture over paths of the final log-normals.
    model = asked.model(X, grown)  # the model it predicts with, on every reported run
    assert asked._fitted is fitted and torch.equal(model.train_X, X)
    assert model.hyperparameters().keys() == fitted[1].keys()
    assert all(torch.equal(model.hyperparameters()[k], v) for k, v in fitted[1].items())
    paths = FreezeThawIndex(model, asked.epochs.double(), 0.1, asked.num_samples,
                            seed=asked.seed).final_paths(X[rows], torch.tensor([2, 1, 1]))
    mean = (paths.mean + paths.variance / 2).exp().mean(0)
    assert torch.allclose(again.mean(0), mean, rtol=0.02)
    q05, q95 = again.quantile(0.05, dim=0), again.quantile(0.95, dim=0)
    assert bool(((q05 < mean) & (mean < q95)).all())
    # The better prefix predicts the lower final error (row 8 has the lowest level).
    assert int(again.mean(0).argmin()) == 0
    with pytest.raises(ValueError, match="must not have reached the final checkpoint"):
        asked.final_error_samples(X, Y, torch.tensor([0]))
    with pytest.raises(ValueError, match="rows must be"):
        asked.final_error_samples(X, Y, torch.tensor([len(X)]))
    with pytest.raises(ValueError, match="No run has reported a value"):
        asked.model(X, torch.full_like(Y, math.nan))


def test_start_indices_are_the_indices_decide_compares_and_change_no_decision() -> None:
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    candidates = torch.tensor([[0.0], [0.3], [0.7], [1.0]], dtype=torch.double)
    asked, quiet = FreezeThawPolicy(EPOCHS, **FAST), FreezeThawPolicy(EPOCHS, **FAST)
    short = Y.clone()
    short[:, 1:] = math.nan
    assert asked.start_indices(X, short, candidates) is None  # no run finished: no model
    before = asked.start_indices(X, Y, candidates)  # before any fit: fits, keeps nothing
    assert asked._fitted is None and before.shape == (4,) and (before >= 0).all()
    decisions = [p.decide(X, Y, paused, candidates) for p in (asked, quiet)]
    assert [(d.action, d.index, d.score) for d in decisions][0] == (
        decisions[1].action, decisions[1].index, decisions[1].score)
    after = asked.start_indices(X, Y, candidates)  # now the decision's fit, reloaded
    # A resumed run won: its index is at least every new setting's.
    assert decisions[0].action == "resume" and decisions[0].score >= float(after.max())
    # The level of the curves grows with x: the lowest setting is worth the most.
    assert int(after.argmax()) == 0 and after[0] > after[-1]
    # Every paused run hopeless: the new setting started is the one of highest index.
    Y[8, 0] = curves(torch.tensor([0.95], dtype=torch.double))[0, 0]
    X[8] = 0.95
    policy = FreezeThawPolicy(EPOCHS, **FAST)
    decision = policy.decide(X, Y, paused, candidates)
    indices = policy.start_indices(X, Y, candidates)
    assert decision.action == "start" and decision.index == int(indices.argmax())
    # decide draws fresh quasi-random paths at each decision: equal up to Monte Carlo error
    assert decision.score == pytest.approx(float(indices.max()), rel=0.02)
    for bad, message in ((candidates.T, "candidates must be c x 1"),
                         (candidates.float(), "candidates must have X's dtype"),
                         (torch.full_like(candidates, math.nan), "candidates must be finite")):
        with pytest.raises(ValueError, match=message):
            asked.start_indices(X, Y, bad)
        with pytest.raises(ValueError, match=message):  # decide checks them the same way
            asked.decide(X, Y, paused, bad)


def test_bad_input_raises_one_line_value_errors() -> None:
    X, Y = state()
    paused = ~Y[:, -1].isfinite()
    policy = FreezeThawPolicy(EPOCHS, **FAST)
    candidates = torch.rand(3, 1, dtype=torch.double)
    gapped = Y.clone()
    gapped[0, 1] = float("nan")
    negative = Y.clone()
    negative[0, 0] = -0.1
    bad_calls = [
        lambda: policy.decide(X, Y[:, :2], paused, candidates),
        lambda: policy.decide(X, gapped, paused, candidates),
        lambda: policy.decide(X, negative, paused, candidates),
        lambda: policy.decide(X, Y, torch.ones(len(X), dtype=torch.bool), candidates),
        lambda: policy.decide(X, Y, paused.long(), candidates),
        lambda: policy.decide(X, Y, paused),
        lambda: policy.decide(X, Y, paused, torch.rand(3, 2, dtype=torch.double)),
        lambda: policy.decide(X, Y, paused, bounds=torch.tensor([[1.0], [0.0]], dtype=torch.double)),
        lambda: policy.decide(X, Y, paused, candidates, epochs_left=-1.0),
        lambda: policy.decide(X, Y, paused, candidates, epochs_left=float("nan")),
        lambda: FreezeThawPolicy([3, 2]),
        lambda: FreezeThawPolicy([1]),
        lambda: FreezeThawPolicy(EPOCHS, num_initial=1),
        lambda: FreezeThawPolicy(EPOCHS, num_samples=48),
        lambda: FreezeThawPolicy(EPOCHS, model_free_fraction=1.5),
        lambda: FreezeThawPolicy(EPOCHS, random_resume_fraction=-0.1),
        lambda: FreezeThawPolicy(EPOCHS, random_resume_fraction=0.95),  # + the guard's 0.1 > 1
        lambda: FreezeThawPolicy(EPOCHS, paused_scoring="eager"),
        lambda: FreezeThawPolicy(EPOCHS, warm_up="asha"),
        lambda: stopping_index(torch.ones(6, 2), torch.ones(6, 2, 3), torch.zeros(2, dtype=torch.long), torch.tensor([1.0, 2, 3])),
        lambda: expected_improvement_lognormal(torch.zeros(1), torch.ones(1), 0.0),
    ]
    for call in bad_calls:
        with pytest.raises(ValueError) as error:
            call()
        assert "\n" not in str(error.value)


# ----------------------------------------------------------- the harness adapter
@pytest.fixture(scope="module")
def traces() -> list:
    torch.set_num_threads(1)
    problem = synthetic_problem(n=60, seed=3, checkpoints=(1, 3, 7, 21))
    options = {"num_samples": 64, "num_candidates": 16, "refit_growth": 1.0,
               "fit_kwargs": FAST["fit_kwargs"]}
    # Seed 1 only has to differ from seed 0, which it does from its first start.
    return problem, [
        simulate(GPARFreezeThaw(**options), problem, seed, budget=budget, workers=2)
        for seed, budget in ((0, 110), (0, 110), (1, 30))
    ]


@pytest.mark.long
def test_adapter_resumes_paused_runs_within_the_budget(traces) -> None:
    problem, (trace, _, _) = traces
    assert sum(t["epochs"] for t in trace.trials) == 110  # the budget, not more
    completed = [t for t in trace.trials if t["status"] == "completed"]
    assert len(completed) >= 3  # every run pauses at each checkpoint, so these were resumed
    assert len(trace.incumbent_error) == len(completed)


@pytest.mark.long
def test_adapter_is_reproducible_given_a_seed(traces) -> None:
    _, (first, again, other) = traces
    assert first.trials == again.trials and first.incumbent_error == again.incumbent_error
    assert other.trials != first.trials[:len(other.trials)]


def test_the_default_tells_the_policy_the_epochs_left_and_the_earlier_default_does_not(
    monkeypatch,
) -> None:
    seen: list = []
    decide = FreezeThawPolicy.decide

    def spy(self, *args, **kwargs):
        seen.append(kwargs.get("epochs_left"))
        return decide(self, *args, **kwargs)

    monkeypatch.setattr(FreezeThawPolicy, "decide", spy)
    problem = synthetic_problem(n=20, seed=3, checkpoints=(1, 3, 7, 21))
    simulate(GPARFreezeThaw(), problem, 0, budget=30, workers=2)  # warm-up only: no fit
    told, seen[:] = list(seen), []
    simulate(GPARFreezeThawNoHorizon(), problem, 0, budget=30, workers=2)
    assert told[0] == 15.0 and told == sorted(told, reverse=True) and told[-1] < 15.0
    assert seen and all(left is None for left in seen)


def test_only_the_default_and_candidates_on_it_are_told_the_budget() -> None:
    # The labelled variants measured before the end game run as they were measured.
    from benchmarks.bo import freeze_thaw as adapters

    variants = [getattr(adapters, name) for name in adapters.__all__]
    assert GPARFreezeThaw in variants and len(variants) > 2
    told = [v for v in variants if v.budget_aware]
    assert told == [GPARFreezeThaw, adapters.GPARFreezeThawConverged, adapters.GPARFreezeThawInitialStarts, adapters.GPARFreezeThawLatentPaths,
                    adapters.GPARFreezeThawLogDraws, adapters.GPARFreezeThawMeasuredInitialStarts, adapters.GPARFreezeThawOutputRefits,
                    adapters.GPARFreezeThawPendingFinals, adapters.GPARFreezeThawRandomResumes, adapters.GPARFreezeThawScreened,
                    adapters.GPARFreezeThawWarmUpHalving, adapters.GPARFreezeThawWarmUpPushes]
    method = adapters.GPARFreezeThawWarmUpHalving()
    method.reset(synthetic_problem(n=10, seed=0), seed=0)
    assert method.policy.warm_up == "halving"
    method = adapters.GPARFreezeThawWarmUpPushes()
    method.reset(synthetic_problem(n=10, seed=0), seed=0)
    assert method.policy.warm_up == "push" and FreezeThawPolicy(EPOCHS).warm_up == "screen"
    method = adapters.GPARFreezeThawPendingFinals()
    method.reset(synthetic_problem(n=10, seed=0), seed=0)
    assert method.policy.pending_finals and not FreezeThawPolicy(EPOCHS).pending_finals
    method = adapters.GPARFreezeThawRandomResumes()
    method.reset(synthetic_problem(n=10, seed=0), seed=0)
    assert method.policy.random_resume_fraction == 0.05 and FreezeThawPolicy(EPOCHS).random_resume_fraction == 0
    method = adapters.GPARFreezeThawLatentPaths()
    method.reset(synthetic_problem(n=10, seed=0), seed=0)
    assert method.policy.latent_paths and not GPARFreezeThaw().policy_options
    method = adapters.GPARFreezeThawScreened()
    method.reset(synthetic_problem(n=10, seed=0), seed=0)
    assert method.policy.paused_scoring == "screen" and GPARFreezeThaw().policy_options == {}
    method = adapters.GPARFreezeThawOutputRefits()
    method.reset(synthetic_problem(n=10, seed=0), seed=0)
    assert method.policy.refit_trigger == "output" and method.policy.paused_scoring == "lazy"
    for variant in (adapters.GPARFreezeThawInitialStarts, adapters.GPARFreezeThawMeasuredInitialStarts):
        method = variant()
        method.reset(synthetic_problem(n=10, seed=0), seed=0)
        assert method.policy.fit_kwargs == {"start_from_initial": True}
        assert ("measurement_noise" in method.policy.gpar_options) == ("measured" in method.name)
        assert method.policy.gpar_options.get("hyperparameter_draws", 1) > 0


def test_the_benchmark_driver_registers_the_policy_with_its_defaults() -> None:
    from benchmarks import bo_mnist

    method = bo_mnist.freeze_thaw_methods()["gpar_freeze_thaw"]()
    method.reset(synthetic_problem(n=10, seed=0), seed=0)
    assert method.name == "gpar_freeze_thaw" and method.policy_options == {}
    assert isinstance(method.policy, FreezeThawPolicy)
