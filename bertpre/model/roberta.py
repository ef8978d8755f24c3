"""RoBERTa (and XLM-RoBERTa, the same network) on BERT's layers, with Hugging Face's names.

What differs from BERT, and nothing else: positions start after the padding's row and count the
real tokens alone (a left-padded row reads the same positions as the unpadded one); one token
type; no pooler and no pair head (RoBERTa was pretrained on the masked LM alone); the MLM head's
own layout (`lm_head.dense`, `lm_head.layer_norm`, `lm_head.decoder` tied to the word
embeddings, `lm_head.bias`), with exact GELU whatever `hidden_act` says (the task heads of
`RobertaFor*` are `roberta_heads`); the pair layout `<s> A </s></s> B </s>` (`roberta_layout`). The embeddings' LayerNorm eps (1e-5) and the one token type are RoBERTa's
config values (`families.ROBERTA_MODEL_DEFAULTS`), not code. The layers are BERT's own
(`bertpre.model.bert`).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Tokenizer, processors
from torch import nn

import bertpre
from bertpre.errors import UserError
from bertpre.model import common, hf_format
from bertpre.model.bert import BertEmbeddings, BertModel, init_weights
from bertpre.model.chunked_loss import VocabularyHead
from bertpre.model.common import TOKENIZER_FILES, ForwardShape, MaskedLMOnly, bert_mask_logits
from bertpre.model.config import BertConfig
from bertpre.model.layer_norm import LayerNorm
from bertpre.model.roberta_config import ROBERTA_CLASS_PREFIXES
from bertpre.model.unpad import Unpadded
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.roles import attach_roles, token_roles

# Tensors Hugging Face's RobertaForMaskedLM stores under a second name (tied), and buffers.
TIED_KEYS = ("lm_head.decoder.weight", "lm_head.decoder.bias")
BUFFER_SUFFIXES = ("position_ids", "token_type_ids")


# --- the network ---------------------------------------------------------------------------


class RobertaEmbeddings(BertEmbeddings):
    """BERT's embeddings with RoBERTa's positions: the i-th real token of a row reads row
    `pad_token_id + i` of the table, padding reads the padding's row (zero, never trained)."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config)
        self.padding_idx = config.pad_token_id
        self.position_embeddings.padding_idx = config.pad_token_id  # zeroed at init, no gradient

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """(B, T): the running count of real tokens, offset by the padding's id; the padding's id
        at padding (what fairseq's and transformers' `create_position_ids_from_input_ids` give)."""
        limit = self.position_embeddings.num_embeddings - self.padding_idx - 1
        if input_ids.shape[1] > limit:
            raise ValueError(f"sequence length {input_ids.shape[1]} exceeds the {limit} tokens RoBERTa's "
                             f"{self.position_embeddings.num_embeddings} positions read; truncate the input")
        real = (input_ids != self.padding_idx).int()  # (B, T)
        return (torch.cumsum(real, dim=1) * real).long() + self.padding_idx  # (B, T)


class RobertaModel(BertModel):
    """The encoder as `RobertaFor*` hold it (`add_pooling_layer=False`): RoBERTa's embeddings,
    BERT's layers, no pooler. `last_rows` and `unpadded` work as in `BertModel`."""

    embeddings_class = RobertaEmbeddings

    def __init__(self, config: BertConfig) -> None:
        super().__init__(config, add_pooling_layer=False)


class RobertaLMHead(nn.Module):
    """dense → GELU → layer_norm → decoder (the word embeddings) + bias."""

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.layer_norm = LayerNorm(config.hidden_size, eps=config.layer_norm_eps,
                                    low_precision=config.low_precision_layernorm)
        self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        self.decoder.bias = self.bias  # one tensor under two names, as in Hugging Face

    def transform(self, features: torch.Tensor) -> torch.Tensor:
        """dense → GELU → layer_norm: what the decoder reads (..., C)."""
        # RoBERTa's head applies the exact GELU whatever hidden_act says (fairseq's, kept by transformers).
        return self.layer_norm(F.gelu(self.dense(features)))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(features))  # (..., V)


