"""`bertpre finetune` of an XLNet source (an export, a RUN, a checkpoint): XLNet's template and left
padding, the task heads of transformers' XLNetFor{Sequence,Token}Classification with the same
logits, probe features at the last token ([CLS]), --save-model, --checkpoints all, GLUE, and the
CLI as a user runs it: pretrain (plm), export, then probe and full fine-tuning on a tiny CSV."""
from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import torch
from test_finetune import ANIMALS, OBJECTS, PEOPLE, VERBS, run_main, write_conll, write_task

from bertpre.errors import UserError
from bertpre.finetune.encoding import encode_texts, encode_words, pad_batch
from bertpre.finetune.loop import encoder_features
from bertpre.finetune.model import build_task_model
from bertpre.finetune.source import load_encoder
from bertpre.labels import IGNORE_INDEX
from bertpre.model.xlnet_heads import XLNetForSequenceClassification, XLNetForTokenClassification
from bertpre.tools.export import export
from bertpre.train.runtime import Runtime

transformers = pytest.importorskip("transformers")
from _xlnet_run import xlnet_run  # noqa: E402

ATOL = 1e-4
CPU = Runtime(device=torch.device("cpu"))


pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

@pytest.fixture(scope="module")
def source(tiny_data, tmp_path_factory) -> dict[str, Path]:
    """An XLNet RUN with checkpoints at steps 10 and 20, and its export; only read below."""
    root = tmp_path_factory.mktemp("xlnet-finetune")
    run = xlnet_run(root / "run", tiny_data, steps=(10, 20))
    export(run, root / "export")
    return {"run": run, "export": root / "export", "checkpoint": run / "checkpoints" / "step-00000020"}


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("xlnet-task")
    return {"train": write_task(folder, 80, 0, "train.jsonl"), "validation": write_task(folder, 60, 1, "dev.jsonl")}


