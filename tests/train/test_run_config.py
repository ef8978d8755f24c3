"""bertpre.train.run_config: RUN/config.yaml read back whole; a key cut from a file written with
today's keys is refused, while a file from a bertpre that knew fewer keys takes the new keys'
defaults (a run from before `optim.decay_fraction` existed still resumes and evaluates)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from bertpre.config import load_config
from bertpre.config.sections import run_config_header
from bertpre.errors import UserError
from bertpre.train.run_config import read_run_config


def saved(tmp_path: Path, *overrides: str) -> Path:
    path = tmp_path / "config.yaml"
    load_config("tiny", list(overrides)).save(path)
    return path


def test_a_saved_config_reads_back_equal_and_names_its_keys_fingerprint(tmp_path):
    path = saved(tmp_path, "optim.schedule=wsd")
    assert re.match(r"# written by bertpre \S+ \(config keys [0-9a-f]{12}\):", path.read_text())
    assert path.read_text().startswith(run_config_header())
    assert read_run_config(path) == load_config("tiny", ["optim.schedule=wsd"])


def test_a_key_cut_from_a_file_written_with_todays_keys_is_refused(tmp_path):
    path = saved(tmp_path)
    path.write_text(path.read_text().replace("  keep_last: ", "  # keep_last: "))
    with pytest.raises(UserError, match="lacks train.keep_last"):
        read_run_config(path)


def test_a_file_from_a_bertpre_that_knew_fewer_keys_takes_the_new_keys_defaults(tmp_path):
    path = saved(tmp_path)
    text = path.read_text()
    # as a bertpre before the WSD schedule wrote it: no fingerprint, no decay keys
    old = re.sub(r" \(config keys [0-9a-f]+\):", ":", text)
    old = "".join(line for line in old.splitlines(keepends=True)
                  if not line.lstrip().startswith(("decay_fraction:", "decay_shape:")))
    assert old != text and "decay_fraction" not in old
    path.write_text(old)
    assert read_run_config(path) == load_config("tiny")


def test_even_an_older_file_must_hold_every_section(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("# written by bertpre 0.1.0: this run's config, every key resolved\n"
                    "model: {hidden_size: 768}\ndata: {max_seq_length: 32}\n")
    with pytest.raises(UserError, match="lacks the optim section and 1 more"):
        read_run_config(path)
