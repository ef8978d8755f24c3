"""bench.objectives at a tiny size on the sample corpus: MLM, PLM, CLM and RTD (tied and GDES) at
equal FLOPs, every model scored and probed, the record's structure and finite numbers."""
import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the bench package lives at the repository root
from bench import objectives  # noqa: E402
from data_prep.sample_corpus import write_sample_corpus  # noqa: E402


def write_task(folder: Path) -> Path:
    """train/validation/test CSV files (text,label): does the sentence speak of the cat or the grain?"""
    folder.mkdir()
    for name, count in (("train", 24), ("validation", 8), ("test", 10)):
        rows = [f"the miller sees {'his cat' if i % 2 else 'the grain'} by the river,{'cat' if i % 2 else 'grain'}"
                for i in range(count)]
        (folder / f"{name}.csv").write_text("text,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return folder


def test_objectives_tiny_run(tmp_path, one_thread):
    corpus = write_sample_corpus(tmp_path / "corpus", target_bytes=60_000)
    out = tmp_path / "results"
    assert objectives.main(["--corpus", f"sample={corpus}", "--seeds", "2", "--steps", "4", "--hidden", "32",
                            "--layers", "1", "--length", "32", "--batch-size", "4", "--vocab-size", "300",
                            "--probe-seeds", "1", "--downstream", str(write_task(tmp_path / "task")),
                            "--out", str(out)]) == 0
    (path,) = out.iterdir()
    record = json.loads(path.read_text())
    assert record["complete"] and "training FLOPs" in record["equalised_by"]
    result = record["corpora"]["sample"]
    runs = result["per_run"]
    assert [(run["objective"], run["seed"]) for run in runs] == [
        (objective, seed) for seed in (0, 1) for objective in objectives.OBJECTIVES]
    assert result["steps"]["mlm"] == 4
    for run in runs:
        assert run["steps"] == result["steps"][run["objective"]]
        # equal FLOPs: each run within half a step's cost of MLM's budget
        assert abs(run["flops"] - result["flops_budget"]) <= run["flops"] / run["steps"] / 2 + 1e-6
        assert run["flops"] == pytest.approx(run["flops_per_token"] * run["positions"])
        assert run["positions"] == run["steps"] * 4 * 32 and run["train_s"] >= 0  # rounded: 0 on a fast machine
        scores = run["held_out"]
        assert set(scores) == {"mlm": {"own", "fill_in"}, "rtd": {"own"}, "rtd-gdes": {"own"}}.get(
            run["objective"], {"own", "fill_in", "xlnet_plm", "xlnet_clm"})
        assert all(math.isfinite(score["loss"]) and 0 <= score["acc"] <= 1 for score in scores.values())
        if "fill_in" in scores:
            assert scores["fill_in"]["predictions"] == runs[0]["held_out"]["fill_in"]["predictions"] > 0
        else:  # the discriminator's own: every real token judged, some replaced
            assert 0 <= scores["own"]["acc_replaced"] <= 1 and 0 < scores["own"]["replaced_share"] < 0.2
        for pooling in ("mean", "cls"):  # 10 test examples, one probe seed
            accuracy = run["probe"][pooling]["probe_acc"]
            assert run["probe"][pooling]["split"] == "test" and round(10 * accuracy) == pytest.approx(10 * accuracy)
    assert set(result["summary"]) == set(objectives.OBJECTIVES)
    # RTD pays for its generator too: fewer steps than MLM for the same FLOPs
    assert result["steps"]["rtd"] == result["steps"]["rtd-gdes"] < result["steps"]["mlm"]
    assert "xlnet_clm_loss" in result["summary"]["plm"] and "xlnet_clm_loss" not in result["summary"]["mlm"]
    assert set(result["differences"]) == {"plm-mlm", "clm-mlm", "clm-plm", "rtd-mlm", "rtd-gdes-mlm", "rtd-gdes-rtd"}
    assert set(result["differences"]["plm-mlm"]) == set(objectives.COMPARED)
    for differences in result["differences"].values():
        for entry in differences.values():
            assert math.isfinite(entry["difference"]) and entry["interval"][0] <= entry["difference"] <= entry["interval"][1]
