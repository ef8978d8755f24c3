"""RUN/config.yaml read back: the run's own config, whole, or refused naming the file.

`pretrain` writes it with every key resolved, so a key that a file written with today's keys
(`run_config_header`: the version and a fingerprint of the keys) lacks means the file was cut
short or edited, not that the default applies: a resume or an evaluation must not quietly take
defaults. (A file from a bertpre that knew other keys may lack keys added since, which take
their defaults; it must still hold every section.)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bertpre.config import SECTIONS, Config, load_config
from bertpre.config.sections import run_config_header
from bertpre.errors import UserError

RESTORE = "restore it from the run's --config and --set values, or start a new run with another --out"


def flatten(sections: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """`{"train": {"max_steps": 10}}` → `{"train.max_steps": 10}`."""
    flat = {}
    for section, values in sections.items():
        if isinstance(values, dict):
            flat.update({f"{section}.{key}": value for key, value in values.items()})
        else:  # `phases`: one value, a list
            flat[section] = values
    return flat


def read_run_config(path: Path) -> Config:
    """The config a run was started with, from its `config.yaml`.

    Raises:
        UserError: the file is not a valid config, or lacks keys that `pretrain` writes.
    """
    try:
        config = load_config(path)
    except UserError as error:
        raise UserError(f"the run's config {path} is damaged ({error}); {RESTORE}") from None
    text = path.read_text(encoding="utf-8")
    raw = yaml.safe_load(text) or {}
    given = flatten({name: values for name, values in raw.items() if isinstance(values, dict) or name == "phases"})
    expected = flatten(config.to_dict()) if text.startswith(run_config_header()) else {f"{name}.": None for name in SECTIONS}
    missing = [key for key in expected if key != "phases" and not any(
        name == key or (key.endswith(".") and name.startswith(key)) for name in given)]
    if missing:
        first = f"the {missing[0][:-1]} section" if missing[0].endswith(".") else missing[0]
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise UserError(f"the run's config {path} lacks {first}{more} (cut short or edited; pretrain "
                        f"writes every key); {RESTORE}")
    return config
