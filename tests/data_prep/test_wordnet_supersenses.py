"""data_prep.wordnet_supersenses on hand-written lines in WordNet's data-file format (wndb(5WN));
no WordNet installation needed."""
from __future__ import annotations

import csv
from collections import Counter

import pytest

from data_prep.wordnet_supersenses import (
    LEXNAMES,
    WordNetError,
    build,
    main,
    parse_data_line,
    split_gloss,
    split_of,
    subsample,
)

LICENSE = "  1 This software and database is being provided to you, the LICENSEE, by  \n"
NOUNS = [
    LICENSE,
    '00002684 03 n 02 object 0 physical_object 0 001 @ 00001930 n 0000 | a tangible and visible '
    'entity; an entity that can cast a shadow; "it was full of rackets, balls and other objects"  \n',
    "02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 001 @ 02083346 n 0000 | a member of "
    'the genus Canis; "the dog barked all night"; "a dog\'s life"  \n',
    '00258857 04 n 01 stride 0 000 | significant progress (especially in the phrase "make strides")  \n',
    "02121620 05 n 01 cat 0 000 | feline mammal usually having thick soft fur  \n",
]
VERBS = [
    LICENSE,
    "01835496 38 v 03 travel 0 go 0 move 0 001 @ 01831531 v 0000 01 + 02 00 | change location; "
    'move, travel, or proceed, also metaphorically; "How fast does your new car go?"  \n',
    "01166351 34 v 01 eat 0 000 02 + 08 00 + 11 00 | eat a meal; take a meal  \n",
]


def test_lexnames_are_wordnet_30s_45():
    assert len(LEXNAMES) == 45
    assert (LEXNAMES[0], LEXNAMES[3], LEXNAMES[5], LEXNAMES[29], LEXNAMES[43], LEXNAMES[44]) == (
        "adj.all", "noun.Tops", "noun.animal", "verb.body", "verb.weather", "adj.ppl")


def test_a_noun_line_gives_offset_supersense_definition_and_examples():
    synset = parse_data_line(NOUNS[2], "noun")
    assert (synset.offset, synset.part_of_speech, synset.supersense) == ("02084071", "noun", "noun.animal")
    assert synset.definition == "a member of the genus Canis"
    assert synset.examples == ("the dog barked all night", "a dog's life")


def test_a_verb_line_with_frames_and_a_semicolon_inside_the_definition():
    synset = parse_data_line(VERBS[1], "verb")
    assert synset.supersense == "verb.motion"
    assert synset.definition == "change location; move, travel, or proceed, also metaphorically"
    assert synset.examples == ("How fast does your new car go?",)


def test_quotes_inside_a_definition_are_not_examples():
    assert split_gloss('significant progress (especially in the phrase "make strides")  ') == (
        'significant progress (especially in the phrase "make strides")', ())
    assert split_gloss('the act of putting one thing in the place of another: "he sent Smith in"') == (
        "the act of putting one thing in the place of another", ("he sent Smith in",))


def test_license_lines_are_skipped_and_bad_lines_named():
    assert parse_data_line(LICENSE, "noun") is None
    with pytest.raises(WordNetError, match="not a WordNet data line"):
        parse_data_line("this is not wordnet\n", "noun")
    with pytest.raises(WordNetError, match="lexicographer file number 45"):
        parse_data_line("00000001 45 n 01 x 0 000 | a gloss\n", "noun")


def test_the_split_depends_on_the_definition_only_80_10_10():
    counts = Counter(split_of(f"definition number {number}") for number in range(20_000))
    assert split_of("a member of the genus Canis") == split_of("a member of the genus Canis")
    assert counts["train"] / 20_000 == pytest.approx(0.8, abs=0.01)
    assert counts["validation"] / 20_000 == pytest.approx(0.1, abs=0.01)


def test_subsample_keeps_shares_and_every_label():
    rows = [(f"a{n}", "a") for n in range(90)] + [(f"b{n}", "b") for n in range(9)] + [("c0", "c")]
    kept = subsample(rows, 10)
    assert Counter(label for _, label in kept) == {"a": 8, "b": 1, "c": 1}
    assert kept == [row for row in rows if row in kept]  # the input's order
    assert Counter(label for _, label in subsample(rows, 2)) == {"a": 1, "b": 1}  # the rarest gives way
    assert subsample(rows, None) == rows and subsample(rows, 500) == rows


def test_build_writes_three_csv_files(tmp_path):
    (tmp_path / "dict").mkdir()
    (tmp_path / "dict" / "data.noun").write_text("".join(NOUNS), encoding="utf-8")
    (tmp_path / "dict" / "data.verb").write_text("".join(VERBS), encoding="utf-8")
    synsets = [parse_data_line(line, "noun") for line in NOUNS[1:]] + [parse_data_line(line, "verb") for line in VERBS[1:]]
    summary = build(tmp_path / "dict", tmp_path / "out")
    written = {}
    for name in ("train", "validation", "test"):
        with (tmp_path / "out" / f"{name}.csv").open(encoding="utf-8", newline="") as handle:
            written[name] = {(row["text"], row["label"]) for row in csv.DictReader(handle)}
        assert summary[name]["rows"] == len(written[name])
    expected = {name: {(s.definition, s.supersense) for s in synsets if split_of(s.definition) == name}
                for name in ("train", "validation", "test")}
    assert written["train"] == expected["train"]
    known = {label for _, label in expected["train"]}
    for name in ("validation", "test"):  # rows whose label training lacks are dropped and counted
        assert written[name] == {row for row in expected[name] if row[1] in known}
        assert summary[name]["dropped_unknown_label"] == len(expected[name]) - len(written[name])
    build(tmp_path / "dict", tmp_path / "with", examples=True)
    with (tmp_path / "with" / "train.csv").open(encoding="utf-8", newline="") as handle:
        texts = {row["text"] for row in csv.DictReader(handle)}
    for synset in synsets:
        if split_of(synset.definition) == "train":
            quoted = "".join(f'; "{example}"' for example in synset.examples)
            assert synset.definition + quoted in texts


def test_a_missing_wordnet_is_one_line_naming_the_apt_package(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "out"), "--wordnet", str(tmp_path / "absent")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "apt-get install -y wordnet-base" in error
