"""`bertpre tokenize --tokenizer SOURCE` with a released byte-level BPE (RoBERTa) or Unigram (XLM-R)
tokenizer, and `--tokenizer-type bpe|unigram` from scratch: DATA's ids are AutoTokenizer's on
every line (English, Chinese, text without spaces, fuzzed Unicode), the source's files are kept
as they are, the roles are recorded; bad sources are refused with one clear line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from _in_process import run_main
from _released_tokenizers import mpnet_like, roberta_like, sample_lines, xlmr_like
from _tokenize_helpers import folder_bytes, run
from tokenizers import Tokenizer

from bertpre.data.folder import load_data
from bertpre.data.summary import unk_warning
from bertpre.tokenizer.roles import token_roles
from data_prep import read_documents

transformers = pytest.importorskip("transformers")

SOURCES = {
    "roberta": (roberta_like, None),
    "roberta-class": (roberta_like, "RobertaTokenizer"),
    "xlmr": (xlmr_like, None),
    "xlmr-class": (xlmr_like, "XLMRobertaTokenizer"),
}


def write_lines_corpus(path: Path, lines: list[str], per_document: int = 5) -> Path:
    documents = [lines[start:start + per_document] for start in range(0, len(lines), per_document)]
    path.write_text("\n\n".join("\n".join(document) for document in documents) + "\n", encoding="utf-8")
    return path


def data_documents(folder: Path) -> list[list[list[int]]]:
    data = load_data(folder)
    return [row["input_ids"] for split in (data.train, data.validation) for row in split]


def auto_documents(source: Path, corpus: Path | list[Path], split_sentences: bool = False) -> list[list[list[int]]]:
    """Each document's sentences as data_prep reads them, encoded by AutoTokenizer, without the
    sentences (and documents) that have no tokens, as DATA drops them. Special tokens' text is
    text (`split_special_tokens`): a literal `<mask>` in a corpus is never the mask's id. A Unigram
    vocabulary also holds "<s>", "</s>", "<unk>" as pieces that its model matches in text, which
    SentencePiece never does: they are put out of the reference's reach too (see the test below)."""
    auto = transformers.AutoTokenizer.from_pretrained(str(source))
    state = json.loads(auto.backend_tokenizer.to_str())
    if state["model"]["type"] == "Unigram":
        special = set(auto.all_special_tokens)
        state["model"]["vocab"] = [["\x00 out of reach " + piece if piece in special else piece, score]
                                   for piece, score in state["model"]["vocab"]]
        auto._tokenizer = Tokenizer.from_str(json.dumps(state))
    documents = []
    files = corpus if isinstance(corpus, list) else [corpus]
    for document in read_documents(files, split_sentences=split_sentences):
        sentences = auto(document, add_special_tokens=False, split_special_tokens=True)["input_ids"] if document else []
        if any(sentences):
            documents.append([ids for ids in sentences if ids])
    return documents


@pytest.mark.parametrize("name", SOURCES)
def test_data_ids_are_autotokenizers_on_every_line(name, tmp_path):
    make, tokenizer_class = SOURCES[name]
    source = make(tmp_path / "source", tokenizer_class=tokenizer_class)
    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines())
    manifest = run(corpus, tmp_path / "data", tokenizer_path=source, split_sentences=False,
                   validation_share=0.2)

    documents = data_documents(tmp_path / "data")
    assert sorted(documents) == sorted(auto_documents(source, corpus))
    # Text is only text: "<mask>" in a line is characters.
    mask = manifest["tokenizer"]["roles"]["mask_token_id"]
    assert mask not in {token for document in documents for sentence in document for token in sentence}
    assert folder_bytes(tmp_path / "data" / "tokenizer") == folder_bytes(source)  # as save_pretrained wrote them
    kind = "bpe" if name.startswith("roberta") else "unigram"
    roles = manifest["tokenizer"]["roles"]
    assert manifest["tokenizer"]["kind"] == kind and roles["kind"] == kind
    assert (roles["cls_token"], roles["sep_token"], roles["pad_token"], roles["mask_token"]) == (
        "<s>", "</s>", "<pad>", "<mask>")
    assert roles["pair_layout"] == "roberta" and roles["mask_token_id"] == len(load_data(tmp_path / "data").tokenizer.get_vocab()) - 1
    assert "tokenizer_type" not in manifest["options"]  # a reused tokenizer has its own kind


