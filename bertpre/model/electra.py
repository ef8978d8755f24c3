"""ELECTRA (`architecture: electra`): BERT's encoder with embeddings `embedding_size` wide, projected
to the layers' width where the two differ, under Hugging Face ELECTRA's names; the discriminator
(`ElectraForPreTraining`) as the family's pretraining model, and its folders both ways: a
discriminator's, and beside it in `generator/` the generator's (`ElectraForMaskedLM`).

bertpre's encoder names the projection `encoder.embedding_hidden_mapping_in` (ALBERT's place for
it); transformers' ELECTRA names it `embeddings_project`. The names are mapped when a folder is read
or written, nowhere else.
"""
from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer
from torch import nn

import bertpre
from bertpre.errors import UserError
from bertpre.model import hf_format
from bertpre.model.bert import BertEmbeddings, BertModel, bert_mask_logits, init_weights
from bertpre.model.bert_cost import ForwardShape
from bertpre.model.config import BertConfig
from bertpre.model.electra_config import write_electra_hf
from bertpre.model.electra_generator import (
    GENERATOR_DIR,
    GENERATOR_TIED,
    PROJECTION,
    generator_fraction,
    read_electra_weights,
)
from bertpre.model.replaced_token import (
    ElectraDiscriminatorPredictions,
    ElectraGenerator,
    ReplacedTokenDetection,
    own_tensors,
    pair_generator_size,
)
from bertpre.tokenizer.wordpiece import TOKENIZER_FILES


def electra_encoder(config: BertConfig) -> BertModel:
    """ELECTRA's encoder (transformers' `ElectraModel`): BERT's, no pooler."""
    return BertModel(config, add_pooling_layer=False)


def to_hf_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """bertpre's names of an ELECTRA model's tensors -> transformers' (the projection's)."""
    ours, theirs = PROJECTION
    return {name.replace(ours, theirs, 1): tensor.detach().contiguous().cpu() for name, tensor in state.items()}


@dataclass
class ElectraOutput:
    """The discriminator's logits (B, T): above 0, a token taken for replaced."""

    logits: torch.Tensor


class ElectraForPreTraining(nn.Module):
    """ELECTRA's discriminator: `electra` and `discriminator_predictions` (transformers' names)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.electra = electra_encoder(config)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        self.discriminator_predictions.apply(partial(init_weights, std=config.initializer_range))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None) -> ElectraOutput:
        hidden = self.electra(input_ids, attention_mask, token_type_ids).last_hidden_state  # (B, T, C)
        return ElectraOutput(logits=self.discriminator_predictions(hidden))

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.electra.encoder.gradient_checkpointing = enabled

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, folder: str | Path) -> None:
        """config.json and model.safetensors as transformers' `ElectraForPreTraining` writes them."""
        write_electra_folder(Path(folder), self.config, self.state_dict(), "ElectraForPreTraining")

    def load_weights(self, state_dict: dict[str, torch.Tensor], folder: Path, *,
                     strict: bool = False) -> tuple[list[str], list[str]]:
        """A folder's tensors (bertpre's names) into this model; the head a bare encoder's folder
        lacks keeps its fresh initialization, unless `strict`.

        Returns:
            (missing names, unexpected names).
        """
        expected = {name: tensor.shape for name, tensor in self.state_dict().items()}
        missing, unexpected = hf_format.match_state_dict(expected, state_dict, folder, layout="ELECTRA",
                                                         optional=("discriminator_predictions.",), strict=strict)
        with torch.no_grad():
            self.load_state_dict({k: v for k, v in state_dict.items() if k in expected}, strict=False)
        return missing, unexpected

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, strict: bool = False) -> ElectraForPreTraining:
        """A Hugging Face ELECTRA discriminator's (or bare ElectraModel's) folder. Never downloads."""
        path = hf_format.check_folder(folder)
        model = cls(hf_format.read_config(path))
        missing, unexpected = model.load_weights(read_electra_weights(path), path, strict=strict)
        hf_format.warn_loading(folder, missing, unexpected)
        return model


