"""Where the policy's model put the finals of the runs it left paused: the end state read
off a trace, the sides of the interval, and the quick report."""

import json

import numpy as np
import pytest
import torch

from benchmarks import freeze_thaw_study as study
from benchmarks import missed_promotions as mp


@pytest.fixture(scope="module")
def problem():
    return study.make_problem("quick")


@pytest.fixture(scope="module")
def quick_trace(problem) -> dict:
    """An end state like the policy's on the quick table (seed 0): the table's second to
    fifth best settings finished, every fourth of the others paused at each checkpoint
    before the last in turn, the table's best among them after one checkpoint.
    (Simulating the policy for it cost more than every test of this module.)"""
    order = problem.error[:, -1].argsort().tolist()
    finished = order[1:5]
    paused = [order[0], *order[5::4]]
    checkpoints = problem.checkpoints
    return {"seed": 0, "trials": [
        *({"setting": s, "status": "completed", "epochs": checkpoints[-1]} for s in finished),
        *({"setting": s, "status": "stopped", "epochs": checkpoints[i % (len(checkpoints) - 1)]}
          for i, s in enumerate(paused)),
    ]}


def test_end_state_is_what_the_policy_saw_when_the_budget_ran_out(problem) -> None:
    checkpoints = problem.checkpoints
    trace = {"seed": 0, "trials": [
        {"setting": 5, "status": "completed", "epochs": checkpoints[-1]},
        {"setting": 3, "status": "stopped", "epochs": checkpoints[1]},
        {"setting": 3, "status": "stopped", "epochs": checkpoints[0]},  # an earlier trial of it
        {"setting": 7, "status": "running", "epochs": checkpoints[0] + 1},  # between checkpoints
    ]}
    settings, Y, paused = mp.end_state(trace, problem)
    assert settings.tolist() == [3, 5, 7]
    columns = torch.tensor(checkpoints) - 1
    assert torch.equal(Y[1], problem.error[5, columns])
    assert torch.equal(Y[0, :2], problem.error[3, columns[:2]]) and Y[0, 2:].isnan().all()
    assert Y[2, 0] == problem.error[7, columns[0]] and Y[2, 1:].isnan().all()
    assert paused.tolist() == [True, False, False]  # a running run is not paused


def test_paused_predictions_place_each_final_against_its_interval(problem, quick_trace) -> None:
    trace = quick_trace
    predictions = mp.paused_predictions(trace, problem)
    _, _, paused = mp.end_state(trace, problem)
    assert len(predictions) == int(paused.sum()) > 0
    rank = problem.error[:, -1].argsort().argsort()
    for p in predictions:
        assert p["low"] <= p["median"] <= p["high"]
        assert p["final_error"] == pytest.approx(float(problem.error[p["setting"], -1]))
        assert p["final_rank"] == int(rank[p["setting"]])
        side = ("below" if p["final_error"] < p["low"] else
                "above" if p["final_error"] > p["high"] else "inside")
        assert p["side"] == side and 0 <= p["p_beats_incumbent"] <= 1
        column = problem.error[:, problem.checkpoints[p["observed"] - 1] - 1]
        assert p["standing"] == pytest.approx(float((column < p["last_error"]).double().mean()))
    # point estimates predict the same paused runs from the same state, more narrowly
    point = mp.paused_predictions(trace, problem, "point")
    assert [w["setting"] for w in point] == [p["setting"] for p in predictions]
    assert all(w["low"] <= w["median"] <= w["high"] for w in point)
    width = np.mean([np.log(p["high"] / p["low"]) for p in predictions])
    assert np.mean([np.log(w["high"] / w["low"]) for w in point]) < width
    # no model before two runs finished: nothing to say
    early = {"seed": 0, "trials": [{"setting": 1, "status": "stopped", "epochs": problem.checkpoints[0]}]}
    assert mp.paused_predictions(early, problem) == []
    rows, left = mp.summary_rows("quick", "policy", problem, {0: predictions})
    everyone = rows[0]
    assert everyone["n"] == len(predictions)
    assert everyone["below"] + everyone["inside"] + everyone["above"] == pytest.approx(1.0)
    best = int(problem.error[:, -1].argmin())
    assert [b["setting"] for b in left] == [p["setting"] for p in predictions if p["setting"] == best]


