"""Start a run from released weights (`model.init_from`): the source's shape, vocabulary and
tensors, and (an objective that trains a generator: rtd) the released generator beside it."""
from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from bertpre.config import Config, check_phase_lengths, no_pair_head
from bertpre.config.objectives import objective_rules
from bertpre.errors import UserError
from bertpre.model import BertConfig, hf_format
from bertpre.model.electra_generator import GENERATOR_DIR, generator_fraction, generator_weights
from bertpre.model.families import Family, family
from bertpre.model.replaced_token import PAIR_ENCODER, ReplacedTokenDetection, pair_generator_size
from bertpre.model.replaced_token_export import exported_pair
from bertpre.tokenizer import VocabMismatch, vocab_extension
from bertpre.tokenizer.roles import token_roles
from bertpre.train.model_folders import ModelFolder


def adopt_shape(config: Config, shape: BertConfig, where: str | Path) -> dict[str, Any]:
    """Take the model's shape from `shape` (the source's or a checkpoint's config.json), and its
    settings where the config gives none (`adopt_settings`).

    A shape key the config gives with another value is an error naming the key; training-only
    keys the config gives (dropout, the init range of new heads) keep the config's values.

    Returns:
        The settings taken from `shape` that differ from the config's defaults, by name.
    """
    row = family(shape)
    for name in row.source_fields:
        given, wanted = getattr(config.model, name), getattr(shape, name)
        if name in config.model_keys_given and given != wanted and not (name == "vocab_size" and given == "auto"):
            raise UserError(f"model.{name} is {given!r} in the config but {where} has {wanted!r}; with "
                            f"model.init_from the model's shape comes from the source, so remove "
                            f"model.{name} from the config")
        setattr(config.model, name, wanted)
    taken = adopt_settings(config, shape)
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
    return taken


def adopt_settings(config: Config, shape: BertConfig) -> dict[str, Any]:
    """Take the model settings `shape`'s config.json holds beside the shape (`Family.source_settings`:
    dropout, the init of new parts, ModernBERT's classifier pooling) that the config does not give.

    They are what the source was trained with and what its fine-tuning reads; bertpre's defaults
    would silently replace them, in training and in the export. A key the config gives wins.

    Returns:
        Those taken whose value differs from the config's (its defaults), by name.
    """
    taken = {}
    for name in family(shape).source_settings:
        wanted = getattr(shape, name)
        if name not in config.model_keys_given and getattr(config.model, name) != wanted:
            setattr(config.model, name, wanted)
            taken[name] = wanted
    return taken


def settings_note(taken: dict[str, Any], where: str | Path) -> str:
    """The start block's line naming the settings a run took from its source (`adopt_settings`)."""
    values = ", ".join(f"model.{name} {value:g}" if isinstance(value, float) else f"model.{name} {value}"
                       for name, value in taken.items())
    return f"taking {values} from {where}'s config.json (the config does not give them)"


@dataclass(frozen=True)
class GeneratorSource:
    """The released generator a run from `model.init_from` starts its generator from."""

    path: Path
    explicit: bool  # named by model.init_generator_from, not found beside the discriminator
    fitted: bool  # objective.generator_size comes from its shape (the config gave none)

    @property
    def named(self) -> str:
        """How a message names it."""
        return f"model.init_generator_from {self.path}" if self.explicit else f"the generator at {self.path}"

    def note(self, generator_size: float) -> str:
        """The start block's line saying which generator the run starts from."""
        where = "model.init_generator_from" if self.explicit else f"the {GENERATOR_DIR}/ beside model.init_from"
        shape = ", from its shape" if self.fitted else ""
        return (f"starting the generator from the weights of {self.path} ({where}; objective.generator_size "
                f"{generator_size:g}{shape})")


