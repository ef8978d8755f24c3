"""Tagging's words and pieces, and what `bertpre finetune` tells its user, from the outside: a word
the tokenizer turns into nothing (a zero-width space, a soft hyphen, a byte-order mark, a control
character) keeps its place, is scored as the fallback tag and is counted; the examples truncation
cut are counted; a seed's progress shows on a terminal only; a tagging seed says what it trains on; a
stuck seed is told which lr to try."""
from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from test_finetune import run_main, write_task

import bertpre.finetune.seeds as seeds
from bertpre.config.finetune import Hyperparameters
from bertpre.finetune.kinds import load_task
from bertpre.finetune.loop import probe_labels
from bertpre.finetune.report import score
from bertpre.labels import IGNORE_INDEX
from bertpre.model import BertConfig
from bertpre.tokenizer import load_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

NO_PIECES = {"zero-width space": "\u200b", "soft hyphen": "\u00ad", "byte-order mark": "\ufeff",
             "control character": "\x07"}

# The sentence (江 ␣ 泽 民 说), and the empty word ({x}) first, last and twice.
SENTENCES = [
    (["江", "{x}", "泽", "民", "说"], ["B-PER", "O", "I-PER", "I-PER", "O"]),
    (["{x}", "the", "farmer", "sees", "my", "sister"], ["O", "B-PER", "I-PER", "O", "B-PER", "I-PER"]),
    (["a", "dog", "follows", "the", "cat", "{x}"], ["B-ANI", "I-ANI", "O", "B-ANI", "I-ANI", "O"]),
    (["my", "{x}", "sister", "{x}", "feeds", "a", "dog", "."],
     ["B-PER", "O", "I-PER", "O", "O", "B-ANI", "I-ANI", "O"]),
    (["the", "old", "man", "watches", "the", "river", "."], ["B-PER", "I-PER", "I-PER", "O", "O", "O", "O"]),
]
EMPTY_WORDS = 5  # the {x} above
LONG = (["the"] * 20, ["O"] * 20)  # 22 tokens with [CLS] and [SEP]: cut at --max-seq-length 16


def write_tagged(path: Path, sentences: list[tuple[list[str], list[str]]], empty: str) -> Path:
    """`sentences` as CoNLL (a word and its tag a line) or JSON lines, each {x} the word `empty`."""
    rows = [([empty if word == "{x}" else word for word in words], tags) for words, tags in sentences]
    if path.suffix == ".jsonl":
        text = "".join(json.dumps({"tokens": words, "tags": tags}) + "\n" for words, tags in rows)
    else:
        text = "\n\n".join("\n".join(f"{word} {tag}" for word, tag in zip(words, tags, strict=True))
                           for words, tags in rows) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


