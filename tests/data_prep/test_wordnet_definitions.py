"""data_prep.wordnet_definitions on hand-written lines in WordNet's data-file format (wndb(5WN));
no WordNet installation needed."""
from __future__ import annotations

import csv
import random
from collections import Counter

from data_prep.wordnet_definitions import build, contains, main, make_pairs, word_of
from data_prep.wordnet_supersenses import LEXNAMES, Synset, parse_data_line, split_of

SPLITS = ("train", "validation", "test")
DOG = ("02084071 05 n 03 dog 0 domestic_dog 0 Canis_familiaris 0 001 @ 02083346 n 0000 | a member of "
       'the genus Canis; "the dog barked all night"; "a dog\'s life"  \n')
HOUND = "02087551 05 n 01 hound 0 000 | any of several breeds of hound used for hunting  \n"  # dropped
BAT = "02806379 06 n 01 bat 0 000 | an implement used for hitting a ball  \n"
RACKET = "04039381 06 n 02 bat 0 racket 0 000 | an implement used for hitting a ball  \n"  # the same definition
TRAVEL = ("01835496 38 v 03 travel 0 go 0 move 0 001 @ 01831531 v 0000 01 + 02 00 | change location; "
          'move, travel, or proceed, also metaphorically; "How fast does your new car go?"  \n')


def data_line(offset: int, file_number: int, words: list[str], gloss: str) -> str:
    """A synset line as WordNet writes it: offset, lexicographer file, type, word count (hex), words."""
    letter = "v" if LEXNAMES[file_number].startswith("verb") else "n"
    return (f"{offset:08d} {file_number:02d} {letter} {len(words):02x} "
            + " ".join(f"{word} 0" for word in words) + f" 000 | {gloss}  \n")


def filler(file_number: int, stem: str, gloss: str, count: int = 60) -> list[str]:
    """`count` synsets of one lexicographer file, each with two words and its own definition."""
    return [data_line(1000 * file_number + number, file_number, [f"{stem}{number}", f"other_{stem}{number}"],
                      f"{gloss} number {number}") for number in range(count)]


NOUNS = ["  1 This software and database is being provided to you, the LICENSEE, by  \n", DOG, HOUND, BAT, RACKET,
         *filler(5, "critter", "a creature of kind"), *filler(6, "gadget", "a device made for task")]
VERBS = [TRAVEL, *filler(38, "stroll", "move about in manner")]


def write_wordnet(tmp_path):
    folder = tmp_path / "dict"
    folder.mkdir()
    (folder / "data.noun").write_text("".join(NOUNS), encoding="utf-8")
    (folder / "data.verb").write_text("".join(VERBS), encoding="utf-8")
    return folder


def read_rows(out) -> dict[str, list[tuple[str, str, str]]]:
    rows = {}
    for name in SPLITS:
        with (out / f"{name}.csv").open(encoding="utf-8", newline="") as handle:
            reader = csv.DictReader(handle)
            assert reader.fieldnames == ["word", "definition", "label"]
            rows[name] = [(row["word"], row["definition"], row["label"]) for row in reader]
    return rows


def synsets():
    return [parse_data_line(line, "noun") for line in NOUNS[1:]] + [parse_data_line(line, "verb") for line in VERBS]


def test_word_of_and_contains():
    assert word_of("domestic_dog") == "domestic dog" and word_of("galore(ip)") == "galore"
    assert contains("a dog's life", "dog") and contains("Dogs bark", "dog")
    assert not contains("a hotdog stand", "dog") and not contains("a member of the genus Canis", "dog")


