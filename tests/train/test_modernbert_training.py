"""A ModernBERT trains as a BERT does: on a weighted mixture, with Chinese whole-word masking,
with gradient checkpointing, on two gloo processes, compiled; `bertpre inspect` and `bertpre
evaluate` read its config and its run."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import yaml
from _gloo import run_two_gloo_processes
from _in_process import run_main
from _tiny_data import build_chinese_data, build_tiny_data
from safetensors.torch import load_file

from bertpre.config import load_config
from bertpre.train.trainer import pretrain

ROOT = Path(__file__).parents[2]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
SMALL = ["train.batch_size=8", "train.micro_batch_size=4", "data.max_seq_length=48",
         "data.max_predictions_per_seq=14", "data.num_workers=0", "train.log_every=1", "train.eval_every=1000"]


def modernbert(data: Path | str, out: Path, *overrides: str):
    return load_config("tiny-modernbert", [f"data.path={data}", f"train.out={out}", *SMALL, *overrides])


def losses(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(run_dir / "checkpoints" / latest / "model.safetensors")


def test_a_mixture_trains_and_evaluates_each_source(tiny_data, tmp_path, one_thread):
    wiki = build_tiny_data(tmp_path / "wiki", documents=40, seed=1, tokenizer=tiny_data / "tokenizer")
    config_file = tmp_path / "mixture.yaml"
    raw = yaml.safe_load((ROOT / "configs" / "tiny-modernbert.yaml").read_text())
    raw["data"]["path"] = [{"path": str(tiny_data), "weight": 0.7}, {"path": str(wiki), "weight": 0.3}]
    config_file.write_text(yaml.safe_dump(raw))
    run = pretrain(load_config(config_file, [f"train.out={tmp_path / 'run'}", *SMALL, "train.max_steps=2",
                                             "train.eval_every=2"]))
    assert run.step == 2 and all(0 < loss < 10 for loss in losses(run.run_dir))
    evaluated = [json.loads(line) for line in (run.run_dir / "metrics.jsonl").read_text().splitlines()]
    tags = {tag for row in evaluated for tag in row if tag.startswith("eval/")}
    assert {tag for tag in tags if tiny_data.name in tag} and {tag for tag in tags if "wiki" in tag}


def test_chinese_whole_word_masking_trains_a_modernbert_and_inspect_reads_its_config(tmp_path, monkeypatch,
                                                                                      capsys, one_thread):
    pytest.importorskip("rjieba")
    chinese = build_chinese_data(tmp_path / "zh")
    run = pretrain(modernbert(chinese, tmp_path / "run", "data.whole_word_mask=true", "train.max_steps=2"))
    assert run.step == 2 and all(0 < loss < 10 for loss in losses(run.run_dir))
    config = tmp_path / "zh.yaml"
    load_config("tiny-modernbert", [f"data.path={chinese}", "data.whole_word_mask=true", "data.max_seq_length=48",
                                    "data.max_predictions_per_seq=12"]).save(config)
    code, out, err = run_main(["inspect", "--config", config, "--batches", "4"], monkeypatch, capsys)
    assert code == 0, err
    assert "words predicted only in part    0.00%" in out and "whole words (DATA's word_starts)" in out


def test_evaluate_reads_a_modernbert_run_folder(tiny_data, tmp_path, monkeypatch, capsys, one_thread):
    run = pretrain(modernbert(tiny_data, tmp_path / "run", "train.max_steps=2"))
    code, out, err = run_main(["evaluate", run.run_dir, "--data", tiny_data, "--micro-batch-size", "4"],
                              monkeypatch, capsys)
    assert code == 0, err
    loss = float(next(line.split()[1] for line in out.splitlines() if line.startswith("mlm_loss")))
    assert 0 < loss < 2 * torch.log(torch.tensor(120.0)).item()


def test_gradient_checkpointing_gives_the_same_steps(tiny_data, tmp_path, monkeypatch, one_thread):
    import bertpre.model.modernbert as network

    plain = pretrain(modernbert(tiny_data, tmp_path / "plain", "train.max_steps=3"))
    calls = []

    def counted(*args, **kwargs):
        calls.append(1)
        return checkpoint(*args, **kwargs)

    checkpoint = network.checkpoint
    monkeypatch.setattr(network, "checkpoint", counted)
    recomputed = pretrain(modernbert(tiny_data, tmp_path / "recomputed", "train.max_steps=3",
                                     "train.gradient_checkpointing=true"))
    assert len(calls) == 3 * 2 * 3  # every layer of each micro-batch (2 a step) recomputed
    assert losses(recomputed.run_dir) == pytest.approx(losses(plain.run_dir), abs=1e-6)
    a, b = final_weights(plain.run_dir), final_weights(recomputed.run_dir)
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0)


def test_the_loss_in_chunks_gives_the_same_steps_and_accuracy(tiny_data, tmp_path, one_thread):
    whole = pretrain(modernbert(tiny_data, tmp_path / "whole", "train.max_steps=3", "model.loss_chunk_rows=0"))
    chunked = pretrain(modernbert(tiny_data, tmp_path / "chunked", "train.max_steps=3", "model.loss_chunk_rows=8"))
    assert losses(chunked.run_dir) == pytest.approx(losses(whole.run_dir), abs=1e-5)
    accuracy = [[row["train/mlm_acc"] for row in map(json.loads, (run.run_dir / "metrics.jsonl").read_text().splitlines())
                 if "train/mlm_acc" in row] for run in (whole, chunked)]
    assert len(accuracy[0]) == 3 and accuracy[1] == accuracy[0]  # the chunks' own hit counts
    a, b = final_weights(whole.run_dir), final_weights(chunked.run_dir)
    for name in a:
        torch.testing.assert_close(b[name], a[name], atol=1e-5, rtol=0)


@pytest.mark.slow
def test_ddp_two_gloo_processes_equal_one_process(tiny_data, tmp_path):
    common = [*SMALL, "train.max_steps=3", "train.eval_every=3"]
    single = pretrain(modernbert(tiny_data, tmp_path / "single", *common))
    run_two_gloo_processes(["pretrain", "--config", "tiny-modernbert", "--data", tiny_data, "--out", tmp_path / "ddp",
                            *[arg for item in common for arg in ("--set", item)]], timeout=180)
    assert losses(tmp_path / "ddp") == pytest.approx(losses(single.run_dir), abs=1e-6)
    a, b = final_weights(single.run_dir), final_weights(tmp_path / "ddp")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0)


@pytest.mark.slow
def test_a_compiled_extension_has_no_graph_breaks_and_one_graph_a_phase(tiny_data, tmp_path):
    """Two phases (the second longer, with another global theta): one graph each, compiled at
    each phase's first step and never again, losses as eager mode's."""
    from torch._dynamo.utils import counters

    raw = yaml.safe_load((ROOT / "configs" / "tiny-modernbert.yaml").read_text())
    raw["train"].pop("max_steps")
    raw["phases"] = [{"steps": 4, "data": {"max_seq_length": 32, "max_predictions_per_seq": 10}},
                     {"steps": 4, "lr_schedule": "continue", "data": {"max_seq_length": 64, "max_predictions_per_seq": 20},
                      "model": {"global_rope_theta": 1.0e6}}]
    config_file = tmp_path / "extension.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    settings = [f"data.path={tiny_data}", "train.batch_size=8", "train.micro_batch_size=4", "data.num_workers=0",
                "train.log_every=1", "train.eval_every=1000", "train.save_every=1000"]
    torch._dynamo.reset()
    counters.clear()
    compiled = pretrain(load_config(config_file, [*settings, f"train.out={tmp_path / 'compiled'}", "train.compile=true"]))
    graph_breaks, stats = dict(counters["graph_break"]), dict(counters["stats"])
    torch._dynamo.reset()
    assert compiled.step == 8
    assert graph_breaks == {}
    assert stats["unique_graphs"] == 2  # one a phase: its length and its theta
    eager = pretrain(load_config(config_file, [*settings, f"train.out={tmp_path / 'eager'}"]))
    assert losses(compiled.run_dir) == pytest.approx(losses(eager.run_dir), abs=2e-3)
