"""An English reading-comprehension set from WordNet: glossary paragraphs and questions whose
answers are spans of them.

Debian's `wordnet-base` installs WordNet 3.0 (`apt-get install -y wordnet-base`). Each synset
has its words, a definition and, for about a fifth, quoted usage examples. A context is a short
glossary of 6 to 10 synsets from one lexicographer file (noun.animal, verb.motion, ...), so its
entries are on one topic and compete with each other, each entry written out as text:

    dog (also domestic dog, Canis familiaris): a member of the genus Canis. For example, "the dog barked all night".

and the questions ask what one entry says:

    What does dog mean?                  → a member of the genus Canis             (definition)
    Give an example of dog in use.       → the dog barked all night                (example)
    What is another word for dog?        → domestic dog, or Canis familiaris       (synonym)

(verbs: "What does it mean to travel?"). A question is asked only where it has one reading:
the word it names occurs (as a whole word, any case) in that entry alone, and each answer occurs
exactly once in the context, so `answer_start` is never a guess; an answer of more than
MAX_ANSWER_WORDS words is not asked. With `--version-2`, unanswerable questions ask the same
templates about a word of another synset of the split (the same lexicographer file where one
fits) that occurs nowhere in the context.

    .venv/bin/python -m data_prep.wordnet_questions --out data/wordnet-qa
    .venv/bin/python -m data_prep.wordnet_questions --out DIR --max-train 8000 --max-eval 1000 --version-2

Synsets are split 80/10/10 by --seed, synsets sharing a definition kept together; a synset's
entry is in exactly one context.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from data_prep.reading_comprehension import (
    UNANSWERABLE_SHARE,
    Passage,
    Question,
    SourceError,
    add_common_options,
    group_documents,
    mix_in,
    run_command,
    split_documents,
    unanswerable_count,
    unique_answer,
    write_splits,
)
from data_prep.wordnet_supersenses import INSTALL_HINT, WORDNET, Synset, WordNetError, read_synsets

PARTS_OF_SPEECH = ("noun", "verb")
CONTEXT_SYNSETS = (6, 10)  # entries a glossary paragraph, drawn per context
MAX_EXAMPLES = 3  # usage examples written per entry
MAX_ANSWER_WORDS = 25  # longer answers are not asked (bertpre's --max-answer-length is 30 tokens)
KINDS = ("definition", "example", "synonym")


def word(lemma: str) -> str:
    """A WordNet lemma as it is written in text: `domestic_dog` → `domestic dog`."""
    return lemma.replace("_", " ")


def words_of(synset: Synset) -> list[str]:
    """The synset's words in text form, each once, in WordNet's order."""
    return list(dict.fromkeys(word(lemma) for lemma in synset.lemmas))


def names_of(synset: Synset) -> set[str]:
    """The words a context must not hold twice: two entries for `bank` would make "What does
    bank mean?" ambiguous."""
    return {name.lower() for name in words_of(synset)}


def entry_text(synset: Synset) -> str:
    """One glossary entry: `head (also a, b): definition. For example, "x" and "y".`"""
    head, *others = words_of(synset)
    text = head + (f" (also {', '.join(others)})" if others else "") + ": " + synset.definition
    if not text.endswith((".", "!", "?")):
        text += "."
    examples = [f'"{example}"' for example in synset.examples[:MAX_EXAMPLES]]
    if examples:
        listed = examples[0] if len(examples) == 1 else ", ".join(examples[:-1]) + " and " + examples[-1]
        text += f" For example, {listed}."
    return text


def mentions(text: str, name: str) -> int:
    """How many times `name` occurs in `text` as a whole word (or words), in any case."""
    return len(re.findall(r"(?<!\w)" + re.escape(name) + r"(?!\w)", text, flags=re.IGNORECASE))


def question_text(kind: str, name: str, part_of_speech: str) -> str:
    """The question of template `kind` about the word `name`."""
    if kind == "definition":
        return f"What does it mean to {name}?" if part_of_speech == "verb" else f"What does {name} mean?"
    if kind == "example":
        return f"Give an example of {name} in use."
    return f"What is another word for {name}?"


def entry_questions(context: str, entries: Sequence[str], index: int, synset: Synset,
                    dropped: Counter) -> list[Question]:
    """The questions about entry `index` of a context that have one reading (see the module's
    docstring); what is not asked is counted in `dropped` by reason."""
    head, *others = words_of(synset)
    candidates = {kind: texts for kind, texts in (
        ("definition", [synset.definition]), ("example", list(synset.examples[:MAX_EXAMPLES])),
        ("synonym", others)) if texts}  # no example, no other word: nothing to ask
    if any(mentions(entry, head) for position, entry in enumerate(entries) if position != index):
        dropped["cue_in_another_entry"] += len(candidates)
        return []
    questions = []
    for kind in candidates:
        texts = [text for text in candidates[kind] if len(text.split()) <= MAX_ANSWER_WORDS]
        if len(texts) < len(candidates[kind]):
            dropped["answer_too_long"] += len(candidates[kind]) - len(texts)
        answers = [answer for text in texts if (answer := unique_answer(context, text)) is not None]
        if len(answers) < len(texts):
            dropped["answer_not_unique"] += len(texts) - len(answers)
        if answers:
            questions.append(Question(question_text(kind, head, synset.part_of_speech), kind, tuple(answers)))
    return questions