class RobertaForMaskedLM(MaskedLMOnly):
    """RoBERTa with its MLM head; parameter names are Hugging Face's `RobertaForMaskedLM` (and
    `XLMRobertaForMaskedLM`'s, the same), so a checkpoint is an export's model as it is."""

    tied_keys = TIED_KEYS
    optional_parts = ("lm_head.",)

    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        self.config = config
        self.roberta = RobertaModel(config)
        self.lm_head = RobertaLMHead(config)
        self.lm_head.apply(partial(init_weights, std=config.initializer_range))
        nn.init.zeros_(self.lm_head.bias)
        self.tie_weights()

    def tie_weights(self) -> None:
        """Make the MLM decoder use the word embedding matrix (one tensor, counted once)."""
        self.lm_head.decoder.weight = self.roberta.embeddings.word_embeddings.weight
        self.lm_head.decoder.bias = self.lm_head.bias

    def set_gradient_checkpointing(self, enabled: bool = True) -> None:
        """Recompute each layer's activations in the backward pass (training mode only)."""
        self.roberta.encoder.gradient_checkpointing = enabled

    def layout(self) -> str:
        return display_name(self.config)

    def encode(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
               token_type_ids: torch.Tensor | None, rows: torch.Tensor | None = None,
               unpadded: Unpadded | None = None) -> torch.Tensor:
        return self.roberta(input_ids, attention_mask, token_type_ids, last_rows=rows,
                            unpadded=unpadded).last_hidden_state  # (B, T|R, C)

    def vocabulary_head(self) -> VocabularyHead:
        """`lm_head`'s dense, GELU and layer_norm, then its tied decoder."""
        return VocabularyHead(self.lm_head.transform, self.lm_head.decoder)

    def save_pretrained(self, folder: str | Path) -> None:
        """Write `config.json` and `model.safetensors` as Hugging Face's RobertaForMaskedLM has them."""
        write_roberta_folder(folder, self.config, self.state_dict())

    @staticmethod
    def read_folder(folder: Path) -> dict[str, torch.Tensor]:
        """A RobertaForMaskedLM, RobertaModel or XLMRobertaForMaskedLM folder's tensors."""
        return read_roberta_weights(folder)


def build_roberta(config: BertConfig, tokenizer: Tokenizer | None = None) -> RobertaForMaskedLM:
    return RobertaForMaskedLM(config)


def display_name(config: BertConfig) -> str:
    return "XLM-RoBERTa" if config.architecture == "xlm-roberta" else "RoBERTa"


# --- Hugging Face folders ------------------------------------------------------------------


def normalize_roberta_keys(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A RoBERTa folder's tensors under the names `RobertaForMaskedLM` above has: a bare
    RobertaModel's gain the `roberta.` prefix, buffers and tied copies go, and an old file's
    `lm_head.decoder.bias` stands for `lm_head.bias`."""
    bare = not any(key.startswith("roberta.") for key in state_dict)
    normalized = {("roberta." + key if bare else key): tensor for key, tensor in state_dict.items()
                  if not key.endswith(BUFFER_SUFFIXES)}
    if "lm_head.bias" not in normalized and "lm_head.decoder.bias" in normalized:
        normalized["lm_head.bias"] = normalized["lm_head.decoder.bias"]
    for key in TIED_KEYS:
        normalized.pop(key, None)
    return normalized


def read_roberta_weights(folder: Path) -> dict[str, torch.Tensor]:
    """A RoBERTa or XLM-R folder's tensors (safetensors, sharded, or pytorch_model.bin read with
    weights_only) under bertpre's names."""
    return normalize_roberta_keys(hf_format.read_weights(folder))


def write_roberta_folder(folder: str | Path, config: BertConfig, state_dict: dict[str, torch.Tensor],
                         **config_values: int) -> None:
    """config.json (with `config_values` added: the tokenizer's ids) and model.safetensors, tied
    copies left out as transformers leaves them."""
    hf_format.write_folder(folder, config, {name: tensor for name, tensor in state_dict.items()
                                            if name not in TIED_KEYS})
    if config_values:
        path = Path(folder) / hf_format.CONFIG_NAME
        hf_format.write_json(path, {**json.loads(path.read_text(encoding="utf-8")), **config_values})


def special_token_ids(tokenizer_folder: Path) -> dict[str, int]:
    """config.json's bos and eos ids: the tokenizer's start and separator by role (RoBERTa's <s>
    and </s>, a WordPiece vocabulary's [CLS] and [SEP]); none where it lacks the roles."""
    try:
        roles = token_roles(load_tokenizer(tokenizer_folder))
    except UserError:
        return {}
    return {"bos_token_id": roles.cls_token_id, "eos_token_id": roles.sep_token_id}


