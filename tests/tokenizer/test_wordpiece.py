"""bertpre.tokenizer.wordpiece: training, saving and loading BERT WordPiece tokenizers, and parity with
transformers' BERT tokenizers built from the same files."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import transformers

from bertpre.errors import UserError
from bertpre.tokenizer.wordpiece import (
    SPECIAL_TOKENS,
    load_tokenizer,
    save_tokenizer,
    tokenizer_lowercases,
    train_tokenizer,
)

ENGLISH = [
    ["The quick brown fox jumps over the lazy dog.", "It was not amused, and said so twice."],
    ["Tokenizers split words into pieces; rarer words split into more pieces.",
     "Pretraining needs plenty of text: books, articles, and encyclopedias."],
    ["Zoë visited the café in São Paulo on Tuesday.", "Naïve façades rarely fool anyone."],
    ["Numbers like 3.14159, 2,718 and 1e-5 appear in scientific writing.",
     "Emails such as someone@example.com are split at punctuation."],
    ["Whole word masking hides every piece of a word at once.",
     "The model predicts the hidden pieces from the context around them."],
    ["Running, runner, runs: the same stem with different endings.",
     "Unbelievably, the unbreakable rule broke under pressure."],
]
CHINESE = [
    ["今天天气很好，我们去公园散步。", "小明喜欢读书，也喜欢写字。"],
    ["机器学习需要大量的数据和计算。", "这个模型可以理解中文和英文。"],
    ["春天来了，花开了，鸟儿在树上唱歌。", "我们在学校学习数学、语文和历史。"],
]
# Sentences the vocab was not trained on: unseen words, accents, mixed scripts, [MASK] in text.
PROBES = [
    "Hello World! The QUICK fox.",
    "Ångström units and crème brûlée",
    "naïve Zoë jumps",
    "我们喜欢机器学习。天气很好！",
    "Mixed 中文 and English, 42 times.",
    "A [MASK] hides here, and [SEP] there.",
    "pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "tabs\tand\u00a0non-breaking spaces",
    "",
]


def corpus_documents() -> list[list[str]]:
    return ENGLISH + CHINESE


def bert_tokenizer_from_vocab(vocab_file: Path, lowercase: bool):
    """transformers' BertTokenizerFast built from a vocab.txt (v5 takes `vocab`, v4 `vocab_file`)."""
    if int(transformers.__version__.split(".")[0]) >= 5:
        return transformers.BertTokenizerFast(vocab=str(vocab_file), do_lower_case=lowercase)
    return transformers.BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=lowercase)


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def trained(request, tmp_path_factory) -> tuple[object, Path, bool]:
    lowercase = request.param
    tokenizer = train_tokenizer(corpus_documents(), vocab_size=300, lowercase=lowercase, min_frequency=1)
    folder = save_tokenizer(tokenizer, tmp_path_factory.mktemp("tokenizer"))
    return tokenizer, folder, lowercase


def test_special_tokens_take_ids_zero_to_four(trained):
    tokenizer, _, _ = trained
    assert [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS] == [0, 1, 2, 3, 4]


def test_vocab_size_is_exactly_the_one_asked_for(trained):
    tokenizer, folder, _ = trained
    assert tokenizer.get_vocab_size() == 300
    assert len((folder / "vocab.txt").read_text(encoding="utf-8").splitlines()) == 300


def test_vocab_comes_out_smaller_when_the_corpus_has_too_few_subwords():
    tokenizer = train_tokenizer([["ab ab ab", "ba ba"]] * 2, vocab_size=500, min_frequency=2)
    # specials, a b, ##a ##b, and the two merges ab and ba (seen at least twice).
    assert sorted(tokenizer.get_vocab()) == sorted([*SPECIAL_TOKENS, "a", "b", "##a", "##b", "ab", "ba"])


def test_vocab_too_small_for_the_alphabet_is_a_user_error():
    with pytest.raises(UserError, match="too small"):
        train_tokenizer(corpus_documents(), vocab_size=40)
    with pytest.raises(UserError, match="too small"):
        train_tokenizer(corpus_documents(), vocab_size=5)


def test_training_is_deterministic():
    # tokenizers' trainer alone numbers ## tokens and breaks alphabet ties in hash-map order.
    vocabs = {
        train_tokenizer(corpus_documents(), vocab_size=250, limit_alphabet=60, min_frequency=1).to_str()
        for _ in range(4)
    }
    assert len(vocabs) == 1


def test_accepts_texts_a_one_shot_iterator_and_files(tmp_path):
    texts = [sentence for document in ENGLISH for sentence in document]
    from_texts = train_tokenizer(texts, vocab_size=200, min_frequency=1)
    from_iterator = train_tokenizer(iter(texts), vocab_size=200, min_frequency=1)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(texts) + "\n", encoding="utf-8")
    from_files = train_tokenizer([corpus], vocab_size=200, min_frequency=1)
    assert from_texts.get_vocab() == from_iterator.get_vocab() == from_files.get_vocab()


def test_template_adds_cls_and_sep_with_segment_ids(trained):
    tokenizer, _, _ = trained
    encoding = tokenizer.encode("the fox", "the dog")
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    first = tokenizer.encode("the fox", add_special_tokens=False).ids
    second = tokenizer.encode("the dog", add_special_tokens=False).ids
    assert encoding.ids == [cls_id, *first, sep_id, *second, sep_id]
    assert encoding.type_ids == [0] * (len(first) + 2) + [1] * (len(second) + 1)


