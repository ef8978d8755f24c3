"""Every number finite and in range (issue 29): YAML .nan / .inf / -.inf / 1e23, true for an
integer, in the config file, in --set, in phases and in mixture weights, under every command that
reads a config (pretrain, info, inspect, evaluate, demo); sizes that cannot fit refused before
anything is allocated. Each case: exit 2, one `error:` line naming the key, nothing written.

The CLI runs in this process, as in test_reliability_bad_input.py (whose World and
run_in_process these cases reuse).
"""
from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
from _reliability_harness import TINY_CONFIG, folder_state
from test_reliability_bad_input import World, run_in_process

from bertpre.config import MAX_BATCH, MAX_SEED, MAX_SEQ_LENGTH

STEPS_BOUND = "a positive integer of at most 1,000,000,000,000"


def yaml_with(w: World, old: str, new: str) -> str:
    return str(w.config_with(old, new))


def add_key(w: World, section: str, line: str) -> str:
    return yaml_with(w, f"{section}:", f"{section}:\n  {line}")


def in_every_command(w: World, config: str, command: str) -> list:
    """`command` reading `config`."""
    return {
        "pretrain": w.pretrain(config=config),
        "info": ["info", "--config", config],
        "inspect": ["inspect", w.data, "--config", config],
        "evaluate": ["evaluate", w.reference, "--data", w.data, "--config", config],
        "demo": ["demo", "--out", w.tmp / "demo", "--config", config],
    }[command]


COMMANDS = ("pretrain", "info", "inspect", "evaluate", "demo")
# (what the config says, the error line's words): each is run under every command.
BAD_FILES: dict[str, tuple[Callable[[World], str], str]] = {
    "lr-nan": (lambda w: yaml_with(w, "lr: 1.0e-3", "lr: .nan"), "optim.lr must be a finite number, got nan"),
    "eps-inf": (lambda w: add_key(w, "optim", "eps: .inf"), "optim.eps must be a finite number, got inf"),
    "max-grad-norm-minus-inf": (lambda w: add_key(w, "optim", "max_grad_norm: -.inf"),
                                "optim.max_grad_norm must be a finite number, got -inf"),
    "mlm-probability-nan": (lambda w: add_key(w, "data", "mlm_probability: .nan"),
                            "data.mlm_probability must be a finite number, got nan"),
    "max-steps-1e23": (lambda w: yaml_with(w, "max_steps: 36", "max_steps: 1e23"),
                       f"train.max_steps must be {STEPS_BOUND}, got 1e23"),
    "max-seq-length-1e23": (lambda w: yaml_with(w, "max_seq_length: 32", "max_seq_length: 1.0e+23"),
                            "data.max_seq_length must be an integer from 8 to 1,048,576, got 1e+23"),
    "batch-size-true": (lambda w: yaml_with(w, "batch_size: 8", "batch_size: true"),
                        "train.batch_size must be an integer, got True"),
    "seed-negative": (lambda w: yaml_with(w, "seed: 42", "seed: -1"),
                      "train.seed must be an integer from 0 to 4,294,967,295, got -1"),
    "phase-lr-nan": (lambda w: yaml_with(w, "train:", "phases:\n  - {steps: 36, optim: {lr: .nan}}\ntrain:"),
                     "phases[0].optim.lr must be a finite number, got nan"),
    "phase-steps-1e23": (lambda w: yaml_with(w, "train:", "phases:\n  - {steps: 1e23}\ntrain:"),
                         f"phases[0].steps must be {STEPS_BOUND}, got 1e23"),
    "mixture-weight-nan": (lambda w: add_key(w, "data", f"path: [{{path: {w.data}, weight: .nan}}]"),
                           "data.path[0].weight must be a finite number, got nan"),
}

