"""data_prep.poem_questions on fortune entries written as fortunes-zh writes them (ANSI colours,
both title styles, parts, prefaces); no installation needed, except for the slow test."""
from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest

from bertpre.finetune.qa_data import read_qa_file
from bertpre.finetune.qa_seeds import QASettings, answer_language, load_qa_task
from data_prep.poem_questions import (
    Poem,
    author_question,
    build,
    clauses,
    line_questions,
    main,
    parse_entry,
    read_poems,
    split_entries,
)

TANG = ("\x1b[32m《感遇・其一》\x1b[m\n\x1b[33m作者：张九龄\x1b[m\n兰叶春葳蕤，桂华秋皎洁。\n"
        "欣欣此生意，自尔为佳节。\n谁知林栖者，闻风坐相悦。\n草木有本心，何求美人折？\n")
SONG = ("\x1b[32m题目:《塞上》\x1b[m\n\x1b[33m作者:柳开（９４６－９９９）\x1b[m\n"
        "鸣骹直上一千尺，天静无风声更干。\n碧眼胡儿三百骑，尽提金勒向云看。\n")
PARTS = ("\n\x1b[32m题目:《春居杂兴》二首\x1b[m\n\x1b[33m作者:王禹偁（９５４－１００１）\x1b[m\n\n"
         "            其一\n\n两株桃杏映篱斜，妆点商山副使家，\n何事春风容不得，和莺吹折数枝花。\n\n"
         "            其二\n\n春云如兽复如禽，日照风吹浅又深。\n谁道无心便容与，亦同翻覆小人心。\n")
PREFACE = ("\x1b[32m《燕歌行・并序》\x1b[m\n\x1b[33m作者：高适\x1b[m\n开元二十六年，客有从元戎出塞而还者，作燕歌行以示适。\n"
           "感征戍之事，因而和焉。\n  \n汉家烟尘在东北，汉将辞家破残贼。\n男儿本自重横行，天子非常赐颜色。\n")
NOTE = "\x1b[32m题目:《宫词》\x1b[m\n\x1b[33m作者:宋徽宗〔赵佶〕（１０８２－１１３５）\x1b[m\n新样梳妆巧画眉，窄衣纤体最相宜；\n"


def poem(entry: str) -> Poem:
    parsed = parse_entry(entry, "test")
    assert isinstance(parsed, Poem), parsed
    return parsed


def test_entries_are_split_on_percent_lines_with_or_without_trailing_spaces():
    assert split_entries(TANG + "%\n" + SONG + "%    \n" + PARTS + "%\n") == [TANG, "\n" + SONG, "\n" + PARTS]


def test_a_tang_entry_gives_title_author_and_lines():
    assert poem(TANG) == Poem("test", "感遇・其一", "张九龄", (("兰叶春葳蕤，桂华秋皎洁。", "欣欣此生意，自尔为佳节。",
                                                      "谁知林栖者，闻风坐相悦。", "草木有本心，何求美人折？"),))


def test_a_song_entry_loses_the_title_label_and_the_authors_dates():
    parsed = poem(SONG)
    assert (parsed.title, parsed.author) == ("塞上", "柳开")
    assert poem(NOTE).author == "宋徽宗"


def test_parts_are_kept_apart_and_a_preface_left_out():
    parsed = poem(PARTS)
    assert (parsed.title, len(parsed.parts), parsed.parts[1][0]) == ("春居杂兴", 2, "春云如兽复如禽，日照风吹浅又深。")
    assert parsed.text.split("\n")[:4] == ["《春居杂兴》", "作者：王禹偁", "其一", "两株桃杏映篱斜，妆点商山副使家，"]
    with_preface = poem(PREFACE)
    assert with_preface.title == "燕歌行"
    assert with_preface.parts == (("汉家烟尘在东北，汉将辞家破残贼。", "男儿本自重横行，天子非常赐颜色。"),)


def test_unreadable_entries_are_named_by_what_is_wrong():
    assert parse_entry("no title here\n作者：某\n一二三，四五六。\n", "test") == "title"
    assert parse_entry("《题》\n作者 missing\n一二三，四五六。\n", "test") == "author"
    assert parse_entry("《题》\n作者：某人\nHello, world.\n", "test") == "lines"
    assert parse_entry("《题》\n作者：某人\n", "test") == "lines"
    assert parse_entry("《题・并序》\n作者：某人\n序文没有空行，\n诗句，诗句。\n", "test") == "preface"


def test_clauses_are_the_runs_between_punctuation():
    assert clauses("兰叶春葳蕤，桂华秋皎洁。") == ["兰叶春葳蕤", "桂华秋皎洁"]
    assert clauses("问其人，曰：“余公孙大娘弟子也。”") == ["问其人", "曰", "余公孙大娘弟子也"]


