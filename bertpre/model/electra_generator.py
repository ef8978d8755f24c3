"""ELECTRA's generator as a shape and as a folder: its sizes as a fraction of the discriminator's
(`generator_config`), an ELECTRA folder's tensors under bertpre's names (`read_electra_weights`),
and a released generator's folder (`generator/` beside a discriminator, or any
`ElectraForMaskedLM`'s), checked to pair with its discriminator (`generator_fraction`) and read
(`generator_weights`). Below both the pair (`model.replaced_token`) and the family
(`model.electra`), which import it.
"""
from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import torch

from bertpre.errors import UserError
from bertpre.model import hf_format
from bertpre.model.config import BertConfig

GENERATOR_DIR = "generator"  # an export's generator, beside its discriminator
# How the two networks share their embeddings (`objective.embedding_sharing`): `tied`, ELECTRA's
# one set of tables that both losses train; `gdes`, DeBERTa-v3's gradient-disentangled sharing
# (`replaced_token.DisentangledEmbedding`).
EMBEDDING_SHARING = ("tied", "gdes")
# bertpre's name of the projection -> transformers' ELECTRA's
PROJECTION = ("encoder.embedding_hidden_mapping_in.", "embeddings_project.")
# transformers' tied copy of the word embeddings in the generator's head
GENERATOR_TIED = "generator_lm_head.weight"
HEAD_PREFIXES = ("discriminator_predictions.", "generator_predictions.", "generator_lm_head.")
# the discriminator's word table, and a gdes pair's residual to the generator's
WORD_TABLE = "electra.embeddings.word_embeddings.weight"
GDES_RESIDUAL = "electra.embeddings.word_embeddings.delta"


def generator_config(config: BertConfig, generator_size: float) -> BertConfig:
    """The generator's shape: the discriminator's hidden size and intermediate size times
    `generator_size`, a head a 64 wide (at least one: ELECTRA's own rule, which gives the released
    generators' heads), reading the discriminator's embeddings (projected where widths differ).

    Raises:
        ValueError: a size that is not a whole number, or a hidden size its heads do not divide.
    """
    sizes = {name: getattr(config, name) * generator_size for name in ("hidden_size", "intermediate_size")}
    broken = [f"{name} {value:g} (of {getattr(config, name)})" for name, value in sizes.items()
              if abs(value - round(value)) > 1e-9 or round(value) < 1]
    if broken:
        raise ValueError(f"the generator's {', '.join(broken)} must be whole numbers; choose a fraction that "
                         "divides the discriminator's hidden size and intermediate size (e.g. 0.25 or 0.5)")
    hidden, intermediate = (round(value) for value in sizes.values())
    heads = max(1, hidden // 64)
    if hidden % heads:
        raise ValueError(f"the generator's hidden size {hidden} is not divisible by its {heads} heads "
                         "(one a 64 wide, as ELECTRA's generators have)")
    width = config.embedding_size or config.hidden_size
    return dataclasses.replace(config, hidden_size=hidden, num_attention_heads=heads, intermediate_size=intermediate,
                               embedding_size=None if width == hidden else width)


def read_electra_weights(folder: Path) -> dict[str, torch.Tensor]:
    """An ELECTRA folder's tensors under bertpre's names: a discriminator's, a generator's, a task
    model's or a bare `ElectraModel`'s (its names get `electra.`); buffers and tied copies dropped.
    A `gdes` run's checkpoint gives its discriminator's word table as the discriminator reads it:
    the generator's table plus its residual."""
    weights = hf_format.read_weights(folder)
    delta = weights.pop(GDES_RESIDUAL, None)
    if delta is not None:
        weights[WORD_TABLE] = weights[f"generator.{WORD_TABLE}"] + delta
    bare = not any(name.startswith("electra.") for name in weights)
    ours, theirs = PROJECTION
    state = {}
    for name, tensor in weights.items():
        if name.endswith(hf_format.BUFFER_SUFFIXES) or name == GENERATOR_TIED:
            continue
        name = re.sub(r"LayerNorm\.gamma$", "LayerNorm.weight", re.sub(r"LayerNorm\.beta$", "LayerNorm.bias", name))
        if bare and not name.startswith(HEAD_PREFIXES):
            name = "electra." + name
        state[name.replace("electra." + theirs, "electra." + ours, 1)] = tensor
    return state


def generator_fraction(discriminator: BertConfig, generator: BertConfig, named: str,
                       discriminator_named: str = "the discriminator") -> float:
    """The generator's size as a fraction of the discriminator's (`objective.generator_size`), or a
    UserError where the two do not pair: another vocabulary, embedding width or shape, or a
    generator larger than the discriminator.

    Args:
        named, discriminator_named: the two as the error names them ("the generator at PATH").
    """
    width = discriminator.embedding_size or discriminator.hidden_size
    trained_with = "they share one embedding table: use the generator trained with that discriminator"
    if generator.vocab_size != discriminator.vocab_size:
        raise UserError(f"{named} has a vocabulary of {generator.vocab_size} and {discriminator_named} "
                        f"{discriminator.vocab_size}; {trained_with}")
    if (generator.embedding_size or generator.hidden_size) != width:
        raise UserError(f"{named} has embeddings {generator.embedding_size or generator.hidden_size} wide and "
                        f"{discriminator_named} {width}; {trained_with}")
    size = generator.hidden_size / discriminator.hidden_size
    if size > 1:
        raise UserError(f"{named} is larger than {discriminator_named} (hidden size {generator.hidden_size} of "
                        f"{discriminator.hidden_size}); ELECTRA's generator is at most the discriminator's size "
                        "(objective.generator_size is in (0, 1]): use the generator trained with that discriminator")
    try:
        expected = generator_config(discriminator, size)
    except ValueError as error:
        raise UserError(f"{named} is not a fraction of {discriminator_named}: {error}") from None
    shape = ("num_hidden_layers", "num_attention_heads", "intermediate_size", "max_position_embeddings",
             "type_vocab_size")
    wrong = [f"{name} {getattr(generator, name)}, not {getattr(expected, name)}" for name in shape
             if getattr(expected, name) != getattr(generator, name)]
    if wrong:
        raise UserError(f"{named} is not {size:g} of {discriminator_named} (hidden size {generator.hidden_size} of "
                        f"{discriminator.hidden_size}; {', '.join(wrong)}); bertpre pairs a generator whose hidden "
                        "size, heads (one a 64 wide) and intermediate size are one fraction of the discriminator's")
    return size


def generator_weights(folder: Path, named: str) -> dict[str, torch.Tensor]:
    """An ELECTRA generator folder's tensors (`ElectraForMaskedLM`'s) under the pair's names
    (`generator.…`), less the embeddings it shares with the discriminator. A folder without a
    generator's head (a discriminator's, a bare encoder's) is refused in one line, naming it as
    `named` does."""
    weights = read_electra_weights(folder)
    if not any(name.startswith("generator_predictions.") for name in weights):
        raise UserError(f"{named} holds no ELECTRA generator (no generator_predictions.* weights); give the folder "
                        "of an ElectraForMaskedLM (e.g. google/electra-base-generator saved locally, or the "
                        f"{GENERATOR_DIR}/ of a bertpre export)")
    return {f"generator.{name}": tensor for name, tensor in weights.items()
            if not name.startswith("electra.embeddings.")}
