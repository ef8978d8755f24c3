"""`bertpre pretrain` with model.architecture xlnet: permutation LM (plm) and left-to-right LM
(clm) over segments carried by memory, exact resume after SIGKILL (memory included), the
TensorBoard tags, what the config refuses."""
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from _gloo import run_two_gloo_processes
from _killed_run import KILLED_RUN
from safetensors.torch import load_file

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model import XLNetLMHeadModel
from bertpre.train.trainer import pretrain

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
XLNET = ["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none", "model.mem_len=16",
         "data.max_seq_length=32", "data.reuse_length=16", "train.batch_size=8", "train.micro_batch_size=4",
         "train.log_every=1", "train.eval_every=1000"]


def overrides(data_dir: Path, out: Path, *more: str) -> list[str]:
    return [f"data.path={data_dir}", f"train.out={out}", *XLNET, *more]


def step_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def final_folder(run_dir: Path) -> Path:
    return run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()


def test_a_plm_run_killed_after_a_checkpoint_resumes_bit_for_bit_with_its_memory(tiny_data, tmp_path, one_thread):
    steps = ["train.max_steps=6", "train.save_every=3"]
    straight = pretrain(load_config(TINY, overrides(tiny_data, tmp_path / "straight", *steps)))
    folder = final_folder(straight.run_dir)
    memory = load_file(folder / "memory_0.safetensors")
    # Two micro-batch slots (batch 8 = 2 × 4), each with its 2 layers' states and mask.
    assert {"slot0.mask", "slot1.mask", "slot0.layer1", "slot1.layer1"} <= set(memory)
    assert memory["slot0.layer0"].shape == (4, 16, 64)
    model = XLNetLMHeadModel.from_pretrained(folder)  # the checkpoint is a native XLNet folder
    assert model.config.mem_len == 16 and model.config.reuse_len == 16

    more = overrides(tiny_data, tmp_path / "resumed", *steps, "data.num_workers=1")
    env = {"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, str(TINY), "3", *more], env=env,
                            capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    resumed = pretrain(load_config(TINY, more))
    losses = [[row["train/plm_loss"] for row in step_rows(run) if "train/plm_loss" in row]
              for run in (straight.run_dir, resumed.run_dir)]
    assert len(losses[0]) == 6 and losses[1] == losses[0]  # identical, not merely close
    a, b = load_file(folder / "model.safetensors"), load_file(final_folder(resumed.run_dir) / "model.safetensors")
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_a_checkpoint_without_its_memory_is_refused_on_resume(tiny_data, tmp_path, one_thread):
    """The memory is part of the exact-resume state: a checkpoint that lost it is not resumed."""
    steps = ["train.max_steps=4", "train.save_every=2"]
    pretrain(load_config(TINY, overrides(tiny_data, tmp_path / "cleared", "train.max_steps=2", "train.save_every=2")))
    checkpoint = final_folder(tmp_path / "cleared")
    (checkpoint / "memory_0.safetensors").unlink()
    (checkpoint / "checksums.json").unlink()  # the file is gone on purpose
    with pytest.raises(UserError, match="memory_0.safetensors"):
        pretrain(load_config(TINY, overrides(tiny_data, tmp_path / "cleared", *steps)))


def test_plm_and_clm_log_their_own_names_and_learn(tiny_data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for objective in ("plm", "clm"):
        run = pretrain(load_config(TINY, overrides(tiny_data, tmp_path / objective, f"data.objective={objective}",
                                                   "train.max_steps=30", "train.eval_every=15",
                                                   "optim.warmup_steps=5"))).run_dir
        accumulator = EventAccumulator(str(run / "tensorboard"))
        accumulator.Reload()
        tags = set(accumulator.Tags()["scalars"])
        assert {f"train/{objective}_loss", f"train/{objective}_acc", f"eval/{objective}_loss",
                f"eval/{objective}_acc", "eval/perplexity", "eval/loss"} <= tags
        assert not any("mlm" in tag or "pair" in tag for tag in tags)
        losses = [event.value for event in accumulator.Scalars(f"train/{objective}_loss")]
        assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3  # from ln(120) ≈ 4.8 down


@pytest.mark.parametrize(("sets", "message"), [
    (["model.architecture=xlnet"], "trains with data.objective plm"),
    (["data.objective=plm"], "set model.architecture: xlnet"),
    (["model.architecture=xlnet", "data.objective=plm"], "data.pair_task: none"),
    (["model.mem_len=8"], "model.architecture: xlnet, or model.mem_len: 0"),
    (["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none", "data.reuse_length=65"],
     "reuse_length"),
    (["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none", "data.max_span_length=7"],
     "1 / data.plm_probability"),
    (["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none", "data.plm_plan=hf",
      "data.max_seq_length=63"], "even"),
    (["model.architecture=xlnet", "data.objective=clm", "data.pair_task=none", "model.share_layers=true"],
     "ALBERT"),
    (["model.architecture=xlnet", "data.objective=clm", "data.pair_task=none",
      "model.attention_probs_dropout_prob=0.2"], "one dropout rate"),
    (["model.architecture=xlnet", "data.objective=clm", "data.pair_task=none", "model.mem_len=-1"], "mem_len"),
    (["model.architecture=transformer"], "not built"),
])
def test_the_config_refuses_what_cannot_train(sets, message):
    with pytest.raises(UserError, match=message):
        load_config(TINY, sets)


def test_a_plm_mixture_trains_and_scores_each_source(tiny_data, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    mixture = f"data.path=[{{path: {tiny_data}, weight: 3}}, {{path: {tmp_path / 'second'}, weight: 1}}]"
    import shutil

    shutil.copytree(tiny_data, tmp_path / "second")
    config = load_config(TINY, [f"train.out={tmp_path / 'run'}", *XLNET, mixture, "train.max_steps=3",
                                "train.eval_every=3"])
    run = pretrain(config).run_dir
    accumulator = EventAccumulator(str(run / "tensorboard"))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    data_name = tiny_data.name
    assert {f"eval/{data_name}/plm_loss", "eval/second/plm_loss", "eval/plm_loss", "train/plm_loss"} <= tags


def test_init_from_an_xlnet_run_starts_from_its_weights(tiny_data, tmp_path):
    first = pretrain(load_config(TINY, overrides(tiny_data, tmp_path / "first", "train.max_steps=2",
                                                 "train.save_every=2")))
    source = final_folder(first.run_dir)
    config = load_config(TINY, overrides(tiny_data, tmp_path / "second", "train.max_steps=1",
                                         "optim.lr=1e-9", f"model.init_from={first.run_dir}"))
    second = pretrain(config)
    a, b = load_file(source / "model.safetensors"), load_file(final_folder(second.run_dir) / "model.safetensors")
    for name in a:  # one step at lr 1e-9 from the source's weights
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0)
    with pytest.raises(UserError, match="holds XLNet weights, which train with data.objective plm or clm"):
        pretrain(load_config(TINY, [f"data.path={tiny_data}", f"train.out={tmp_path / 'bert'}",
                                    f"model.init_from={first.run_dir}", "data.max_seq_length=32"]))


def test_ddp_two_gloo_processes_equal_one_process_with_accumulation(tiny_data, tmp_path):
    """Each process reads its own lanes and keeps their memory: two processes of two micro-batches
    train on the same rows, with the same memory, as one process of four."""
    common = [*XLNET[:5], "model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0",
              "train.batch_size=16", "train.micro_batch_size=4", "train.max_steps=3", "train.log_every=1",
              "train.eval_every=1000", "data.num_workers=0"]
    single = pretrain(load_config(TINY, [f"data.path={tiny_data}", f"train.out={tmp_path / 'single'}", *common]))
    run_two_gloo_processes(["pretrain", "--config", TINY, "--data", tiny_data, "--out", tmp_path / "ddp",
                            *[arg for item in common for arg in ("--set", item)]])
    losses = [[row["train/plm_loss"] for row in step_rows(run) if "train/plm_loss" in row]
              for run in (single.run_dir, tmp_path / "ddp")]
    assert losses[1] == pytest.approx(losses[0], abs=1e-5)
    assert (final_folder(tmp_path / "ddp") / "memory_1.safetensors").is_file()  # each process its own
    a, b = load_file(final_folder(single.run_dir) / "model.safetensors"), load_file(final_folder(tmp_path / "ddp") / "model.safetensors")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-5, rtol=0)


def test_a_phase_that_lengthens_segments_keeps_the_memory_at_their_step(tiny_data, tmp_path):
    """Phase 2 reads segments of 64 every 32 tokens: the memory must be the first 32 states of
    each segment (its next segment's context), not phase 1's 16."""
    import yaml

    config = tmp_path / "phases.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"architecture": "xlnet", "mem_len": 16}, "data": {"objective": "plm", "pair_task": "none",
                                                                   "max_seq_length": 32, "num_workers": 0},
        "train": {"batch_size": 8, "micro_batch_size": 4, "log_every": 1, "eval_every": 1000, "save_every": 2},
        "phases": [{"steps": 2}, {"steps": 2, "data": {"max_seq_length": 64}}]}))
    result = pretrain(load_config(config, [f"data.path={tiny_data}", f"train.out={tmp_path / 'run'}"]))
    model = XLNetLMHeadModel.from_pretrained(final_folder(result.run_dir))
    assert result.step == 4 and model.config.reuse_len == 32


