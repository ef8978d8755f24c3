"""`bertpre finetune` end to end, from a model these tests pretrain themselves: a small task the
model can learn, probe and full, two seeds; the report's numbers; a rerun that does no work; bad
input as one line with nothing written."""
from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from _in_process import run_main

from bertpre.model import BertConfig

ANIMALS = ["the cat", "a dog", "a small bird"]
PEOPLE = ["the old man", "my sister", "the farmer"]
VERBS = ["sees", "likes", "follows", "feeds", "watches", "finds"]
OBJECTS = ["the river", "a red apple", "the green field", "an open door", "the tall tree"]


def write_task(folder: Path, count: int, seed: int, name: str, *, pair: bool = False) -> Path:
    """Sentences of the tiny grammar labelled by who acts: an animal or a person."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        animal = rng.random() < 0.5
        subject = rng.choice(ANIMALS if animal else PEOPLE)
        row = {"text": f"{subject} {rng.choice(VERBS)} {rng.choice(OBJECTS)} .",
               "label": "animal" if animal else "person"}
        if pair:
            row["other"] = f"{rng.choice(PEOPLE + ANIMALS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)} ."
        rows.append(row)
    path = folder / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path




@pytest.fixture(scope="module")
def task_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("task")
    return {"train": write_task(folder, 160, 0, "train.jsonl"),
            "validation": write_task(folder, 60, 1, "validation.jsonl")}


@pytest.mark.parametrize(("mode", "extra"), [
    ("probe", ["--set", "pooling=mean", "--epochs", "30", "--lr", "0.01"]),
    ("full", ["--epochs", "10", "--lr", "0.001", "--batch-size", "8"]),
])
def test_a_learnable_task_beats_the_majority_baseline_with_two_seeds(
        mode, extra, run_folder, task_files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "results"
    code, stdout, stderr = run_main(
        ["finetune", run_folder, "--train", task_files["train"], "--validation", task_files["validation"],
         "--out", out, "--mode", mode, "--seeds", "2", *extra], monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    assert (result["task"], result["mode"], result["split"], result["seeds"]) == (
        "classification", mode, "validation", [0, 1])
    assert result["checkpoint_step"] == 30 and result["labels"] == ["animal", "person"]
    accuracy = result["metrics"]["accuracy"]
    per_seed = accuracy["per_seed"]
    assert len(per_seed) == 2 and all(0.0 <= value <= 1.0 for value in per_seed)
    assert accuracy["mean"] == pytest.approx(np.mean(per_seed))
    assert accuracy["std"] == pytest.approx(np.std(per_seed, ddof=1))
    assert (accuracy["min"], accuracy["max"]) == (min(per_seed), max(per_seed))
    def labels(split: str) -> list[str]:
        return [json.loads(line)["label"] for line in task_files[split].read_text().splitlines()]

    train_majority = max(("animal", "person"), key=labels("train").count)  # the baseline's answer
    majority = labels("validation").count(train_majority) / len(labels("validation"))
    assert result["baselines"]["majority"]["accuracy"] == pytest.approx(majority)
    assert min(per_seed) > max(majority, 1 - majority) + 0.15, result  # the model learned who acts
    assert set(result["metrics"]) == {"accuracy", "f1", "f1_macro", "mcc"}
    assert result["data"]["train"]["sha256"] and result["hyperparameters"]["mode"] == mode
    assert "accuracy" in stdout and "majority" in stdout

    # The same command again finds its results and trains nothing.
    code, stdout_again, stderr = run_main(
        ["finetune", run_folder, "--train", task_files["train"], "--validation", task_files["validation"],
         "--out", out, "--mode", mode, "--seeds", "2", *extra], monkeypatch, capsys)
    assert code == 0 and "already done" in stderr and "seed 0" not in stderr
    assert json.loads((out / "results.json").read_text())["metrics"] == result["metrics"]
    assert len((out / "results.jsonl").read_text().splitlines()) == 1


def test_seeds_are_deterministic(run_folder, task_files, tmp_path, monkeypatch, capsys):
    results = []
    for name in ("a", "b"):
        code, _, stderr = run_main(
            ["finetune", run_folder, "--train", task_files["train"], "--validation", task_files["validation"],
             "--out", tmp_path / name, "--mode", "probe", "--seed", "7", "--epochs", "3"], monkeypatch, capsys)
        assert code == 0, stderr
        results.append(json.loads((tmp_path / name / "results.json").read_text())["metrics"])
    assert results[0] == results[1]


def test_regression_scores_pearson_and_spearman(run_folder, tmp_path, monkeypatch, capsys):
    rng = random.Random(3)
    rows = [{"text": f"{rng.choice(ANIMALS + PEOPLE)} {rng.choice(VERBS)} .", "score": rng.random()}
            for _ in range(40)]
    (tmp_path / "train.csv").write_text("text,score\n" + "".join(f"{r['text']},{r['score']}\n" for r in rows))
    code, _, stderr = run_main(
        ["finetune", run_folder, "--train", tmp_path / "train.csv", "--validation", tmp_path / "train.csv",
         "--task", "regression", "--label-column", "score", "--out", tmp_path / "out", "--mode", "probe",
         "--seeds", "2", "--epochs", "2"], monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert set(result["metrics"]) == {"pearson", "spearman"} and result["labels"] == []


@pytest.mark.parametrize(("options", "config_text", "expected"), [
    (["--lr", "2e-5"], None, {"lr": 2e-5}),
    (["--lr", "5e-5"], None, {"lr": 5e-5}),
    (["--lr", "1e-5"], None, {"lr": 1e-5}),
    (["--set", "lr=3e-5"], None, {"lr": 3e-5}),
    ([], "lr: 2e-5\n", {"lr": 2e-5}),
    (["--weight-decay", "1e-5"], None, {"weight_decay": 1e-5, "lr": 2e-5}),
])
def test_the_learning_rates_of_berts_paper_are_taken_as_typed(options, config_text, expected, run_folder,
                                                              task_files, tmp_path, monkeypatch, capsys):
    """`--lr 2e-5` once became the text `lr=2e-05`, which YAML reads back as a string: refused."""
    if config_text is not None:
        (tmp_path / "my settings.yaml").write_text(config_text, encoding="utf-8")
        options = [*options, "--config", tmp_path / "my settings.yaml"]
    out = tmp_path / "fine tuned"
    code, _, stderr = run_main(["finetune", run_folder, "--train", task_files["train"], "--validation",
                                task_files["validation"], "--out", out, "--seeds", "1", "--epochs", "1",
                                *options], monkeypatch, capsys)
    assert code == 0, stderr
    recorded = json.loads((out / "results.json").read_text())["hyperparameters"]
    assert {name: recorded[name] for name in expected} == expected


def test_fp16_on_a_cpu_says_it_runs_fp32(run_folder, task_files, tmp_path, monkeypatch, capsys):
    code, _, stderr = run_main(["finetune", run_folder, "--train", task_files["train"], "--validation",
                                task_files["validation"], "--out", tmp_path / "out", "--seeds", "1", "--epochs",
                                "1", "--mode", "probe", "--precision", "fp16"], monkeypatch, capsys)
    assert code == 0, stderr
    assert "note: precision fp16 needs a CUDA GPU; training in fp32 on this CPU instead" in stderr
    assert json.loads((tmp_path / "out" / "results.json").read_text())["precision"] == "fp32"


@pytest.mark.parametrize("suffix", [".csv", ".tsv", ".jsonl"])
def test_a_file_with_a_byte_order_mark_reads_as_without_one(suffix, tmp_path):
    """Excel saves "CSV UTF-8" with a byte-order mark; the first column's name is still `text`."""
    from bertpre.finetune.tasks import read_table

    rows = {".csv": "text,label\nthe cat sees,animal\n", ".tsv": "text\tlabel\nthe cat sees\tanimal\n",
            ".jsonl": '{"text": "the cat sees", "label": "animal"}\n'}[suffix]
    path = tmp_path / f"excel{suffix}"
    path.write_bytes(rows.encode("utf-8-sig"))
    assert read_table(path) == [{"text": "the cat sees", "label": "animal"}]