def sentences(count: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    words = [*" ".join(ANIMALS + PEOPLE + VERBS + OBJECTS).split(), "zebra", "qux", "!"]
    return [" ".join(rng.choice(words) for _ in range(rng.randint(0, 30))) for _ in range(count)]


# --- the encoder, its encoding and its heads -----------------------------------------------


def test_every_kind_of_source_gives_the_same_encoder_in_xlnets_layout(source, tmp_path):
    encoders = {kind: load_encoder(path) for kind, path in source.items()}
    reference = encoders["export"]
    assert reference.config.architecture == "xlnet" and reference.padding_side == "left"
    assert (encoders["run"].step, encoders["checkpoint"].step, reference.step) == (20, 20, None)
    for encoder in encoders.values():
        assert encoder.state.keys() == reference.state.keys() and "mask_emb" in encoder.state
        assert all(torch.equal(encoder.state[name], tensor) for name, tensor in reference.state.items())
        assert encoder.tokenizer.encode("the cat", "a dog").ids[-1] == encoder.tokenizer.token_to_id("[CLS]")
    # transformers' own folders: a task model's (prefixed) and a bare XLNetModel's
    hf = transformers.XLNetForSequenceClassification.from_pretrained(source["export"], num_labels=2)
    hf.save_pretrained(tmp_path / "hf-task")
    hf.transformer.save_pretrained(tmp_path / "hf-bare")
    for folder in ("hf-task", "hf-bare"):
        for name in ("tokenizer.json", "tokenizer_config.json"):
            (tmp_path / folder / name).write_bytes((source["export"] / name).read_bytes())
        encoder = load_encoder(tmp_path / folder)
        assert all(torch.equal(encoder.state[name], tensor) for name, tensor in reference.state.items())
    (tmp_path / "hf-bare" / "model.safetensors").write_bytes(
        (tmp_path / "hf-task" / "model.safetensors").read_bytes())  # config.json fits, but not these weights
    transformers.XLNetConfig(vocab_size=reference.config.vocab_size, d_model=16, n_layer=1, n_head=2,
                             d_inner=8).save_pretrained(tmp_path / "hf-bare")
    with pytest.raises(UserError, match="do not fit XLNet's layout"):
        load_encoder(tmp_path / "hf-bare")


def test_pairs_are_encoded_as_the_exports_tokenizer_does_with_truncation(source):
    encoder = load_encoder(source["run"])  # the run keeps BERT's layout: the encoder uses XLNet's
    reference = transformers.AutoTokenizer.from_pretrained(source["export"])
    first, second = sentences(300, 0), sentences(300, 1)
    for length in (8, 17, 64):
        single = encode_texts(encoder.tokenizer, first, None, [0] * 300, length, config=encoder.config)
        expected = reference(first, truncation="longest_first", max_length=length)
        assert single.input_ids == expected["input_ids"] and single.token_type_ids == expected["token_type_ids"]
        encoded = encode_texts(encoder.tokenizer, first, second, [0] * 300, length, config=encoder.config)
        expected = reference(first, second, truncation="longest_first", max_length=length)
        assert encoded.input_ids == expected["input_ids"]
        assert encoded.token_type_ids == expected["token_type_ids"]
    batch = pad_batch(encoded, [0, 1, 2], encoder.tokenizer.token_to_id("[PAD]"), padding_side="left")
    padded = reference(first[:3], second[:3], truncation="longest_first", max_length=64, padding=True,
                       return_tensors="pt")
    for name in ("input_ids", "attention_mask"):
        assert torch.equal(batch[name], padded[name]), name
    real = padded["attention_mask"].bool()
    assert torch.equal(batch["token_type_ids"][real], padded["token_type_ids"][real])


def test_tagging_labels_the_first_piece_of_each_word_before_xlnets_cls(source):
    encoder = load_encoder(source["export"])
    words = [["the", "farmer", "watches", "zebras"]]
    encoded = encode_words(encoder.tokenizer, words, [[0, 1, 2, 3]], 64, config=encoder.config)
    pieces = [encoder.tokenizer.id_to_token(token) for token in encoded.input_ids[0]]
    assert pieces[-2:] == ["[SEP]", "[CLS]"] and encoded.token_type_ids[0][-1] == 2
    expected, word = [], -1
    for piece in pieces:
        if piece in ("[CLS]", "[SEP]") or piece.startswith("##"):
            expected.append(IGNORE_INDEX)
        else:
            word += 1
            expected.append(word)
    assert encoded.labels[0] == expected and encoded.kept_words == [4]
    batch = pad_batch(encoded, [0], 0, tagging=True, padding_side="left")
    assert batch["labels"][0].tolist() == expected


@pytest.mark.parametrize(("tagging", "num_labels"), [(False, 3), (False, 1), (True, 4)])
def test_the_task_models_equal_transformers(tagging, num_labels, source):
    """Our head on our encoder, its weights loaded as they are into transformers' class: the same
    logits on a left-padded batch of pairs."""
    encoder = load_encoder(source["export"])
    torch.manual_seed(0)
    ours = build_task_model(encoder.config, encoder.state, num_labels, tagging=tagging).eval()
    assert isinstance(ours, XLNetForTokenClassification if tagging else XLNetForSequenceClassification)
    with torch.no_grad():  # heads off their init (zero biases) so that every weight counts
        for parameter in ours.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    config = transformers.AutoConfig.from_pretrained(source["export"], num_labels=num_labels)
    auto = transformers.XLNetForTokenClassification if tagging else transformers.XLNetForSequenceClassification
    theirs = auto(config).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    encoded = encode_texts(encoder.tokenizer, sentences(6, 2), sentences(6, 3), [0] * 6, 40, config=encoder.config)
    batch = pad_batch(encoded, list(range(6)), 0, padding_side="left")
    assert not bool(batch["attention_mask"].all())  # padded: the heads must read past it
    with torch.no_grad():
        mine = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        reference = theirs(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           token_type_ids=batch["token_type_ids"]).logits
    torch.testing.assert_close(mine, reference, atol=ATOL, rtol=0)


def test_probe_features_are_the_cls_token_or_the_mean_whatever_the_padding(source):
    encoder = load_encoder(source["export"])
    texts = sentences(5, 4)
    encoded = encode_texts(encoder.tokenizer, texts, None, [0] * 5, 64, config=encoder.config)
    model = build_task_model(encoder.config, encoder.state, 1, tagging=True).eval()
    for pooling in ("cls", "mean"):
        features = encoder_features(encoder, encoded, task="classification", pooling=pooling, batch_size=5,
                                    runtime=CPU)
        assert features.shape == (5, 32)
        for row, ids in enumerate(encoded.input_ids):  # each example alone: no padding at all
            with torch.no_grad():
                hidden = model.hidden_states(torch.tensor([ids]), None,
                                             torch.tensor([encoded.token_type_ids[row]]))[0]
            alone = hidden[-1] if pooling == "cls" else hidden.mean(0)  # [CLS] is last
            torch.testing.assert_close(features[row], alone, atol=1e-5, rtol=0)


# --- the command line, as a user runs it ---------------------------------------------------


def write_csv(path: Path, source: Path) -> Path:
    rows = [json.loads(line) for line in source.read_text().splitlines()]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=["text", "label"])
        writer.writeheader()
        writer.writerows(rows)
    return path


