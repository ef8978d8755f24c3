"""Question-answering files: SQuAD v1.1 / v2.0 JSON, CMRC 2018 as it comes, JSON lines; bad input
refused in one line naming the file and the question."""
from __future__ import annotations

import json

import pytest

from bertpre.errors import UserError
from bertpre.finetune.qa_data import Answer, read_qa_file

CONTEXT = "The Normans gave their name to Normandy, a region in France."


def squad(qas: list[dict], context: str = CONTEXT, **extra) -> dict:
    return {"version": "1.1", "data": [{"title": "Normans", "paragraphs": [{"context": context, "qas": qas}]}],
            **extra}


def write(tmp_path, document, name="dev.json"):
    path = tmp_path / name
    if isinstance(document, list):
        path.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in document), encoding="utf-8")
    else:
        path.write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
    return path


def test_squad_v1_keeps_every_gold_answer(tmp_path):
    path = write(tmp_path, squad([{"id": "q1", "question": "Where is Normandy?",
                                   "answers": [{"text": "France", "answer_start": 53},
                                               {"text": "in France", "answer_start": 50}]}]))
    [example] = read_qa_file(path)
    assert (example.id, example.question, example.context) == ("q1", "Where is Normandy?", CONTEXT)
    assert example.answers == (Answer("France", 53), Answer("in France", 50))
    assert not example.is_impossible


def test_squad_v2_unanswerable_questions_are_read_with_version_2(tmp_path):
    qas = [{"id": "a", "question": "Where?", "answers": [{"text": "France", "answer_start": 53}], "is_impossible": False},
           {"id": "b", "question": "Who ate Normandy?", "answers": [], "is_impossible": True,
            "plausible_answers": [{"text": "Normans", "answer_start": 4}]}]
    path = write(tmp_path, squad(qas, version="v2.0"))
    examples = read_qa_file(path, version_2_with_negative=True)
    assert [example.is_impossible for example in examples] == [False, True]
    assert examples[1].answers == ()
    with pytest.raises(UserError, match=r"dev\.json: question 'b' has no answer .*version_2_with_negative"):
        read_qa_file(path)


def test_cmrc2018_is_read_as_it_comes(tmp_path):
    # CMRC 2018's layout: SQuAD's, ids like "TRAIN_186_QUERY_0", Chinese text without spaces.
    context = "范廷颂枢机(1919年6月15日—2009年2月22日),圣名保禄·若瑟,是越南罗马天主教枢机。"
    document = {"version": "v1.0", "data": [{"id": "TRAIN_186", "title": "范廷颂", "paragraphs": [{
        "id": "TRAIN_186", "context": context, "qas": [{
            "question": "范廷颂是什么时候出生的?", "id": "TRAIN_186_QUERY_0",
            "answers": [{"text": "1919年6月15日", "answer_start": 6}]}]}]}]}
    [example] = read_qa_file(write(tmp_path, document, "cmrc2018_dev.json"))
    assert example.id == "TRAIN_186_QUERY_0"
    assert context[example.answers[0].start:example.answers[0].end] == "1919年6月15日"


def test_json_lines_as_datasets_writes_squad(tmp_path):
    records = [{"id": "x", "title": "t", "context": CONTEXT, "question": "Where?",
                "answers": {"text": ["France"], "answer_start": [53]}},
               {"context": CONTEXT, "question": "Why?", "answers": {"text": [], "answer_start": []}}]
    examples = read_qa_file(write(tmp_path, records, "train.jsonl"), version_2_with_negative=True)
    assert [example.id for example in examples] == ["x", "line 2"]
    assert examples[0].answers == (Answer("France", 53),)
    assert examples[1].is_impossible


@pytest.mark.parametrize(("answer", "message"), [
    ({"text": "France", "answer_start": 52}, r"question 'q7' has answer_start 52 that does not match its answer "
                                             r"'France': the context there reads ' Franc' \(the text is at 53\)"),
    ({"text": "France.", "answer_start": 60}, r"question 'q7' has answer 'France\.' at characters 60–67, outside "
                                              r"its context of 60 characters"),
    ({"text": "France", "answer_start": -1}, r"outside its context"),
    ({"text": "France", "answer_start": "53"}, r"answer_start '53', not a character position"),
])
def test_a_misplaced_answer_is_refused_naming_file_and_question(tmp_path, answer, message):
    path = write(tmp_path, squad([{"id": "q7", "question": "Where?", "answers": [answer]}]))
    with pytest.raises(UserError, match=r"dev\.json: .*" + message) as caught:
        read_qa_file(path)
    assert "\n" not in str(caught.value)


def test_an_empty_context_is_refused(tmp_path):
    path = write(tmp_path, [{"id": "e1", "context": "  ", "question": "Why?",
                             "answers": {"text": [], "answer_start": []}}], "train.jsonl")
    with pytest.raises(UserError, match=r"train\.jsonl: question 'e1' \(line 1\) has an empty context"):
        read_qa_file(path, version_2_with_negative=True)


def test_impossible_with_answers_duplicates_and_shapes_are_refused(tmp_path):
    impossible = squad([{"id": "i", "question": "?", "is_impossible": True,
                         "answers": [{"text": "France", "answer_start": 53}]}])
    with pytest.raises(UserError, match="marked is_impossible but has answers"):
        read_qa_file(write(tmp_path, impossible), version_2_with_negative=True)
    twice = squad([{"id": "d", "question": "?", "answers": [{"text": "France", "answer_start": 53}]}] * 2)
    with pytest.raises(UserError, match="question 'd' appears twice"):
        read_qa_file(write(tmp_path, twice))
    with pytest.raises(UserError, match=r"line 1: not JSON"):
        read_qa_file(_raw(tmp_path, "{\"context\": "))
    with pytest.raises(UserError, match="as many starts as texts"):
        read_qa_file(write(tmp_path, [{"context": CONTEXT, "question": "?",
                                       "answers": {"text": ["France"], "answer_start": []}}], "t.jsonl"))


def _raw(tmp_path, text):
    path = tmp_path / "raw.jsonl"
    path.write_text(text, encoding="utf-8")
    return path