def bad(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(("build", "expected"), [
    (lambda t, f: ["--train", bad(t, "x.jsonl", '{"sentence": "a", "label": 1}\n'), "--validation", f["validation"]],
     "has no column 'text' (its columns: sentence, label)"),
    (lambda t, f: ["--train", bad(t, "empty.jsonl", ""), "--validation", f["validation"]], "holds no examples"),
    (lambda t, f: ["--train", bad(t, "one.jsonl", '{"text": "a cat", "label": "animal"}\n' * 3),
                   "--validation", f["validation"]], "every example has the label 'animal'"),
    (lambda t, f: ["--train", f["train"], "--validation", bad(t, "v.jsonl", '{"text": "a", "label": "plant"}\n')],
     "has the label 'plant', which the training file"),
    (lambda t, f: ["--train", f["train"], "--validation", f["validation"], "--set", "lr=.nan"], "lr must be a finite number"),
    (lambda t, f: ["--train", f["train"], "--validation", f["validation"], "--lr", "0"], "lr must be in (0, 10]"),
    (lambda t, f: ["--train", f["train"], "--validation", f["validation"], "--precision", "fp8"],
     "--precision 'fp8' is not one of auto, fp32, fp16, bf16"),
    (lambda t, f: ["--train", f["train"], "--validation", f["validation"], "--set", "epoch=3"], "did you mean 'epochs'"),
    (lambda t, f: ["--train", f["train"], "--validation", f["validation"], "--seeds", "0"], "--seeds 0 must be"),
    (lambda t, f: ["--train", f["train"], "--validation", f["validation"], "--seeds", "3", "--seed", "1"],
     "--seeds 3 runs seeds 0 to 2, --seed names them: give one of the two"),
    (lambda t, f: ["--train", f["train"], "--validation", f["validation"], "--set", "lr=ten", "--lr", "1e-3"],
     "lr must be"),
    (lambda t, f: ["--train", f["train"], "--validation", f["validation"], "--task", "ranking"], "--task 'ranking'"),
])
def test_bad_input_is_one_line_and_writes_nothing(build, expected, run_folder, task_files, tmp_path,
                                                  monkeypatch, capsys):
    args = build(tmp_path, task_files)
    before = sorted(path.name for path in tmp_path.iterdir())
    code, _, stderr = run_main(["finetune", run_folder, *args, "--out", tmp_path / "out"], monkeypatch, capsys)
    assert code == 2, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], stderr
    assert sorted(path.name for path in tmp_path.iterdir()) == before


