"""A Chinese reading-comprehension set from classical poems: a few poems as the context, and
questions whose answers are spans of it.

Debian's `fortunes-zh` installs 唐诗三百首 (313 Tang poems, `tang300`) and 宋诗一百首 (95 Song
poems, `song100`) as fortune files (`apt-get install -y fortunes-zh`; /usr/share/games/fortunes):
entries between `%` lines, each a coloured title line (`《感遇・其一》` or `题目:《塞上》`), an
author line (`作者：张九龄`, `作者:柳开（９４６－９９９）`) and the poem's lines, some poems in
parts headed 其一, 其二, some after a prose preface (a title ending in 并序). A context is 2 to 4
poems of different authors, each written as

    《感遇・其一》
    作者：张九龄
    兰叶春葳蕤，桂华秋皎洁。
    ...

and the questions ask what the context says:

    《感遇・其一》的作者是谁？          → 张九龄        (author)
    「兰叶春葳蕤」出自哪首诗？          → 感遇・其一    (title)
    「兰叶春葳蕤」的下一句是什么？      → 桂华秋皎洁    (next)
    「桂华秋皎洁」的上一句是什么？      → 兰叶春葳蕤    (previous)

A 句 is a clause between punctuation marks (，。？！；： ...); next and previous stay within one
poem (one part of a poem in parts). A question is asked only where it has one reading: its cue
(the title, the line) and its answer each occur exactly once in the context, so `answer_start`
is never a guess; a title longer than MAX_TITLE characters (a few Song titles are a paragraph)
is neither asked about nor an answer. Every question about a line is asked for every line where this holds, and a
title question for TITLE_QUESTIONS lines a poem. With `--version-2`, unanswerable questions ask
the same templates about a title or a line of another poem of the split, one that occurs nowhere
in the context. Prefaces are left out (their lines are prose broken mid-sentence); entries that
cannot be read as title, author and poem are left out and counted.

    .venv/bin/python -m data_prep.poem_questions --out data/poem-qa
    .venv/bin/python -m data_prep.poem_questions --out DIR --version-2 --seed 1

Poems are split 80/10/10 by --seed; a poem is in exactly one context.
"""
from __future__ import annotations

import argparse
import random
import re
import sys
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
    occurrences,
    run_command,
    split_documents,
    unanswerable_count,
    unique_answer,
    write_splits,
)

FORTUNES = Path("/usr/share/games/fortunes")
COLLECTIONS = ("tang300", "song100")
INSTALL_HINT = "install it with `apt-get install -y fortunes-zh` or pass --fortunes DIR"
CONTEXT_POEMS = (2, 4)  # poems a context, drawn per context
TITLE_QUESTIONS = 2  # "which poem is this line from?" asked of at most this many lines a poem
MIN_CLAUSE = 3  # shorter clauses (rare) are neither cue nor answer
MAX_TITLE = 20  # longer titles (a few Song titles are a paragraph) are neither asked nor answers
KINDS = ("author", "title", "next", "previous")

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SEPARATOR = re.compile(r"^%[ \t]*$", re.M)
_TITLE = re.compile(r"^(?:题目\s*[:：]\s*)?《(?P<title>[^》]+)》")
_AUTHOR = re.compile(r"^作者\s*[:：]\s*(?P<author>.+)$")
_ASIDE = re.compile(r"[（(〔][^）)〕]*[）)〕]")  # 柳开（９４６－９９９）, 宋徽宗〔赵佶〕: dates, notes
_NAME = re.compile(r"[\u3400-\u9fff·・]{1,10}")
_PART = re.compile(r"^其[一二三四五六七八九十]+$")
_PUNCTUATION = "，。？！；：、“”‘’「」『』《》〈〉（）—…"
_LINE = re.compile(rf"[\u3400-\u9fff\U00020000-\U0003ffff{_PUNCTUATION}]+")
_CLAUSE = re.compile(rf"[^{_PUNCTUATION}\s]+")
_PREFACE = re.compile(r"[・·]?并序$")


@dataclass(frozen=True)
class Poem:
    collection: str  # the fortune file's name: tang300, song100
    title: str
    author: str
    parts: tuple[tuple[str, ...], ...]  # the poem's lines, by part (one part for most poems)

    @property
    def text(self) -> str:
        """The context's block for this poem: title, author, lines (parts headed 其一 ...)."""
        lines = [f"《{self.title}》", f"作者：{self.author}"]
        for number, part in enumerate(self.parts):
            if len(self.parts) > 1:
                lines.append("其" + ("一二三四五六七八九十"[number] if number < 10 else str(number + 1)))
            lines.extend(part)
        return "\n".join(lines)


