"""A value no phase reads is not checked: with `phases:` that each set data.max_seq_length, the
top-level length (its default 128 where the file gives none) is read by no phase, so neither the
model's positions nor `model.init_from`'s are held against it; a phase's own length still is."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from test_init_from import hf_folder

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.train.setup import resolved_config

SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
             max_position_embeddings=64)


def phased(tmp_path: Path, data: Path, model: dict, *lengths: int) -> Path:
    """A config with no top-level data.max_seq_length (so its default, 128) and a phase for each
    of `lengths` (none: no phases)."""
    path = tmp_path / "phased.yaml"
    path.write_text(yaml.safe_dump({
        "model": model, "data": {"path": str(data), "max_predictions_per_seq": 5, "num_workers": 0},
        "train": {"batch_size": 8, "micro_batch_size": 8, "out": str(tmp_path / "run")},
        **({"phases": [{"steps": 4, "data": {"max_seq_length": length}} for length in lengths]} if lengths else {})}),
        encoding="utf-8")
    return path


def test_a_phased_init_from_run_is_checked_at_the_lengths_its_phases_read(tiny_data, tmp_path):
    source, _ = hf_folder("BertForPreTraining", tiny_data, tmp_path / "source")  # 64 positions
    config = load_config(phased(tmp_path, tiny_data, {"init_from": str(source)}, 32, 64))
    assert config.data.max_seq_length == 128  # the default, which no phase reads
    resolved = resolved_config(config)  # was: "data.max_seq_length (128) is larger than the 64 tokens ..."
    assert [resolved.for_phase(index).data.max_seq_length for index in range(2)] == [32, 64]
    assert resolved.model.max_position_embeddings == 64
    too_long = load_config(phased(tmp_path, tiny_data, {"init_from": str(source)}, 32, 128))
    with pytest.raises(UserError, match=r"^phases\[1\]: data.max_seq_length \(128\) is larger than the 64 positions of "):
        resolved_config(too_long)


def test_a_phased_config_is_checked_at_the_lengths_its_phases_read(tiny_data, tmp_path):
    config = load_config(phased(tmp_path, tiny_data, SHAPE, 32, 64))  # was refused for the unread 128
    assert [config.for_phase(index).data.max_seq_length for index in range(2)] == [32, 64]
    with pytest.raises(UserError, match=r"^phases\[1\]: data.max_seq_length \(128\) is larger than "
                                        r"model.max_position_embeddings \(64\)"):
        load_config(phased(tmp_path, tiny_data, SHAPE, 32, 128))
    with pytest.raises(UserError, match=r"^data.max_seq_length \(128\) is larger than"):  # no phases: read, checked
        load_config(phased(tmp_path, tiny_data, SHAPE))
