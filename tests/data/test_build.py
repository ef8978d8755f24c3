"""bertpre.data.build: corpus to DATA folder (train or reuse a vocab, encode, split, write)."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from _long_tail import long_tailed_counts, long_tailed_documents  # tests/ is on sys.path
from _tokenize_helpers import documents, folder_bytes, run, write_corpus

from bertpre.data import build as pipeline
from bertpre.data.folder import load_data
from bertpre.data.summary import format_summary, unk_warning
from bertpre.errors import UserError
from bertpre.tokenizer.wordpiece import load_tokenizer, save_tokenizer, train_tokenizer
from data_prep import CorpusError


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("tokenize")
    corpus = write_corpus(root / "corpus.txt", documents(20))
    manifest = run(corpus, root / "data", validation_share=0.1)
    return root / "data", manifest


def test_every_document_lands_in_exactly_one_split_in_corpus_order(data_folder):
    folder, _ = data_folder
    data = load_data(folder)
    decoded = [
        data.tokenizer.decode(document[0])
        for split in (data.train, data.validation)
        for document in split["input_ids"]
    ]
    expected = [doc[0].lower() for doc in documents(20)]
    assert sorted(decoded) == sorted(expected)
    train_order = [expected.index(text) for text in decoded[:18]]
    assert train_order == sorted(train_order)


def test_manifest_counts_match_the_dataset(data_folder):
    folder, manifest = data_folder
    data = load_data(folder)
    assert json.loads((folder / "manifest.json").read_text()) == manifest == data.manifest
    rows = list(data.train["input_ids"]) + list(data.validation["input_ids"])
    counts = manifest["counts"]
    assert counts["documents"] == 20
    assert (counts["train_documents"], counts["validation_documents"]) == (18, 2)
    assert counts["sentences"] == 60
    assert counts["tokens"] == sum(len(sentence) for doc in rows for sentence in doc)
    assert counts["unk_tokens"] == counts["long_words"] == 0
    assert counts["duplicate_documents_dropped"] == counts["invalid_utf8_replacements"] == 0
    assert manifest["tokenizer"]["vocab_size"] == 150
    assert manifest["tokenizer"]["trained"] is True
    assert manifest["sources"][0]["bytes"] == (folder.parent / "corpus.txt").stat().st_size
    assert len(manifest["sources"][0]["sha256"]) == 64
    assert "DATA folder" in format_summary(manifest, folder)


def test_same_inputs_give_byte_identical_data_for_any_num_proc(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents(30))
    run(corpus, tmp_path / "first", validation_share=0.1)
    run(corpus, tmp_path / "second", validation_share=0.1, num_proc=2)
    first, second = folder_bytes(tmp_path / "first"), folder_bytes(tmp_path / "second")
    inventory = json.loads(first[".bertpre-inventory.json"])  # byte-identical too: no times in it
    assert {name: entry["sha256"] for name, entry in inventory["files"].items()} == \
        {name: hashlib.sha256(content).hexdigest() for name, content in first.items()
         if name != ".bertpre-inventory.json"}
    assert list(first) == list(second)
    assert [name for name in first if first[name] != second[name]] == []


def test_validation_share_rounds_and_keeps_one_document_each_side(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents(4))
    assert run(corpus, tmp_path / "none", validation_share=0.0)["counts"]["validation_documents"] == 1
    assert run(corpus, tmp_path / "most", validation_share=0.9)["counts"]["train_documents"] == 1


def test_unknown_characters_and_over_long_words_are_counted(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents(6))
    reference = tmp_path / "reference"
    run(corpus, reference)
    odd = write_corpus(tmp_path / "odd.txt", [["A " + "x" * 150 + " word.", "Snow ☃ falls."], ["Cats sleep."]])
    manifest = run(odd, tmp_path / "odd", tokenizer_path=reference / "tokenizer" / "vocab.txt")
    counts = manifest["counts"]
    # x*150 is over the 100-character limit; ☃ is not in the reused vocab.
    assert (counts["unk_tokens"], counts["long_words"]) == (2, 1)
    assert manifest["tokenizer"]["trained"] is False
    assert "1 word is over 100 characters (each one [UNK])" in unk_warning(manifest)
    assert load_data(tmp_path / "odd").tokenizer.get_vocab() == load_tokenizer(reference / "tokenizer").get_vocab()


def test_a_trained_vocab_reports_its_alphabet_and_the_summary_ends_with_the_unk_share(tmp_path):

    # 1,500 CJK characters and 。, the rarest 500 seen twice: 4.2% of the text, [UNK] under the
    # old default of 1,000 characters; now every one is in the vocab.
    documents = long_tailed_documents(long_tailed_counts())
    manifest = run(write_corpus(tmp_path / "zh.txt", documents), tmp_path / "data", vocab_size=2000,
                   min_frequency=2)
    characters = sum(len(sentence) for document in documents for sentence in document)
    assert manifest["tokenizer"]["alphabet"] == {
        "characters": 1501, "continuing": 0, "in_vocab": 1501, "least_count_in_vocab": 2,
        "occurrences": characters, "occurrences_outside": 0}
    assert manifest["counts"]["unk_tokens"] == 0
    assert format_summary(manifest, tmp_path / "data").splitlines()[-1] == \
        "[UNK] share             0.0000% (0 tokens)"
    assert unk_warning(manifest) is None


def test_reused_cased_vocab_keeps_its_own_ids_and_casing(tmp_path):
    tokenizer = train_tokenizer(documents(10), vocab_size=120, lowercase=False, min_frequency=1)
    vocab_only = tmp_path / "vocab"
    save_tokenizer(tokenizer, vocab_only)
    (vocab_only / "tokenizer.json").unlink()
    corpus = write_corpus(tmp_path / "corpus.txt", documents(5))
    manifest = run(corpus, tmp_path / "data", tokenizer_path=vocab_only)
    assert manifest["tokenizer"]["lowercase"] is False
    data = load_data(tmp_path / "data")
    ids = [doc for split in (data.train, data.validation) for doc in split["input_ids"]]
    expected = tokenizer.encode(documents(5)[0][0], add_special_tokens=False).ids
    assert expected in [sentence for doc in ids for sentence in doc]


def test_jsonl_corpus_with_a_chosen_text_field(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        "".join(json.dumps({"body": " ".join(doc)}) + "\n" for doc in documents(8)), encoding="utf-8"
    )
    manifest = run(corpus, tmp_path / "data", text_field="body")
    assert manifest["counts"]["documents"] == 8
    assert manifest["counts"]["sentences"] == 24  # each record split back into its 3 sentences


def test_existing_out_needs_overwrite_and_only_a_data_folder_is_replaced(tmp_path, data_folder):
    corpus = write_corpus(tmp_path / "corpus.txt", documents(5))
    out = tmp_path / "data"
    run(corpus, out)
    with pytest.raises(UserError, match="already exists; pass --overwrite"):
        run(corpus, out)
    run(write_corpus(tmp_path / "other.txt", documents(7)), out, overwrite=True)
    assert load_data(out).manifest["counts"]["documents"] == 7
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "notes.txt").write_text("keep me")
    with pytest.raises(UserError, match="folder of other files, which `bertpre tokenize` did not make"):
        run(corpus, precious, overwrite=True)
    assert (precious / "notes.txt").read_text() == "keep me"
    assert sorted(path.name for path in tmp_path.iterdir()) == [
        "corpus.txt", "data", "other.txt", "precious"]


def test_an_interrupted_run_leaves_no_folder_behind(tmp_path, monkeypatch):
    corpus = write_corpus(tmp_path / "corpus.txt", documents(5))

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pipeline, "save_tokenizer", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run(corpus, tmp_path / "data")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt"]


def test_bad_input_is_reported_before_any_folder_is_made(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents(3))
    with pytest.raises(CorpusError, match="no such file"):
        run([tmp_path / "missing.txt"], tmp_path / "data")
    with pytest.raises(UserError, match="--validation-share"):
        run(corpus, tmp_path / "data", validation_share=1.0)
    with pytest.raises(UserError, match="single document|one for training"):
        run(write_corpus(tmp_path / "one.txt", documents(1)), tmp_path / "data")
    with pytest.raises(UserError, match="is a file, not a folder"):
        run(corpus, tmp_path / "corpus.txt" / "data")
    with pytest.raises(UserError, match="too small"):
        run(corpus, tmp_path / "data", vocab_size=20)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["corpus.txt", "one.txt"]


def test_sentence_splitting_can_be_switched_off(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", [[" ".join(doc)] for doc in documents(4)])
    assert run(corpus, tmp_path / "split")["counts"]["sentences"] == 12
    assert run(corpus, tmp_path / "lines", split_sentences=False)["counts"]["sentences"] == 4


def test_special_token_text_in_the_corpus_is_never_a_special_id(tmp_path):
    literals = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    docs = documents(6)
    docs[0].append("Write " + " and ".join(literals) + " here.")
    docs[1].append("x[MASK]y [SEP][CLS] [mask] ([UNK]).")
    docs[2].append(" ".join(literals * 3))
    manifest = run(write_corpus(tmp_path / "corpus.txt", docs), tmp_path / "data",
                   validation_share=0.2)
    data = load_data(tmp_path / "data")
    special_ids = {data.tokenizer.token_to_id(token) for token in literals}
    assert len(special_ids) == 5 and None not in special_ids
    for split in (data.train, data.validation):
        for document in split["input_ids"]:
            for sentence in document:
                assert not special_ids & set(sentence), sentence
    assert manifest["counts"]["unk_tokens"] == 0  # a literal "[UNK]" is text, not unknown


def test_a_data_folder_kept_inside_the_corpus_folder_is_no_corpus(tmp_path, capsys):
    """`tokenize proj --out proj/data`, then again into another folder: the first DATA folder's
    tokenizer/vocab.txt and JSON files are not read as text; the note names it."""
    project = tmp_path / "my project"
    project.mkdir()
    write_corpus(project / "corpus.txt", documents(12))
    first = run([project], project / "data")
    capsys.readouterr()
    second = run([project], tmp_path / "again")
    assert capsys.readouterr().err.strip() == (
        f"note: skipped 1 folder inside the corpus that is no corpus: {project / 'data'} (a DATA folder)")
    assert second["counts"] == first["counts"]
    assert [source["path"] for source in second["sources"]] == [str(project / "corpus.txt")]
