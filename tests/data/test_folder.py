"""bertpre.data.folder: opening a DATA folder written by the tokenize pipeline."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from _tokenize_helpers import documents, run, write_corpus  # tests/ is on sys.path

from bertpre.data.folder import load_data
from bertpre.errors import UserError


@pytest.fixture(scope="module")
def data_folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tokenize")
    run(write_corpus(root / "corpus.txt", documents(20)), root / "data", validation_share=0.1)
    return root / "data"


def test_data_folder_holds_documents_of_sentences_of_ids(data_folder):
    folder = data_folder
    data = load_data(folder)
    assert sorted(path.name for path in folder.iterdir()) == [".bertpre-inventory.json", "dataset", "manifest.json", "tokenizer"]
    assert (len(data.train), len(data.validation)) == (18, 2)
    assert data.train.column_names == ["input_ids"]
    first = data.train[0]["input_ids"]
    assert len(first) == 3
    assert data.tokenizer.decode(first[0]) in {
        doc[0].lower() for doc in documents(20)
    }
    special_ids = {data.tokenizer.token_to_id(token) for token in ["[CLS]", "[SEP]", "[PAD]"]}
    assert not special_ids & {token for sentence in first for token in sentence}


def test_load_data_explains_what_is_missing(tmp_path, data_folder):
    with pytest.raises(UserError, match="does not exist; create it with `bertpre tokenize"):
        load_data(tmp_path / "nowhere")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "manifest.json").write_text("{}")
    with pytest.raises(UserError, match="is not a DATA folder \\(has no dataset, tokenizer\\)"):
        load_data(tmp_path / "half")


def test_load_data_rejects_a_file_and_a_broken_manifest(tmp_path, data_folder):
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserError, match="is not a DATA folder \\(is a file\\)"):
        load_data(tmp_path / "file")
    broken = tmp_path / "broken"
    shutil.copytree(data_folder, broken)
    (broken / "manifest.json").write_text("{not json")
    with pytest.raises(UserError, match="manifest.json is not valid JSON"):
        load_data(broken)


def test_load_data_needs_both_splits(tmp_path, data_folder):
    partial = tmp_path / "partial"
    shutil.copytree(data_folder, partial)
    shutil.rmtree(partial / "dataset" / "validation")
    (partial / "dataset" / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    with pytest.raises(UserError, match="dataset_dict.json is damaged"):  # the manifest's sha256
        load_data(partial)
    manifest = json.loads((partial / "manifest.json").read_text())
    del manifest["files"], manifest["manifest_sha256"]  # DATA written before manifests recorded files
    (partial / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(UserError, match="lacks the train and validation splits"):
        load_data(partial)