class Tokenizing:
    """All that `seeds.encode` reads of an encoder: its tokenizer, and its config (whose family
    gives the token types)."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.config = BertConfig()


@pytest.mark.parametrize("suffix", [".conll", ".jsonl"])
@pytest.mark.parametrize("name", list(NO_PIECES))
def test_gold_fed_through_the_decode_path_scores_perfectly_around_words_of_no_pieces(
        name, suffix, tiny_data, tmp_path):
    """A perfect predictor's outputs (one a tagged piece: the gold tag of the word the piece
    begins), decoded, are the file's own tags, each word's in its place: the empty word is
    scored as O, the fallback (and here its gold tag), and no later word moves."""
    path = write_tagged(tmp_path / f"ner{suffix}", SENTENCES, NO_PIECES[name])
    data = load_task("tagging", path, path)
    assert [len(words) for words in data.validation.texts] == [len(words) for words, _ in SENTENCES]
    encoded = seeds.encode(Tokenizing(load_tokenizer(tiny_data / "tokenizer")), data, data.validation,
                          Hyperparameters())
    assert sum(encoded.word_counts) - sum(encoded.kept_words) == EMPTY_WORDS  # the premise: no pieces
    gold = np.asarray([label for labels in encoded.labels for label in labels if label != IGNORE_INDEX])

    decoded = seeds.decode(gold, encoded, data)

    assert decoded == data.validation.labels
    scores = score("tagging", decoded, data.validation.labels, data.label_names)
    assert (scores["f1"], scores["accuracy"]) == (1.0, 1.0)


@pytest.mark.parametrize(("suffix", "name"), [(".conll", "zero-width space"), (".jsonl", "soft hyphen"),
                                              (".conll", "byte-order mark"), (".jsonl", "control character")])
def test_a_tagging_run_counts_words_of_no_pieces_and_scores_them_in_place(
        suffix, name, run_folder, tmp_path, monkeypatch, capsys):
    """`bertpre finetune --task tagging` end to end, with a perfect predictor in place of the probe's
    head: every score is 1.0, and stderr counts the words with no tokens, the words truncation cut
    and the examples it cut, and says what a seed trains on in sentences and tokens."""
    empty = NO_PIECES[name]
    train = write_tagged(tmp_path / f"train{suffix}", [*SENTENCES, LONG], empty)
    validation = write_tagged(tmp_path / f"dev{suffix}", [*SENTENCES, LONG], empty)
    encoded_splits = []
    real = seeds.cached_features
    monkeypatch.setattr(seeds, "cached_features", lambda encoder, split, **options: (
        encoded_splits.append(split) or real(encoder, split, **options)))
    monkeypatch.setattr(seeds, "train_probe", lambda *args, **options: probe_labels(encoded_splits[-1],
                                                                                   "tagging").numpy())
    code, _, stderr = run_main(
        ["finetune", run_folder, "--task", "tagging", "--train", train, "--validation", validation,
         "--out", tmp_path / "out", "--mode", "probe", "--seeds", "2", "--max-seq-length", "16"],
        monkeypatch, capsys)
    assert code == 0, stderr
    result = json.loads((tmp_path / "out" / "results.json").read_text())
    assert {metric: values["per_seed"] for metric, values in result["metrics"].items()} == {
        "f1": [1.0, 1.0], "precision": [1.0, 1.0], "recall": [1.0, 1.0], "accuracy": [1.0, 1.0]}
    words = sum(len(words) for words, _ in [*SENTENCES, LONG])
    first = f"the first: {ascii(empty)}, word 2 of sentence 1"
    lines = stderr.splitlines()
    for expected in [
        "note: 1 of 6 training examples (16.7%) and 1 of 6 validation examples (16.7%) were cut at "
        "--max-seq-length 16; --max-seq-length 22 would keep 95% of them whole",
        f"note: 5 training words had no tokens ({first}): nothing is learned from them",
        "note: 6 training words were cut off by --max-seq-length: nothing is learned from them",
        f"note: 5 validation words had no tokens ({first}): scored as O",
        "note: 6 validation words were cut off by --max-seq-length: scored as O",
        f"seed 0: probing on 6 sentences ({words - EMPTY_WORDS - 6} tagged tokens)",
    ]:
        assert expected in lines, stderr


def test_the_truncation_note_counts_the_examples_cut_and_the_length_that_keeps_95_percent(
        run_folder, tmp_path, monkeypatch, capsys):
    """Examples of k one-piece words are k + 2 tokens: training k = 1 … 20 (3 … 22 tokens),
    validation k = 1 … 10 (3 … 12). At 16, the 6 training examples of 17 … 22 tokens are cut; of
    all 30, 29 (96.7%) fit in 21 tokens and 28 (93.3%) in 20, so 21 keeps 95% whole."""
    for name, count in (("train.jsonl", 20), ("dev.jsonl", 10)):
        rows = [{"text": " ".join(["the"] * k), "label": "ab"[k % 2]} for k in range(1, count + 1)]
        (tmp_path / name).write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    code, _, stderr = run_main(["finetune", run_folder, "--train", tmp_path / "train.jsonl", "--validation",
                                tmp_path / "dev.jsonl", "--out", tmp_path / "out", "--mode", "probe",
                                "--seeds", "1", "--epochs", "1", "--max-seq-length", "16"], monkeypatch, capsys)
    assert code == 0, stderr
    assert ("note: 6 of 20 training examples (30.0%) and 0 of 10 validation examples (0.0%) were cut at "
            "--max-seq-length 16; --max-seq-length 21 would keep 95% of them whole") in stderr.splitlines()
    assert no_progress_bar(stderr)  # stderr is no terminal here
    code, _, stderr = run_main(["finetune", run_folder, "--train", tmp_path / "train.jsonl", "--validation",
                                tmp_path / "dev.jsonl", "--out", tmp_path / "out-21", "--mode", "probe",
                                "--seeds", "1", "--epochs", "1", "--max-seq-length", "21"], monkeypatch, capsys)
    assert code == 0, stderr
    assert ("note: 1 of 20 training examples (5.0%) and 0 of 10 validation examples (0.0%) were cut at "
            "--max-seq-length 21; 95% of them are whole at this length") in stderr.splitlines()


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("mode", ["full", "probe"])
def test_each_seed_shows_a_progress_bar_on_a_terminal(mode, run_folder, tmp_path, monkeypatch, capsys):
    """(Where stderr is no terminal there is no bar: the truncation and stuck-seed tests check.)"""
    train = write_task(tmp_path, 20, 0, "train.jsonl")
    validation = write_task(tmp_path, 10, 1, "dev.jsonl")
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    code, _, _ = run_main(["finetune", run_folder, "--train", train, "--validation", validation, "--mode", mode,
                           "--seeds", "2", "--epochs", "2", "--batch-size", "8", "--lr", "1e-3",
                           "--out", tmp_path / "out"], monkeypatch, capsys)
    shown = terminal.getvalue()
    assert code == 0, shown
    for seed in (0, 1):  # 2 epochs of 3 batches (8 + 8 + 4 examples)
        final = [line.split("\n")[0] for line in shown.split("\r") if line.startswith(f"seed {seed}: 100%")]
        assert final and "| 6/6 [" in final[-1], shown  # tqdm may draw the last state twice
        assert "epoch 2/2, loss " in final[-1] and final[-1].rstrip().endswith(" examples/s]"), shown


def no_progress_bar(stderr: str) -> bool:
    return "step/s" not in stderr and "examples/s" not in stderr and "\r" not in stderr


def test_a_small_model_stuck_at_the_bert_presets_lr_is_told_which_lr_to_try(
        run_folder, tmp_path, monkeypatch, capsys):
    train = write_task(tmp_path, 40, 0, "train.jsonl")
    validation = write_task(tmp_path, 20, 1, "dev.jsonl")
    code, stdout, stderr = run_main(["finetune", run_folder, "--train", train, "--validation", validation,
                                     "--out", tmp_path / "out", "--seeds", "1", "--epochs", "1"],
                                    monkeypatch, capsys)
    assert code == 0, stderr
    flags = json.loads((tmp_path / "out" / "results.json").read_text())["flags"]
    assert len(flags) == 1 and flags[0].endswith(
        "(stuck at one class: lr 2e-05 is a rate for BERT-base (hidden 768) and barely moves a hidden-32 "
        "model: try --lr 0.001, and more epochs with --preset small-data)"), flags
    assert f"warning: {flags[0]}" in stdout
    assert no_progress_bar(stderr)  # stderr is no terminal here


def test_a_tagging_seed_says_how_many_sentences_and_tokens_it_trains_on(run_folder, tmp_path, monkeypatch, capsys):
    """A probe trains on one feature a tagged token, not one a sentence."""
    from test_finetune import write_conll

    train, validation = write_conll(tmp_path / "train.conll", 12, 0), write_conll(tmp_path / "dev.conll", 4, 1)
    tokens = sum(1 for line in train.read_text().splitlines() if line.strip() and not line.startswith("-DOCSTART-"))
    code, _, stderr = run_main(["finetune", run_folder, "--task", "tagging", "--train", train, "--validation",
                                validation, "--out", tmp_path / "out", "--mode", "probe", "--seeds", "1",
                                "--epochs", "1"], monkeypatch, capsys)
    assert code == 0, stderr
    assert f"seed 0: probing on 12 sentences ({tokens} tagged tokens)" in stderr.splitlines()


def test_a_seed_that_fails_or_is_stopped_closes_its_bar(monkeypatch):
    """No bar is left open to be printed again as the process exits."""
    from bertpre.errors import Stopped
    from bertpre.finetune.loop import SeedProgress

    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with pytest.raises(Stopped), SeedProgress(0, 4, 1) as progress:
        assert not progress.bar.disable and progress.bar in type(progress.bar)._instances  # shown
        raise Stopped(15)
    assert progress.bar not in type(progress.bar)._instances  # closed: tqdm will not print it again
