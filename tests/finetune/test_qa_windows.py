"""Question-answering windows from the outside: a hand-written WordPiece vocab and one trained by
bertpre on a tiny English and Chinese corpus; perfect logits decode back to the gold answer
across window boundaries."""
from __future__ import annotations

import numpy as np
import pytest

from bertpre.errors import UserError
from bertpre.finetune.qa_answers import predict_answers
from bertpre.finetune.qa_data import Answer, QAExample
from bertpre.finetune.qa_windows import encode_qa_windows as encode_windows
from bertpre.model import BertConfig
from bertpre.tokenizer import SPECIAL_TOKENS, build_tokenizer, train_tokenizer

ENGLISH = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
           "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland "
           "and Norway who, under their leader Rollo, agreed to swear fealty to King Charles III of West Francia.")
CHINESE = "范廷颂枢机(1919年6月15日—2009年2月22日),圣名保禄·若瑟,是越南罗马天主教枢机。1963年被任为主教。"


BERT = BertConfig()  # two token types


def encode_qa_windows(tokenizer, examples, *args, config: BertConfig = BERT, **options):
    """The windows as a BERT reads them (its two token types), unless `config` says another family."""
    return encode_windows(tokenizer, examples, *args, config=config, **options)


def example(id_: str, question: str, context: str, *answers: str) -> QAExample:
    return QAExample(id_, question, context, tuple(Answer(text, context.index(text)) for text in answers))


@pytest.fixture(scope="module")
def tokenizer():
    sentences = [ENGLISH, CHINESE, "Who gave their name to Normandy?", "范廷颂是什么时候出生的?"]
    return train_tokenizer([sentences] * 3, vocab_size=300, min_frequency=1)


@pytest.fixture(scope="module")
def hand_vocab():
    words = ["who", "gave", "name", "the", "normans", "to", "normandy", "a", "region", "in", "france",
             "their", "##s", ",", ".", "?"]
    return build_tokenizer({token: index for index, token in enumerate([*SPECIAL_TOKENS, *words])}, lowercase=True)


def test_question_first_then_context_in_windows_that_overlap_by_doc_stride(hand_vocab):
    context = "The Normans gave their name to Normandy, a region in France."
    windows = encode_qa_windows(hand_vocab, [example("q", "Who gave their name?", context, "France")],
                                max_seq_length=12, doc_stride=2)
    vocab = {index: token for token, index in hand_vocab.get_vocab().items()}
    tokens = [[vocab[index] for index in ids] for ids in windows.input_ids]
    assert tokens[0] == ["[CLS]", "who", "gave", "their", "name", "?", "[SEP]", "the", "normans", "gave", "their", "[SEP]"]
    assert tokens[1][7:] == ["gave", "their", "name", "to", "[SEP]"]  # 2 context tokens shared
    assert tokens[-1][7:] == ["in", "france", ".", "[SEP]"]
    assert windows.token_type_ids[0] == [0] * 7 + [1] * 5
    assert all(len(ids) <= 12 for ids in windows.input_ids)
    assert windows.example_index == [0] * len(windows)
    # each context token points at exactly its characters; [CLS], question and [SEP] at none
    assert windows.context_offsets[0][:7] == [None] * 7 and windows.context_offsets[0][-1] is None
    for window, offsets in zip(tokens, windows.context_offsets, strict=True):
        for token, offset in zip(window, offsets, strict=True):
            if offset is not None:
                assert context[offset[0]:offset[1]].lower() == token
    # "France" lies in the last two windows only: elsewhere the label is [CLS]
    assert windows.start_positions == windows.end_positions == [0, 0, 0, 0, 10, 8]


