"""The YAML presets shipped with bertpre, installed as `bertpre.configs`: `--config base` finds them."""
from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable


def preset_names() -> list[str]:
    """The shipped presets by name: albert-base, base, large, large-batch, mini, modernbert-base, tiny,
    tiny-electra, tiny-modernbert."""
    return sorted(entry.name.removesuffix(".yaml") for entry in files(__name__).iterdir()
                  if entry.name.endswith(".yaml"))


def preset_file(name: str) -> Traversable:
    """The YAML file of preset `name`."""
    return files(__name__) / f"{name}.yaml"