def settle_generator(config: Config, source: ModelFolder) -> GeneratorSource | None:
    """The released generator a new run from `source` starts its generator from, where its objective
    trains one (rtd): `model.init_generator_from`, else the `generator/` beside the discriminator
    (an ELECTRA export's), else none (drawn fresh at objective.generator_size).

    Its shape must pair with the source's (one vocabulary and embedding width, a fraction of its
    size); `objective.generator_size` becomes that fraction where the config does not give it, and
    one given that differs is refused in one line. Sets `config.objective` in place; reads no tensor.
    """
    if not objective_rules(config.data.objective).trains_generator:
        return None  # model.init_generator_from is refused there by the config
    refuse_pair_continuation(config, source)
    if config.init_generator_from is not None:
        path = Path(config.init_generator_from)
        if not (path / hf_format.CONFIG_NAME).is_file():
            hf_format.refuse_hub_name(path)
            reason = "is no folder" if not path.is_dir() else f"has no {hf_format.CONFIG_NAME}"
            raise UserError(f"model.init_generator_from {path} {reason}; give the folder of an ELECTRA generator "
                            "(ElectraForMaskedLM: e.g. google/electra-base-generator saved locally, or the "
                            f"{GENERATOR_DIR}/ of a bertpre export)")
    else:
        path = source.model_folder / GENERATOR_DIR
        if not (path / hf_format.CONFIG_NAME).is_file():
            return None
    given = "generator_size" in config.objective_keys_given
    generator = GeneratorSource(path, explicit=config.init_generator_from is not None, fitted=not given)
    shape = hf_format.read_config(path)
    if shape.architecture != "electra":
        raise UserError(f"{generator.named} holds {family(shape).display_name} weights, not an ELECTRA generator; "
                        "give the folder of an ElectraForMaskedLM")
    size = generator_fraction(source.model_config(), shape, generator.named, f"model.init_from {source.path}")
    if given and abs(size - config.objective.generator_size) > 1e-9:
        raise UserError(f"{generator.named} is {size:g} of the discriminator, and objective.generator_size is "
                        f"{config.objective.generator_size:g}; remove objective.generator_size (the generator's "
                        "shape gives it), or start from the generator of that size")
    config.objective.generator_size = config.objective.generator_size if given else size
    return generator


def fit_resumed_generator(config: Config, checkpoint: Path) -> None:
    """A run resumed from `checkpoint` keeps the generator size it started with (a released
    generator's, `settle_generator`), where the config gives none: what `model.init_from`'s
    shape is to the discriminator."""
    size = pair_generator_size(checkpoint)
    if size is not None and config.objective is not None and "generator_size" not in config.objective_keys_given:
        config.objective.generator_size = size


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
        # a new DATA folder: tokenize refuses to replace this one unasked; --add-vocab grows WordPiece alone
        grows = " (with --add-vocab N to learn new pieces)" if token_roles(source_tokenizer).kind == "wordpiece" else ""
        raise UserError(
            f"DATA folder {data_path} was tokenized with another vocabulary than model.init_from "
            f"{source.path}, whose weights fit only their own ({str(error).split(';')[0]}); make "
            f"DATA with `bertpre tokenize CORPUS --tokenizer {shlex.quote(str(source.tokenizer_folder))} "
            f"--out NEW_DATA`{grows} and train on it") from None
    if pieces and source_rows != source_tokenizer.get_vocab_size():
        raise UserError(f"model.init_from {source.path} has {source_rows} embedding rows for a "
                        f"vocabulary of {source_tokenizer.get_vocab_size()}; its vocabulary cannot "
                        "be extended (use DATA tokenized without --add-vocab)")
    return pieces


