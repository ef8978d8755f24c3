"""The command line's shape: every command has help with an example; user errors are one line."""
from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bertpre.cli import app

COMMANDS = ["tokenize", "pretrain", "export", "demo", "info", "inspect", "fill-mask", "evaluate", "finetune"]


def test_every_command_is_registered_in_the_order_of_the_flow():
    names = [command.name or command.callback.__name__ for command in app.registered_commands]
    assert names == COMMANDS


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_an_example_in_its_help(command):
    result = CliRunner().invoke(app, [command, "--help"], terminal_width=120)
    assert result.exit_code == 0
    assert f"Example: bertpre {command}" in result.output


def test_info_says_the_config_s_warnings_on_stderr_as_pretrain_would(tmp_path):
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["info", "--config", "tiny", "--set", "train.max_steps=20"])
    assert result.exit_code == 0
    assert result.stderr.startswith("warning: optim.warmup_steps (30) is not shorter than the run")
    assert "warning" not in CliRunner().invoke(app, ["info", "--config", "tiny"]).stderr
