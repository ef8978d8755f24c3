"""What a newcomer meets first: help pages, printed hints, a finished run resumed, fill-mask."""
from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from bertpre.cli import app
from bertpre.data import load_data
from bertpre.errors import UserError
from bertpre.tools.demo import DemoResult, format_result
from bertpre.train.report import end_block

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


AWKWARD = "my runs/it's here"  # a space and a quote: both break an unquoted shell command


def command_after(text: str, prefix: str) -> list[str]:
    """The shell words of the command that starts at `prefix` in `text`, up to the line's end."""
    line = next(line for line in text.splitlines() if prefix in line)
    return shlex.split(line[line.index(prefix):])


def test_the_end_of_a_run_prints_commands_a_shell_reads_back_as_the_same_paths():
    block = end_block(run_dir=AWKWARD, start_step=0, step=10, tokens_seen=100, wall_seconds=1.0,
                      train={}, evaluation={}, checkpoint=None, stopped=False)
    assert command_after(block, "tensorboard --logdir")[:3] == [
        "tensorboard", "--logdir", f"{AWKWARD}/tensorboard"]
    assert command_after(block, "bertpre export") == [
        "bertpre", "export", AWKWARD, "--out", f"{AWKWARD}-export"]


def test_the_demo_prints_commands_a_shell_reads_back_as_the_same_paths():
    out = Path(AWKWARD)
    result = DemoResult(out=out, run_dir=out / "run", export_dir=out / "model",
                        tensorboard_dir=out / "run/tensorboard", steps=1,
                        evaluation={"mlm_loss": 1.0, "perplexity": 2.7, "mlm_acc": 0.1, "pair_acc": 0.5},
                        unigram_accuracy=0.05, predictions=[])
    text = format_result(result)
    assert command_after(text, "tensorboard --logdir") == [
        "tensorboard", "--logdir", f"{AWKWARD}/run/tensorboard"]
    assert command_after(text, "bertpre fill-mask") == [
        "bertpre", "fill-mask", f"{AWKWARD}/model", "The [MASK] function returns a list."]


def test_a_missing_data_folder_suggests_a_command_with_its_path_quoted(tmp_path):
    missing = tmp_path / AWKWARD
    with pytest.raises(UserError) as raised:
        load_data(missing)
    suggested = str(raised.value).split("`")[1]
    assert shlex.split(suggested) == ["bertpre", "tokenize", "CORPUS", "--out", str(missing)]