def roberta_layout(tokenizer: Tokenizer) -> Tokenizer:
    """`tokenizer` with RoBERTa's template: `<s> A </s>`, and `<s> A </s></s> B </s>` for a pair,
    every token of type 0 (RoBERTa has one token type), over the tokenizer's own start and
    separator (by role). A tokenizer laid out so already (RoBERTa's own `RobertaProcessing`) is
    returned as it is; another (a WordPiece vocabulary's) is copied with the template.

    Raises:
        UserError: the tokenizer lacks a role (the message names it).
    """
    if isinstance(tokenizer.post_processor, processors.RobertaProcessing):
        return tokenizer
    roles = token_roles(tokenizer)
    start, end = roles.cls_token, roles.sep_token
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.post_processor = processors.TemplateProcessing(
        single=f"{start}:0 $A:0 {end}:0", pair=f"{start}:0 $A:0 {end}:0 {end}:0 $B:0 {end}:0",
        special_tokens=[(start, roles.cls_token_id), (end, roles.sep_token_id)])
    return attach_roles(copy, dataclasses.replace(roles, pair_layout="roberta"))


def copy_tokenizer_files(tokenizer_folder: Path, folder: Path) -> list[str]:
    """The tokenizer folder's files (whichever of `TOKENIZER_FILES` it holds), copied as they are;
    but a tokenizer.json not in RoBERTa's layout (a WordPiece vocabulary's) is written in it
    (`roberta_layout`), and its tokenizer_config.json names transformers' generic fast tokenizer,
    which reads that layout from tokenizer.json (`BertTokenizer` would lay pairs out as BERT's,
    with a second token type RoBERTa has not)."""
    copied = common.copy_tokenizer_files(tokenizer_folder, folder)
    path, config_path = folder / TOKENIZER_FILES[0], folder / TOKENIZER_FILES[1]
    if path.is_file():
        tokenizer = Tokenizer.from_file(str(path))
        laid_out = roberta_layout(tokenizer)
        if laid_out is not tokenizer:
            laid_out.save(str(path))
            try:
                config = json.loads(config_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                config = None  # none, or damaged: `limit_model_max_length` says so
            if isinstance(config, dict):
                hf_format.write_json(config_path, {**config, "tokenizer_class": "PreTrainedTokenizerFast"})
    return copied


def roberta_export_writer(model: RobertaForMaskedLM, tokenizer_folder: Path) -> tuple[str, hf_format.ExportWriter]:
    """Hugging Face's native `RobertaForMaskedLM` (or `XLMRobertaForMaskedLM`) folder and the run's
    tokenizer files as they are; config.json names the tokenizer's bos and eos ids, and the
    tokenizer's `model_max_length` is what the position table reads (514 rows: 512 tokens)."""
    config = model.config
    ids = special_token_ids(tokenizer_folder)

    def write(staging: Path) -> list[str]:
        write_roberta_folder(staging, config, model.state_dict(), **ids)
        copied = copy_tokenizer_files(tokenizer_folder, staging)
        hf_format.limit_model_max_length(staging, config.max_tokens)
        return copied

    return f"{ROBERTA_CLASS_PREFIXES[config.architecture]}ForMaskedLM", write


def write_roberta_task_folder(folder: Path, state: dict[str, torch.Tensor], config: BertConfig,
                              tokenizer_folder: Path, *, pooler: bool) -> dict:
    """A fine-tuned RoBERTa's weights and its tokenizer files; returns config.json's content
    (`pooler` is BERT's: RoBERTa's task models have none)."""
    ids = special_token_ids(tokenizer_folder)
    write_roberta_folder(folder, config, state, **ids)
    copy_tokenizer_files(tokenizer_folder, folder)
    hf_format.limit_model_max_length(folder, config.max_tokens)
    return {**config.to_hf_dict(), "bertpre_version": bertpre.__version__, **ids}


# --- fill-mask -----------------------------------------------------------------------------


@torch.no_grad()
def roberta_mask_logits(model: RobertaForMaskedLM, tokenizer: Tokenizer, text: str,
                        fits: Callable[[ForwardShape], None] = lambda shape: None) -> torch.Tensor:
    """The MLM head's logits (M, V) at each mask of `text` (the tokenizer's own, by role: `<mask>`,
    or a WordPiece vocabulary's [MASK]), read as one segment <s> … </s> as the tokenizer lays it out."""
    return bert_mask_logits(model, tokenizer, text, fits, mask_token=token_roles(tokenizer).mask_token)