def test_chinese_characters_map_back_one_by_one(tokenizer):
    windows = encode_qa_windows(tokenizer, [example("zh", "范廷颂是什么时候出生的?", CHINESE, "1919年6月15日")],
                                max_seq_length=24, doc_stride=4)
    for offsets in windows.context_offsets:
        for offset in offsets:
            if offset is not None and "\u4e00" <= CHINESE[offset[0]] <= "\u9fff":
                assert offset[1] - offset[0] == 1
    labelled = [index for index, start in enumerate(windows.start_positions) if start != windows.cls_index[index]]
    assert labelled
    for index in labelled:
        offsets = windows.context_offsets[index]
        assert CHINESE[offsets[windows.start_positions[index]][0]:offsets[windows.end_positions[index]][1]] == "1919年6月15日"


def perfect_logits(windows) -> tuple[np.ndarray, np.ndarray]:
    """Logits padded to the longest window that point at each window's label."""
    width = max(len(ids) for ids in windows.input_ids)
    start, end = np.zeros((len(windows), width)), np.zeros((len(windows), width))
    rows = np.arange(len(windows))
    start[rows, windows.start_positions] = 10.0
    end[rows, windows.end_positions] = 10.0
    return start, end


@pytest.mark.parametrize(("max_seq_length", "doc_stride"), [(32, 10), (40, 12), (48, 20), (128, 32)])
def test_perfect_logits_decode_to_the_gold_answer_across_windows(tokenizer, max_seq_length, doc_stride):
    examples = [example("en1", "Who gave their name to Normandy?", ENGLISH, "The Normans"),
                example("en2", "Who gave their name to Normandy?", ENGLISH, "King Charles III of West Francia"),
                example("en3", "Who gave their name to Normandy?", ENGLISH, "Denmark, Iceland and Norway"),
                example("zh1", "范廷颂是什么时候出生的?", CHINESE, "1919年6月15日"),
                example("zh2", "范廷颂是什么时候出生的?", CHINESE, "越南罗马天主教枢机")]
    windows = encode_qa_windows(tokenizer, examples, max_seq_length, doc_stride)
    if max_seq_length < 128:
        assert max(windows.example_index.count(index) for index in range(len(examples))) > 2
    # a window holds each answer whole: doc_stride is at least an answer's length (in tokens) - 1
    labelled = {owner for owner, start, cls in zip(windows.example_index, windows.start_positions,
                                                   windows.cls_index, strict=True) if start != cls}
    assert labelled == set(range(len(examples)))
    predictions = predict_answers(examples, windows, *perfect_logits(windows), max_answer_length=64)
    assert [prediction.text for prediction in predictions] == [item.answers[0].text for item in examples]
    assert [prediction.id for prediction in predictions] == [item.id for item in examples]


def test_an_answer_cut_by_a_window_edge_is_labelled_null_there(tokenizer):
    gold = example("en", "Who?", ENGLISH, "King Charles III of West Francia")
    windows = encode_qa_windows(tokenizer, [gold], max_seq_length=16, doc_stride=6)
    whole = partial = 0
    for index, offsets in enumerate(windows.context_offsets):
        spans = [offset for offset in offsets if offset is not None]
        holds = spans[0][0] <= gold.answers[0].start and spans[-1][1] >= gold.answers[0].end
        touches = spans[0][0] < gold.answers[0].end and spans[-1][1] > gold.answers[0].start
        labelled = windows.start_positions[index] != windows.cls_index[index]
        assert labelled == holds
        whole += holds
        partial += touches and not holds
    assert whole >= 1 and partial >= 1


def test_unanswerable_questions_are_labelled_cls_and_decode_to_no_answer(tokenizer):
    examples = [example("no", "Who?", ENGLISH), example("yes", "Who?", ENGLISH, "Rollo")]
    windows = encode_qa_windows(tokenizer, examples, max_seq_length=24, doc_stride=4)
    first = [index for index, owner in enumerate(windows.example_index) if owner == 0]
    assert [windows.start_positions[index] for index in first] == [windows.cls_index[index] for index in first]
    predictions = predict_answers(examples, windows, *perfect_logits(windows), version_2_with_negative=True)
    assert [prediction.text for prediction in predictions] == ["", "Rollo"]
    assert predictions[0].null_score == 20.0 and predictions[1].null_score == 0.0
    # read as v1.1, the best span is answered even where the null score is higher
    assert predict_answers(examples, windows, *perfect_logits(windows))[0].text != ""