def test_positives_are_a_synsets_word_and_its_own_definition(tmp_path):
    summary = build(write_wordnet(tmp_path), tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    words_by_definition = {s.definition: {word_of(lemma) for lemma in s.lemmas} for s in synsets()}
    positives = [row for split in rows.values() for row in split if row[2] == "yes"]
    assert len(positives) == len(synsets()) - 1  # every synset once, but hound
    for word, definition, _ in positives:
        assert word in words_by_definition[definition] and not contains(definition, word)
    assert ("dog", "a member of the genus Canis", "yes") in positives  # the first word, examples removed
    assert ("go", "change location; move, travel, or proceed, also metaphorically", "yes") in positives
    assert {("bat", "an implement used for hitting a ball", "yes"),  # a shared definition: its next word
            ("racket", "an implement used for hitting a ball", "yes")} <= set(positives)
    assert summary["dropped"] == {"word_in_own_definition": 1}  # hound: "breeds of hound"
    assert not any(word == "hound" for split in rows.values() for word, *_ in split)


def test_negatives_come_from_the_same_file_and_split_and_never_hold_the_word(tmp_path):
    build(write_wordnet(tmp_path), tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    by_definition = {s.definition: s for s in synsets()}
    for name, split in rows.items():
        file_of_word = {word: by_definition[definition].supersense for word, definition, label in split if label == "yes"}
        negatives = [row for row in split if row[2] == "no"]
        assert len(negatives) == len(file_of_word)
        for word, definition, _ in negatives:
            other = by_definition[definition]
            assert other.supersense == file_of_word[word]
            assert word.lower() not in {word_of(lemma).lower() for lemma in other.lemmas}
            assert not contains(definition, word)
            assert split_of(definition) == name


def test_a_definition_another_file_gives_the_word_is_no_negative():
    catamount = Synset("1", "noun", "noun.animal", "a wild cat of the mountains", (), ("catamount",))
    bobcat = Synset("2", "noun", "noun.animal", "a spotted cat", (), ("bobcat",))
    brand = Synset("3", "noun", "noun.artifact", "a spotted cat", (), ("catamount",))  # the same definition
    dropped = Counter()
    pairs = make_pairs([catamount, bobcat, brand], random.Random(0), dropped)
    assert pairs == [(("bobcat", "a spotted cat", "yes"), ("bobcat", "a wild cat of the mountains", "no"))]
    assert dropped == {"no_negative_in_file_and_split": 2}  # catamount's file holds no other meaning


def test_a_word_of_two_synsets_never_gets_the_same_negative_twice():
    jaguar = Synset("1", "noun", "noun.animal", "a large spotted feline of tropical America", (), ("jaguar",))
    big_cat = Synset("2", "noun", "noun.animal", "a big cat of the Americas", (), ("jaguar",))
    ocelot = Synset("3", "noun", "noun.animal", "a nocturnal wildcat", (), ("ocelot",))
    dropped = Counter()
    pairs = make_pairs([jaguar, big_cat, ocelot], random.Random(0), dropped)
    assert pairs[0] == (("jaguar", "a large spotted feline of tropical America", "yes"),
                        ("jaguar", "a nocturnal wildcat", "no"))  # the only other meaning
    assert len(pairs) == 2 and pairs[1][0][0] == "ocelot"  # the second jaguar has none left
    assert dropped == {"no_negative_in_file_and_split": 1}


def test_each_definition_is_in_its_hash_split_only_and_labels_are_balanced(tmp_path):
    summary = build(write_wordnet(tmp_path), tmp_path / "out")
    rows = read_rows(tmp_path / "out")
    definitions = {name: {definition for _, definition, _ in rows[name]} for name in SPLITS}
    for name in SPLITS:
        assert all(split_of(definition) == name for definition in definitions[name])
        assert Counter(label for *_, label in rows[name]) == {"yes": len(rows[name]) // 2, "no": len(rows[name]) // 2}
        assert len({(word.lower(), definition) for word, definition, _ in rows[name]}) == len(rows[name])
        assert summary["splits"][name] == {"pairs": len(rows[name]), "made": len(rows[name]), "yes_share": 0.5}
    assert not definitions["train"] & definitions["validation"] and not definitions["train"] & definitions["test"]
    assert not definitions["validation"] & definitions["test"]


def test_the_seed_decides_the_negatives(tmp_path):
    wordnet = write_wordnet(tmp_path)
    for out, seed in (("a", 0), ("b", 0), ("c", 1)):
        build(wordnet, tmp_path / out, seed=seed)
    for name in SPLITS:
        assert (tmp_path / "a" / f"{name}.csv").read_bytes() == (tmp_path / "b" / f"{name}.csv").read_bytes()
    negatives = {out: {row for row in read_rows(tmp_path / out)["train"] if row[2] == "no"} for out in "ac"}
    positives = {out: {row for row in read_rows(tmp_path / out)["train"] if row[2] == "yes"} for out in "ac"}
    assert positives["a"] == positives["c"] and negatives["a"] != negatives["c"]


def test_max_train_and_max_eval_keep_whole_pairs(tmp_path):
    wordnet = write_wordnet(tmp_path)
    build(wordnet, tmp_path / "full")
    summary = build(wordnet, tmp_path / "small", max_train=10, max_eval=4)
    full, small = read_rows(tmp_path / "full"), read_rows(tmp_path / "small")
    for name, limit in (("train", 10), ("validation", 4), ("test", 4)):
        assert Counter(label for *_, label in small[name]) == {"yes": limit // 2, "no": limit // 2}
        assert set(small[name]) <= set(full[name])  # the same negatives, whatever the limit
        words = Counter(word for word, *_ in small[name])
        assert set(words.values()) == {2}  # each kept word with both its yes and its no
        assert summary["splits"][name]["made"] == len(full[name])


def test_a_missing_wordnet_is_one_line_naming_the_apt_package(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "out"), "--wordnet", str(tmp_path / "absent")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "apt-get install -y wordnet-base" in error
    assert not (tmp_path / "out").exists()
