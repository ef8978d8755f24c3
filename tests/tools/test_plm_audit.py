"""`bertpre inspect` for plm/clm configs: the realized predicted share, span runs, query slots
used and memory resets of batches drawn as a run draws them."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from _tiny_data import build_tiny_data  # tests/ is on sys.path under pytest
from typer.testing import CliRunner

from bertpre.cli import app
from bertpre.config import load_config
from bertpre.data import load_mixture, open_data
from bertpre.errors import UserError
from bertpre.tools.plm_audit import consecutive_runs, format_permutation_report, inspect_segments

XLNET = ["model.architecture=xlnet", "data.pair_task=none", "data.max_seq_length=32"]


def test_runs_of_consecutive_targets():
    target = np.array([[1, 1, 0, 1, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0, 0, 1]], dtype=bool)
    assert sorted(consecutive_runs(target).tolist()) == [1, 1, 2, 3]


def test_the_xlnet_plan_predicts_its_share_exactly_and_clm_everything(tiny_data):
    data = open_data(tiny_data)
    plm = inspect_segments(data, load_config(None, [*XLNET, "data.objective=plm"]).data, batches=5, batch_size=4)
    assert plm.rows == 20 and plm.eligible_tokens > 300
    # round(n/6) a row: the realized share is within half a token a row of 1/6.
    assert abs(plm.predicted_tokens - plm.eligible_tokens / 6) <= plm.rows / 2
    assert sum(plm.span_lengths.values()) > 0 and max(plm.span_lengths) <= 32
    assert 0 < plm.memory_resets <= plm.rows
    table = format_permutation_report(plm)
    assert "plm, xlnet plan" in table and "predicted share of eligible tokens" in table
    clm = inspect_segments(data, load_config(None, [*XLNET, "data.objective=clm"]).data, batches=5, batch_size=4)
    assert clm.predicted_tokens == clm.eligible_tokens  # every text token, left to right
    with pytest.raises(UserError, match="--batches"):
        inspect_segments(data, load_config(None, [*XLNET, "data.objective=clm"]).data, batches=0)


@pytest.mark.slow
def test_inspect_cli_with_an_xlnet_config(tiny_data, tmp_path):
    config = tmp_path / "x.yaml"
    config.write_text("model: {architecture: xlnet}\ndata: {objective: plm, pair_task: none, max_seq_length: 32}\n")
    result = subprocess.run([sys.executable, "-m", "bertpre", "inspect", str(tiny_data), "--config", str(config),
                             "--batches", "3"], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    assert "mean run of consecutive targets" in result.stdout


def test_inspect_config_of_a_plm_mixture_reports_every_source_share(tiny_data, tmp_path):
    wiki = build_tiny_data(tmp_path / "wiki", documents=100, seed=1, tokenizer=tiny_data / "tokenizer")
    config = tmp_path / "mixture.yaml"
    config.write_text("model: {architecture: xlnet}\n"
                      "data:\n  objective: plm\n  pair_task: none\n  max_seq_length: 32\n  path:\n"
                      f"    - {{path: {tiny_data}, weight: 0.25}}\n    - {{path: {wiki}, weight: 0.75}}\n"
                      "train: {micro_batch_size: 8}\n")
    result = CliRunner().invoke(app, ["inspect", "--config", str(config), "--batches", "6"])
    assert result.exit_code == 0, result.output
    shares = {line.split()[2]: line for line in result.output.splitlines() if line.startswith("share of ")}
    assert list(shares) == [tiny_data.name, "wiki"]
    assert shares["wiki"].startswith("share of wiki (tokens)") and "of the epoch" in shares["wiki"]
    assert shares["wiki"].rstrip().endswith("75.00%") and shares[tiny_data.name].rstrip().endswith("25.00%")

    mixture = load_mixture([(tiny_data, 1), (wiki, 3)])
    report = inspect_segments(mixture, load_config(config).data, batches=1000, batch_size=8)  # the whole epoch
    assert [(name, weight) for name, weight, _, _ in report.sources] == [(tiny_data.name, 0.25), ("wiki", 0.75)]
    epoch_shares = [epoch for _, _, epoch, _ in report.sources]
    sampled_shares = [sampled for _, _, _, sampled in report.sources]
    assert sum(epoch_shares) == pytest.approx(1) and sum(sampled_shares) == pytest.approx(1)
    # whole documents: the epoch's share is the weight to within one document a source
    longest = max(max(len(sum(document, [])) for document in folder.train["input_ids"]) for folder in mixture.folders)
    epoch_tokens = sum(len(sum(document, [])) + 1 for folder in mixture.folders for document in folder.train["input_ids"])
    assert abs(epoch_shares[1] - 0.75) <= 2 * (longest + 1) / epoch_tokens
    # every step of the epoch sampled: the sampled share is the epoch's but for the rows that fill no step
    assert abs(sampled_shares[1] - epoch_shares[1]) <= 0.01
    single = inspect_segments(open_data(wiki), load_config(config).data, batches=6, batch_size=8)
    assert single.sources == []
    assert not [line for line in format_permutation_report(single).splitlines() if line.startswith("share of ")]
