"""Start a run from released weights (`model.init_from`): the source's shape, vocabulary and tensors."""
from __future__ import annotations

import shlex
from pathlib import Path

import torch
from tokenizers import Tokenizer
from torch import nn

from bertpre.config import Config, check_phase_lengths, no_pair_head
from bertpre.config.objectives import objective_rules
from bertpre.errors import UserError
from bertpre.model import BertConfig
from bertpre.model.families import family
from bertpre.tokenizer import VocabMismatch, vocab_extension
from bertpre.train.model_folders import ModelFolder


def adopt_shape(config: Config, shape: BertConfig, where: str | Path) -> None:
    """Take the model's shape from `shape` (the source's or a checkpoint's config.json).

    A shape key the config gives with another value is an error naming the key; training-only
    keys (dropout, the init range of new heads) keep the config's values.
    """
    row = family(shape)
    for name in row.source_fields:
        given, wanted = getattr(config.model, name), getattr(shape, name)
        if name in config.model_keys_given and given != wanted and not (name == "vocab_size" and given == "auto"):
            raise UserError(f"model.{name} is {given!r} in the config but {where} has {wanted!r}; with "
                            f"model.init_from the model's shape comes from the source, so remove "
                            f"model.{name} from the config")
        setattr(config.model, name, wanted)
    if config.data.objective not in row.objectives:
        raise UserError(f"{where} holds {row.display_name} weights, which train with data.objective "
                        f"{' or '.join(row.objectives)} (set model.architecture: {row.architecture}, "
                        "data.objective and data.pair_task: none)")
    if not row.pair_task and config.data.pair_task != "none":
        if "pair_task" in config.data_keys_given:
            raise UserError(no_pair_head(row.display_name, config.data.pair_task, f"{where}'s model"))
        config.data.pair_task = "none"  # BERT's default pair task, never asked for
    # the objective's rules on the model's keys, against the source's shape (rtd's generator fraction)
    objective_rules(config.data.objective).check_model(config)
    # every length a phase reads, against what the source's family reads at once (its row's
    # `max_input_tokens`: ModernBERT's trained length too), before any weight is read
    check_phase_lengths(config, where)


def source_vocab_growth(source: ModelFolder, data_tokenizer: Tokenizer, data_path: str | Path,
                        source_rows: int) -> list[list[int]]:
    """The pieces of each token DATA's vocabulary adds to the source's (none: the same vocabulary).

    Refuses DATA whose ids were made by another vocabulary than the source's weights know.

    Args:
        source_rows: the source model's embedding rows.
    """
    source_tokenizer = source.tokenizer()
    try:
        pieces = vocab_extension(source_tokenizer, data_tokenizer) or []
    except VocabMismatch as error:
        raise UserError(
            f"DATA folder {data_path} was tokenized with another vocabulary than model.init_from "
            f"{source.path}, whose weights fit only their own ({str(error).split(';')[0]}); make "
            f"the DATA with `bertpre tokenize CORPUS --tokenizer {shlex.quote(str(source.tokenizer_folder))} "
            f"--out {shlex.quote(str(data_path))}` (with --add-vocab N to learn new pieces)") from None
    if pieces and source_rows != source_tokenizer.get_vocab_size():
        raise UserError(f"model.init_from {source.path} has {source_rows} embedding rows for a "
                        f"vocabulary of {source_tokenizer.get_vocab_size()}; its vocabulary cannot "
                        "be extended (use DATA tokenized without --add-vocab)")
    return pieces


def load_source_weights(model: nn.Module, source: ModelFolder, new_pieces: list[list[int]] | None = None) -> list[str]:
    """Copy the source's tensors into `model` (built with the source's shape, and its
    vocabulary grown by `len(new_pieces)` rows, each the mean of its pieces' rows).

    Returns:
        What the user should know: the vocabulary grown, the heads the source lacks (they keep
        their fresh initialization), tensors the model has no place for.
    """
    row = family(source.model_config())
    state_dict = row.read_weights(source.model_folder)
    refuse_non_finite(state_dict, source.path)
    said = []
    if new_pieces:
        if row.grow_vocabulary is None:
            raise UserError(f"model.init_from {source.path} holds {row.display_name} weights, whose vocabulary "
                            "bertpre does not extend yet; use DATA tokenized with its own tokenizer and no --add-vocab")
        rows = model.config.vocab_size - len(new_pieces)
        state_dict = row.grow_vocabulary(state_dict, new_pieces)
        said.append(f"the vocabulary grows from {rows:,} to {model.config.vocab_size:,} tokens; each "
                    "new row starts as the mean of the rows of the pieces the old vocabulary split it into")
    missing, unexpected = model.load_weights(state_dict, source.model_folder)
    heads = [label for prefix, label in row.optional_parts.items() if any(name.startswith(prefix) for name in missing)]
    if heads:
        said.append(f"{source.path} has no weights for {', '.join(heads)}; newly initialized")
    if unexpected:
        shown = ", ".join(unexpected[:5]) + (" ..." if len(unexpected) > 5 else "")
        said.append(f"{source.path}: ignored {len(unexpected)} tensors bertpre's {row.display_name} has no "
                    f"place for ({shown})")
    return said


def refuse_non_finite(state_dict: dict[str, torch.Tensor], where: str | Path) -> None:
    """Refuse weights holding NaN or inf, naming the first such tensor: a damaged or diverged
    source would otherwise show up only as a NaN loss at the first step."""
    for name, tensor in state_dict.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise UserError(f"model.init_from {where}: tensor {name} holds values that are not finite "
                            "(NaN or inf); the weights are damaged: use another copy of them")
