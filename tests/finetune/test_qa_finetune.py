"""`bertpre finetune --task qa` through the CLI in-process on the tiny pretrained model: a small
SQuAD-layout file of questions whose answers are spans of the tiny grammar's sentences (who acts),
full and probe mode, SQuAD v2.0, XLNet, --save-model, the predictions file, and bad input in one line."""
from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from test_finetune import ANIMALS, OBJECTS, PEOPLE, VERBS, run_main

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest


def write_squad(path: Path, count: int, seed: int, *, unanswerable: bool = False) -> Path:
    """`count` questions "who VERB OBJECT ?" on a two-sentence context; the answer is the actor
    of the sentence with that verb and object. `unanswerable`: every third question asks of a verb
    and object no sentence has (SQuAD v2.0)."""
    rng = random.Random(seed)
    paragraphs = []
    for number in range(count):
        actors = rng.sample(ANIMALS + PEOPLE, 2)
        verbs = rng.sample(VERBS, 2)
        objects = rng.sample(OBJECTS, 2)
        sentences = [f"{actor} {verb} {thing} ." for actor, verb, thing in zip(actors, verbs, objects, strict=True)]
        context = " ".join(sentences)
        asked = rng.randrange(2)
        start = context.index(sentences[asked])
        question = {"id": f"q{seed}-{number}", "question": f"who {verbs[asked]} {objects[asked]} ?",
                    "answers": [{"text": actors[asked], "answer_start": start}]}
        if unanswerable and number % 3 == 2:
            absent = next(verb for verb in VERBS if verb not in verbs)
            question.update(question=f"who {absent} {objects[asked]} ?", answers=[], is_impossible=True)
        paragraphs.append({"context": context, "qas": [question]})
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "tiny", "paragraphs": paragraphs}]}),
                    encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def squad(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("squad")
    return {"train": write_squad(folder / "train.json", 48, 0), "validation": write_squad(folder / "dev.json", 16, 1)}


def test_finetune_qa_answers_spans_and_writes_results_and_predictions(run_folder, squad, tmp_path,
                                                                      monkeypatch, capsys):
    out = tmp_path / "out"
    code, stdout, stderr = run_main(
        ["finetune", run_folder, "--task", "qa", "--train", squad["train"], "--validation", squad["validation"],
         "--out", out, "--seeds", "1", "--epochs", "3", "--lr", "0.002", "--batch-size", "8",
         "--max-seq-length", "48", "--doc-stride", "8", "--save-model"], monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    assert result["task"] == "qa" and result["language"] == "en" and result["split"] == "validation"
    assert {"exact_match", "f1"} <= set(result["metrics"])
    f1 = result["metrics"]["f1"]["per_seed"][0]
    assert 0.0 <= result["metrics"]["exact_match"]["per_seed"][0] <= f1 <= 100.0
    assert result["hyperparameters"]["max_seq_length"] == 48 and result["hyperparameters"]["lr"] == 0.002
    assert result["question_answering"]["doc_stride"] == 8
    rows = [json.loads(line) for line in (out / result["splits"]["validation"]["predictions"]).read_text().splitlines()]
    assert len(rows) == 16 and rows[0]["id"] == "q1-0" and set(rows[0]["predicted"]) == {"0"}
    contexts = json.loads(squad["validation"].read_text())["data"][0]["paragraphs"]
    assert all(row["predicted"]["0"] in paragraph["context"] for row, paragraph in zip(rows, contexts, strict=True))
    assert "exact_match" in stdout and "predictions:" in stdout
    saved = json.loads((out / "model" / "config.json").read_text())
    assert saved["architectures"] == ["BertForQuestionAnswering"]


def test_probe_mode_trains_only_the_start_and_end_layer(run_folder, squad, tmp_path, monkeypatch, capsys):
    out = tmp_path / "probe"
    code, _, stderr = run_main(
        ["finetune", run_folder, "--task", "qa", "--mode", "probe", "--train", squad["train"],
         "--validation", squad["validation"], "--out", out, "--seeds", "1", "--epochs", "1", "--batch-size", "16",
         "--max-seq-length", "48", "--doc-stride", "8"], monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    assert result["mode"] == "probe" and result["metrics"]["f1"]["per_seed"][0] is not None


def spoil(path: Path, change: str, folder: Path) -> Path:
    """A copy in `folder` of the file at `path`, its first question spoiled as `change` says."""
    document = json.loads(path.read_text())
    paragraph = document["data"][0]["paragraphs"][0]
    if change == "answer_start":
        paragraph["qas"][0]["answers"][0]["answer_start"] += 1
    elif change == "outside":
        paragraph["qas"][0]["answers"][0]["answer_start"] = len(paragraph["context"]) + 5
    elif change == "empty context":
        paragraph["context"] = ""
    else:  # a question longer than a window
        paragraph["qas"][0]["question"] = " ".join(["who"] * 80)
    spoiled = folder / f"bad-{change.replace(' ', '-')}.json"
    spoiled.write_text(json.dumps(document), encoding="utf-8")
    return spoiled


@pytest.mark.parametrize(("change", "expected"), [
    ("answer_start", "does not match its answer"), ("outside", "outside its context"),
    ("empty context", "has an empty context"),
    ("long question", "--max-seq-length 48")])
def test_bad_input_is_one_line_exit_2_and_leaves_no_out(change, expected, run_folder, squad, tmp_path,
                                                        monkeypatch, capsys):
    bad = spoil(squad["train"], change, tmp_path)
    code, _, stderr = run_main(["finetune", run_folder, "--task", "qa", "--train", bad, "--validation",
                                squad["validation"], "--out", tmp_path / "out", "--max-seq-length", "48",
                                "--doc-stride", "8"], monkeypatch, capsys)
    assert code == 2 and stderr.count("\n") == 1 and expected in stderr, stderr
    assert not (tmp_path / "out").exists()


def test_qa_options_are_refused_for_another_task(run_folder, squad, tmp_path, monkeypatch, capsys):
    code, _, stderr = run_main(["finetune", run_folder, "--train", squad["train"], "--validation",
                                squad["validation"], "--out", tmp_path / "out", "--doc-stride", "8"],
                               monkeypatch, capsys)
    assert code == 2 and "--doc-stride is an option of --task qa" in stderr, stderr


def test_an_xlnet_answers_and_saves_its_question_answering_model(tiny_data, squad, tmp_path, monkeypatch, capsys):
    """XLNet's layout (question [SEP] context [SEP] [CLS], left padding) through the command; the
    saved folder is transformers' XLNetForQuestionAnsweringSimple."""
    transformers = pytest.importorskip("transformers")
    from _xlnet_run import xlnet_run

    run = xlnet_run(tmp_path / "run", tiny_data)
    out = tmp_path / "out"
    code, _, stderr = run_main(
        ["finetune", run, "--task", "qa", "--train", squad["train"], "--validation", squad["validation"],
         "--out", out, "--seeds", "1", "--epochs", "1", "--lr", "0.002", "--batch-size", "16",
         "--max-seq-length", "48", "--doc-stride", "8", "--save-model"], monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    assert {"exact_match", "f1"} <= set(result["metrics"])
    hf, info = transformers.AutoModelForQuestionAnswering.from_pretrained(out / "model", output_loading_info=True)
    assert type(hf).__name__ == "XLNetForQuestionAnsweringSimple"
    assert all(len(keys) == 0 for keys in info.values()), info


def test_version_2_chooses_and_reports_a_null_threshold_and_a_v2_file_needs_the_option(
        run_folder, tmp_path, monkeypatch, capsys):
    train = write_squad(tmp_path / "train.json", 48, 0, unanswerable=True)
    dev = write_squad(tmp_path / "dev.json", 15, 1, unanswerable=True)
    options = ["--train", train, "--validation", dev, "--seeds", "2", "--epochs", "2", "--lr", "0.002",
               "--batch-size", "16", "--max-seq-length", "48", "--doc-stride", "8"]
    code, _, stderr = run_main(["finetune", run_folder, "--task", "qa", *options, "--out", tmp_path / "v1"],
                               monkeypatch, capsys)
    assert code == 2 and stderr.count("\n") == 1 and "--version-2" in stderr, stderr
    out = tmp_path / "v2"
    code, _, stderr = run_main(["finetune", run_folder, "--task", "qa", "--version-2", *options, "--out", out],
                               monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    assert {"exact_match", "f1", "HasAns_f1", "NoAns_f1"} <= set(result["metrics"])
    assert result["null_threshold"]["chosen_on"] == "validation" and len(result["null_threshold"]["per_seed"]) == 2
    assert result["baselines"]["no_answer"]["NoAns_exact_match"] == 100.0
    assert result["baselines"]["no_answer"]["exact_match"] == pytest.approx(100 * 5 / 15)


def test_auto_scores_chinese_contexts_with_cmrcs_character_f1():
    from bertpre.finetune.qa_data import QAExample
    from bertpre.finetune.qa_seeds import answer_language

    chinese = [QAExample("a", "谁?", "我的妹妹在2018年喂了那只猫 (cat)。", ())]
    english = [QAExample("b", "who ?", "my sister feeds the cat 猫 today .", ())]
    assert [answer_language(chinese, "auto"), answer_language(english, "auto")] == ["zh", "en"]
    assert answer_language(chinese, "en") == "en"


def test_the_same_command_reuses_its_results_and_other_qa_settings_are_another_run(
        run_folder, squad, tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    command = ["finetune", run_folder, "--task", "qa", "--train", squad["train"], "--validation", squad["validation"],
               "--out", out, "--seeds", "1", "--epochs", "1", "--batch-size", "16", "--max-seq-length", "48",
               "--doc-stride", "8"]
    assert run_main(command, monkeypatch, capsys)[0] == 0
    first = json.loads((out / "results.json").read_text())
    code, _, stderr = run_main(command, monkeypatch, capsys)
    assert code == 0 and "already done" in stderr, stderr
    assert json.loads((out / "results.json").read_text()) == first
    code, _, stderr = run_main([*command[:-1], "4"], monkeypatch, capsys)
    assert code == 2 and "doc_stride" in stderr, stderr
