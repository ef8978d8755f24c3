"""bench.positions: its exact helpers, and a tiny run of the whole bench on a corpus written here."""
import json
import math
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
# The bench package lives at the repository root, which pytest does not put on sys.path.
sys.path.insert(0, str(ROOT))
from bench import positions, run_cpu  # noqa: E402
from bertpre.config import load_config  # noqa: E402


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """The bench sets torch's thread count for the whole process: put it back after each test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_variant_overrides_give_each_position_kind_and_table():
    assert positions.variant_overrides("absolute", 64) == [
        "model.position_embedding_type=absolute", "model.max_position_embeddings=64"]
    assert positions.variant_overrides("absolute-4L", 64)[1] == "model.max_position_embeddings=256"
    for name in ("transformer_xl", "rope"):
        config = load_config(ROOT / "configs" / "tiny.yaml", [*positions.model_overrides(128, 4, 4),
                                                              *positions.variant_overrides(name, 32)])
        assert config.model.position_embedding_type == name and config.model.relative_positions
        assert (config.model.hidden_size, config.model.num_hidden_layers, config.model.intermediate_size,
                config.model.max_position_embeddings) == (128, 4, 512, 32)
    assert positions.LENGTH_FACTORS == (1, 2, 4)


def test_score_cell_and_median_after_first():
    assert positions.score_cell({"mlm_loss": 6.12345, "mlm_acc": 0.0789}) == "6.123 (7.9%)"
    assert positions.score_cell({"cannot_read": "--max-seq-length 128 is longer"}) == "cannot read"
    assert positions.score_cell(None) == "cannot read"
    assert positions.median_after_first([1.0, 10.0, 30.0, 20.0]) == 20.0  # the first window left out
    assert positions.median_after_first([5.0]) == 5.0


def write_wikitext(path: Path, articles: int = 8, sentences: int = 60) -> Path:
    """Long WikiText-style articles of simple sentences, so that 4L-token sequences fill."""
    nouns = ["cat", "dog", "river", "field", "tree", "door", "bird", "farmer"]
    text = "".join(
        f" = Title {a} = \n\n "
        + " ".join(f"the {nouns[(a + i) % 8]} sees the {nouns[(a * i) % 8]} number {i % 9} ." for i in range(sentences))
        + " \n\n" for a in range(articles))
    path.write_text(text, encoding="utf-8")
    return path


def test_positions_tiny_run(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the bench's scratch folder goes here
    corpus = write_wikitext(tmp_path / "wiki.txt")
    out = tmp_path / "results"
    assert positions.main(["--corpus", str(corpus), "--vocab-size", "120", "--validation-share", "0.25",
                           "--length", "16", "--hidden-size", "32", "--layers", "2", "--heads", "4",
                           "--steps", "3", "--batch-size", "4", "--rounds", "2", "--round-steps", "1",
                           "--out", str(out)]) == 0
    [path] = out.iterdir()
    assert path.name.startswith("positions-")
    result = json.loads(path.read_text())
    assert result["command"].startswith(".venv/bin/python -m bench.")
    assert result["settings"]["eval_lengths"] == [16, 32, 64] and result["machine"]["torch_threads"] == 1
    assert set(result["validation"]) == {"16", "32", "64"}
    assert result["validation"]["64"]["mean_fill"] > 0.5  # the long articles fill the longest sequences
    variants = result["variants"]
    assert list(variants) == ["absolute", "absolute-4L", "transformer_xl", "rope"]
    assert "longer than the 16 positions" in variants["absolute"]["eval"]["32"]["cannot_read"]
    assert "cannot_read" in variants["absolute"]["eval"]["64"]
    assert variants["absolute-4L"]["max_position_embeddings"] == 64
    for name in ("absolute-4L", "transformer_xl", "rope"):
        scores = variants[name]["eval"]
        assert all(scores[length]["mlm_loss"] > 0 for length in ("16", "32", "64"))
        # every variant is scored on the same validation sequences at each length
        assert scores["64"]["sequences"] == result["validation"]["64"]["sequences"]
    for figures in variants.values():
        assert len(figures["tokens_per_s_rounds"]) == 2 and figures["tokens_per_s"] > 0
        # untrained: about the loss of a uniform guess over the vocabulary
        assert abs(figures["initial_mlm_loss"] - math.log(result["settings"]["model"]["vocab_size"])) < 1.0
        assert figures["eval"]["16"]["predictions"] > 0


def test_run_cpu_runs_positions_with_short_settings():
    command = run_cpu.command_for("positions", Path("/r"))
    assert command[1:3] == ["-m", "bench.positions"] and command[-2:] == ["--out", "/r"]
    arguments = positions.parse_args(command[3:])
    assert arguments.steps < 100 and arguments.rounds * arguments.round_steps <= 10
