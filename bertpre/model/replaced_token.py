"""ELECTRA's generator and discriminator as one module (`data.objective: rtd`): a small masked-LM
generator and a discriminator of the same family, sharing one embedding module, so that the
optimizer, DDP, compile and checkpoints cover both. Names are Hugging Face's ELECTRA's
(`electra`, `discriminator_predictions`, `generator_predictions`, `generator_lm_head`).

BERT's encoder, of the `bert` or `electra` row (`model.electra` writes the latter's export: the
discriminator as `ElectraForPreTraining`, the generator as `ElectraForMaskedLM` in `generator/`).
"""
from __future__ import annotations

import json
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
    activation,
    init_weights,
    masked_lm_predictions,
    read_positions,
)
from bertpre.model.config import BertConfig
from bertpre.model.electra_generator import EMBEDDING_SHARING, generator_config, released_generator
from bertpre.model.layer_norm import LayerNorm

# config.json's key that marks a generator-discriminator pair and gives the generator's fraction
# and how the two share their embeddings.
PAIR_KEY = "bertpre_replaced_token_detection"
EXPORT_LATER = ("its export, evaluation and fill-mask are built for model.architecture electra alone; train "
                "with model.architecture: electra")


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

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, token_type_ids: torch.Tensor,
                masked_lm_positions: torch.Tensor, masked_lm_ids: torch.Tensor, label_smoothing: float = 0.0
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """The logits (B, P, V) of the P slots of `masked_lm_positions` and their summed loss; the
        last layer computes those rows alone in training (`model.last_layer_rows`)."""
        rows = read_positions(self.config, masked_lm_positions, cls_first=False, training=self.training)
        encoded = self.electra(input_ids, attention_mask, token_type_ids, last_rows=rows)
        # Unchunked: the objective samples replacements from these logits.
        logits, _, loss_sum, _ = masked_lm_predictions(
            self.predict, encoded.last_hidden_state, label_smoothing=label_smoothing,
            masked_lm_positions=masked_lm_positions, masked_lm_ids=masked_lm_ids,
            predicted_states=None if rows is None else encoded.last_hidden_state)
        return logits, loss_sum


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


def disentangled(shared: nn.Module, config: BertConfig) -> nn.Module:
    """The generator's embedding module under `gdes`: the same position and token-type tables and
    LayerNorm as `shared` (the discriminator's, tied as ELECTRA ties them) and the word table
    `shared` had, which the discriminator now reads through a `DisentangledEmbedding`. Built on
    the meta device and filled with `shared`'s modules: no draw, so `tied` and `gdes` start equal."""
    with torch.device("meta"):
        generator = type(shared)(config)
    for name, module in shared.named_children():
        setattr(generator, name, module)
    shared.word_embeddings = DisentangledEmbedding(generator.word_embeddings)
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
        self.electra = BertModel(config, add_pooling_layer=False)
        self.discriminator_predictions = ElectraDiscriminatorPredictions(config)
        self.discriminator_predictions.apply(partial(init_weights, std=config.initializer_range))
        embeddings = self.electra.embeddings
        if embedding_sharing == "gdes":
            embeddings = disentangled(embeddings, config)
        self.generator = ElectraGenerator(generator_config(config, generator_size), embeddings)

    def discriminator_state(self) -> dict[str, torch.Tensor]:
        """The discriminator's tensors under a plain discriminator's names (`electra.`,
        `discriminator_predictions.`): under `gdes` its word table is the sum it reads."""
        state = {name: tensor for name, tensor in self.state_dict().items() if not name.startswith("generator.")}
        delta = "electra.embeddings.word_embeddings.delta"
        if delta in state:
            del state[delta]
            state["electra.embeddings.word_embeddings.weight"] = self.electra.embeddings.word_embeddings.weight.detach()
        return state

    def discriminate(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
                     token_type_ids: torch.Tensor) -> torch.Tensor:
        """One logit a token (B, T): above 0, the discriminator takes it for replaced."""
        encoded = self.electra(input_ids, attention_mask, token_type_ids)
        return self.discriminator_predictions(encoded.last_hidden_state)

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        self.electra.encoder.gradient_checkpointing = enabled
        self.generator.electra.encoder.gradient_checkpointing = enabled

    def num_parameters(self) -> int:
        """Trainable parameters of both networks, the shared ones counted once."""
        return sum(p.numel() for p in self.parameters())

    def load_weights(self, state_dict: dict[str, torch.Tensor], folder: Path, *,
                     strict: bool = False) -> tuple[list[str], list[str]]:
        """A released discriminator's tensors (`electra.`, `discriminator_predictions.`: bertpre's
        names) into this pair (`model.init_from`), with the generator in its `generator/` where it
        has one (an ELECTRA export's); else the generator keeps its fresh draw, and so does a head a
        bare encoder's folder lacks.

        Returns:
            (missing names, unexpected names).
        """
        if not any(name.startswith("electra.") for name in state_dict):
            raise UserError(f"model.init_from {folder} holds no ELECTRA discriminator (no electra.* weights); "
                            "data.objective rtd starts from an ELECTRA folder (ElectraForPreTraining or ElectraModel)")
        state_dict = {**state_dict, **released_generator(folder, self.config, self.generator_size)}
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