PRETRAIN_XLNET = ["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none", "model.mem_len=16",
                  "model.hidden_size=32", "model.num_hidden_layers=2", "model.num_attention_heads=4",
                  "model.intermediate_size=64", "data.max_seq_length=32", "data.num_workers=0",
                  "train.batch_size=8", "train.micro_batch_size=8", "train.max_steps=30", "train.save_every=30",
                  "train.precision=fp32", "optim.warmup_steps=3", "optim.lr=1e-3"]


def test_pretrain_export_then_probe_and_full_finetuning_learn_who_acts(
        tiny_data, task, tmp_path, monkeypatch, capsys):
    """As a user runs it: `bertpre pretrain` an XLNet (plm), `bertpre export` it, then `bertpre
    finetune EXPORT` on a CSV; fine-tuned in full, the tiny XLNet learns the task (it reads
    [CLS], last, through the left padding)."""
    run, export_folder = tmp_path / "run", tmp_path / "my-xlnet"
    settings = [argument for setting in PRETRAIN_XLNET for argument in ("--set", setting)]
    code, _, stderr = run_main(["pretrain", "--config", "tiny", "--data", tiny_data, "--out", run, *settings],
                               monkeypatch, capsys)
    assert code == 0, stderr
    code, stdout, stderr = run_main(["export", run, "--out", export_folder], monkeypatch, capsys)
    assert code == 0 and "step-00000030 as XLNetLMHeadModel" in stdout, stderr
    _, info = transformers.AutoModelForCausalLM.from_pretrained(export_folder, output_loading_info=True)
    assert all(len(keys) == 0 for keys in info.values()), info
    # The checkpoint's recurrent memory is no weights: the run and its export hash alike.
    assert (run / "checkpoints" / "step-00000030" / "memory_0.safetensors").is_file()
    assert load_encoder(run).weights_sha256 == load_encoder(export_folder).weights_sha256
    train, validation = write_csv(tmp_path / "train.csv", task["train"]), write_csv(tmp_path / "dev.csv", task["validation"])
    runs = {"probe": ["--preset", "probe", "--set", "pooling=mean", "--epochs", "30", "--lr", "0.01"],
            "full": ["--mode", "full", "--epochs", "5", "--lr", "0.002", "--batch-size", "8"]}
    labels = [row["label"] for row in csv.DictReader(validation.open())]
    majority = max(labels.count("animal"), labels.count("person")) / len(labels)
    for mode, extra in runs.items():
        out = tmp_path / mode
        code, stdout, stderr = run_main(["finetune", export_folder, "--train", train, "--validation", validation,
                                         "--out", out, "--seeds", "2", *extra], monkeypatch, capsys)
        assert code == 0, stderr
        result = json.loads((out / "results.json").read_text())
        assert (result["mode"], result["seeds"], result["checkpoint_step"]) == (mode, [0, 1], None)
        assert result["hyperparameters"]["weight_decay"] == (0.0 if mode == "probe" else 0.01)  # the presets'
        assert result["source"] == str(export_folder)
        assert result["baselines"]["majority"]["accuracy"] == pytest.approx(majority, abs=0.1)
        assert "accuracy" in stdout
        per_seed = result["metrics"]["accuracy"]["per_seed"]
        assert min(per_seed) > majority + 0.15, result["metrics"]
        if mode == "full":
            assert min(per_seed) >= 0.95, result["metrics"]


def test_the_saved_model_loads_in_transformers_with_the_same_logits_and_scores(
        source, task, tmp_path, monkeypatch, capsys):
    """--save-model of a classification and a tagging run: transformers' Auto classes load the
    folder with no missing or unexpected keys, give our logits, and recompute the saved seed's
    accuracy from the validation file with the saved tokenizer."""
    from safetensors.torch import load_file

    from bertpre.model.hf_format import read_config

    runs = {"classification": ["--train", task["train"], "--validation", task["validation"]],
            "tagging": ["--train", write_conll(tmp_path / "train.conll", 60, 0), "--validation",
                        write_conll(tmp_path / "dev.conll", 20, 1), "--task", "tagging"]}
    for name, files in runs.items():
        out = tmp_path / name
        code, _, stderr = run_main(["finetune", source["checkpoint"], *files, "--out", out, "--seeds", "2",
                                    "--epochs", "3", "--lr", "0.001", "--batch-size", "8", "--save-model"],
                                   monkeypatch, capsys)
        assert code == 0, stderr
        result = json.loads((out / "results.json").read_text())
        saved = Path(result["saved_model"]["path"])
        auto = (transformers.AutoModelForTokenClassification if name == "tagging"
                else transformers.AutoModelForSequenceClassification)
        hf, info = auto.from_pretrained(saved, output_loading_info=True)
        assert type(hf).__name__ == ("XLNetForTokenClassification" if name == "tagging"
                                     else "XLNetForSequenceClassification")
        assert all(len(keys) == 0 for keys in info.values()), info
        assert hf.config.id2label == dict(enumerate(result["labels"]))
        tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
        assert tokenizer.padding_side == "left"
        texts = [json.loads(line)["text"] for line in task["validation"].read_text().splitlines()]
        batch = tokenizer(texts, padding=True, return_tensors="pt")
        model_class = XLNetForTokenClassification if name == "tagging" else XLNetForSequenceClassification
        ours = model_class(read_config(saved), len(result["labels"]))
        ours.load_state_dict(load_file(saved / "model.safetensors"), strict=True)
        ours.eval(), hf.eval()
        with torch.no_grad():
            expected = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
            logits = hf(**batch).logits
        torch.testing.assert_close(logits, expected, atol=ATOL, rtol=0)
        if name == "classification":  # the saved seed's score, recomputed by transformers
            answers = [json.loads(line)["label"] for line in task["validation"].read_text().splitlines()]
            accuracy = sum(hf.config.id2label[int(p)] == a for p, a in zip(logits.argmax(-1), answers, strict=True))
            seed_index = result["seeds"].index(result["saved_model"]["seed"])
            assert accuracy / len(answers) == pytest.approx(result["metrics"]["accuracy"]["per_seed"][seed_index])