def test_post_processing_keeps_n_best_within_max_answer_length(hand_vocab):
    context = "The Normans gave their name to Normandy, a region in France."
    windows = encode_qa_windows(hand_vocab, [example("q", "Who?", context, "Normandy")], 64, 16)
    start, end = np.zeros((1, 20)), np.zeros((1, 20))
    # tokens: [CLS] who ? [SEP] the(4) normans(5) gave(6) ... normandy(10) ,(11) a(12) region(13) in(14) france(15)
    start[0, [10, 4]] = [5.0, 6.0]
    end[0, [15, 10]] = [7.0, 4.0]
    [prediction] = predict_answers([example("q", "Who?", context, "Normandy")], windows, start, end,
                                   n_best_size=2, max_answer_length=7)
    # the(4)..france(15) is 12 tokens: too long; normandy(10)..france(15) scores 12, the..normandy 10
    assert prediction.text == "Normandy, a region in France"
    assert [(candidate.text, candidate.score) for candidate in prediction.n_best] == [
        ("Normandy, a region in France", 12.0), ("The Normans gave their name to Normandy", 10.0)]
    with pytest.raises(ValueError, match="logits for 12 tokens, fewer than the longest window's 18"):
        predict_answers([example("q", "Who?", context, "Normandy")], windows, start[:, :12], end[:, :12])


def test_a_question_longer_than_max_seq_length_is_refused(hand_vocab):
    long = example("long", "who gave their name to the normans " * 4, "The Normans.", "Normans")
    with pytest.raises(UserError, match=r"question 'long' has 28 tokens, which with 3 special tokens leave no "
                                        r"room for its context in --max-seq-length 24"):
        encode_qa_windows(hand_vocab, [long], max_seq_length=24)
    with pytest.raises(UserError, match=r"--doc-stride 8 must be smaller than the 6 context tokens"):
        encode_qa_windows(hand_vocab, [example("q", "who gave their name?", "The Normans.")], 14, 8)


def run_qa_train_features(hf_tokenizer, examples, max_seq_length, doc_stride):
    """Hugging Face's `run_qa.py` `prepare_train_features`, as published (padding left out)."""
    tokenized = hf_tokenizer([item.question for item in examples], [item.context for item in examples],
                             truncation="only_second", max_length=max_seq_length, stride=doc_stride,
                             return_overflowing_tokens=True, return_offsets_mapping=True)
    starts, ends = [], []
    for i, offsets in enumerate(tokenized["offset_mapping"]):
        input_ids = tokenized["input_ids"][i]
        cls_index = input_ids.index(hf_tokenizer.cls_token_id)
        sequence_ids = tokenized.sequence_ids(i)
        answers = examples[tokenized["overflow_to_sample_mapping"][i]].answers
        if not answers:
            starts.append(cls_index)
            ends.append(cls_index)
            continue
        start_char, end_char = answers[0].start, answers[0].end
        token_start_index = 0
        while sequence_ids[token_start_index] != 1:
            token_start_index += 1
        token_end_index = len(input_ids) - 1
        while sequence_ids[token_end_index] != 1:
            token_end_index -= 1
        if not (offsets[token_start_index][0] <= start_char and offsets[token_end_index][1] >= end_char):
            starts.append(cls_index)
            ends.append(cls_index)
        else:
            while token_start_index < len(offsets) and offsets[token_start_index][0] <= start_char:
                token_start_index += 1
            starts.append(token_start_index - 1)
            while offsets[token_end_index][1] >= end_char:
                token_end_index -= 1
            ends.append(token_end_index + 1)
    return tokenized, starts, ends


