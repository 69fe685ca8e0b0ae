"""`benchmarks.tune_mnist`: the quick variant runs the three methods, resumes, and its records hold."""

import json

import pytest
from scipy.stats import wilcoxon

from benchmarks import tune_mnist as bench


@pytest.mark.slow  # left out of CI for time (docs/testing.md)
def test_quick_benchmark_writes_report_resumes_and_keeps_its_invariants(tmp_path):
    bench.main(["--quick", "--out", str(tmp_path)])
    runs = tmp_path / bench.RUNS_FILE
    records = [json.loads(x) for x in runs.read_text().splitlines()]
    assert sorted(r["method"] for r in records) == sorted(bench.METHODS)
    for suffix in ("md", "csv", "json", "png"):
        assert (tmp_path / f"tune_mnist.{suffix}").stat().st_size > 0
    settings = bench.QUICK
    for r in records:
        assert 0 < r["epochs_trained"] <= settings.budget
        assert r["epochs_trained_twice"] == 0
        assert r["epochs_past_decision"] == 0 and r["runs_past_decision"] == 0
        assert r["tuner_cpu_s"] > 0 and r["wall_s"] > 0
    for r in records:
        if r["method"] != "freeze_thaw":  # Ax's arms train full runs: each ends with a final value
            assert r["trials_reaching_final_epoch"] == r["trials_started"] == r["completed"]
            assert 0 <= r["best_final_val_error"] <= 1
    pauser = next(r for r in records if r["method"] == "freeze_thaw")
    assert pauser["stop_pause_verdicts"] > 0  # its decisions were checked, not skipped
    report = json.loads((tmp_path / "tune_mnist.json").read_text())
    assert report["command"].endswith("--quick --out " + str(tmp_path))
    finals = {r["method"]: r["best_final_val_error"] for r in records}
    for other in ("ax_default", "ax_percentile"):  # a missing final value (NaN) is a loss
        assert report["wins"][other] == int(finals["freeze_thaw"] < finals[other])

    bench.main(["--quick", "--out", str(tmp_path)])
    assert len(runs.read_text().splitlines()) == 3  # resumed: nothing rerun


def test_epochs_past_decision_counts_what_a_job_reported_after_its_checkpoint():
    def epoch(k):
        return {"step": k, "values": {"val_error": 0.5}}

    lines = [{"trial": 0}, {"started": {}}, epoch(1), epoch(2), {"status": "paused", "step": 2},
             {"started": {}}, epoch(3), epoch(4), {"status": "stopped", "step": 4}]
    assert bench.epochs_past_decision(lines, 2) == 0  # paused at the checkpoint of the decision
    assert bench.epochs_past_decision(lines, 3) == 1  # stopped one epoch after it
    assert bench.epochs_past_decision(lines, None) is None
    with pytest.raises(ValueError, match="not in the progress file"):
        bench.epochs_past_decision(lines, 7)


def test_a_second_writer_is_refused(tmp_path):
    from benchmarks.report import exclusive

    with exclusive(tmp_path / bench.RUNS_FILE), pytest.raises(SystemExit, match="error:"):
        bench.main(["--quick", "--out", str(tmp_path)])
    assert not (tmp_path / bench.RUNS_FILE).exists()


def test_runs_with_other_checkpoints_are_kept_and_reported_apart(tmp_path):
    from dataclasses import asdict, replace

    from gpar_bo.problems.mnist.job import TUNING_CHECKPOINTS

    def record(method, seed, settings, best):
        return {"method": method, "seed": seed, **asdict(settings),
                "checkpoints": list(settings.resolved_checkpoints), "best_final_val_error": best}

    default = bench.FULL  # what gpar-bo tune decides at
    assert default.resolved_checkpoints == TUNING_CHECKPOINTS
    every = replace(default, checkpoints=tuple(range(1, 22)))
    old = record("ax_default", 0, every, 0.1)
    del old["checkpoints"]  # written before checkpoints were recorded: every epoch
    assert bench.run_key(old)[2:] == bench.settings_key(every) != bench.settings_key(default)
    new = json.loads(json.dumps(record("ax_default", 0, default, 0.2)))  # as read back
    assert bench.run_key(new)[2:] == bench.settings_key(default)
    other = replace(default, checkpoints=(1, 7, 21))
    assert (default.stem, every.stem, other.stem) == (
        "tune_mnist", "tune_mnist_every_epoch", "tune_mnist_checkpoints_1-7-21")
    # Only the runs of the asked checkpoints are reported.
    with pytest.raises(SystemExit, match="No runs"):
        bench.report([old], default, [0], tmp_path, "cmd")


