"""ELECTRA's generator and discriminator as one module (`data.objective: rtd`): a small masked-LM
generator and a discriminator of the same family, sharing one embedding module, so that the
optimizer, DDP, compile and checkpoints cover both. The pair's own names are Hugging Face's
ELECTRA's (`electra`, `discriminator_predictions`, `generator`).

The objective is family-agnostic: a family's row says how (`Family.replaced_token`,
`ReplacedTokenParts`): its discriminator's encoder, the generator's shape and network, and its
embeddings' word table. BERT and ELECTRA keep ELECTRA's narrower generator, which reads the
shared embeddings through ELECTRA's projection (`ElectraGenerator`); RoBERTa's and ModernBERT's
transformers classes have no such projection, so their generator is the family's own masked-LM
model at the discriminator's width with `generator_size` of its layers (DeBERTa-v3's generator:
the same width, fewer layers). Their export, and BERT's, is `model.replaced_token_export`.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from bertpre.errors import UserError
from bertpre.model import hf_format
from bertpre.model.bert import (
    BertModel,
    BertModelOutput,
    PreTrainingOutput,
    activation,
    init_weights,
    masked_lm_predictions,
    read_positions,
)
from bertpre.model.config import FAMILIES, BertConfig
from bertpre.model.electra_generator import EMBEDDING_SHARING, generator_config
from bertpre.model.layer_norm import LayerNorm

# config.json's key that marks a generator-discriminator pair and gives the generator's fraction
# and how the two share their embeddings.
PAIR_KEY = "bertpre_replaced_token_detection"
# The pair's attribute holding the discriminator's encoder, whatever the family (ELECTRA's name).
PAIR_ENCODER = "electra"
EXPORT_LATER = ("its export, evaluation and fill-mask are built for model.architecture bert, electra, roberta, "
                "xlm-roberta and modernbert; train with one of those")


class ElectraDiscriminatorPredictions(nn.Module):
    """dense, activation, dense to one logit a token: whether it was replaced."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = activation(config.hidden_act)
        self.dense_prediction = nn.Linear(config.hidden_size, 1)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.dense_prediction(self.activation(self.dense(hidden_states))).squeeze(-1)  # (B, T)


