"""`bertpre finetune --task qa` through the CLI in-process on the tiny pretrained model: a small
SQuAD-layout file of questions whose answers are spans of the tiny grammar's sentences (who acts),
full and probe mode, SQuAD v2.0, XLNet, --save-model, the predictions file, and bad input in one line."""
from __future__ import annotations

import json
import random
import shlex
from pathlib import Path

import pytest
from test_finetune import ANIMALS, OBJECTS, PEOPLE, VERBS, run_main

from bertpre.finetune.qa_data import read_qa_file
from bertpre.finetune.qa_windows import default_doc_stride, encode_qa_windows
from bertpre.finetune.source import load_encoder
from bertpre.model.cost import ForwardShape, estimate_inference_memory, estimate_memory, readable
from bertpre.train import memory

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
    # each seed's best spans, best first; the answer (SQuAD v1.1: never "no answer") is the first
    n_best = [json.loads(line) for line in (out / result["splits"]["validation"]["n_best"]).read_text().splitlines()]
    assert [row["id"] for row in n_best] == [row["id"] for row in rows]
    assert all(row["n_best"]["0"][0]["text"] == answer["predicted"]["0"] for row, answer in zip(n_best, rows, strict=True))
    assert all(1 <= len(row["n_best"]["0"]) <= 20 and "null_score_difference" not in row for row in n_best)
    scores = [span["score"] for span in n_best[0]["n_best"]["0"]]
    assert scores == sorted(scores, reverse=True)
    assert json.loads((out / "results.jsonl").read_text())["splits"] == result["splits"]
    table = stdout.splitlines()
    assert table[1].split() == ["metric", "mean", "±", "std", "min", "max", "no", "answer", "per", "seed"]
    exact = f"{result['metrics']['exact_match']['mean']:.4f}"  # one seed: no std; answering nothing scores 0
    assert table[2].split() == ["exact_match", exact, "-", exact, exact, "0.0000", exact]
    assert "exact match and F1 in percent (SQuAD's normalisation); the baseline answers nothing" in stdout
    assert f"predictions: {out / result['splits']['validation']['predictions']}" in stdout
    assert f"n-best: {out / result['splits']['validation']['n_best']}" in stdout
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


def longest_window(source: Path, files: list[Path], max_seq_length: int, doc_stride: int) -> tuple[object, int]:
    """The encoder's config and the longest window the command cuts from `files`."""
    encoder = load_encoder(source)
    windows = [encode_qa_windows(encoder.tokenizer, read_qa_file(path), max_seq_length, doc_stride,
                                 config=encoder.config) for path in files]
    return encoder.config, max(len(ids) for split in windows for ids in split.input_ids)


def test_a_batch_of_windows_that_would_not_fit_is_refused_before_training(run_folder, squad, tmp_path,
                                                                          monkeypatch, capsys):
    config, length = longest_window(run_folder, [squad["train"], squad["validation"]], 48, 8)
    cost = estimate_memory(config, length, 0.0, "fp32", memory_length=0, query_rows=0)
    model = cost.weights + cost.gradients + cost.adamw_state
    need = model + 16 * cost.activations_per_sequence
    monkeypatch.setattr(memory, "device_memory", lambda device: (need - 1, "this machine has"))
    command = ["finetune", run_folder, "--task", "qa", "--train", squad["train"], "--validation", squad["validation"],
               "--out", tmp_path / "out", "--seeds", "1", "--batch-size", "16", "--max-seq-length", "48",
               "--doc-stride", "8", "--precision", "fp32"]
    code, stdout, stderr = run_main(command, monkeypatch, capsys)
    assert code == 2 and stdout == "" and "seed 0" not in stderr, stderr
    assert stderr.splitlines()[-1] == (
        f"error: fine-tuning a batch of 16 windows of {length} tokens needs at least {readable(need)} "
        f"({readable(model)} of weights, gradients and AdamW state, "
        f"{readable(16 * cost.activations_per_sequence)} of activations in fp32), but this machine has "
        f"{readable(need - 1)}; lower --batch-size or --max-seq-length")
    assert not (tmp_path / "out").exists()

    # A probe reads a batch of 16 windows through the frozen encoder without gradients: a machine
    # one byte short of that forward's peak is refused too.
    answering = estimate_inference_memory(config, ForwardShape(batch_size=16, seq_length=length, predicted_rows=0),
                                          "fp32").total
    assert answering <= need
    monkeypatch.setattr(memory, "device_memory", lambda device: (answering - 1, "this machine has"))
    code, _, stderr = run_main([*command, "--mode", "probe"], monkeypatch, capsys)
    assert code == 2 and "seed 0" not in stderr, stderr
    assert stderr.splitlines()[-1].startswith(f"error: probing a batch of 16 windows of {length} tokens needs about "
                                              f"{readable(answering)}")


def jsonl_of(path: Path, folder: Path, change: str) -> Path:
    """The SQuAD-layout file at `path` as JSON lines (Hugging Face's layout), its first record
    spoiled as `change` says."""
    records = [{"id": qa["id"], "context": paragraph["context"], "question": qa["question"],
                "answers": {"text": [answer["text"] for answer in qa["answers"]],
                            "answer_start": [answer["answer_start"] for answer in qa["answers"]]}}
               for paragraph in json.loads(path.read_text())["data"][0]["paragraphs"] for qa in paragraph["qas"]]
    first = records[0]
    if change == "answer_start":
        first["answers"]["answer_start"][0] += 1
    elif change == "outside":
        first["answers"]["answer_start"][0] = len(first["context"]) + 5
    elif change == "empty context":
        first["context"] = " "
    elif change == "unanswerable":
        first["answers"] = {"text": [], "answer_start": []}
    else:
        first["question"] = " ".join(["who"] * 80)
    spoiled = folder / f"test-{change.replace(' ', '-')}.jsonl"
    spoiled.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return spoiled


