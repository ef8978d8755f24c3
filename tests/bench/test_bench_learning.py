"""bench.learning: its statistics, and the whole benchmark at a tiny size."""
import json
import statistics
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives at the repository root
from bench import learning  # noqa: E402


def test_welch_interval_matches_the_textbook_case():
    ours, theirs = [5.90, 5.93, 5.95], [5.87, 5.88, 5.90]
    result = learning.welch(ours, theirs)
    assert result["difference"] == pytest.approx(statistics.fmean(ours) - statistics.fmean(theirs))
    # Welch-Satterthwaite: (a + b)^2 / (a^2/2 + b^2/2) = 3.30 here, and t(0.975, 3.3) is about 3.05.
    half = (result["interval"][1] - result["interval"][0]) / 2
    a, b = statistics.variance(ours) / 3, statistics.variance(theirs) / 3
    assert result["df"] == pytest.approx((a + b) ** 2 / (a**2 / 2 + b**2 / 2)) == pytest.approx(3.30, abs=0.01)
    assert 3.0 * (a + b) ** 0.5 < half < 3.1 * (a + b) ** 0.5
    assert learning.welch([1.0], [2.0])["interval"] is None
    assert learning.t975(4) == 2.776 and learning.t975(1000) == pytest.approx(1.96, abs=0.01)


def write_downstream(folder: Path) -> Path:
    """train/validation/test CSV files (text,label): does the sentence mention the cat or the grain?"""
    folder.mkdir()
    for name, count in (("train", 24), ("validation", 8), ("test", 10)):
        rows = [f"the miller sees {'his cat' if i % 2 else 'the grain'} by the river,{'cat' if i % 2 else 'grain'}"
                for i in range(count)]
        (folder / f"{name}.csv").write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return folder


def test_learning_bench_tiny_run(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    corpus = tmp_path / "corpus.txt"
    words = "the river runs past the old mill where the miller keeps his grain and his cat".split()
    corpus.write_text("\n\n".join(" ".join(words[(i + j) % len(words)] for j in range(60)) + " ."
                                  for i in range(60)) + "\n", encoding="utf-8")
    size = ["--corpora", str(corpus), "--steps", "2", "--warmup", "1", "--seeds", "2", "--hidden", "32",
            "--layers", "1", "--length", "32", "--batch-size", "4", "--vocab-size", "120"]
    downstream = ["--downstream", str(write_downstream(tmp_path / "task")), "--probe-seeds", "2"]
    assert learning.main([*size, *downstream, "--out", str(tmp_path / "results")]) == 0
    (result,) = (tmp_path / "results").iterdir()
    record = json.loads(result.read_text())
    assert len(record["per_seed"]["bertpre"]) == len(record["per_seed"]["reference"]) == 2
    assert record["wall_s"] >= sum(run["train_s"] for side in record["per_seed"].values() for run in side) > 0
    for side in ("bertpre", "reference"):
        assert set(record["summary"][side]) == {"bertpre_cut", "reference_cut", "downstream"}
        for run in record["per_seed"][side]:  # 10 test examples, 2 probe seeds
            probe = run["downstream"]
            assert probe["split"] == "test" and len(probe["probe_acc_per_probe_seed"]) == 2
            assert all(round(10 * value) == pytest.approx(10 * value) for value in probe["probe_acc_per_probe_seed"])
            assert probe["probe_acc"] == pytest.approx(statistics.fmean(probe["probe_acc_per_probe_seed"]))
        accuracies = [run["downstream"]["probe_acc"] for run in record["per_seed"][side]]
        assert record["summary"][side]["downstream"]["probe_acc_mean"] == pytest.approx(statistics.fmean(accuracies))
    assert set(record["bertpre_minus_reference"]) == {"bertpre_cut", "reference_cut", "downstream_probe_acc"}
    assert all(entry["interval"] for entry in record["bertpre_minus_reference"].values())
    assert set(record["downstream"]["identity"]["files_sha256"]) == {"train.csv", "validation.csv", "test.csv"}

    # An ablation: bertpre alone with one switch, compared with the run above, which it awaits
    # (here it "lands" at the first poll).
    later = tmp_path / "later.json"
    monkeypatch.setattr(learning.time, "sleep", lambda seconds: later.exists() or later.write_text(result.read_text()))
    assert learning.main([*size, *downstream, "--no-reference", "--variant", "truncate-end", "--baseline", str(later),
                          "--name", "ablation", "--out", str(tmp_path / "ablation")]) == 0
    (ablation,) = (tmp_path / "ablation").iterdir()
    record = json.loads(ablation.read_text())
    assert record["per_seed"]["reference"] == [] and record["settings"]["variant"] == "truncate-end"
    effect = record["baseline"]["bertpre_minus_baseline_bertpre"]
    assert set(effect) == {"bertpre_cut", "reference_cut", "downstream_probe_acc"}
    assert all(entry["interval"] for entry in effect.values())
    with pytest.raises(SystemExit, match="other settings"):
        learning.main([*size, "--steps", "3", "--no-reference", "--baseline", str(result), "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="other probe settings"):
        learning.main([*size, *downstream[:2], "--no-reference", "--baseline", str(result), "--out", str(tmp_path)])


def test_variants_switch_bertpre_recipe_and_switch_back():
    import bertpre.batches.pairs as pairs
    import bertpre.train.trainer as trainer

    schedule = dict(lr=1.0, warmup_steps=10, max_steps=100)
    assert trainer.learning_rate(0, **schedule) == 0.1 and pairs._front_trims(64, 7, 0) > 0
    with learning.variant("warmup-from-zero"):
        assert [trainer.learning_rate(step, **schedule) for step in (0, 5, 10, 55)] == [0.0, 0.5, 1.0, 0.5]
    with learning.variant("truncate-end"):
        assert pairs._front_trims(64, 7, 0) == 0
    assert trainer.learning_rate(0, **schedule) == 0.1 and pairs._front_trims(64, 7, 0) > 0


def test_a_bertpre_run_stopped_early_records_nothing(tmp_path, monkeypatch):
    """SIGTERM makes the Trainer stop cleanly at a checkpoint short of max_steps; that model is no result."""
    import argparse

    import bertpre.train.checkpoint as checkpoint
    import bertpre.train.trainer as trainer

    monkeypatch.setattr(trainer, "pretrain", lambda config: None)
    args = argparse.Namespace(steps=20, variant=None, length=32, batch_size=4, hidden=32, layers=1, lr=1e-3,
                              warmup=2, set=[])
    monkeypatch.setattr(checkpoint, "latest_checkpoint", lambda out: out / "checkpoints" / "step-00000007")
    with pytest.raises(SystemExit, match="stopped at step-00000007 of 20 steps"):
        learning.train_bertpre(args, tmp_path / "data", tmp_path / "run", 0)
    monkeypatch.setattr(checkpoint, "latest_checkpoint", lambda out: None)
    with pytest.raises(SystemExit, match="stopped at step 0 of 20 steps"):
        learning.train_bertpre(args, tmp_path / "data", tmp_path / "run", 0)