def test_checkpoints_all_scores_each_xlnet_checkpoint_into_the_runs_tensorboard(
        source, task, tiny_data, tmp_path, monkeypatch, capsys):
    from test_sweep import downstream_scalars

    from bertpre.finetune.sweep import task_name

    run = xlnet_run(tmp_path / "run", tiny_data, steps=(10, 20))
    code, stdout, stderr = run_main(["finetune", run, "--train", task["train"], "--validation", task["validation"],
                                     "--out", tmp_path / "out", "--mode", "probe", "--seeds", "2", "--epochs", "3",
                                     "--checkpoints", "all"], monkeypatch, capsys)
    assert code == 0, stderr
    lines = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [line["checkpoint_step"] for line in lines] == [10, 20]
    assert lines[0]["weights_sha256"] != lines[1]["weights_sha256"]
    tag = f"downstream/{task_name(task['train'])}_probe/accuracy"
    scalars = downstream_scalars(run)[tag]
    assert set(scalars) == {10, 20}
    assert scalars[20] == pytest.approx(lines[1]["metrics"]["accuracy"]["mean"])


def test_a_tokenizer_that_does_not_belong_to_the_xlnet_is_refused(tiny_data, tmp_path):
    run = xlnet_run(tmp_path / "run", tiny_data, vocab_size=50)
    with pytest.raises(UserError, match="the tokenizer has 120 tokens but the model .* has 50 embeddings"):
        load_encoder(run)


def test_a_glue_folder_is_scored_with_an_xlnet_export(source, tmp_path, monkeypatch, capsys):
    from test_benchmarks import glue_folder

    glue = glue_folder(tmp_path / "glue_data")
    code, _, stderr = run_main(["finetune", source["export"], "--glue-dir", glue, "--tasks", "sst2,stsb,mnli",
                                "--out", tmp_path / "out", "--mode", "probe", "--seeds", "1", "--epochs", "3",
                                "--lr", "0.01"], monkeypatch, capsys)
    assert code == 0, stderr
    summary = json.loads((tmp_path / "out" / "results.json").read_text())
    assert summary["benchmark"] == "glue" and list(summary["tasks"]) == ["sst2", "stsb", "mnli"]
    assert summary["tasks"]["stsb"]["task"] == "regression"
    assert {"accuracy_m", "accuracy_mm"} <= set(summary["tasks"]["mnli"]["metrics"])
    assert summary["metrics"]["score"]["mean"] is not None


@pytest.mark.parametrize("tagging", [False, True])
def test_a_seed_draws_the_head_transformers_draws(tagging, source):
    """`torch.manual_seed(s)` + build_task_model: the same initial head as `set_seed(s)` +
    `from_pretrained`, and the random stream left where transformers leaves it."""
    encoder = load_encoder(source["export"])
    auto = transformers.XLNetForTokenClassification if tagging else transformers.XLNetForSequenceClassification
    transformers.set_seed(3)
    theirs = auto.from_pretrained(source["export"], num_labels=4)
    their_next = torch.rand(4)
    torch.manual_seed(3)
    ours = build_task_model(encoder.config, encoder.state, 4, tagging=tagging)
    assert torch.equal(torch.rand(4), their_next)
    heads = ["classifier"] if tagging else ["sequence_summary", "logits_proj"]
    their_state = theirs.state_dict()
    for name, tensor in ours.state_dict().items():
        if name.split(".")[0] in heads:
            assert torch.equal(tensor, their_state[name]), name