def load_source_weights(model: nn.Module, source: ModelFolder, new_pieces: list[list[int]] | None = None,
                        generator: GeneratorSource | None = None) -> list[str]:
    """Copy the source's tensors into `model` (built with the source's shape, and its
    vocabulary grown by `len(new_pieces)` rows, each the mean of its pieces' rows), and the
    released generator's where the run has one (`settle_generator`).

    Returns:
        What the user should know: the generator's source, the vocabulary grown, the heads the
        source lacks (they keep their fresh initialization), tensors the model has no place for.
    """
    row = family(source.model_config())
    state_dict = read_source_weights(row, source)
    refuse_non_finite(state_dict, f"model.init_from {source.path}")
    said = []
    if generator is not None:
        tensors = generator_weights(generator.path, generator.named)
        refuse_non_finite(tensors, generator.named)
        state_dict = {**state_dict, **tensors}
        said.append(generator.note(model.generator_size))
    if new_pieces:
        if row.grow_vocabulary is None:
            raise UserError(f"model.init_from {source.path} holds {row.display_name} weights, whose vocabulary "
                            "bertpre does not extend yet; use DATA tokenized with its own tokenizer and no --add-vocab")
        rows = model.config.vocab_size - len(new_pieces)
        state_dict = row.grow_vocabulary(state_dict, new_pieces)
        said.append(f"the vocabulary grows from {rows:,} to {model.config.vocab_size:,} tokens; each "
                    "new row starts as the mean of the rows of the pieces the old vocabulary split it into")
    missing, unexpected = model.load_weights(state_dict, source.model_folder)
    heads = row.fresh_parts(missing)
    if heads:
        said.append(f"{source.path} has no weights for {', '.join(heads)}; newly initialized")
    if unexpected:
        shown = ", ".join(unexpected[:5]) + (" ..." if len(unexpected) > 5 else "")
        said.append(f"{source.path}: ignored {len(unexpected)} tensors bertpre's {row.display_name} has no "
                    f"place for ({shown})")
    return said


def family_pair(source: ModelFolder) -> bool:
    """Whether `source` is a checkpoint of an rtd run of a family whose own names are not the pair's
    (BERT, RoBERTa, ModernBERT: its tensors are `electra.`, `generator.`; ELECTRA's row reads them)."""
    return (pair_generator_size(source.model_folder) is not None
            and family(source.model_config()).encoder_attribute != PAIR_ENCODER)


def read_source_weights(row: Family, source: ModelFolder) -> dict[str, torch.Tensor]:
    """The source's tensors under the names of `row`'s pretraining model: a family's rtd checkpoint
    gives its discriminator's encoder (the heads are drawn fresh), as fine-tuning reads it."""
    if not family_pair(source):
        return row.read_weights(source.model_folder)
    state = ReplacedTokenDetection.from_pretrained(source.model_folder).discriminator_state()
    prefix = PAIR_ENCODER + "."
    return {row.encoder_attribute + "." + name.removeprefix(prefix): tensor
            for name, tensor in state.items() if name.startswith(prefix)}


def refuse_pair_continuation(config: Config, source: ModelFolder) -> None:
    """Refuse, in one line, data.objective rtd from a family's rtd run, checkpoint or export (BERT,
    RoBERTa, ModernBERT): the pair's generator is not read back into a new pair yet. Its
    discriminator's encoder starts an mlm run; ELECTRA's runs and exports continue with rtd."""
    if not objective_rules(config.data.objective).trains_generator:
        return
    exported = exported_pair(source.model_folder) and source.model_config().architecture != "electra"
    if not (family_pair(source) or exported):
        return
    name = family(source.model_config()).display_name
    what = "the export of" if exported else "a checkpoint of"
    raise UserError(f"model.init_from {source.path} is {what} an rtd run of {name}, whose generator and "
                    f"discriminator bertpre does not continue with data.objective rtd yet; resume the run itself "
                    f"(--resume), or start from it with data.objective mlm (its discriminator's encoder)")


def refuse_non_finite(state_dict: dict[str, torch.Tensor], named: str) -> None:
    """Refuse weights holding NaN or inf, naming the first such tensor: a damaged or diverged
    source would otherwise show up only as a NaN loss at the first step.

    Args:
        named: the source as the error names it ("model.init_from PATH").
    """
    for name, tensor in state_dict.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise UserError(f"{named}: tensor {name} holds values that are not finite "
                            "(NaN or inf); the weights are damaged: use another copy of them")
