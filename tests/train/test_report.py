"""What a run shows: TensorBoard's layout and texts, the start and end blocks, the ETA, --version,
and (slow, with Chromium) the loss chart on the first screen of the Custom Scalars tab."""
from __future__ import annotations

import datetime
import importlib.metadata
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bertpre.config import load_config
from bertpre.train.optim import learning_rate
from bertpre.train.report import (
    CUSTOM_SCALARS_LAYOUT,
    end_block,
    eta_line,
    format_duration,
    schedule_change_note,
    schedule_words,
)
from bertpre.train.trainer import pretrain

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
DOCS_SCREENSHOT = ROOT / "docs" / "tensorboard-custom-scalars.png"


@pytest.fixture(scope="module")
def run(tiny_data, tmp_path_factory) -> tuple[Path, str]:
    """A 12-step tiny run (batch 32 of 64 tokens), logged every 4 steps, evaluated at 6 and 12,
    and what it wrote on stderr."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("report") / "run"
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        pretrain(load_config(TINY, [f"data.path={tiny_data}", f"train.out={out}", "train.max_steps=12",
                                    "train.log_every=4", "train.eval_every=6"]))
    return out, stderr.getvalue()


def test_event_files_hold_the_custom_scalars_layout_and_the_config(run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.custom_scalar import layout_pb2

    out, _ = run
    events = EventAccumulator(str(out / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    tags = events.Tags()["tensors"]
    assert "custom_scalars__config__" in tags
    layout = layout_pb2.Layout()
    layout.ParseFromString(events.Tensors("custom_scalars__config__")[0].tensor_proto.string_val[0])
    titles = [[chart.title for chart in category.chart] for category in layout.category]
    assert titles == [list(charts) for charts in CUSTOM_SCALARS_LAYOUT.values()]
    assert list(layout.category[0].chart[0].multiline.tag) == [r"^train/loss$", r"^eval/loss$"]
    config = events.Tensors("run/config/text_summary")[0]
    assert config.step == 0
    text = config.tensor_proto.string_val[0].decode()
    assert text.startswith("bertpre ") and "max_seq_length: 64" in text
    assert "documents" in events.Tensors("run/data/text_summary")[0].tensor_proto.string_val[0].decode()


def test_eval_loss_sits_beside_train_loss(run):
    out, _ = run
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    evaluations = [row for row in rows if "eval/mlm_loss" in row]
    assert [row["step"] for row in evaluations] == [6, 12]
    for row in evaluations:
        assert row["eval/loss"] == pytest.approx(row["eval/mlm_loss"] + row["eval/pair_loss"])


def test_the_run_introduces_itself_with_its_numbers_and_says_goodbye(run):
    out, stderr = run
    lines = stderr.replace("\r", "\n").splitlines()
    start = lines.index(next(line for line in lines if line.startswith(f"run {out}: BERT of ")))
    assert lines[start + 1] == "  12 steps, 32 sequences of 64 tokens a step: 2,048 tokens a step, 24,576 in all"
    assert lines[start + 2] == "  precision fp32 (as configured); 1 process on cpu"
    data = re.fullmatch(r"  data: ([\d,]+) documents, ([\d,]+) tokens; an epoch is ([\d,]+) steps, "
                        r"so the run reads ([\d.]+) epochs", lines[start + 3])
    assert data and int(data[1].replace(",", "")) == 60
    assert float(data[4]) == pytest.approx(12 / int(data[3].replace(",", "")), rel=0.1)  # steps shown rounded
    assert lines[start + 4] == "  learning rate 0.002: warmup to step 30, past the schedule's end at step 12"
    eta = next(line for line in lines if re.search(r"tokens/s \(.* s a step\): about .* to step 12 \(around ", line))
    assert eta
    end = lines.index(next(line for line in lines if line.startswith(f"run {out} finished at step 12 ")))
    tokens = int(re.search(r"12 steps this session, ([\d,]+) tokens", lines[end])[1].replace(",", ""))
    assert 0 < tokens <= 12 * 2048
    assert lines[end + 1].startswith("  last train window: loss ")
    assert lines[end + 2].startswith("  last evaluation:   loss ")
    assert lines[end + 3] == f"  checkpoint: {out}/checkpoints/step-00000012"
    assert lines[end + 5] == f"  export: bertpre export {out} --out {out}-export"
    state = json.loads((out / "checkpoints" / "step-00000012" / "trainer_state.json").read_text())
    assert state["tokens_seen"] == tokens


def test_eta_and_durations_read_as_people_write_them():
    now = datetime.datetime(2026, 11, 23, 20, 0)
    assert eta_line(step=100, max_steps=1100, seconds_per_step=4.5, tokens_per_s=12345.6, now=now) == (
        "at 12,346 tokens/s (4.5 s a step): about 1 h 15 min to step 1,100 (around 2026-11-23 21:15)")
    assert [format_duration(s) for s in (4, 65, 3600, 7325)] == ["4 s", "1 min 05 s", "1 h 00 min", "2 h 02 min"]


@pytest.mark.parametrize("seconds_per_step, expected", [
    (0.0706, "about 19,611,111 h 06 min to step 1,000,000,000,000 (around 4264-"),
    (100.0, "about 27,777,777,777 h 30 min to step 1,000,000,000,000 (past the year 9999)"),
    (math.inf, "about an unknown time to step 1,000,000,000,000 (past the year 9999)"),
    (math.nan, "about an unknown time to step 1,000,000,000,000 (at an unknown time)"),
])
def test_eta_of_the_longest_run_allowed_does_not_overflow(seconds_per_step, expected):
    now = datetime.datetime(2026, 11, 23, 20, 0)
    line = eta_line(step=10, max_steps=10**12, seconds_per_step=seconds_per_step, tokens_per_s=1.0, now=now)
    assert expected in line


def test_version_is_the_package_version(tmp_path):
    result = subprocess.run([sys.executable, "-m", "bertpre", "--version"], capture_output=True, text=True,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), timeout=60)
    assert result.returncode == 0
    assert result.stdout.strip() == f"bertpre {importlib.metadata.version('bertpre')}"


def test_the_version_is_in_the_run_config_and_the_checkpoint(run):
    out, _ = run
    version = importlib.metadata.version("bertpre")
    assert (out / "config.yaml").read_text().startswith(f"# written by bertpre {version} (config keys ")
    config = json.loads((out / "checkpoints" / "step-00000012" / "config.json").read_text())
    assert config["bertpre_version"] == version


@pytest.mark.slow
def test_tensorboard_opens_on_the_loss_chart_in_a_headless_browser(run, tmp_path):
    from _headless_browser import HeadlessChromium, find_chromium, free_port, wait_for

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium here (Debian: apt install chromium)")
    out, _ = run
    port = free_port()
    board = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(out / "tensorboard"),
                              "--port", str(port), "--host", "127.0.0.1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    browser = None
    try:
        wait_for(f"http://127.0.0.1:{port}/data/plugin/custom_scalars/layout")
        browser = HeadlessChromium(chromium)
        browser.open(f"http://127.0.0.1:{port}/?darkMode=false#custom_scalars")
        deadline, found = time.monotonic() + 60, {"boxes": []}
        while not found["boxes"] and time.monotonic() < deadline:
            time.sleep(0.5)
            found = browser.text_boxes("loss (train and eval)")
        assert found["boxes"], "the loss chart's title never appeared"
        box = found["boxes"][0]
        assert box["width"] > 0 and 0 <= box["top"] and box["bottom"] <= found["viewportHeight"]  # first screen
        time.sleep(2)  # let the lines draw
        browser.screenshot(tmp_path / "custom-scalars.png")
        assert (tmp_path / "custom-scalars.png").stat().st_size > 10_000
        if os.environ.get("BERTPRE_UPDATE_SCREENSHOT"):
            shutil.copyfile(tmp_path / "custom-scalars.png", DOCS_SCREENSHOT)
    finally:
        if browser is not None:
            browser.close()
        board.terminate()
        board.wait(timeout=30)


# A WSD run of 100 steps (10 warmup, lr 1e-3) decays over steps 80-99; resumed to 200, over 160-199.
WSD_RUN = ["optim.schedule=wsd", "optim.warmup_steps=10", "optim.lr=1e-3"]


def wsd_lr(step: int, max_steps: int) -> str:
    return f"{learning_rate(step, lr=1e-3, warmup_steps=10, max_steps=max_steps, schedule='wsd'):.4g}"


@pytest.mark.parametrize("step, expected", [
    (5, "the learning rate at step 5 stays 0.0006 (warmup); the WSD stable phase now runs to step 160 and "
        "the 1-sqrt decay over the last 40 steps starts there and ends at step 200 (it was to start at step 80)"),
    (80, "the learning rate at step 80 stays 0.001 (stable); the WSD stable phase now runs to step 160 and "
         "the 1-sqrt decay over the last 40 steps starts there and ends at step 200 (it was to start at step 80)"),
    (90, "the WSD decay had begun at step 80, so the learning rate jumps back up from {old} to the stable 0.001 "
         "at step 90 (expect the loss the decay brought down to rise again): the stable phase now runs to step "
         "160 and the 1-sqrt decay over the last 40 steps starts there and ends at step 200; to lengthen a WSD "
         "run without this, resume it with the larger train.max_steps before it reaches step 80"),
    (100, "the WSD decay had begun at step 80, so the learning rate jumps back up from 0 to the stable 0.001 "
          "at step 100 (expect the loss the decay brought down to rise again): the stable phase now runs to "
          "step 160 and the 1-sqrt decay over the last 40 steps starts there and ends at step 200; to lengthen "
          "a WSD run without this, resume it with the larger train.max_steps before it reaches step 80"),
])
def test_the_wsd_resume_note_moves_the_stable_phase_and_the_decay(step, expected):
    saved = load_config("tiny", [*WSD_RUN, "train.max_steps=100"])
    resumed = load_config("tiny", [*WSD_RUN, "train.max_steps=200"])
    assert wsd_lr(90, 100) == "0.0002929"  # 1e-3 · (1 - √(10/20))
    assert schedule_change_note(saved, resumed, step) == expected.format(old=wsd_lr(step, 100))


def test_the_wsd_resume_note_inside_both_decays_gives_the_new_one():
    saved = load_config("tiny", [*WSD_RUN, "train.max_steps=100"])
    resumed = load_config("tiny", [*WSD_RUN, "train.max_steps=110"])  # decays over 88-109
    assert schedule_change_note(saved, resumed, 95) == (
        f"the WSD decay had begun at step 80, so the learning rate jumps back up from {wsd_lr(95, 100)} to "
        f"{wsd_lr(95, 110)} at step 95: the 1-sqrt decay now runs over the last 22 steps, from step 88 to "
        "110 instead of 80 to 100")


@pytest.mark.parametrize("overrides, step, expected", [
    (["optim.schedule=wsd"], 0,
     "learning rate 0.002 (wsd): warmup to step 30, stable until step 480, then 1-sqrt decay to 0 at step 600 "
     "(the last 120 steps)"),
    (["optim.schedule=wsd", "optim.decay_shape=linear", "optim.decay_fraction=1", "optim.warmup_steps=0"], 0,
     "learning rate 0.002 (wsd): linear decay to 0 at step 600 (the last 600 steps)"),
    (["optim.schedule=cosine"], 0, "learning rate 0.002: warmup to step 30, then cosine decay to 0 at step 600"),
    (["optim.schedule=constant", "optim.warmup_steps=0"], 0, "learning rate 0.002: constant"),
    (["optim.schedule=wsd", "train.max_steps=20"], 0,
     "learning rate 0.002 (wsd): warmup to step 30, past the schedule's end at step 20"),
])
def test_the_start_block_says_the_schedule_with_its_steps(overrides, step, expected):
    assert schedule_words(load_config("tiny", overrides), step) == expected


def test_a_phased_runs_schedule_is_said_for_the_phase_that_runs(tmp_path):
    path = tmp_path / "phased.yaml"
    path.write_text("optim: {schedule: wsd, warmup_steps: 10, lr: 2.0e-3}\n"
                    "phases: [{steps: 100}, {steps: 50, optim: {lr: 1.0e-3, warmup_steps: 5}}]\n")
    config = load_config(path)
    assert schedule_words(config, 99) == ("learning rate 0.002 (wsd): warmup to step 10, stable until step 80, "
                                          "then 1-sqrt decay to 0 at step 100 (the last 20 steps)")
    assert schedule_words(config, 100) == ("learning rate 0.001 (wsd): warmup to step 105, stable until step 140, "
                                           "then 1-sqrt decay to 0 at step 150 (the last 10 steps)")
    assert schedule_words(load_config("base"), 950_000) == (
        "learning rate 0.0001: warmup to step 10,000, then linear decay to 0 at step 1,000,000")  # continue


def test_the_pretrain_guides_wsd_note_is_what_configs_tiny_says():
    saved = load_config("tiny", ["optim.schedule=wsd"])  # 600 steps: the decay starts at 480
    resumed = load_config("tiny", ["optim.schedule=wsd", "train.max_steps=1200"])
    note = schedule_change_note(saved, resumed, 300)
    assert note == ("the learning rate at step 300 stays 0.002 (stable); the WSD stable phase now runs to step "
                    "960 and the 1-sqrt decay over the last 240 steps starts there and ends at step 1,200 (it "
                    "was to start at step 480)")
    assert f"`{note}`" in " ".join((ROOT / "docs" / "guides" / "pretrain.md").read_text(encoding="utf-8").split())



def test_a_run_its_caller_exports_names_that_export_not_a_command_for_another():
    """The demo exports to demo/model itself: its run's closing lines say so rather than suggest
    `bertpre export demo/run --out demo/run-export`."""
    common = dict(run_dir="demo/run", start_step=0, step=600, tokens_seen=1, wall_seconds=1.0, train={},
                  evaluation={}, checkpoint="demo/run/checkpoints/step-00000600", stopped=False)
    assert end_block(**common).splitlines()[-1] == "  export: bertpre export demo/run --out demo/run-export"
    assert end_block(**common, export_to="demo/model").splitlines()[-1] == "  export: demo/model (written next)"
