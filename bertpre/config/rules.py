"""The values each numeric setting may take, stated once for every command, and the check."""
from __future__ import annotations

import math
import re
from typing import Any

import bertpre.model  # noqa: F401 - fills the family table
from bertpre.errors import UserError
from bertpre.model.config import FAMILIES
from bertpre.ranges import (  # noqa: F401 - the bounds are the config's names too (bertpre.config.MAX_*)
    MAX_BATCH,
    MAX_SEED,
    MAX_SEQ_LENGTH,
    MAX_SIZE,
    MAX_STEPS,
    MAX_WEIGHT,
    MAX_WORKERS,
    Range,
    integers,
    numbers,
)

# A number as YAML 1.1 may leave it a string: 1e-4 and 1e6 (no dot) are read as text.
FLOAT_TEXT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")

class Rules(dict):
    """RULES: a `model.` key not stated below is asked of the family table (a row registered
    after this module was imported, as a test's toy family, states its own keys' ranges there)."""

    def __missing__(self, key: str) -> Range:
        section, _, name = key.partition(".")
        rule = next((row.config.ranges[name] for row in FAMILIES.values() if name in row.config.ranges), None)
        if section != "model" or rule is None:
            raise KeyError(key)
        return rule


# One rule per numeric key, `section.key`. A float key must also be finite (YAML's .nan, .inf
# are refused); an integer key takes an integral number however written (1e6, 1.0e+6), never
# true/false. `key[]` is the rule of each item of a list.
RULES: dict[str, Range] = Rules({
    "model.vocab_size": integers(1, MAX_SIZE, words=("auto",)),  # auto: from the tokenizer
    "model.hidden_size": integers(1, MAX_SIZE),
    "model.num_hidden_layers": integers(1, MAX_SIZE),
    "model.num_attention_heads": integers(1, MAX_SIZE),
    "model.intermediate_size": integers(1, MAX_SIZE),
    "model.max_position_embeddings": integers(1, MAX_SIZE),
    "model.type_vocab_size": integers(1, MAX_SIZE),
    "model.pad_token_id": integers(0, MAX_SIZE),
    "model.embedding_size": integers(1, MAX_SIZE),
    "model.loss_chunk_rows": integers(0, MAX_SIZE, words=("auto",)),  # auto: chunked where one chunk is not enough
    "model.hidden_dropout_prob": numbers("[0, 1)"),
    "model.attention_probs_dropout_prob": numbers("[0, 1)"),
    "model.layer_norm_eps": numbers("(0, 1]"),
    "model.initializer_range": numbers("(0, 1]"),
    "model.rope_theta": numbers("(1, 1e12]"),  # 20,000× Llama 3's 5e5; the angles are computed in fp32
    "data.max_seq_length": integers(8, MAX_SEQ_LENGTH),
    "data.short_seq_prob": numbers("[0, 1]"),
    "data.mlm_probability": numbers("(0, 1]"),
    "data.mask_replace_prob": numbers("[0, 1]"),
    "data.random_replace_prob": numbers("[0, 1]"),
    "data.max_predictions_per_seq": integers(1, MAX_SEQ_LENGTH),
    "data.num_workers": integers(0, MAX_WORKERS),
    "data.plm_probability": numbers("(0, 1)"),
    "data.max_span_length": integers(1, MAX_SEQ_LENGTH),
    "data.reuse_length": integers(1, MAX_SEQ_LENGTH),
    "model.mem_len": integers(0, MAX_SEQ_LENGTH),
    "model.clamp_len": integers(-1, MAX_SEQ_LENGTH),
    # each family's own keys (ModernBERT's), as its row states them (`FamilyConfig.ranges`)
    **{f"model.{name}": rule for row in FAMILIES.values() for name, rule in row.config.ranges.items()},
    "data.path[].weight": numbers(f"(0, {MAX_WEIGHT:g}]"),
    "optim.lr": numbers("(0, 1]"),
    "optim.betas[]": numbers("[0, 1)"),
    "optim.eps": numbers("(0, 1]"),
    "optim.weight_decay": numbers("[0, 1]"),
    "optim.warmup_steps": integers(0, MAX_STEPS),
    "optim.warmup_ratio": numbers("[0, 1]"),
    "optim.decay_fraction": numbers("(0, 1]"),
    "optim.max_grad_norm": numbers("[0, inf)"),  # 0: no clipping
    "optim.label_smoothing": numbers("[0, 1)"),
    "train.batch_size": integers(1, MAX_BATCH),
    "train.micro_batch_size": integers(1, MAX_BATCH),
    "train.max_steps": integers(1, MAX_STEPS),
    "train.seed": integers(0, MAX_SEED),
    "train.log_every": integers(1, MAX_STEPS),
    "train.eval_every": integers(1, MAX_STEPS),
    "train.save_every": integers(1, MAX_STEPS),
    "train.keep_last": integers(1, MAX_STEPS),
    "phases[].steps": integers(1, MAX_STEPS),
    # `bertpre finetune` (its settings are named without the section: `lr`, `--set epochs=5`).
    "finetune.epochs": integers(1, 10_000),
    "finetune.lr": numbers("(0, 10]"),
    "finetune.batch_size": integers(1, 1 << 20),
    "finetune.max_seq_length": integers(3, 1 << 16),
    "finetune.warmup_ratio": numbers("[0, 1]"),
    "finetune.weight_decay": numbers("[0, 10]"),
    "finetune.max_grad_norm": numbers("(0, 1e6]"),
    "finetune.eval_batch_size": integers(1, 1 << 20),
})
# A list key's length, where it has one.
LENGTHS = {"optim.betas": 2}
# The words a true/false key also takes (auto: decided by the run, e.g. by its precision).
SWITCH_WORDS = {"model.low_precision_layernorm": ("auto",), "model.fused_qkv": ("auto",),
                "model.low_precision_rotary": ("auto",), "train.compile": ("auto",)}


def shown(value: Any) -> str:
    """A value as the user wrote it: 1e23 and nan bare, other strings quoted."""
    if isinstance(value, str) and FLOAT_TEXT.fullmatch(value.strip()) and len(value.strip()) <= 40:
        return value.strip()
    if isinstance(value, int) and len(str(abs(value))) > 40:
        return f"an integer of {len(str(abs(value)))} digits"
    return repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."


def check_number(where: str, rule: str | Range, value: Any) -> int | float:
    """`value` as the number RULES[rule] (or the Range `rule`) allows, or UserError naming `where`
    and the range.

    PyYAML reads 1e-4 and 1e6 (no dot) as strings; they are taken as the numbers they spell.
    """
    allowed = RULES[rule] if isinstance(rule, str) else rule
    number = float(value) if isinstance(value, str) and FLOAT_TEXT.fullmatch(value.strip()) else value
    if not isinstance(number, (int, float)) or isinstance(number, bool):
        kind = "an integer" if allowed.integer else "a number"
        raise UserError(f"{where} must be {kind}, got {shown(value)}")
    if allowed.integer:
        if isinstance(number, float):
            if math.isfinite(number) and not number.is_integer():
                raise UserError(f"{where} must be an integer, got {shown(value)}")
            number = int(number) if math.isfinite(number) else number
    else:
        try:
            number = float(number)
        except OverflowError:  # an integer of hundreds of digits
            number = math.inf
        if not math.isfinite(number):  # YAML's .nan and .inf
            raise UserError(f"{where} must be a finite number, got {shown(value)}")
    if number not in allowed:
        raise UserError(f"{where} must be {allowed.describe()}, got {shown(value)}")
    return number
