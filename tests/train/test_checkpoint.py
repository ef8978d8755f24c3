"""Checkpoints: atomic layout, exact round trip, pruning, and refusal of unsafe or foreign files."""
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from bertpre.errors import UserError
from bertpre.model.bert import BertConfig, BertForPreTraining
from bertpre.train.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    remove_partial_checkpoints,
    save_checkpoint,
)
from bertpre.train.runtime import Runtime

RUNTIME = Runtime(device=torch.device("cpu"))


def tiny_model(hidden_size: int = 32) -> BertForPreTraining:
    torch.manual_seed(0)
    return BertForPreTraining(BertConfig(vocab_size=50, hidden_size=hidden_size, num_hidden_layers=2,
                                         num_attention_heads=4, intermediate_size=64,
                                         max_position_embeddings=32))


def trained_pair(model: BertForPreTraining) -> torch.optim.AdamW:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    input_ids = torch.randint(5, 50, (2, 8))
    model(input_ids, labels=input_ids, next_sentence_label=torch.tensor([0, 1])).loss.backward()
    optimizer.step()
    return optimizer


def save(run_dir: Path, step: int, model, optimizer, keep_last: int = 2) -> Path:
    return save_checkpoint(run_dir, step, model=model, optimizer=optimizer, scaler=None,
                           trainer_state={"epoch": 1, "position": 24, "skipped_steps": 0},
                           runtime=RUNTIME, keep_last=keep_last)


def test_round_trip_restores_weights_optimizer_rng_and_position(tmp_path):
    model = tiny_model()
    optimizer = trained_pair(model)
    folder = save(tmp_path, 7, model, optimizer)
    after_save = (torch.rand(3), np.random.rand(), random.random())

    fresh = tiny_model()
    torch.manual_seed(123)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    state = load_checkpoint(folder, model=fresh, optimizer=fresh_optimizer, scaler=None, runtime=RUNTIME)
    assert (state["step"], state["epoch"], state["position"]) == (7, 1, 24)
    for (name, a), b in zip(model.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    saved_state = optimizer.state_dict()["state"]
    for key, values in fresh_optimizer.state_dict()["state"].items():
        assert torch.equal(values["exp_avg"], saved_state[key]["exp_avg"])
    assert torch.equal(torch.rand(3), after_save[0])
    assert np.random.rand() == after_save[1] and random.random() == after_save[2]


def test_layout_latest_and_pruning(tmp_path):
    model = tiny_model()
    optimizer = trained_pair(model)
    for step in (2, 4, 6):
        save(tmp_path, step, model, optimizer, keep_last=2)
    checkpoints = tmp_path / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest", "step-00000004", "step-00000006"]
    assert (checkpoints / "latest").read_text().strip() == "step-00000006"
    assert latest_checkpoint(tmp_path) == checkpoints / "step-00000006"
    names = sorted(p.name for p in (checkpoints / "step-00000006").iterdir())
    assert names == ["checksums.json", "config.json", "model.safetensors", "optimizer.pt",
                     "rng_state_0.pt", "trainer_state.json"]
    for name in ("optimizer.pt", "rng_state_0.pt"):
        torch.load(checkpoints / "step-00000006" / name, weights_only=True)
    assert json.loads((checkpoints / "step-00000006" / "config.json").read_text())["architectures"] == [
        "BertForPreTraining"]


class Payload:
    """Unpickling this would create a file: the test checks that it never happens."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("file_name", ["optimizer.pt", "rng_state_0.pt", "extra.pt"])
def test_crafted_pickle_is_refused_and_never_runs(tmp_path, file_name):
    model = tiny_model()
    optimizer = trained_pair(model)
    folder = save(tmp_path / "run", 3, model, optimizer)
    marker = tmp_path / "payload-ran"
    torch.save({"state": Payload(marker)}, folder / file_name)
    (folder / "checksums.json").unlink()  # whoever plants a payload can rewrite the checksums too

    fresh = tiny_model()
    fresh.bert.embeddings.word_embeddings.weight.data.zero_()
    with pytest.raises(UserError, match="not safe to load"):
        load_checkpoint(folder, model=fresh, optimizer=torch.optim.AdamW(fresh.parameters()),
                        scaler=None, runtime=RUNTIME)
    assert not marker.exists()
    assert int(fresh.bert.embeddings.word_embeddings.weight.count_nonzero()) == 0  # nothing loaded


def test_checkpoint_of_another_model_size_is_refused(tmp_path):
    model = tiny_model(hidden_size=32)
    folder = save(tmp_path, 1, model, trained_pair(model))
    other = tiny_model(hidden_size=16)
    with pytest.raises(UserError, match="different model .*hidden_size 32"):
        load_checkpoint(folder, model=other, optimizer=torch.optim.AdamW(other.parameters()),
                        scaler=None, runtime=RUNTIME)


def test_latest_naming_a_missing_folder_is_a_user_error(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "latest").write_text("step-00000009\n")
    with pytest.raises(UserError, match="missing or incomplete"):
        latest_checkpoint(tmp_path)
    assert latest_checkpoint(tmp_path / "elsewhere") is None


def test_partial_checkpoint_of_a_killed_save_is_removed_and_ignored(tmp_path):
    model = tiny_model()
    save(tmp_path, 2, model, trained_pair(model))
    partial = tmp_path / "checkpoints" / ".tmp-step-00000004"
    partial.mkdir()
    (partial / "optimizer.pt").write_bytes(b"half")
    assert latest_checkpoint(tmp_path).name == "step-00000002"
    assert remove_partial_checkpoints(tmp_path) == [partial]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step-00000002"]
