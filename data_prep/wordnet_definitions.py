"""A sentence-pair task from WordNet: does this word have this meaning?

Debian's `wordnet-base` installs WordNet 3.0 (`apt-get install -y wordnet-base`). Each pair is
a word and a definition, labelled `yes` where the word has that meaning and `no` where it does
not. This module writes train/validation/test CSV files (columns `word,definition,label`) for

    bertpre finetune MODEL --task classification --text-column word --text-pair-column definition ...

    .venv/bin/python -m data_prep.wordnet_definitions --out data/wordnet-definitions
    .venv/bin/python -m data_prep.wordnet_definitions --out data/wordnet-definitions-4000 --max-train 4000 --max-eval 1000

Choices, and why:

- **A positive** pairs one of a synset's words (`domestic dog`) with the synset's definition,
  usage examples removed (as in data_prep.wordnet_supersenses): examples repeat the word.
- **A negative** pairs the same word with the definition of another synset of the **same
  lexicographer file** (noun.animal, verb.motion, ...), so the topic alone cannot decide, drawn
  with `--seed`. One negative per positive: the labels are balanced (majority 0.5).
- **No string match decides**: a word that starts a word of its own definition (`dog` in "a
  dog's life", `travel` in "move, travel, or proceed") is not used for the positive, and a
  negative's definition neither contains the word nor belongs to a synset that has it as a
  word. Either way the word is absent from the definition, so its absence tells nothing.
- **One word per synset**, the first that passes those checks, so synsets with many words
  do not dominate; a synset with none is dropped and counted.
- **The split is the definition's hash** (data_prep.wordnet_supersenses's `split_of`, 80/10/10)
  and negatives are drawn from the same split, so no definition is in two splits.
- `--max-train N` / `--max-eval N` keep a seeded sample of whole (yes, no) pairs: still balanced.
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from data_prep.wordnet_supersenses import (
    PARTS_OF_SPEECH,
    SPLITS,
    WORDNET,
    Synset,
    WordNetError,
    read_wordnet,
    split_of,
)

NEGATIVE_DRAWS = 50  # draws from the word's file before it is given up as having no negative
Row = tuple[str, str, str]  # (word, definition, label)


def word_of(lemma: str) -> str:
    """A lemma as text: `domestic_dog` → `domestic dog`; an adjective's marker (`galore(ip)`) dropped."""
    return re.sub(r"\((?:a|p|ip)\)$", "", lemma).replace("_", " ")


def contains(definition: str, word: str) -> bool:
    """Whether `word` starts a word of `definition`, in any case: "dog" is in "a dog's life" and
    "dogs bark", not in "hotdog" (inflections caught, at the cost of "go" in "good")."""
    return re.search(r"(?<!\w)" + re.escape(word), definition, flags=re.IGNORECASE) is not None


def draw_negative(word: str, definitions: Sequence[str], words_of: dict[str, set[str]],
                  made: set[tuple[str, str]], rng: random.Random) -> str | None:
    """A definition of `definitions` that lacks `word`, whose synsets lack it as a word, and not
    already paired with it in `made`; None if NEGATIVE_DRAWS draws find none."""
    for _ in range(NEGATIVE_DRAWS):
        definition = definitions[rng.randrange(len(definitions))]
        if (word.lower() not in words_of[definition] and not contains(definition, word)
                and (word.lower(), definition) not in made):
            return definition
    return None


def make_pairs(synsets: Sequence[Synset], rng: random.Random, dropped: Counter) -> list[tuple[Row, Row]]:
    """One split's (yes, no) row pairs, one per synset that has a usable word; what is not made
    is counted in `dropped` by reason."""
    # A definition's words are those of every synset that has it, whatever its file: a negative
    # must not pair `make` with "develop into" because a synset of another file has both.
    words_of: dict[str, set[str]] = defaultdict(set)
    definitions: dict[str, dict[str, None]] = defaultdict(dict)  # file → its definitions, each once
    for synset in synsets:
        words_of[synset.definition].update(word_of(lemma).lower() for lemma in synset.lemmas)
        definitions[synset.supersense].setdefault(synset.definition)
    pools = {supersense: list(members) for supersense, members in definitions.items()}
    pairs, made = [], set()  # (word in lower case, definition) of the rows made
    for synset in synsets:
        words = [word for word in dict.fromkeys(map(word_of, synset.lemmas))
                 if not contains(synset.definition, word)]
        if not words:
            dropped["word_in_own_definition"] += 1
            continue
        words = [word for word in words if (word.lower(), synset.definition) not in made]
        if not words:  # synsets sharing a definition and their words: the pair is made once
            dropped["duplicate_pair"] += 1
            continue
        for word in words:
            negative = draw_negative(word, pools[synset.supersense], words_of, made, rng)
            if negative is not None:
                break
        if negative is None:
            dropped["no_negative_in_file_and_split"] += 1
        else:
            made.update({(word.lower(), synset.definition), (word.lower(), negative)})
            pairs.append(((word, synset.definition, "yes"), (word, negative, "no")))
    return pairs


