"""Examples → token ids as the ecosystem encodes them: `[CLS] a [SEP] b [SEP]` with token types
0/1 (RoBERTa's tokenizer: `<s> a </s></s> b </s>`, all type 0; XLNet's: `a [SEP] b [SEP] [CLS]`,
types 0/1/2), the types given by the model's family (`model.token_types`, never the tokenizer's
template), truncated longest-first by the tokenizer itself (what
`AutoTokenizer(a, b, truncation="longest_first", max_length=L)` gives), and tags on the first
piece of each word, placed back by the word's index (the tokenizer's word_ids), each word spaced
as `is_split_into_words` with `add_prefix_space=True` spaces it for a byte-level BPE (and a saved
tagging model's tokenizer files saying so); batches padded on the model's side (XLNet's: the left)
with the tokenizer's padding id.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import torch
from tokenizers import Encoding, Tokenizer

from bertpre.errors import UserError
from bertpre.finetune.tasks import TaskData, majority_label, metric_name
from bertpre.labels import IGNORE_INDEX
from bertpre.model.config import BertConfig
from bertpre.model.families import token_types
from bertpre.model.hf_format import write_json
from bertpre.tokenizer.roles import specials_before_second_text, text_segments

ENCODE_BATCH = 4096  # examples per call into the tokenizer (it parallelizes inside one call)
WHOLE_SHARE = 0.95  # the truncation note gives the length that keeps this share of examples whole


@dataclass
class Encoded:
    """A split's token ids, token types and labels, one list per example (no padding)."""

    input_ids: list[list[int]]
    token_type_ids: list[list[int]]
    labels: list  # an int or float per example, or a list of ints per token (tagging)
    word_counts: list[int] | None = None  # tagging: words in each example, before truncation
    kept_words: list[int] | None = None  # tagging: words whose first piece survived truncation
    # tagging: per example, the index of the word each tagged piece begins, in order
    tagged_words: list[list[int]] | None = None
    empty_words: list[list[int]] | None = None  # tagging: per example, the words with no pieces at all
    whole_lengths: list[int] | None = None  # tokens in each example before truncation ([CLS] … [SEP])

    def __len__(self) -> int:
        return len(self.input_ids)

def join_encoded(parts: list[Encoded]) -> Encoded:
    """Several encoded splits as one, example after example (`cut_outputs` cuts outputs back apart)."""
    if len(parts) == 1:
        return parts[0]
    joined = {}
    for column in fields(Encoded):
        values = [getattr(part, column.name) for part in parts]
        joined[column.name] = None if any(value is None for value in values) else [
            row for value in values for row in value]
    return Encoded(**joined)


def truncating(tokenizer: Tokenizer, max_length: int) -> Tokenizer:
    """A copy of `tokenizer` that adds its special tokens ([CLS]/[SEP], <s>/</s>), truncates
    longest-first and never pads."""
    if tokenizer.post_processor is None:
        raise UserError("the model's tokenizer adds no start and separator tokens (its tokenizer.json has no "
                        "post-processor); give the tokenizer the model was pretrained with")
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_padding()
    try:
        copy.enable_truncation(max_length, strategy="longest_first")
    except Exception as error:  # the tokenizer refuses a length below its special tokens
        raise UserError(f"--max-seq-length {max_length} is too short: {error}") from None
    return copy


def untruncated(tokenizer: Tokenizer) -> Tokenizer:
    """A copy of `tokenizer` that adds its special tokens and neither truncates nor pads."""
    copy = Tokenizer.from_str(tokenizer.to_str())
    copy.no_padding()
    copy.no_truncation()
    return copy


def spacing_words(tokenizer: Tokenizer) -> Tokenizer:
    """`tokenizer` as it must take words given one by one: a byte-level BPE (RoBERTa's) spaces each
    word before it (`Ġ`), as transformers' RobertaTokenizerFast with `add_prefix_space=True` does
    for `is_split_into_words`, so that a word is the pieces it is mid-sentence in pretraining;
    WordPiece and SentencePiece (`▁` on every word already) are returned as they are."""
    state = json.loads(tokenizer.to_str())
    changed = False
    for part in _parts(state.get("pre_tokenizer")):
        if part.get("type") == "ByteLevel" and not part.get("add_prefix_space"):
            part["add_prefix_space"] = changed = True
    return Tokenizer.from_str(json.dumps(state)) if changed else tokenizer


def _parts(component: dict | None) -> list[dict]:
    """A pre-tokenizer's members (a Sequence's, nested), else itself."""
    if not component:
        return []
    members = component.get("pretokenizers")
    return [part for member in members for part in _parts(member)] if members else [component]


