"""Growing a released WordPiece vocab: new corpus words appended after its ids, each traced to its old pieces.

Continued pretraining of a released BERT on a domain corpus keeps every id of the released
vocab (so its embedding rows still mean what they meant) and appends a few thousand domain
words. `extend_vocab` picks and appends them; `vocab_extension` tells the model side, for each
appended token, which old pieces it used to be, so its embedding row can start as their mean.
"""
from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable

from tokenizers import Tokenizer, models

from bertpre.errors import UserError
from bertpre.tokenizer.wordpiece import vocab_in_id_order


class VocabMismatch(UserError):
    """A tokenizer's vocab is not the source vocab with tokens appended after it."""


def extend_vocab(source: Tokenizer, batches: Iterable[list[str]], count: int,
                 min_frequency: int = 2) -> Tokenizer:
    """The source tokenizer with up to `count` of the corpus's most frequent unknown words appended.

    A candidate is a whole word (after the source's own normalizer and pre-tokenizer, so an
    uncased source gets lowercase words) that is not in the source vocab, so the source splits
    it into two or more pieces (or [UNK]). Candidates seen at least `min_frequency` times are
    ranked by frequency, ties by the word, and the first `count` are appended in that order.

    Whole words, rather than the ranking of a fresh WordPiece vocab trained on the corpus, because
    that ranking is merge order: a domain word comes only after the fragments it was merged from
    ("imm", "##uno", ...), most of which a released vocab already covers with other pieces, so a
    budget of N tokens would go to fragments before the words. A whole word in the vocab is
    always one token (WordPiece matches the longest prefix first), and the most frequent ones
    save the most tokens and get the best-trained embedding rows. Other forms of a word
    ("immunohistochemical" beside "immunohistochemistry") stay split unless frequent themselves.

    Every source id, special tokens included, and the source's normalizer, pre-tokenizer,
    post-processor and decoder stay as they are; the new ids run from the source's size up.

    Args:
        batches: the corpus's sentences, a batch at a time.
        count: the most tokens to append (fewer when fewer words qualify).
        min_frequency: the fewest occurrences of an appended word.

    Raises:
        UserError: the source is not a WordPiece tokenizer, or holds added tokens outside its
            vocab (new ids would collide with theirs).
    """
    model = _wordpiece_model(source)
    vocab = source.get_vocab(with_added_tokens=True)
    if len(vocab) != source.get_vocab_size(with_added_tokens=False):
        raise UserError("the --tokenizer has added tokens outside its WordPiece vocab, so new "
                        "tokens cannot be appended after it; pass a BERT vocab.txt instead")
    counts = count_words(source, batches)
    candidates = [
        word for word, seen in counts.items()
        if seen >= min_frequency and word not in vocab and len(word) <= model.max_input_chars_per_word
    ]
    candidates.sort(key=lambda word: (-counts[word], word))
    added = candidates[:count]
    extended = Tokenizer.from_str(source.to_str())
    extended.model = models.WordPiece(
        {**vocab, **{word: len(vocab) + index for index, word in enumerate(added)}},
        unk_token=model.unk_token,
        max_input_chars_per_word=model.max_input_chars_per_word,
        continuing_subword_prefix=model.continuing_subword_prefix,
    )
    return extended


def count_words(tokenizer: Tokenizer, batches: Iterable[list[str]]) -> Counter[str]:
    """How often each word occurs, as `tokenizer`'s normalizer and pre-tokenizer cut the texts."""
    counts: Counter[str] = Counter()
    for batch in batches:
        # One call a batch: BERT's normalizer works character by character and its
        # pre-tokenizer splits at whitespace, so joining the sentences changes no word.
        text = "\n".join(batch)
        if tokenizer.normalizer is not None:
            text = tokenizer.normalizer.normalize_str(text)
        if tokenizer.pre_tokenizer is not None:
            counts.update(word for word, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text))
        else:
            counts.update(text.split())
    return counts


def vocab_sha256(tokenizer: Tokenizer) -> str:
    """sha256 of the vocab as a vocab.txt holds it (one token a line, in id order).

    For a released BERT's vocab.txt (newline at the end) this is the file's own sha256.
    """
    text = "".join(token + "\n" for token in vocab_in_id_order(tokenizer))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def vocab_extension(source: Tokenizer, extended: Tokenizer) -> list[list[int]] | None:
    """For each token `extended` appends to `source`'s vocab, in id order, its source ids.

    A token starting with the continuing-subword prefix ("##ing") is split as the rest of a
    word, any other as a whole word, by the source's WordPiece rule (longest match first). A
    token the source can only read as [UNK] (a character it lacks, or longer than its
    `max_input_chars_per_word`) gets `[[UNK]'s id]`: its row starts as [UNK]'s.

    Returns:
        None when the two vocabs are the same, else one list of source ids per appended token.

    Raises:
        VocabMismatch: `extended` does not hold the source's token at every source id, or does
            not have more tokens; or `source` is not a WordPiece tokenizer.
    """
    old, new = vocab_in_id_order(source), vocab_in_id_order(extended)
    if new == old:
        return None
    differing = next((index for index, (a, b) in enumerate(zip(old, new, strict=False)) if a != b), None)
    if differing is not None:
        raise VocabMismatch(
            f"the DATA's vocab does not extend the model's: id {differing} is {new[differing]!r} "
            f"there and {old[differing]!r} in the model's; tokenize with --tokenizer set to the "
            "model's tokenizer (and --add-vocab to grow it)")
    if len(new) < len(old):
        raise VocabMismatch(
            f"the DATA's vocab has {len(new):,} tokens, fewer than the model's {len(old):,}; "
            "tokenize with --tokenizer set to the model's tokenizer")
    model = _wordpiece_model(source)
    vocab = {token: index for index, token in enumerate(old)}
    if model.unk_token not in vocab:
        raise VocabMismatch(f"the model's vocab lacks its unknown token {model.unk_token!r}")
    prefix = model.continuing_subword_prefix
    return [
        _split(token[len(prefix):], vocab, model, continuation=True)
        if token.startswith(prefix) and len(token) > len(prefix)
        else _split(token, vocab, model, continuation=False)
        for token in new[len(old):]
    ]


def _wordpiece_model(tokenizer: Tokenizer) -> models.WordPiece:
    if not isinstance(tokenizer.model, models.WordPiece):
        raise VocabMismatch(f"the tokenizer is a {type(tokenizer.model).__name__} model, not "
                            "WordPiece; only BERT WordPiece vocabs can be extended")
    return tokenizer.model


def _split(text: str, vocab: dict[str, int], model: models.WordPiece, continuation: bool) -> list[int]:
    """WordPiece's greedy longest-match-first split of `text`, as `tokenizers` does it; [UNK]
    for all of it when any part matches nothing."""
    unknown = [vocab[model.unk_token]]
    if len(text) > model.max_input_chars_per_word:
        return unknown
    prefix = model.continuing_subword_prefix
    ids, start = [], 0
    while start < len(text):
        for end in range(len(text), start, -1):
            piece = (prefix if start > 0 or continuation else "") + text[start:end]
            if piece in vocab:
                ids.append(vocab[piece])
                start = end
                break
        else:
            return unknown
    return ids
