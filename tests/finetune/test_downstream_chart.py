"""The downstream chart as a user sees it (slow; needs Chromium): a tiny run saves five checkpoints,
`bertpre finetune RUN --checkpoints all --mode probe` scores each on a small learnable task, and
TensorBoard's Custom Scalars tab draws "downstream scores by pretraining step" with one point per
checkpoint, at its pretraining step.

`BERTPRE_UPDATE_SCREENSHOT=1` also writes the README's docs/finetune-downstream.png. To picture a
longer run instead of the tiny one, name a RUN already scored with `--checkpoints` and the sweep's
--out folder: `BERTPRE_DOWNSTREAM_RUN=RUN BERTPRE_DOWNSTREAM_SCORES=OUT` (the same checks apply).
The README's picture: `build_tiny_data(DATA, documents=400, validation=10)`; `bertpre pretrain
--config tiny --data DATA --out RUN --set train.max_steps=300 --set train.save_every=30 --set
train.keep_last=10`; a word-order task of 400 training and 200 validation sentences of
`tiny_documents(300, seed=7)`, every second one shuffled (label real / shuffled); `bertpre finetune
RUN --train ... --validation ... --out OUT --preset probe --seeds 2 --checkpoints all`."""
from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest

from bertpre.config import load_config
from bertpre.finetune.sweep import task_name
from bertpre.train.trainer import pretrain

ROOT = Path(__file__).parents[2]
DOCS_SCREENSHOT = ROOT / "docs" / "finetune-downstream.png"
CATEGORY_TITLE = "1b. downstream (bertpre finetune)"
CHART_TITLE = "downstream scores by pretraining step (mean over seeds)"
CHECKPOINT_STEPS = [6, 12, 18, 24, 30]

# The tiny grammar of tests/_tiny_data.py, labelled by who acts (as in tests/finetune/test_finetune.py).
ANIMALS = ["the cat", "a dog", "a small bird"]
PEOPLE = ["the old man", "my sister", "the farmer"]
VERBS = ["sees", "likes", "follows", "feeds", "watches", "finds"]
OBJECTS = ["the river", "a red apple", "the green field", "an open door", "the tall tree"]

# Scrolls the first leaf element whose whole text is TITLE (shadow roots included) to the top.
SCROLL_TO_TEXT = """(() => {
  const find = (root) => {
    for (const element of root.querySelectorAll('*')) {
      if (element.childElementCount === 0 && (element.textContent || '').trim() === TITLE) return element;
      const inside = element.shadowRoot && find(element.shadowRoot);
      if (inside) return inside;
    }
    return null;
  };
  const element = find(document);
  if (element) element.scrollIntoView({block: 'start'});
  return element !== null;
})()"""


