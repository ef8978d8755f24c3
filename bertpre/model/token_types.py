"""Token types as each family reads them, from which text of an input each token belongs to (its
segment: 0 for the first text and the special tokens the template puts before the second, 1 from
there on; `tokenizer.roles.text_segments`), never from the tokenizer's template: `tokenizers`
types an overflow window's tokens by its own rules (an XLM-R's QA window past the first came typed
1 throughout), and a RoBERTa/XLM-R has one row of token types to index."""
from __future__ import annotations

from collections.abc import Sequence

from bertpre.model.config import BertConfig

XLNET_CLS_TYPE = 2  # XLNet's classification token, last, is a segment of its own


def bert_token_types(config: BertConfig, segments: Sequence[int]) -> list[int]:
    """BERT's: the segment, within the model's `type_vocab_size` rows (a one-row table reads 0)."""
    last = max(config.type_vocab_size - 1, 0)
    return [min(segment, last) for segment in segments]


def no_token_types(config: BertConfig, segments: Sequence[int]) -> list[int]:
    """Type 0 throughout: RoBERTa and XLM-R were pretrained on type 0 alone (transformers' tokenizers
    never give them another), and ModernBERT reads no types at all."""
    return [0] * len(segments)


def xlnet_token_types(config: BertConfig, segments: Sequence[int]) -> list[int]:
    """XLNet's `A [SEP] B [SEP] [CLS]`: the segment, and 2 for the last token, [CLS] (transformers'
    XLNetTokenizer types them so; XLNet reads only whether two tokens' types differ)."""
    types = list(segments)
    if types:
        types[-1] = XLNET_CLS_TYPE
    return types
