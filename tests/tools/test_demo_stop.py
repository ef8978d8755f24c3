"""`bertpre demo` stopped by a signal while it trains (issue 51, item 7): pretraining saves its
checkpoint and returns 130 (SIGINT) or 143 (SIGTERM), and the demo exits with that code and one
line, as `pretrain` does, not 2 as for bad input."""
from __future__ import annotations

from pathlib import Path

import pytest
from _in_process import run_main  # tests/ is on sys.path under pytest

from bertpre.tools import demo
from bertpre.train.trainer import TrainResult


@pytest.mark.parametrize(("exit_code", "line"), [(130, "interrupted"), (143, "terminated")])
def test_a_signal_during_the_demos_training_exits_with_the_signals_code(
        tmp_path, monkeypatch, capsys, exit_code, line):
    trained = []

    def stopped_pretrain(config, *, resume, export_to):  # what `pretrain` returns once a signal stopped it
        trained.append(config.train.out)
        assert export_to == str(tmp_path / "demo" / "model")  # its closing lines name the demo's export
        return TrainResult(run_dir=Path(config.train.out), step=3, exit_code=exit_code)

    # the corpus and DATA are not what this test is about: skip their minutes of CPU
    monkeypatch.setattr(demo, "write_sample_corpus", lambda folder: folder)
    monkeypatch.setattr(demo, "tokenize_corpus", lambda *args, **kwargs: None)
    monkeypatch.setattr(demo, "pretrain", stopped_pretrain)
    code, out, err = run_main(["demo", "--out", tmp_path / "demo"], monkeypatch, capsys)
    assert trained == [str(tmp_path / "demo" / "run")]
    assert code == exit_code
    assert err.splitlines()[-1] == line and "error" not in err, err
    assert out == ""