def encode_batches(tokenizer: Tokenizer, inputs: list, max_length: int, *, is_pretokenized: bool = False
                   ) -> tuple[list[Encoding], list[Encoding]]:
    """(truncated, whole) encodings of `inputs`: each example is encoded whole, and again with
    truncation only where it is longer than `max_length` (the same encoding where it fits).
    Words (`is_pretokenized`) are each spaced as a byte-level BPE needs (`spacing_words`)."""
    if is_pretokenized:
        tokenizer = spacing_words(tokenizer)
    cut, uncut = truncating(tokenizer, max_length), untruncated(tokenizer)
    truncated, complete = [], []
    for start in range(0, len(inputs), ENCODE_BATCH):
        batch = inputs[start:start + ENCODE_BATCH]
        encodings = uncut.encode_batch(batch, is_pretokenized=is_pretokenized)
        long = [index for index, encoding in enumerate(encodings) if len(encoding.ids) > max_length]
        shortened = dict(zip(long, cut.encode_batch([batch[index] for index in long],
                                                    is_pretokenized=is_pretokenized), strict=True))
        truncated.extend(shortened.get(index, encoding) for index, encoding in enumerate(encodings))
        complete.extend(encodings)
    return truncated, complete


def encode_texts(tokenizer: Tokenizer, texts: list[str], pairs: list[str] | None, labels: list,
                 max_length: int, *, config: BertConfig) -> Encoded:
    """Sentences or sentence pairs with one label each, typed as `config`'s family reads them."""
    inputs = list(zip(texts, pairs, strict=True)) if pairs is not None else texts
    truncated, complete = encode_batches(tokenizer, inputs, max_length)
    return Encoded([encoding.ids for encoding in truncated], family_types(config, tokenizer, truncated),
                   list(labels), whole_lengths=[len(encoding.ids) for encoding in complete])


def family_types(config: BertConfig, tokenizer: Tokenizer, encodings: list[Encoding]) -> list[list[int]]:
    """Each encoding's token types as `config`'s family reads them (`model.token_types`), from
    which text each token belongs to by `tokenizer`'s layout (`text_segments`)."""
    before_second = specials_before_second_text(tokenizer)
    return [token_types(config, text_segments(encoding.sequence_ids, before_second)) for encoding in encodings]


def encode_words(tokenizer: Tokenizer, words: list[list[str]], tags: list[list[int]],
                 max_length: int, *, config: BertConfig) -> Encoded:
    """Tagged sentences: each word's tag on its first piece, IGNORE_INDEX on the rest and on
    [CLS]/[SEP]. A word cut off by truncation keeps no piece, nor does a word the tokenizer turns
    into nothing (a zero-width space, a soft hyphen, a control character); `tagged_words` says
    which word each tagged piece is, `empty_words` which words had no pieces even before truncation."""
    truncated, complete = encode_batches(tokenizer, words, max_length, is_pretokenized=True)
    labels, tagged, empty = [], [], []
    for sentence_tags, encoding, uncut in zip(tags, truncated, complete, strict=True):
        token_labels, first_pieces, previous = [], [], None
        for word in encoding.word_ids:
            if word is not None and word != previous:
                token_labels.append(sentence_tags[word])
                first_pieces.append(word)
            else:
                token_labels.append(IGNORE_INDEX)
            previous = word
        labels.append(token_labels)
        tagged.append(first_pieces)
        pieced = {word for word in uncut.word_ids if word is not None}
        empty.append([word for word in range(len(sentence_tags)) if word not in pieced])
    return Encoded([encoding.ids for encoding in truncated], family_types(config, tokenizer, truncated),
                   labels, word_counts=[len(sentence) for sentence in words],
                   kept_words=[len(first_pieces) for first_pieces in tagged], tagged_words=tagged,
                   empty_words=empty, whole_lengths=[len(encoding.ids) for encoding in complete])


def tags_by_word(predicted: Sequence[int], encoded: Encoded, label_names: list[str], fallback: str) -> list[list[str]]:
    """One tag name a word from the model's outputs on `encoded` (one a tagged piece, in order):
    each output goes to the word its piece begins; a word with no piece (cut off by truncation,
    or turned into nothing by the tokenizer) gets `fallback`, in its own place."""
    tags, position = [], 0
    for count, words in zip(encoded.word_counts, encoded.tagged_words, strict=True):
        sentence = [fallback] * count
        for word, index in zip(words, predicted[position:position + len(words)], strict=True):
            sentence[word] = label_names[int(index)]
        tags.append(sentence)
        position += len(words)
    return tags