def test_unstarted_best_ranks_the_best_setting_among_those_never_started(problem) -> None:
    from gpar_bo.freeze_thaw import FreezeThawPolicy

    last = problem.checkpoints[-1]
    final = problem.error[:, -1]
    best = int(final.argmin())
    started = [int(s) for s in final.argsort(descending=True)[:8]]  # the 8 worst settings
    trace = {"seed": 0, "trials": [
        *({"setting": s, "status": "completed", "epochs": last} for s in started[:4]),
        *({"setting": s, "status": "stopped", "epochs": problem.checkpoints[0]} for s in started[4:]),
    ]}
    never = mp.unstarted_best(trace, problem)
    rest = sorted(set(range(len(final))) - set(started))
    assert never["unstarted"] == len(rest) and best in rest
    settings, Y, _ = mp.end_state(trace, problem)
    indices = FreezeThawPolicy(problem.checkpoints, seed=0).start_indices(
        problem.X[settings], Y, problem.X[rest])
    assert never["best_index"] == pytest.approx(float(indices[rest.index(best)]))
    assert never["best_rank"] == int((indices >= indices[rest.index(best)]).sum()) - 1
    assert never["best_rank_share"] == never["best_rank"] / len(rest)
    assert never["top_index"] == pytest.approx(float(indices.max()))
    top_pick = rest[int(indices.argmax())]
    assert never["top_pick_final_rank"] == int((final < final[top_pick]).sum())  # no ties here
    from scipy.stats import spearmanr
    assert never["spearman"] == pytest.approx(spearmanr(indices.numpy(), -final[rest].numpy()).statistic)
    started_best = {"seed": 0, "trials": [*trace["trials"], {"setting": best, "status": "stopped", "epochs": 1}]}
    assert mp.unstarted_best(started_best, problem) is None  # it was started: not this question
    assert mp.unstarted_best({"seed": 0, "trials": trace["trials"][4:]}, problem) is None  # no model


def test_quick_report_and_bad_input(tmp_path, monkeypatch, problem, quick_trace) -> None:
    from benchmarks.bo.freeze_thaw import GPARFreezeThaw

    class Simulated:  # the fixture's run, so that the policy is not simulated twice
        def to_json(self) -> dict:
            return quick_trace

    def simulate(method, table, seed, budget):  # noqa: ANN001, ANN202
        assert isinstance(method, GPARFreezeThaw) and table.name == problem.name
        assert (seed, budget) == (0, study.budget_of("quick", problem))
        return Simulated()

    monkeypatch.setattr(mp, "simulate", simulate)
    mp.main(["--quick", "--models", "policy", "--out", str(tmp_path)])
    for suffix in ("md", "csv", "json", "png"):
        assert (tmp_path / f"missed_promotions_quick.{suffix}").stat().st_size > 0
    saved = json.loads((tmp_path / "missed_promotions_quick.json").read_text())
    assert {(r["table"], r["model"], r["seeds"]) for r in saved["rows"]} == {("quick", "policy", 1)}
    paused = saved["top_paused"]["quick policy"]  # the table's best few, wherever left paused
    row = next(r for r in saved["rows"] if r["runs"] == f"the table's {mp.TOP} best, paused")
    sides = [p["side"] for runs in paused.values() for p in runs]
    assert row["n"] == len(sides) and row["below"] == pytest.approx(np.mean([s == "below" for s in sides]))
    with pytest.raises(SystemExit):
        mp.main(["--seeds", "0", "--out", str(tmp_path)])
    with pytest.raises(SystemExit):  # no runs file
        mp.main(["--runs", str(tmp_path / "none.jsonl"), "--out", str(tmp_path)])
    with pytest.raises(SystemExit):  # not a method of the study that runs the policy
        mp.main(["--method", "asha", "--out", str(tmp_path)])


def test_state_rows_group_paused_runs_by_checkpoint_and_standing(problem) -> None:
    def run(observed, standing, median, final, side):
        return {"observed": observed, "standing": standing, "median": median,
                "final_error": final, "side": side}

    per_seed = {
        0: [run(1, 0.0, 0.2, 0.1, "below"), run(1, 0.05, 0.1, 0.1, "inside"),
            run(1, 0.6, 0.4, 0.8, "above")],
        1: [run(1, 0.99, 0.5, 0.5, "inside"), run(2, 0.25, 0.3, 0.0, "below")],
    }
    rows = mp.state_rows("toy", "policy", problem, per_seed)
    key = {(r["observed"], r["standing"]): r for r in rows}
    assert list(key) == [(1, "0-10 %"), (1, "50-100 %"), (2, "25-50 %")]  # empty groups left out
    top = key[1, "0-10 %"]
    assert (top["n"], top["below"], top["inside"], top["above"]) == (2, 0.5, 0.5, 0.0)
    assert top["log_bias"] == pytest.approx(np.log(2) / 2)
    worst = key[1, "50-100 %"]
    assert (worst["n"], worst["above"]) == (2, 0.5) and worst["log_bias"] == pytest.approx(np.log(0.5) / 2)
    floor = float(problem.error[problem.error > 0].min()) / 2  # a final of 0, read as the model reads it
    assert key[2, "25-50 %"]["log_bias"] == pytest.approx(np.log(0.3 / floor))