def test_windows_and_labels_are_run_qa_s(tokenizer, tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertpre.tokenizer import save_tokenizer

    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(save_tokenizer(tokenizer, tmp_path / "tokenizer"))
    examples = [example("en1", "Who gave their name to Normandy?", ENGLISH, "Norse raiders"),
                example("en2", "Who?", ENGLISH, "King Charles III of West Francia"),
                example("no", "Who?", ENGLISH),
                example("zh", "范廷颂是什么时候出生的?", CHINESE, "2009年2月22日")]
    windows = encode_qa_windows(tokenizer, examples, max_seq_length=32, doc_stride=8)
    tokenized, starts, ends = run_qa_train_features(hf_tokenizer, examples, 32, 8)
    assert windows.input_ids == tokenized["input_ids"]
    assert windows.token_type_ids == tokenized["token_type_ids"]
    assert windows.example_index == tokenized["overflow_to_sample_mapping"]
    assert (windows.start_positions, windows.end_positions) == (starts, ends)
    # each answered example is labelled in some window, the rest point at [CLS]
    assert {owner for owner, start in zip(windows.example_index, starts, strict=True) if start != 0} == {0, 1, 3}


def test_answers_come_back_as_the_context_s_own_characters(tokenizer):
    # lowercasing and stripped accents change the tokens, not the characters the offsets point at;
    # a run of letters with no space in an unknown script is one [UNK] word that maps back whole
    context = "Saint-Étienne est en France. ภาษาไทยไม่มีช่องว่าง and Ｆｕｌｌｗｉｄｔｈ text"
    examples = [example("accents", "Who?", context, "Saint-Étienne"),
                example("thai", "Who?", context, "ภาษาไทยไม่มีช่องว่าง"),
                example("wide", "Who?", context, "Ｆｕｌｌｗｉｄｔｈ")]
    windows = encode_qa_windows(tokenizer, examples, max_seq_length=16, doc_stride=6)
    predictions = predict_answers(examples, windows, *perfect_logits(windows))
    assert [prediction.text for prediction in predictions] == ["Saint-Étienne", "ภาษาไทยไม่มีช่องว่าง", "Ｆｕｌｌｗｉｄｔｈ"]


def test_xlnet_layout_puts_the_null_answer_on_its_last_token(tokenizer):
    from bertpre.tokenizer.xlnet_layout import xlnet_layout

    xlnet = xlnet_layout(tokenizer)
    examples = [example("a", "Who?", ENGLISH, "Rollo"), example("b", "Who?", ENGLISH)]
    windows = encode_qa_windows(xlnet, examples, max_seq_length=24, doc_stride=6,
                                config=BertConfig(architecture="xlnet"))
    assert windows.cls_index == [len(ids) - 1 for ids in windows.input_ids]
    assert all(types[-1] == 2 for types in windows.token_type_ids)
    predictions = predict_answers(examples, windows, *perfect_logits(windows), version_2_with_negative=True)
    assert [prediction.text for prediction in predictions] == ["Rollo", ""]


def test_perfect_logits_decode_every_word_aligned_answer_of_random_contexts(tokenizer):
    rng = np.random.default_rng(0)
    words = ENGLISH.replace(",", " ,").replace(".", " .").split() + list(CHINESE)
    examples = []
    for index in range(40):
        chosen = [words[i] for i in rng.integers(0, len(words), size=int(rng.integers(5, 60)))]
        context = " ".join(chosen)
        first = int(rng.integers(0, len(chosen)))
        last = min(len(chosen), first + int(rng.integers(1, 4)))
        start = len(" ".join(chosen[:first])) + (1 if first else 0)
        examples.append(QAExample(f"r{index}", "Who gave their name?", context,
                                  (Answer(" ".join(chosen[first:last]), start),)))
    for max_seq_length, doc_stride in [(24, 8), (40, 16)]:
        windows = encode_qa_windows(tokenizer, examples, max_seq_length, doc_stride)
        held = {owner for owner, start, cls in zip(windows.example_index, windows.start_positions,
                                                   windows.cls_index, strict=True) if start != cls}
        predictions = predict_answers(examples, windows, *perfect_logits(windows), max_answer_length=32)
        decoded = [prediction.text for prediction in predictions]
        assert len(held) == len(examples)  # every answer is shorter than doc_stride + 1 tokens
        assert decoded == [item.answers[0].text for item in examples]
