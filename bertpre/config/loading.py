"""Reading a config: the one YAML loader every command uses, `--set key=value` overrides, and
the shipped presets (`--config base`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bertpre.configs import preset_file, preset_names
from bertpre.errors import UserError

MAX_CONFIG_BYTES = 1_000_000
# A config has no use for many aliases; refusing them stops "billion laughs" expansion.
MAX_YAML_ALIASES = 16


def resolve_config_path(path: str | Path) -> Path:
    """A config file: `path` itself when it exists, else the shipped preset it names.

    `base`, `base.yaml` and `configs/base.yaml` all name the preset `base` when no such file is
    in the working directory; a file the user has always wins.
    """
    path = Path(path)
    if path.is_file():
        return path
    name = path.name.removesuffix(".yaml").removesuffix(".yml")
    if path.parent in (Path("."), Path("configs")) and name in preset_names():
        return Path(str(preset_file(name)))
    return path


def read_yaml(path: Path, *, instead: str, holds: str) -> dict[str, Any]:
    """The mapping a YAML config file holds ({} for an empty file), or UserError in one line.

    Args:
        instead: what to pass when `path` is no file, e.g. "a YAML file or a preset (base, tiny)".
        holds: what the mapping holds, e.g. "sections model, data, optim, train".
    """
    if not path.is_file():
        what = "is a folder" if path.is_dir() else "does not exist"
        raise UserError(f"config file {path} {what}; pass --config with {instead}")
    if path.stat().st_size > MAX_CONFIG_BYTES:
        raise UserError(f"config file {path} is over {MAX_CONFIG_BYTES} bytes; is it a config?")
    try:
        text = path.read_text(encoding="utf-8")
        _check_aliases(text)
        raw = yaml.safe_load(text)
    except UnicodeDecodeError as error:
        raise UserError(f"config file {path} is not UTF-8 text ({error.reason})") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        raise UserError(f"config file {path} is not valid YAML{line}: {getattr(error, 'problem', error)}") from None
    except RecursionError:
        raise UserError(f"config file {path} is nested too deeply to be a config") from None
    except ValueError as error:  # a scalar YAML cannot turn into a value: 5,000 digits, a 13th month
        raise UserError(f"config file {path} holds a value YAML cannot read: {error}") from None
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise UserError(f"config file {path} must be a mapping with {holds}; it holds a {type(raw).__name__}")
    return raw


def _check_aliases(text: str) -> None:
    """Refuse more than MAX_YAML_ALIASES aliases; the event stream never expands them."""
    aliases = sum(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader))
    if aliases > MAX_YAML_ALIASES:
        raise UserError(
            f"the config uses more than {MAX_YAML_ALIASES} YAML aliases; write the values out instead"
        )


def parse_override(override: str, form: str) -> tuple[str, Any]:
    """One `--set key=value` as (key, value), the value read as a YAML scalar the way the YAML
    file would read it (a user-typed override is text by nature).

    Args:
        form: what an override looks like, for the error, e.g. "section.key=value, e.g. train.max_steps=10".
    """
    key, separator, text = override.partition("=")
    if not separator:
        raise UserError(f"override {override!r} must look like {form}")
    try:
        value = yaml.safe_load(text) if text.strip() else None
    except (yaml.YAMLError, ValueError, RecursionError):
        shown = override if len(override) <= 80 else override[:77] + "..."
        raise UserError(f"override {shown!r}: the value is not a YAML scalar") from None
    return key.strip(), value
