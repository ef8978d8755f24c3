"""An unexpected internal error (a bug) is one line and exit 1; its traceback goes to a file the
line names (issue 29)."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from bertpre.cli import main


def run_main(args: list[str], monkeypatch, capsys) -> tuple[int, str]:
    monkeypatch.setattr(sys, "argv", ["bertpre", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit:
        main()
    return exit.value.code, capsys.readouterr().err


def test_a_bug_is_one_line_exit_1_and_its_traceback_is_kept(tmp_path, monkeypatch, capsys):
    import bertpre.tools.info

    def broken(config):
        raise KeyError("hidden_size")

    monkeypatch.setattr(bertpre.tools.info, "info_report", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    code, stderr = run_main(["info", "--config", "tiny"], monkeypatch, capsys)
    assert code == 1
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: internal error (KeyError: 'hidden_size')")
    path = Path(re.search(r"the traceback is in (\S+);", lines[0]).group(1))
    assert path.parent == tmp_path
    text = path.read_text()
    assert text.startswith("bertpre info --config tiny\n")
    assert "Traceback (most recent call last)" in text and "in broken" in text


def test_a_system_refusal_on_a_named_path_is_bad_input(tmp_path, monkeypatch, capsys):
    import bertpre.tools.info

    def refused(config):
        raise FileNotFoundError(2, "No such file or directory", str(tmp_path))

    monkeypatch.setattr(bertpre.tools.info, "info_report", refused)
    code, stderr = run_main(["info", "--config", "tiny"], monkeypatch, capsys)
    assert code == 2
    assert stderr.splitlines() == [f"error: {tmp_path}: No such file or directory; check that path and run "
                                   "the command again"]


def test_an_op_without_a_deterministic_kernel_under_train_deterministic_is_bad_input(monkeypatch, capsys):
    """PyTorch's own refusal (its wording, as raised on CUDA in strict deterministic mode) is one
    line that says which setting to change, not an internal error."""
    import torch

    import bertpre.tools.info

    def refused(config):
        raise RuntimeError("nll_loss2d_forward_out_cuda_template does not have a deterministic "
                           "implementation, but you set 'torch.use_deterministic_algorithms(True)'. "
                           "You can turn off determinism just for this operation, or you can use the "
                           "'warn_only=True' option, if that's acceptable for your application.")

    monkeypatch.setattr(bertpre.tools.info, "info_report", refused)
    code, stderr = run_main(["info", "--config", "tiny"], monkeypatch, capsys)
    assert code == 2
    assert stderr.splitlines() == [
        "error: train.deterministic is true, but nll_loss2d_forward_out_cuda_template has no deterministic "
        f"CUDA kernel in torch {torch.__version__}; set train.deterministic=false to train with it (the run "
        "then resumes exactly but does not repeat bit for bit)"]


def test_other_runtime_errors_stay_internal(monkeypatch, capsys, tmp_path):
    import tempfile

    import bertpre.tools.info

    def broken(config):
        raise RuntimeError("shape '[4, -1]' is invalid for input of size 6")

    monkeypatch.setattr(bertpre.tools.info, "info_report", broken)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    code, stderr = run_main(["info", "--config", "tiny"], monkeypatch, capsys)
    assert code == 1 and "internal error (RuntimeError: shape" in stderr