class ElectraGeneratorPredictions(nn.Module):
    """dense to the embedding width, gelu, LayerNorm: what the tied vocabulary projection reads
    (transformers' ElectraForMaskedLM applies gelu whatever `hidden_act` says; so does this, so that
    an exported generator computes what it trained with)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        width = config.embedding_size or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, width)
        self.activation = activation("gelu")
        self.LayerNorm = LayerNorm(width, eps=config.layer_norm_eps, low_precision=config.low_precision_layernorm)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.activation(self.dense(hidden_states)))


class ElectraGenerator(nn.Module):
    """The masked-LM generator: its own encoder on `embeddings` (the discriminator's), its head,
    and the vocabulary projection tied to the word embeddings (Hugging Face's ElectraForMaskedLM)."""

    def __init__(self, config: BertConfig, embeddings: nn.Module) -> None:
        super().__init__()
        self.config = config
        self.electra = BertModel(config, add_pooling_layer=False)
        self.electra.embeddings = embeddings  # one module: ELECTRA shares the whole embedding scope
        self.generator_predictions = ElectraGeneratorPredictions(config)
        self.generator_lm_head = nn.Linear(config.embedding_size or config.hidden_size, config.vocab_size)
        self.generator_predictions.apply(partial(init_weights, std=config.initializer_range))
        nn.init.zeros_(self.generator_lm_head.bias)
        self.tie_weights()

    def tie_weights(self) -> None:
        self.generator_lm_head.weight = self.electra.embeddings.word_embeddings.weight

    def predict(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.generator_lm_head(self.generator_predictions(hidden_states))

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.electra.encoder.gradient_checkpointing = enabled

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                token_type_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                next_sentence_label: torch.Tensor | None = None, label_smoothing: float = 0.0,
                masked_lm_positions: torch.Tensor | None = None, masked_lm_ids: torch.Tensor | None = None
                ) -> PreTrainingOutput:
        """The masked-LM models' call and output (`MaskedLMOnly.forward`'s): with
        `masked_lm_positions`, the logits (B, P, V) of its P slots and, with `masked_lm_ids`,
        their summed loss (`mlm_loss_sum`); the last layer computes those rows alone in training
        (`model.last_layer_rows`)."""
        if next_sentence_label is not None:
            raise UserError("ELECTRA's generator has no pair head: score it with data.pair_task none "
                            "(a --config that sets it)")
        rows = read_positions(self.config, masked_lm_positions, cls_first=False, training=self.training)
        encoded = self.electra(input_ids, attention_mask, token_type_ids, last_rows=rows)
        # Unchunked: the objective samples replacements from these logits.
        logits, loss, loss_sum, _ = masked_lm_predictions(
            self.predict, encoded.last_hidden_state, labels=labels, label_smoothing=label_smoothing,
            masked_lm_positions=masked_lm_positions, masked_lm_ids=masked_lm_ids,
            predicted_states=None if rows is None else encoded.last_hidden_state)
        return PreTrainingOutput(loss=loss, mlm_loss=loss, pair_loss=None, prediction_logits=logits,
                                 seq_relationship_logits=None, mlm_loss_sum=loss_sum)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class DisentangledEmbedding(nn.Module):
    """DeBERTa-v3's gradient-disentangled embedding sharing (GDES): the discriminator reads
    stop-gradient(the generator's table) + `delta`, a residual table of its own that starts at
    zero. The generator's masked LM alone trains the shared table; the discriminator's loss trains
    `delta` alone, so the two losses stop pulling one table two ways (the "tug of war")."""

    def __init__(self, source: nn.Embedding) -> None:
        super().__init__()
        self.delta = nn.Parameter(torch.zeros_like(source.weight))  # (V, E)
        self.padding_idx = source.padding_idx
        # the generator's module, which owns it: read here, not registered a second time
        object.__setattr__(self, "source", source)

    @property
    def weight(self) -> torch.Tensor:
        """The discriminator's table (V, E): what an export writes as its word embeddings."""
        return self.source.weight.detach() + self.delta

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.weight, self.padding_idx)


def disentangled(shared: nn.Module, config: BertConfig, word_table: str = "word_embeddings") -> nn.Module:
    """The generator's embedding module under `gdes`: the same position and token-type tables and
    LayerNorm as `shared` (the discriminator's, tied as ELECTRA ties them) and the word table
    `shared` had (its attribute `word_table`: BERT's `word_embeddings`, ModernBERT's
    `tok_embeddings`), which the discriminator now reads through a `DisentangledEmbedding`. Built
    on the meta device and filled with `shared`'s modules: no draw, so `tied` and `gdes` start equal."""
    with torch.device("meta"):
        generator = type(shared)(config)
    for name, module in shared.named_children():
        setattr(generator, name, module)
    setattr(shared, word_table, DisentangledEmbedding(getattr(generator, word_table)))
    return generator


def own_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every tensor of `module`'s state once, under the first name it has (a shared or tied tensor
    is saved once: under the discriminator's name where it reads it, else the generator's)."""
    seen: set[int] = set()
    tensors = {}
    for name, tensor in module.state_dict(keep_vars=True).items():
        if id(tensor) not in seen:
            seen.add(id(tensor))
            tensors[name] = tensor
    return tensors


def generator_depth_config(config: BertConfig, generator_size: float) -> BertConfig:
    """A generator as wide as the discriminator (its embeddings read as they are, no projection)
    with `generator_size` of its layers, rounded, at least one: the shape of a family whose
    transformers classes have no embedding projection (RoBERTa's, ModernBERT's)."""
    return dataclasses.replace(config, num_hidden_layers=max(1, round(config.num_hidden_layers * generator_size)))


def family_generator(config: BertConfig, embeddings: nn.Module, *, build: Callable[[BertConfig], nn.Module],
                     encoder_attribute: str) -> nn.Module:
    """A family's own masked-LM model (`build`: RobertaForMaskedLM, ModernBertForMaskedLM) as the
    generator, its encoder (`encoder_attribute`) reading `embeddings`, its decoder tied to them."""
    generator = build(config)
    getattr(generator, encoder_attribute).embeddings = embeddings
    generator.tie_weights()
    return generator


def bert_checkpointed(encoder: nn.Module) -> nn.Module:
    """Where BERT's encoder keeps its gradient-checkpointing switch: its layer stack."""
    return encoder.encoder


