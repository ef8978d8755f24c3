"""bertpre.data.mixture: several DATA folders opened as one mixture with one vocabulary."""
from __future__ import annotations

from pathlib import Path

import pytest
from _tiny_data import build_tiny_data  # tests/ is on sys.path

from bertpre.data import load_mixture
from bertpre.data.mixture import unique_names
from bertpre.errors import UserError


def test_weights_are_normalised_and_names_are_the_basenames(tiny_data, tmp_path):
    other = build_tiny_data(tmp_path / "wiki", documents=10, seed=1, tokenizer=tiny_data / "tokenizer")
    mixture = load_mixture([(str(tiny_data), 3), (other, 1)])
    assert mixture.weights == [0.75, 0.25] and mixture.names == [tiny_data.name, "wiki"]
    assert mixture.is_mixture and mixture.path == tiny_data
    assert mixture.tokenizer.get_vocab() == mixture.folders[1].tokenizer.get_vocab()
    single = load_mixture(tiny_data)
    assert not single.is_mixture and single.weights == [1.0]


def test_names_are_made_unique_in_order():
    assert unique_names([Path("a/wiki"), Path("b/wiki"), Path("wiki-2"), Path("c/wiki")]) == [
        "wiki", "wiki-2", "wiki-2-2", "wiki-3"]


def test_folders_from_different_tokenizers_are_refused_naming_both(tiny_data, tmp_path):
    other = build_tiny_data(tmp_path / "other", documents=30, seed=2)
    assert load_mixture(other).tokenizer.get_vocab() != load_mixture(tiny_data).tokenizer.get_vocab()
    with pytest.raises(UserError) as error:
        load_mixture([(tiny_data, 1), (other, 1)])
    message = str(error.value)
    assert f"DATA folders {tiny_data} and {other} were made by different tokenizers" in message
    assert f"--tokenizer {tiny_data / 'tokenizer'}" in message and "\n" not in message


def test_a_missing_folder_is_named(tiny_data, tmp_path):
    with pytest.raises(UserError, match=f"DATA folder {tmp_path / 'nowhere'} does not exist"):
        load_mixture([(tiny_data, 1), (tmp_path / "nowhere", 1)])
