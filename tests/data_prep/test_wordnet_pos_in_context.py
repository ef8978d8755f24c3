"""data_prep.wordnet_pos_in_context on hand-written lines in WordNet's data-file format
(wndb(5WN)); no WordNet installation needed."""
from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from data_prep.wordnet_pos_in_context import build, main, make_rows, split_of_word, uses
from data_prep.wordnet_supersenses import parse_data_line

SPLITS = ("train", "validation", "test")
LICENSE = "  1 This software and database is being provided to you, the LICENSEE, by  \n"
FILES = {"noun": 5, "verb": 38, "adj": 0, "adv": 2}  # a lexicographer file of each part of speech
LETTER = {"noun": "n", "verb": "v", "adj": "a", "adv": "r"}


def data_line(offset: int, part_of_speech: str, words: list[str], gloss: str, letter: str | None = None) -> str:
    return (f"{offset:08d} {FILES[part_of_speech]:02d} {letter or LETTER[part_of_speech]} {len(words):02x} "
            + " ".join(f"{word} 0" for word in words) + f" 000 | {gloss}  \n")


def wordnet_lines() -> dict[str, list[str]]:
    """Forty words used as a noun and as a verb; plus the cases each test names."""
    lines = {part: [LICENSE] for part in FILES}
    for number in range(40):
        word = f"word{number}"
        lines["noun"].append(data_line(100 + number, "noun", [word], f'a thing of kind {number}; "the {word} fell"'))
        lines["verb"].append(data_line(100 + number, "verb", [word], f'act in way {number}; "{word} the rod"'))
    lines["noun"] += [
        data_line(900, "noun", ["bend"], 'a curve; "a Bend in the road"; "bending is hard"'),
        data_line(901, "noun", ["dog"], 'a canine; "the dog barked"'),  # dog: a noun only, dropped
        data_line(902, "noun", ["fast"], 'a period without food; "fast and pray"'),  # also a verb's example
    ]
    lines["verb"] += [
        data_line(900, "verb", ["bend"], 'form a curve; "bend the rod"'),
        data_line(902, "verb", ["fast"], 'abstain from food; "fast and pray"'),
    ]
    lines["adj"] += [data_line(900, "adj", ["up"], 'being above; "the sun is up"', letter="s")]  # a satellite
    lines["adv"] += [data_line(900, "adv", ["up"], 'upward; "look up"')]
    return lines


def write_wordnet(tmp_path) -> object:
    folder = tmp_path / "dict"
    folder.mkdir()
    for part, lines in wordnet_lines().items():
        (folder / f"data.{part}").write_text("".join(lines), encoding="utf-8")
    return folder


def read_rows(out) -> dict[str, list[tuple[str, str, str]]]:
    rows = {}
    for name in SPLITS:
        with (out / f"{name}.csv").open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            assert reader.fieldnames == ["word", "sentence", "label"]
            rows[name] = [(row["word"], row["sentence"], row["label"]) for row in reader]
    return rows


def test_uses_matches_the_whole_word_in_any_case():
    assert uses("a Bend in the road", "bend") and uses("bend the rod", "bend") and uses("look up!", "up")
    assert not uses("bending is hard", "bend") and not uses("unbend it", "bend") and not uses("cup", "up")
    assert uses("a hot-dog stand", "dog")  # a hyphen is not a word character


def test_rows_are_words_used_as_two_parts_of_speech_with_their_synsets_label():
    synsets = [synset for part, lines in wordnet_lines().items()
               for synset in (parse_data_line(line, part) for line in lines) if synset is not None]
    dropped = Counter()
    rows = make_rows(synsets, dropped)
    assert ("bend", "a Bend in the road", "noun") in rows and ("bend", "bend the rod", "verb") in rows
    assert ("up", "the sun is up", "adj") in rows and ("up", "look up", "adv") in rows  # a satellite: adj
    assert not any(word == "dog" for word, _, _ in rows)  # used as a noun only
    assert not any(sentence == "bending is hard" for _, sentence, _ in rows)  # the word is not there whole
    assert not any(sentence == "fast and pray" for _, sentence, _ in rows)  # a noun's and a verb's example
    assert dropped == {"word_with_one_part_of_speech": 1, "example_with_two_parts_of_speech": 1}
    assert len(rows) == len(set(rows)) == 80 + 4


def test_the_split_is_the_words_so_no_word_is_in_two(tmp_path):
    summary = build(write_wordnet(tmp_path), tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    words = {name: {word.lower() for word, _, _ in rows[name]} for name in SPLITS}
    assert all(words.values())
    assert not (words["train"] & words["validation"] or words["train"] & words["test"]
                or words["validation"] & words["test"])
    for name in SPLITS:
        assert all(split_of_word(word) == name for word in words[name])
        assert summary["splits"][name]["rows"] == len(rows[name])
        assert summary["splits"][name]["words"] == len(words[name])
        shares = Counter(label for _, _, label in rows[name])
        assert summary["splits"][name]["labels"] == {label: count / len(rows[name]) for label, count in shares.items()}
    assert sum(len(split) for split in rows.values()) == 84
    shuffled = tmp_path / "shuffled"
    shuffled.mkdir()
    for part, lines in wordnet_lines().items():  # the synsets in another order: the same files
        (shuffled / f"data.{part}").write_text("".join([lines[0], *reversed(lines[1:])]), encoding="utf-8")
    build(shuffled, tmp_path / "again")
    assert read_rows(tmp_path / "again") == rows


def test_the_limits_keep_the_first_rows_in_hash_order(tmp_path):
    folder = write_wordnet(tmp_path)
    build(folder, tmp_path / "all")
    build(folder, tmp_path / "few", max_train=10, max_eval=3)
    every, few = read_rows(tmp_path / "all"), read_rows(tmp_path / "few")
    assert few["train"] == every["train"][:10]
    assert few["validation"] == every["validation"][:3] and few["test"] == every["test"][:3]


def test_the_command_writes_the_files_and_refuses_bad_input_in_one_line(tmp_path, capsys):
    folder = write_wordnet(tmp_path)
    out = tmp_path / "with space" / "pos"
    assert main(["--out", str(out), "--wordnet", str(folder), "--max-train", "20"]) == 0
    printed = capsys.readouterr().out
    assert f"{out / 'train.csv'}: 20 rows" in printed and "dropped: 1 example_with_two_parts_of_speech" in printed
    assert main(["--out", str(tmp_path / "none"), "--wordnet", str(tmp_path / "missing")]) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "wordnet-base" in error
    assert not (tmp_path / "none").exists()
    for bad in (["--max-train", "0"], ["--parts-of-speech", "noun"]):
        with pytest.raises(SystemExit) as stopped:
            main(["--out", str(tmp_path / "bad"), "--wordnet", str(folder), *bad])
        assert stopped.value.code == 2
    assert "two parts of speech" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/share/wordnet/data.noun").is_file(), reason="wordnet-base is not installed")
def test_the_installed_wordnet_gives_a_set_with_every_part_of_speech(tmp_path):
    summary = build(Path("/usr/share/wordnet"), tmp_path, max_train=4000, max_eval=1000)
    assert summary["splits"]["train"]["rows"] == 4000 and summary["splits"]["validation"]["rows"] == 1000
    assert summary["splits"]["test"]["words"] > 50
    for split in summary["splits"].values():
        assert set(split["labels"]) == {"noun", "verb", "adj", "adv"} and max(split["labels"].values()) < 0.5
    words = {name: {word.lower() for word, _, _ in rows} for name, rows in read_rows(tmp_path).items()}
    assert not words["train"] & words["test"]
