"""bench.architectures at a tiny size on the sample corpus: BERT and ModernBERT at equal FLOPs
and matched parameters, WSD at ModernBERT's steps, every model scored (and probed, or the probe
recorded as not run with finetune's reason); the record's structure and finite numbers."""
import argparse
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives at the repository root
from bench import architectures  # noqa: E402
from data_prep.sample_corpus import write_sample_corpus  # noqa: E402
from tests.bench.test_objectives_quick import write_task  # noqa: E402


def test_architectures_tiny_run(tmp_path, one_thread):
    corpus = write_sample_corpus(tmp_path / "corpus", target_bytes=60_000)
    out = tmp_path / "results"
    assert architectures.main(["--corpus", f"sample={corpus}", "--seeds", "2", "--steps", "2", "--hidden", "64",
                               "--layers", "2", "--length", "32", "--window", "8", "--batch-size", "4",
                               "--vocab-size", "300", "--probe-seeds", "1",
                               "--downstream", str(write_task(tmp_path / "task")), "--out", str(out)]) == 0
    (path,) = out.iterdir()
    record = json.loads(path.read_text())
    assert record["complete"] and "training FLOPs" in record["equalised_by"]
    result = record["corpora"]["sample"]
    runs = result["per_run"]
    assert [(run["variant"], run["seed"]) for run in runs] == [
        (variant, seed) for seed in (0, 1) for variant in architectures.VARIANTS]
    assert result["steps"]["bert"] == 2 and result["steps"]["modernbert-wsd"] == result["steps"]["modernbert"]
    # matched size: within one step of the GeGLU width (3 x hidden x 8 a layer) of BERT's count
    parameters = result["parameters"]
    assert abs(parameters["modernbert"] - parameters["bert"]) <= 3 * 64 * 8 * 2 / 2
    # windowed layers cost less a token than BERT's dense ones at this width
    assert result["flops_per_token"]["modernbert"] != result["flops_per_token"]["bert"]
    for run in runs:
        assert run["steps"] == result["steps"][run["variant"]]
        assert run["schedule"] == ("wsd" if run["variant"] == "modernbert-wsd" else "linear")
        # equal FLOPs: each run within half a step's cost of BERT's budget
        assert abs(run["flops"] - result["flops_budget"]) <= run["flops"] / run["steps"] / 2 + 1e-6
        assert run["flops"] == pytest.approx(run["flops_per_token"] * run["positions"])
        scores = run["held_out"]
        assert math.isfinite(scores["mlm_loss"]) and 0 <= scores["mlm_acc"] <= 1
        assert scores["predictions"] == result["held_out_predictions"] > 0  # the same held-out set for all
        if run["variant"] == "bert":  # the probe runs on BERT; ModernBERT's may be refused, with the reason
            assert run["probe"]["split"] == "test"
        assert "probe_acc" in run["probe"] or "not built" in run["probe"]["not_run"]
    assert set(result["summary"]) == set(architectures.VARIANTS)
    assert set(result["differences"]) == {"modernbert - bert", "modernbert-wsd - modernbert", "modernbert-wsd - bert"}
    for differences in result["differences"].values():
        for entry in differences.values():
            assert math.isfinite(entry["difference"]) and entry["interval"][0] <= entry["difference"] <= entry["interval"][1]


def test_wsd_differs_from_linear_only_in_the_schedule(tmp_path):
    namespace = argparse.Namespace(length=64, window=16, global_every=2, hidden=64, layers=2, batch_size=4,
                                   lr=1e-3, warmup_share=0.1, set=[], vocab_size=300)
    linear = architectures.run_config(namespace, "modernbert", tmp_path, tmp_path / "a", 0, 50, 96)
    wsd = architectures.run_config(namespace, "modernbert-wsd", tmp_path, tmp_path / "a", 0, 50, 96)
    assert (linear.optim.schedule, wsd.optim.schedule) == ("linear", "wsd")
    assert linear.model == wsd.model and linear.data == wsd.data and linear.train == wsd.train
    assert linear.model.local_attention == 16 and linear.model.intermediate_size == 96
    assert linear.data.mlm_probability == 0.15 and linear.data.max_seq_length == 64


@pytest.mark.slow  # four tiny runs: ~10 s on 2 cores
def test_records_of_parallel_runs_merge_into_one_comparison(tmp_path, one_thread):
    corpus = write_sample_corpus(tmp_path / "corpus", target_bytes=40_000)
    shared = ["--corpus", f"sample={corpus}", "--seeds", "2", "--steps", "2", "--hidden", "64", "--length", "32",
              "--window", "8", "--batch-size", "4", "--vocab-size", "300", "--no-downstream"]
    for variant in ("bert", "modernbert-wsd"):
        assert architectures.main([*shared, "--variants", variant, "--name", variant, "--out", str(tmp_path / variant)]) == 0
    files = [next((tmp_path / variant).iterdir()) for variant in ("bert", "modernbert-wsd")]
    assert architectures.main(["--merge", *map(str, files), "--name", "both", "--out", str(tmp_path / "both")]) == 0
    merged = json.loads(next((tmp_path / "both").iterdir()).read_text())["corpora"]["sample"]
    assert sorted((run["variant"], run["seed"]) for run in merged["per_run"]) == [
        ("bert", 0), ("bert", 1), ("modernbert-wsd", 0), ("modernbert-wsd", 1)]
    assert set(merged["differences"]) == {"modernbert-wsd - bert"}
    assert merged["steps"]["bert"] == 2 and set(merged["summary"]) == {"bert", "modernbert-wsd"}
    with pytest.raises(SystemExit, match="in two records"):
        architectures.main(["--merge", str(files[0]), str(files[0]), "--out", str(tmp_path / "twice")])


@pytest.mark.slow
def test_full_fine_tuning_is_scored_and_compared_beside_the_probe(tmp_path, one_thread):
    corpus = write_sample_corpus(tmp_path / "corpus", target_bytes=60_000)
    out = tmp_path / "results"
    assert architectures.main(["--corpus", f"sample={corpus}", "--variants", "bert", "modernbert", "--seeds", "2",
                               "--steps", "2", "--hidden", "64", "--layers", "2", "--length", "32", "--window", "8",
                               "--batch-size", "4", "--vocab-size", "300", "--probe-seeds", "1", "--full-seeds", "1",
                               "--downstream", str(write_task(tmp_path / "task")), "--out", str(out)]) == 0
    (path,) = out.iterdir()
    record = json.loads(path.read_text())
    assert "--mode full" in record["downstream"]["full"]
    result = record["corpora"]["sample"]
    for run in result["per_run"]:
        assert run["full"]["split"] == "test" and 0 <= run["full"]["full_acc"] <= 1
        assert len(run["full"]["full_acc_per_seed"]) == 1
    assert "full_acc" in result["summary"]["modernbert"] and "full_acc" in result["differences"]["modernbert - bert"]
