"""Unigram training (`bertpre.tokenizer.unigram_training`): SentencePiece's trainer gives the same
vocab for the same text whatever the machine's cores, and the converted `tokenizers` Unigram cuts
text as the SentencePiece model does (English, Chinese, text without spaces, fuzzed Unicode)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import sentencepiece
from _released_tokenizers import sample_lines

from bertpre.errors import UserError
from bertpre.tokenizer import unigram_training
from bertpre.tokenizer.bpe_unigram import (
    MAX_PIECE_LENGTH,
    ROBERTA_SPECIAL_TOKENS,
    build_bpe_or_unigram,
    train_bpe_or_unigram,
)
from bertpre.tokenizer.roles import token_roles
from bertpre.tokenizer.unigram_training import (
    sentencepiece_text,
    train_sentencepiece,
    unigram_from_sentencepiece,
)

ROOT = Path(__file__).resolve().parents[2]


def trained(lines: list[str], vocab_size: int, lowercase: bool = False):
    """The converted tokenizer and the SentencePiece processor of one training."""
    tokenizer = build_bpe_or_unigram("unigram", lowercase)
    proto = train_sentencepiece([lines], tokenizer, vocab_size, MAX_PIECE_LENGTH)
    tokenizer.model = unigram_from_sentencepiece(proto)
    return tokenizer, sentencepiece.SentencePieceProcessor(model_proto=proto)


@pytest.mark.parametrize("lowercase", [False, True])
def test_the_converted_tokenizer_cuts_text_as_sentencepiece_does(lowercase):
    lines = sample_lines(fuzzed=60)
    tokenizer, processor = trained(lines, 1000, lowercase)
    scores = [processor.get_score(index) for index in range(processor.get_piece_size())]
    checked = ties = 0
    for line in [*lines, "  two  spaces ", "▁a literal word start", "Ｆｕｌｌｗｉｄｔｈ ﬁ ①", "tab\tand\u00a0nbsp"]:
        if any(token in line for token in ROBERTA_SPECIAL_TOKENS):
            continue  # below: such text is a special piece to tokenizers, characters to SentencePiece
        ours = tokenizer.encode(line, add_special_tokens=False).ids
        theirs = processor.encode(sentencepiece_text(line, tokenizer.normalizer))
        checked += 1
        if ours != theirs:  # a tie: the same text in pieces of the same total score
            ties += 1
            assert "".join(processor.id_to_piece(index) for index in ours) == \
                   "".join(processor.id_to_piece(index) for index in theirs)
            assert sum(scores[index] for index in ours) == pytest.approx(sum(scores[index] for index in theirs))
    assert checked > 250 and ties <= checked // 50


def test_literal_special_token_text_is_the_special_piece_to_tokenizers_as_in_xlmr():
    """SentencePiece's trainer takes such text for the special piece too, and learns nothing from it."""
    tokenizer, processor = trained(sample_lines(fuzzed=10), 300)
    text = "say <mask> now"
    assert "<mask>" in tokenizer.encode(text, add_special_tokens=False).tokens
    pieces = processor.encode(sentencepiece_text(text, tokenizer.normalizer), out_type=str)
    assert "<mask>" not in pieces and "<" in pieces


def test_the_vocab_has_robertas_special_ids_and_the_size_asked():
    tokenizer = train_bpe_or_unigram([sample_lines(fuzzed=10)], "unigram", 300)
    assert tokenizer.get_vocab_size() == 300
    roles = token_roles(tokenizer)
    assert (roles.kind, roles.cls_token, roles.pad_token, roles.sep_token, roles.unk_token, roles.mask_token) == (
        "unigram", "<s>", "<pad>", "</s>", "<unk>", "<mask>")
    assert (roles.cls_token_id, roles.pad_token_id, roles.sep_token_id, roles.unk_token_id,
            roles.mask_token_id) == (0, 1, 2, 3, 4)
    assert tokenizer.encode("a", "b").tokens == ["<s>", "▁a", "</s>", "</s>", "▁b", "</s>"]
    assert tokenizer.encode("ー", add_special_tokens=False).ids != [3]  # every trained character is a piece


# The vocab, trained in a fresh process, with the cores it may use limited to the first of them.
TRAIN_ON_ONE_CORE = """
import hashlib, os, sys
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/tests"]
if len(sys.argv) > 2:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
from _released_tokenizers import sample_lines
from bertpre.tokenizer.bpe_unigram import train_bpe_or_unigram
print(hashlib.sha256(train_bpe_or_unigram([sample_lines(fuzzed=10)], "unigram", 300).to_str().encode()).hexdigest())
"""