def write_task(folder: Path, count: int, seed: int, name: str) -> Path:
    """Sentences of the tiny grammar labelled by who acts: an animal or a person."""
    rng = random.Random(seed)
    rows = []
    for _ in range(count):
        animal = rng.random() < 0.5
        subject = rng.choice(ANIMALS if animal else PEOPLE)
        rows.append({"text": f"{subject} {rng.choice(VERBS)} {rng.choice(OBJECTS)} .",
                     "label": "animal" if animal else "person"})
    path = folder / name
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def read_results(scores: Path) -> list[dict]:
    return [json.loads(line) for line in (scores / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def scored_run(tiny_data, tmp_path_factory) -> tuple[Path, list[dict]]:
    """A tiny run with checkpoints at steps 6 to 30, each probed with two seeds on the who-acts
    task by the real command; the RUN and the sweep's results.jsonl lines."""
    if os.environ.get("BERTPRE_DOWNSTREAM_RUN"):
        return Path(os.environ["BERTPRE_DOWNSTREAM_RUN"]), read_results(Path(os.environ["BERTPRE_DOWNSTREAM_SCORES"]))
    root = tmp_path_factory.mktemp("downstream-chart")
    run = root / "run"
    pretrain(load_config("tiny", [
        f"data.path={tiny_data}", f"train.out={run}", "model.hidden_size=32", "model.num_hidden_layers=2",
        "model.num_attention_heads=4", "model.intermediate_size=64", "model.max_position_embeddings=64",
        "data.max_seq_length=32", "data.max_predictions_per_seq=5", "data.num_workers=0",
        "train.batch_size=8", "train.micro_batch_size=8", "train.max_steps=30", "train.precision=fp32",
        "train.save_every=6", "train.keep_last=5", "train.eval_every=1000", "train.log_every=6",
        "optim.warmup_steps=3", "optim.lr=1e-3"]), resume=False)
    task = root / "who-acts"
    task.mkdir()
    write_task(task, 120, 0, "train.jsonl")
    write_task(task, 40, 1, "dev.jsonl")
    scores = root / "scores"
    command = [sys.executable, "-m", "bertpre", "finetune", str(run), "--train", str(task / "train.jsonl"),
               "--validation", str(task / "dev.jsonl"), "--out", str(scores), "--mode", "probe",
               "--seeds", "2", "--epochs", "5", "--checkpoints", "all"]
    done = subprocess.run(command, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = read_results(scores)
    assert [line["checkpoint_step"] for line in lines] == CHECKPOINT_STEPS
    return run, lines


def expected_points(lines: list[dict]) -> dict[str, dict[int, float]]:
    """What the sweep logged: each `downstream/TASK_probe/METRIC` tag's mean at each checkpoint's step."""
    points: dict[str, dict[int, float]] = {}
    for line in lines:
        task = task_name(Path(line["data"]["train"]["path"])) + ("_probe" if line["mode"] == "probe" else "")
        for metric, values in line["metrics"].items():
            if values["mean"] is not None:
                points.setdefault(f"downstream/{task}/{metric}", {})[line["checkpoint_step"]] = values["mean"]
    return points


def wait_for_text(browser, text: str, timeout: float = 90.0) -> dict:
    """Where `text` is drawn, once it is (TensorBoard's dashboards load their data after the page)."""
    deadline, found = time.monotonic() + timeout, {"boxes": []}
    while not found["boxes"] and time.monotonic() < deadline:
        time.sleep(0.5)
        found = browser.text_boxes(text)
    assert found["boxes"], f"{text!r} never appeared"
    return found


@pytest.mark.slow
def test_the_downstream_chart_has_one_point_per_checkpoint_in_a_headless_browser(scored_run, tmp_path):
    from _headless_browser import HeadlessChromium, find_chromium, free_port, wait_for

    chromium = find_chromium()
    if chromium is None:
        pytest.skip("no Chromium here (Debian: apt install chromium)")
    run, lines = scored_run
    expected = expected_points(lines)
    assert expected, "the sweep scored nothing"
    port = free_port()
    board = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(run / "tensorboard"),
                              "--port", str(port), "--host", "127.0.0.1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    browser = None
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(f"{base}/data/plugin/custom_scalars/layout", timeout=120)
        served = json.loads(wait_for(f"{base}/data/plugin/scalars/tags"))["."]
        assert sorted(tag for tag in served if tag.startswith("downstream/")) == sorted(expected)
        for tag, points in expected.items():
            query = urllib.parse.urlencode({"run": ".", "tag": tag})
            series = json.loads(wait_for(f"{base}/data/plugin/scalars/scalars?{query}"))  # [wall time, step, value]
            assert [step for _, step, _ in series] == sorted(points), tag  # one point per checkpoint, at its step
            assert [value for _, _, value in series] == pytest.approx([points[step] for step in sorted(points)],
                                                                      rel=1e-6), tag

        browser = HeadlessChromium(chromium, height=600)
        # No smoothing: each checkpoint's score as it was measured.
        browser.open(f"{base}/?darkMode=false#custom_scalars&_smoothingWeight=0")
        box = wait_for_text(browser, CHART_TITLE)["boxes"][0]
        assert box["width"] > 0 and box["height"] > 0
        # The card lists the tags it charts: every downstream tag (and its std card as many).
        wait_for_text(browser, f"Matches ({len(expected)})")
        scroll = SCROLL_TO_TEXT.replace("TITLE", json.dumps(CATEGORY_TITLE))
        assert browser.call("Runtime.evaluate", expression=scroll, returnByValue=True)["result"]["value"]
        found = browser.text_boxes(CHART_TITLE)
        box = found["boxes"][0]
        assert 0 <= box["top"] and box["bottom"] <= found["viewportHeight"]  # on screen for the picture
        time.sleep(3)  # let the lines draw
        browser.screenshot(tmp_path / "finetune-downstream.png")
        assert (tmp_path / "finetune-downstream.png").stat().st_size > 10_000
        if os.environ.get("BERTPRE_UPDATE_SCREENSHOT"):
            shutil.copyfile(tmp_path / "finetune-downstream.png", DOCS_SCREENSHOT)
    finally:
        if browser is not None:
            browser.close()
        board.terminate()
        try:
            board.wait(timeout=30)
        except subprocess.TimeoutExpired:
            board.kill()
            board.wait(timeout=30)
