"""bench.qa's own question-answering pieces (windows and labels, post-processing, metrics) on
hand-made cases, each beside bertpre's; and a tiny run of the whole bench on a random BERT."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import qa  # noqa: E402
from bertpre.finetune.qa_data import Answer, QAExample  # noqa: E402
from bertpre.finetune.qa_metrics import exact_match, f1_score  # noqa: E402
from bertpre.finetune.qa_windows import encode_qa_windows  # noqa: E402
from bertpre.model import BertConfig  # noqa: E402
from bertpre.tokenizer import SPECIAL_TOKENS, build_tokenizer, save_tokenizer  # noqa: E402

CONTEXT = "The Normans gave their name to Normandy, a region in France."
WORDS = ["who", "gave", "name", "the", "normans", "to", "normandy", "a", "region", "in", "france", "their",
         "##s", ",", ".", "?"]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """The same hand vocab as bertpre's tokenizer and as transformers' BertTokenizerFast."""
    transformers = pytest.importorskip("transformers")
    ours = build_tokenizer({token: index for index, token in enumerate([*SPECIAL_TOKENS, *WORDS])}, lowercase=True)
    folder = save_tokenizer(ours, tmp_path_factory.mktemp("tokenizer"))
    return ours, transformers.BertTokenizerFast.from_pretrained(str(folder))


def test_label_span_takes_the_tokens_holding_the_answer_s_first_and_last_character():
    # [CLS] q [SEP] "The" "Norm" "##ans" "gave" [SEP]: characters 0-3, 4-8, 8-11, 12-16
    offsets = [None, None, None, (0, 3), (4, 8), (8, 11), (12, 16), None]
    assert qa.label_span(offsets, 4, 11, 0) == (4, 5)  # "Normans"
    assert qa.label_span(offsets, 9, 16, 0) == (5, 6)  # "rmans gave": starts inside ##ans
    assert qa.label_span(offsets, 3, 11, 0) == (4, 5)  # " Normans": the space belongs to no token
    assert qa.label_span(offsets, 12, 20, 0) == (0, 0)  # runs past the window: [CLS]
    assert qa.label_span(offsets[:4] + [None] * 4, 4, 11, 0) == (0, 0)


def test_windows_are_bertpre_s_and_label_the_answer_where_a_window_holds_it(tokenizers):
    ours, theirs = tokenizers
    questions = [qa.Question("q", "Who gave their name?", CONTEXT, (("France", CONTEXT.index("France")),)),
                 qa.Question("r", "Who?", CONTEXT, (("Normans", 4),))]
    windows = qa.make_windows(theirs, questions, max_length=12, stride=2)
    examples = [QAExample(q.id, q.question, q.context, tuple(Answer(*answer) for answer in q.answers))
                for q in questions]
    mine = encode_qa_windows(ours, examples, max_seq_length=12, doc_stride=2, config=BertConfig())
    assert windows.input_ids == mine.input_ids and windows.token_type_ids == mine.token_type_ids
    assert windows.question == mine.example_index and windows.offsets == mine.context_offsets
    first = windows.question.count(0)
    # "France" is in the first question's last two windows only (its tokens 10 and 8 there)
    assert (windows.start_positions[:first], windows.end_positions[:first]) == ([0, 0, 0, 0, 10, 8],) * 2
    assert windows.start_positions[first] == windows.end_positions[first] == 5  # [CLS] who ? [SEP] the normans
    assert (windows.start_positions, windows.end_positions) == (mine.start_positions, mine.end_positions)
    assert all(offsets[:3] == [None] * 3 for offsets in windows.offsets)  # [CLS] and the question


def test_best_answer_keeps_to_the_context_the_order_and_the_length_limit():
    context = "abc def ghi"
    offsets = [None, None, (0, 3), (4, 7), (8, 11), None]  # [CLS] q abc def ghi [SEP]
    starts = [9.0, 8.0, 1.0, 3.0, 2.0, 0.0]  # [CLS] and the question score highest: never answers
    ends = [9.0, 8.0, 4.5, 0.5, 4.0, 0.0]  # the best end (abc) lies before the best start (def)
    assert qa.best_answer(context, [(offsets, starts, ends)], n_best=20, max_answer_length=30) == "def ghi"
    assert qa.best_answer(context, [(offsets, starts, ends)], n_best=20, max_answer_length=1) == "ghi"
    assert qa.best_answer(context, [(offsets, starts, ends)], n_best=2, max_answer_length=30) == ""
    second = ([None, (0, 3), (4, 7)], [0.0, 7.0, 0.0], [0.0, 7.0, 0.0])  # another window: 14 beats 7
    assert qa.best_answer(context, [(offsets, starts, ends), second], n_best=20, max_answer_length=30) == "abc"
    assert qa.best_answer(context, [], n_best=20, max_answer_length=30) == ""


ENGLISH_CASES = [  # (prediction, gold, exact match, F1) as SQuAD v1.1's script scores them
    ("The Normans", "Normans", 1.0, 1.0),
    ("normans.", "Normans", 1.0, 1.0),
    ("Norse raiders and pirates", "Norse raiders", 0.0, 2 * 0.5 * 1.0 / 1.5),
    ("an apple, a pear", "apple pear", 1.0, 1.0),
    ("region in France", "a region in France", 1.0, 1.0),
    ("Normandy", "France", 0.0, 0.0),
    ("", "France", 0.0, 0.0),
]
CHINESE_CASES = [  # as CMRC 2018's script scores them: characters, its punctuation left out
    ("花间一壶酒", "花间一壶酒", 1.0, 1.0),
    ("「花间一壶酒」", "花间一壶酒", 1.0, 1.0),
    ("花间一壶", "花间一壶酒", 0.0, 2 * 1.0 * 0.8 / 1.8),
    ("酒，独酌", "一壶酒", 0.0, 1 / 3),  # the longest common run: 酒
    ("独酌无相亲", "花间一壶酒", 0.0, 0.0),
    ("李白", "作者：李白", 0.0, 2 * 1.0 * 0.5 / 1.5),
]


@pytest.mark.parametrize(("prediction", "gold", "exact", "f1"), ENGLISH_CASES)
def test_english_metric_is_squad_s_and_bertpre_s(prediction, gold, exact, f1):
    assert qa.question_scores(prediction, [gold], "en") == pytest.approx((exact, f1))
    assert (exact_match(prediction, gold, "en"), f1_score(prediction, gold, "en")) == pytest.approx((exact, f1))


@pytest.mark.parametrize(("prediction", "gold", "exact", "f1"), CHINESE_CASES)
def test_chinese_metric_is_cmrc_s_and_bertpre_s(prediction, gold, exact, f1):
    assert qa.question_scores(prediction, [gold], "zh") == pytest.approx((exact, f1))
    assert (exact_match(prediction, gold, "zh"), f1_score(prediction, gold, "zh")) == pytest.approx((exact, f1))


def test_score_takes_the_best_gold_and_counts_a_missing_answer_as_zero():
    questions = [qa.Question("a", "?", "x", (("Normans", 0), ("the Normans", 0))), qa.Question("b", "?", "x", (("y", 0),))]
    assert qa.score({"a": "Normans people"}, questions, "en") == pytest.approx(
        {"exact_match": 0.0, "f1": 100 * (2 * 0.5 / 1.5) / 2})


def write_squad(path: Path, paragraphs: list[tuple[str, list[tuple[str, str]]]]) -> Path:
    data = [{"title": "t", "paragraphs": [
        {"context": context, "qas": [{"id": f"{number}-{index}", "question": question,
                                      "answers": [{"text": answer, "answer_start": context.index(answer)}]}
                                     for index, (question, answer) in enumerate(qas)]}
        for number, (context, qas) in enumerate(paragraphs)]}]
    path.write_text(json.dumps({"version": "1.1", "data": data}), encoding="utf-8")
    return path


@pytest.mark.slow
def test_a_tiny_run_finds_both_sides_alike_where_they_must_be(tmp_path, tokenizers):
    import transformers

    ours, _ = tokenizers
    export = tmp_path / "export"
    save_tokenizer(ours, export)
    config = transformers.BertConfig(vocab_size=ours.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=64)
    transformers.BertForPreTraining(config).save_pretrained(str(export))
    paragraphs = [(CONTEXT, [("Who gave their name?", "The Normans"), ("Who gave their name to Normandy?", "France"),
                             ("Who?", "a region in France")]),
                  ("Normandy, a region. The Normans gave their name to France.", [("Who?", "Normandy"),
                                                                                    ("Who?", "France")])]
    files = [write_squad(tmp_path / f"{name}.json", paragraphs * count) for name, count in (("train", 4), ("dev", 1))]
    code = qa.main(["--source", str(export), "--train", str(files[0]), "--dev", str(files[1]), "--seeds", "2",
                    "--epochs", "1", "--lr", "1e-3", "--batch-size", "4", "--max-seq-length", "16",
                    "--doc-stride", "4", "--threads", "1", "--out", str(tmp_path / "out")])
    assert code == 0
    (path,) = (tmp_path / "out").glob("qa-*.json")
    result = json.loads(path.read_text())
    for split in ("train", "test"):
        counts = result["same_windows"][split]
        assert counts["windows"][0] == counts["windows"][1] > counts["questions"]
        assert counts["contexts_in_several_windows"] == counts["contexts"]
        assert all(counts[key] == 0 for key in ("input_ids_differ", "token_type_ids_differ", "question_differs",
                                                "offsets_differ", "labels_differ"))
    assert result["same_epoch_order"] and result["same_initial_head"]
    assert result["same_math"]["largest_loss_difference"] < 1e-4
    for check in result["cross_check_per_seed"]:
        assert all(value.get("answers_differ", value.get("questions_differ")) == 0 for value in check.values())
        for name in ("metrics_on_bertpre_answers", "metrics_on_reference_answers"):
            assert check[name]["bench"] == pytest.approx(check[name]["bertpre"])
    assert [run["seed"] for run in result["per_seed"]["bertpre"]] == [0, 1]


def test_first_questions_caps_the_set_and_each_context(tmp_path):
    source = write_squad(tmp_path / "all.json", [(CONTEXT, [("Who?", "Normans"), ("What?", "France"), ("Where?", "a region")]),
                                                 ("Normandy, a region.", [("What?", "Normandy"), ("Which?", "region")])])
    cut = qa.first_questions(source, tmp_path / "cut.json", limit=3, per_context=2)
    assert [q.id for q in qa.read_squad(cut)] == ["0-0", "0-1", "1-0"]
    assert qa.first_questions(source, tmp_path / "same.json", limit=None) == source
    assert [q.id for q in qa.read_squad(qa.first_questions(source, tmp_path / "each.json", None, 1))] == ["0-0", "1-0"]


def test_cmrc_keeps_ascii_punctuation_as_tokens_and_drops_its_own_list():
    # CMRC 2018's script removes only its sp_char list: an ASCII comma stays a token (bertpre drops it)
    assert qa.cmrc_segments("潜七兄,乌江") == ["潜", "七", "兄", ",", "乌", "江"]
    assert qa.cmrc_segments("「花间，一壶」") == ["花", "间", "一", "壶"]
    assert qa.cmrc_f1("潜七兄,乌江十五兄,兼示符离及下邽弟妹》\n作者：白居易\n时", "弟兄羁旅各西东") == pytest.approx(0.0625)
    assert qa.cmrc_segments("abc def…") == ["abc", "def", "…"]  # its "……" entry never equals one character
