"""Fine-tuning's settings: a preset < the YAML file < `--set key=value` < the command line's typed
options, read by the same loader and checked against the same RULES as the pretraining config."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bertpre.config.loading import parse_override, read_yaml
from bertpre.config.sections import check_field, field_types, unknown
from bertpre.errors import UserError

MODES = ("full", "probe")
POOLINGS = ("cls", "mean")


@dataclass
class Hyperparameters:
    """How one seed trains (a preset's values, overridden by options)."""

    mode: str = "full"  # full | probe
    epochs: int = 3
    lr: float = 2e-5
    batch_size: int = 32
    max_seq_length: int = 128
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    pooling: str = "cls"  # probe features: cls | mean
    eval_batch_size: int = 64
    # ModernBERT's sequence head, fully fine-tuned: cls | mean (transformers' key); None: the
    # source's config.json says (its default cls)
    classifier_pooling: str | None = None


PRESETS: dict[str, Hyperparameters] = {
    # BERT's paper: lr 2e-5 (of 5e-5, 3e-5, 2e-5), batch 32, 3 epochs, 10% warmup, decay 0.01.
    "bert": Hyperparameters(),
    # Few examples: more passes, as small GLUE tasks (RTE, MRPC, STS-B) are usually run.
    "small-data": Hyperparameters(epochs=20),
    # Extractive question answering as BERT's run_squad.py README runs SQuAD v1.1: lr 3e-5, batch
    # 32, 2 epochs, windows of 384 tokens (--doc-stride 128); `--task qa`'s default.
    "squad": Hyperparameters(lr=3e-5, epochs=2, max_seq_length=384),
    # A linear probe on frozen features: a larger lr and more passes cost little.
    "probe": Hyperparameters(mode="probe", lr=1e-3, epochs=20, weight_decay=0.0),
}


# BERT's fine-tuning rates (2e-5 … 5e-5) are set for BERT-base's hidden size 768; a much smaller
# model barely moves at them in a few epochs (the tests' hidden-32 models learn at 1e-3).
BERT_BASE_HIDDEN = 768
BERT_PAPER_LRS = (5e-5, 3e-5, 2e-5)
SMALL_MODEL_LR = 1e-3
PROBE_MAX_LR = 1e-1  # a linear head on frozen features: beyond this a larger rate is no remedy


def advice_when_stuck(hp: Hyperparameters, hidden_size: int) -> str:
    """What to try when a seed predicts one class for everything, for these settings and model.

    Each advice is one step away from the settings just used, and the advice for the settings it
    suggests is the next step, never the first again: once the rate and the epochs are where
    they can help, it says plainly that the model or the data is what falls short.
    """
    more_epochs = PRESETS["small-data"].epochs
    if hp.mode == "probe":
        if hp.lr < PROBE_MAX_LR:
            return (f"try a larger --lr than {hp.lr:g} (e.g. --lr {min(hp.lr * 10, PROBE_MAX_LR):g}) or "
                    f"more --epochs; the probe preset is lr {PRESETS['probe'].lr:g}, {PRESETS['probe'].epochs} epochs")
        if hp.epochs < more_epochs:
            return f"try more epochs (--epochs {more_epochs})"
        return (f"a linear probe at lr {hp.lr:g} for {hp.epochs} epochs still finds one class: the frozen "
                "features do not tell the classes apart; fine-tune the whole model (--mode full) or "
                "pretrain it longer")
    if hidden_size < BERT_BASE_HIDDEN:
        if hp.lr < SMALL_MODEL_LR / 10:
            return (f"lr {hp.lr:g} is a rate for BERT-base (hidden {BERT_BASE_HIDDEN}) and barely moves a "
                    f"hidden-{hidden_size} model: try --lr {SMALL_MODEL_LR:g}, and more epochs with --preset small-data")
        if hp.lr > SMALL_MODEL_LR * 10:
            return (f"lr {hp.lr:g} is large enough to collapse a hidden-{hidden_size} model to one class: "
                    f"try --lr {SMALL_MODEL_LR:g}")
        if hp.epochs < more_epochs:
            return f"try more epochs at lr {hp.lr:g} (--epochs {more_epochs})"
        return (f"a hidden-{hidden_size} model at lr {hp.lr:g} for {hp.epochs} epochs still predicts one "
                "class: the model is too small or too little pretrained for this task, or the training "
                "set too small; pretrain a larger model or longer, or give more examples")
    if hp.lr > 2 * max(BERT_PAPER_LRS):
        return (f"lr {hp.lr:g} is above BERT's fine-tuning rates ({', '.join(f'{lr:g}' for lr in BERT_PAPER_LRS)}), "
                f"where a hidden-{hidden_size} model often collapses to one class: try --lr {BERT_PAPER_LRS[-1]:g}")
    others = ", ".join(f"{lr:g}" for lr in BERT_PAPER_LRS if lr != hp.lr)
    if hp.epochs < more_epochs:
        return (f"try another --lr than {hp.lr:g} (BERT's paper chose among 5e-5, 3e-5 and 2e-5) or more "
                f"epochs (--preset small-data: {more_epochs})")
    return (f"try another of BERT's rates ({others}); if none moves it off one class in {hp.epochs} "
            "epochs, the training set is too small or the model too little pretrained for this task")


def load_hyperparameters(preset: str | None, config: Path | None, overrides: list[str],
                         given: dict[str, Any] | None = None) -> Hyperparameters:
    """Preset (default `bert`, or the config's `preset:`) < the YAML config < `--set key=value` <
    `given` (typed values from the command line's own options, e.g. `--lr`).

    The YAML file holds the settings at its top, or under `finetune:`.
    """
    values: dict[str, Any] = {}
    if config is not None:
        loaded = read_yaml(Path(config), instead="a YAML file of settings, e.g. `lr: 3.0e-5`",
                           holds="settings, e.g. `lr: 3.0e-5`")
        if isinstance(loaded.get("finetune"), dict):
            loaded = dict(loaded["finetune"])
        preset = loaded.pop("preset", preset)
        values.update(loaded)
    for override in overrides:
        key, value = parse_override(override, "key=value, e.g. --set lr=3e-5")
        values[key.removeprefix("finetune.")] = value
    name = preset or "bert"
    if not isinstance(name, str) or name not in PRESETS:
        raise UserError(f"preset {name!r} is not one of {', '.join(PRESETS)}")
    if given:  # a bad value is refused though an option overrides it (`--set lr=ten --lr 1e-3`)
        build_hyperparameters(PRESETS[name], values)
    return build_hyperparameters(PRESETS[name], {**values, **given} if given else values)


def build_hyperparameters(base: Hyperparameters, values: dict[str, Any]) -> Hyperparameters:
    """`base` with `values` set: every name known, every value of its field's type and in its
    rule (`finetune.NAME` in RULES)."""
    annotations = field_types(Hyperparameters)
    for name in values:
        if name not in annotations:
            raise unknown("fine-tuning setting", name, list(annotations))
    checked = {name: check_field(name, f"finetune.{name}", annotations[name], value)
               for name, value in values.items()}
    hp = dataclasses.replace(base, **checked)
    if hp.mode not in MODES:
        raise UserError(f"mode must be full or probe, got {hp.mode!r}")
    if hp.pooling not in POOLINGS:
        raise UserError(f"pooling must be cls or mean, got {hp.pooling!r}")
    if hp.classifier_pooling not in (None, *POOLINGS):
        raise UserError(f"classifier_pooling must be cls or mean, got {hp.classifier_pooling!r}")
    return hp
