"""bertpre.tools.audit and `bertpre inspect`: realized masking and pair statistics on a tiny DATA."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from _tiny_data import build_tiny_data  # tests/ is on sys.path under pytest
from typer.testing import CliRunner

from bertpre.cli import app
from bertpre.config import DataConfig
from bertpre.data import load_mixture
from bertpre.data.folder import load_data
from bertpre.errors import UserError
from bertpre.tools.audit import (
    as_mixture,
    check_sampling,
    format_report,
    format_table,
    inspect_data,
    source_rows,
)


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_data(tmp_path_factory.mktemp("inspect") / "data", documents=150)


def sigma(p: float, trials: int) -> float:
    return math.sqrt(p * (1 - p) / trials)


def test_nsp_report_matches_the_recipe(data_folder):
    report = inspect_data(load_data(data_folder), DataConfig(), batches=6, batch_size=32)
    assert report.sequences == min(192, report.instances_per_epoch) > 100
    assert (
        report.predicted_tokens == report.masked_tokens + report.random_tokens + report.kept_tokens
    )
    # per-sequence rounding moves the rate by at most half a token a sequence
    rate = report.predicted_tokens / report.eligible_tokens
    assert abs(rate - 0.15) <= 0.5 * report.sequences / report.eligible_tokens
    n = report.predicted_tokens
    assert abs(report.masked_tokens / n - 0.8) <= 4.5 * sigma(0.8, n)
    assert abs(report.random_tokens / n - 0.1) <= 4.5 * sigma(0.1, n)
    # NSP: one-sentence chunks are always random-next; the others are a fair coin
    assert report.label_one_in_single_sentence_chunks == report.single_sentence_chunks
    others = report.sequences - report.single_sentence_chunks
    random_in_others = report.label_one - report.single_sentence_chunks
    assert abs(random_in_others / others - 0.5) <= 4.5 * sigma(0.5, others)
    assert report.unknown_tokens == 0 and report.truncated < report.sequences
    assert report.real_tokens / report.sequences > 20 and report.padded_positions > 0
    table = format_report(report)
    for line in (
        "mask rate",
        "predicted as [MASK]",
        "label 1 (random next)",
        "one-sentence chunks",
        "padding share",
    ):
        assert line in table


def test_sop_and_single_segment_reports(data_folder):
    data = load_data(data_folder)
    sop = inspect_data(
        data, dataclasses.replace(DataConfig(), pair_task="sop", max_seq_length=32), batches=4
    )
    assert abs(sop.label_one / sop.sequences - 0.5) <= 4.5 * sigma(0.5, sop.sequences)
    assert sop.truncated > 0
    none = inspect_data(
        data, dataclasses.replace(DataConfig(), pair_task="none"), batches=2, split="validation"
    )
    assert none.label_one == 0 and "label 1" not in format_report(none)


def test_cli_prints_the_table_and_rejects_bad_input(data_folder, tmp_path):
    runner = CliRunner()
    result = runner.invoke(app, ["inspect", str(data_folder), "--batches", "2"])
    assert result.exit_code == 0, result.output
    assert "mask rate" in result.output and "train split, pair_task nsp" in result.output
    config = tmp_path / "sop.yaml"
    config.write_text("data:\n  pair_task: sop\ntrain:\n  micro_batch_size: 8\n  batch_size: 8\n")
    result = runner.invoke(
        app, ["inspect", str(data_folder), "--config", str(config), "--batches", "1"]
    )
    assert result.exit_code == 0, result.output
    assert "pair_task sop" in result.output and "label 1 (swapped)" in result.output
    # bad input is a UserError, which `main()` turns into one line and exit code 2
    result = runner.invoke(app, ["inspect", str(tmp_path / "missing")])
    assert isinstance(result.exception, UserError)
    result = runner.invoke(app, ["inspect", str(data_folder), "--split", "test"])
    assert isinstance(result.exception, UserError)


def test_set_overrides_the_config_as_pretrain_does(data_folder, tmp_path, monkeypatch, capsys):
    from _in_process import run_main

    code, out, err = run_main(["inspect", data_folder, "--batches", "1", "--set", "data.pair_task=sop",
                               "--set", "data.mlm_probability=0.3"], monkeypatch, capsys)
    assert code == 0, err
    assert "pair_task sop" in out
    (mask_rate,) = [line for line in out.splitlines() if line.startswith("mask rate")]
    assert "30.00%, at most" in mask_rate  # the recipe's column follows --set
    code, out, err = run_main(["inspect", data_folder, "--set", "data.mlm_probabilty=0.3"],
                              monkeypatch, capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "mlm_probability" in err, err


def test_a_config_mixture_reports_each_source_share(data_folder, tmp_path):
    wiki = build_tiny_data(tmp_path / "wiki", documents=100, seed=1, tokenizer=data_folder / "tokenizer")
    config = tmp_path / "mixture.yaml"
    config.write_text(f"data:\n  path:\n    - {{path: {data_folder}, weight: 0.25}}\n"
                      f"    - {{path: {wiki}, weight: 0.75}}\n")
    result = CliRunner().invoke(app, ["inspect", "--config", str(config), "--batches", "4"])
    assert result.exit_code == 0, result.output
    shares = {line.split()[2]: line for line in result.output.splitlines() if line.startswith("share of ")}
    assert list(shares) == ["data", "wiki"]
    assert shares["wiki"].rstrip().endswith("75.00%") and "of the epoch" in shares["wiki"]
    report = inspect_data(load_mixture([(data_folder, 1), (wiki, 3)]), DataConfig(), batches=4, batch_size=32)
    (_, weight, epoch_share, sampled_share), = [row for row in report.sources if row[0] == "wiki"]
    assert weight == 0.75 and abs(epoch_share - 0.75) <= 1 / report.instances_per_epoch
    assert abs(sampled_share - 0.75) <= 4 * sigma(0.75, report.sequences)
    assert report.documents == len(load_data(data_folder).train) + len(load_data(wiki).train)
    result = CliRunner().invoke(app, ["inspect"])
    assert isinstance(result.exception, UserError) and "--config" in str(result.exception)


def test_the_helpers_shared_with_the_plm_audit(data_folder):
    check_sampling("validation", 10, 1, max_batches=10)
    for split, batches, batch_size, message in [("test", 1, 1, "^split must be train or validation, not 'test'$"),
                                                ("train", 11, 1, "^--batches must be a positive integer of at most 10, got 11$"),
                                                ("train", 0, 1, "got 0$"),
                                                ("train", 1, 0, "^the batch size must be at least 1, got 0$")]:
        with pytest.raises(UserError, match=message):
            check_sampling(split, batches, batch_size, max_batches=10)
    folder = load_data(data_folder)
    alone = as_mixture(folder)
    assert alone.folders == [folder] and alone.weights == [1.0] and alone.names == ["data"]
    assert as_mixture(alone) is alone
    assert source_rows([("wiki", 0.75, 0.7468, 0.6)], " (tokens)") == [
        ("share of wiki (tokens)", "60.00% sampled, 74.68% of the epoch", "75.00%")]
    assert format_table("title", [("a", "1", ""), ("long name", "22", "x")]) == (
        "title\n"
        "statistic  realized  expected\n"
        "---------  --------  --------\n"
        "a          1\n"
        "long name  22        x")