@pytest.mark.parametrize("make", [roberta_like, xlmr_like, mpnet_like], ids=["bpe", "unigram", "wordpiece"])
def test_special_tokens_written_in_the_text_are_its_characters_for_every_kind(make, tmp_path):
    """One rule for every kind: a special token's text in a corpus is text. A Unigram's vocabulary
    holds "<s>", "</s>", "<pad>", "<unk>" as pieces with the best score, which its model (and
    AutoTokenizer, even with `split_special_tokens`) would match in a line; SentencePiece never
    does, nor does DATA."""
    source = make(tmp_path / "source")
    lines = ["tags like <s> and </s> or <pad> , <unk> and <mask> appear in markup .",
             "</s></s><s><mask>", "[CLS] [SEP] [MASK] [PAD] [UNK] too"]
    lines = [f"{line} {number}" for number in range(4) for line in lines]  # four documents, none a copy
    corpus = write_lines_corpus(tmp_path / "corpus.txt", lines, per_document=3)
    manifest = run(corpus, tmp_path / "data", tokenizer_path=source, split_sentences=False, validation_share=0.25)
    roles = manifest["tokenizer"]["roles"]
    special = {roles[f"{role}_token_id"] for role in ("cls", "sep", "pad", "mask")}
    tokenizer = load_data(tmp_path / "data").tokenizer
    sentences = [sentence for document in data_documents(tmp_path / "data") for sentence in document]
    for sentence in sentences:
        assert not special & set(sentence), tokenizer.decode(sentence, skip_special_tokens=False)
    if make is roberta_like:  # byte-level: every character survives, so the text comes back whole
        assert sorted(tokenizer.decode(sentence) for sentence in sentences) == sorted(lines)


def test_a_wordpiece_source_with_other_special_names_is_read_by_role(tmp_path):
    source = mpnet_like(tmp_path / "source")
    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines())
    manifest = run(corpus, tmp_path / "data", tokenizer_path=source, split_sentences=False)
    assert sorted(data_documents(tmp_path / "data")) == sorted(auto_documents(source, corpus))
    assert folder_bytes(tmp_path / "data" / "tokenizer") == folder_bytes(source)
    roles = manifest["tokenizer"]["roles"]
    assert (manifest["tokenizer"]["kind"], roles["pair_layout"], roles["mask_token"], roles["unk_token"]) == (
        "wordpiece", "roberta", "<mask>", "[UNK]")


def test_data_is_the_same_encoded_by_several_processes(tmp_path):
    source = roberta_like(tmp_path / "source")
    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines() * 3, per_document=2)
    for out, processes in (("one", 1), ("two", 2)):
        run(corpus, tmp_path / out, tokenizer_path=source, split_sentences=False, num_proc=processes)
    assert folder_bytes(tmp_path / "one") == folder_bytes(tmp_path / "two")


def test_the_unigram_source_gives_unk_for_characters_it_never_saw(tmp_path):
    source = xlmr_like(tmp_path / "source")
    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines())
    manifest = run(corpus, tmp_path / "data", tokenizer_path=source, split_sentences=False)
    assert manifest["counts"]["unk_tokens"] > 0  # the fuzzed lines' rare characters
    assert manifest["counts"]["long_words"] == 0  # a WordPiece notion
    assert "the --tokenizer unigram vocab lacks characters of this corpus; train a vocab on the corpus " \
           "by leaving out --tokenizer (--tokenizer-type unigram for one of its kind)" in unk_warning(manifest)


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_trained_bpe_and_unigram_are_read_back_by_autotokenizer_with_the_same_ids(kind, tmp_path):
    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines(fuzzed=10))
    size = 600 if kind == "bpe" else 390  # the small corpus has about 400 Unigram pieces
    first = run(corpus, tmp_path / "one", tokenizer_type=kind, vocab_size=size, split_sentences=False)

    assert first["options"]["tokenizer_type"] == kind and first["tokenizer"]["kind"] == kind
    assert first["tokenizer"]["vocab_size"] == size
    data = load_data(tmp_path / "one")
    roles = token_roles(data.tokenizer)
    assert (roles.cls_token_id, roles.pad_token_id, roles.sep_token_id, roles.unk_token_id,
            roles.mask_token_id) == (0, 1, 2, 3, 4)
    assert roles.pair_layout == "roberta" and roles.word_prefix == ("Ġ" if kind == "bpe" else "▁")
    assert sorted(data_documents(tmp_path / "one")) == sorted(auto_documents(tmp_path / "one" / "tokenizer", corpus))
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "one" / "tokenizer"))
    assert auto("a b", "c")["input_ids"] == data.tokenizer.encode("a b", "c").ids
    assert auto.mask_token == "<mask>" and auto.pad_token_id == 1


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_a_typed_mask_in_a_trained_bpe_or_unigram_takes_the_space_before_it(kind, tmp_path):
    """As RoBERTa's and XLM-R's: "the <mask> is" is `the <mask> Ġis`, the shape of a masked word in
    training, not `the Ġ <mask> Ġis` (a lone word start it never saw before a mask); in the corpus the
    same text stays text."""
    lines = [f"{line} the <mask> is here" for line in sample_lines()]
    corpus = write_lines_corpus(tmp_path / "corpus.txt", lines)
    run(corpus, tmp_path / "data", tokenizer_type=kind, vocab_size=600 if kind == "bpe" else 1000,
        split_sentences=False)
    tokenizer = load_data(tmp_path / "data").tokenizer
    prefix = "Ġ" if kind == "bpe" else "▁"  # a word start alone
    mask = tokenizer.token_to_id("<mask>")
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "data" / "tokenizer"))
    plain = tokenizer.encode("the is").ids  # the words' own pieces, the mask's place between them
    for ids in (tokenizer.encode("the <mask> is").ids, auto("the <mask> is")["input_ids"]):
        at = ids.index(mask)
        assert tokenizer.id_to_token(ids[at - 1]) != prefix
        assert ids[:at] + ids[at + 1:] == plain
    assert all(mask not in sentence for document in data_documents(tmp_path / "data") for sentence in document)


