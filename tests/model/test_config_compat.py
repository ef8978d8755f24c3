"""Runs and checkpoints written before a family's own keys became one record (issue 53 item 1)
still load unchanged: `config_compat/` holds the `model:`-flat config.yaml sections and the
config.json files bertpre wrote then (the presets, and tiny XLNet, RoBERTa, XLM-R and rope runs),
each read back and written again byte for byte."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from bertpre.config import load_config
from bertpre.model import BertConfig

WRITTEN = Path(__file__).parent / "config_compat"
# Keys added after these files were written, with the default a file without them reads as: the
# written-back config.yaml holds them, and is the file's own once they are left out.
ADDED_SINCE = {"model": {"loss_chunk_rows": "auto"}}


@pytest.mark.parametrize("name", sorted(path.name for path in WRITTEN.glob("*.yaml")))
def test_a_config_yaml_written_before_loads_and_writes_the_same(name):
    text = (WRITTEN / name).read_text()
    written = load_config(WRITTEN / name).to_dict()
    for section, added in ADDED_SINCE.items():
        assert {key: written[section].pop(key) for key in added} == added
    assert yaml.safe_dump(written, sort_keys=False) == text


@pytest.mark.parametrize("name", sorted(path.name for path in WRITTEN.glob("*.config.json")))
def test_a_config_json_written_before_reads_and_writes_the_same(name):
    written = json.loads((WRITTEN / name).read_text())
    config = BertConfig.from_hf_dict(written)
    assert config.to_hf_dict() == written
    assert BertConfig(**config.to_dict()) == config  # the flat dict builds the same config, record and all
