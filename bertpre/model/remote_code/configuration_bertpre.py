"""`BertpreConfig`: the configuration of a bertpre export, for `transformers` (remote code).

`bertpre export` copies this file, unchanged, into the folders of models whose positions are
relative (`rope`, `transformer_xl`), which transformers' own BERT no longer has. It needs only
`transformers`. The fields and defaults are those of bertpre's `BertConfig` (Hugging Face's
BERT names, plus `embedding_size` and `share_layers` for ALBERT's factorized embeddings and
shared layers, and `position_embedding_type` with `rope_theta`).
"""
from __future__ import annotations

from transformers import PretrainedConfig


class BertpreConfig(PretrainedConfig):
    """BERT's configuration with bertpre's position and ALBERT options.

    `position_embedding_type` is "absolute" (BERT's table of `max_position_embeddings`),
    "rope" (rotary, wavelengths from `rope_theta`) or "transformer_xl" (relative bias); with
    the relative two, `max_position_embeddings` is only the length the model was trained for.
    """

    model_type = "bertpre"

    # Numbers may come from JSON as int or float, hence `float | int`.
    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float | int = 0.1
    attention_probs_dropout_prob: float | int = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float | int = 1e-12
    initializer_range: float | int = 0.02
    pad_token_id: int | None = 0
    embedding_size: int | None = None
    share_layers: bool = False
    position_embedding_type: str = "absolute"
    rope_theta: float | int = 10000.0
    tie_word_embeddings: bool = True


__all__ = ["BertpreConfig"]