def test_a_source_that_is_not_a_model_and_an_out_of_other_files_are_refused(
        task_files, tiny_data, tmp_path, monkeypatch, capsys):
    files = ["--train", task_files["train"], "--validation", task_files["validation"]]
    code, _, stderr = run_main(["finetune", tiny_data, *files, "--out", tmp_path / "out"], monkeypatch, capsys)
    assert code == 2 and "neither a RUN folder" in stderr and not (tmp_path / "out").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    code, _, stderr = run_main(["finetune", tiny_data, *files, "--out", mine], monkeypatch, capsys)
    assert code == 2 and "did not write" in stderr
    assert sorted(path.name for path in mine.iterdir()) == ["notes.txt"]


def test_pairs_are_encoded_as_bert_tokenizer_fast_does(tiny_data):
    transformers = pytest.importorskip("transformers")
    from bertpre.finetune.encoding import encode_texts
    from bertpre.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    reference = transformers.BertTokenizerFast.from_pretrained(str(tiny_data / "tokenizer"))
    rng = random.Random(0)
    words = [*" ".join(ANIMALS + PEOPLE + VERBS + OBJECTS).split(), "zebra", "qux", "!"]

    def sentence() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(0, 40)))

    first, second = [sentence() for _ in range(1000)], [sentence() for _ in range(1000)]
    for length in (8, 17, 64):
        encoded = encode_texts(tokenizer, first, second, [0] * 1000, length, config=BertConfig())
        expected = reference(first, second, truncation="longest_first", max_length=length)
        assert encoded.input_ids == expected["input_ids"]
        assert encoded.token_type_ids == expected["token_type_ids"]


def test_tagging_labels_the_first_piece_of_each_word(tiny_data):
    from bertpre.finetune.encoding import encode_words
    from bertpre.labels import IGNORE_INDEX
    from bertpre.tokenizer import load_tokenizer

    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    words = [["the", "farmer", "watches", "zebras"]]
    encoded = encode_words(tokenizer, words, [[0, 1, 2, 3]], 64, config=BertConfig())
    pieces = [tokenizer.id_to_token(token) for token in encoded.input_ids[0]]
    expected, word = [], -1
    for piece in pieces:
        if piece in ("[CLS]", "[SEP]") or piece.startswith("##"):
            expected.append(IGNORE_INDEX)
        else:
            word += 1
            expected.append(word)
    assert encoded.labels[0] == expected and encoded.kept_words == [4]
    short = encode_words(tokenizer, words, [[0, 1, 2, 3]], 4, config=BertConfig())  # [CLS] + 2 pieces + [SEP]
    assert short.kept_words == [2] and short.word_counts == [4]


