"""bench.objectives at a tiny size on the sample corpus: MLM, PLM, CLM and RTD (tied and GDES) at
equal FLOPs, every model scored, probed and fine-tuned, the record's structure and finite numbers;
a kept --work folder reused by a later invocation."""
import json
import math
import re
import shutil
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
                            "--probe-seeds", "1", "--full-seeds", "1", "--full-epochs", "1",
                            "--rtd-set", "objective.generator_size=0.5",
                            "--task", f"cat={write_task(tmp_path / 'task')}", "--out", str(out)]) == 0
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
        # the code each run was trained with: one version here
        assert re.fullmatch(r"[0-9a-f]{12}", run["code"]) and result["code_versions"] == [run["code"]]
        # --rtd-set reaches the replaced-token runs alone, and names them
        replaced_token = run["objective"] in objectives.REPLACED_TOKEN
        assert run["identity"].get("rtd_set") == (["objective.generator_size=0.5"] if replaced_token else None)
        scores = run["held_out"]
        assert set(scores) == {"mlm": {"own", "fill_in"}, "rtd": {"own"}, "rtd-gdes": {"own"}}.get(
            run["objective"], {"own", "fill_in", "xlnet_plm", "xlnet_clm"})
        assert all(math.isfinite(score["loss"]) and 0 <= score["acc"] <= 1 for score in scores.values())
        if "fill_in" in scores:
            assert scores["fill_in"]["predictions"] == runs[0]["held_out"]["fill_in"]["predictions"] > 0
        else:  # the discriminator's own: every real token judged, some replaced
            assert 0 <= scores["own"]["acc_replaced"] <= 1 and 0 < scores["own"]["replaced_share"] < 0.2
            assert 0 <= scores["own"]["auc"] <= 1
        assert set(run["downstream"]["cat"]) == {"probe_mean", "probe_cls", "full"}
        for entry in run["downstream"]["cat"].values():  # 10 test examples, one seed
            accuracy = entry["score"]
            assert entry["split"] == "test" and entry["metric"] == "accuracy" and len(entry["per_seed"]) == 1
            assert round(10 * accuracy) == pytest.approx(10 * accuracy)
    assert set(result["summary"]) == set(objectives.OBJECTIVES)
    # RTD pays for its generator too: fewer steps than MLM for the same FLOPs
    assert result["steps"]["rtd"] == result["steps"]["rtd-gdes"] < result["steps"]["mlm"]
    assert "xlnet_clm_loss" in result["summary"]["plm"] and "xlnet_clm_loss" not in result["summary"]["mlm"]
    assert set(result["differences"]) == {"plm-mlm", "clm-mlm", "clm-plm", "rtd-mlm", "rtd-gdes-mlm", "rtd-gdes-rtd"}
    assert set(result["differences"]["plm-mlm"]) == {"cat_probe_mean", "cat_probe_cls", "cat_full", "fill_in_loss",
                                                     "fill_in_acc"}
    for differences in result["differences"].values():
        for entry in differences.values():
            assert math.isfinite(entry["difference"]) and entry["interval"][0] <= entry["difference"] <= entry["interval"][1]


def write_squad(path: Path, count: int) -> Path:
    """`count` questions "who eats THING ?" on one-sentence contexts; the answer is the eater."""
    eaters, things = ("the miller", "the cat", "a king", "the grain"), ("bread", "fish", "corn", "cheese")
    paragraphs = []
    for number in range(count):
        eater, thing = eaters[number % 4], things[number // 4 % 4]
        context = f"{eater} eats {thing} by the river ."
        paragraphs.append({"context": context, "qas": [{"id": f"q{number}", "question": f"who eats {thing} ?",
                                                         "answers": [{"text": eater, "answer_start": 0}]}]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "tiny", "paragraphs": paragraphs}]}))
    return path