@pytest.mark.parametrize("kind, options", [("bpe", {"vocab_size": 600}), ("unigram", {"vocab_size": 390}),
                                           ("unigram", {"vocab_size": 300, "vocab_sample_bytes": 4000})],
                         ids=["bpe", "unigram", "unigram-sampled"])
def test_a_trained_vocab_and_its_data_are_byte_identical_from_run_to_run(kind, options, tmp_path):
    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines(fuzzed=10))
    for out in ("one", "two"):
        run(corpus, tmp_path / out, tokenizer_type=kind, split_sentences=False, **options)
    assert folder_bytes(tmp_path / "one") == folder_bytes(tmp_path / "two")
    assert json.loads((tmp_path / "one" / "manifest.json").read_text())["tokenizer"]["vocab_size"] == options["vocab_size"]


def test_a_unigram_vocab_only_is_the_vocab_tokenize_trains_and_encodes_the_same_data(tmp_path):
    from bertpre.data.vocab import train_vocab

    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines(fuzzed=10))
    train_vocab([corpus], tmp_path / "vocab", vocab_size=390, tokenizer_type="unigram",
                split_sentences=False, show_progress=False)
    trained = run(corpus, tmp_path / "trained", tokenizer_type="unigram", vocab_size=390, split_sentences=False)
    reused = run(corpus, tmp_path / "reused", tokenizer_path=tmp_path / "vocab", split_sentences=False)
    assert reused["tokenizer"]["kind"] == trained["tokenizer"]["kind"] == "unigram"
    assert (tmp_path / "vocab" / "tokenizer.json").read_bytes() == (
        tmp_path / "trained" / "tokenizer" / "tokenizer.json").read_bytes()
    assert data_documents(tmp_path / "reused") == data_documents(tmp_path / "trained")


@pytest.mark.parametrize("kind, vocab_size", [("bpe", 500), ("unigram", 250)])
def test_a_vocab_trained_once_encodes_shards(kind, vocab_size, tmp_path):
    from bertpre.data.vocab import train_vocab

    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines(fuzzed=0) * 2)
    manifest = train_vocab([corpus], tmp_path / "vocab", vocab_size=vocab_size, tokenizer_type=kind,
                           **({} if kind == "unigram" else {"min_frequency": 1}), split_sentences=False,
                           show_progress=False)
    assert manifest["options"]["tokenizer_type"] == kind and manifest["tokenizer"]["kind"] == kind
    from data_prep import Shard

    shard = run(corpus, tmp_path / "shard-0", tokenizer_path=tmp_path / "vocab", split_sentences=False,
                shard=Shard(0, 2))
    assert shard["tokenizer"]["kind"] == kind
    assert (tmp_path / "shard-0" / "tokenizer" / "tokenizer.json").read_bytes() == (
        tmp_path / "vocab" / "tokenizer.json").read_bytes()


