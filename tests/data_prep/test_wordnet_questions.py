"""data_prep.wordnet_questions on lines in WordNet's data-file format (wndb(5WN)); no WordNet
installation needed, except for the slow test on the installed one."""
from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from bertpre.finetune.qa_data import read_qa_file
from bertpre.finetune.qa_seeds import QASettings, load_qa_task
from data_prep.reading_comprehension import Answer
from data_prep.wordnet_questions import (
    build,
    entry_questions,
    entry_text,
    main,
    make_passages,
    mentions,
)
from data_prep.wordnet_supersenses import parse_data_line

DOG = ("02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 001 @ 02083346 n 0000 | a member of the "
       'genus Canis; "the dog barked all night"; "a dog\'s life"  \n')
CAT = "02121620 05 n 01 cat 0 000 | feline mammal usually having thick soft fur  \n"
PUPPY = "01322604 05 n 01 puppy 0 001 @ 02084071 n 0000 | a young dog  \n"
TRAVEL = ("01835496 38 v 03 travel 0 go 0 move 0 001 @ 01831531 v 0000 01 + 02 00 | change location; "
          'move, travel, or proceed, also metaphorically; "How fast does your new car go?"  \n')
LICENSE = "  1 This software and database is being provided to you, the LICENSEE, by  \n"


def synset(line: str, part_of_speech: str = "noun"):
    return parse_data_line(line, part_of_speech)


def test_a_synsets_words_are_read_from_its_hexadecimal_count():
    assert synset(DOG).lemmas == ("dog", "domestic_dog", "Canis_familiaris")
    words = " ".join(f"w{number} 0" for number in range(11))
    assert synset(f"00000001 05 n 0b {words} 000 | eleven words  \n").lemmas == tuple(f"w{n}" for n in range(11))


def test_an_entry_reads_as_a_glossary_line():
    assert entry_text(synset(DOG)) == (
        "dog (also domestic dog, Canis familiaris): a member of the genus Canis. "
        "For example, \"the dog barked all night\" and \"a dog's life\".")
    assert entry_text(synset(CAT)) == "cat: feline mammal usually having thick soft fur."
    assert entry_text(synset(TRAVEL, "verb")) == (
        "travel (also go, move): change location; move, travel, or proceed, also metaphorically. "
        'For example, "How fast does your new car go?".')


def test_mentions_are_whole_words_in_any_case():
    assert mentions("Dog days; a hotdog; dogs", "dog") == 1
    assert mentions("the genus Canis", "canis") == 1


def test_questions_point_at_their_entry_once():
    synsets = [synset(CAT), synset(DOG)]
    entries = [entry_text(s) for s in synsets]
    context = " ".join(entries)
    dropped = Counter()
    cat = entry_questions(context, entries, 0, synsets[0], dropped)
    assert [(q.question, q.answers) for q in cat] == [
        ("What does cat mean?", (Answer("feline mammal usually having thick soft fur", 5),))]  # after "cat: "
    dog = entry_questions(context, entries, 1, synsets[1], dropped)
    assert [(q.kind, q.question, [a.text for a in q.answers]) for q in dog] == [
        ("definition", "What does dog mean?", ["a member of the genus Canis"]),
        ("example", "Give an example of dog in use.", ["the dog barked all night", "a dog's life"]),
        ("synonym", "What is another word for dog?", ["domestic dog", "Canis familiaris"]),
    ]
    for question in dog:
        for answer in question.answers:
            assert context[answer.start:answer.start + len(answer.text)] == answer.text
    assert dropped == {}


def test_a_word_named_in_another_entry_is_not_asked_about():
    synsets = [synset(DOG), synset(PUPPY)]  # "a young dog": the cue dog is in two entries
    entries = [entry_text(s) for s in synsets]
    context = " ".join(entries)
    dropped = Counter()
    assert entry_questions(context, entries, 0, synsets[0], dropped) == []
    assert dropped == {"cue_in_another_entry": 3}
    puppy = entry_questions(context, entries, 1, synsets[1], dropped)
    assert [q.question for q in puppy] == ["What does puppy mean?"]


