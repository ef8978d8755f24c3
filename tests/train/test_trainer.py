"""The Trainer on CPU with the tiny config: pinned losses, exact resume, accumulation, DDP, logs."""
import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _gloo import run_two_gloo_processes
from _killed_run import KILLED_RUN
from _tiny_data import build_tiny_data  # noqa: E402
from safetensors.torch import load_file

import bertpre.batches.stream as stream
import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model import families
from bertpre.train.optim import learning_rate
from bertpre.train.trainer import TrainingDiverged, pretrain

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))

# Losses of the first 12 steps of configs/tiny.yaml (seed 42) on the tiny DATA below; CPU
# fp32 is deterministic. (Re-pinned when the fixture moved to data.build: the code before the
# Trainer class gave these same values on that DATA.) Recompute by running the test with PIN=1 if the model, pairs or
# masking change on purpose.
# Re-pinned when pretraining's last layer came to compute only the rows read
# (`model.last_layer_rows`): its dropout is drawn for those rows, so the same seed's losses moved;
# with the switch off a run gives the values pinned before (WHOLE_LAYER_LOSSES).
PINNED_LOSSES = [
    5.496948, 5.486071, 5.492839, 5.471148, 5.451814, 5.441867,
    5.378969, 5.387277, 5.332906, 5.317878, 5.256917, 5.268221,
]
WHOLE_LAYER_LOSSES = [
    5.496616, 5.497256, 5.485784, 5.467278, 5.448763, 5.445994,
    5.381372, 5.38855, 5.328685, 5.316659, 5.254372, 5.266246,
]


@pytest.fixture
def data_dir(tiny_data: Path) -> Path:
    return tiny_data


def tiny_config(data_dir: Path, out: Path, *overrides: str):
    return load_config(TINY, [f"data.path={data_dir}", f"train.out={out}", "train.log_every=1",
                              "train.eval_every=1000", *overrides])


def step_losses(run_dir: Path) -> list[float]:
    """The loss of every step, from metrics.jsonl (the tests log every step)."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    latest = (run_dir / "checkpoints" / "latest").read_text().strip()
    return load_file(run_dir / "checkpoints" / latest / "model.safetensors")


def test_pinned_losses_and_falling_mlm_loss(data_dir, tmp_path):
    result = pretrain(tiny_config(data_dir, tmp_path / "run", "train.max_steps=40"))
    losses = step_losses(result.run_dir)
    if os.environ.get("PIN"):
        print([round(x, 6) for x in losses[:12]])
    assert result.step == 40 and len(losses) == 40
    assert losses[:12] == pytest.approx(PINNED_LOSSES, abs=1e-5)
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3
    whole = pretrain(tiny_config(data_dir, tmp_path / "whole", "train.max_steps=12", "model.last_layer_rows=false"))
    assert step_losses(whole.run_dir) == pytest.approx(WHOLE_LAYER_LOSSES, abs=1e-5)


def test_data_workers_start_once_over_three_epochs_and_give_the_pinned_losses(data_dir, tmp_path, monkeypatch):
    """The tiny epoch is about 4 steps: 12 steps cross two epoch boundaries with the same 2 workers."""
    started = tmp_path / "workers"
    started.mkdir()
    take_over_signals = stream.worker_ignores_group_signals

    def record_and_take_over(main_pid: int, worker_id: int = 0) -> None:  # each worker, as it starts
        (started / str(os.getpid())).touch()
        take_over_signals(main_pid, worker_id)

    monkeypatch.setattr(stream, "worker_ignores_group_signals", record_and_take_over)
    result = pretrain(tiny_config(data_dir, tmp_path / "run", "train.max_steps=12", "data.num_workers=2"))
    state = json.loads((result.run_dir / "checkpoints" / "step-00000012" / "trainer_state.json").read_text())
    assert state["epoch"] >= 2
    assert len(list(started.iterdir())) == 2
    assert step_losses(result.run_dir) == pytest.approx(PINNED_LOSSES, abs=1e-5)  # the batches of 0 workers


def test_run_folder_layout_and_tensorboard_tags(data_dir, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = tmp_path / "run"
    pretrain(tiny_config(data_dir, run_dir, "train.max_steps=4", "train.eval_every=2",
                         "train.save_every=2"))
    assert sorted(p.name for p in run_dir.iterdir()) == [
        "checkpoints", "config.yaml", "data.json", "metrics.jsonl", "tensorboard", "tokenizer"]
    record = json.loads((run_dir / "data.json").read_text())
    assert record["sources"] == [{"name": "data", "path": str(data_dir), "weight": 1.0,
                                  "manifest": json.loads((data_dir / "manifest.json").read_text())}]
    assert load_config(run_dir / "config.yaml").model.vocab_size == 120
    accumulator = EventAccumulator(str(run_dir / "tensorboard"))
    accumulator.Reload()
    tags = set(accumulator.Tags()["scalars"])
    expected = {"train/loss", "train/mlm_loss", "train/pair_loss", "train/mlm_acc", "train/pair_acc",
                "train/lr", "train/grad_norm", "train/loss_scale", "train/skipped_steps",
                "perf/tokens_per_s", "eval/mlm_loss", "eval/perplexity", "eval/mlm_acc",
                "eval/mlm_acc_mask", "eval/mlm_acc_random", "eval/mlm_acc_kept", "eval/pair_acc"}
    assert expected <= tags
    assert [event.step for event in accumulator.Scalars("eval/mlm_loss")] == [2, 4]
    assert [event.step for event in accumulator.Scalars("train/lr")] == [1, 2, 3, 4]
    optim = load_config(TINY).optim
    first_lr = learning_rate(0, lr=optim.lr, warmup_steps=optim.warmup_steps, max_steps=4,
                             schedule=optim.schedule)
    assert accumulator.Scalars("train/lr")[0].value == pytest.approx(first_lr)


def test_accumulation_equals_one_big_micro_batch(data_dir, tmp_path):
    no_dropout = ["model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0",
                  "train.batch_size=8", "train.micro_batch_size=8", "train.max_steps=3"]
    whole = pretrain(tiny_config(data_dir, tmp_path / "whole", *no_dropout, "train.micro_batch_size=8"))
    split = pretrain(tiny_config(data_dir, tmp_path / "split", *no_dropout, "train.micro_batch_size=2"))
    assert step_losses(split.run_dir) == pytest.approx(step_losses(whole.run_dir), abs=1e-6)
    a, b = final_weights(tmp_path / "whole"), final_weights(tmp_path / "split")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0)


@pytest.fixture
def one_thread():
    """One torch thread here and in subprocesses: float sums then split the same way everywhere."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield dict(ENV, OMP_NUM_THREADS="1")
    torch.set_num_threads(threads)