def write_electra_folder(folder: Path, config: BertConfig, state: dict[str, torch.Tensor], architecture: str,
                         hf: dict | None = None) -> dict:
    """config.json (`ElectraConfig` naming `architecture`, or `hf`) and model.safetensors under
    transformers' names; returns config.json's content."""
    folder.mkdir(parents=True, exist_ok=True)
    hf = {**(hf or write_electra_hf(config, architecture)), "bertpre_version": bertpre.__version__}
    hf_format.write_json(folder / hf_format.CONFIG_NAME, hf)
    tensors = {name: tensor for name, tensor in to_hf_names(state).items() if name != GENERATOR_TIED}
    save_file(tensors, folder / hf_format.SAFETENSORS_NAME, metadata={"format": "pt"})
    return hf


def generator_state(pair: ReplacedTokenDetection) -> dict[str, torch.Tensor]:
    """The generator's tensors under `ElectraForMaskedLM`'s names (the shared embeddings its own copy)."""
    return {name.removeprefix("generator."): tensor for name, tensor in pair.state_dict().items()
            if name.startswith("generator.")}


def discriminator_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The discriminator's tensors of a pair (`ReplacedTokenDetection.discriminator_state`: a
    `gdes` pair's word table the sum it reads) or of a discriminator alone."""
    if isinstance(model, ReplacedTokenDetection):
        return model.discriminator_state()
    return {name: tensor for name, tensor in model.state_dict().items() if not name.startswith("generator.")}


def copy_tokenizer(tokenizer_folder: Path, folder: Path, positions: int) -> list[str]:
    copied = []
    for name in TOKENIZER_FILES:
        if (tokenizer_folder / name).is_file():
            shutil.copyfile(tokenizer_folder / name, folder / name)
            copied.append(name)
    hf_format.limit_model_max_length(folder, positions)
    return copied


def electra_export_writer(model: nn.Module, tokenizer_folder: Path) -> tuple[str, hf_format.ExportWriter]:
    """The discriminator as `ElectraForPreTraining` and, for a run's pair, the generator as
    `ElectraForMaskedLM` in `generator/` beside it, each with the tokenizer."""
    generator = getattr(model, "generator", None)
    architecture = "ElectraForPreTraining" + (f" + {GENERATOR_DIR}/ ElectraForMaskedLM" if generator else "")

    def write(staging: Path) -> list[str]:
        write_electra_folder(staging, model.config, discriminator_state(model), "ElectraForPreTraining")
        copied = copy_tokenizer(tokenizer_folder, staging, model.config.max_position_embeddings)
        if generator is not None:
            where = staging / GENERATOR_DIR
            write_electra_folder(where, generator.config, generator_state(model), "ElectraForMaskedLM")
            copy_tokenizer(tokenizer_folder, where, model.config.max_position_embeddings)
        return copied

    return architecture, write


def electra_generator_writer(generator: ElectraGenerator,
                             tokenizer_folder: Path) -> tuple[str, hf_format.ExportWriter]:
    """ELECTRA's generator alone as `ElectraForMaskedLM` with the tokenizer: a BERT rtd run's
    `generator/` (BERT's layers reading the embeddings through ELECTRA's projection)."""
    def write(folder: Path) -> list[str]:
        write_electra_folder(folder, generator.config, generator.state_dict(), "ElectraForMaskedLM")
        return copy_tokenizer(tokenizer_folder, folder, generator.config.max_position_embeddings)

    return "ElectraForMaskedLM", write


def load_electra_generator(folder: str | Path, *, strict: bool = False) -> ElectraGenerator:
    """An `ElectraForMaskedLM` folder (a BERT rtd export's `generator/`) as ELECTRA's generator on
    embeddings of its own: the masked LM that fill-mask and evaluate read."""
    path = hf_format.check_folder(folder)
    config = hf_format.read_config(path)
    generator = ElectraGenerator(config, BertEmbeddings(config))
    state = read_electra_weights(path)
    expected = {name: tensor.shape for name, tensor in generator.state_dict().items() if name != GENERATOR_TIED}
    hf_format.match_state_dict(expected, state, path, layout="ELECTRA's generator", strict=strict)
    with torch.no_grad():
        generator.load_state_dict({name: tensor for name, tensor in state.items() if name in expected}, strict=False)
    generator.tie_weights()
    return generator