@dataclass(frozen=True)
class ReplacedTokenParts:
    """What replaced-token detection asks of a family (its row's `Family.replaced_token`)."""

    encoder: Callable[[BertConfig], nn.Module]  # the discriminator's encoder, no pooler
    generator_config: Callable[[BertConfig, float], BertConfig]  # the generator's shape at `generator_size`
    generator: Callable[[BertConfig, nn.Module], nn.Module]  # the generator, reading the given embeddings
    word_table: str = "word_embeddings"  # the embeddings' word table (ModernBERT's `tok_embeddings`)
    # the module whose `gradient_checkpointing` the encoder reads (BERT's layer stack; ModernBERT's encoder)
    checkpointed: Callable[[nn.Module], nn.Module] = bert_checkpointed
    # An export of a run as the family's transformers classes (`family_pair_export_writer`): the
    # generator's writer (generator, tokenizer folder) -> (its class, writer) and its reader
    # (folder, strict=) -> the generator; None: the family has its own (ELECTRA's), or none
    export_generator: Callable[[nn.Module, Path], tuple[str, hf_format.ExportWriter]] | None = None
    load_generator: Callable[..., nn.Module] | None = None
    # why a discriminator of this shape has no such export (one line), or None
    refuse_export: Callable[[BertConfig], str | None] = lambda config: None

    @property
    def exports(self) -> bool:
        return self.export_generator is not None


# BERT's and ELECTRA's: ELECTRA's generator, narrower, reading the embeddings through its projection.
BERT_PARTS = ReplacedTokenParts(encoder=partial(BertModel, add_pooling_layer=False),
                                generator_config=generator_config, generator=ElectraGenerator)


def replaced_token_parts(config: BertConfig) -> ReplacedTokenParts:
    """The replaced-token detection of `config`'s family, or a one-line refusal (XLNet's)."""
    parts = getattr(FAMILIES.get(config.architecture), "replaced_token", None)
    if parts is None:
        trained = [name for name, row in FAMILIES.items() if getattr(row, "replaced_token", None) is not None]
        raise UserError(f"model.architecture {config.architecture} has no replaced-token detection "
                        f"(data.objective rtd); use one of {', '.join(trained)}")
    return parts


def pair_generator_config(config: BertConfig, generator_size: float) -> BertConfig:
    """The generator's shape of a pair whose discriminator is `config` (`ReplacedTokenParts.generator_config`),
    its loss never chunked (`model.loss_chunk_rows` 0: the objective samples replacements from its
    logits), as the pair builds it and the cost model counts it.

    Raises:
        ValueError: a shape the family's rule cannot make (`generator_config`'s).
    """
    return dataclasses.replace(replaced_token_parts(config).generator_config(config, generator_size),
                               loss_chunk_rows=0)


def last_hidden_state(encoded: torch.Tensor | BertModelOutput) -> torch.Tensor:
    """An encoder's last states (B, T, C): BERT's encoders return them in an output, ModernBERT's as they are."""
    return encoded if isinstance(encoded, torch.Tensor) else encoded.last_hidden_state


