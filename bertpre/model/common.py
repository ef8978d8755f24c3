"""What every model family shares: the activations by Hugging Face name, the summed
cross-entropy every loss is built from, the tokenizer files an export copies, a forward's shape
(what a reading's memory is checked for), the rows a last layer computes alone, and the masked-LM-only pretraining model (its outputs, its forward, its
loading, fill-mask's logits). Each family's module imports these from here, not from another
family's module."""
from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import NamedTuple

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer
from torch import nn

from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX
from bertpre.model import hf_format
from bertpre.model.chunked_loss import VocabularyHead, chunk_rows, chunked_cross_entropy
from bertpre.model.config import HIDDEN_ACTS, BertConfig
from bertpre.model.unpad import Unpadded
from bertpre.tokenizer.roles import token_roles

# The files a Hugging Face tokenizer folder may hold, copied into an export as they are.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.json", "merges.txt", "vocab.txt", "sentencepiece.bpe.model", "spiece.model")


@dataclass(frozen=True)
class ForwardShape:
    """The largest forward pass a reading runs without gradients: `batch_size` rows of
    `seq_length` tokens, each with `memory_length` remembered states (XLNet) and
    `predicted_rows` positions that reach the vocabulary. `permutation`: XLNet's training
    inputs (perm_mask, target_mapping, token types), as `evaluate` passes them."""

    batch_size: int
    seq_length: int
    predicted_rows: int
    memory_length: int = 0
    permutation: bool = False


def activation(name: str) -> Callable[[torch.Tensor], torch.Tensor]:
    """The activation function for a Hugging Face `hidden_act` name."""
    if name == "gelu":
        return F.gelu  # BERT's exact erf form
    if name in ("gelu_new", "gelu_pytorch_tanh"):
        return partial(F.gelu, approximate="tanh")
    if name == "relu":
        return F.relu
    if name in ("silu", "swish"):
        return F.silu
    raise UserError(f"model.hidden_act {name!r} is not supported; use one of " + ", ".join(HIDDEN_ACTS))