def truncation_note(splits: list[tuple[str, Encoded]], max_length: int, positions: int | None = None) -> str | None:
    """How many examples of each split (name, encoded) were cut at `max_length` tokens, and the
    length that would keep 95% of all of them whole (and whether that is past `positions`, the
    tokens the model's position table reads); None when none was cut."""
    cut = [(name, sum(length > max_length for length in encoded.whole_lengths), len(encoded))
           for name, encoded in splits]
    if not any(count for _, count, _ in cut):
        return None
    lengths = np.sort(np.concatenate([np.asarray(encoded.whole_lengths) for _, encoded in splits]))
    keeps = int(lengths[math.ceil(WHOLE_SHARE * lengths.size) - 1])
    shares = " and ".join(f"{count:,} of {total:,} {name} examples ({count / total:.1%})" for name, count, total in cut)
    line = f"note: {shares} were cut at --max-seq-length {max_length}"
    if keeps <= max_length:
        return f"{line}; {WHOLE_SHARE:.0%} of them are whole at this length"
    beyond = (f", more than the {positions} tokens the model's positions read"
              if positions is not None and keeps > positions else "")
    return f"{line}; --max-seq-length {keeps} would keep {WHOLE_SHARE:.0%} of them whole{beyond}"


def missing_words_notes(name: str, encoded: Encoded, words: list[list[str]], fallback: str, *,
                        training: bool = False) -> list[str]:
    """Lines counting the words of split `name` that have no tagged piece: those the tokenizer
    turned into nothing (naming the first) and those cut off by truncation; each was scored as
    `fallback` (or, in training, learned nothing)."""
    empty = [(sentence, word) for sentence, indices in enumerate(encoded.empty_words) for word in indices]
    cut = sum(encoded.word_counts) - sum(encoded.kept_words) - len(empty)
    outcome = "nothing is learned from them" if training else f"scored as {fallback}"
    notes = []
    if empty:
        sentence, word = empty[0]
        first = ascii(words[sentence][word])
        notes.append(f"note: {len(empty):,} {name} word{'s' if len(empty) != 1 else ''} had no tokens (the first: "
                     f"{first}, word {word + 1} of sentence {sentence + 1}): {outcome}")
    if cut:
        were = "words were" if cut != 1 else "word was"
        notes.append(f"note: {cut:,} {name} {were} cut off by --max-seq-length: {outcome}")
    return notes


def encoding_notes(data: TaskData, train: Encoded, scored: list[Encoded], max_length: int,
                   positions: int | None = None) -> list[str]:
    """What encoding left out, for the user: the examples cut at `max_length` tokens (and the
    length that keeps 95% whole; `positions`, the model's limit, if it has one) and, for tagging,
    the words with no tagged piece, per split (`scored`: one Encoded each of `data.scored`)."""
    named = [("training", train, data.train),
             *((metric_name(data.split, suffix), part, examples)
               for (suffix, examples), part in zip(data.scored, scored, strict=True))]
    notes = [truncation_note([(name, encoded) for name, encoded, _ in named], max_length, positions)]
    if train.kept_words is not None:  # words tagged on their first piece
        fallback = majority_label([tag for tags in data.train.labels for tag in tags])
        for name, encoded, examples in named:
            notes.extend(missing_words_notes(name, encoded, examples.texts, fallback, training=name == "training"))
    return [note for note in notes if note]


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


def space_words_as_trained(folder: Path) -> None:
    """A tagging model's tokenizer files as it was fine-tuned: a byte-level BPE took each word spaced
    (`spacing_words`), so tokenizer.json's pre-tokenizer adds the prefix space and tokenizer_config.json
    says `add_prefix_space` (transformers' RobertaTokenizer rebuilds its pipeline from that key, its
    generic fast tokenizer reads tokenizer.json): `tokenizer(words, is_split_into_words=True)` then
    gives the pieces the model was trained on. Other tokenizers are left as they are."""
    path, config_path = folder / "tokenizer.json", folder / "tokenizer_config.json"
    if not path.is_file():
        return
    tokenizer = Tokenizer.from_file(str(path))
    spaced = spacing_words(tokenizer)
    if spaced is tokenizer:
        return
    spaced.save(str(path))
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        config = None  # none, or damaged: the tokenizer.json alone says it
    if isinstance(config, dict):
        write_json(config_path, {**config, "add_prefix_space": True})
