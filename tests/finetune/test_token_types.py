"""Token types come from the model's family, never from the tokenizer's template: over every row of
the families table, question-answering windows past the first (which `tokenizers` types 1
throughout), sentence pairs and tagged words carry the types the family reads, and its task models
run on them. Before, an XLM-R (one row of token types) stopped with IndexError on any context that
needed a second window; `finetune --task qa` on one now runs through the CLI."""
from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from _released_tokenizers import roberta_like, xlmr_like
from test_finetune import run_main

from bertpre.finetune.encoding import Encoded, encode_texts, encode_words, pad_batch, truncating
from bertpre.finetune.qa_data import Answer, QAExample
from bertpre.finetune.qa_windows import encode_qa_windows
from bertpre.model import BertConfig
from bertpre.model.families import FAMILIES, family
from bertpre.tokenizer import load_tokenizer, token_roles, train_tokenizer

CONTEXT = ("The Normans were the people who in the 10th and 11th centuries gave their name to Normandy, "
           "a region in France. They were descended from Norse raiders and pirates from Denmark, Iceland "
           "and Norway who, under their leader Rollo, agreed to swear fealty to King Charles III.")
QUESTIONS = [("Who gave their name to Normandy?", "Normans"), ("Where is Normandy?", "France"),
             ("Who was their leader?", "Rollo")]
# the last pair's second text is empty: BERT still types its closing [SEP] 1, as transformers does
PAIRS = (["the Normans came from the north .", "Rollo .", "the north ."],
         ["they swore fealty to the king of West Francia .", "a", ""])
WORDS = [["The", "Normans", "gave", "their", "name", "to", "Normandy", "."], ["Rollo"]]

# Each row's types for a window or pair of `length` tokens whose second text begins at `second`
# (at `length` for one text): a new family needs its line here.
EXPECTED: dict[str, Callable[[int, int], list[int]]] = {
    "bert": lambda length, second: [0] * second + [1] * (length - second),
    "electra": lambda length, second: [0] * second + [1] * (length - second),  # BERT's two token types
    "roberta": lambda length, second: [0] * length,
    "xlm-roberta": lambda length, second: [0] * length,
    "modernbert": lambda length, second: [0] * length,
    # A [SEP] B [SEP] [CLS]: the classification token, last, is a type of its own
    "xlnet": lambda length, second: [0] * min(second, length - 1) + [1] * max(length - second - 1, 0) + [2],
}
# Where a released family has a tokenizer of its own kind (byte-level BPE, Unigram), that one:
# its post-processor is the one whose overflow windows came typed 1.
RELEASED_TOKENIZERS = {"roberta": roberta_like, "xlm-roberta": xlmr_like}
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=130)


def test_every_family_has_its_expected_types():
    assert set(EXPECTED) == set(FAMILIES)


@pytest.fixture(scope="module")
def wordpiece():
    sentences = [CONTEXT, *(question for question, _ in QUESTIONS), *PAIRS[0], *PAIRS[1]]
    return train_tokenizer([sentences] * 3, vocab_size=300, min_frequency=1)


def family_inputs(name: str, wordpiece, folder: Path, **changes) -> tuple[BertConfig, object]:
    """A tiny model config of row `name` (its own defaults: RoBERTa's one token type) and a
    tokenizer in the row's layout."""
    row = FAMILIES[name]
    make = RELEASED_TOKENIZERS.get(name)
    tokenizer = load_tokenizer(make(folder)) if make is not None else row.tokenizer_layout(wordpiece)
    config = BertConfig(**{**row.model_defaults, **TINY, "architecture": name, **changes},
                        vocab_size=tokenizer.get_vocab_size(), pad_token_id=token_roles(tokenizer).pad_token_id)
    config.validate()
    return config, tokenizer


def second_text_start(encoding, separators: int) -> int:
    """Where the second text's part of a pair begins: after the last of the first text's tokens and
    the `separators` the layout puts after it ([SEP], </s></s>), whether the second kept tokens or not."""
    last_first = max(index for index, sequence in enumerate(encoding.sequence_ids) if sequence == 0)
    return last_first + 1 + separators


def run_head(head: type[torch.nn.Module], config: BertConfig, encoded: Encoded, pad_id: int, labels: int,
             *, tagging: bool = False) -> None:
    """The head's forward on the padded batch: every type must index the model's own table."""
    torch.manual_seed(0)
    model = head(config, labels).eval()
    batch = pad_batch(encoded, list(range(len(encoded))), pad_id, tagging=tagging,
                      padding_side=family(config).padding_side)
    with torch.no_grad():
        out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
    assert out.shape[:2] == batch["input_ids"].shape[:2] or out.shape[0] == len(encoded)
    assert bool(torch.isfinite(out).all())


CASES = [*((name, {}) for name in FAMILIES), ("bert", {"type_vocab_size": 1})]


@pytest.mark.parametrize(("name", "changes"), CASES, ids=[f"{name}{'-one-type' if changes else ''}"
                                                         for name, changes in CASES])
