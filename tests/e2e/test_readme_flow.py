"""The README's commands, run as a user types them, in the README's order, in a scratch folder."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer

REPO = Path(__file__).resolve().parents[2]
BERTPRE = Path(sys.executable).parent / "bertpre"  # the console script beside this Python
TINY = str(REPO / "configs" / "tiny.yaml")
ANIMALS = ["cat", "dog", "bird", "fish", "horse", "mouse", "sheep", "goat"]
PLACES = ["garden", "house", "field", "river", "forest", "barn", "road", "hill"]


def write_corpus(folder: Path) -> None:
    """Forty distinct short documents, plus one duplicate, in two files (one gzipped)."""
    folder.mkdir()
    documents = []
    for d in range(40):
        sentences = [f"This is story {d}."] + [
            f"The {ANIMALS[(d + i) % 8]} walked to the {PLACES[(d * 3 + i) % 8]} in the morning. "
            f"It saw a {ANIMALS[(d + 2 * i) % 8]} near the {PLACES[(d + i) % 8]}."
            for i in range(6)
        ]
        documents.append("\n".join(sentences))
    documents.insert(5, documents[0])
    (folder / "part1.txt").write_text("\n\n".join(documents[:21]) + "\n", encoding="utf-8")
    import gzip

    with gzip.open(folder / "part2.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n\n".join(documents[21:]) + "\n")


def run(*args: str | Path, cwd: Path, expect: int = 0) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == expect, f"{args}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("readme")
    write_corpus(folder / "corpus")
    return folder


def test_readme_flow(workdir: Path):
    # 1. Tokenize your corpus
    run(BERTPRE, "tokenize", "corpus/", "--out", "data/corpus", "--vocab-size", "200", cwd=workdir)
    manifest = json.loads((workdir / "data/corpus/manifest.json").read_text())
    assert manifest["counts"]["documents"] == 40
    assert manifest["counts"]["duplicate_documents_dropped"] == 1
    inspected = run(BERTPRE, "inspect", "data/corpus", "--config", TINY, "--batches", "3", cwd=workdir)
    assert "mask" in inspected.stdout.lower()

    # 2. Pick a config and look at it
    info = run(BERTPRE, "info", "--config", str(REPO / "configs/base.yaml"), cwd=workdir)
    # BERT-base with its pretraining heads (110,106,428 at 30,522 tokens), at the vocabulary of
    # the DATA just made, as pretraining will resolve it: each token is a row of 768 and a bias.
    vocab = Tokenizer.from_file(str(workdir / "data/corpus/tokenizer/tokenizer.json")).get_vocab_size()
    assert f"vocab {vocab}, " in info.stdout and f"{110_106_428 - (30522 - vocab) * 769:,}" in info.stdout

    # 3. Pretrain, with --set overrides; 4. run again: it resumes
    settings = ["--set", "train.save_every=3", "--set", "train.eval_every=3",
                "--set", "train.log_every=1", "--set", "data.max_seq_length=32"]
    run(BERTPRE, "pretrain", "--config", TINY, "--data", "data/corpus", "--out", "runs/tiny",
        "--set", "train.max_steps=3", *settings, cwd=workdir)
    resumed = run(BERTPRE, "pretrain", "--config", TINY, "--data", "data/corpus", "--out", "runs/tiny",
                  "--set", "train.max_steps=6", *settings, cwd=workdir)
    assert "resuming from" in resumed.stderr
    run_dir = workdir / "runs/tiny"
    assert (run_dir / "checkpoints/latest").read_text().strip() == "step-00000006"
    assert any((run_dir / "tensorboard").rglob("events.out.tfevents.*"))
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert sorted(set(steps)) == [1, 2, 3, 4, 5, 6]

    # Export, fill-mask, evaluate
    run(BERTPRE, "export", "runs/tiny", "--out", "my-bert", cwd=workdir)
    filled = run(BERTPRE, "fill-mask", "my-bert", "The cat walked to the [MASK].", cwd=workdir)
    assert "[MASK] 1:" in filled.stdout
    evaluated = run(BERTPRE, "evaluate", "runs/tiny", "--data", "data/corpus", cwd=workdir)
    assert "perplexity" in evaluated.stdout

    # Load the export with transformers, as the README shows
    snippet = (
        "from transformers import AutoTokenizer, BertForPreTraining\n"
        "tokenizer = AutoTokenizer.from_pretrained('my-bert')\n"
        "model = BertForPreTraining.from_pretrained('my-bert')\n"
        "print(type(model).__name__, tokenizer('the cat')['input_ids'])\n"
    )
    loaded = run(sys.executable, "-c", snippet, cwd=workdir)
    assert loaded.stdout.startswith("BertForPreTraining [2,")  # [CLS] = 2


def test_python_dash_m_lists_every_command(tmp_path: Path):
    listed = run(sys.executable, "-m", "bertpre", "--help", cwd=tmp_path).stdout
    for command in ("tokenize", "pretrain", "export", "demo", "info", "inspect", "fill-mask", "evaluate"):
        assert command in listed


def test_demo_runs_the_whole_flow(tmp_path: Path):
    """What `make demo` runs, cut to a few steps: every stage, logs, an export, predictions."""
    result = run(BERTPRE, "demo", "--out", "demo", "--max-steps", "4", cwd=tmp_path)
    demo = tmp_path / "demo"
    assert any((demo / "run/tensorboard").rglob("events.out.tfevents.*"))
    assert (demo / "model/model.safetensors").is_file()
    assert result.stdout.count("top 5:") == 3
    assert f"tensorboard --logdir {Path('demo/run/tensorboard')}" in result.stdout
    # a second demo replaces the first; a folder it did not make is refused
    run(BERTPRE, "demo", "--out", "demo", "--max-steps", "1", cwd=tmp_path)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")  # an empty folder would be taken
    refused = run(BERTPRE, "demo", "--out", "mine", cwd=tmp_path, expect=2)
    assert refused.stderr.count("\n") == 1 and "not made by `bertpre demo`" in refused.stderr
    # A folder name YAML would cut at " #" once lost its tail on its way into the config.
    run(BERTPRE, "demo", "--out", "my demo #1", "--max-steps", "1", cwd=tmp_path)
    assert (tmp_path / "my demo #1" / "model" / "model.safetensors").is_file()


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                    reason="torchrun not installed beside this Python")
def test_torchrun_two_processes(workdir: Path):
    """The README's multi-GPU command, on CPU with gloo: two processes share the global batch."""
    if not (workdir / "data/corpus").exists():
        run(BERTPRE, "tokenize", "corpus/", "--out", "data/corpus", "--vocab-size", "200", cwd=workdir)
    torchrun = Path(sys.executable).parent / "torchrun"
    run(torchrun, "--nproc-per-node", "2", "-m", "bertpre", "pretrain", "--config", TINY,
        "--data", "data/corpus", "--out", "runs/ddp", "--set", "train.max_steps=2",
        "--set", "data.max_seq_length=32", cwd=workdir)
    assert (workdir / "runs/ddp/checkpoints/latest").read_text().strip() == "step-00000002"
