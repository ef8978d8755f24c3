"""data_prep.reading_comprehension: answers found once and checked, documents split by seed,
grouped without clashes, capped, and written as SQuAD files bertpre reads."""
from __future__ import annotations

import json
import random

import pytest

from bertpre.finetune.qa_data import Answer as ReadAnswer
from bertpre.finetune.qa_data import read_qa_file
from data_prep.reading_comprehension import (
    Answer,
    Passage,
    Question,
    SourceError,
    cap_questions,
    checked_answer,
    group_documents,
    mix_in,
    occurrences,
    split_documents,
    unanswerable_count,
    unique_answer,
    write_splits,
)


def test_an_answer_is_found_only_where_it_occurs_once():
    context = "a dog barked; the dog slept. a cat sat."
    assert occurrences(context, "dog") == 2 and occurrences("aaa", "aa") == 2  # overlapping ones count
    assert unique_answer(context, "dog") is None  # twice: its position would be a guess
    assert unique_answer(context, "horse") is None
    assert unique_answer(context, "") is None
    assert unique_answer(context, "a cat") == Answer("a cat", 29)
    assert context[29:34] == "a cat"


def test_a_misplaced_answer_is_an_error_not_a_file():
    assert checked_answer("one two", "two", 4) == Answer("two", 4)
    with pytest.raises(AssertionError, match="'two' is not at character 3"):
        checked_answer("one two", "two", 3)


def test_documents_split_80_10_10_by_seed_with_shared_keys_together():
    documents = [f"doc {number}" for number in range(1000)] + ["doc 7 again"]
    key = lambda document: document.split()[1]  # noqa: E731  "doc 7 again" shares doc 7's key
    splits = split_documents(documents, key, seed=0)
    assert [len(splits[name]) for name in ("train", "dev", "test")] in ([801, 100, 100], [800, 101, 100],
                                                                         [800, 100, 101])
    where = {document: name for name, members in splits.items() for document in members}
    assert where["doc 7"] == where["doc 7 again"]
    assert split_documents(documents, key, seed=0) == splits
    other = split_documents(documents, key, seed=1)
    assert other != splits and sorted(map(sorted, other.values())) != sorted(map(sorted, splits.values()))


def test_groups_have_their_drawn_sizes_and_no_shared_name():
    documents = [f"{name}{number}" for number in range(40) for name in "abc"]  # a0 b0 c0 a1 ...
    names = lambda document: {document[0]} if document[1:] in {"3", "4", "5"} else {document}  # noqa: E731
    groups = group_documents(documents, (2, 4), random.Random(0), names)
    assert sorted(document for group in groups for document in group) == sorted(documents)  # each once
    for group in groups:
        taken = [name for document in group for name in names(document)]
        assert len(taken) == len(set(taken))
    assert all(2 <= len(group) <= 4 for group in groups[:-2])
    assert group_documents(documents, (2, 4), random.Random(0), names) == groups


def test_clashing_documents_at_the_end_go_to_groups_of_their_own():
    groups = group_documents(["x1", "x2", "x3"], (3, 3), random.Random(0), lambda document: {document[0]})
    assert groups == [["x1"], ["x2"], ["x3"]]


def test_unanswerable_questions_come_to_their_share_on_average():
    rng = random.Random(0)
    added = sum(unanswerable_count(10, 1 / 3, rng) for _ in range(2000))
    assert added / (added + 20_000) == pytest.approx(1 / 3, abs=0.005)
    assert {unanswerable_count(4, 0.5, rng) for _ in range(50)} == {4}  # whole: never drawn


def test_mixed_in_questions_keep_the_others_order():
    questions = [Question(f"q{n}", "kind", (Answer("x", 0),)) for n in range(5)]
    extra = [Question(f"none{n}", "kind", ()) for n in range(3)]
    mixed = mix_in(questions, extra, random.Random(0))
    assert [q for q in mixed if q.answers] == questions  # their order kept
    assert sorted(q.question for q in mixed if not q.answers) == ["none0", "none1", "none2"]
    assert mixed == mix_in(questions, extra, random.Random(0))


def test_caps_cut_the_last_passage_short():
    passages = [Passage(f"p{index}", "ctx", 1, [Question(f"q{index}{n}", "kind", (Answer("ctx", 0),))
                                                for n in range(3)]) for index in range(3)]
    capped = cap_questions(passages, 5)
    assert [len(passage.questions) for passage in capped] == [3, 2]
    assert len(passages[1].questions) == 3  # the input is left alone
    assert cap_questions(passages, None) is passages


def passage(context: str, *questions: Question) -> Passage:
    return Passage("title", context, 1, list(questions))


def test_written_files_are_squad_that_bertpre_reads(tmp_path):
    context = "red: a colour. blue: another colour."
    asked = Question("What is red?", "definition", (unique_answer(context, "a colour"),))
    impossible = Question("What is green?", "definition", ())
    splits = {name: [passage(context, asked, impossible)] for name in ("train", "dev", "test")}
    summary = write_splits(tmp_path, splits, prefix="t", version_2=True, max_train=None, max_eval=None,
                           about={"source": "test", "dropped_questions": {}})
    document = json.loads((tmp_path / "dev.json").read_text(encoding="utf-8"))
    assert document["version"] == "v2.0"
    qas = document["data"][0]["paragraphs"][0]["qas"]
    assert qas == [{"id": "t-dev-00000-00", "question": "What is red?", "is_impossible": False,
                    "answers": [{"text": "a colour", "answer_start": 5}]},
                   {"id": "t-dev-00000-01", "question": "What is green?", "answers": [], "is_impossible": True}]
    examples = read_qa_file(tmp_path / "dev.json", version_2_with_negative=True)
    assert [(example.answers, example.is_impossible) for example in examples] == [
        ((ReadAnswer("a colour", 5),), False), ((), True)]
    assert summary["splits"]["dev"] == {"documents": 1, "contexts": 1, "questions": 2, "unanswerable": 1,
                                        "by_type": {"definition": 2}, "mean_context_chars": len(context)}
    assert json.loads((tmp_path / "summary.json").read_text(encoding="utf-8")) == summary
    with pytest.raises(AssertionError, match="unanswerable question"):
        write_splits(tmp_path, splits, prefix="t", version_2=False, max_train=None, max_eval=None, about={})


def test_a_misplaced_answer_is_never_written(tmp_path):
    wrong = Question("What is red?", "definition", (Answer("a colour", 4),))
    with pytest.raises(AssertionError, match="not at character 4"):
        write_splits(tmp_path, {name: [passage("red: a colour.", wrong)] for name in ("train", "dev", "test")},
                     prefix="t", version_2=False, max_train=None, max_eval=None, about={})


def test_an_empty_split_is_refused_in_words(tmp_path):
    asked = Question("What is red?", "definition", (Answer("a colour", 5),))
    splits = {"train": [passage("red: a colour.", asked)], "dev": [passage("red: a colour.", asked)], "test": []}
    with pytest.raises(SourceError, match="the test split has no questions"):
        write_splits(tmp_path, splits, prefix="t", version_2=False, max_train=None, max_eval=None, about={})
    assert list(tmp_path.iterdir()) == []  # nothing written
