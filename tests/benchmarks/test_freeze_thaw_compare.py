"""Pairing one method's runs in two runs files by seed."""

import json

import pytest
from scipy.stats import wilcoxon

from benchmarks import freeze_thaw_compare as compare
from benchmarks.freeze_thaw_study import budget_of, make_problem


def _line(method: str, seed: int, final_regret: float, budget: int, best: float, rows: int) -> dict:
    """A run whose only completion, at the budget's last epoch, has ``final_regret``."""
    trace = {"epochs": [budget], "incumbent_error": [best + final_regret]}
    return {"method": method, "table": "quick", "rows": rows, "seed": seed, "budget": budget, "trace": trace}


@pytest.fixture
def quick():
    problem = make_problem("quick")
    return budget_of("quick", problem), problem.best_final_error, problem.X.shape[0]


def test_pairs_seeds_both_files_hold_and_tests_both_ways(quick):
    budget, best, rows = quick
    old = [0.05, 0.04, 0.06, 0.03, 0.07, 0.08, 0.02]
    new = [0.01, 0.02, 0.00, 0.01, 0.03, 0.02, 0.01]
    before = [_line("gpar_freeze_thaw", s, r, budget, best, rows) for s, r in enumerate(old)]
    after = [_line("gpar_freeze_thaw", s, r, budget, best, rows) for s, r in enumerate(new[:6])]
    after += [_line("asha", 6, 0.0, budget, best, rows),  # another method: not compared
              _line("gpar_freeze_thaw", 6, 0.0, budget + 1, best, rows)]  # another budget: not compared

    table = compare.compare(before, after, ["quick"])
    assert [r["at"] for r in table] == ["25%", "50%", "100%"]
    full = table[-1]
    assert full["seeds"] == 6
    assert full["regret_before"] == pytest.approx(sum(old[:6]) / 6)
    assert full["regret_after"] == pytest.approx(sum(new[:6]) / 6)
    assert full["p_after_less"] == pytest.approx(wilcoxon(new[:6], old[:6], alternative="less").pvalue)
    assert full["p_before_less"] == pytest.approx(wilcoxon(old[:6], new[:6], alternative="less").pvalue)
    median = float(make_problem("quick").final_error.median()) - best
    assert table[0]["regret_before"] == table[0]["regret_after"] == pytest.approx(median)  # nothing done yet
    assert table[0]["p_after_less"] == 1.0  # every pair ties


def test_cli_prints_the_table_and_rejects_bad_input(tmp_path, quick, capsys):
    budget, best, rows = quick
    paths = []
    for name, regret in (("before", 0.05), ("after", 0.01)):
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(json.dumps(_line("gpar_freeze_thaw", s, regret, budget, best, rows))
                                  for s in range(3)) + "\n")
        paths.append(str(path))
    text = compare.main([*paths, "--tables", "quick"])
    assert text.splitlines()[0].startswith("| table | at | seeds | regret_before")
    assert "| quick | 100% | 3 | 0.05 | 0.01 |" in text

    with pytest.raises(SystemExit):
        compare.main([paths[0], str(tmp_path / "missing.jsonl"), "--tables", "quick"])
    assert "no runs file at" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main([*paths, "--tables", "quick", "--method", "asha"])
    assert "no seed of asha on table 'quick'" in capsys.readouterr().err