@pytest.mark.parametrize(("change", "expected"), [
    ("answer_start", "that does not match its answer"),
    ("outside", "outside its context of"),
    ("empty context", "has an empty context"),
    ("unanswerable", "has no answer (a SQuAD v2.0 file with unanswerable questions): read it with --version-2"),
    ("long question", "leave no room for its context in --max-seq-length 48: raise --max-seq-length or "
                      "shorten the question")])
def test_a_bad_test_file_in_json_lines_is_refused_before_any_training(change, expected, run_folder, squad, tmp_path,
                                                                       monkeypatch, capsys):
    """Every split is read and cut into windows before the first seed trains: a bad --test file
    costs no training, and the line names the file and the question."""
    bad = jsonl_of(write_squad(tmp_path / "test.json", 6, 2), tmp_path, change)
    code, _, stderr = run_main(["finetune", run_folder, "--task", "qa", "--train", squad["train"], "--validation",
                                squad["validation"], "--test", bad, "--out", tmp_path / "out", "--max-seq-length",
                                "48", "--doc-stride", "8", "--select-by", "dev"], monkeypatch, capsys)
    assert code == 2 and stderr.count("\n") == 1 and "seed 0" not in stderr, stderr
    assert expected in stderr and ("q2-0" in stderr) and (change == "long question" or bad.name in stderr), stderr
    assert not (tmp_path / "out").exists()


QA_GUIDE = Path(__file__).parents[2] / "docs" / "guides" / "qa.md"


def guide_command(marker: str) -> list[str]:
    """docs/guides/qa.md's `bertpre finetune` line holding `marker`, as its arguments."""
    line = next(line for line in QA_GUIDE.read_text(encoding="utf-8").splitlines()
                if line.startswith("bertpre finetune ") and marker in line)
    return shlex.split(line)[1:]


@pytest.mark.parametrize(("max_seq_length", "room", "stride"), [
    (384, 360, 128), (512, 480, 128), (128, 110, 42), (64, 56, 21), (64, 10, 9), (16, 1, 0)])
def test_the_default_stride_is_squad_s_scaled_down_with_the_window_and_below_the_room(max_seq_length, room, stride):
    assert default_doc_stride(max_seq_length, room) == stride


def test_the_guide_s_wordnet_qa_command_runs_on_a_small_model(run_folder, squad, tmp_path, monkeypatch, capsys):
    """The QA guide's command types neither --max-seq-length nor --doc-stride: the squad preset's
    windows of 384 are cut to the model's 64 positions, and the stride 128 scaled with them (one
    note), where the stride was refused before ("--doc-stride 128 must be smaller than ...")."""
    test = write_squad(tmp_path / "test.json", 8, 2)
    files = {"my-bert": run_folder, "data/wordnet-qa/train.json": squad["train"],
             "data/wordnet-qa/dev.json": squad["validation"], "data/wordnet-qa/test.json": test,
             "results/wordnet-qa": tmp_path / "out"}
    args = [files.get(arg, arg) for arg in guide_command("data/wordnet-qa/train.json")]
    assert "--doc-stride" not in args and "--max-seq-length" not in args
    code, _, stderr = run_main([*args, "--seeds", "1", "--epochs", "1"], monkeypatch, capsys)
    assert code == 0, stderr
    notes = [line for line in stderr.splitlines() if "--doc-stride" in line]
    assert notes == ["note: --doc-stride 21: SQuAD's 128 for windows of 384 tokens, scaled to windows of 64 "
                     "(give --doc-stride to choose)"]
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["question_answering"]["doc_stride"] == 21 and result["hyperparameters"]["max_seq_length"] == 64


def test_a_question_longer_than_the_window_is_refused_without_a_note_on_the_stride(run_folder, squad, tmp_path,
                                                                                   monkeypatch, capsys):
    """No default stride to speak of where the longest question leaves a window no context: the
    note said "below the -540 context tokens a window holds" before the error."""
    long = json.loads(squad["validation"].read_text(encoding="utf-8"))
    asked = long["data"][0]["paragraphs"][0]["qas"][0]
    asked["question"] = " ".join(["who"] * 200) + " ?"
    validation = tmp_path / "long-question.json"
    validation.write_text(json.dumps(long), encoding="utf-8")
    code, _, stderr = run_main(["finetune", run_folder, "--task", "qa", "--train", squad["train"],
                                "--validation", validation, "--out", tmp_path / "out"], monkeypatch, capsys)
    assert code == 2
    assert not [line for line in stderr.splitlines() if "--doc-stride" in line], stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith(f"error: question {asked['id']!r} has ")
    assert errors[0].endswith("leave no room for its context in --max-seq-length 64: raise --max-seq-length "
                              "or shorten the question")


def test_a_typed_doc_stride_too_big_for_the_window_is_refused_in_one_line(run_folder, squad, tmp_path,
                                                                         monkeypatch, capsys):
    code, _, stderr = run_main(["finetune", run_folder, "--task", "qa", "--train", squad["train"],
                                "--validation", squad["validation"], "--out", tmp_path / "out",
                                "--doc-stride", "128"], monkeypatch, capsys)
    assert code == 2
    errors = [line for line in stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and errors[0].startswith("error: --doc-stride 128 must be smaller than the ")
    assert "context tokens a window of --max-seq-length 64 holds beside question" in errors[0]
    assert "Traceback" not in stderr
