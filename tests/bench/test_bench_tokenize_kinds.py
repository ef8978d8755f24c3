"""bench.tokenize_speed --kinds: the peers of the BPE and Unigram vocabs are bertpre's pipelines
built with `tokenizers` alone, and a tiny run of every kind writes tokenize-kinds-DATE.json."""
import json
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The bench package lives at the repository root, which pytest does not put on sys.path.
sys.path.insert(0, str(ROOT))
from bench import tokenize_speed  # noqa: E402
from bertpre.tokenizer.bpe_unigram import train_bpe_or_unigram  # noqa: E402

TEXT = ("The cat sat on the mat . The dog ran after the red ball while <unk> sang . "
        "Every child in the small town heard it and laughed at the dog's ball .").split(" . ")
BATCHES = [TEXT[:2], TEXT[2:]] * 10


def test_the_bpe_peer_trains_the_vocab_bertpre_trains():
    # BPE training is deterministic: the same pipeline and options give the same vocab and merges.
    ours = train_bpe_or_unigram(BATCHES, "bpe", 300)
    theirs = tokenize_speed.train_with_tokenizers(BATCHES, 300, "bpe")
    assert theirs.get_vocab() == ours.get_vocab()
    sentence = "the red dog laughed at <unk>"
    assert theirs.encode(sentence, add_special_tokens=False).ids == ours.encode(sentence, add_special_tokens=False).ids


def test_the_unigram_peer_reads_text_as_bertpre_s_unigram_does():
    # The peer is tokenizers' UnigramTrainer, bertpre's is SentencePiece's (bpe_unigram's docstring):
    # other pieces, the same pipeline around them.
    ours = train_bpe_or_unigram(BATCHES, "unigram", 40)
    theirs = tokenize_speed.train_with_tokenizers(BATCHES, 40, "unigram")
    assert theirs.get_vocab_size() == ours.get_vocab_size() == 40
    assert [theirs.id_to_token(i) for i in range(5)] == [ours.id_to_token(i) for i in range(5)]
    text = "ﬁne cat"  # NFKC: the ligature becomes "fi"; ▁ before each word
    assert theirs.normalizer.normalize_str(text) == ours.normalizer.normalize_str(text) == "fine cat"
    assert theirs.pre_tokenizer.pre_tokenize_str(text) == ours.pre_tokenizer.pre_tokenize_str(text)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_every_kind_in_one_run_writes_tokenize_kinds(private_tmp):
    corpus = private_tmp / "wiki.txt"
    corpus.write_text((" = An Article = \n\n " + " . ".join(TEXT) + " . \n\n") * 20, encoding="utf-8")
    out = private_tmp / "results"
    assert tokenize_speed.main(["--corpora", str(corpus), "--vocab-size", "300", "--num-proc", "1",
                                "--rounds", "1", "--kinds", "bpe", "unigram", "--results", str(out)]) == 0
    [path] = out.iterdir()
    result = json.loads(path.read_text())
    assert result["benchmark"] == "tokenize-kinds" and result["settings"]["kinds"] == ["bpe", "unigram"]
    for kind in ("bpe", "unigram"):
        assert set(result["figures"][kind]) == {"vocab training", "encode+write", "end to end"}
        assert result["figures"][kind]["encode+write"]["tokenizers_mb_per_s"] > 0
        assert len(result["seconds"][kind]["train_bertpre"]) == 1
