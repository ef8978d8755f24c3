"""What a newcomer meets first: help pages, printed hints, a finished run resumed, fill-mask."""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import typer
from typer.testing import CliRunner

from bertpre.cli import app
from bertpre.config import load_config
from bertpre.data import load_data
from bertpre.errors import UserError
from bertpre.model.bert import BertConfig, BertForPreTraining
from bertpre.tokenizer.wordpiece import save_tokenizer, train_tokenizer
from bertpre.tools.demo import DemoResult, format_result
from bertpre.train.optim import learning_rate
from bertpre.train.report import end_block, finished_run_note, schedule_change_note

ROOT = Path(__file__).parents[2]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))

COMMANDS = ["tokenize", "pretrain", "export", "demo", "info", "inspect", "fill-mask", "evaluate", "finetune"]


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


def bertpre(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertpre", *args], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=180)


def test_a_finished_run_started_again_says_so_and_how_to_train_longer(tiny_data, tmp_path):
    """Step 6 of 6, started again: nothing to do, exit 0; its suggested command trains on, and
    the note gives the learning rate's jump with the schedule's own numbers."""
    first = ["pretrain", "--config", "tiny", "--data", str(tiny_data), "--out", "my run",
             "--set", "train.max_steps=6", "--set", "optim.warmup_steps=2",
             "--set", "train.log_every=1"]
    assert bertpre(*first, cwd=tmp_path).returncode == 0
    metrics = (tmp_path / "my run" / "metrics.jsonl").read_text()

    again = bertpre(*first, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "run folder my run is already at step 6 = train.max_steps; nothing to do\n" in again.stderr
    assert "steps this session" not in again.stderr and "%|" not in again.stderr  # no bar, no run
    assert (tmp_path / "my run" / "metrics.jsonl").read_text() == metrics
    suggested = command_after(again.stderr, "bertpre pretrain")
    assert suggested == ["bertpre", "pretrain", "--config", "my run/config.yaml", "--out", "my run",
                         "--set", "train.max_steps=12"]
    assert command_after(again.stderr, "bertpre export") == [
        "bertpre", "export", "my run", "--out", "my run-export"]

    longer = bertpre(*suggested[1:], cwd=tmp_path)
    assert longer.returncode == 0, longer.stderr[-2000:]
    before = learning_rate(6, lr=2e-3, warmup_steps=2, max_steps=6)  # 0: the old decay's end
    after = learning_rate(6, lr=2e-3, warmup_steps=2, max_steps=12)  # 2e-3 * (1 - 4/10)
    assert (before, after) == (0.0, pytest.approx(1.2e-3))
    assert (f"note: the learning rate jumps from {before:.4g} to {after:.4g} at step 6: the linear "
            "decay now ends at step 12 instead of 6\n") in longer.stderr
    logged = [json.loads(line) for line in (tmp_path / "my run" / "metrics.jsonl").read_text().splitlines()]
    # The update at 0-based step 6 is logged as step 7, with the learning rate it used.
    assert [row["train/lr"] for row in logged if row["step"] == 7 and "train/lr" in row] == [after]


@pytest.mark.parametrize("schedule, warmup, step, old, new, expected", [
    ("linear", 10, 50, 100, 200,
     "the learning rate jumps from {a} to {b} at step 50: the linear decay now ends at step 200 instead of 100"),
    ("cosine", 10, 50, 100, 400,
     "the learning rate jumps from {a} to {b} at step 50: the cosine decay now ends at step 400 instead of 100"),
    ("linear", 60, 50, 100, 200,
     "the learning rate at step 50 stays {b} (warmup); the linear decay now ends at step 200 instead of 100"),
    ("constant", 10, 50, 100, 200, "the learning-rate schedule does not change: {b} at step 50"),
])
def test_the_resume_note_gives_the_schedules_own_learning_rates(schedule, warmup, step, old, new, expected):
    settings = [f"optim.schedule={schedule}", f"optim.warmup_steps={warmup}", "optim.lr=1e-3"]
    saved = load_config("tiny", [*settings, f"train.max_steps={old}"])
    resumed = load_config("tiny", [*settings, f"train.max_steps={new}"])
    before = learning_rate(step, lr=1e-3, warmup_steps=warmup, max_steps=old, schedule=schedule)
    after = learning_rate(step, lr=1e-3, warmup_steps=warmup, max_steps=new, schedule=schedule)
    assert schedule_change_note(saved, resumed, step) == expected.format(a=f"{before:.4g}", b=f"{after:.4g}")


def test_a_finished_phased_run_is_told_to_start_anew_from_its_weights():
    config = load_config("base", ["train.out=runs/my base"])
    note = finished_run_note(config, config.train.max_steps).splitlines()
    assert note[0] == "run folder runs/my base is already at step 1,000,000 = train.max_steps; nothing to do"
    assert note[1] == ("  to train longer: its phases end here; start a new run from its weights "
                       "with --init-from 'runs/my base'")


def test_raising_max_steps_within_the_phases_keeps_the_schedule():
    saved = load_config("base", ["train.max_steps=500000"])
    resumed = load_config("base", ["train.max_steps=1000000"])
    lr = learning_rate(400_000, lr=1e-4, warmup_steps=10_000, max_steps=1_000_000)  # one schedule: continue
    assert schedule_change_note(saved, resumed, 400_000) == (
        f"the learning-rate schedule does not change: {lr:.4g} at step 400,000")


@pytest.fixture(scope="module")
def export_folder(tmp_path_factory):
    """An untrained tiny model and its tokenizer in one folder, as `bertpre export` writes it."""
    tokenizer = train_tokenizer([["the cat sat on the mat.", "the dog sat on the log."] * 10],
                                vocab_size=60, min_frequency=1)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=32))
    folder = tmp_path_factory.mktemp("export")
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    return folder