def test_evaluate_and_fill_mask_read_an_xlnet_run(tiny_data, tmp_path):
    from bertpre.tools.inference import evaluate_saved_model, fill_mask, load_model_and_tokenizer

    run = pretrain(load_config(TINY, overrides(tiny_data, tmp_path / "run", "train.max_steps=2",
                                               "train.save_every=2"))).run_dir
    metrics = evaluate_saved_model(run, micro_batch_size=2)
    assert set(metrics) == {"plm_loss", "perplexity", "plm_acc", "predictions", "sequences"}
    assert 0 < metrics["plm_loss"] < 10 and metrics["predictions"] > 0
    model, tokenizer = load_model_and_tokenizer(run)
    word = next(token for token in tokenizer.get_vocab() if token.isalpha() and len(token) > 2)
    [candidates] = fill_mask(model, tokenizer, f"{word} [MASK] {word}", top_k=3)
    assert len(candidates) == 3 and not any(c.token.startswith("[") for c in candidates)
    # The target is hidden from every position: what stands there changes nothing.
    ids = tokenizer.encode(f"{word} [MASK] {word}", add_special_tokens=False).ids + [tokenizer.token_to_id("[SEP]")]
    perm_mask = torch.zeros(1, len(ids), len(ids))
    perm_mask[0, :, 1] = 1.0
    target_mapping = torch.zeros(1, 1, len(ids))
    target_mapping[0, 0, 1] = 1.0
    with torch.no_grad():
        logits = [model(torch.tensor([ids[:1] + [token] + ids[2:]]), perm_mask=perm_mask,
                        target_mapping=target_mapping).logits for token in (ids[1], ids[0])]
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=1e-6)


