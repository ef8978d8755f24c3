"""bertpre.data.build with --add-vocab: a released vocab grown with the corpus's frequent words."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import transformers
from _tokenize_helpers import documents, run, write_corpus  # tests/ is on sys.path

from bertpre.data.folder import load_data
from bertpre.data.summary import format_summary
from bertpre.errors import UserError
from bertpre.tokenizer.vocab_extension import vocab_extension
from bertpre.tokenizer.wordpiece import load_tokenizer, vocab_in_id_order

DOMAIN_WORDS = ["immunohistochemistry", "cardiomyopathy", "thrombocytopenia"]


def domain_documents(count: int) -> list[list[str]]:
    return [[f"Case {index} showed {DOMAIN_WORDS[index % 3]} on the scan.",
             f"The {DOMAIN_WORDS[(index + 1) % 3]} was confirmed by the lab."] for index in range(count)]


@pytest.fixture(scope="module")
def grown(tmp_path_factory) -> tuple[Path, Path, dict]:
    root = tmp_path_factory.mktemp("add_vocab")
    run(write_corpus(root / "general.txt", documents(20)), root / "source", validation_share=0.1)
    domain = write_corpus(root / "domain.txt", domain_documents(12))
    manifest = run(domain, root / "data", tokenizer_path=root / "source" / "tokenizer", add_vocab=20,
                   min_frequency=2)
    return root / "source" / "tokenizer", root / "data", manifest


def test_domain_words_are_single_tokens_after_every_source_id(grown):
    source_folder, data_folder, manifest = grown
    source, data = load_tokenizer(source_folder), load_data(data_folder)
    old, new = vocab_in_id_order(source), vocab_in_id_order(data.tokenizer)
    assert new[:len(old)] == old
    assert 0 < len(new) - len(old) <= 20
    assert set(DOMAIN_WORDS) <= set(new[len(old):])
    pieces = vocab_extension(source, data.tokenizer)
    assert pieces is not None and len(pieces) == len(new) - len(old)
    encoded = [sentence for document in data.train["input_ids"] for sentence in document]
    ids = {data.tokenizer.token_to_id(word) for word in DOMAIN_WORDS}
    assert ids <= {token for sentence in encoded for token in sentence}  # DATA encoded with them


def test_manifest_records_the_source_vocab_and_the_number_added(grown):
    source_folder, data_folder, manifest = grown
    entry = manifest["tokenizer"]
    assert entry["trained"] is False
    assert entry["source_vocab_size"] == 150
    assert entry["source_vocab_sha256"] == hashlib.sha256((source_folder / "vocab.txt").read_bytes()).hexdigest()
    assert entry["added_pieces"] == entry["vocab_size"] - 150
    assert manifest["options"]["add_vocab"] == 20
    assert json.loads((data_folder / "manifest.json").read_text()) == manifest


def test_transformers_loads_the_grown_folder_with_the_same_ids(grown):
    _, data_folder, _ = grown
    auto = transformers.AutoTokenizer.from_pretrained(str(data_folder / "tokenizer"))
    ours = load_tokenizer(data_folder / "tokenizer" / "tokenizer.json")
    texts = ["Immunohistochemistry and cardiomyopathy, again.", "The cat watched the garden."]
    assert auto(texts)["input_ids"] == [encoding.ids for encoding in ours.encode_batch(texts)]
    assert auto.convert_ids_to_tokens(auto("cardiomyopathy")["input_ids"]) == ["[CLS]", "cardiomyopathy", "[SEP]"]


def test_summary_says_how_many_were_added_with_examples(grown):
    _, data_folder, manifest = grown
    summary = format_summary(manifest, data_folder)
    added = manifest["tokenizer"]["added_pieces"]
    assert f"vocab                   {150 + added} tokens, lowercase, extended" in summary
    assert f"added to vocab          {added} tokens after the 150 of the --tokenizer" in summary
    first = vocab_in_id_order(load_tokenizer(data_folder / "tokenizer"))[150:155]
    added_row = next(line for line in summary.splitlines() if line.startswith("added to vocab"))
    assert added_row.endswith(", e.g. " + " ".join(first))


def test_add_vocab_is_deterministic(grown, tmp_path):
    source_folder, data_folder, manifest = grown
    domain = write_corpus(tmp_path / "domain.txt", domain_documents(12))
    again = run(domain, tmp_path / "again", tokenizer_path=source_folder, add_vocab=20, min_frequency=2)
    for name in ("tokenizer/tokenizer.json", "tokenizer/vocab.txt"):
        assert (tmp_path / "again" / name).read_bytes() == (data_folder / name).read_bytes()
    assert again["tokenizer"] == manifest["tokenizer"]


@pytest.mark.parametrize("options, says", [
    ({"add_vocab": 5}, "--add-vocab needs --tokenizer"),
    ({"add_vocab": 0, "tokenizer_path": "source"}, "--add-vocab 0 must be 1 or more"),
])
def test_bad_add_vocab_is_a_user_error(options, says, tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", domain_documents(4))
    with pytest.raises(UserError, match=says):
        run(corpus, tmp_path / "data", **options)
    assert not (tmp_path / "data").exists()