def test_questions_ask_next_previous_title_and_author_with_checked_spans():
    song, tang = poem(SONG), poem(TANG)
    context = song.text + "\n\n" + tang.text
    dropped = Counter()
    questions = author_question(context, song, dropped) + line_questions(context, song, random.Random(0), dropped)
    asked = {(q.kind, q.question): [a.text for a in q.answers] for q in questions}
    assert asked[("author", "《塞上》的作者是谁？")] == ["柳开"]
    assert asked[("next", "「鸣骹直上一千尺」的下一句是什么？")] == ["天静无风声更干"]
    assert asked[("next", "「天静无风声更干」的下一句是什么？")] == ["碧眼胡儿三百骑"]  # across lines
    assert asked[("previous", "「尽提金勒向云看」的上一句是什么？")] == ["碧眼胡儿三百骑"]
    assert Counter(kind for kind, _ in asked) == {"author": 1, "next": 3, "previous": 3, "title": 2}
    assert all(answer == ["塞上"] for (kind, _), answer in asked.items() if kind == "title")
    for question in questions:
        for answer in question.answers:
            assert context[answer.start:answer.start + len(answer.text)] == answer.text
    assert dropped == {}


def test_next_and_previous_stay_within_a_part():
    parts = poem(PARTS)
    questions = line_questions(parts.text, parts, random.Random(0), Counter())
    asked = {q.question: q.answers[0].text for q in questions if q.kind != "title"}
    assert "「和莺吹折数枝花」的下一句是什么？" not in asked  # the end of 其一
    assert "「春云如兽复如禽」的上一句是什么？" not in asked  # the start of 其二
    assert asked["「春云如兽复如禽」的下一句是什么？"] == "日照风吹浅又深"


def test_a_line_found_twice_in_the_context_is_neither_cue_nor_answer():
    repeated = poem("《重》\n作者：某人\n明月照高楼，流光正徘徊。\n上有愁思妇，明月照高楼。\n")
    dropped = Counter()
    questions = line_questions(repeated.text, repeated, random.Random(0), dropped)
    asked = {q.question: q.answers[0].text for q in questions if q.kind != "title"}
    assert all("明月照高楼" not in question and answer != "明月照高楼" for question, answer in asked.items())
    assert asked == {"「流光正徘徊」的下一句是什么？": "上有愁思妇", "「上有愁思妇」的上一句是什么？": "流光正徘徊"}
    assert dropped == {"cue_not_unique_or_short": 2, "answer_not_unique_or_short": 2}  # first and last asked one way
    twice = poem(SONG)  # the same author twice in one context: whose poem is 塞上 is not asked
    context = twice.text + "\n\n" + poem(SONG.replace("塞上", "塞下")).text
    assert author_question(context, twice, dropped) == []


def test_a_paragraph_long_title_is_neither_asked_about_nor_an_answer():
    long = poem("《正月二十日与潘郭二生出郊寻春，忽记去年是日同至女王城作诗，乃和前韵》\n作者：苏轼\n"
                "东风未肯入东门，走马还寻去岁春。\n")
    dropped = Counter()
    assert author_question(long.text, long, dropped) == []
    questions = line_questions(long.text, long, random.Random(0), dropped)
    assert {q.kind for q in questions} == {"next", "previous"} and dropped == {"title_too_long": 2}


CHARACTERS = "天地玄黄宇宙洪荒日月盈昃辰宿列张寒来暑往秋收冬藏闰余成岁律吕调阳云腾致雨露结为霜金生丽水玉出昆冈"


def fixture_entry(number: int) -> str:
    """A fortune entry with a title, an author and four lines unique to `number`."""
    rng = random.Random(number)
    lines = ["，".join("".join(rng.choice(CHARACTERS) for _ in range(5)) for _ in range(2)) + "。" for _ in range(4)]
    title = f"\x1b[32m题目:《诗{number}》\x1b[m" if number % 2 else f"\x1b[32m《诗{number}》\x1b[m"
    return f"{title}\n\x1b[33m作者：诗人{CHARACTERS[number % 20]}\x1b[m\n" + "\n".join(lines) + "\n"


@pytest.fixture
def fortunes(tmp_path) -> Path:
    folder = tmp_path / "fortunes"
    folder.mkdir()
    (folder / "tang300").write_text("%\n".join(fixture_entry(n) for n in range(30)) + "%\n" + TANG + "%\n" + PREFACE,
                                    encoding="utf-8")
    (folder / "song100").write_text("%\n".join([SONG, PARTS, "not a poem\n"] + [fixture_entry(n) for n in range(30, 40)]),
                                    encoding="utf-8")
    return folder


