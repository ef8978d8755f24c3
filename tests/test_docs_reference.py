"""docs/reference/cli.md and config.md are what docs/gen_reference.py makes from the code now."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def generator():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["cli.md", "config.md"])
def test_the_committed_reference_page_is_what_the_code_generates(name):
    gen = generator()
    committed = (ROOT / "docs" / "reference" / name).read_text(encoding="utf-8")
    assert committed == gen.PAGES[name](), (
        f"docs/reference/{name} is out of date with the code; regenerate it with {gen.REGENERATE}")


def test_every_command_and_every_config_key_is_on_its_page():
    from typer.main import get_command

    from bertpre.cli import app
    from bertpre.config import SECTIONS
    from bertpre.config.sections import key_names

    gen = generator()
    cli, config = gen.cli_page(), gen.config_page()
    assert all(f"## `bertpre {name}`" in cli for name in get_command(app).commands)
    for section in SECTIONS:
        body = config.split(f"## `{section}`", 1)[1].split("\n## ", 1)[0]
        assert all(f"| `{name}`" in body for name in key_names(section)), section


def test_the_check_names_the_command_that_regenerates(tmp_path, monkeypatch, capsys):
    gen = generator()
    monkeypatch.setattr(gen, "REFERENCE", tmp_path)
    assert gen.main(["--check"]) == 1
    assert "regenerate with make docs-reference" in capsys.readouterr().err
    assert gen.main([]) == 0 and gen.main(["--check"]) == 0
