"""A real labelled task from WordNet: classify a synset's definition into its supersense.

Debian's `wordnet-base` package installs WordNet 3.0's database (`apt-get install -y
wordnet-base`; files /usr/share/wordnet/data.noun, data.verb, data.adj, data.adv). Each synset
line carries its lexicographer file number, the synset's supersense (noun.animal,
noun.artifact, verb.motion, ...: the 45 names of lexnames(5WN)), and a gloss: a definition,
then usage examples in double quotes. This module writes train/validation/test CSV files
(columns `text,label`) for `bertpre finetune --task classification`:

    .venv/bin/python -m data_prep.wordnet_supersenses --out data/wordnet-supersenses
    .venv/bin/python -m data_prep.wordnet_supersenses --out DIR --max-train 4000 --max-eval 1000

Choices, and why:

- **Nouns and verbs** by default (41 supersenses): the classic supersense task (Ciaramita and
  Johnson, 2003). Adjective and adverb files (adj.all, adj.pert, adj.ppl, adv.all) group by
  syntax, not meaning; `--parts-of-speech noun verb adj adv` adds them.
- **The definition alone**, usage examples removed (`--examples` keeps them): every synset has
  a definition, only about a fifth have examples, and examples mostly repeat the word itself in
  context, which turns the task into recognising the word rather than reading the definition.
  Definitions are short (11 words on average), which keeps CPU fine-tuning cheap.
- **Each (definition, supersense) once**, and the split is a hash of the definition (sha256,
  80/10/10), not of the synset: the ~700 definitions that several synsets share then never
  straddle training and test. The split depends on nothing else, so it is the same on every
  machine and with any options.
- `--max-train N` / `--max-eval N` take a per-label proportional subsample (each label that
  has examples keeps at least one) in hash order, so small CPU runs still see every label;
  evaluation examples whose label the training file lacks are dropped and counted, since
  `bertpre finetune` refuses them.
"""
from __future__ import annotations

import argparse
import csv
import hashlib
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

WORDNET = Path("/usr/share/wordnet")
INSTALL_HINT = "install it with `apt-get install -y wordnet-base` or pass --wordnet DIR"
PARTS_OF_SPEECH = ("noun", "verb", "adj", "adv")
SPLITS = ("train", "validation", "test")
# lexnames(5WN): lexicographer file number → name (WordNet 3.0; the package ships the man page,
# not the `lexnames` file).
LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact noun.attribute "
    "noun.body noun.cognition noun.communication noun.event noun.feeling noun.food noun.group "
    "noun.location noun.motive noun.object noun.person noun.phenomenon noun.plant "
    "noun.possession noun.process noun.quantity noun.relation noun.shape noun.state "
    "noun.substance noun.time verb.body verb.change verb.cognition verb.communication "
    "verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion "
    "verb.perception verb.possession verb.social verb.stative verb.weather adj.ppl"
).split()
# The first usage example: a double quote opening the gloss or following `;` or `:`.
# Quotes inside a definition (`in the phrase "make strides"`) follow a word and stay.
_FIRST_EXAMPLE = re.compile(r'(?:^|[;:])\s*"')


class WordNetError(Exception):
    """WordNet's data files are missing or not in the expected format."""


@dataclass(frozen=True)
class Synset:
    offset: str  # byte offset in its data file: the synset's id within its part of speech
    part_of_speech: str  # noun, verb, adj or adv (the data file's)
    supersense: str  # the lexicographer file's name, e.g. noun.animal
    definition: str
    examples: tuple[str, ...]
    lemmas: tuple[str, ...] = ()  # the synset's words as written there: `domestic_dog`, `Canis_familiaris`


def split_gloss(gloss: str) -> tuple[str, tuple[str, ...]]:
    """A gloss's definition and its quoted usage examples.

    >>> split_gloss('a tangible entity; "it was full of rackets"; "a bat"')
    ('a tangible entity', ('it was full of rackets', 'a bat'))
    """
    gloss = gloss.strip()
    found = _FIRST_EXAMPLE.search(gloss)
    if found is None:
        return gloss.rstrip("; "), ()
    definition = gloss[:found.start()].rstrip("; ")
    examples = tuple(part.strip().strip(";:").strip().strip('"').strip()
                     for part in re.split(r'"\s*[;:,]?\s*"', gloss[found.end() - 1:]))
    return definition, tuple(example for example in examples if example)


def parse_data_line(line: str, part_of_speech: str) -> Synset | None:
    """One line of a WordNet data file (wndb(5WN)); None for the license header's lines.

    `offset lex_filenum ss_type w_cnt word lex_id ... p_cnt ptr... [frames] | gloss`
    """
    if line.startswith(" ") or not line.strip():
        return None  # the license text opens every data file with two spaces
    head, bar, gloss = line.partition(" | ")
    fields = head.split()
    if not bar or len(fields) < 3 or not fields[0].isdigit() or not fields[1].isdigit():
        raise WordNetError(f"not a WordNet data line: {line[:60]!r}")
    number = int(fields[1])
    if number >= len(LEXNAMES):
        raise WordNetError(f"lexicographer file number {number} is not in lexnames: {line[:60]!r}")
    definition, examples = split_gloss(gloss)
    try:  # w_cnt, two hexadecimal digits, then each word with its lex_id
        lemmas = tuple(fields[4:4 + 2 * int(fields[3], 16):2])
    except (IndexError, ValueError):
        raise WordNetError(f"not a WordNet data line (word count): {line[:60]!r}") from None
    return Synset(fields[0], part_of_speech, LEXNAMES[number], definition, examples, lemmas)