def write_conll(path: Path, count: int, seed: int) -> Path:
    """Sentences of the tiny grammar tagged with who acts: B-/I-ANIMAL or B-/I-PERSON, else O."""
    rng = random.Random(seed)
    blocks = []
    for _ in range(count):
        animal = rng.random() < 0.5
        subject = rng.choice(ANIMALS if animal else PEOPLE).split()
        kind = "ANIMAL" if animal else "PERSON"
        tags = [f"B-{kind}"] + [f"I-{kind}"] * (len(subject) - 1)
        rest = f"{rng.choice(VERBS)} {rng.choice(OBJECTS)} .".split()
        blocks.append("\n".join(f"{word} {tag}" for word, tag in zip(subject + rest, tags + ["O"] * len(rest),
                                                                      strict=True)))
    path.write_text("-DOCSTART- O\n\n" + "\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def test_tagging_end_to_end_scores_spans(run_folder, tmp_path, monkeypatch, capsys):
    train, validation = write_conll(tmp_path / "train.conll", 120, 0), write_conll(tmp_path / "dev.conll", 40, 1)
    code, stdout, stderr = run_main(
        ["finetune", run_folder, "--task", "tagging", "--train", train, "--validation", validation,
         "--out", tmp_path / "out", "--mode", "probe", "--seeds", "2", "--epochs", "30", "--lr", "0.01"],
        monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert result["labels"] == ["B-ANIMAL", "B-PERSON", "I-ANIMAL", "I-PERSON", "O"]
    assert set(result["metrics"]) == {"f1", "precision", "recall", "accuracy"}
    assert result["baselines"]["majority"]["f1"] == 0.0  # all "O": no span found
    assert min(result["metrics"]["f1"]["per_seed"]) > 0.5, result["metrics"]


@pytest.mark.parametrize("task", ["classification", "tagging"])
def test_the_saved_model_loads_in_transformers_with_the_same_logits(
        task, run_folder, task_files, tmp_path, monkeypatch, capsys):
    transformers = pytest.importorskip("transformers")
    import torch
    from safetensors.torch import load_file

    from bertpre.model.bert_heads import BertForSequenceClassification, BertForTokenClassification
    from bertpre.model.hf_format import read_config

    if task == "tagging":
        files = ["--train", write_conll(tmp_path / "train.conll", 60, 0), "--validation",
                 write_conll(tmp_path / "dev.conll", 20, 1), "--task", "tagging"]
        auto, ours = transformers.AutoModelForTokenClassification, BertForTokenClassification
    else:
        files = ["--train", task_files["train"], "--validation", task_files["validation"]]
        auto, ours = transformers.AutoModelForSequenceClassification, BertForSequenceClassification
    out = tmp_path / "out"
    code, _, stderr = run_main(["finetune", run_folder, *files, "--out", out, "--seeds", "2", "--epochs", "2",
                                "--lr", "0.001", "--batch-size", "8", "--save-model"], monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((out / "results.json").read_text())
    saved = Path(result["saved_model"]["path"])
    assert saved == out / "model"
    hf, info = auto.from_pretrained(saved, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    assert hf.config.id2label == dict(enumerate(result["labels"]))
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    batch = tokenizer(["the cat sees the river .", "my sister feeds a red apple today ."], padding=True,
                      return_tensors="pt")
    model = ours(read_config(saved), len(result["labels"]))
    weights = load_file(saved / "model.safetensors")
    model.load_state_dict(weights, strict=task != "tagging")  # tagging saves no pooler
    model.eval(), hf.eval()
    with torch.no_grad():
        expected = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        logits = hf(**batch).logits
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
    if task == "classification":  # the saved seed's score, recomputed by transformers
        texts = [json.loads(line) for line in task_files["validation"].read_text().splitlines()]
        encoded = tokenizer([row["text"] for row in texts], padding=True, return_tensors="pt")
        with torch.no_grad():
            predicted = hf(**encoded).logits.argmax(-1).tolist()
        accuracy = np.mean([hf.config.id2label[p] == row["label"] for p, row in zip(predicted, texts, strict=True)])
        seed_index = result["seeds"].index(result["saved_model"]["seed"])
        assert accuracy == pytest.approx(result["metrics"]["accuracy"]["per_seed"][seed_index])
        assert result["metrics"]["accuracy"]["per_seed"][seed_index] == result["metrics"]["accuracy"]["max"]


def test_save_model_refuses_a_probe(run_folder, task_files, tmp_path, monkeypatch, capsys):
    code, _, stderr = run_main(["finetune", run_folder, "--train", task_files["train"], "--validation",
                                task_files["validation"], "--out", tmp_path / "out", "--mode", "probe",
                                "--save-model"], monkeypatch, capsys)
    assert code == 2 and "--save-model keeps a fully fine-tuned model" in stderr
    assert not (tmp_path / "out").exists()


def test_probe_features_are_computed_once_and_read_back(run_folder, task_files, tmp_path, monkeypatch, capsys):
    import bertpre.finetune.features as features_module

    calls = []
    real = features_module.encoder_features
    monkeypatch.setattr(features_module, "encoder_features", lambda *args, **kwargs: calls.append(1) or real(
        *args, **kwargs))
    out = tmp_path / "probe"
    base = ["finetune", run_folder, "--train", task_files["train"], "--validation", task_files["validation"],
            "--out", out, "--mode", "probe", "--epochs", "5"]
    code, _, stderr = run_main([*base, "--lr", "0.01", "--seed", "3"], monkeypatch, capsys)
    assert code == 0, stderr
    assert len(calls) == 2  # train and validation, once for all seeds
    kept = sorted((out / "features").glob("*.safetensors"))
    assert len(kept) == 2
    from safetensors.torch import load_file
    assert {tuple(load_file(str(path))["features"].shape) for path in kept} == {(160, 32), (60, 32)}

    code, _, stderr = run_main([*base, "--lr", "0.01", "--seed", "4"], monkeypatch, capsys)
    assert code == 0, stderr
    assert len(calls) == 2  # another seed on the same checkpoint: the kept features, no encoder pass
    cached = json.loads((out / "results.json").read_text())["metrics"]

    fresh = tmp_path / "fresh"
    code, _, stderr = run_main([*base[:-5], fresh, *base[-4:], "--lr", "0.01", "--seed", "4"], monkeypatch, capsys)
    assert code == 0, stderr
    assert json.loads((fresh / "results.json").read_text())["metrics"] == cached  # same as computed afresh

    for path in kept:  # damaged: computed again, with a note
        path.write_bytes(path.read_bytes()[:100])
    code, _, stderr = run_main([*base, "--lr", "0.01", "--seed", "5"], monkeypatch, capsys)
    assert code == 0, stderr
    assert stderr.count("is damaged or does not fit") == 2 and len(calls) == 6


def test_examples_longer_than_the_models_positions_are_cut_with_a_note(run_folder, tmp_path, monkeypatch, capsys):
    rows = [{"text": " ".join(["the cat sees the river ."] * 30), "label": "a"},
            {"text": " ".join(["my sister feeds the farmer ."] * 30), "label": "b"}] * 8
    for name in ("train.jsonl", "dev.jsonl"):
        (tmp_path / name).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    code, _, stderr = run_main(["finetune", run_folder, "--train", tmp_path / "train.jsonl", "--validation",
                                tmp_path / "dev.jsonl", "--out", tmp_path / "out", "--mode", "probe",
                                "--seeds", "1", "--epochs", "2"], monkeypatch, capsys)
    assert code == 0, stderr
    assert "max_seq_length 128 is longer than the model's 64 positions; examples are cut at 64" in stderr
    assert json.loads((tmp_path / "out" / "results.json").read_text())["hyperparameters"]["max_seq_length"] == 64


@pytest.mark.parametrize("tagging", [False, True])
def test_a_seed_draws_the_head_transformers_draws(tagging, run_folder, tmp_path):
    """`torch.manual_seed(s)` + build_task_model gives the initial head (and leaves the random
    stream, which dropout reads next) exactly as `set_seed(s)` + `from_pretrained` of the export:
    the encoder is filled from its weights, never drawn."""
    transformers = pytest.importorskip("transformers")
    import torch

    from bertpre.finetune.model import build_task_model
    from bertpre.finetune.source import load_encoder
    from bertpre.tools.export import export

    folder = export(run_folder, tmp_path / "export").out
    encoder = load_encoder(folder)
    auto = transformers.AutoModelForTokenClassification if tagging else transformers.AutoModelForSequenceClassification
    for seed in (0, 7):
        transformers.set_seed(seed)
        theirs = auto.from_pretrained(folder, num_labels=5)
        their_next = torch.rand(4)
        torch.manual_seed(seed)
        ours = build_task_model(encoder.config, encoder.state, 5, tagging=tagging)
        assert torch.equal(torch.rand(4), their_next)
        assert torch.equal(ours.classifier.weight, theirs.classifier.weight)
        assert torch.equal(ours.classifier.bias, theirs.classifier.bias)
        for name, tensor in ours.bert.state_dict().items():  # the encoder is the export's, copied
            assert torch.equal(tensor, encoder.state[name]), name
            assert tensor.data_ptr() != encoder.state[name].data_ptr(), name
