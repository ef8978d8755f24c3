"""Examples → token ids as the ecosystem encodes them: `[CLS] a [SEP] b [SEP]` with token types
0/1 (XLNet's tokenizer: `a [SEP] b [SEP] [CLS]`, types 0/1/2), truncated longest-first by the
tokenizer itself (what `BertTokenizerFast(a, b, truncation="longest_first", max_length=L)` gives),
and tags on the first piece of each word; batches padded on the model's side (XLNet's: the left).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from tokenizers import Tokenizer

from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX

ENCODE_BATCH = 4096  # examples per call into the tokenizer (it parallelizes inside one call)


@dataclass
class Encoded:
    """A split's token ids, token types and labels, one list per example (no padding)."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: list  # an int or float per example, or a list of ints per token (tagging)
    word_counts: list[int] | None = None  # tagging: words in each example, before truncation
    kept_words: list[int] | None = None  # tagging: words whose first piece survived truncation

    def __len__(self) -> int:
        return len(self.input_ids)


def truncating(tokenizer: Tokenizer, max_length: int) -> Tokenizer:
    """A copy of `tokenizer` that adds [CLS]/[SEP], truncates longest-first and never pads."""
    if tokenizer.post_processor is None:
        raise UserError("the model's tokenizer adds no [CLS]/[SEP] (its tokenizer.json has no "
                        "post-processor); give a BERT tokenizer")
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_padding()
    try:
        copy.enable_truncation(max_length, strategy="longest_first")
    except Exception as error:  # the tokenizer refuses a length below its special tokens
        raise UserError(f"--max-seq-length {max_length} is too short: {error}") from None
    return copy


def encode_texts(tokenizer: Tokenizer, texts: list[str], pairs: list[str] | None, labels: list,
                 max_length: int) -> Encoded:
    """Sentences or sentence pairs with one label each."""
    tokenizer = truncating(tokenizer, max_length)
    inputs = list(zip(texts, pairs, strict=True)) if pairs is not None else texts
    input_ids, token_type_ids = [], []
    for start in range(0, len(inputs), ENCODE_BATCH):
        for encoding in tokenizer.encode_batch(inputs[start:start + ENCODE_BATCH]):
            input_ids.append(encoding.ids)
            token_type_ids.append(encoding.type_ids)
    return Encoded(input_ids, token_type_ids, list(labels))


def encode_words(tokenizer: Tokenizer, words: list[list[str]], tags: list[list[int]],
                 max_length: int) -> Encoded:
    """Tagged sentences: each word's tag on its first piece, IGNORE_INDEX on the rest and on
    [CLS]/[SEP]. A word cut off by truncation keeps no piece; `kept_words` counts those left."""
    tokenizer = truncating(tokenizer, max_length)
    input_ids, token_type_ids, labels, kept = [], [], [], []
    for start in range(0, len(words), ENCODE_BATCH):
        batch = words[start:start + ENCODE_BATCH]
        for offset, encoding in enumerate(tokenizer.encode_batch(batch, is_pretokenized=True)):
            sentence_tags = tags[start + offset]
            token_labels, previous = [], None
            for word in encoding.word_ids:
                token_labels.append(sentence_tags[word] if word is not None and word != previous
                                    else IGNORE_INDEX)
                previous = word
            input_ids.append(encoding.ids)
            token_type_ids.append(encoding.type_ids)
            labels.append(token_labels)
            kept.append(sum(label != IGNORE_INDEX for label in token_labels))
    return Encoded(input_ids, token_type_ids, labels, [len(sentence) for sentence in words], kept)


def describe_training(encoded: Encoded) -> str:
    """What a seed trains on: "160 examples", or for tagging "120 sentences (1,093 tagged tokens)"."""
    if encoded.kept_words is None:
        return f"{len(encoded):,} examples"
    return f"{len(encoded):,} sentences ({sum(encoded.kept_words):,} tagged tokens)"


def pad_batch(encoded: Encoded, indices: list[int], pad_id: int, *, regression: bool = False,
              tagging: bool = False, padding_side: str = "right") -> dict[str, torch.Tensor]:
    """The examples at `indices` padded to the longest of them: ids, types, mask and labels.
    Padding goes after each example, or before it with `padding_side` "left" (type 0, as
    transformers' tokenizers pad)."""
    length = max(len(encoded.input_ids[index]) for index in indices)
    batch = len(indices)
    input_ids = torch.full((batch, length), pad_id, dtype=torch.long)
    token_type_ids = torch.zeros((batch, length), dtype=torch.long)
    attention_mask = torch.zeros((batch, length), dtype=torch.long)
    token_labels = torch.full((batch, length), IGNORE_INDEX, dtype=torch.long) if tagging else None
    for row, index in enumerate(indices):
        ids = encoded.input_ids[index]
        place = slice(length - len(ids), length) if padding_side == "left" else slice(0, len(ids))
        input_ids[row, place] = torch.tensor(ids)
        token_type_ids[row, place] = torch.tensor(encoded.token_type_ids[index])
        attention_mask[row, place] = 1
        if token_labels is not None:
            token_labels[row, place] = torch.tensor(encoded.labels[index])
    if tagging:
        labels = token_labels
    else:
        labels = torch.tensor([encoded.labels[index] for index in indices],
                              dtype=torch.float32 if regression else torch.long)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids,
            "attention_mask": attention_mask, "labels": labels}