def test_qa_windows_past_the_first_are_typed_as_the_family_reads_them(name, changes, wordpiece, tmp_path):
    config, tokenizer = family_inputs(name, wordpiece, tmp_path, **changes)
    examples = [QAExample(f"q{index}", question, CONTEXT, (Answer(answer, CONTEXT.index(answer)),))
                for index, (question, answer) in enumerate(QUESTIONS)]
    windows = encode_qa_windows(tokenizer, examples, max_seq_length=48, doc_stride=8, config=config)
    assert len(windows) >= 2 * len(examples)  # every context needs several windows
    expected = EXPECTED[name] if config.type_vocab_size > 1 or name == "xlnet" else EXPECTED["roberta"]
    for ids, types, offsets in zip(windows.input_ids, windows.token_type_ids, windows.context_offsets, strict=True):
        second = next(index for index, offset in enumerate(offsets) if offset is not None)
        assert types == expected(len(ids), second)
    encoded = Encoded(windows.input_ids, windows.token_type_ids, [0] * len(windows))
    run_head(family(config).question_answering_head, config, encoded, token_roles(tokenizer).pad_token_id, 2)


@pytest.mark.parametrize(("name", "changes"), CASES, ids=[f"{name}{'-one-type' if changes else ''}"
                                                         for name, changes in CASES])
def test_pairs_and_tagged_words_are_typed_as_the_family_reads_them(name, changes, wordpiece, tmp_path):
    config, tokenizer = family_inputs(name, wordpiece, tmp_path, **changes)
    expected = EXPECTED[name] if config.type_vocab_size > 1 or name == "xlnet" else EXPECTED["roberta"]
    pad_id = token_roles(tokenizer).pad_token_id
    for length in (8, 64):  # cut longest-first, and whole
        pairs = encode_texts(tokenizer, *PAIRS, [0, 1, 0], length, config=config)
        for index, (ids, types) in enumerate(zip(pairs.input_ids, pairs.token_type_ids, strict=True)):
            encoding = truncating(tokenizer, length).encode(PAIRS[0][index], PAIRS[1][index])
            assert encoding.ids == ids
            separators = token_roles(tokenizer).separators_between_segments
            assert types == expected(len(ids), second_text_start(encoding, separators))
        run_head(family(config).sequence_head, config, pairs, pad_id, 2)
    tagged = encode_words(tokenizer, WORDS, [[0] * len(sentence) for sentence in WORDS], 64, config=config)
    assert tagged.token_type_ids == [expected(len(ids), len(ids)) for ids in tagged.input_ids]
    run_head(family(config).token_head, config, tagged, pad_id, 3, tagging=True)


def write_long_squad(path: Path) -> Path:
    """Three questions on one context that a 40-token window cannot hold whole."""
    qas = [{"id": f"q{index}", "question": question, "answers": [{"text": answer, "answer_start": CONTEXT.index(answer)}]}
           for index, (question, answer) in enumerate(QUESTIONS)]
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": CONTEXT, "qas": qas}]}]}), encoding="utf-8")
    return path


@pytest.mark.parametrize(("make", "model"), [(xlmr_like, "XLMRoberta"), (roberta_like, "Roberta")])
def test_finetune_qa_on_a_released_xlmr_reads_contexts_of_several_windows(make, model, tmp_path, monkeypatch,
                                                                          capsys):
    transformers = pytest.importorskip("transformers")
    from test_roberta_finetune_inputs import released_roberta

    folder = released_roberta(tmp_path / "model", make, None, model)
    assert transformers.AutoConfig.from_pretrained(folder).type_vocab_size == 1
    squad = write_long_squad(tmp_path / "squad.json")
    code, _, stderr = run_main(["finetune", folder, "--task", "qa", "--train", squad, "--validation", squad,
                                "--out", tmp_path / "out", "--seeds", "1", "--epochs", "1", "--batch-size", "4",
                                "--max-seq-length", "40", "--doc-stride", "8"], monkeypatch, capsys)
    assert code == 0, stderr  # was: exit 1, internal error (IndexError)
    assert "windows of at most 40 tokens" in stderr


def test_segments_follow_the_layout_s_special_tokens_even_where_a_text_is_empty():
    from bertpre.tokenizer.roles import text_segments

    # [CLS] a a [SEP] b [SEP]; [CLS] a [SEP] [SEP] (b cut away); [CLS] [SEP] b [SEP] (a empty)
    assert text_segments([None, 0, 0, None, 1, None], 2) == [0, 0, 0, 0, 1, 1]
    assert text_segments([None, 0, None, None], 2) == [0, 0, 0, 1]
    assert text_segments([None, None, 1, None], 2) == [0, 0, 1, 1]
    assert text_segments([None, 0, None], 2) == [0, 0, 0]  # one text
    # <s> a </s></s> b </s>; XLNet's a [SEP] b [SEP] [CLS]
    assert text_segments([None, 0, None, None, 1, None], 3) == [0, 0, 0, 0, 1, 1]
    assert text_segments([0, None, 1, None, None], 1) == [0, 0, 1, 1, 1]


def test_each_layout_says_how_many_special_tokens_come_before_the_second_text(wordpiece, tmp_path):
    from bertpre.tokenizer.roles import specials_before_second_text

    assert {name: specials_before_second_text(family_inputs(name, wordpiece, tmp_path / name)[1])
            for name in FAMILIES} == {"bert": 2, "roberta": 3, "xlm-roberta": 3, "modernbert": 2, "xlnet": 1,
                                      "electra": 2}
