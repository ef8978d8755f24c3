"""bench/plm.py: a tiny run writes its record with both sides and the ratios."""
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives at the repository root

from bench import plm  # noqa: E402


@pytest.fixture
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_plm_tiny_run(tmp_path, keep_torch_threads, capsys, monkeypatch):
    monkeypatch.setitem(plm.SHAPE, "hidden_size", 32)
    monkeypatch.setitem(plm.SHAPE, "num_hidden_layers", 1)
    monkeypatch.setitem(plm.SHAPE, "intermediate_size", 64)
    monkeypatch.setitem(plm.SHAPE, "vocab_size", 200)
    out = tmp_path / "results"
    assert plm.main(["--steps", "1", "--warmup", "0", "--batch-size", "2", "--seq-length", "12",
                     "--threads", "1", "--out", str(out)]) == 0
    assert "ratio bertpre / transformers on bertpre's batch" in capsys.readouterr().out
    [path] = out.iterdir()
    result = json.loads(path.read_text())
    assert result["settings"]["predicted"] == 2 and result["settings"]["peer_query_rows"] == 12
    assert result["ratio"] > 0 and result["ratio_same_batch"] > 0 and len(result["bertpre"]["step_s"]) == 1