def read_synsets(lines: Iterable[str], part_of_speech: str) -> Iterator[Synset]:
    """The synsets of one data file's lines."""
    for line in lines:
        synset = parse_data_line(line, part_of_speech)
        if synset is not None and synset.definition:
            yield synset


def read_wordnet(wordnet: Path, parts_of_speech: Iterable[str]) -> list[Synset]:
    """Every synset of these parts of speech' data files in `wordnet`, in file order.

    Raises:
        WordNetError: a data file is missing or malformed.
    """
    synsets: list[Synset] = []
    for part_of_speech in parts_of_speech:
        path = Path(wordnet) / f"data.{part_of_speech}"
        if not path.is_file():
            raise WordNetError(f"{path} not found: WordNet 3.0's database is not installed; {INSTALL_HINT}")
        with path.open(encoding="utf-8") as lines:
            synsets.extend(read_synsets(lines, part_of_speech))
    return synsets


def split_of(definition: str) -> str:
    """train (80%), validation (10%) or test (10%), from the definition's sha256."""
    bucket = int.from_bytes(hashlib.sha256(definition.encode("utf-8")).digest()[:8], "big") % 10
    return "train" if bucket < 8 else "validation" if bucket == 8 else "test"


def hash_order(text: str) -> bytes:
    return hashlib.sha256(("order:" + text).encode("utf-8")).digest()


def make_rows(synsets: Iterable[Synset], *, examples: bool = False) -> dict[str, list[tuple[str, str]]]:
    """(text, label) rows per split, each (definition, supersense) once, in hash order."""
    splits: dict[str, dict[tuple[str, str], None]] = {name: {} for name in SPLITS}
    for synset in synsets:
        text = synset.definition
        if examples and synset.examples:
            text += "; " + "; ".join(f'"{example}"' for example in synset.examples)
        splits[split_of(synset.definition)].setdefault((text, synset.supersense))
    return {name: sorted(rows, key=lambda row: hash_order(row[0] + "\t" + row[1]))
            for name, rows in splits.items()}


def subsample(rows: list[tuple[str, str]], limit: int | None) -> list[tuple[str, str]]:
    """At most `limit` rows, each label's share kept (largest remainder), each label at least
    once while the limit allows; rows keep their (hash) order within a label."""
    if limit is None or len(rows) <= limit:
        return rows
    by_label: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for row in rows:
        by_label[row[1]].append(row)
    labels = sorted(by_label, key=lambda label: (-len(by_label[label]), label))
    exact = {label: limit * len(by_label[label]) / len(rows) for label in labels}
    quota = {label: max(1, int(exact[label])) for label in labels}
    spare = limit - sum(quota.values())
    for label in sorted(labels, key=lambda label: exact[label] - int(exact[label]), reverse=True):
        if spare <= 0:
            break
        if quota[label] < len(by_label[label]):
            quota[label] += 1
            spare -= 1
    while spare < 0:  # the floors of one overshot: the largest give back first, then the rarest
        largest = max(labels, key=lambda label: quota[label])
        label = largest if quota[largest] > 1 else next(label for label in reversed(labels) if quota[label])
        quota[label] -= 1
        spare += 1
    kept = {row for label in labels for row in by_label[label][:quota[label]]}
    return [row for row in rows if row in kept]


def build(wordnet: Path, out: Path, *, parts_of_speech: Iterable[str] = ("noun", "verb"),
          examples: bool = False, max_train: int | None = None,
          max_eval: int | None = None) -> dict[str, dict]:
    """Write out/train.csv, validation.csv, test.csv; returns each split's row and label counts
    (and, for evaluation splits, how many rows were dropped for a label training lacks)."""
    rows = make_rows(read_wordnet(wordnet, parts_of_speech), examples=examples)
    rows["train"] = subsample(rows["train"], max_train)
    known = {label for _, label in rows["train"]}
    summary: dict[str, dict] = {}
    out.mkdir(parents=True, exist_ok=True)
    for name in SPLITS:
        dropped = 0
        if name != "train":
            kept = [row for row in rows[name] if row[1] in known]
            dropped = len(rows[name]) - len(kept)
            rows[name] = subsample(kept, max_eval)
        with (out / f"{name}.csv").open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["text", "label"])
            writer.writerows(rows[name])
        summary[name] = {"rows": len(rows[name]), "labels": len(Counter(label for _, label in rows[name])),
                         "dropped_unknown_label": dropped}
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for train.csv, validation.csv, test.csv")
    parser.add_argument("--wordnet", type=Path, default=WORDNET, help=f"WordNet's dict folder (default {WORDNET})")
    parser.add_argument("--parts-of-speech", nargs="+", choices=PARTS_OF_SPEECH, default=["noun", "verb"])
    parser.add_argument("--examples", action="store_true", help="keep the quoted usage examples in the text")
    parser.add_argument("--max-train", type=int, default=None, help="subsample training to N rows (per-label shares kept)")
    parser.add_argument("--max-eval", type=int, default=None, help="subsample validation and test to N rows each")
    args = parser.parse_args(argv)
    for name in ("max_train", "max_eval"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    try:
        summary = build(args.wordnet, args.out, parts_of_speech=args.parts_of_speech, examples=args.examples,
                        max_train=args.max_train, max_eval=args.max_eval)
    except WordNetError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for name, counts in summary.items():
        dropped = f", {counts['dropped_unknown_label']} dropped (label not in train)" if counts["dropped_unknown_label"] else ""
        print(f"{args.out / (name + '.csv')}: {counts['rows']:,} rows, {counts['labels']} labels{dropped}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