def squad_questions(path: Path):
    for article in json.loads(path.read_text(encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                yield paragraph["context"], qa


def test_read_poems_counts_what_it_leaves_out(fortunes):
    poems, left_out = read_poems(fortunes, ["tang300", "song100"])
    assert len(poems) == 44 and left_out == {"title": 1}
    assert Counter(p.collection for p in poems) == {"tang300": 32, "song100": 12}


def test_build_writes_chinese_squad_files_bertpre_reads(fortunes, tmp_path):
    summary = build(fortunes, tmp_path / "out", seed=2)
    assert summary["parsed"] == {"poems": 44, "by_collection": {"tang300": 32, "song100": 12},
                                 "entries_left_out": {"title": 1}}
    seen: dict[str, str] = {}
    for name in ("train", "dev", "test"):
        path = tmp_path / "out" / f"{name}.json"
        for context, qa in squad_questions(path):
            for answer in qa["answers"]:
                assert context[answer["answer_start"]:answer["answer_start"] + len(answer["text"])] == answer["text"]
                assert context.count(answer["text"]) == 1
            for title in {part.split("》")[0] for part in context.split("《")[1:]}:
                assert seen.setdefault(title, name) == name, f"《{title}》 in {seen[title]} and {name}"
        assert len(read_qa_file(path)) == summary["splits"][name]["questions"] > 0
    assert len(seen) == 44
    task = load_qa_task(tmp_path / "out" / "train.json", tmp_path / "out" / "dev.json",
                        tmp_path / "out" / "test.json", QASettings())  # as `bertpre finetune --task qa` reads them
    assert answer_language(task.validation, "auto") == "zh"  # scored with CMRC 2018's character F1


def test_the_same_seed_writes_the_same_files(fortunes, tmp_path):
    for folder, seed in (("a", 1), ("b", 1), ("c", 2)):
        build(fortunes, tmp_path / folder, seed=seed)
    for name in ("train.json", "dev.json", "test.json", "summary.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "train.json").read_bytes() != (tmp_path / "c" / "train.json").read_bytes()


def test_version_2_asks_about_titles_and_lines_the_context_lacks(fortunes, tmp_path):
    summary = build(fortunes, tmp_path / "out", seed=2, version_2=True, max_eval=50)
    train = summary["splits"]["train"]
    assert 0.25 < train["unanswerable"] / train["questions"] < 0.42
    impossible = 0
    for context, qa in squad_questions(tmp_path / "out" / "train.json"):
        if qa["is_impossible"]:
            impossible += 1
            cue = qa["question"].split("」")[0].removeprefix("「") if qa["question"].startswith("「") \
                else "《" + qa["question"].split("》")[0].removeprefix("《") + "》"
            assert cue not in context and qa["answers"] == []
    assert impossible == train["unanswerable"]
    read_qa_file(tmp_path / "out" / "dev.json", version_2_with_negative=True)


def test_version_2_keeps_the_contexts_and_answerable_questions_of_version_1(fortunes, tmp_path):
    build(fortunes, tmp_path / "v1", seed=4)
    build(fortunes, tmp_path / "v2", seed=4, version_2=True)
    for name in ("train.json", "dev.json", "test.json"):
        kept = [[(context, qa["question"], qa["answers"]) for context, qa in squad_questions(tmp_path / version / name)
                 if qa["answers"]] for version in ("v1", "v2")]
        assert kept[0] == kept[1]


def test_a_missing_collection_is_one_line_naming_the_apt_package(tmp_path, capsys):
    assert main(["--out", str(tmp_path / "out"), "--fortunes", str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "apt-get install -y fortunes-zh" in error and "tang300" in error


def test_bad_options_are_refused(fortunes, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "out"), "--fortunes", str(fortunes), "--max-train", "0"])
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "out"), "--fortunes", str(fortunes), "--unanswerable-share", "1"])
    assert "--unanswerable-share must be between 0 and 1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.skipif(not Path("/usr/share/games/fortunes/tang300").is_file(), reason="fortunes-zh is not installed")
def test_the_installed_poems_give_a_set(tmp_path):
    summary = build(Path("/usr/share/games/fortunes"), tmp_path, version_2=True)
    assert summary["parsed"]["poems"] >= 400 and sum(summary["parsed"]["entries_left_out"].values()) <= 8
    for name in ("train", "dev", "test"):
        assert len(read_qa_file(tmp_path / f"{name}.json", version_2_with_negative=True)) == \
            summary["splits"][name]["questions"]