def test_fill_mask_shows_an_unknown_word_as_unk_rather_than_dropping_it(export_folder):
    result = CliRunner().invoke(app, ["fill-mask", str(export_folder), "the zebra sat on the [MASK]."])
    assert result.exit_code == 0, result.output
    filled = result.output.splitlines()[1]
    assert filled.startswith("  → the [UNK] sat on the")  # "zebra": no z in the vocab
    assert "[MASK]" not in filled and "[CLS]" not in filled and "[SEP]" not in filled


def test_the_demo_summary_names_the_objective_it_trained():
    """An XLNet demo's evaluation holds plm_* metrics and no pairs: the summary reads those."""
    out = Path("demo")
    result = DemoResult(out=out, run_dir=out / "run", export_dir=out / "model",
                        tensorboard_dir=out / "run/tensorboard", steps=2,
                        evaluation={"plm_loss": 4.25, "perplexity": 70.1, "plm_acc": 0.125,
                                    "predictions": 10, "sequences": 4},
                        unigram_accuracy=0.05, predictions=[], objective="plm")
    text = format_result(result)
    assert "validation PLM loss 4.250, perplexity 70.1" in text
    assert "PLM accuracy 12.5% against 5.0%" in text and "pair accuracy" not in text
    bert = DemoResult(out=out, run_dir=out / "run", export_dir=out / "model",
                      tensorboard_dir=out / "run/tensorboard", steps=2,
                      evaluation={"mlm_loss": 4.0, "perplexity": 54.6, "mlm_acc": 0.2, "pair_acc": float("nan")},
                      unigram_accuracy=0.05, predictions=[])
    assert "MLM accuracy 20.0%" in format_result(bert) and "pair accuracy" not in format_result(bert)


@pytest.mark.slow
def test_the_demo_trains_an_xlnet_config_to_the_end(tmp_path):
    config = tmp_path / "xlnet demo.yaml"
    config.write_text("model:\n  architecture: xlnet\n  hidden_size: 32\n  num_hidden_layers: 2\n"
                      "  num_attention_heads: 4\n  intermediate_size: 64\n  mem_len: 16\n"
                      "data:\n  objective: plm\n  max_seq_length: 32\n  num_workers: 0\n"
                      "train:\n  batch_size: 4\n  micro_batch_size: 4\n  precision: fp32\n  eval_every: 1000\n"
                      "  save_every: 1000\noptim:\n  warmup_steps: 1\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "bertpre", "demo", "--out", str(tmp_path / "demo"),
                           "--config", str(config), "--max-steps", "2"], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "validation PLM loss" in done.stdout and "top 5:" in done.stdout