def sample_rows(pairs: list[tuple[Row, Row]], limit: int | None, rng: random.Random) -> list[Row]:
    """At most `limit` rows made of whole (yes, no) pairs, drawn with `rng`, in a shuffled order."""
    pairs = list(pairs)
    rng.shuffle(pairs)
    if limit is not None:
        pairs = pairs[:limit // 2]
    rows = [row for pair in pairs for row in pair]
    rng.shuffle(rows)
    return rows


def write_csv(path: Path, rows: Iterable[Sequence[str]], header: Sequence[str] = ("word", "definition", "label")) -> None:
    """Write through a temporary file, so an interrupted run leaves no half-written CSV."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    os.replace(partial, path)


def build(wordnet: Path, out: Path, *, seed: int = 0, parts_of_speech: Iterable[str] = ("noun", "verb"),
          max_train: int | None = None, max_eval: int | None = None) -> dict[str, Any]:
    """Write out/train.csv, validation.csv, test.csv; returns each split's (word, definition)
    pairs written and made before subsampling, its yes share, and the synsets dropped by reason.

    Raises:
        WordNetError: a data file is missing or malformed, or a split would be empty.
    """
    by_split: dict[str, list[Synset]] = {name: [] for name in SPLITS}
    for synset in read_wordnet(wordnet, parts_of_speech):
        by_split[split_of(synset.definition)].append(synset)
    dropped: Counter = Counter()
    rows, made = {}, {}
    for name, synsets in by_split.items():
        rng = random.Random(f"{seed}:{name}")
        pairs = make_pairs(synsets, rng, dropped)
        made[name] = 2 * len(pairs)
        rows[name] = sample_rows(pairs, max_train if name == "train" else max_eval, rng)
        if not rows[name]:
            raise WordNetError(f"the {name} split has no pairs: {wordnet} holds too few synsets")
    out.mkdir(parents=True, exist_ok=True)
    for name in SPLITS:  # everything is made before anything is written
        write_csv(out / f"{name}.csv", rows[name])
    return {"splits": {name: {"pairs": len(rows[name]), "made": made[name],
                              "yes_share": sum(label == "yes" for *_, label in rows[name]) / len(rows[name])}
                       for name in SPLITS},
            "dropped": dict(sorted(dropped.items()))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for train.csv, validation.csv, test.csv")
    parser.add_argument("--wordnet", type=Path, default=WORDNET, help=f"WordNet's dict folder (default {WORDNET})")
    parser.add_argument("--parts-of-speech", nargs="+", choices=PARTS_OF_SPEECH, default=["noun", "verb"])
    parser.add_argument("--seed", type=int, default=0, help="the negatives and the subsample drawn (default 0)")
    parser.add_argument("--max-train", type=int, default=None, help="at most N training rows (whole yes/no pairs)")
    parser.add_argument("--max-eval", type=int, default=None, help="at most N rows in validation and test each")
    args = parser.parse_args(argv)
    for name in ("max_train", "max_eval"):
        if getattr(args, name) is not None and getattr(args, name) < 2:
            parser.error(f"--{name.replace('_', '-')} must be at least 2 (one yes/no pair)")
    try:
        summary = build(args.wordnet, args.out, seed=args.seed, parts_of_speech=args.parts_of_speech,
                        max_train=args.max_train, max_eval=args.max_eval)
    except WordNetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name, counts in summary["splits"].items():
        print(f"{args.out / (name + '.csv')}: {counts['pairs']:,} pairs (of {counts['made']:,}), yes share {counts['yes_share']:.3f}")
    print("synsets dropped: " + (", ".join(f"{count:,} {reason}" for reason, count in summary["dropped"].items())
                                 or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
