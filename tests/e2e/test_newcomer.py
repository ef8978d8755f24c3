"""What a newcomer meets first: help pages, printed hints, a finished run resumed, fill-mask."""
from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from bertpre.cli import app

COMMANDS = ["tokenize", "pretrain", "export", "demo", "info", "inspect", "fill-mask", "evaluate"]


def help_page(command: str) -> str:
    result = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
    assert result.exit_code == 0, result.output
    return result.output


def help_lines(page: str, name: str) -> str:
    """The row of `name` (an option or argument) in a help page, with its wrapped continuation."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(name + " ")
                 or line.strip() == name)
    row = [lines[start]]
    for line in lines[start + 1:]:
        if not line.startswith(" " * 6) or not line.strip():
            break
        row.append(line)
    return "\n".join(row)


@pytest.mark.parametrize("command", COMMANDS)
def test_help_names_no_type_for_flags_and_marks_required_options(command):
    page = help_page(command)
    click_command = typer.main.get_command(app).commands[command]
    for param in click_command.params:
        name = param.opts[0] if param.param_type_name == "option" else param.display_name_raw
        row = help_lines(page, name)
        if getattr(param, "is_flag", False):
            assert "<" not in row.split("  ")[0], row  # no <bool> beside --overwrite
        assert ("[required]" in row) == bool(param.required), row
    assert "<bool>" not in page


def test_square_brackets_in_help_are_shown_literally():
    assert "(needs bertpre[zh])" in help_page("tokenize")
    assert "[MASK]" in help_page("fill-mask")
