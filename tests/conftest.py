"""Shared test set-up. pytest puts this folder on sys.path, so the helper modules beside this
file (`_tiny_data`, `_tokenize_helpers`, `_hf_models`) import by name from any test folder."""
from __future__ import annotations

from pathlib import Path

import pytest
from _tiny_data import build_tiny_data


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DATA folder of 66 tiny documents (6 held out), made once by the real tokenize pipeline.

    Tests only read it; one that changes DATA builds its own with `build_tiny_data`.
    """
    return build_tiny_data(tmp_path_factory.mktemp("tiny") / "data")
