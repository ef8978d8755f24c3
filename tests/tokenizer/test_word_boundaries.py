"""Word starts from a Chinese segmenter, mapped onto WordPiece tokens, stored in DATA."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from bertpre.data.build import tokenize_corpus
from bertpre.data.encode import encode_documents
from bertpre.data.folder import load_data
from bertpre.errors import UserError
from bertpre.tokenizer.sentence_encoder import ChunkEncoder
from bertpre.tokenizer.word_boundaries import WordStarts, is_cjk, read_user_dict

rjieba = pytest.importorskip("rjieba")

WORDS = ["我们", "北京", "大学", "学习", "自然", "语言", "处理", "模型", "今天", "天气", "很", "好",
         "研究", "数据", "中国", "人民", "训练", "预测", "文本", "句子"]


def chinese_documents(count: int, seed: int = 0) -> list[list[str]]:
    rng = random.Random(seed)
    return [["".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9))) + "。"
             for _ in range(rng.randint(2, 5))] for _ in range(count)]


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    """A character vocab with a few English pieces, trained on Chinese and English text."""
    root = tmp_path_factory.mktemp("zh-vocab")
    corpus = root / "corpus.txt"
    english = ["Transformers learn language models from text.", "Pretraining uses masked tokens."] * 30
    lines = ["".join(sentence) for document in chinese_documents(60) for sentence in document] + english
    corpus.write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    tokenize_corpus([corpus], root / "data", vocab_size=200, min_frequency=1, show_progress=False)
    return load_data(root / "data").tokenizer


def encode(vocab, documents: list[list[str]], word_starts: WordStarts) -> pa.Table:
    table = pa.table({"sentences": pa.array(documents, pa.list_(pa.string()))})
    return encode_documents(table, ChunkEncoder(vocab), word_starts)


def test_chinese_word_starts_are_the_segmenters_words_on_characters(vocab):
    documents = chinese_documents(20, seed=1)
    table = encode(vocab, documents, WordStarts())
    flags = table.column("word_starts").to_pylist()
    jieba = rjieba.Jieba()
    for document, document_flags in zip(documents, flags, strict=True):
        for sentence, sentence_flags in zip(document, document_flags, strict=True):
            starts = {start for _, start, _ in jieba.tokenize(sentence)}
            # One token a character: a token begins a word exactly where the segmenter starts one.
            assert sentence_flags == [int(index in starts) for index in range(len(sentence))], sentence
            assert sum(sentence_flags) < len(sentence)  # there are words of two characters


def test_mixed_text_keeps_wordpiece_words_for_latin_and_segmenter_words_for_chinese(vocab):
    sentence = "我们训练Transforming模型和tokenizers数据。"
    table = encode(vocab, [[sentence]], WordStarts())
    flags = table.column("word_starts").to_pylist()[0][0]
    encoding = vocab.encode(sentence, add_special_tokens=False)
    starts = {start for _, start, _ in rjieba.Jieba().tokenize(sentence)}
    assert len(flags) == len(encoding.tokens)
    assert any(token.startswith("##") for token in encoding.tokens)
    for token, (start, _), flag in zip(encoding.tokens, encoding.offsets, flags, strict=True):
        expected = 0 if token.startswith("##") else int(not is_cjk(sentence[start]) or start in starts)
        assert flag == expected, (token, start)


def test_a_user_dictionary_adds_words(vocab, tmp_path):
    user_dict = tmp_path / "words.txt"
    user_dict.write_text("自然语言处理 100 n\n北京大学\n\n", encoding="utf-8")
    entries = read_user_dict(user_dict)
    assert entries == [("自然语言处理", 100, "n"), ("北京大学", None, None)]
    sentence = "我们在北京大学研究自然语言处理。"
    plain = encode(vocab, [[sentence]], WordStarts()).column("word_starts").to_pylist()[0][0]
    extended = encode(vocab, [[sentence]], WordStarts(user_dict=entries)).column("word_starts").to_pylist()[0][0]
    begin = sentence.index("自然语言处理")
    assert extended[begin:begin + 6] == [1, 0, 0, 0, 0, 0]
    assert plain[begin:begin + 6] != extended[begin:begin + 6]
    bad = tmp_path / "bad.txt"
    bad.write_text("词 many\n", encoding="utf-8")
    with pytest.raises(UserError, match="line 1: 'many' is not a frequency"):
        read_user_dict(bad)


def test_tokenize_stores_word_starts_and_says_which_segmenter(tmp_path):
    corpus = tmp_path / "zh.txt"
    corpus.write_text("\n\n".join("\n".join(document) for document in chinese_documents(30)) + "\n",
                      encoding="utf-8")
    manifest = tokenize_corpus([corpus], tmp_path / "data", vocab_size=120, min_frequency=1,
                               word_boundaries="jieba", show_progress=False)
    data = load_data(tmp_path / "data")
    assert data.train.column_names == ["input_ids", "word_starts"]
    for document, flags in zip(data.train["input_ids"], data.train["word_starts"], strict=True):
        assert [len(sentence) for sentence in document] == [len(sentence) for sentence in flags]
        assert all(sentence[0] == 1 for sentence in flags)
    assert manifest["options"]["word_boundaries"] == "jieba"
    assert manifest["word_boundaries"]["segmenter"].startswith("rjieba ")
    with pytest.raises(UserError, match="--user-dict adds words to the segmenter"):
        tokenize_corpus([corpus], tmp_path / "other", user_dict=corpus, show_progress=False)


def test_a_missing_segmenter_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "rjieba", None)  # import fails as if not installed
    corpus = tmp_path / "zh.txt"
    corpus.write_text("我们学习。\n\n他们研究。\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"--word-boundaries jieba needs the rjieba package: pip install 'bertpre\[zh\]'"):
        tokenize_corpus([corpus], tmp_path / "data", word_boundaries="jieba", show_progress=False)
    assert not (tmp_path / "data").exists()


def test_word_starts_survive_pickling_for_encoding_processes():
    import pickle

    marker = WordStarts(user_dict=[("北京大学", None, None)])
    marker.segment("北京")  # builds the segmenter here
    copy = pickle.loads(pickle.dumps(marker))
    assert copy._jieba is None and copy.user_dict == marker.user_dict
    assert [word for word, _, _ in copy.segment("我在北京大学")] == ["我", "在", "北京大学"]


def test_read_user_dict_refuses_a_missing_file(tmp_path: Path):
    with pytest.raises(UserError, match="does not exist"):
        read_user_dict(tmp_path / "none.txt")
