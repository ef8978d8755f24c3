"""Question-answering scores against a small copy of the official evaluation scripts (SQuAD v2.0's
`evaluate-v2.0.py`, CMRC 2018's `cmrc2018_evaluate.py`), written here independently of bertpre."""
from __future__ import annotations

import collections
import re
import string

import pytest

from bertpre.finetune.qa_data import Answer, QAExample
from bertpre.finetune.qa_metrics import exact_match, f1_score, normalize_answer, qa_scores


# --- SQuAD v2.0's official script, as published --------------------------------------------------
def official_normalize(s):
    def remove_articles(text):
        return re.sub(re.compile(r"\b(a|an|the)\b", re.UNICODE), " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def official_f1(a_gold, a_pred):
    gold_toks = official_normalize(a_gold).split() if a_gold else []
    pred_toks = official_normalize(a_pred).split() if a_pred else []
    common = collections.Counter(gold_toks) & collections.Counter(pred_toks)
    num_same = sum(common.values())
    if len(gold_toks) == 0 or len(pred_toks) == 0:
        return int(gold_toks == pred_toks)
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(pred_toks)
    recall = 1.0 * num_same / len(gold_toks)
    return (2 * precision * recall) / (precision + recall)


def official_v2(examples, preds):
    exact, f1 = {}, {}
    for ex in examples:
        gold = [a.text for a in ex.answers if official_normalize(a.text)] or [""]
        exact[ex.id] = max(int(official_normalize(a) == official_normalize(preds[ex.id])) for a in gold)
        f1[ex.id] = max(official_f1(a, preds[ex.id]) for a in gold)
    has = [ex.id for ex in examples if ex.answers]
    no = [ex.id for ex in examples if not ex.answers]
    out = {"exact_match": 100.0 * sum(exact.values()) / len(exact), "f1": 100.0 * sum(f1.values()) / len(f1),
           "total": len(exact)}
    for prefix, ids in (("HasAns_", has), ("NoAns_", no)):
        out[prefix + "exact_match"] = 100.0 * sum(exact[i] for i in ids) / len(ids)
        out[prefix + "f1"] = 100.0 * sum(f1[i] for i in ids) / len(ids)
        out[prefix + "total"] = len(ids)
    return out


# --- CMRC 2018's script (nltk's word_tokenize replaced by words and single punctuation marks) ----
SP_CHAR = ["-", ":", "_", "*", "^", "/", "\\", "~", "`", "+", "=", "，", "。", "：", "？", "！", "“", "”", "；", "’",
           "《", "》", "……", "·", "、", "「", "」", "（", "）", "－", "～", "『", "』"]


def cmrc_segmentation(in_str):
    in_str = in_str.lower().strip()
    segs_out, temp_str = [], ""
    for char in in_str:
        if char in SP_CHAR:
            continue
        if re.search("[\u4e00-\u9fa5]", char):
            segs_out.extend(re.findall(r"\w+|[^\w\s]", temp_str))
            temp_str = ""
            segs_out.append(char)
        else:
            temp_str += char
    segs_out.extend(re.findall(r"\w+|[^\w\s]", temp_str))
    return segs_out


def cmrc_lcs(s1, s2):
    m = [[0 for _ in range(len(s2) + 1)] for _ in range(len(s1) + 1)]
    mmax = 0
    for i in range(len(s1)):
        for j in range(len(s2)):
            if s1[i] == s2[j]:
                m[i + 1][j + 1] = m[i][j] + 1
                mmax = max(mmax, m[i + 1][j + 1])
    return mmax


def cmrc_f1(answers, prediction):
    best = 0
    for ans in answers:
        ans_segs, pred_segs = cmrc_segmentation(ans), cmrc_segmentation(prediction)
        lcs_len = cmrc_lcs(ans_segs, pred_segs)
        if lcs_len == 0:
            continue
        precision, recall = lcs_len / len(pred_segs), lcs_len / len(ans_segs)
        best = max(best, 2 * precision * recall / (precision + recall))
    return best


def cmrc_em(answers, prediction):
    def strip(s):
        return "".join(c for c in s.lower().strip() if c not in SP_CHAR)

    return float(any(strip(ans) == strip(prediction) for ans in answers))


# --- the cases -----------------------------------------------------------------------------------
ENGLISH = [
    ("the Eiffel Tower", "Eiffel Tower"),
    ("An apple.", "apple"),
    ("in 1990s, Paris", "Paris 1990s"),
    ("the the cat sat", "cat cat sat on"),
    ("Denver Broncos", "Carolina Panthers"),
    ("", "Denver"),
    ("", ""),
    ("a", "the"),  # both normalize to nothing
    ("Saint-Étienne!", "saintétienne"),
    ("Theater", "the ater"),  # "the" inside a word is no article
]


@pytest.mark.parametrize(("prediction", "gold"), ENGLISH)
def test_english_matches_squad_official(prediction, gold):
    assert normalize_answer(prediction) == official_normalize(prediction)
    assert exact_match(prediction, gold) == float(official_normalize(prediction) == official_normalize(gold))
    assert f1_score(prediction, gold) == pytest.approx(official_f1(gold, prediction))


def test_exact_values_on_hand_made_cases():
    assert exact_match("The Eiffel Tower!", "eiffel  tower") == 1.0
    assert f1_score("in 1990s, Paris", "Paris 1990s") == pytest.approx(2 * (2 / 3) * 1 / (2 / 3 + 1))
    assert f1_score("Denver Broncos", "Carolina Panthers") == 0.0


CHINESE = [
    ("1919年6月15日", "1919年6月15日"),
    ("1919年6月", "1919年6月15日"),
    ("是越南罗马天主教枢机。", "越南罗马天主教枢机"),
    ("《红楼梦》", "红楼梦"),
    ("曹雪芹写的", "作者曹雪芹"),
    ("BERT 模型", "bert模型"),
    ("北京", "上海"),
    ("天主教枢机", "枢机天主教"),  # the common run is 2 characters, not 4
    ("潜七兄,乌江十五兄,兼示符离及下邽弟妹》\n作者：白居易\n时", "弟兄羁旅各西东"),  # ASCII "," is a token
    ("北京.", "北京"),  # "." is not on CMRC's list: no exact match
    ("西东…", "西东"),  # nor a lone "…" (its list has "……")
    ("co-op 模型", "coop模型"),  # its list's "-" is dropped inside the word
    ("㐀abc", "abc"),  # outside U+4E00..U+9FA5: part of the word
]


@pytest.mark.parametrize(("prediction", "gold"), CHINESE)
def test_chinese_matches_cmrc2018_official(prediction, gold):
    assert exact_match(prediction, gold, "zh") == cmrc_em([gold], prediction)
    assert f1_score(prediction, gold, "zh") == pytest.approx(cmrc_f1([gold], prediction))


def test_chinese_scores_keep_ascii_punctuation_outside_cmrc_s_list():
    assert f1_score("潜七兄,乌江十五兄,兼示符离及下邽弟妹》\n作者：白居易\n时", "弟兄羁旅各西东", "zh") == pytest.approx(0.0625)
    assert exact_match("北京.", "北京", "zh") == 0.0 and exact_match("「北京」", "北京", "zh") == 1.0


def test_chinese_f1_counts_characters():
    # 4 of 5 predicted characters, 4 of 4 gold ones (the 。 is ignored): F1 = 2 * 0.8 * 1 / 1.8
    assert f1_score("是越南罗马", "越南罗马。", "zh") == pytest.approx(2 * 0.8 / 1.8)
    assert exact_match("《红楼梦》", "红楼梦", "zh") == 1.0


def test_v2_split_into_has_answer_and_no_answer_as_the_official_script():
    examples = [
        QAExample("a", "q", "x", (Answer("Eiffel Tower", 0), Answer("the Eiffel Tower", 0))),
        QAExample("b", "q", "x", (Answer("Paris", 0),)),
        QAExample("c", "q", "x", ()),
        QAExample("d", "q", "x", ()),
        QAExample("e", "q", "x", (Answer("the", 0),)),  # normalizes to nothing: scored as unanswerable
    ]
    predictions = {"a": "Eiffel", "b": "Paris", "c": "", "d": "somewhere", "e": ""}
    scores = qa_scores(predictions, examples, version_2_with_negative=True)
    official = official_v2(examples, predictions)
    assert scores.keys() == official.keys()
    for key, value in official.items():
        assert scores[key] == pytest.approx(value), key
    assert scores["HasAns_total"] == 3 and scores["NoAns_total"] == 2
    assert scores["exact_match"] == pytest.approx(60.0)


def test_v1_scores_the_best_gold_answer_and_a_missing_prediction_as_zero():
    examples = [QAExample("a", "q", "x", (Answer("Eiffel Tower", 0), Answer("the tower", 0))),
                QAExample("b", "q", "x", (Answer("Paris", 0),))]
    scores = qa_scores({"a": "tower"}, examples)
    assert scores == {"exact_match": 50.0, "f1": 50.0, "total": 2}  # "the tower" is "tower"
    zh = qa_scores({"a": "天主教"}, [QAExample("a", "q", "x", (Answer("罗马天主教", 0),))], language="zh")
    assert zh["f1"] == pytest.approx(100 * 2 * 1 * 0.6 / 1.6)


def test_the_best_null_threshold_is_the_best_of_every_threshold():
    from bertpre.finetune.qa_metrics import best_null_threshold

    examples = [QAExample("a", "q", "x", (Answer("Eiffel Tower", 0),)),
                QAExample("b", "q", "x", (Answer("Paris", 0),)),
                QAExample("c", "q", "x", ()),
                QAExample("d", "q", "x", ()),
                QAExample("e", "q", "x", (Answer("Rome", 0),))]
    spans = {"a": "Eiffel", "b": "Paris", "c": "Lyon", "d": "Nice", "e": "Milan"}
    differences = {"a": -2.0, "b": 0.5, "c": 1.0, "d": -3.0, "e": 3.0}
    best, threshold = best_null_threshold(differences, spans, examples)

    def f1_at(cut):
        answered = {id_: ("" if differences[id_] > cut else span) for id_, span in spans.items()}
        return qa_scores(answered, examples)["f1"]

    every = max(f1_at(cut) for cut in [-10.0, *differences.values()])
    assert best == pytest.approx(every) == pytest.approx(f1_at(threshold))
    assert threshold == 0.5  # answer d, a, b (differences up to 0.5): d costs 1, a gains 2/3, b gains 1
    assert best_null_threshold(differences, spans, examples, metric="exact_match")[0] == pytest.approx(
        max(qa_scores({id_: ("" if differences[id_] > cut else span) for id_, span in spans.items()},
                      examples)["exact_match"] for cut in [-10.0, *differences.values()]))