def summed_cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Cross-entropy summed over the rows whose target is not -100 (0, still in the graph,
    when there are none), in float32 whatever the autocast dtype."""
    return F.cross_entropy(logits.float().flatten(0, -2), targets.flatten(), ignore_index=IGNORE_INDEX,
                           reduction="sum", label_smoothing=label_smoothing)


def copy_tokenizer_files(tokenizer_folder: Path, folder: Path) -> list[str]:
    """The tokenizer folder's files (whichever of `TOKENIZER_FILES` it holds), copied as they are.

    Returns:
        The names copied.
    """
    copied = []
    for name in TOKENIZER_FILES:
        if (tokenizer_folder / name).is_file():
            shutil.copyfile(tokenizer_folder / name, folder / name)
            copied.append(name)
    return copied


# The positions a layer computes its outputs for: the first N of each sequence (an int), or a
# (B, R) index of each sequence's positions (repeats allowed: a padding slot names a harmless row).
Rows = int | torch.Tensor


def read_rows(states: torch.Tensor, rows: Rows) -> torch.Tensor:
    """(B, T, ...) → (B, R, ...): the first `rows` positions, or those the (B, R) index names;
    of unpadded tokens (N, C), the (B, R) tokens a flat index names (B, R, C)."""
    if states.dim() == 2:
        return states.index_select(0, rows.flatten()).view(*rows.shape, states.shape[-1])
    if isinstance(rows, int):
        return states[:, :rows]
    index = rows.view(*rows.shape, *(1,) * (states.dim() - 2)).expand(*rows.shape, *states.shape[2:])
    return states.gather(1, index)


def query_angles(angles: torch.Tensor, rows: Rows | None) -> torch.Tensor:
    """Rotary cos or sin (T, hs) of the querying positions: (T, hs), (rows, hs), or (B, 1, R, hs)
    for an index (broadcast over the heads)."""
    if rows is None or isinstance(rows, int):
        return angles if rows is None else angles[:rows]
    return angles[rows][:, None]



@dataclass
class PreTrainingOutput:
    """Losses and logits of `BertForPreTraining` (and of a family's MLM-only model, whose
    `seq_relationship_logits` and pair losses are None).

    With `masked_lm_positions`, `prediction_logits` is (B, P, V), one row per slot; with
    `labels`, (N, V) for the N positions where labels != -100, in row-major order (aligned with
    `labels[labels != -100]`); with neither, (B, T, V). Losses are means over the predictions
    and pairs; `mlm_loss_sum` and `pair_loss_sum` are the same sums before the division.
    A training forward whose loss ran in chunks (`model.loss_chunk_rows`) has no
    `prediction_logits` (None); `mlm_correct` then counts the predictions whose argmax is their
    label (else None: the caller takes it from the logits).
    """

    loss: torch.Tensor | None
    mlm_loss: torch.Tensor | None
    pair_loss: torch.Tensor | None
    prediction_logits: torch.Tensor | None
    seq_relationship_logits: torch.Tensor | None
    mlm_loss_sum: torch.Tensor | None = None
    pair_loss_sum: torch.Tensor | None = None
    mlm_correct: torch.Tensor | None = None



def read_positions(config: BertConfig, masked_lm_positions: torch.Tensor | None, *,
                   cls_first: bool, training: bool) -> torch.Tensor | None:
    """The (B, R) positions a training step reads of the last hidden states, for the last layer
    to compute alone: [CLS] (position 0, the pooler's; with `cls_first`) then the P slots of
    `masked_lm_positions` (a padding slot names position 0, computed and never read). None:
    every position (not `training`, no `masked_lm_positions`, or `model.last_layer_rows` off).
    Evaluation and inference keep the whole layer: their cost is not the run's, and the memory
    figures the pre-checks give are the whole layer's."""
    if not training or masked_lm_positions is None or not config.last_layer_rows:
        return None
    if not cls_first:
        return masked_lm_positions
    return torch.cat([masked_lm_positions.new_zeros(masked_lm_positions.shape[0], 1), masked_lm_positions], dim=1)


class MaskedLMPredictions(NamedTuple):
    """What `masked_lm_predictions` gives: the logits (None where the loss ran in chunks), the mean
    and summed MLM loss (None without labels) and, from chunks alone, the count of hits."""

    logits: torch.Tensor | None
    loss: torch.Tensor | None
    loss_sum: torch.Tensor | None
    correct: torch.Tensor | None = None


def masked_lm_predictions(
    head: Callable[[torch.Tensor], torch.Tensor],
    hidden_states: torch.Tensor,
    *,
    labels: torch.Tensor | None = None,
    label_smoothing: float = 0.0,
    masked_lm_positions: torch.Tensor | None = None,
    masked_lm_ids: torch.Tensor | None = None,
    predicted_states: torch.Tensor | None = None,
    loss_chunk_rows: int | str = 0,
) -> MaskedLMPredictions:
    """The MLM head `head` on the encoder's `hidden_states` (B, T, C), and its loss, in the layouts
    `PreTrainingOutput` describes (shared by every family with a masked LM head).
    `predicted_states` (B, P, C): the states of `masked_lm_positions` already computed alone (the
    last layer on the rows read), read in place of `hidden_states`. `loss_chunk_rows`
    (`model.loss_chunk_rows` in training, else 0): with a loss to compute and a `VocabularyHead`,
    the decoder and the loss run a chunk of rows at a time (`chunked_loss`) where `chunk_rows`
    says so, and no logits are kept.
    """
    if masked_lm_positions is not None:
        if predicted_states is None:
            index = masked_lm_positions[..., None].expand(-1, -1, hidden_states.shape[-1])
            predicted_states = hidden_states.gather(1, index)  # (B, P, C)
        targets = masked_lm_ids
    elif labels is not None:
        # Sparse head: only the ~15% predicted positions reach the vocabulary projection.
        predicted = labels != IGNORE_INDEX
        predicted_states, targets = hidden_states[predicted], labels[predicted]  # (N, C), (N,)
    else:
        return MaskedLMPredictions(head(hidden_states), None, None)  # (B, T, V)
    if targets is None:
        return MaskedLMPredictions(head(predicted_states), None, None)  # (B, P, V)
    count = (targets != IGNORE_INDEX).sum().clamp(min=1)
    if isinstance(head, VocabularyHead):
        rows = chunk_rows(loss_chunk_rows, targets.numel(), head.decoder.out_features)
        if rows:
            loss_sum, correct = chunked_cross_entropy(head.transform(predicted_states), head.decoder, targets,
                                                      label_smoothing, rows)
            return MaskedLMPredictions(None, loss_sum / count, loss_sum, correct)
    prediction_logits = head(predicted_states)  # (B, P, V) or (N, V)
    loss_sum = summed_cross_entropy(prediction_logits, targets, label_smoothing)
    return MaskedLMPredictions(prediction_logits, loss_sum / count, loss_sum)


class MaskedLMOnly(nn.Module):
    """A pretraining model with a masked-LM head alone (no pair head), taking
    `BertForPreTraining.forward`'s inputs and giving its outputs: RoBERTa's and ModernBERT's.

    A subclass gives `encode` (the encoder's states), `vocabulary_head` (its MLM head, cut before
    the decoder), `tie_weights`, `save_pretrained`, `read_folder` (a folder's tensors under its names), `layout`
    (its name in messages), `tied_keys` (tensors a folder holds under a second name) and
    `optional_parts` (the head's, which a bare encoder's folder lacks).
    """

    config: BertConfig
    tied_keys: tuple[str, ...] = ()
    optional_parts: tuple[str, ...] = ()

    def layout(self) -> str:
        raise NotImplementedError

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
               token_type_ids: torch.Tensor | None, rows: torch.Tensor | None = None,
               unpadded: Unpadded | None = None) -> torch.Tensor:
        """The encoder's last states (B, T, C); with `rows` (B, R), those positions' alone (B, R, C);
        with `unpadded` (`model.unpad`, a family with a position table), `rows` are flat token indices."""
        raise NotImplementedError

    def vocabulary_head(self) -> VocabularyHead:
        raise NotImplementedError

    def predict(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """The MLM logits (..., V) of encoder states (..., C)."""
        return self.vocabulary_head()(hidden_states)

    def tie_weights(self) -> None:
        raise NotImplementedError

    @staticmethod
    def read_folder(folder: Path) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        label_smoothing: float = 0.0,
        masked_lm_positions: torch.Tensor | None = None,
        masked_lm_ids: torch.Tensor | None = None,
        unpadded: Unpadded | None = None,
    ) -> PreTrainingOutput:
        """`BertForPreTraining.forward`'s inputs and outputs (the pair's are None: there is no pair head)."""
        if next_sentence_label is not None:
            raise ValueError(f"{self.layout()} has no pair head: pretrain it with data.pair_task none")
        if unpadded is not None:  # `model.unpad`: the slots' tokens, read from the real tokens alone
            rows = unpadded.predicted_index  # (B, P) flat
            hidden_states = self.encode(input_ids, attention_mask, token_type_ids, rows, unpadded=unpadded)
        else:
            # No pooler: the last layer computes the predicted positions alone (`model.last_layer_rows`).
            rows = read_positions(self.config, masked_lm_positions, cls_first=False, training=self.training)  # (B, P) or None
            hidden_states = self.encode(input_ids, attention_mask, token_type_ids, rows)  # (B, T or P, C)
        predictions = masked_lm_predictions(
            self.vocabulary_head(), hidden_states, labels=labels, label_smoothing=label_smoothing,
            masked_lm_positions=masked_lm_positions, masked_lm_ids=masked_lm_ids,
            predicted_states=None if rows is None else hidden_states,
            loss_chunk_rows=self.config.loss_chunk_rows if self.training else 0)
        return PreTrainingOutput(loss=predictions.loss, mlm_loss=predictions.loss, pair_loss=None,
                                 prediction_logits=predictions.logits, seq_relationship_logits=None,
                                 mlm_loss_sum=predictions.loss_sum, mlm_correct=predictions.correct)

    def num_parameters(self) -> int:
        """Trainable parameters, tied ones counted once."""
        return sum(p.numel() for p in self.parameters())

    def load_weights(self, state_dict: dict[str, torch.Tensor], folder: Path, *,
                     strict: bool = False) -> tuple[list[str], list[str]]:
        """Copy a folder's tensors (`read_folder`'s names) into this model, keeping the fresh
        initialization of the MLM head where a bare encoder's folder lacks it (unless `strict`).

        Returns:
            (missing names, unexpected names).
        """
        expected = {name: tensor.shape for name, tensor in self.state_dict().items() if name not in self.tied_keys}
        missing, unexpected = hf_format.match_state_dict(
            expected, state_dict, folder, layout=self.layout(), optional=self.optional_parts, strict=strict)
        with torch.no_grad():
            self.load_state_dict({k: v for k, v in state_dict.items() if k in expected}, strict=False)
        self.tie_weights()
        return missing, unexpected

    @classmethod
    def from_pretrained(cls, folder: str | Path, *, strict: bool = False):
        """Load a Hugging Face folder of this family (its MLM model or its bare encoder); a head the
        folder lacks is initialized and named in a warning, or refused with `strict`. Never
        downloads anything."""
        path = hf_format.check_folder(folder)
        model = cls(hf_format.read_config(path))
        missing, unexpected = model.load_weights(cls.read_folder(path), path, strict=strict)
        hf_format.warn_loading(folder, missing, unexpected)
        return model