class ReplacedTokenDetection(nn.Module):
    """The discriminator (`electra`, `discriminator_predictions`) and its generator (`generator`)
    as one module; `config` is the discriminator's. `embedding_sharing` (`EMBEDDING_SHARING`):
    `tied`, one embedding module; `gdes`, the discriminator's word table disentangled."""

    def __init__(self, config: BertConfig, generator_size: float, embedding_sharing: str = "tied") -> None:
        super().__init__()
        if embedding_sharing not in EMBEDDING_SHARING:
            raise ValueError(f"embedding_sharing {embedding_sharing!r} is not one of {', '.join(EMBEDDING_SHARING)}")
        self.config = config
        self.generator_size = generator_size
        self.embedding_sharing = embedding_sharing
        self.parts = replaced_token_parts(config)
        self.electra = self.parts.encoder(config)  # PAIR_ENCODER
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        self.discriminator_predictions.apply(partial(init_weights, std=config.initializer_range))
        embeddings = self.electra.embeddings
        if embedding_sharing == "gdes":
            embeddings = disentangled(embeddings, config, self.parts.word_table)
        self.generator = self.parts.generator(pair_generator_config(config, generator_size), embeddings)

    def discriminator_state(self) -> dict[str, torch.Tensor]:
        """The discriminator's tensors under a plain discriminator's names (`electra.`,
        `discriminator_predictions.`): under `gdes` its word table is the sum it reads."""
        state = {name: tensor for name, tensor in self.state_dict().items() if not name.startswith("generator.")}
        table = f"electra.embeddings.{self.parts.word_table}"
        if f"{table}.delta" in state:
            del state[f"{table}.delta"]
            state[f"{table}.weight"] = getattr(self.electra.embeddings, self.parts.word_table).weight.detach()
        return state

    def discriminate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                     token_type_ids: torch.Tensor) -> torch.Tensor:
        """One logit a token (B, T): above 0, the discriminator takes it for replaced."""
        encoded = self.electra(input_ids, attention_mask, token_type_ids)
        return self.discriminator_predictions(last_hidden_state(encoded))

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.parts.checkpointed(self.electra).gradient_checkpointing = enabled
        self.generator.set_gradient_checkpointing(enabled)

    def num_parameters(self) -> int:
        """Trainable parameters of both networks, the shared ones counted once."""
        return sum(p.numel() for p in self.parameters())

    def load_weights(self, state_dict: dict[str, torch.Tensor], folder: Path, *,
                     strict: bool = False) -> tuple[list[str], list[str]]:
        """A released discriminator's tensors (`electra.`, `discriminator_predictions.`: bertpre's
        names) into this pair (`model.init_from`), and the generator's (`generator.…`) where
        `state_dict` has them (`electra_generator.generator_weights`, which the run read from its
        released generator); else the generator keeps its fresh draw, and so does a head a bare
        encoder's folder lacks.

        Returns:
            (missing names, unexpected names).
        """
        if not any(name.startswith("electra.") for name in state_dict):
            raise UserError(f"model.init_from {folder} holds no ELECTRA discriminator (no electra.* weights); "
                            "data.objective rtd starts from an ELECTRA folder (ElectraForPreTraining or ElectraModel)")
        if self.embedding_sharing == "gdes":  # the released table becomes the shared one; delta starts at 0
            state_dict = {name.replace("electra.embeddings.word_embeddings.weight",
                                       "generator.electra.embeddings.word_embeddings.weight"): tensor
                          for name, tensor in state_dict.items()}
        expected = {name: tensor.shape for name, tensor in own_tensors(self).items()
                    if name != "electra.embeddings.word_embeddings.delta"}
        missing, unexpected = hf_format.match_state_dict(
            expected, state_dict, folder, layout="ELECTRA",
            optional=("discriminator_predictions.", "generator."), strict=strict)
        with torch.no_grad():
            self.load_state_dict({k: v for k, v in state_dict.items() if k in expected}, strict=False)
        self.generator.tie_weights()
        return missing, unexpected

    def save_pretrained(self, folder: str | Path) -> None:
        """config.json (the discriminator's, the generator's fraction and the embedding sharing) and
        model.safetensors (every tensor once: `own_tensors`)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: tensor.detach().contiguous().cpu() for name, tensor in own_tensors(self).items()}
        hf_format.write_json(folder / hf_format.CONFIG_NAME, {
            **self.config.to_hf_dict(),
            PAIR_KEY: {"generator_size": self.generator_size, "embedding_sharing": self.embedding_sharing}})
        save_file(tensors, folder / hf_format.SAFETENSORS_NAME, metadata={"format": "pt"})

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, strict: bool = True) -> ReplacedTokenDetection:
        """A pair saved by `save_pretrained` (a checkpoint of an rtd run)."""
        folder = hf_format.check_folder(folder)
        generator_size = pair_generator_size(folder)
        if generator_size is None:
            raise UserError(f"{folder} holds no generator and discriminator (its config.json has no {PAIR_KEY})")
        model = cls(hf_format.read_config(folder), generator_size, pair_embedding_sharing(folder))
        tensors = load_file(folder / hf_format.SAFETENSORS_NAME)
        expected = {name: tensor.shape for name, tensor in own_tensors(model).items()}
        wrong = sorted(set(expected) ^ set(tensors)) or [
            name for name, shape in expected.items() if tensors[name].shape != shape]
        if wrong:
            raise UserError(f"{folder}: the weights do not fit the generator and discriminator its config.json "
                            f"describes ({', '.join(wrong[:3])}); use another checkpoint")
        with torch.no_grad():
            model.load_state_dict(tensors, strict=False)
        return model


def pair_record(folder: Path) -> dict:
    """What a pair's config.json records of it ({} for any other model folder)."""
    path = folder / hf_format.CONFIG_NAME
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    pair = values.get(PAIR_KEY) if isinstance(values, dict) else None
    return pair if isinstance(pair, dict) else {}


def pair_generator_size(folder: Path) -> float | None:
    """The generator's fraction a pair's config.json records, or None for any other model folder."""
    return pair_record(folder).get("generator_size")


def pair_embedding_sharing(folder: Path) -> str:
    """How a pair's networks share their embeddings (`tied` where its config.json does not say:
    the checkpoints written before `gdes`)."""
    return pair_record(folder).get("embedding_sharing", "tied")


def refuse_pair(folder: str | Path, family: str) -> None:
    """Refuse, in one line, a generator-discriminator checkpoint of a family other than ELECTRA
    where a family's model is read."""
    if pair_generator_size(Path(folder)) is not None:
        raise UserError(f"{folder} is a checkpoint of a replaced-token detection run of {family}; {EXPORT_LATER}")