def lines_of(poem: Poem) -> str:
    """The poem's lines, its identity for the split: a poem printed in both collections, or
    under two titles, lands in one split."""
    return "\n".join(line for part in poem.parts for line in part)


def clauses(line: str) -> list[str]:
    """The 句 of a line: the runs between punctuation marks. `兰叶春葳蕤，桂华秋皎洁。` → two."""
    return _CLAUSE.findall(line)


def split_entries(text: str) -> list[str]:
    """A fortune file's entries (the text between `%` lines), blank ones left out."""
    return [entry for entry in _SEPARATOR.split(text) if entry.strip()]


def parse_entry(entry: str, collection: str) -> Poem | str:
    """The poem of one fortune entry, or the reason it cannot be read (title, author, preface,
    lines): a word for the summary's count."""
    lines = [_ANSI.sub("", line).strip() for line in entry.strip("\n").split("\n")]
    lines = lines[next((index for index, line in enumerate(lines) if line), len(lines)):]
    title = _TITLE.match(lines[0]) if lines else None
    if title is None:
        return "title"
    author = _AUTHOR.match(lines[1]) if len(lines) > 1 else None
    name = _ASIDE.sub("", author.group("author")).strip() if author else ""
    if not _NAME.fullmatch(name):
        return "author"
    body = lines[2:]
    title_text = title.group("title").strip()
    if _PREFACE.search(title_text):  # the prose before the first blank line after it
        title_text = _PREFACE.sub("", title_text)
        start = next((index for index, line in enumerate(body) if line), len(body))
        blank = next((index for index in range(start, len(body)) if not body[index]), None)
        if blank is None:
            return "preface"
        body = body[blank:]
    parts: list[list[str]] = [[]]
    for line in body:
        if _PART.fullmatch(line):
            if parts[-1]:
                parts.append([])
        elif line:
            if not _LINE.fullmatch(line):
                return "lines"
            parts[-1].append(line)
    if not parts[-1]:
        parts.pop()
    if not parts or not title_text:
        return "lines"
    return Poem(collection, title_text, name, tuple(tuple(part) for part in parts))


def read_poems(fortunes: Path, collections: Iterable[str]) -> tuple[list[Poem], dict[str, int]]:
    """The poems of the fortune files, and how many entries were left out, by reason."""
    poems, dropped = [], Counter()
    for collection in collections:
        path = Path(fortunes) / collection
        if not path.is_file():
            raise SourceError(f"{path} not found: the Chinese fortunes are not installed; {INSTALL_HINT}")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise SourceError(f"cannot read {path}: {error}") from None
        for entry in split_entries(text):
            poem = parse_entry(entry, collection)
            if isinstance(poem, Poem):
                poems.append(poem)
            else:
                dropped[poem] += 1
    return poems, dict(sorted(dropped.items()))


def line_questions(context: str, poem: Poem, rng: random.Random, dropped: Counter) -> list[Question]:
    """The next, previous and title questions on a poem's lines that have one reading."""
    questions = []
    title_cues = []
    for part in poem.parts:
        sequence = [clause for line in part for clause in clauses(line)]
        for index, cue in enumerate(sequence):
            if len(cue) < MIN_CLAUSE or occurrences(context, cue) != 1:
                dropped["cue_not_unique_or_short"] += (index > 0) + (index < len(sequence) - 1)
                continue
            title_cues.append(cue)
            for kind, neighbour, word in (("next", index + 1, "下"), ("previous", index - 1, "上")):
                if not 0 <= neighbour < len(sequence):
                    continue
                answer = unique_answer(context, sequence[neighbour]) if len(sequence[neighbour]) >= MIN_CLAUSE else None
                if answer is None:
                    dropped["answer_not_unique_or_short"] += 1
                else:
                    questions.append(Question(f"「{cue}」的{word}一句是什么？", kind, (answer,)))
    if len(poem.title) > MAX_TITLE:
        dropped["title_too_long"] += 1
    elif (title := unique_answer(context, poem.title)) is None:
        dropped["answer_not_unique_or_short"] += 1
    else:
        for cue in rng.sample(title_cues, min(TITLE_QUESTIONS, len(title_cues))):
            questions.append(Question(f"「{cue}」出自哪首诗？", "title", (title,)))
    return questions


def author_question(context: str, poem: Poem, dropped: Counter) -> list[Question]:
    """《TITLE》的作者是谁？ where the title and the author's name each occur once (and the title
    is short enough to ask about: a paragraph-long title would crowd the context out of a
    window)."""
    if len(poem.title) > MAX_TITLE:
        dropped["title_too_long"] += 1
        return []
    answer = unique_answer(context, poem.author)
    if occurrences(context, f"《{poem.title}》") != 1 or answer is None:
        dropped["author_not_unique"] += 1
        return []
    return [Question(f"《{poem.title}》的作者是谁？", "author", (answer,))]


