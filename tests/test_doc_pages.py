"""The documentation stays true: the README and docs/ pages' config reference matches the
defaults, their commands exist, their example configs load as they say."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bertpre.cli import app
from bertpre.config import Config

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text(encoding="utf-8")


def first_yaml(text: str) -> str:
    return re.search(r"^```yaml\n(.*?)^```", text, re.M | re.S).group(1)


def parse_default(text: str):
    """A README table cell (`auto`, 1e-4, [0.9, 0.999], `null` ...) as a Python value."""
    text = text.strip().strip("`")
    constants = {"null": None, "true": True, "false": False}
    if text in constants:
        return constants[text]
    if text.startswith("["):
        return json.loads(text)
    for number in (int, float):
        try:
            return number(text)
        except ValueError:
            pass
    fraction = re.fullmatch(r"(\d+)/(\d+)", text)  # a default written as a fraction, e.g. 1/6
    if fraction:
        return int(fraction.group(1)) / int(fraction.group(2))
    return text


def readme_config_reference() -> dict[str, dict]:
    sections: dict[str, dict] = {}
    current = None
    for line in page("reference/configuration.md").splitlines():
        header = re.match(r"\*\*(model|data|optim|train)\*\*", line)
        if header:
            current = sections.setdefault(header.group(1), {})
            continue
        row = re.match(r"\| `(\w+)` \| ([^|]+) \|", line)
        if current is not None and row:
            current[row.group(1)] = parse_default(row.group(2))
    return sections


def test_config_reference_lists_every_key_with_its_default():
    documented = readme_config_reference()
    defaults = Config().to_dict()
    # config.yaml writes model.init_generator_from only where given (older ones read back byte for byte)
    defaults["model"].setdefault("init_generator_from", Config().init_generator_from)
    assert set(documented) == set(defaults)
    for section, values in defaults.items():
        assert documented[section] == values, section


@pytest.mark.parametrize("path", [README, *sorted(DOCS.rglob("*.md"))], ids=lambda path: str(path.relative_to(ROOT)))
def test_every_bertpre_command_in_the_docs_exists(path):
    registered = {command.name or command.callback.__name__ for command in app.registered_commands}
    text = path.read_text(encoding="utf-8")
    code = "\n".join(re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S))
    mentioned = set(re.findall(r"^\s*bertpre ([a-z-]+)", code, re.M))
    mentioned |= set(re.findall(r"-m bertpre ([a-z-]+)", code))
    mentioned |= set(re.findall(r"`bertpre ([a-z-]+)", text))
    if path == README:
        assert mentioned, "the README shows no bertpre command"
    mentioned = {name for name in mentioned if not name.startswith("-")}  # bertpre --version
    assert mentioned <= registered, mentioned - registered


@pytest.mark.parametrize("command", ["make demo", "make test"])
def test_readme_shows_the_two_commands(command):
    assert command in README.read_text()


def test_the_mixture_example_is_a_valid_config(tmp_path):
    from bertpre.config import load_config

    example = first_yaml(page("guides/mixing-corpora.md"))
    (tmp_path / "mixture.yaml").write_text(example, encoding="utf-8")
    assert load_config(tmp_path / "mixture.yaml").data.sources == [("data/rulings", 0.7), ("data/news", 0.3)]


def test_the_continued_pretraining_config_in_the_readme_loads(tmp_path):
    from bertpre.config import load_config

    example = first_yaml(page("guides/continue-bert.md"))
    (tmp_path / "bio.yaml").write_text(example, encoding="utf-8")
    config = load_config(tmp_path / "bio.yaml")
    assert config.init_from == "bert-base-uncased"
    assert config.data.sources == [("data/pubmed", 0.7), ("data/bio-general", 0.3)]
    assert config.train.max_steps == 100000 and config.schedule_span(1) == (0, 100000)
    assert config.for_phase(1).data.max_seq_length == 512


def test_the_sharded_corpus_example_names_a_glob_of_shards(tmp_path):
    from bertpre.config import load_config

    text = page("guides/big-corpus.md")
    example = first_yaml(text)
    (tmp_path / "shards.yaml").write_text(example, encoding="utf-8")
    assert load_config(tmp_path / "shards.yaml").data.sources == [("data/crawl/shard-*", 1.0)]
    for flag in ("--vocab-only", "--vocab-sample-bytes", "--num-shards", "--shard-index", "--merge-manifests"):
        assert flag in text, flag


def test_the_chinese_bert_example_turns_on_whole_word_masking(tmp_path):
    from bertpre.config import load_config

    text = page("guides/chinese.md")
    example = first_yaml(text)
    (tmp_path / "zh.yaml").write_text(example, encoding="utf-8")
    config = load_config(tmp_path / "zh.yaml")
    assert config.data.whole_word_mask and config.data.sources == [("data/zh", 1.0)]
    assert "--word-boundaries jieba" in text and "--user-dict" in text


def test_the_relative_positions_example_loads(tmp_path):
    from bertpre.config import load_config

    example = first_yaml(page("guides/relative-positions.md"))
    (tmp_path / "rope.yaml").write_text(example, encoding="utf-8")
    model = load_config(tmp_path / "rope.yaml").model
    assert (model.position_embedding_type, model.rope_theta) == ("rope", 10000)


def test_the_modernbert_example_loads_and_its_key_table_matches_the_defaults(tmp_path):
    from bertpre.config import load_config
    from bertpre.model.modernbert_config import MODERNBERT_FIELDS

    text = page("guides/modernbert.md")
    example = first_yaml(text)
    (tmp_path / "continue-modernbert.yaml").write_text(example, encoding="utf-8")
    config = load_config(tmp_path / "continue-modernbert.yaml")
    assert config.init_from == "ModernBERT-base" and config.data.mlm_probability == 0.3
    assert config.optim.lr == 8e-4 and config.optim.warmup_steps < config.train.max_steps // 10
    defaults = load_config(None, ["model.architecture=modernbert"]).model
    documented = {}
    for names, values in re.findall(r"^\| ((?:`\w+`(?:, )?)+) \| ([^|]+) \|", text, re.M):
        keys, cells = re.findall(r"`(\w+)`", names), values.split(", ")
        for key, value in zip(keys, cells if len(cells) == len(keys) else cells * len(keys), strict=False):
            documented[key] = value  # one value for several keys: each has it
    assert set(documented) == set(MODERNBERT_FIELDS) | {"initializer_range"}
    for name, value in documented.items():
        assert parse_default(value) == getattr(defaults, name), name


def architecture_map() -> dict[str, set[str]]:
    """docs/architecture.md's map as {package folder: the module files named under it}."""
    block = page("architecture.md").split("```", 2)[1]
    named: dict[str, set[str]] = {}
    folders: list[tuple[int, str]] = []  # (indent, folder) of the enclosing folders
    for line in block.splitlines():
        stripped = line.strip()
        if not stripped or line[0] != " " and not stripped.startswith("bertpre/"):
            continue
        indent, word = len(line) - len(line.lstrip()), stripped.split()[0]
        if word.endswith("/"):
            folders = [(level, name) for level, name in folders if level < indent] + [(indent, word)]
        elif word.endswith(".py"):
            parents = [name for level, name in folders if level < indent]
            named.setdefault("".join(parents), set()).add(word)
    return named