def write_pair_task(folder: Path) -> Path:
    """word,definition,label CSV files: does the word have this meaning?"""
    folder.mkdir()
    meanings = {"cat": "a small animal that purrs", "grain": "seeds of a cereal plant"}
    for name, count in (("train", 16), ("validation", 4), ("test", 6)):
        rows = [f"{word},{meanings[word] if i % 2 else meanings[other]},{'yes' if i % 2 else 'no'}"
                for i, (word, other) in enumerate([("cat", "grain"), ("grain", "cat")] * (count // 2))]
        (folder / f"{name}.csv").write_text("word,definition,label\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return folder


def test_objectives_kept_work_is_reused(tmp_path, one_thread, capsys):
    """A --work folder keeps the tokenized corpus, each run and its scores: the same command again
    trains nothing; tasks added later (a pair, QA: F1) are scored on the kept runs alone."""
    corpus = write_sample_corpus(tmp_path / "corpus", target_bytes=40_000)
    qa = tmp_path / "qa"
    qa.mkdir()
    for name, count in (("train", 16), ("dev", 4), ("test", 4)):
        write_squad(qa / f"{name}.json", count)
    base = ["--corpus", f"sample={corpus}", "--objectives", "mlm", "--seeds", "1", "--steps", "3", "--hidden", "32",
            "--layers", "1", "--length", "32", "--batch-size", "4", "--vocab-size", "300", "--probe-seeds", "1",
            "--full-seeds", "0", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "results")]
    assert objectives.main([*base, "--task", f"cat={write_task(tmp_path / 'task')}"]) == 0
    run = tmp_path / "work" / "sample" / "mlm-0"
    first = json.loads((run / "record.json").read_text())
    assert set(first["downstream"]["cat"]) == {"probe_mean", "probe_cls"}  # --full-seeds 0: no full
    checkpoints = sorted(path.stat().st_mtime_ns for path in run.rglob("*.safetensors"))
    pair = write_pair_task(tmp_path / "pair")
    assert objectives.main([*base, "--task", f"cat={tmp_path / 'task'}", "--task", f"pair={pair}",
                            "--task", f"qa={qa}"]) == 0
    second = json.loads((run / "record.json").read_text())
    assert sorted(path.stat().st_mtime_ns for path in run.rglob("*.safetensors")) == checkpoints  # not retrained
    assert second["downstream"]["cat"] == first["downstream"]["cat"]  # kept, not scored again
    assert second["downstream"]["qa"]["probe"]["metric"] == "f1" and 0 <= second["downstream"]["qa"]["probe"]["score"] <= 100
    assert objectives.read_task(f"pair={pair}").files().text_pair_column == "definition"
    for pooling in ("probe_mean", "probe_cls"):  # 6 pair examples scored
        assert round(6 * second["downstream"]["pair"][pooling]["score"]) == pytest.approx(
            6 * second["downstream"]["pair"][pooling]["score"])
    # a run stopped from outside after a checkpoint (no record yet) continues from it, not from scratch
    (run / "record.json").unlink()
    assert objectives.main([*base, "--no-downstream"]) == 0
    third = json.loads((run / "record.json").read_text())
    assert third["resumed"] and third["held_out"] == first["held_out"] and third["steps"] == first["steps"]
    assert sorted(path.stat().st_mtime_ns for path in run.rglob("*.safetensors")) == checkpoints
    # --report trains nothing and summarises the kept runs: one of two seeds here, so incomplete
    out = tmp_path / "report"
    assert objectives.main([*base[:base.index("--seeds") + 1], "2", *base[base.index("--seeds") + 2:base.index("--out")],
                            "--out", str(out), "--report", "--no-downstream"]) == 0
    assert not (run.parent / "mlm-1").exists()
    (path,) = out.iterdir()
    report = json.loads(path.read_text())
    assert not report["complete"] and [r["seed"] for r in report["corpora"]["sample"]["per_run"]] == [0]
    # a kept run from other code (or from before the code was recorded) is reported, and said
    third.pop("code")
    (run / "record.json").write_text(json.dumps(third))
    (run.parent / "mlm-1").mkdir()
    (run.parent / "mlm-1" / "record.json").write_text(json.dumps(
        {**third, "seed": 1, "code": "0" * 12, "identity": {**third["identity"], "seed": 1}}))
    path.unlink()
    assert objectives.main([*base[:base.index("--seeds") + 1], "2", *base[base.index("--seeds") + 2:base.index("--out")],
                            "--out", str(out), "--report", "--no-downstream"]) == 0
    said = capsys.readouterr().out
    assert "trained by 2 versions of bertpre's code (000000000000, unrecorded); a rerun differs seed by seed" in said
    (path,) = out.iterdir()
    assert json.loads(path.read_text())["corpora"]["sample"]["code_versions"] == ["000000000000", "unrecorded"]
    shutil.rmtree(run.parent / "mlm-1")
    # another shape is not mistaken for the kept run
    with pytest.raises(SystemExit, match="other settings"):
        objectives.main([*base[:base.index("--hidden") + 1], "48", *base[base.index("--hidden") + 2:], "--no-downstream"])
