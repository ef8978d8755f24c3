"""The report of `bertpre finetune`, read from the outside (the real command, in-process): each
entity type's figures equal seqeval's report and each class's, with the confusion matrix,
scikit-learn's, on the predictions the command wrote; dev and test both scored; the epoch chosen
by dev; the positive label named; one run an --out, another refused in one line."""
from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest
from test_finetune import ANIMALS, OBJECTS, PEOPLE, run_main, write_conll, write_task

sk = pytest.importorskip("sklearn.metrics")
seqeval = pytest.importorskip("seqeval.metrics")

PROBE = ["--mode", "probe", "--set", "pooling=mean", "--lr", "0.01"]
GROUPS = {"look": ["sees", "watches"], "like": ["likes", "follows"], "get": ["feeds", "finds"]}


def write_verbs(path: Path, count: int, seed: int) -> Path:
    """Sentences of the tiny grammar labelled by their verb's group: three classes."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        label = rng.choice(list(GROUPS))
        rows.append({"text": f"{rng.choice(ANIMALS + PEOPLE)} {rng.choice(GROUPS[label])} {rng.choice(OBJECTS)} .",
                     "label": label})
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def predictions_of(out: Path, result: dict, split: str) -> list[dict]:
    return read_lines(out / result["splits"][split]["predictions"])


def test_each_entity_types_figures_equal_seqevals_report_on_dev_and_test(run_folder, tmp_path, monkeypatch, capsys):
    files = {"train": write_conll(tmp_path / "train.conll", 40, 0), "validation": write_conll(tmp_path / "dev.conll", 16, 1),
             "test": write_conll(tmp_path / "test.conll", 16, 2)}
    out = tmp_path / "ner"
    code, stdout, stderr = run_main(["finetune", run_folder, "--task", "tagging", *[
        argument for split, path in files.items() for argument in (f"--{split}", path)],
        "--out", out, "--seeds", "2", "--epochs", "2", *PROBE], monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    assert result["split"] == "test" and list(result["splits"]) == ["test", "validation"]
    assert result["metrics"] == result["splits"]["test"]["metrics"]  # the headline is the test split's
    for split, path in (("test", files["test"]), ("validation", files["validation"])):
        rows = predictions_of(out, result, split)
        gold = [row["gold"] for row in rows]
        assert gold == [list(tags) for tags in gold_tags(path)] and len(rows) == 16
        per_label = result["splits"][split]["per_label"]
        for number, seed in enumerate(result["seeds"]):
            predicted = [row["predicted"][str(seed)] for row in rows]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # seqeval warns when a type is never predicted
                reference = seqeval.classification_report(gold, predicted, output_dict=True)
                assert result["splits"][split]["metrics"]["f1"]["per_seed"][number] == pytest.approx(
                    seqeval.f1_score(gold, predicted), abs=1e-12)
            types = [name for name in reference if not name.endswith(" avg")]
            assert types == ["ANIMAL", "PERSON"] and list(per_label) == types
            for name in types:
                for ours, theirs in (("precision", "precision"), ("recall", "recall"), ("f1", "f1-score")):
                    assert per_label[name][ours]["per_seed"][number] == pytest.approx(reference[name][theirs], abs=1e-12)
                assert per_label[name]["support"] == reference[name]["support"]
    assert "per label on the test split" in stdout and "on the validation split (dev)" in stdout


def gold_tags(path: Path) -> list[list[str]]:
    sentences, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines()[2:]:  # after -DOCSTART- and its blank line
        if line.strip():
            current.append(line.split()[-1])
        else:
            sentences.append(current)
            current = []
    return [*sentences, current] if current else sentences


def test_each_class_and_the_confusion_matrix_equal_scikit_learns(run_folder, tmp_path, monkeypatch, capsys):
    files = {"train": write_verbs(tmp_path / "train.jsonl", 60, 0),
             "validation": write_verbs(tmp_path / "dev.jsonl", 24, 1),
             "test": write_verbs(tmp_path / "test.jsonl", 24, 2)}
    out = tmp_path / "verbs"
    code, stdout, stderr = run_main(["finetune", run_folder, *[
        argument for split, path in files.items() for argument in (f"--{split}", path)],
        "--out", out, "--seeds", "2", "--epochs", "3", *PROBE], monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    labels = result["labels"]
    assert labels == ["get", "like", "look"] and result["positive_label"] is None  # no binary F1 here
    for split, path in (("test", files["test"]), ("validation", files["validation"])):
        rows = predictions_of(out, result, split)
        assert [(row["text"], row["gold"]) for row in rows] == [(row["text"], row["label"]) for row in read_lines(path)]
        report = result["splits"][split]
        gold = [row["gold"] for row in rows]
        assert report["confusion_matrix"]["labels"] == labels
        for number, seed in enumerate(result["seeds"]):
            predicted = [row["predicted"][str(seed)] for row in rows]
            precision, recall, f1, support = sk.precision_recall_fscore_support(
                gold, predicted, labels=labels, zero_division=0)
            for index, name in enumerate(labels):
                assert report["per_label"][name]["precision"]["per_seed"][number] == pytest.approx(precision[index], abs=1e-12)
                assert report["per_label"][name]["recall"]["per_seed"][number] == pytest.approx(recall[index], abs=1e-12)
                assert report["per_label"][name]["f1"]["per_seed"][number] == pytest.approx(f1[index], abs=1e-12)
                assert report["per_label"][name]["support"] == support[index]
            assert report["confusion_matrix"]["per_seed"][number] == sk.confusion_matrix(
                gold, predicted, labels=labels).tolist()
            assert report["metrics"]["accuracy"]["per_seed"][number] == pytest.approx(
                sk.accuracy_score(gold, predicted), abs=1e-12)
    assert "confusion matrix on the test split (rows: gold, columns: predicted" in stdout


def test_the_binary_f1_names_its_positive_label(run_folder, tmp_path, monkeypatch, capsys):
    train, validation = write_task(tmp_path, 40, 0, "train.jsonl"), write_task(tmp_path, 20, 1, "dev.jsonl")
    out = tmp_path / "who"
    code, stdout, stderr = run_main(["finetune", run_folder, "--train", train, "--validation", validation,
                                     "--out", out, "--seeds", "1", "--epochs", "2", *PROBE], monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    assert result["positive_label"] == "person" and list(result["splits"]) == ["validation"]
    rows = predictions_of(out, result, "validation")
    assert result["metrics"]["f1"]["per_seed"][0] == pytest.approx(sk.f1_score(
        [row["gold"] for row in rows], [row["predicted"]["0"] for row in rows], pos_label="person", zero_division=0))
    assert "f1 is the F1 of the label 'person'" in stdout


def test_another_run_into_an_out_that_holds_results_is_refused_naming_the_difference(
        run_folder, tmp_path, monkeypatch, capsys):
    train, validation = write_task(tmp_path, 40, 0, "train.jsonl"), write_task(tmp_path, 20, 1, "dev.jsonl")
    other = write_task(tmp_path, 20, 2, "other.jsonl")
    out = tmp_path / "out"
    run = ["finetune", run_folder, "--train", train, "--validation", validation, "--out", out, "--epochs", "2",
           *PROBE]
    code, _, stderr = run_main([*run, "--seed", "0"], monkeypatch, capsys)
    assert code == 0, stderr
    before = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}
    checkpoint = run_folder / "checkpoints" / "step-00000030"
    for change, difference in [
        (["--lr", "0.02"], "its lr is 0.01, this run's 0.02"),
        (["--validation", other], f"its --validation {validation} has sha256 "),
        (["--test", other], f"it has no --test, this run has {other}"),
        (["--text-column", "label"], "its --text-column is the default, this run's label"),
        (["--select-by", "dev", "--test", other], "it has no --test"),
        ([], f"it fine-tuned {run_folder}, this run {checkpoint}"),
    ]:
        args = [*run, "--seed", "0", *change] if change else [*run[:1], checkpoint, *run[2:], "--seed", "0"]
        code, _, stderr = run_main(args, monkeypatch, capsys)
        assert code == 2 and len(stderr.splitlines()) == 1, stderr
        assert stderr.startswith(f"error: --out {out} holds another run's results: ") and difference in stderr, stderr
        assert stderr.rstrip().endswith("choose another --out"), stderr
        assert {path: path.read_bytes() for path in out.rglob("*") if path.is_file()} == before
    # The same run adds a seed, then reuses both results.
    code, _, stderr = run_main([*run, "--seed", "1"], monkeypatch, capsys)
    assert code == 0, stderr
    code, _, stderr = run_main([*run, "--seed", "0"], monkeypatch, capsys)
    assert code == 0 and "already done" in stderr, stderr
    assert [line["seeds"] for line in read_lines(out / "results.jsonl")] == [[0], [1]]


def test_select_by_dev_reports_the_test_split_at_the_epoch_dev_scored_best(run_folder, tmp_path, monkeypatch, capsys):
    files = [argument for split, (count, seed) in {"train": (40, 0), "validation": (20, 1), "test": (20, 2)}.items()
             for argument in (f"--{split}", write_task(tmp_path, count, seed, f"{split}.jsonl"))]
    results = {}
    for select_by in ("dev", "last"):
        out = tmp_path / select_by
        code, stdout, stderr = run_main(["finetune", run_folder, *files, "--out", out, "--seeds", "2", "--epochs", "6",
                                         "--select-by", select_by, *PROBE, "--lr", "0.03"], monkeypatch, capsys)
        assert code == 0, stderr
        results[select_by] = json.loads((out / "results.json").read_text())
    chosen, last = results["dev"], results["last"]
    selection = chosen["selection"]
    assert (selection["by"], selection["split"], selection["metric"]) == ("dev", "validation", "accuracy")
    assert last["selection"]["epochs"] == [6, 6] and "scores_by_epoch" not in last["selection"]
    for number, curve in enumerate(selection["scores_by_epoch"]):
        assert len(curve) == 6 and selection["epochs"][number] == curve.index(max(curve)) + 1
        dev = chosen["splits"]["validation"]["metrics"]["accuracy"]["per_seed"][number]
        assert dev == pytest.approx(max(curve))
        # The same seed trained the same way: its last epoch is the other run's report.
        assert last["splits"]["validation"]["metrics"]["accuracy"]["per_seed"][number] == pytest.approx(curve[-1])
        if selection["epochs"][number] == 6:
            assert chosen["metrics"]["accuracy"]["per_seed"][number] == last["metrics"]["accuracy"]["per_seed"][number]


def test_select_by_dev_needs_a_test_split(run_folder, tmp_path, monkeypatch, capsys):
    train, validation = write_task(tmp_path, 20, 0, "train.jsonl"), write_task(tmp_path, 10, 1, "dev.jsonl")
    for select_by, message in (("dev", "--select-by dev chooses the epoch by the --validation score and reports "
                                       "--test; give --test"),
                               ("best", "--select-by 'best' must be last or dev")):
        code, _, stderr = run_main(["finetune", run_folder, "--train", train, "--validation", validation,
                                    "--out", tmp_path / "out", "--select-by", select_by], monkeypatch, capsys)
        assert code == 2 and len(stderr.splitlines()) == 1 and message in stderr, stderr
    assert not (tmp_path / "out").exists()