@torch.no_grad()
def bert_mask_logits(model: nn.Module, tokenizer: Tokenizer, text: str,
                     fits: Callable[[ForwardShape], None] = lambda shape: None,
                     mask_token: str | None = None) -> torch.Tensor:
    """The MLM head's logits (M, V) at each `mask_token` (default: the tokenizer's mask by role,
    [MASK] or a reused vocabulary's `<mask>`) of `text`, read as one segment [CLS] ... [SEP] (the
    tokenizer's own start and end); the head runs at the masks alone. A
    text past an absolute position table is refused; relative positions read any length, so
    `fits` is told the forward before it runs (it may refuse it)."""
    mask_token = token_roles(tokenizer).mask_token if mask_token is None else mask_token
    ids = tokenizer.encode(text).ids  # [CLS] ... [SEP]
    limit = model.config.max_tokens
    if len(ids) > limit and not model.config.relative_positions:
        raise UserError(f"the text is {len(ids):,} tokens long; this model reads at most {limit:,}; shorten the text")
    input_ids = torch.tensor([ids])  # (1, T)
    positions = (input_ids[0] == tokenizer.token_to_id(mask_token)).nonzero().flatten()
    if positions.numel() == 0:
        raise UserError(f"the tokenizer did not keep {mask_token} as one token in {text!r}")
    fits(ForwardShape(batch_size=1, seq_length=len(ids), predicted_rows=positions.numel()))
    device = next(model.parameters()).device
    input_ids = input_ids.to(device)
    return model(input_ids, attention_mask=torch.ones_like(input_ids), token_type_ids=torch.zeros_like(input_ids),
                 masked_lm_positions=positions[None].to(device)).prediction_logits[0]  # (M, V)
