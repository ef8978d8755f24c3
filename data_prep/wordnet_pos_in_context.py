"""A syntactic task from WordNet: a word's part of speech in a sentence that uses it.

Debian's `wordnet-base` installs WordNet 3.0 (`apt-get install -y wordnet-base`). A synset's
gloss ends with usage examples ("a bend in the road", "bend the rod"); an example that holds
one of the synset's words as written shows that word used as the synset's part of speech. Each
row pairs the word with the example, labelled `noun`, `verb`, `adj` or `adv`. This module writes
train/validation/test CSV files (columns `word,sentence,label`) for

    bertpre finetune MODEL --task classification --text-column word --text-pair-column sentence ...

    .venv/bin/python -m data_prep.wordnet_pos_in_context --out data/wordnet-pos
    .venv/bin/python -m data_prep.wordnet_pos_in_context --out data/wordnet-pos-4000 --max-train 4000 --max-eval 1000

Choices, and why:

- **Only words used as two parts of speech or more** among the examples (`bend` as a noun and
  as a verb, `up` as an adjective and an adverb): the word alone does not decide, its use does.
- **The word as written**, matched whole and in any case (`run` in "run the store", not in
  "ran" or "runner"): no lemmatiser, so the label is WordNet's own, never a guess. Satellite
  adjectives count as adjectives.
- **Each (word, sentence) once**, written as the first synset that has it spells the word; an
  example WordNet gives for the word under two parts of speech (the same sentence under a noun
  and a verb synset) has no one label, so it is dropped and counted.
- **The split is the word's sha256** (80/10/10): a test word is never seen in training, so a
  model cannot learn each word's usual part of speech; it must read the sentence or the word's
  form (`-ly`, `-ous`). The split depends on nothing else, the same on every machine.
- `--max-train N` / `--max-eval N` keep the first N rows in hash order (the labels' shares as
  they fall; the printed summary gives the majority share).
"""
from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from data_prep.wordnet_definitions import word_of, write_csv
from data_prep.wordnet_supersenses import (
    PARTS_OF_SPEECH,
    SPLITS,
    WORDNET,
    Synset,
    WordNetError,
    hash_order,
    read_wordnet,
)

HEADER = ("word", "sentence", "label")
Row = tuple[str, str, str]  # (word, sentence, part of speech)


def uses(sentence: str, word: str) -> bool:
    """Whether `word` stands whole in `sentence`, in any case: `bend` in "a Bend in the road",
    not in "bending" or "unbend"."""
    return re.search(r"(?<!\w)" + re.escape(word) + r"(?!\w)", sentence, flags=re.IGNORECASE) is not None


def split_of_word(word: str) -> str:
    """train (80%), validation (10%) or test (10%), from the word's sha256 (lower case)."""
    digest = hashlib.sha256(("word:" + word.lower()).encode("utf-8")).digest()
    bucket = int.from_bytes(digest[:8], "big") % 10
    return "train" if bucket < 8 else "validation" if bucket == 8 else "test"


def make_rows(synsets: Iterable[Synset], dropped: Counter) -> list[Row]:
    """Every (word, example, part of speech) of words used as two parts of speech or more, each
    (word, example) once; what is not kept is counted in `dropped` by reason."""
    labels: dict[tuple[str, str], set[str]] = defaultdict(set)
    first: dict[tuple[str, str], Row] = {}
    for synset in synsets:
        for example in synset.examples:
            for word in dict.fromkeys(map(word_of, synset.lemmas)):
                if uses(example, word):
                    key = (word.lower(), example)
                    labels[key].add(synset.part_of_speech)
                    first.setdefault(key, (word, example, synset.part_of_speech))
    parts: dict[str, set[str]] = defaultdict(set)
    for (word, _), found in labels.items():
        parts[word] |= found
    rows = []
    for key, row in first.items():
        if len(labels[key]) > 1:
            dropped["example_with_two_parts_of_speech"] += 1
        elif len(parts[key[0]]) < 2:
            dropped["word_with_one_part_of_speech"] += 1
        else:
            rows.append(row)
    return rows


def build(wordnet: Path, out: Path, *, parts_of_speech: Sequence[str] = PARTS_OF_SPEECH,
          max_train: int | None = None, max_eval: int | None = None) -> dict[str, Any]:
    """Write out/train.csv, validation.csv, test.csv; returns each split's rows, words and label
    shares, and the (word, example) pairs dropped by reason.

    Raises:
        WordNetError: a data file is missing or malformed, or a split would be empty.
    """
    dropped: Counter = Counter()
    by_split: dict[str, list[Row]] = {name: [] for name in SPLITS}
    for row in make_rows(read_wordnet(wordnet, parts_of_speech), dropped):
        by_split[split_of_word(row[0])].append(row)
    summary: dict[str, Any] = {"splits": {}, "dropped": dict(sorted(dropped.items()))}
    for name in SPLITS:
        rows = sorted(by_split[name], key=lambda row: hash_order("\t".join(row)))
        limit = max_train if name == "train" else max_eval
        rows = rows[:limit] if limit is not None else rows
        if not rows:
            raise WordNetError(f"the {name} split has no rows: {wordnet} holds too few usage examples")
        by_split[name] = rows
        counts = Counter(label for *_, label in rows)
        summary["splits"][name] = {"rows": len(rows), "words": len({row[0].lower() for row in rows}),
                                   "labels": {label: counts[label] / len(rows) for label in sorted(counts)}}
    out.mkdir(parents=True, exist_ok=True)
    for name in SPLITS:  # everything is made before anything is written
        write_csv(out / f"{name}.csv", by_split[name], header=HEADER)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for train.csv, validation.csv, test.csv")
    parser.add_argument("--wordnet", type=Path, default=WORDNET, help=f"WordNet's dict folder (default {WORDNET})")
    parser.add_argument("--parts-of-speech", nargs="+", choices=PARTS_OF_SPEECH, default=list(PARTS_OF_SPEECH))
    parser.add_argument("--max-train", type=int, default=None, help="at most N training rows")
    parser.add_argument("--max-eval", type=int, default=None, help="at most N rows in validation and test each")
    args = parser.parse_args(argv)
    for name in ("max_train", "max_eval"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if len(set(args.parts_of_speech)) < 2:
        parser.error("--parts-of-speech needs two parts of speech or more: with one, every label is the same")
    try:
        summary = build(args.wordnet, args.out, parts_of_speech=args.parts_of_speech,
                        max_train=args.max_train, max_eval=args.max_eval)
    except WordNetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name, counts in summary["splits"].items():
        shares = ", ".join(f"{label} {share:.3f}" for label, share in counts["labels"].items())
        print(f"{args.out / (name + '.csv')}: {counts['rows']:,} rows, {counts['words']:,} words ({shares})")
    print("dropped: " + (", ".join(f"{count:,} {reason}" for reason, count in summary["dropped"].items())
                         or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