def test_resume_after_sigkill_is_exact(data_dir, tmp_path, one_thread):
    steps = ["train.max_steps=8", "train.save_every=4"]
    straight = pretrain(tiny_config(data_dir, tmp_path / "straight", *steps))

    overrides = [f"data.path={data_dir}", f"train.out={tmp_path / 'resumed'}", "train.log_every=1",
                 "train.eval_every=1000", *steps, "data.num_workers=1"]
    killed = subprocess.run([sys.executable, "-c", KILLED_RUN, str(TINY), "4", *overrides],
                            env=one_thread, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    assert (tmp_path / "resumed" / "checkpoints" / "latest").read_text().strip() == "step-00000004"

    resumed = pretrain(load_config(TINY, overrides))
    assert step_losses(resumed.run_dir)[4:] == step_losses(straight.run_dir)[4:]  # identical, not merely close
    a, b = final_weights(tmp_path / "straight"), final_weights(tmp_path / "resumed")
    for name in a:
        assert torch.equal(a[name], b[name]), name
    rows = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "train/loss" in row] == list(range(1, 9))


def test_lamb_trains_and_resumes_exactly(data_dir, tmp_path, one_thread):
    # 6 steps, all inside the 30 warmup steps: the lr does not depend on train.max_steps.
    lamb = ["optim.name=lamb", "train.save_every=3"]
    straight = pretrain(tiny_config(data_dir, tmp_path / "straight", *lamb, "train.max_steps=6"))
    pretrain(tiny_config(data_dir, tmp_path / "resumed", *lamb, "train.max_steps=3"))
    resumed = pretrain(tiny_config(data_dir, tmp_path / "resumed", *lamb, "train.max_steps=6"))
    losses = step_losses(straight.run_dir)
    assert len(losses) == 6 and all(math.isfinite(loss) for loss in losses)
    assert losses[0] == pytest.approx(PINNED_LOSSES[0], abs=1e-5)  # same model and batch
    assert losses[1] != pytest.approx(PINNED_LOSSES[1], abs=1e-5)  # a LAMB step, not AdamW's
    assert step_losses(resumed.run_dir) == losses  # identical, not merely close
    a, b = final_weights(straight.run_dir), final_weights(resumed.run_dir)
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.parametrize("pair_task", ["nsp", "none"])
def test_ddp_two_gloo_processes_equal_one_process_with_accumulation(data_dir, tmp_path, pair_task):
    # Under pair_task none the pooler and pair head get no gradient: frozen, DDP waits for none.
    common = ["model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0",
              "train.batch_size=16", "train.micro_batch_size=4", "train.max_steps=3",
              f"data.pair_task={pair_task}", "train.eval_every=3"]
    single = pretrain(tiny_config(data_dir, tmp_path / "single", *common))
    run_two_gloo_processes(["pretrain", "--config", TINY, "--data", data_dir, "--out", tmp_path / "ddp",
                            *[arg for item in common + ["train.log_every=1"] for arg in ("--set", item)]], timeout=120)
    rows = [json.loads(line) for line in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    ddp_losses = [row["train/loss"] for row in rows if "train/loss" in row]
    assert ddp_losses == pytest.approx(step_losses(single.run_dir), abs=1e-6)
    # Evaluation split across the two processes gives the one process's figures.
    single_rows = [json.loads(line) for line in (single.run_dir / "metrics.jsonl").read_text().splitlines()]
    evaluated = [{k: v for k, v in row.items() if k.startswith("eval/")} for row in rows + single_rows
                 if "eval/mlm_loss" in row]
    assert len(evaluated) == 2 and evaluated[0].keys() == evaluated[1].keys()
    for key, value in evaluated[1].items():
        assert evaluated[0][key] == pytest.approx(value, rel=1e-6), key
    a, b = final_weights(tmp_path / "single"), final_weights(tmp_path / "ddp")
    for name in a:
        torch.testing.assert_close(a[name], b[name], atol=1e-6, rtol=0)


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(data_dir, tmp_path, monkeypatch):
    class PoisonedModel(families.BertForPreTraining):
        calls = 0

        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            PoisonedModel.calls += 1
            if PoisonedModel.calls > 3:
                out.mlm_loss_sum = out.mlm_loss_sum * float("nan")
            return out

    monkeypatch.setattr(families, "BertForPreTraining", PoisonedModel)  # what the family row builds
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDiverged, match="diverged at step 4.*step-00000002"):
        pretrain(tiny_config(data_dir, run_dir, "train.batch_size=8", "train.micro_batch_size=8", "train.max_steps=6",
                             "train.save_every=2"))
    assert (run_dir / "checkpoints" / "latest").read_text().strip() == "step-00000002"
    assert (run_dir / "checkpoints" / "step-00000002" / "model.safetensors").exists()