def unanswerable_questions(context: str, count: int, pool: Sequence[Poem], rng: random.Random) -> list[Question]:
    """`count` questions (fewer if none fits in 20 draws each) about a title or a line of a
    poem from `pool` that occurs nowhere in the context."""
    questions = []
    for _ in range(count):
        for _attempt in range(20):
            poem = pool[rng.randrange(len(pool))]
            kind = rng.choice(KINDS)
            if kind == "author":
                if len(poem.title) <= MAX_TITLE and f"《{poem.title}》" not in context:
                    questions.append(Question(f"《{poem.title}》的作者是谁？", kind, ()))
                    break
                continue
            cue = rng.choice([clause for part in poem.parts for line in part for clause in clauses(line)])
            if len(cue) >= MIN_CLAUSE and cue not in context:
                template = {"title": "「{}」出自哪首诗？", "next": "「{}」的下一句是什么？",
                            "previous": "「{}」的上一句是什么？"}[kind]
                questions.append(Question(template.format(cue), kind, ()))
                break
    return questions


def make_passages(poems: Sequence[Poem], rng: random.Random, *, dropped: Counter,
                  unanswerable_rng: random.Random | None = None,
                  unanswerable_share: float = UNANSWERABLE_SHARE) -> list[Passage]:
    """One split's poems as contexts of 2–4 poems (different authors and titles) with their
    questions, in a shuffled order; with `unanswerable_rng` (SQuAD v2.0), unanswerable questions
    drawn with it mixed in."""
    poems = list(poems)
    rng.shuffle(poems)
    passages = []
    for group in group_documents(poems, CONTEXT_POEMS, rng, lambda poem: {poem.author, poem.title}):
        context = "\n\n".join(poem.text for poem in group)
        questions = [question for poem in group for question in
                     author_question(context, poem, dropped) + line_questions(context, poem, rng, dropped)]
        if not questions:
            dropped["context_without_questions"] += 1
            continue
        rng.shuffle(questions)
        if unanswerable_rng is not None:
            count = unanswerable_count(len(questions), unanswerable_share, unanswerable_rng)
            questions = mix_in(questions, unanswerable_questions(context, count, poems, unanswerable_rng),
                               unanswerable_rng)
        passages.append(Passage("、".join(f"《{poem.title}》" for poem in group), context, len(group), questions))
    return passages


def build(fortunes: Path, out: Path, *, seed: int = 0, max_train: int | None = None, max_eval: int | None = None,
          version_2: bool = False, unanswerable_share: float = UNANSWERABLE_SHARE,
          collections: Iterable[str] = COLLECTIONS) -> dict[str, Any]:
    """Write out/train.json, dev.json, test.json (SQuAD v1.1, or v2.0 with `version_2`) and
    out/summary.json from the fortune files of `collections` in the `fortunes` folder; returns
    the summary.

    Raises:
        SourceError: a fortune file is missing or unreadable (the message says how to install it).
    """
    collections = list(collections)
    poems, unreadable = read_poems(fortunes, collections)
    dropped: Counter = Counter()
    splits = {name: make_passages(members, random.Random(f"{seed}:{name}"), dropped=dropped,
                                  unanswerable_rng=random.Random(f"{seed}:{name}:unanswerable") if version_2 else None,
                                  unanswerable_share=unanswerable_share)
              for name, members in split_documents(poems, lines_of, seed).items()}
    about = {"source": f"fortunes-zh ({Path(fortunes)}: {', '.join(collections)})", "seed": seed,
             "parsed": {"poems": len(poems), "by_collection": dict(Counter(poem.collection for poem in poems)),
                        "entries_left_out": unreadable},
             "dropped_questions": dict(sorted(dropped.items()))}
    return write_splits(Path(out), splits, prefix="poems", version_2=version_2, max_train=max_train,
                        max_eval=max_eval, about=about)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_options(parser)
    parser.add_argument("--fortunes", type=Path, default=FORTUNES, help=f"the fortune files' folder (default {FORTUNES})")
    parser.add_argument("--collections", nargs="+", default=list(COLLECTIONS), help="fortune files to read (default tang300 song100)")
    return run_command(parser, argv, lambda args: build(
        args.fortunes, args.out, seed=args.seed, max_train=args.max_train, max_eval=args.max_eval,
        version_2=args.version_2, unanswerable_share=args.unanswerable_share, collections=args.collections))


if __name__ == "__main__":
    sys.exit(main())