def test_the_cli_trains_bpe_and_refuses_bad_sources(tmp_path, monkeypatch, capsys):
    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines(fuzzed=0))
    code, out, err = run_main(["tokenize", corpus, "--out", tmp_path / "data", "--tokenizer-type", "bpe",
                               "--vocab-size", "500", "--no-sentence-split"], monkeypatch, capsys)
    assert code == 0, err
    assert json.loads((tmp_path / "data" / "manifest.json").read_text())["tokenizer"]["kind"] == "bpe"
    assert "500 tokens, bpe, cased, trained" in out

    code, out, err = run_main(["tokenize", corpus, "--out", tmp_path / "sampled", "--tokenizer-type", "bpe",
                               "--vocab-size", "400", "--vocab-sample-bytes", "2000", "--no-sentence-split"],
                              monkeypatch, capsys)
    assert code == 0, err
    sampled = json.loads((tmp_path / "sampled" / "manifest.json").read_text())["tokenizer"]
    assert sampled["kind"] == "bpe" and sampled["sample"]["bytes"] <= 2000 + 200

    code, _, err = run_main(["tokenize", corpus, "--out", tmp_path / "x", "--tokenizer-type", "sentencepiece"],
                            monkeypatch, capsys)
    assert code == 2 and "--tokenizer-type 'sentencepiece' is not known; use one of wordpiece, bpe, unigram" in err

    model = tmp_path / "model-without-tokenizer"  # a model folder: config.json, weights, no tokenizer
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "roberta", "vocab_size": 50265}))
    code, _, err = run_main(["tokenize", corpus, "--out", tmp_path / "y", "--tokenizer", model],
                            monkeypatch, capsys)
    assert code == 2 and f"tokenizer folder {model} has neither tokenizer.json nor vocab.txt" in err
    assert len(err.strip().splitlines()) == 1

    no_mask = roberta_like(tmp_path / "no-mask")
    config = json.loads((no_mask / "tokenizer_config.json").read_text())
    config.pop("mask_token", None)
    (no_mask / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer = json.loads((no_mask / "tokenizer.json").read_text())
    tokenizer["added_tokens"] = [token for token in tokenizer["added_tokens"] if token["content"] != "<mask>"]
    (no_mask / "tokenizer.json").write_text(json.dumps(tokenizer))
    code, _, err = run_main(["tokenize", corpus, "--out", tmp_path / "z", "--tokenizer", no_mask],
                            monkeypatch, capsys)
    assert code == 2 and f"tokenizer {no_mask} has no mask (none of [MASK] <mask>" in err

    other = roberta_like(tmp_path / "other-model")
    (other / "config.json").write_text(json.dumps({"model_type": "roberta", "vocab_size": 300}))
    code, _, err = run_main(["tokenize", corpus, "--out", tmp_path / "w", "--tokenizer", other],
                            monkeypatch, capsys)
    assert code == 2 and f"{other / 'config.json'} says vocab_size 300, but" in err
    assert "has 401 ids: the tokenizer is not this model's" in err


SHARED_CORPORA = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpora"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_CORPORA.is_dir(), reason="../shared/corpora is not there")
@pytest.mark.parametrize("make", [roberta_like, xlmr_like], ids=["roberta", "xlmr"])
def test_data_ids_are_autotokenizers_on_every_sentence_of_the_shared_corpora(make, tmp_path):
    files = sorted(SHARED_CORPORA.glob("*.txt"))
    training = [line for path in files for line in path.read_text(encoding="utf-8").splitlines()[:3000]]
    source = make(tmp_path / "source", vocab_size=4000, lines=training)
    run(files, tmp_path / "data", tokenizer_path=source, validation_share=0.05)
    assert sorted(data_documents(tmp_path / "data")) == sorted(auto_documents(source, files, split_sentences=True))


def test_the_cli_trains_unigram_without_a_note_and_says_when_the_corpus_gives_fewer_pieces(tmp_path, monkeypatch,
                                                                                          capsys):
    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines(fuzzed=0))
    code, out, err = run_main(["tokenize", corpus, "--out", tmp_path / "data", "--tokenizer-type", "unigram",
                               "--vocab-size", "250", "--no-sentence-split"], monkeypatch, capsys)
    assert code == 0, err
    assert "250 tokens, unigram, cased, trained" in out and "note:" not in err
    code, out, err = run_main(["tokenize", corpus, "--out", tmp_path / "big", "--tokenizer-type", "unigram",
                               "--no-sentence-split"], monkeypatch, capsys)
    assert code == 0, err
    assert "267 tokens (asked 30,522: the corpus has too few subwords), unigram, cased, trained" in out
    code, _, err = run_main(["tokenize", corpus, "--out", tmp_path / "small", "--tokenizer-type", "unigram",
                             "--vocab-size", "100", "--no-sentence-split"], monkeypatch, capsys)
    assert code == 2 and err.strip() == ("error: --vocab-size 100 is too small for a unigram vocab of this corpus: it "
                                         "must hold every character of the text and the 5 special tokens, 112 in "
                                         "all; raise --vocab-size")


def test_the_summary_names_the_tokenizers_own_unknown_token(tmp_path):
    from bertpre.data.summary import format_summary

    corpus = write_lines_corpus(tmp_path / "corpus.txt", sample_lines(fuzzed=0))
    bpe = run(corpus, tmp_path / "bpe", tokenizer_type="bpe", vocab_size=600, split_sentences=False)
    assert format_summary(bpe, tmp_path / "bpe").splitlines()[-1].startswith("<unk> share")
    wordpiece = run(corpus, tmp_path / "wordpiece", vocab_size=600, split_sentences=False)
    assert format_summary(wordpiece, tmp_path / "wordpiece").splitlines()[-1].startswith("[UNK] share")