@pytest.mark.slow
def test_a_compiled_plm_step_has_no_graph_breaks_and_trains_as_eager(tiny_data, tmp_path):
    """train.compile on XLNet: the step (collated to max_seq_length, memory in and out) compiles
    without graph breaks, once without memory (a lane's first segment) and once with it, and
    trains as the eager step does (no dropout: compiled code draws its own random numbers)."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    steps = ["train.max_steps=6", "train.save_every=1000", "model.hidden_dropout_prob=0.0",
             "model.attention_probs_dropout_prob=0.0"]
    compiled = pretrain(load_config(TINY, overrides(tiny_data, tmp_path / "compiled", *steps, "train.compile=true")))
    graph_breaks, stats = dict(counters["graph_break"]), dict(counters["stats"])
    torch._dynamo.reset()
    assert graph_breaks == {}
    assert stats["unique_graphs"] <= 2
    eager = pretrain(load_config(TINY, overrides(tiny_data, tmp_path / "eager", *steps)))
    losses = [[row["train/plm_loss"] for row in step_rows(run.run_dir) if "train/plm_loss" in row]
              for run in (compiled, eager)]
    assert losses[0] == pytest.approx(losses[1], abs=2e-3)


def test_pretrain_takes_an_xlnet_config_that_leaves_pair_task_out(tiny_data, tmp_path, monkeypatch, capsys):
    """Through the real CLI: the default nsp is no error for plm, and the run's config.yaml says none."""
    from bertpre.cli import main

    config = tmp_path / "xlnet.yaml"
    config.write_text("model:\n  architecture: xlnet\n  hidden_size: 64\n  num_hidden_layers: 2\n"
                      "  num_attention_heads: 4\n  intermediate_size: 128\n  mem_len: 16\n"
                      "data:\n  objective: plm\n  max_seq_length: 32\n  num_workers: 0\n"
                      "train:\n  batch_size: 4\n  micro_batch_size: 4\n  max_steps: 1\n  precision: fp32\n"
                      "  device: cpu\n")
    monkeypatch.setattr(sys, "argv", ["bertpre", "pretrain", "--config", str(config), "--data", str(tiny_data),
                                      "--out", str(tmp_path / "run")])
    with pytest.raises(SystemExit) as exit:
        main()
    assert exit.value.code == 0, capsys.readouterr().err
    saved = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert (saved["data"]["objective"], saved["data"]["pair_task"]) == ("plm", "none")
