"""A pretraining run under `model.unpad`, BERT's and ModernBERT's: the trainer's batches carry the
collator's layout, without dropout the run's losses are the padded run's, and a run stopped after
a checkpoint resumes bit for bit (packed documents masked, ModernBERT's default)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from _killed_run import pretrain_dying_after

from bertpre.config import load_config
from bertpre.train.trainer import pretrain

CONFIGS = Path(__file__).parents[2] / "configs"
# Each family's tiny config with no dropout, on rows short enough for a few seconds a run.
FAMILIES = {
    "bert": (CONFIGS / "tiny.yaml", ["model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0"]),
    "modernbert": (CONFIGS / "tiny-modernbert.yaml", [
        "train.batch_size=8", "train.micro_batch_size=4", "data.max_seq_length=48",
        "data.max_predictions_per_seq=14"]),  # a window of 8 each way in rows of up to 48
}


def run_losses(data_dir: Path, out: Path, family: str, *overrides: str, stop_after: int | None = None,
               monkeypatch: pytest.MonkeyPatch | None = None) -> list[float]:
    """`family`'s losses over 4 steps (a checkpoint each); with `stop_after`, the run dies once that
    checkpoint is saved and is then resumed."""
    config_file, own = FAMILIES[family]
    config = load_config(config_file, [f"data.path={data_dir}", f"train.out={out}", "train.log_every=1",
                                       "train.eval_every=1000", "train.save_every=1", "train.max_steps=4",
                                       "data.num_workers=0", *own, *overrides])
    if stop_after is not None:
        pretrain_dying_after(config, stop_after, monkeypatch)
    result = pretrain(config)
    rows = [json.loads(line) for line in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


@pytest.mark.parametrize("family", ["bert", "modernbert"])
def test_an_unpadded_run_gives_the_padded_runs_losses(family, tiny_data, tmp_path):
    # one document a row: the padded path has no document mask to match a packed row's
    padded = run_losses(tiny_data, tmp_path / "padded", family, "data.pack_documents=false")
    unpadded = run_losses(tiny_data, tmp_path / "unpadded", family, "data.pack_documents=false", "model.unpad=true")
    assert len(unpadded) == 4
    assert unpadded == pytest.approx(padded, abs=1e-5)


def test_an_unpadded_modernbert_run_with_packed_documents_resumes_exactly(tiny_data, tmp_path, monkeypatch):
    straight = run_losses(tiny_data, tmp_path / "straight", "modernbert", "model.unpad=true")
    resumed = run_losses(tiny_data, tmp_path / "resumed", "modernbert", "model.unpad=true",
                         stop_after=2, monkeypatch=monkeypatch)
    assert len(straight) == 4
    assert resumed == straight