def test_an_answer_found_twice_is_not_asked():
    twice = synset("00000002 05 n 02 hound 0 hunting_dog 0 000 | a hunting dog  \n")  # synonym inside the definition
    context = entry_text(twice)
    dropped = Counter()
    questions = entry_questions(context, [context], 0, twice, dropped)
    assert [q.kind for q in questions] == ["definition"] and dropped == {"answer_not_unique": 1}


def test_verbs_ask_what_it_means_to():
    travel = synset(TRAVEL, "verb")
    context = entry_text(travel)
    questions = entry_questions(context, [context], 0, travel, Counter())
    assert questions[0].question == "What does it mean to travel?"


def fixture_lines(count: int, file_number: int, pos: str, start: int) -> list[str]:
    """Synsets in the data-file format with distinct words, definitions and examples."""
    lines = []
    for number in range(start, start + count):
        words = f"word{number} 0 other_word{number} 0" if number % 2 else f"word{number} 0"
        example = f'; "the word{number} is used here"' if number % 3 == 0 else ""
        lines.append(f"{number:08d} {file_number:02d} {pos} {'02' if number % 2 else '01'} {words} 000 "
                     f"| meaning number {number} of the test{example}  \n")
    return lines


@pytest.fixture
def wordnet(tmp_path) -> Path:
    folder = tmp_path / "dict"
    folder.mkdir()
    nouns = [LICENSE] + fixture_lines(60, 5, "n", 1) + fixture_lines(40, 6, "n", 100)
    (folder / "data.noun").write_text("".join(nouns), encoding="utf-8")
    (folder / "data.verb").write_text("".join([LICENSE] + fixture_lines(30, 38, "v", 200)), encoding="utf-8")
    return folder