def test_spread_by_first_quartile_is_the_change_after_the_first_checkpoint() -> None:
    import dataclasses

    problem = study.make_problem("quick")
    # 8 settings, two per quartile of the first value; the changes to the final are known
    first = torch.tensor([0.1, 0.1, 0.2, 0.2, 0.3, 0.3, 0.4, 0.4], dtype=torch.double)
    factor = torch.tensor([1.0, 0.5, 1.0, 0.25, 1.0, 1.0, 0.5, 0.125], dtype=torch.double)
    error = first.unsqueeze(-1).expand(8, problem.epochs).clone()
    error[:, problem.checkpoints[-1] - 1] = first * factor
    table = dataclasses.replace(problem, X=problem.X[:8], error=error, loss=error, true_final_error=None)
    spread = mp.spread_by_first_quartile("toy", table)
    change = factor.log()
    for q in range(4):
        assert spread[f"Q{q + 1}"] == pytest.approx(float(change[2 * q: 2 * q + 2].std()))


def test_one_checkpoint_at_a_time_the_last_step_given_the_prefix_is_the_final(problem, quick_trace) -> None:
    M = len(problem.checkpoints)
    best = int(problem.error[:, -1].argmin())
    trace = json.loads(json.dumps(quick_trace))  # the table's best paused one checkpoint before the end
    for trial in trace["trials"]:
        if trial["setting"] == best:
            trial["epochs"] = problem.checkpoints[-2]
    runs = mp.step_pits(trace, problem, others=1)
    top = set(problem.error[:, -1].argsort()[: mp.TOP].tolist())
    stopped = {t["setting"] for t in trace["trials"] if t["status"] == "stopped"}
    assert len(runs) == 1 + len(top & stopped) and sum(not run["best"] for run in runs) == 1
    for run in runs:
        assert len(run["steps"]) == M - run["observed"]
        assert run["best"] == (run["setting"] in top)
        assert all(0 <= pit <= 1 for pit in (run["final"], *run["steps"]))
        if run["observed"] == M - 1:  # given the whole prefix, the one step left is the final
            assert run["steps"][0] == pytest.approx(run["final"], abs=1e-9)
    assert [run["observed"] for run in runs if run["setting"] == best] == [M - 1]
    assert any(run["observed"] < M - 2 for run in runs)
    rows = mp.step_rows("quick", {0: runs})
    assert [row["n"] for row in rows] == [len(top & stopped), 1]
    later = [pit for run in runs if run["best"] for pit in run["steps"][1:]]
    assert rows[0]["later_steps_n"] == len(later)
    assert rows[0]["later_steps_below"] == pytest.approx(sum(p < 0.025 for p in later) / len(later))


def test_step_rows_count_each_group_s_tails_and_centre() -> None:
    run = lambda best, final, steps: {"setting": 0, "best": best, "observed": 1, "final": final, "steps": steps}
    runs = [run(True, 0.01, [0.3, 0.99]), run(True, 0.5, [0.9, 0.75]),
            run(False, 0.2, [0.25, 0.1, 0.6]), run(False, 0.98, [0.02])]
    best, others = mp.step_rows("t", {0: runs[:1], 1: runs[1:]})
    assert (best["n"], others["n"]) == (2, 2)
    assert (best["final_below"], best["final_above"], best["final_inside50"]) == (0.5, 0, 0.5)
    assert (best["first_step_inside50"], best["later_steps_inside50"]) == (0.5, 0.5)  # 0.75 is inside
    assert (best["later_steps_above"], best["later_steps_n"]) == (0.5, 2)
    assert (others["first_step_below"], others["first_step_inside50"]) == (0.5, 0.5)  # 0.25 is inside
    assert (others["later_steps_inside50"], others["later_steps_n"]) == (0.5, 2)
    assert (others["final_above"], others["final_inside50"]) == (0.5, 0)