def test_the_architecture_map_names_every_module():
    named = architecture_map()
    package = ROOT / "bertpre"
    modules = {}
    for path in package.rglob("*.py"):
        if path.name == "__init__.py" or "remote_code" in path.parts:
            continue
        folder = "bertpre/" + "".join(f"{part}/" for part in path.relative_to(package).parent.parts)
        modules.setdefault(folder, set()).add(path.name)
    missing = {folder: sorted(names - named.get(folder, set())) for folder, names in modules.items()}
    assert {folder: names for folder, names in missing.items() if names} == {}
    stale = {folder: sorted(names - modules.get(folder, set())) for folder, names in named.items()}
    assert {folder: names for folder, names in stale.items() if names} == {}


def test_no_two_guides_write_the_same_folder():
    """Each guide names its own folders, so following two guides in one folder never mixes their
    DATA, RUN or export folders (as `data/papers` once was both RoBERTa's and ModernBERT's DATA)."""
    writers: dict[str, set[str]] = {}
    for path in sorted((DOCS / "guides").glob("*.md")):
        for block in re.findall(r"^```(?:bash|sh)?\n(.*?)^```", path.read_text(encoding="utf-8"), re.M | re.S):
            for out in re.findall(r"--out (\S+)", block):
                writers.setdefault(out.split("/shard-")[0], set()).add(path.name)
    # The finetune and QA guides start from the pretrain guide's run and export, and say so: one story.
    continuing = {"pretrain.md", "finetune.md", "qa.md"}
    shared = {out: sorted(pages) for out, pages in writers.items() if len(pages) > 1 and not pages <= continuing}
    assert shared == {}