def load_export_pair(folder: Path, *, strict: bool = False) -> ReplacedTokenDetection:
    """An ELECTRA export's discriminator and its `generator/` as one pair. The generator reads the
    discriminator's embeddings: an export of a `tied` pair has two equal copies of them; one whose
    word tables differ was `gdes`, and comes back as such (its residual the difference)."""
    config = hf_format.read_config(folder)
    generator_folder = folder / GENERATOR_DIR
    generator = hf_format.read_config(generator_folder)
    size = generator_fraction(config, generator, f"the generator at {generator_folder}")
    state = read_electra_weights(folder)
    generator_weights = read_electra_weights(generator_folder)
    word = "electra.embeddings.word_embeddings.weight"
    gdes = word in state and word in generator_weights and not torch.equal(state[word], generator_weights[word])
    pair = ReplacedTokenDetection(config, size, "gdes" if gdes else "tied")
    if gdes:
        state["electra.embeddings.word_embeddings.delta"] = state.pop(word) - generator_weights[word]
        state[f"generator.{word}"] = generator_weights[word]
    state.update({f"generator.{name}": tensor for name, tensor in generator_weights.items()
                  if not name.startswith("electra.embeddings.")})
    expected = {name: tensor.shape for name, tensor in own_tensors(pair).items()}
    hf_format.match_state_dict(expected, state, folder, layout="ELECTRA's generator and discriminator",
                               optional=("discriminator_predictions.",), strict=strict)
    with torch.no_grad():
        pair.load_state_dict({k: v for k, v in state.items() if k in expected}, strict=False)
    return pair


@torch.no_grad()
def electra_mask_logits(model: nn.Module, tokenizer: Tokenizer, text: str,
                        fits: Callable[[ForwardShape], None] = lambda shape: None) -> torch.Tensor:
    """The generator's logits (M, V) at each mask: an ELECTRA export's `generator/`, a run's pair,
    or the generator alone (a BERT rtd export's); a discriminator alone predicts no tokens."""
    generator = model if isinstance(model, ElectraGenerator) else getattr(model, "generator", None)
    if generator is None:
        raise UserError(f"this ELECTRA folder holds a discriminator alone, which predicts no tokens; fill-mask "
                        f"reads its generator: pass an export with its {GENERATOR_DIR}/ folder, or the run")
    return bert_mask_logits(MaskedGenerator(generator), tokenizer, text, fits)


class MaskedGenerator(nn.Module):
    """The generator with `BertForPreTraining.forward`'s inputs and `prediction_logits` (fill-mask's)."""

    def __init__(self, generator: ElectraGenerator) -> None:
        super().__init__()
        self.generator = generator
        self.config = generator.config

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, masked_lm_positions: torch.Tensor | None = None):
        hidden = self.generator.electra(input_ids, attention_mask, token_type_ids).last_hidden_state  # (B, T, C)
        index = masked_lm_positions[..., None].expand(-1, -1, hidden.shape[-1])
        return ElectraMaskedOutput(prediction_logits=self.generator.predict(hidden.gather(1, index)))  # (B, M, V)


@dataclass
class ElectraMaskedOutput:
    prediction_logits: torch.Tensor


def load_electra(folder: str | Path, *, strict: bool = False) -> nn.Module:
    """The model an ELECTRA folder holds: a run's pair (checkpoint), an export's discriminator with
    its `generator/` as one pair, or a discriminator alone."""
    path = hf_format.check_folder(folder)
    if pair_generator_size(path) is not None:
        return ReplacedTokenDetection.from_pretrained(path, strict=strict)
    if (path / GENERATOR_DIR / hf_format.CONFIG_NAME).is_file():
        return load_export_pair(path, strict=strict)
    return ElectraForPreTraining.from_pretrained(path, strict=strict)
