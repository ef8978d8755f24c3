"""Start a run from released weights (`model.init_from`): the source's shape, vocabulary and tensors."""
from __future__ import annotations

import shlex
from dataclasses import fields
from pathlib import Path

from tokenizers import Tokenizer

from bertpre.config import Config
from bertpre.errors import UserError
from bertpre.model import BertConfig, BertForPreTraining, XLNetLMHeadModel
from bertpre.model.hf_format import read_folder
from bertpre.model.vocab_growth import grow_vocab_rows
from bertpre.tokenizer import VocabMismatch, vocab_extension
from bertpre.train.checkpoint import ModelFolder

# Model keys a run may set whatever the source says: they shape training, not the weights.
TRAINING_ONLY_KEYS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range",
                      "pad_token_id", "mem_len", "clamp_len")
SHAPE_KEYS = tuple(f.name for f in fields(BertConfig) if f.name not in TRAINING_ONLY_KEYS)
# The parts a BertModel-only or BertForMaskedLM folder may lack, as the user knows them.
HEADS = {"bert.pooler.": "the pooler (bert.pooler)", "cls.predictions.": "the MLM head (cls.predictions)",
         "cls.seq_relationship.": "the pair head (cls.seq_relationship)"}


def adopt_shape(config: Config, shape: BertConfig, where: str | Path) -> None:
    """Take the model's shape from `shape` (the source's or a checkpoint's config.json).

    A shape key the config gives with another value is an error naming the key; training-only
    keys (dropout, the init range of new heads) keep the config's values.
    """
    for name in shape.shape_fields() if shape.is_xlnet else SHAPE_KEYS:
        given, wanted = getattr(config.model, name), getattr(shape, name)
        if name in config.model_keys_given and given != wanted and not (name == "vocab_size" and given == "auto"):
            raise UserError(f"model.{name} is {given!r} in the config but {where} has {wanted!r}; with "
                            f"model.init_from the model's shape comes from the source, so remove "
                            f"model.{name} from the config")
        setattr(config.model, name, wanted)
    if shape.is_xlnet and not config.data.recurrent:
        raise UserError(f"{where} is an XLNet, which trains with data.objective plm or clm (set "
                        "model.architecture: xlnet, data.objective and data.pair_task: none)")
    if config.data.max_seq_length > shape.max_position_embeddings and not shape.relative_positions:
        raise UserError(f"data.max_seq_length ({config.data.max_seq_length}) is larger than the "
                        f"{shape.max_position_embeddings} positions of {where}; lower it")


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


def load_source_weights(model: BertForPreTraining | XLNetLMHeadModel, source: ModelFolder,
                        new_pieces: list[list[int]] | None = None) -> list[str]:
    """Copy the source's tensors into `model` (built with the source's shape, and its
    vocabulary grown by `len(new_pieces)` rows, each the mean of its pieces' rows).

    Returns:
        What the user should know: the vocabulary grown, the heads the source lacks (they keep
        their fresh initialization), tensors the model has no place for.
    """
    if isinstance(model, XLNetLMHeadModel):
        if new_pieces:
            raise UserError(f"model.init_from {source.path} is an XLNet, whose vocabulary bertpre does not "
                            "extend yet; use DATA tokenized with its own tokenizer and no --add-vocab")
        model.load_state_dict(XLNetLMHeadModel.from_pretrained(source.model_folder).state_dict())
        return []
    _, state_dict = read_folder(source.model_folder)
    said = []
    if new_pieces:
        rows = model.config.vocab_size - len(new_pieces)
        state_dict = grow_vocab_rows(state_dict, new_pieces)
        said.append(f"the vocabulary grows from {rows:,} to {model.config.vocab_size:,} tokens; each "
                    "new row starts as the mean of the rows of the pieces the old vocabulary split it into")
    missing, unexpected = model.load_weights(state_dict, source.model_folder)
    heads = [label for prefix, label in HEADS.items() if any(name.startswith(prefix) for name in missing)]
    if heads:
        said.append(f"{source.path} has no weights for {', '.join(heads)}; newly initialized")
    if unexpected:
        shown = ", ".join(unexpected[:5]) + (" ..." if len(unexpected) > 5 else "")
        said.append(f"{source.path}: ignored {len(unexpected)} tensors bertpre's BERT has no place for ({shown})")
    return said
