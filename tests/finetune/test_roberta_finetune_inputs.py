"""`bertpre finetune` on a released RoBERTa (its own byte-level BPE, `<pad>` = 1, 2 + 64 position
rows) reads the tokenizer by role and the model by its token limit: batches padded with `<pad>`,
QA windows as a transformers user's `<s> question </s></s> context </s>`, words tagged as
`is_split_into_words=True, add_prefix_space=True` encodes them, examples cut at 64 tokens."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _released_tokenizers import roberta_like, xlmr_like
from test_finetune import run_main, write_conll, write_task

from bertpre.finetune.encoding import encode_texts, encode_words, pad_batch
from bertpre.finetune.loop import pad_token_id
from bertpre.finetune.qa_data import Answer, QAExample
from bertpre.finetune.qa_windows import encode_qa_windows
from bertpre.finetune.source import load_encoder
from bertpre.labels import IGNORE_INDEX
from bertpre.tokenizer import load_tokenizer

transformers = pytest.importorskip("transformers")

CONTEXT = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
           "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland "
           "and Norway who, under their leader Rollo, agreed to swear fealty to King Charles III.")
QUESTIONS = [("Who gave their name to Normandy?", "The Normans"), ("Where is Normandy?", "France"),
             ("Who was their leader?", "Rollo"), ("To whom did they swear fealty?", "King Charles III")]
WORDS = [["The", "Normans", "gave", "their", "name", "to", "Normandy", "."],
         ["Ünïcödé", "café", "—", "naïve", ",", "1990s", "."], ["Rollo"]]


def released_roberta(folder: Path, make=roberta_like, tokenizer_class: str | None = None,
                     model: str = "Roberta") -> Path:
    """A tiny RoBERTa as the hub has one: its tokenizer, `<pad>` 1, 66 position rows (64 tokens)."""
    make(folder, tokenizer_class=tokenizer_class)
    vocab_size = load_tokenizer(folder).get_vocab_size()
    torch.manual_seed(3)
    config = getattr(transformers, f"{model}Config")(
        vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, max_position_embeddings=66, type_vocab_size=1, pad_token_id=1, bos_token_id=0,
        eos_token_id=2)
    getattr(transformers, f"{model}ForMaskedLM")(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def roberta(tmp_path_factory) -> Path:
    return released_roberta(tmp_path_factory.mktemp("roberta"), tokenizer_class="RobertaTokenizer")


def test_batches_are_padded_with_the_tokenizers_pad_not_the_start_token(roberta):
    encoder = load_encoder(roberta)
    assert pad_token_id(encoder) == 1 == encoder.config.pad_token_id  # "[PAD]" is not there: 0 is <s>
    encoded = encode_texts(encoder.tokenizer, ["the cat", "the cat sees the river ."], None, [0, 1], 64,
                           config=encoder.config)
    batch = pad_batch(encoded, [0, 1], pad_token_id(encoder))
    short = len(encoded.input_ids[0])
    assert batch["input_ids"][0, :short].tolist() == encoded.input_ids[0]
    assert set(batch["input_ids"][0, short:].tolist()) == {1}


@pytest.mark.parametrize(("make", "tokenizer_class", "model"), [(roberta_like, None, "Roberta"),
                                                                 (roberta_like, "RobertaTokenizer", "Roberta"),
                                                                 (xlmr_like, None, "XLMRoberta")])
def test_qa_windows_are_a_transformers_users_on_a_roberta_tokenizer(make, tokenizer_class, model, tmp_path):
    folder = released_roberta(tmp_path, make, tokenizer_class, model)
    encoder = load_encoder(folder)
    examples = [QAExample(f"q{index}", question, CONTEXT, (Answer(answer, CONTEXT.index(answer)),))
                for index, (question, answer) in enumerate(QUESTIONS)]
    windows = encode_qa_windows(encoder.tokenizer, examples, max_seq_length=40, doc_stride=8, config=encoder.config)
    auto = transformers.AutoTokenizer.from_pretrained(str(folder))
    theirs = auto([example.question for example in examples], [example.context for example in examples],
                  truncation="only_second", max_length=40, stride=8, return_overflowing_tokens=True,
                  return_offsets_mapping=True)
    assert len(windows) > len(examples)  # the context is cut into several windows
    assert windows.input_ids == theirs["input_ids"]
    assert windows.example_index == theirs["overflow_to_sample_mapping"]
    first = auto.convert_ids_to_tokens(windows.input_ids[0])
    question_pieces = len(auto(QUESTIONS[0][0], add_special_tokens=False)["input_ids"])
    assert first[0] == "<s>" and first[question_pieces + 1:question_pieces + 3] == ["</s>", "</s>"]
    for row, offsets in enumerate(windows.context_offsets):
        sequence_ids = theirs.sequence_ids(row)
        assert offsets == [tuple(offset) if sequence == 1 else None
                           for offset, sequence in zip(theirs["offset_mapping"][row], sequence_ids, strict=True)]
        assert windows.cls_index[row] == 0
        start, end = windows.start_positions[row], windows.end_positions[row]
        if start:  # the window holds the answer: its tokens' characters are the answer's
            example = examples[windows.example_index[row]]
            assert CONTEXT[offsets[start][0]:offsets[end][1]] == example.answers[0].text


@pytest.mark.parametrize(("make", "tokenizer_class", "model"), [(roberta_like, "RobertaTokenizer", "Roberta"),
                                                                 (xlmr_like, "XLMRobertaTokenizer", "XLMRoberta")])
def test_words_are_pieced_and_tagged_as_transformers_splits_them(make, tokenizer_class, model, tmp_path):
    folder = released_roberta(tmp_path, make, tokenizer_class, model)
    encoder = load_encoder(folder)
    tags = [list(range(len(sentence))) for sentence in WORDS]
    encoded = encode_words(encoder.tokenizer, WORDS, tags, 64, config=encoder.config)
    auto = transformers.AutoTokenizer.from_pretrained(str(folder), add_prefix_space=True)
    theirs = auto(WORDS, is_split_into_words=True, truncation=True, max_length=64)
    assert encoded.input_ids == theirs["input_ids"]
    for row, sentence_tags in enumerate(tags):  # the usual recipe: a word's tag on its first piece
        word_ids, labels, previous = theirs.word_ids(row), [], None
        for word in word_ids:
            labels.append(sentence_tags[word] if word is not None and word != previous else IGNORE_INDEX)
            previous = word
        assert encoded.labels[row] == labels
    if make is roberta_like:  # every word is spaced as mid-sentence: a Ġ on its first piece
        first_pieces = [auto.convert_ids_to_tokens(ids)[position] for ids, labels in
                        zip(encoded.input_ids, encoded.labels, strict=True)
                        for position, label in enumerate(labels) if label != IGNORE_INDEX]
        assert all(piece.startswith("Ġ") for piece in first_pieces)


@pytest.mark.slow
def test_a_long_example_is_cut_at_the_tokens_the_positions_read(roberta, tmp_path, monkeypatch, capsys):
    train = write_task(tmp_path, 24, 0, "train.jsonl")
    rows = [json.loads(line) for line in train.read_text(encoding="utf-8").splitlines()]
    for row in rows[:4]:  # far past 64 tokens, and more than 5% of the examples
        row["text"] = " ".join(["the cat sees the river ."] * 40)
    train.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    out = tmp_path / "out"
    code, _, stderr = run_main(["finetune", roberta, "--train", train, "--validation",
                                write_task(tmp_path, 8, 1, "dev.jsonl"), "--out", out, "--seeds", "1",
                                "--epochs", "1", "--batch-size", "8", "--max-seq-length", "128"], monkeypatch, capsys)
    assert code == 0, stderr
    assert "longer than the model's 66 positions (which read 64 tokens); examples are cut at 64" in stderr
    assert "cut at --max-seq-length 64;" in stderr and "more than the 64 tokens the model's positions read" in stderr


@pytest.mark.slow
@pytest.mark.parametrize("tokenizer_class", [None, "RobertaTokenizer"])
def test_a_saved_tagging_model_splits_words_in_transformers_as_it_was_fine_tuned(tokenizer_class, tmp_path,
                                                                               monkeypatch, capsys):
    """Without `add_prefix_space`, transformers pieces `is_split_into_words` input unspaced ("Normans",
    not "ĠNormans"): the saved folder says it, in tokenizer.json and tokenizer_config.json alike."""
    source = released_roberta(tmp_path / "source", tokenizer_class=tokenizer_class)
    out = tmp_path / "out"
    code, _, stderr = run_main(["finetune", source, "--train", write_conll(tmp_path / "train.conll", 30, 0),
                                "--validation", write_conll(tmp_path / "dev.conll", 10, 1), "--task", "tagging",
                                "--out", out, "--seeds", "1", "--epochs", "1", "--batch-size", "8",
                                "--save-model"], monkeypatch, capsys)
    assert code == 0, stderr
    saved = Path(json.loads((out / "results.json").read_text())["saved_model"]["path"])
    assert json.loads((saved / "tokenizer_config.json").read_text())["add_prefix_space"] is True
    tags = [[0] * len(sentence) for sentence in WORDS]
    trained_encoder = load_encoder(source)
    trained = encode_words(trained_encoder.tokenizer, WORDS, tags, 64, config=trained_encoder.config).input_ids
    saved_tokenizer = transformers.AutoTokenizer.from_pretrained(str(saved))
    assert saved_tokenizer(WORDS, is_split_into_words=True)["input_ids"] == trained
    unspaced = transformers.AutoTokenizer.from_pretrained(str(source))(WORDS, is_split_into_words=True)
    assert unspaced["input_ids"] != trained  # the source's own files would not give them