# Cases of one command each: (command line, the error line's words).
SINGLE: dict[str, tuple[Callable[[World], list], str]] = {
    "pretrain-set-lr-nan": (lambda w: w.pretrain("--set", "optim.lr=.nan"), "optim.lr must be a finite number, got nan"),
    "pretrain-set-max-steps-1e23": (lambda w: w.pretrain("--set", "train.max_steps=1e23"),
                                    f"train.max_steps must be {STEPS_BOUND}, got 1e23"),
    "pretrain-set-dropout-1": (lambda w: w.pretrain("--set", "model.hidden_dropout_prob=1"),
                               "model.hidden_dropout_prob must be in [0, 1), got 1"),
    "pretrain-set-label-smoothing-inf": (lambda w: w.pretrain("--set", "optim.label_smoothing=.inf"),
                                         "optim.label_smoothing must be a finite number, got inf"),
    "pretrain-set-betas-nan": (lambda w: w.pretrain("--set", "optim.betas=[0.9, .nan]"),
                               "optim.betas[1] must be a finite number, got nan"),
    "pretrain-set-warmup-ratio-nan": (lambda w: w.pretrain("--set", "optim.warmup_steps=null", "--set",
                                                           "optim.warmup_ratio=.nan"),
                                      "optim.warmup_ratio must be a finite number, got nan"),
    "pretrain-set-compile-1": (lambda w: w.pretrain("--set", "train.compile=1"),
                               "train.compile must be true, false or auto, got 1"),
    # Each of these ran, or crashed, before: trained on, diverged after writing, MemoryError, fork bomb.
    "pretrain-max-grad-norm-nan": (lambda w: w.pretrain(config=add_key(w, "optim", "max_grad_norm: .nan")),
                                   "optim.max_grad_norm must be a finite number, got nan"),
    "pretrain-initializer-range-1e300": (lambda w: w.pretrain("--set", "model.initializer_range=1e300"),
                                         "model.initializer_range must be in (0, 1], got 1e300"),
    "pretrain-layer-norm-eps-1e300": (lambda w: w.pretrain("--set", "model.layer_norm_eps=1e300"),
                                      "model.layer_norm_eps must be in (0, 1], got 1e300"),
    "pretrain-max-predictions-1e15": (lambda w: w.pretrain("--set", "data.max_predictions_per_seq=1e15"),
                                      "data.max_predictions_per_seq must be a positive integer of at most "
                                      "1,048,576, got 1e15"),
    "pretrain-num-workers-1e15": (lambda w: w.pretrain("--set", "data.num_workers=1000000000000000"),
                                  "data.num_workers must be an integer from 0 to 256, got 1000000000000000"),
    "pretrain-keep-last-1e15": (lambda w: w.pretrain("--set", "train.keep_last=1e15"),
                                f"train.keep_last must be {STEPS_BOUND}, got 1e15"),
    "pretrain-huge-yaml-integer": (lambda w: w.pretrain(config=yaml_with(w, "max_steps: 36", "max_steps: 1" + "0" * 5000)),
                                   "holds a value YAML cannot read"),
    # Sizes that cannot fit: refused from the estimate before the model or a batch exists.
    "pretrain-hidden-size-1e12": (lambda w: w.pretrain(config=yaml_with(w, "hidden_size: 32", "hidden_size: 1e12")),
                                  "whose weights, gradients and AdamW state alone need 1.42e+11 PiB, but "),
    "pretrain-micro-batch-cannot-fit": (
        lambda w: w.pretrain("--set", f"data.max_seq_length={MAX_SEQ_LENGTH}", "--set",
                             f"model.max_position_embeddings={MAX_SEQ_LENGTH}", "--set",
                             f"train.batch_size={MAX_BATCH}", "--set", f"train.micro_batch_size={MAX_BATCH}"),
        "a micro-batch of 16,777,216 sequences of 1,048,576 tokens needs at least "),
    "info-set-eps-nan": (lambda w: ["info", "--config", w.config, "--set", "optim.eps=.nan"],
                         "optim.eps must be a finite number, got nan"),
    "info-set-vocab-true": (lambda w: ["info", "--config", w.config, "--set", "model.vocab_size=true"],
                            "model.vocab_size must be an integer, got True"),
    "demo-max-steps-1e23": (lambda w: ["demo", "--out", w.tmp / "demo", "--max-steps", str(10**23)],
                            f"train.max_steps must be {STEPS_BOUND}, got 100000000000000000000000"),
    "inspect-batches-too-many": (lambda w: ["inspect", w.data, "--batches", "1000001"],
                                 "--batches must be a positive integer of at most 1,000,000, got 1000001"),
    "evaluate-seed-beyond-2-32": (lambda w: ["evaluate", w.reference, "--data", w.data, "--seed", str(MAX_SEED + 1)],
                                  "'--seed': Input should be less than or equal to 4294967295"),
    "evaluate-micro-batch-beyond": (lambda w: ["evaluate", w.reference, "--data", w.data, "--micro-batch-size",
                                               str(MAX_BATCH + 1)],
                                    "'--micro-batch-size': Input should be less than or equal to 16777216"),
    "evaluate-max-seq-length-beyond": (lambda w: ["evaluate", w.reference, "--data", w.data, "--max-seq-length",
                                                  str(MAX_SEQ_LENGTH + 1)],
                                       "'--max-seq-length': Input should be less than or equal to 1048576"),
}

CASES: dict[str, tuple[Callable[[World], list], str]] = {
    **{f"{command}-{name}": ((lambda w, make=make, command=command: in_every_command(w, make(w), command)), words)
       for name, (make, words) in BAD_FILES.items() for command in COMMANDS},
    **SINGLE,
}


def exits_2_with_one_line(args, expected, world, watched, monkeypatch, capsys) -> None:
    before = [folder_state(folder) for folder in watched]
    code, stderr = run_in_process(args, monkeypatch, capsys)
    assert code == 2, stderr[-3000:]
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert expected in lines[0], lines[0]
    assert [folder_state(folder) for folder in watched] == before


@pytest.mark.parametrize("name", list(CASES))
def test_bad_number_exits_2_with_one_line_and_writes_nothing(
        name, tmp_path, data_dir, tiny_config, reference_run, monkeypatch, capsys):
    build, expected = CASES[name]
    world = World(tmp_path / "case", data_dir, tiny_config, reference_run)
    world.tmp.mkdir()
    monkeypatch.chdir(world.tmp)  # a stray relative write would land here and be seen
    exits_2_with_one_line(build(world), expected, world, [world.tmp, data_dir, reference_run], monkeypatch, capsys)


def test_info_reports_a_model_too_large_to_train_without_allocating_it(tmp_path, monkeypatch, capsys):
    from bertpre.cli import main

    config = tmp_path / "huge.yaml"
    config.write_text(TINY_CONFIG.replace("hidden_size: 32", "hidden_size: 1e12"), encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["bertpre", "info", "--config", str(config)])
    try:
        main()
    except SystemExit as exit:
        assert exit.code in (0, None)
    out = capsys.readouterr().out
    assert "  weights          3.55e+10 PiB" in out
    assert "does not fit here (`bertpre pretrain` would refuse it): the model has 10,000,000,030,838," in out