def test_the_vocab_is_the_same_whatever_the_cores_though_the_trainers_threads_matter(monkeypatch):
    import hashlib

    lines = sample_lines(fuzzed=10)
    here = hashlib.sha256(train_bpe_or_unigram([lines], "unigram", 300).to_str().encode()).hexdigest()
    for limit in ([], ["one-core"]):
        done = subprocess.run([sys.executable, "-c", TRAIN_ON_ONE_CORE, str(ROOT), *limit],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        assert done.stdout.strip() == here
    # Why the number of threads is fixed rather than the machine's: it changes the sums.
    monkeypatch.setattr(unigram_training, "TRAINING_THREADS", 1)
    assert hashlib.sha256(train_bpe_or_unigram([lines], "unigram", 300).to_str().encode()).hexdigest() != here


def test_a_sentence_longer_than_sentencepieces_own_limit_is_trained_on():
    words = [f"w{chr(0x61 + index % 26)}{chr(0x61 + index // 26 % 26)}" for index in range(2000)]
    sentence = " ".join(words)  # 10,000 bytes, one sentence: SentencePiece skips beyond 4,192 by default
    assert len(sentence.encode()) > 4192
    tokenizer = train_bpe_or_unigram([[sentence]], "unigram", 50)
    assert tokenizer.get_vocab_size() == 50 and 3 not in tokenizer.encode(sentence[:200]).ids


def test_a_small_corpus_gives_the_pieces_it_has():
    assert train_bpe_or_unigram([sample_lines(fuzzed=0)], "unigram", 267).get_vocab_size() == 267
    assert train_bpe_or_unigram([sample_lines(fuzzed=0)], "unigram", 5000).get_vocab_size() == 267


@pytest.mark.parametrize("vocab_size, lines, message", [
    (10, None, "--vocab-size 10 is too small for a unigram vocab of this corpus: it must hold every character "
               "of the text and the 5 special tokens, 112 in all; raise --vocab-size"),
    (300, ["", ""], "the corpus has no text to train a vocab on; check the corpus files"),
])
def test_a_vocab_the_corpus_cannot_give_is_one_clear_line(vocab_size, lines, message):
    with pytest.raises(UserError) as refused:
        train_bpe_or_unigram([sample_lines(fuzzed=0) if lines is None else lines], "unigram", vocab_size)
    assert str(refused.value) == message


def test_a_stop_while_the_text_is_read_abandons_training_at_once(monkeypatch):
    """Without it SentencePiece would go on to train on the part it had read (many seconds on a big corpus)."""
    from bertpre import errors

    monkeypatch.setattr(errors, "_received", [])
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: errors.stop(signum))
    started = time.monotonic()

    def endless_text():  # a corpus that would take 30 s to read
        while time.monotonic() < started + 30:
            yield ["the cat sat on the mat", "a dog ran after the red ball"] * 50

    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGUSR1)).start()
    try:
        with pytest.raises(errors.Stopped):
            train_bpe_or_unigram(endless_text(), "unigram", 100)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert time.monotonic() - started < 5


SHARED_CORPORA = ROOT / ".." / "shared" / "corpora"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_CORPORA.is_dir(), reason="../shared/corpora is not there")
def test_on_every_line_of_the_shared_corpora_the_pieces_are_sentencepieces_but_for_ties():
    lines = [line for path in sorted(SHARED_CORPORA.glob("*.txt"))
             for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    tokenizer, processor = trained(lines[::4], 8000)
    scores = [processor.get_score(index) for index in range(processor.get_piece_size())]
    ties = 0
    for line in lines:
        if any(token in line for token in ROBERTA_SPECIAL_TOKENS):
            continue  # WikiText's <unk>: the special piece to tokenizers (see above)
        ours = tokenizer.encode(line, add_special_tokens=False).ids
        theirs = processor.encode(sentencepiece_text(line, tokenizer.normalizer))
        if ours != theirs:
            ties += 1
            assert "".join(map(processor.id_to_piece, ours)) == "".join(map(processor.id_to_piece, theirs))
            assert sum(scores[index] for index in ours) == pytest.approx(sum(scores[index] for index in theirs))
    assert ties < len(lines) // 100