def test_no_resume_refuses_a_run_with_checkpoints(data_dir, tmp_path):
    pretrain(tiny_config(data_dir, tmp_path / "run", "train.max_steps=1"))
    with pytest.raises(UserError, match="already holds checkpoints"):
        pretrain(tiny_config(data_dir, tmp_path / "run", "train.max_steps=2"), resume=False)


def test_data_too_small_for_a_micro_batch_is_refused_before_the_run_folder_is_made(data_dir, tmp_path,
                                                                                   monkeypatch, capsys):
    from _in_process import run_main

    out = tmp_path / "my run"
    code, _, stderr = run_main(["pretrain", "--config", TINY, "--data", data_dir, "--out", out,
                                "--set", "train.batch_size=4096", "--set", "train.micro_batch_size=4096"],
                               monkeypatch, capsys)
    assert code == 2
    assert stderr.strip().splitlines()[-1].startswith("error: epoch 0 has ")
    assert "fewer than train.micro_batch_size (4096)" in stderr
    assert not out.exists()  # no config.yaml, tokenizer/ or empty metrics.jsonl left behind


def fp16_on_cpu(monkeypatch, infinite_calls):
    """Keep fp16 + GradScaler on CPU (normally replaced by fp32) and make chosen forwards overflow."""
    from bertpre.train.runtime import Runtime

    monkeypatch.setattr(trainer, "init_runtime",
                        lambda *args, **kwargs: Runtime(device=torch.device("cpu"), precision="fp16"))

    class OverflowingModel(families.BertForPreTraining):
        calls = 0

        def forward(self, *args, **kwargs):
            out = super().forward(*args, **kwargs)
            OverflowingModel.calls += 1
            if self.training and infinite_calls(OverflowingModel.calls):
                out.mlm_loss_sum = out.mlm_loss_sum * float("inf")
            return out

    monkeypatch.setattr(families, "BertForPreTraining", OverflowingModel)  # what the family row builds