def test_special_tokens_in_text_stay_whole_and_decode_joins_pieces(trained):
    tokenizer, _, lowercase = trained
    ids = tokenizer.encode("the [MASK] jumps", add_special_tokens=False).ids
    assert tokenizer.token_to_id("[MASK]") in ids
    text = "The quick brown fox jumps over the lazy dog."
    expected = text.lower() if lowercase else text
    assert tokenizer.decode(tokenizer.encode(text).ids) == expected


def test_ids_match_transformers_on_english_and_chinese(trained):
    tokenizer, folder, lowercase = trained
    reference = bert_tokenizer_from_vocab(folder / "vocab.txt", lowercase)
    auto = transformers.AutoTokenizer.from_pretrained(str(folder))
    texts = [sentence for document in corpus_documents() for sentence in document] + PROBES
    ours = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
    assert ours == reference(texts)["input_ids"]
    assert ours == auto(texts)["input_ids"]
    pair = tokenizer.encode(PROBES[0], PROBES[3])
    assert pair.ids == auto(PROBES[0], PROBES[3])["input_ids"]
    assert pair.type_ids == auto(PROBES[0], PROBES[3])["token_type_ids"]


def test_saved_folder_describes_a_bert_tokenizer(trained):
    tokenizer, folder, lowercase = trained
    assert sorted(path.name for path in folder.iterdir()) == [
        "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "BertTokenizer"
    assert config["do_lower_case"] is lowercase
    assert config["mask_token"] == "[MASK]"
    vocab = (folder / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert vocab == [tokenizer.id_to_token(index) for index in range(len(vocab))]
    assert tokenizer_lowercases(tokenizer) is lowercase


def test_load_tokenizer_from_json_vocab_and_folder_gives_the_same_ids(trained):
    tokenizer, folder, _ = trained
    texts = PROBES + ["Zoë visited the café in São Paulo on Tuesday."]
    expected = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
    for path in (folder, folder / "tokenizer.json", folder / "vocab.txt"):
        loaded = load_tokenizer(path)
        assert [encoding.ids for encoding in loaded.encode_batch(texts)] == expected, path


def test_vocab_txt_casing_from_config_then_argument_then_vocab(trained, tmp_path):
    tokenizer, folder, lowercase = trained
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(folder / "vocab.txt", alone / "vocab.txt")
    # Without tokenizer_config.json: an uncased vocab has no uppercase tokens.
    assert tokenizer_lowercases(load_tokenizer(alone / "vocab.txt")) is lowercase
    assert tokenizer_lowercases(load_tokenizer(alone / "vocab.txt", lowercase=True)) is True
    (alone / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": not lowercase}))
    assert tokenizer_lowercases(load_tokenizer(alone)) is (not lowercase)


def test_load_tokenizer_errors_name_the_problem(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_tokenizer(tmp_path / "missing")
    with pytest.raises(UserError, match="neither"):
        load_tokenizer(tmp_path)
    (tmp_path / "vocab.txt").write_text("a\nb\n[UNK]\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"lacks the BERT special tokens \[PAD\] \[CLS\] \[SEP\] \[MASK\]"):
        load_tokenizer(tmp_path / "vocab.txt")
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match="not a Hugging Face tokenizer.json"):
        load_tokenizer(tmp_path / "tokenizer.json")


SHARED_CORPORA = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpora"


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_CORPORA.is_dir(), reason="../shared/corpora is not there")
@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_ids_match_transformers_on_every_line_of_the_shared_corpora(lowercase, tmp_path):
    files = sorted(SHARED_CORPORA.glob("*.txt"))
    lines = [line for path in files for line in path.read_text(encoding="utf-8").splitlines()]
    tokenizer = train_tokenizer([path for path in files if path.name != "README.md"],
                                vocab_size=8000, lowercase=lowercase)
    folder = save_tokenizer(tokenizer, tmp_path / "tokenizer")
    reference = bert_tokenizer_from_vocab(folder / "vocab.txt", lowercase)
    for start in range(0, len(lines), 5000):
        batch = lines[start : start + 5000]
        ours = [encoding.ids for encoding in tokenizer.encode_batch(batch)]
        mismatches = [index for index, (a, b) in enumerate(zip(ours, reference(batch)["input_ids"], strict=True)) if a != b]
        assert not mismatches, f"first mismatch on line {start + mismatches[0] + 1}: {batch[mismatches[0]]!r}"


def test_seeds_the_plan_missed_are_added_by_one_retraining(monkeypatch):
    import bertpre.tokenizer.wordpiece as module

    expected = train_tokenizer(corpus_documents(), vocab_size=250, min_frequency=1).to_str()
    planned = module.plan_alphabet
    calls = []

    def plan_without_seeds(*args, **kwargs):
        alphabet, _ = planned(*args, **kwargs)
        return alphabet, []

    def counting_train_once(*args, **kwargs):
        calls.append(args[4])  # the seeds of this round
        return train_once(*args, **kwargs)

    train_once = module._train_once
    monkeypatch.setattr(module, "plan_alphabet", plan_without_seeds)
    monkeypatch.setattr(module, "_train_once", counting_train_once)
    assert train_tokenizer(corpus_documents(), vocab_size=250, min_frequency=1).to_str() == expected
    assert len(calls) == 2 and calls[0] == [] and calls[1]
