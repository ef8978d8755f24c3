"""bench.finetune: its paired interval and its step-by-length timing."""
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import finetune  # noqa: E402


def test_paired_interval_matches_the_textbook_case():
    # differences 1, 2, 3: mean 2, sd 1, t(2) at 97.5% = 4.303
    result = finetune.paired([11.0, 12.0, 13.0], [10.0, 10.0, 10.0])
    half = 4.303 / math.sqrt(3)
    assert result["difference"] == 2.0
    assert result["interval"] == [2.0 - half, 2.0 + half]
    assert result["std_of_differences"] == 1.0
    assert finetune.paired([1.0], [2.0])["interval"] is None


def test_pairing_takes_seed_noise_shared_by_both_sides_out():
    shared = [0.20, 0.30, 0.25, 0.35]
    ours = [value + 0.01 for value in shared]
    paired = finetune.paired(ours, shared)
    welch = finetune.welch(ours, shared)
    assert paired["interval"][1] - paired["interval"][0] < 1e-9
    assert welch["interval"][1] - welch["interval"][0] > 0.1


def test_length_batches_pad_each_batch_to_its_longest_row():
    batches = finetune.length_batches(100, 5, 3, 9, steps=4, batch_size=6)
    for batch in batches:
        lengths = batch["attention_mask"].sum(1)
        assert batch["input_ids"].shape[1] == int(lengths.max())
        assert 3 <= int(lengths.min()) and int(lengths.max()) <= 9
        assert (batch["input_ids"][batch["attention_mask"] == 0] == 0).all()
        assert (batch["input_ids"][batch["attention_mask"] == 1] >= 5).all()


def test_by_length_tiny_run_writes_its_result(tmp_path):
    pytest.importorskip("transformers")
    code = finetune.main(["--by-length", "--hidden", "32", "--layers", "1", "--vocab-size", "200",
                          "--max-seq-length", "16", "--batch-size", "4", "--threads", "1", "--out", str(tmp_path)])
    assert code == 0
    (path,) = tmp_path.glob("finetune-by-length-*.json")
    rows = json.loads(path.read_text())["by_length"]
    assert [row["lengths"] for row in rows] == [[16, 16], [8, 16], [2, 5]]
    assert rows[0]["real_token_share"] == 1.0
    assert all(row["real_token_share"] < 1.0 for row in rows[1:])
    assert all(row["speed_ratio"] > 0 and len(row["seconds"]["bertpre"]) == 3 for row in rows)