def unanswerable_questions(context: str, count: int, pool: Sequence[Synset], rng: random.Random) -> list[Question]:
    """`count` questions (fewer if none fits in 20 draws each) about the head word of a synset
    from `pool`, a word that occurs nowhere in the context."""
    questions = []
    for _ in range(count):
        for _attempt in range(20):
            synset = pool[rng.randrange(len(pool))]
            head = words_of(synset)[0]
            if not mentions(context, head):
                kind = rng.choice(KINDS)
                questions.append(Question(question_text(kind, head, synset.part_of_speech), kind, ()))
                break
    return questions


def make_passages(synsets: Sequence[Synset], rng: random.Random, *, dropped: Counter,
                  unanswerable_rng: random.Random | None = None,
                  unanswerable_share: float = UNANSWERABLE_SHARE) -> list[Passage]:
    """One split's synsets as glossary contexts with their questions, in a shuffled order;
    with `unanswerable_rng` (SQuAD v2.0), unanswerable questions drawn with it mixed in."""
    by_file: dict[str, list[Synset]] = defaultdict(list)
    for synset in synsets:
        by_file[synset.supersense].append(synset)
    passages = []
    for supersense in sorted(by_file):
        members = by_file[supersense]
        rng.shuffle(members)
        for group in group_documents(members, CONTEXT_SYNSETS, rng, names_of):
            entries = [entry_text(synset) for synset in group]
            context = " ".join(entries)
            questions = [question for index, synset in enumerate(group)
                         for question in entry_questions(context, entries, index, synset, dropped)]
            if not questions:
                dropped["context_without_questions"] += 1
                continue
            rng.shuffle(questions)
            if unanswerable_rng is not None:  # words of the context's own file where it has others: on topic
                pool = members if len(members) > len(group) else synsets
                count = unanswerable_count(len(questions), unanswerable_share, unanswerable_rng)
                questions = mix_in(questions, unanswerable_questions(context, count, pool, unanswerable_rng),
                                   unanswerable_rng)
            passages.append(Passage(f"WordNet {supersense}", context, len(group), questions))
    rng.shuffle(passages)
    return passages


def read_wordnet(wordnet: Path, parts_of_speech: Iterable[str]) -> list[Synset]:
    """The synsets of WordNet's data files that have a definition and a word."""
    synsets = []
    for part_of_speech in parts_of_speech:
        path = Path(wordnet) / f"data.{part_of_speech}"
        if not path.is_file():
            raise SourceError(f"{path} not found: WordNet 3.0's database is not installed; {INSTALL_HINT}")
        try:
            with path.open(encoding="utf-8") as lines:
                synsets.extend(synset for synset in read_synsets(lines, part_of_speech) if synset.lemmas)
        except WordNetError as error:
            raise SourceError(f"{path}: {error}") from None
    return synsets


def build(wordnet: Path, out: Path, *, seed: int = 0, max_train: int | None = None, max_eval: int | None = None,
          version_2: bool = False, unanswerable_share: float = UNANSWERABLE_SHARE,
          parts_of_speech: Iterable[str] = PARTS_OF_SPEECH) -> dict[str, Any]:
    """Write out/train.json, dev.json, test.json (SQuAD v1.1, or v2.0 with `version_2`) and
    out/summary.json from WordNet's dict folder; returns the summary.

    Raises:
        SourceError: WordNet's data files are missing or unreadable (the message says how to
            install them).
    """
    synsets = read_wordnet(wordnet, parts_of_speech)
    dropped: Counter = Counter()
    splits = {name: make_passages(members, random.Random(f"{seed}:{name}"), dropped=dropped,
                                  unanswerable_rng=random.Random(f"{seed}:{name}:unanswerable") if version_2 else None,
                                  unanswerable_share=unanswerable_share)
              for name, members in split_documents(synsets, lambda synset: synset.definition, seed).items()}
    about = {"source": f"WordNet 3.0 ({Path(wordnet)}: data.{', data.'.join(parts_of_speech)})", "seed": seed,
             "parsed": {"synsets": len(synsets)},
             "dropped_questions": dict(sorted(dropped.items()))}
    return write_splits(Path(out), splits, prefix="wordnet", version_2=version_2, max_train=max_train,
                        max_eval=max_eval, about=about)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_options(parser)
    parser.add_argument("--wordnet", type=Path, default=WORDNET, help=f"WordNet's dict folder (default {WORDNET})")
    return run_command(parser, argv, lambda args: build(
        args.wordnet, args.out, seed=args.seed, max_train=args.max_train, max_eval=args.max_eval,
        version_2=args.version_2, unanswerable_share=args.unanswerable_share))


if __name__ == "__main__":
    sys.exit(main())