def squad_answers(path: Path):
    document = json.loads(path.read_text(encoding="utf-8"))
    for article in document["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield paragraph["context"], qa


def test_build_writes_squad_files_bertpre_reads(wordnet, tmp_path):
    summary = build(wordnet, tmp_path / "out", seed=3)
    for name in ("train", "dev", "test"):
        path = tmp_path / "out" / f"{name}.json"
        assert json.loads(path.read_text(encoding="utf-8"))["version"] == "v1.1"
        checked = 0
        for context, qa in squad_answers(path):
            for answer in qa["answers"]:
                assert context[answer["answer_start"]:answer["answer_start"] + len(answer["text"])] == answer["text"]
                assert context.count(answer["text"]) == 1
                checked += 1
        assert checked > 0
        assert len(read_qa_file(path)) == summary["splits"][name]["questions"]
    task = load_qa_task(tmp_path / "out" / "train.json", tmp_path / "out" / "dev.json",
                        tmp_path / "out" / "test.json", QASettings())  # as `bertpre finetune --task qa` reads them
    assert len(task.train) == summary["splits"]["train"]["questions"] and task.split == "test"
    assert sum(split["documents"] for split in summary["splits"].values()) == summary["parsed"]["synsets"] == 130
    assert json.loads((tmp_path / "out" / "summary.json").read_text(encoding="utf-8")) == summary


def test_a_synset_is_in_one_split_and_one_context(wordnet, tmp_path):
    build(wordnet, tmp_path / "out", seed=3)
    seen: dict[str, str] = {}
    for name in ("train", "dev", "test"):
        contexts = {context for context, _ in squad_answers(tmp_path / "out" / f"{name}.json")}
        for context in contexts:
            for number in range(1, 230):
                if f"meaning number {number} of" in context:
                    assert number not in seen, f"synset {number} in {seen[number]} and {name}"
                    seen[number] = name
    assert len(seen) == 130


def test_contexts_are_drawn_from_one_lexicographer_file():
    synsets = [parse_data_line(line, "noun") for line in fixture_lines(20, 5, "n", 1) + fixture_lines(20, 6, "n", 100)]
    passages = make_passages(synsets, random.Random(0), dropped=Counter())
    for passage in passages:
        numbers = [number for number in range(1, 130) if f"meaning number {number} of" in passage.context]
        assert 1 <= len(numbers) <= 10 and len({number < 100 for number in numbers}) == 1
        assert passage.title in ("WordNet noun.animal", "WordNet noun.artifact")


def test_the_same_seed_writes_the_same_files(wordnet, tmp_path):
    build(wordnet, tmp_path / "a", seed=5)
    build(wordnet, tmp_path / "b", seed=5)
    build(wordnet, tmp_path / "c", seed=6)
    for name in ("train.json", "dev.json", "test.json", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "train.json").read_bytes() != (tmp_path / "c" / "train.json").read_bytes()


def test_version_2_adds_unanswerable_questions_about_absent_words(wordnet, tmp_path):
    summary = build(wordnet, tmp_path / "out", seed=3, version_2=True, unanswerable_share=0.4)
    train = summary["splits"]["train"]
    assert summary["version"] == "v2.0" and 0.25 < train["unanswerable"] / train["questions"] < 0.55
    for context, qa in squad_answers(tmp_path / "out" / "train.json"):
        assert qa["is_impossible"] == (not qa["answers"])
        if qa["is_impossible"]:
            word = qa["question"].removeprefix("What does it mean to ").removeprefix("What does ") \
                .removeprefix("Give an example of ").removeprefix("What is another word for ") \
                .removesuffix(" mean?").removesuffix(" in use.").removesuffix("?")
            assert word.startswith("word") and mentions(context, word) == 0
    examples = read_qa_file(tmp_path / "out" / "dev.json", version_2_with_negative=True)
    assert sum(example.is_impossible for example in examples) == summary["splits"]["dev"]["unanswerable"]


def answerable(path: Path) -> list[tuple[str, str, list]]:
    return [(context, qa["question"], qa["answers"]) for context, qa in squad_answers(path) if qa["answers"]]


def test_version_2_keeps_the_contexts_and_answerable_questions_of_version_1(wordnet, tmp_path):
    build(wordnet, tmp_path / "v1", seed=4)
    build(wordnet, tmp_path / "v2", seed=4, version_2=True)
    for name in ("train.json", "dev.json", "test.json"):
        assert answerable(tmp_path / "v2" / name) == answerable(tmp_path / "v1" / name)


def test_caps_limit_questions_per_split(wordnet, tmp_path):
    summary = build(wordnet, tmp_path / "out", seed=3, max_train=25, max_eval=4)
    assert [summary["splits"][name]["questions"] for name in ("train", "dev", "test")] == [25, 4, 4]


def test_a_missing_wordnet_is_one_line_naming_the_apt_package(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "out"), "--wordnet", str(tmp_path / "absent")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "apt-get install -y wordnet-base" in error
    assert not (tmp_path / "out").exists()


def test_the_command_prints_the_counts(wordnet, tmp_path, capsys):
    assert main(["--out", str(tmp_path / "out"), "--wordnet", str(wordnet), "--max-eval", "3"]) == 0
    printed = capsys.readouterr().out
    assert f"{tmp_path / 'out' / 'dev.json'}: 3 questions" in printed and "summary.json" in printed


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/share/wordnet/data.noun").is_file(), reason="wordnet-base is not installed")
def test_the_installed_wordnet_gives_a_set(tmp_path):
    summary = build(Path("/usr/share/wordnet"), tmp_path, max_train=2000, max_eval=500, version_2=True)
    assert summary["parsed"]["synsets"] > 90_000
    assert [summary["splits"][name]["questions"] for name in ("train", "dev", "test")] == [2000, 500, 500]
    assert len(read_qa_file(tmp_path / "test.json", version_2_with_negative=True)) == 500