def test_epochs_trained_counts_epochs_not_checkpoint_records(tmp_path):
    def epoch(k):
        return {"step": k, "values": {"val_error": 0.5}}

    runs = tmp_path / "runs"
    runs.mkdir()
    # Checkpoints 1, 3, 7 of 7: paused at 3, resumed, completed.
    lines = [{"trial": 0}, {"started": {}}, epoch(1), epoch(3), {"status": "paused", "step": 3},
             {"started": {}}, epoch(7), {"status": "completed", "step": 7}]
    (runs / "trial_0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    summary = bench.summarise(tmp_path, 7)
    assert summary["epochs_trained"] == 7 and summary["epochs_trained_twice"] == 0
    assert summary["pauses"] == 1 and summary["resumes"] == 1
    assert summary["trials_reaching_final_epoch"] == 1 and summary["best_final_val_error"] == 0.5


@pytest.mark.parametrize("checkpoints", [["3", "1", "21"], ["1", "7"], ["0", "21"]])
def test_bad_checkpoints_are_refused_before_any_run(tmp_path, checkpoints, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--out", str(tmp_path), "--checkpoints", *checkpoints])
    assert "checkpoint" in capsys.readouterr().err
    assert not (tmp_path / bench.RUNS_FILE).exists()


def _record(method: str, seed: int, final: float) -> dict:
    """A run's record at the tiny settings of the report tests, with its best final error."""
    return {"method": method, "seed": seed, "epochs": 2, "budget": 4, "workers": 1, "max_examples": 300,
            "checkpoints": [1, 2], "best_final_val_error": final, "epochs_trained": 4,
            "trials_started": 2, "trials_reaching_final_epoch": 1, "completed": 1, "stopped": 0,
            "pauses": 1, "resumes": 0, "stop_pause_verdicts": 1, "epochs_past_decision": 0,
            "wall_s": 1.0, "tuner_cpu_s": 1.0, "best_trial": 1}


def test_report_counts_wins_and_ties_per_seed(tmp_path):
    settings = bench.Settings(epochs=2, budget=4, workers=1, max_examples=300, checkpoints=(1, 2))
    finals = {0: (0.10, 0.20, 0.10), 1: (0.30, 0.30, 0.20), 2: (0.10, 0.10, 0.40)}  # per seed, METHODS order

    records = [_record(m, s, f[i]) for s, f in finals.items() for i, m in enumerate(bench.METHODS)]
    text = bench.report(records, settings, list(finals), tmp_path, "cmd")
    result = json.loads((tmp_path / f"{settings.stem}.json").read_text())
    assert result["wins"] == {"ax_default": 1, "ax_percentile": 1}
    assert result["ties"] == {"ax_default": 2, "ax_percentile": 1}
    ours = [f[0] for f in finals.values()]
    for i, other in enumerate(bench.METHODS[1:], start=1):  # scipy's test, over the seeds' pairs
        theirs = [f[i] for f in finals.values()]
        expected = 1.0 if ours == theirs else wilcoxon(ours, theirs, alternative="less").pvalue
        assert result["p_freeze_thaw_lower"][other] == pytest.approx(expected)
    assert f"p {result['p_freeze_thaw_lower']['ax_default']:.2g} against ax_default" in text
    assert "1 of 3 against ax_default (2 tied)" in text and "**missed**" in text


def test_report_repeats_the_issue_protocol_on_blocks_of_five_seeds(tmp_path):
    settings = bench.Settings(epochs=2, budget=4, workers=1, max_examples=300, checkpoints=(1, 2))
    # Seeds 0-4: freeze-thaw lower on all five against both arms; seeds 5-9: on three;
    # seed 10 makes an incomplete block, left out.
    finals = {s: (0.1, 0.2, 0.2) for s in range(5)}
    finals |= {s: (0.1, 0.2, 0.2) if s < 8 else (0.3, 0.2, 0.2) for s in range(5, 10)}
    finals[10] = (0.1, 0.2, 0.2)

    records = [_record(m, s, f[i]) for s, f in finals.items() for i, m in enumerate(bench.METHODS)]
    text = bench.report(records, settings, list(finals), tmp_path, "cmd")
    blocks = json.loads((tmp_path / f"{settings.stem}.json").read_text())["protocol_blocks"]
    assert [b["seeds"] for b in blocks] == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]
    assert [b["wins"] for b in blocks] == [{"ax_default": 5, "ax_percentile": 5},
                                           {"ax_default": 3, "ax_percentile": 3}]
    assert [b["met"] for b in blocks] == [True, False]
    assert "Met on 1 of 2 blocks" in text
