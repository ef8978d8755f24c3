"""The sentence splitter on English and Chinese text, with exact expected splits."""

from __future__ import annotations

import pytest

from data_prep.sentences import split_sentences


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("One sentence only", ["One sentence only"]),
        ("", []),
        ("   ", []),
        (
            "First one. Second one! Third one? Fourth.",
            ["First one.", "Second one!", "Third one?", "Fourth."],
        ),
        (
            "Mr. Smith met Dr. Jones at St. Mary's. They talked.",
            ["Mr. Smith met Dr. Jones at St. Mary's.", "They talked."],
        ),
        (
            "Pi is about 3.14159 today. The U.S. Army and the U.K. navy met at 5 p.m. on Monday.",
            [
                "Pi is about 3.14159 today.",
                "The U.S. Army and the U.K. navy met at 5 p.m. on Monday.",
            ],
        ),
        ("Use e.g. Python or i.e. Rust. Fine.", ["Use e.g. Python or i.e. Rust.", "Fine."]),
        (
            "J. R. R. Tolkien wrote it. John F. Kennedy read it.",
            ["J. R. R. Tolkien wrote it.", "John F. Kennedy read it."],
        ),
        ("We need vitamin C. The body needs it.", ["We need vitamin C.", "The body needs it."]),
        (
            "Apples, pears, etc. The rest is history.",
            ["Apples, pears, etc.", "The rest is history."],
        ),
        ("Apples, pears, etc. Were sold.", ["Apples, pears, etc. Were sold."]),
        ("Acme Inc. The company failed.", ["Acme Inc.", "The company failed."]),
        ("Martin Luther King Jr. Day is here.", ["Martin Luther King Jr. Day is here."]),
        ("He met Smith et al. The paper won.", ["He met Smith et al.", "The paper won."]),
        (
            "See No. 5 and Fig. 3 for details. It is on Jan. 12 in Vol. 2.",
            ["See No. 5 and Fig. 3 for details.", "It is on Jan. 12 in Vol. 2."],
        ),
        ("He said no. Then he left.", ["He said no.", "Then he left."]),
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ('"Stop!" he said. "Why?" she asked.', ['"Stop!" he said.', '"Why?" she asked.']),
        ("He left (see above.) Then it rained.", ["He left (see above.)", "Then it rained."]),
        ("Wait... What happened?! Nothing.", ["Wait...", "What happened?!", "Nothing."]),
        ("Wait… then it went on.", ["Wait… then it went on."]),
        ("It costs $3.50. That is cheap.", ["It costs $3.50.", "That is cheap."]),
        ("It was 1999. 2000 came next.", ["It was 1999.", "2000 came next."]),
        ("Go to example.com. Or not.", ["Go to example.com.", "Or not."]),
        ("Yahoo!Mail is odd. ok. still one?", ["Yahoo!Mail is odd. ok. still one?"]),
        ("Élan vital. Über alles.", ["Élan vital.", "Über alles."]),
        ('He said " Stop . " Then he left .', ['He said " Stop . "', "Then he left ."]),
        ('" Stop . " he said . " Go ! " Fine .', ['" Stop . " he said .', '" Go ! "', "Fine ."]),
        ("Wait. ... And. !", ["Wait. ...", "And. !"]),
        (
            "Homarus gammarus , the lobster , H. americanus . It may grow to 60 cm ( 24 in ) .",
            [
                "Homarus gammarus , the lobster , H. americanus .",
                "It may grow to 60 cm ( 24 in ) .",
            ],
        ),
    ],
)
def test_english(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("今天天气很好。我们去公园吧！你去吗？", ["今天天气很好。", "我们去公园吧！", "你去吗？"]),
        ("他说：“你好。”我很好。", ["他说：“你好。”", "我很好。"]),
        ("「走吧！」她说。", ["「走吧！」", "她说。"]),
        ("『終わり。』次へ。", ["『終わり。』", "次へ。"]),
        ("先做这个；再做那个。", ["先做这个；", "再做那个。"]),
        ("真的吗……好吧。", ["真的吗……", "好吧。"]),
        ("真的吗？！不会吧。", ["真的吗？！", "不会吧。"]),
        ("半角也行!对吧?是的", ["半角也行!", "对吧?", "是的"]),
        ("版本 3.11 发布了。很好", ["版本 3.11 发布了。", "很好"]),
        ("日本語です｡次の文｡", ["日本語です｡", "次の文｡"]),
        (
            "中文句子。 English follows. 再来一句。",
            ["中文句子。", "English follows.", "再来一句。"],
        ),
        ("没有句号的一行", ["没有句号的一行"]),
        ("यह पहला वाक्य है। यह दूसरा है।", ["यह पहला वाक्य है।", "यह दूसरा है।"]),
        ("هل أنت بخير؟ نعم.", ["هل أنت بخير؟", "نعم."]),
    ],
)
def test_other_scripts(text: str, sentences: list[str]) -> None:
    assert split_sentences(text) == sentences


def test_sentences_join_back_to_the_text() -> None:
    english = 'Mr. A said "Hi." Then B left. Is it U.S. law? Yes (it is.) Done...'
    assert " ".join(split_sentences(english)) == english
    chinese = "他走了。她来了！“好吗？”好。"
    assert "".join(split_sentences(chinese)) == chinese
