"""`bertpre inspect` for plm/clm configs: the realized predicted share, span runs, query slots
used and memory resets of batches drawn as a run draws them."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from bertpre.config import load_config
from bertpre.data import open_data
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
