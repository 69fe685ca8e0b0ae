"""benchmarks.acquisition_speed: bad arguments are one clear line before any work."""

from __future__ import annotations

import pytest

from benchmarks import acquisition_speed


def test_repeats_below_one_is_a_clear_error(capsys: pytest.CaptureFixture[str], monkeypatch) -> None:
    monkeypatch.setattr(acquisition_speed, "partial_runs", lambda *a, **k: pytest.fail("work started"))
    with pytest.raises(SystemExit):
        acquisition_speed.main(["--repeats", "0"])
    assert "--repeats must be at least 1; got 0." in capsys.readouterr().err
