"""`bertpre finetune --glue-dir / --clue-dir`: the benchmarks' own layouts (CoLA without a header,
MRPC with a byte-order mark, MNLI scored on matched and mismatched from one model, CLUE's JSON
lines with "-" labels), each task's reported metrics, the benchmark score, a rerun that does no
work, and bad input as one line with nothing written."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from test_finetune import ANIMALS, OBJECTS, PEOPLE, VERBS, run_main

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.finetune.benchmarks import CLUE, GLUE, wsc_text
from bertpre.finetune.encoding import Encoded
from bertpre.finetune.run import cut_outputs, join_encoded
from bertpre.finetune.tasks import json_records
from bertpre.train.trainer import pretrain


@pytest.fixture(scope="module")
def model(tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("benchmark-source") / "run"
    config = load_config("tiny", [
        f"data.path={tiny_data}", f"train.out={out}", "model.hidden_size=32", "model.num_hidden_layers=2",
        "model.num_attention_heads=4", "model.intermediate_size=64", "model.max_position_embeddings=64",
        "data.max_seq_length=32", "data.max_predictions_per_seq=5", "data.num_workers=0",
        "train.batch_size=8", "train.micro_batch_size=8", "train.max_steps=20", "train.precision=fp32",
        "train.save_every=20", "train.eval_every=1000", "train.log_every=10", "optim.warmup_steps=3",
        "optim.lr=1e-3"])
    pretrain(config, resume=False)
    return out


def sentence(rng: random.Random, animal: bool) -> str:
    return f"{rng.choice(ANIMALS if animal else PEOPLE)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} ."


def write_tsv(path: Path, header: list[str] | None, rows: list[list[str]], *, bom: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = ([("\ufeff" if bom else "") + "\t".join(header)] if header else []) + ["\t".join(row) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def glue_folder(root: Path, count: int = 48) -> Path:
    """CoLA, SST-2, MRPC, STS-B and MNLI as GLUE's download script lays them out, labelled by
    the tiny grammar's subjects (animal or person), with quotes in the text."""
    rng = random.Random(0)
    for split, size in (("train", count), ("dev", count // 2), ("dev_matched", count // 2),
                        ("dev_mismatched", count // 2)):
        singles = [(rng.random() < 0.5) for _ in range(size)]
        pairs = [(rng.random() < 0.5, rng.random() < 0.5) for _ in range(size)]
        if split in ("train", "dev"):
            write_tsv(root / "CoLA" / f"{split}.tsv", None,
                      [["gj04", str(int(animal)), "" if animal else "*", '"' + sentence(rng, animal)]
                       for animal in singles])
            write_tsv(root / "SST-2" / f"{split}.tsv", ["sentence", "label"],
                      [[sentence(rng, animal), str(int(animal))] for animal in singles])
            write_tsv(root / "MRPC" / f"{split}.tsv", ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                      [[str(int(a == b)), "1", "2", sentence(rng, a), sentence(rng, b)] for a, b in pairs], bom=True)
            rows = [[str(n), "main", "f", "2012", str(n), "none", "none", sentence(rng, a), sentence(rng, b),
                     f"{(4.0 if a == b else 1.0) + rng.random():.3f}"] for n, (a, b) in enumerate(pairs)]
            if split == "train":
                rows.append(["broken", "row"])  # as QQP's train.tsv has a few
            write_tsv(root / "STS-B" / f"{split}.tsv", ["index", "genre", "filename", "year", "old_index",
                                                        "source1", "source2", "sentence1", "sentence2", "score"], rows)
        if split != "dev":
            header = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse", "sentence2_binary_parse",
                      "sentence1_parse", "sentence2_parse", "sentence1", "sentence2",
                      *(["label1"] if split == "train" else [f"label{n}" for n in range(1, 6)]), "gold_label"]
            labels = {(True, True): "entailment", (False, False): "entailment", (True, False): "contradiction",
                      (False, True): "neutral"}
            width = len(header) - 3
            write_tsv(root / "MNLI" / f"{split}.tsv", header,
                      [[str(n), *["x"] * 7, sentence(rng, a), sentence(rng, b),
                        *[labels[a, b]] * (width - 8), labels[a, b]] for n, (a, b) in enumerate(pairs)])
    return root


def clue_folder(root: Path, count: int = 40) -> Path:
    rng = random.Random(1)
    for split, size in (("train", count), ("dev", count // 2)):
        def lines(make, size: int = size) -> str:
            return "".join(json.dumps(make(), ensure_ascii=False) + "\n" for _ in range(size))

        def afqmc():
            a, b = rng.random() < 0.5, rng.random() < 0.5
            return {"sentence1": sentence(rng, a), "sentence2": sentence(rng, b), "label": str(int(a == b))}

        def tnews():
            animal = rng.random() < 0.5
            return {"label": "101" if animal else "102", "label_desc": "x", "sentence": sentence(rng, animal),
                    "keywords": ""}

        def cmnli():
            a, b = rng.random() < 0.5, rng.random() < 0.5
            return {"sentence1": sentence(rng, a), "sentence2": sentence(rng, b),
                    "label": "-" if rng.random() < 0.1 else ("entailment" if a == b else "contradiction")}

        for name, make in (("afqmc", afqmc), ("tnews", tnews), ("cmnli", cmnli)):
            folder = root / f"{name}_public"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{split}.json").write_text(lines(make), encoding="utf-8")
    return root


PROBE = ["--mode", "probe", "--seeds", "2", "--epochs", "5", "--lr", "0.01"]


def test_glue_reports_each_task_and_the_glue_score_and_a_rerun_does_no_work(
        model, tmp_path, monkeypatch, capsys):
    glue = glue_folder(tmp_path / "glue_data")
    out = tmp_path / "glue-out"
    code, stdout, stderr = run_main(["finetune", model, "--glue-dir", glue, "--out", out, *PROBE],
                                    monkeypatch, capsys)
    assert code == 0, stderr
    assert "STS-B/train.tsv: skipped 1 row (malformed)" in stderr
    summary = json.loads((out / "results.json").read_text())
    assert summary["benchmark"] == "glue" and summary["seeds"] == [0, 1]
    assert list(summary["tasks"]) == ["cola", "sst2", "mrpc", "stsb", "mnli"]  # found without --tasks
    tasks = summary["tasks"]
    assert tasks["stsb"]["task"] == "regression" and tasks["stsb"]["data"]["examples"]["train"] == 48
    assert tasks["cola"]["data"]["examples"] == {"train": 48, "validation": 24}
    assert tasks["mnli"]["data"]["examples"] == {"train": 48, "validation_m": 24, "validation_mm": 24}
    assert {"accuracy_m", "accuracy_mm"} <= set(tasks["mnli"]["metrics"])
    assert tasks["mnli"]["labels"] == ["contradiction", "entailment", "neutral"]
    assert set(tasks["mnli"]["baselines"]["majority"]) >= {"accuracy_m", "accuracy_mm"}
    reported = {"cola": ["mcc"], "sst2": ["accuracy"], "mrpc": ["f1", "accuracy"], "stsb": ["pearson", "spearman"],
                "mnli": ["accuracy_m", "accuracy_mm"]}
    assert summary["reported"] == reported
    for seed in range(2):
        expected = {name: np.mean([tasks[name]["metrics"][metric]["per_seed"][seed] for metric in metrics])
                    for name, metrics in reported.items()}
        for name, value in expected.items():
            assert summary["metrics"][name]["per_seed"][seed] == pytest.approx(value)
        assert summary["metrics"]["score"]["per_seed"][seed] == pytest.approx(np.mean(list(expected.values())))
    assert summary["metrics"]["score"]["std"] == pytest.approx(
        np.std(summary["metrics"]["score"]["per_seed"], ddof=1))
    assert "GLUE score" in stdout and "mnli" in stdout
    assert len((out / "results.jsonl").read_text().splitlines()) == 5

    code, stdout, stderr = run_main(["finetune", model, "--glue-dir", glue, "--out", out, *PROBE],
                                    monkeypatch, capsys)
    assert code == 0, stderr
    assert stderr.count("already done") == 5 and "seed 0:" not in stderr
    assert json.loads((out / "results.json").read_text())["metrics"] == summary["metrics"]


def test_clue_skips_rows_labelled_dash_and_scores_accuracy(model, tmp_path, monkeypatch, capsys):
    clue = clue_folder(tmp_path / "clue")
    out = tmp_path / "clue-out"
    code, stdout, stderr = run_main(["finetune", model, "--clue-dir", clue, "--tasks", "tnews,cmnli",
                                     "--out", out, *PROBE], monkeypatch, capsys)
    assert code == 0, stderr
    assert "cmnli_public/train.json: skipped" in stderr and "(labelled -)" in stderr
    summary = json.loads((out / "results.json").read_text())
    assert summary["benchmark"] == "clue" and list(summary["tasks"]) == ["tnews", "cmnli"]
    cmnli = summary["tasks"]["cmnli"]
    dashes = sum(json.loads(line)["label"] == "-"
                 for line in (clue / "cmnli_public" / "train.json").read_text().splitlines())
    assert dashes and cmnli["data"]["examples"]["train"] == 40 - dashes
    assert "-" not in cmnli["labels"]
    assert summary["metrics"]["score"]["mean"] == pytest.approx(
        np.mean([summary["tasks"][name]["metrics"]["accuracy"]["mean"] for name in ("tnews", "cmnli")]))
    assert "CLUE score" in stdout


def test_benchmark_readers(tmp_path):
    glue = glue_folder(tmp_path / "glue", count=8)
    cola = GLUE.tasks["cola"].read(glue / "CoLA" / "train.tsv")[0]
    assert len(cola) == 8 and cola.texts[0].startswith('"') and set(cola.labels) <= {"0", "1"}
    mrpc = GLUE.tasks["mrpc"].read(glue / "MRPC" / "train.tsv")[0]
    assert len(mrpc) == 8 and mrpc.pairs is not None
    text, _ = wsc_text({"text": "小明打了小红，他很后悔。", "label": "true",
                        "target": {"span1_index": 0, "span1_text": "小明", "span2_index": 7, "span2_text": "他"}})
    assert text == "_小明_打了小红，[他]很后悔。"
    csl = tmp_path / "csl.json"
    csl.write_text(json.dumps({"id": 1, "abst": "摘要", "keyword": ["甲", "乙"], "label": "1"}) + "\n",
                   encoding="utf-8")
    examples, skipped = CLUE.tasks["csl"].read(csl)
    assert (examples.texts, examples.pairs, examples.labels, skipped) == (["甲 乙"], ["摘要"], ["1"], 0)


def test_outputs_of_joined_splits_are_cut_back_apart():
    first = Encoded([[1, 2], [1, 3, 4]], [[0, 0], [0, 0, 0]], [[0, -100], [1, 1, -100]],
                    word_counts=[1, 3], kept_words=[1, 2])
    second = Encoded([[1]], [[0]], [[2]], word_counts=[2], kept_words=[1])
    joined = join_encoded([first, second])
    assert len(joined) == 3 and joined.kept_words == [1, 2, 1]
    parts = cut_outputs(np.arange(4), [first, second], "tagging")
    assert [part.tolist() for part in parts] == [[0, 1, 2], [3]]
    parts = cut_outputs(np.arange(3), [first, second], "classification")
    assert [part.tolist() for part in parts] == [[0, 1], [2]]


@pytest.mark.parametrize(("args", "message"), [
    (["--glue-dir", "{glue}", "--tasks", "sst2,nope"], "'nope' is not a GLUE task"),
    (["--glue-dir", "{glue}", "--tasks", "rte"], "has no RTE folder for the task rte"),
    (["--glue-dir", "{empty}"], "holds none of the GLUE task folders"),
    (["--glue-dir", "{glue}/missing"], "no such folder"),
    (["--glue-dir", "{glue}", "--tasks", "mnli", "--train", "x.csv"], "leave out --train"),
    (["--glue-dir", "{glue}", "--clue-dir", "{glue}"], "not both"),
    (["--tasks", "sst2", "--train", "x.csv", "--validation", "y.csv"], "--tasks chooses tasks of --glue-dir"),
    (["--glue-dir", "{glue}", "--tasks", "sst2", "--save-model"], "--save-model keeps one model"),
    (["--glue-dir", "{broken}", "--tasks", "mnli"], "dev_mismatched.tsv: no such file"),
    (["--glue-dir", "{broken}", "--tasks", "sst2"], "has no column 'label'"),
])
def test_bad_benchmark_input_is_one_line_and_writes_nothing(
        args, message, model, tmp_path, monkeypatch, capsys):
    glue = glue_folder(tmp_path / "glue", count=8)
    (tmp_path / "empty").mkdir()
    broken = tmp_path / "broken"
    write_tsv(broken / "MNLI" / "train.tsv", ["sentence1", "sentence2", "gold_label"], [["a", "b", "neutral"]])
    write_tsv(broken / "MNLI" / "dev_matched.tsv", ["sentence1", "sentence2", "gold_label"], [["a", "b", "neutral"]])
    write_tsv(broken / "SST-2" / "train.tsv", ["sentence", "polarity"], [["a", "1"]])
    write_tsv(broken / "SST-2" / "dev.tsv", ["sentence", "polarity"], [["a", "1"]])
    out = tmp_path / "out"
    filled = [part.format(glue=glue, empty=tmp_path / "empty", broken=broken) for part in args]
    code, _, stderr = run_main(["finetune", model, "--out", out, *filled], monkeypatch, capsys)
    assert code == 2
    assert message in stderr and len(stderr.strip().splitlines()) == 1, stderr
    assert not out.exists()


def test_a_benchmark_sweep_logs_each_task_and_the_score_at_the_checkpoint_step(
        model, tmp_path, monkeypatch, capsys):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    clue = clue_folder(tmp_path / "clue")
    code, stdout, stderr = run_main(["finetune", model, "--clue-dir", clue, "--tasks", "afqmc,tnews",
                                     "--out", tmp_path / "sweep", "--checkpoints", "all", *PROBE],
                                    monkeypatch, capsys)
    assert code == 0, stderr
    events = EventAccumulator(str(model / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert {"downstream/clue_probe/score", "downstream/clue_probe/tnews", "downstream/tnews_probe/accuracy",
            "downstream/afqmc_probe/accuracy", "downstream_std/clue_probe/score"} <= tags
    assert [event.step for event in events.Scalars("downstream/clue_probe/score")] == [20]
    summary = json.loads((tmp_path / "sweep" / "results.json").read_text())
    assert events.Scalars("downstream/clue_probe/score")[0].value == pytest.approx(summary["metrics"]["score"]["mean"])
    assert "CLUE score" in stdout


def test_json_records_number_the_lines_skip_blank_ones_and_name_a_bad_one(tmp_path):
    path = tmp_path / "train.json"
    assert list(json_records(['{"a": 1}', "  ", '{"b": "x"}'], path)) == [(1, {"a": 1}), (3, {"b": "x"})]
    with pytest.raises(UserError, match=r"train.json: line 2 is not valid JSON \("):
        list(json_records(['{"a": 1}', "{oops"], path))
    with pytest.raises(UserError, match=r"train.json: line 1 is not a JSON object$"):
        list(json_records(["[1, 2]"], path))
