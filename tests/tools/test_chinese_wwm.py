"""Chinese whole-word masking end to end: inspect's word report, a tiny run that trains and exports."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from _tiny_data import build_chinese_data  # tests/ is on sys.path

from bertpre.config import DataConfig, load_config
from bertpre.data import load_data
from bertpre.tools.audit import format_report, inspect_data
from bertpre.tools.export import export
from bertpre.train.trainer import pretrain

pytest.importorskip("rjieba")
ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
ZH_FORTUNES = ROOT.parent / "shared" / "corpora" / "zh-fortunes.txt"


@pytest.fixture(scope="module")
def chinese_data(tmp_path_factory) -> Path:
    return build_chinese_data(tmp_path_factory.mktemp("zh") / "data")


def test_inspect_reports_whole_chinese_words(chinese_data):
    config = DataConfig(whole_word_mask=True, max_seq_length=48, max_predictions_per_seq=12)
    report = inspect_data(load_data(chinese_data), config, batches=20, batch_size=32)
    assert report.word_source == "DATA's word_starts"
    assert report.masked_words > 100 and report.partly_masked_words == 0
    assert report.masked_word_tokens / report.masked_words > 1.5
    assert 0.3 < report.masked_tokens_in_long_words / report.masked_word_tokens <= 1
    text = format_report(report)
    assert "words predicted only in part    0.00%" in text and "whole words (DATA's word_starts)" in text
    plain = inspect_data(load_data(chinese_data), DataConfig(max_seq_length=48), batches=2, batch_size=8)
    assert plain.masked_words is None and "whole words" not in format_report(plain)


def test_a_tiny_whole_word_masking_run_trains_and_exports(chinese_data, tmp_path):
    result = pretrain(load_config(TINY, [f"data.path={chinese_data}", f"train.out={tmp_path / 'run'}",
                                         "train.max_steps=4", "data.whole_word_mask=true"]))
    assert result.step == 4
    summary = export(tmp_path / "run", tmp_path / "export")
    assert (summary.out / "model.safetensors").is_file() and (summary.out / "vocab.txt").is_file()


@pytest.mark.slow
@pytest.mark.skipif(not ZH_FORTUNES.is_file(), reason="../shared/corpora is not there")
def test_whole_word_masking_on_zh_fortunes_from_the_command_line(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))

    def bertpre(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "bertpre", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)

    tokenized = bertpre("tokenize", str(ZH_FORTUNES), "--out", "data", "--vocab-size", "8000",
                        "--word-boundaries", "jieba")
    assert tokenized.returncode == 0, tokenized.stderr
    trained = bertpre("pretrain", "--config", str(TINY), "--data", "data", "--out", "run",
                      "--set", "train.max_steps=3", "--set", "data.whole_word_mask=true")
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert bertpre("export", "run", "--out", "export").returncode == 0
    inspected = bertpre("inspect", "data", "--config", "run/config.yaml", "--batches", "30")
    assert inspected.returncode == 0, inspected.stderr
    report = inspected.stdout
    assert re.search(r"^  words predicted only in part +0\.00% ", report, re.M), report
    mean_length = re.search(r"^  mean predicted word length +([0-9.]+)", report, re.M)
    assert mean_length and float(mean_length.group(1)) > 1, report