def test_fp16_skipped_steps_are_counted_and_do_not_advance_the_schedule(data_dir, tmp_path, monkeypatch):
    fp16_on_cpu(monkeypatch, lambda call: call in (2, 3))
    run_dir = tmp_path / "run"
    result = pretrain(tiny_config(data_dir, run_dir, "train.batch_size=8", "train.micro_batch_size=8", "train.max_steps=4",
                                  "optim.lr=1e-3", "optim.warmup_steps=4"))
    assert (result.step, result.skipped_steps, len(step_losses(run_dir))) == (4, 2, 4)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [row["train/lr"] for row in rows if "train/lr" in row] == pytest.approx(
        [2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert [row["train/skipped_steps"] for row in rows if "train/lr" in row] == [0, 2, 2, 2]
    assert rows[1]["train/loss_scale"] == 65536.0 / 4


def test_fp16_overflowing_every_step_stops_with_a_clear_message(data_dir, tmp_path, monkeypatch):
    fp16_on_cpu(monkeypatch, lambda call: True)
    with pytest.raises(TrainingDiverged, match="20 fp16 steps in a row overflowed"):
        pretrain(tiny_config(data_dir, tmp_path / "run", "train.batch_size=8", "train.micro_batch_size=8", "train.max_steps=4"))


def test_data_made_by_another_tokenizer_is_refused(data_dir, tmp_path):
    import shutil

    other = build_tiny_data(tmp_path / "other", documents=30, seed=1)
    run_dir = tmp_path / "run"
    pretrain(tiny_config(data_dir, run_dir, "train.max_steps=1"))
    with pytest.raises(UserError, match="made by another tokenizer than run"):
        pretrain(tiny_config(other, run_dir, "train.max_steps=2"))

    tampered = tmp_path / "tampered"
    shutil.copytree(data_dir, tampered)
    shutil.copy(other / "tokenizer" / "tokenizer.json", tampered / "tokenizer" / "tokenizer.json")
    with pytest.raises(UserError, match="is not the tokenizer the dataset was made with"):
        pretrain(tiny_config(tampered, tmp_path / "run2", "train.max_steps=1"))


def test_train_step_returns_named_stats_and_the_state_dict_resumes_the_stream(data_dir, tmp_path):
    config = tiny_config(data_dir, tmp_path / "run", "train.max_steps=3")
    first = trainer.Trainer(config)
    stats = first.train_step()
    assert isinstance(stats, trainer.StepStats) and not stats.skipped
    optim = config.optim
    assert stats.lr == learning_rate(0, lr=optim.lr, warmup_steps=optim.warmup_steps, max_steps=3,
                                     schedule=optim.schedule)
    assert 4.0 < stats.loss < 7.0 and stats.grad_norm > 0
    # batch 32 = 2 micro-batches of 16; train() counts the step, train_step() does not
    assert first.state_dict() == {"step": 0, "skipped_steps": 0, "phase": 0, "tokens_seen": 0, "epoch": 0,
                                  "position": 32}

    second = trainer.Trainer(tiny_config(data_dir, tmp_path / "other", "train.max_steps=3"))
    second.load_state_dict(first.state_dict())
    a, b = first.stream.next(), second.stream.next()
    assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)


def test_a_two_folder_mixture_trains_and_evaluates_each_source(data_dir, tmp_path, capsys):
    from bertpre.tools.inference import evaluate_saved_model

    wiki = build_tiny_data(tmp_path / "wiki", documents=120, seed=1, tokenizer=data_dir / "tokenizer")
    mixture = f"[{{path: {data_dir}, weight: 0.7}}, {{path: {wiki}, weight: 0.3}}]"
    run_dir = tmp_path / "run"
    result = pretrain(tiny_config(data_dir, run_dir, f"data.path={mixture}", "train.max_steps=4",
                                  "train.eval_every=2"))
    assert result.step == 4
    assert "instances an epoch from 2 sources, every epoch: " in capsys.readouterr().err
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    shares = {key: value for key, value in rows[0].items() if key.startswith("data/share/")}
    names = [data_dir.name, "wiki"]
    assert list(shares) == [f"data/share/{name}" for name in names]
    assert shares["data/share/wiki"] == pytest.approx(0.3, abs=0.01)
    evals = [row for row in rows if "eval/mlm_loss" in row]
    assert [row["step"] for row in evals] == [2, 4]
    last = evals[-1]
    for metric in ("mlm_loss", "mlm_acc", "pair_acc"):
        assert last[f"eval/{metric}"] == pytest.approx(
            0.7 * last[f"eval/{names[0]}/{metric}"] + 0.3 * last[f"eval/wiki/{metric}"])
    assert last["eval/sequences"] == last[f"eval/{names[0]}/sequences"] + last["eval/wiki/sequences"]
    # `bertpre evaluate` on the run scores the same sources the same way.
    again = evaluate_saved_model(run_dir, micro_batch_size=16)
    assert again["wiki/mlm_loss"] == pytest.approx(last["eval/wiki/mlm_loss"], abs=1e-5)
    assert again["mlm_loss"] == pytest.approx(last["eval/mlm_loss"], abs=1e-5)
