"""A corpus tokenized as an array job would: a vocab from a sample, four shard processes at once
with one command line (only SLURM_ARRAY_TASK_ID differs), then `pretrain` on DATA/shard-*."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from _tiny_data import tiny_documents  # tests/ is on sys.path

ROOT = Path(__file__).parents[2]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
for variable in ("SLURM_ARRAY_TASK_ID", "RANK"):
    ENV.pop(variable, None)


def bertpre(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertpre", *args], cwd=cwd, env={**ENV, **env},
                          capture_output=True, text=True, timeout=300)


def test_four_shard_tasks_in_parallel_then_pretrain_on_the_glob(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    texts = tiny_documents(240, seed=3)
    for part in range(3):
        (corpus / f"part-{part}.txt").write_text(
            "\n\n".join("\n".join(document) for document in texts[part::3]) + "\n", encoding="utf-8")

    vocab = bertpre("tokenize", "corpus", "--vocab-only", "--vocab-sample-bytes", "8000",
                    "--vocab-size", "120", "--min-frequency", "1", "--out", "vocab", cwd=tmp_path)
    assert vocab.returncode == 0, vocab.stderr
    assert "trained on    a sample of" in vocab.stdout and "peak memory" in vocab.stdout
    # every character of the sample is in the vocab (it has room for all)
    assert re.search(r"^characters    ([\d,]+) of the text's \1 in the vocab$", vocab.stdout, re.M), vocab.stdout

    # One command line for every task, as in an sbatch --array=0-3 script.
    task = [sys.executable, "-m", "bertpre", "tokenize", "corpus", "--tokenizer", "vocab",
            "--num-shards", "4", "--no-sentence-split", "--out", "data/shard-{shard}"]
    processes = [subprocess.Popen(task, cwd=tmp_path, env={**ENV, "SLURM_ARRAY_TASK_ID": str(index)},
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for index in range(4)]
    outputs = [process.communicate(timeout=300) for process in processes]
    for index, (process, (stdout, stderr)) in enumerate(zip(processes, outputs, strict=True)):
        assert process.returncode == 0, stderr
        assert f"shard                   {index} of 4 (the counts below are its own)" in stdout
    assert sorted(path.name for path in (tmp_path / "data").iterdir()) == [f"shard-{i}" for i in range(4)]
    manifests = [json.loads((tmp_path / "data" / f"shard-{i}" / "manifest.json").read_text()) for i in range(4)]
    assert [manifest["shard"]["index"] for manifest in manifests] == [0, 1, 2, 3]
    kept = sum(manifest["counts"]["documents"] for manifest in manifests)
    dropped = sum(manifest["counts"]["duplicate_documents_dropped"] for manifest in manifests)
    assert kept + dropped == 240 and kept == len({tuple(document) for document in texts})

    merged = bertpre("tokenize", "--merge-manifests", "data", cwd=tmp_path)
    assert merged.returncode == 0, merged.stderr
    assert f"documents               {kept:,}" in merged.stdout
    assert "wrote data/manifest.json for 4 shards" in merged.stdout

    run = bertpre("pretrain", "--config", str(ROOT / "configs" / "tiny.yaml"), "--data", "data/shard-*",
                  "--out", "run", "--set", "train.max_steps=4", "--set", "train.eval_every=2", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads((tmp_path / "run" / "data.json").read_text())
    assert record["sources"][0]["shards"] == [f"data/shard-{i}" for i in range(4)]
    assert record["sources"][0]["manifest"]["counts"]["documents"] == kept
    metrics = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("eval/mlm_loss" in entry for entry in metrics)

    # A lost shard is refused in one line before anything trains.
    (tmp_path / "data" / "shard-1").rename(tmp_path / "shard-1-lost")
    broken = bertpre("pretrain", "--config", str(ROOT / "configs" / "tiny.yaml"), "--data", "data/shard-*",
                     "--out", "run2", "--set", "train.max_steps=2", cwd=tmp_path)
    assert broken.returncode == 2
    assert broken.stderr.strip().splitlines() == [
        "error: data/shard-* lacks shard 1 of 4 (it holds 3); tokenize it with --num-shards 4 --shard-index 1"]


def test_an_array_task_outside_the_shards_is_refused(tmp_path):
    (tmp_path / "corpus.txt").write_text("One document.\n\nAnother one.\n", encoding="utf-8")
    result = bertpre("tokenize", "corpus.txt", "--tokenizer", "vocab", "--num-shards", "2",
                     "--out", "data/shard-{shard}", cwd=tmp_path, SLURM_ARRAY_TASK_ID="2")
    assert result.returncode == 2
    assert result.stderr.strip() == ("error: SLURM_ARRAY_TASK_ID 2 is outside --num-shards 2 (shards 0 "
                                     "to 1); submit the array as --array=0-1")
