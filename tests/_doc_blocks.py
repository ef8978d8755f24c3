"""The documentation's runnable shell blocks: found by their marker, run as a user types them.

A block is runnable when an HTML comment opening with `try it` stands right before its fence:

    <!-- try it
    pretrain: --set model.hidden_size=32 --set model.num_hidden_layers=2
    writes: data/corpus/manifest.json runs/base/checkpoints/latest
    -->
    ```bash
    bertpre tokenize corpus/ --out data/corpus
    ```

A YAML (or any) block after `<!-- save as: NAME -->` is written to NAME in the scratch folder
before the page's first command runs (a guide may show its config after the commands that read
it), so the config a guide shows is the config its commands read.

`needs: NAME ...` asks for a released model folder the test makes, as `huggingface-cli download`
would have put it there, at a tiny size and with no network (FIXTURES below): a guide shows the
download in a block of its own, left unmarked. `needs: FOLDER/` (a trailing slash) asks for a
corpus folder: the sample corpus (`python -m data_prep.sample_corpus FOLDER/`) stands in for the
guide's text. `zh-corpus`, `bert-base-chinese`, `medical-words.txt`: Chinese text, vocab and
a user dictionary. `electra-small-discriminator`, `electra-small-generator`: a released ELECTRA pair. `sst2`, `mrpc`, `ner`, `squad-v1.1`: small task folders in those tasks' layouts, sentences of the
tests' tiny grammar labelled by rule (FIXTURES).

`writes:` names files the block must leave behind (relative to the page's scratch folder);
`COMMAND: ARGS` appends ARGS to every `bertpre COMMAND` line of the block, so a page shows the
command a user types while the test runs it at a tiny size. Every `bertpre pretrain` line also
gets `--set train.max_steps=N`, N from `BERTPRE_DOCS_STEPS` (default 3). A page's blocks run in
order, in one scratch folder, with this Python's `bertpre` and `python` first on PATH.
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

MARKER = re.compile(r"<!-- (try it\b|save as: )(.*?)-->\s*\n```[a-z]*\n(.*?)^```", re.S | re.M)
STEPS_VARIABLE = "BERTPRE_DOCS_STEPS"
DEFAULT_STEPS = 3


@dataclass
class Block:
    """One runnable block: its commands, the files it claims to write, the arguments the test adds."""

    page: Path
    line: int
    commands: str
    writes: list[str] = field(default_factory=list)
    extra_args: dict[str, str] = field(default_factory=dict)
    save_as: str | None = None  # a file block: written, not run
    needs: list[str] = field(default_factory=list)


def runnable_blocks(page: Path) -> list[Block]:
    """The page's blocks marked `<!-- try it -->` or `<!-- save as: NAME -->`, in page order."""
    text = page.read_text(encoding="utf-8")
    # A four-backtick fence shows the convention itself (docs/development.md): blanked, lines kept.
    text = re.sub(r"^````.*?^````", lambda fence: "\n" * fence.group(0).count("\n"), text, flags=re.M | re.S)
    blocks = []
    for match in MARKER.finditer(text):
        line_number = text.count("\n", 0, match.start()) + 1
        if match.group(1) == "save as: ":
            blocks.append(Block(page, line_number, match.group(3), save_as=match.group(2).strip()))
            continue
        writes, needs, extra_args = [], [], {}
        for line in match.group(2).strip().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "writes":
                writes += value.split()
            elif key.strip() == "needs":
                needs += value.split()
            elif key.strip():
                extra_args[key.strip()] = value.strip()
        blocks.append(Block(page, line_number, match.group(3), writes, extra_args, needs=needs))
    return blocks


def logical_lines(commands: str) -> list[str]:
    """The block's commands, one a line: continuations joined, comments and blank lines left out."""
    lines, pending = [], ""
    for raw in commands.splitlines():
        line = pending + raw.lstrip() if pending else raw
        if line.rstrip().endswith("\\"):
            pending = line.rstrip()[:-1].rstrip() + " "
            continue
        pending = ""
        words = shlex.split(line, comments=True) if line.strip() else []
        if words:
            lines.append(line.split(" #", 1)[0].rstrip() if " #" in line else line.rstrip())
    return lines


def as_run(line: str, extra_args: dict[str, str], steps: int) -> str:
    """The line with the test's arguments added to its `bertpre COMMAND` (or `-m bertpre COMMAND`)."""
    match = re.search(r"(?:^|\s|-m )bertpre ([a-z-]+)", line)
    if not match:
        return line
    added = extra_args.get(match.group(1), "")
    if match.group(1) == "pretrain":
        added = f"--set train.max_steps={steps} {added}"
    return f"{line} {added}".rstrip()


def steps_from_environment() -> int:
    return int(os.environ.get(STEPS_VARIABLE, DEFAULT_STEPS))


def run_block(block: Block, folder: Path, steps: int, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the block in `folder` with bash (-e: the first failing command fails it)."""
    script = "\n".join(["set -euo pipefail"] + [as_run(line, block.extra_args, steps)
                                                  for line in logical_lines(block.commands)])
    bin_dir = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "OMP_NUM_THREADS": "1"}
    return subprocess.run(["bash", "-c", script], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=timeout)


def check_page(page: Path, folder: Path, steps: int | None = None) -> int:
    """Run every runnable block of `page` in order in `folder`; fail on an exit code or a missing
    file with the block's place and output. Returns how many command blocks ran."""
    steps = steps_from_environment() if steps is None else steps
    blocks = runnable_blocks(page)
    for block in blocks:
        if block.save_as:
            (folder / block.save_as).write_text(block.commands, encoding="utf-8")
    for block in blocks:
        if block.save_as:
            continue
        for name in block.needs:
            if not (folder / name).exists():
                make = sample_corpus if name.endswith("/") else FIXTURES[name]
                make(folder / name)
        result = run_block(block, folder, steps)
        where = f"{page.name}:{block.line}"
        assert result.returncode == 0, f"{where} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        missing = [path for path in block.writes if not (folder / path).exists()]
        assert not missing, f"{where} did not write {missing}\n{result.stdout}\n{result.stderr}"
    return sum(block.save_as is None for block in blocks)


def sample_corpus(folder: Path) -> None:
    from data_prep.sample_corpus import write_sample_corpus

    write_sample_corpus(folder)


def released_bert(folder: Path, chinese: bool = False) -> None:
    """bert-base-uncased's layout (vocab.txt, config.json, model.safetensors) at 2 layers of 32,
    its 512 positions kept; the vocab a 1,000-piece WordPiece of the tests' tiny documents
    (`chinese`: of their Chinese ones, as bert-base-chinese's)."""
    import torch
    import transformers
    from _tiny_data import chinese_documents, tiny_documents

    from bertpre.tokenizer import train_tokenizer

    documents = chinese_documents(200) if chinese else tiny_documents(200)
    tokenizer = train_tokenizer(documents, vocab_size=1000, lowercase=True)
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("".join(f"{token}\n" for token, _ in vocab), encoding="utf-8")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=4, intermediate_size=64, max_position_embeddings=512)
    transformers.BertForPreTraining(config).save_pretrained(folder)


def chinese_corpus(folder: Path) -> None:
    """Chinese text in the corpus format: the tests' tiny Chinese documents, a blank line between."""
    from _tiny_data import chinese_documents

    folder.mkdir(parents=True)
    text = "\n\n".join("\n".join(document) for document in chinese_documents(200))
    (folder / "zh.txt").write_text(text + "\n", encoding="utf-8")


def user_dictionary(path: Path) -> None:
    """A jieba user dictionary: a word and its frequency a line."""
    from _tiny_data import CHINESE_WORDS

    path.write_text("".join(f"{word} 100\n" for word in CHINESE_WORDS[:2]), encoding="utf-8")


def released_roberta(folder: Path) -> None:
    """roberta-base's layout (a byte-level BPE, `<pad>` 1, 514 positions, one token type) at 2
    layers of 32."""
    import torch
    import transformers
    from _released_tokenizers import roberta_like

    from bertpre.tokenizer import load_tokenizer

    roberta_like(folder)
    torch.manual_seed(0)
    config = transformers.RobertaConfig(
        vocab_size=load_tokenizer(folder).get_vocab_size(), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=514, type_vocab_size=1,
        pad_token_id=1, bos_token_id=0, eos_token_id=2)
    transformers.RobertaForMaskedLM(config).save_pretrained(folder)


def released_modernbert(folder: Path) -> None:
    """ModernBERT-base's layout (`model_type: modernbert`, a byte-level BPE) at 3 layers of 32, a
    window of 16 and 8,192 positions."""
    import torch
    import transformers
    from _released_tokenizers import roberta_like

    from bertpre.tokenizer import load_tokenizer

    roberta_like(folder)
    torch.manual_seed(0)
    config = transformers.ModernBertConfig(
        vocab_size=load_tokenizer(folder).get_vocab_size(), hidden_size=32, num_hidden_layers=3,
        num_attention_heads=4, intermediate_size=64, local_attention=16, pad_token_id=1, bos_token_id=0,
        eos_token_id=2, cls_token_id=0, sep_token_id=2)
    transformers.ModernBertForMaskedLM(config).save_pretrained(folder)


def released_electra(folder: Path, kind: str) -> None:
    """google/electra-small-discriminator's or -generator's layout (vocab.txt, an ElectraConfig with
    embeddings 32 wide) at 2 layers: the discriminator 64 wide with 4 heads, the generator half of
    it (32 wide, one head, as ELECTRA gives a head to every 64); both on bert-base-uncased's
    fixture's vocab, so the two pair."""
    import torch
    import transformers

    released_bert(folder)  # its vocab.txt; the BERT weights are replaced below
    for name in ("config.json", "model.safetensors"):
        (folder / name).unlink()
    vocab_size = len((folder / "vocab.txt").read_text(encoding="utf-8").splitlines())
    shape = dict(vocab_size=vocab_size, embedding_size=32, num_hidden_layers=2, max_position_embeddings=512)
    torch.manual_seed(0)
    if kind == "discriminator":
        config = transformers.ElectraConfig(**shape, hidden_size=64, num_attention_heads=4, intermediate_size=256)
        transformers.ElectraForPreTraining(config).save_pretrained(folder)
    else:
        config = transformers.ElectraConfig(**shape, hidden_size=32, num_attention_heads=1, intermediate_size=128)
        transformers.ElectraForMaskedLM(config).save_pretrained(folder)


def task_sentences(count: int, seed: int) -> list[tuple[str, int]]:
    """Sentences of the tests' tiny grammar, labelled 1 when an animal is their subject."""
    from _tiny_data import tiny_documents

    sentences = [sentence for document in tiny_documents(count, seed) for sentence in document][:count]
    return [(sentence, int(sentence.startswith(("the cat", "a dog", "a small bird")))) for sentence in sentences]


def sentence_task(folder: Path) -> None:
    """SST-2's layout: train.tsv and dev.tsv with `sentence` and `label` columns."""
    folder.mkdir(parents=True)
    for split, count, seed in (("train", 120, 0), ("dev", 40, 1)):
        rows = "".join(f"{sentence}\t{label}\n" for sentence, label in task_sentences(count, seed))
        (folder / f"{split}.tsv").write_text("sentence\tlabel\n" + rows, encoding="utf-8")


def pair_task(folder: Path) -> None:
    """MRPC's as JSON lines: `sentence1`, `sentence2`, `label` (1: the same subject)."""
    import json

    folder.mkdir(parents=True)
    for split, count, seed in (("train", 120, 0), ("dev", 40, 1)):
        first, second = task_sentences(count, seed), task_sentences(count, seed + 10)
        rows = [{"sentence1": a, "sentence2": b, "label": int(a.split()[:2] == b.split()[:2])}
                for (a, _), (b, _) in zip(first, second, strict=True)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


def tagging_task(folder: Path) -> None:
    """CoNLL: a word and its tag a line (B-SUBJ I-SUBJ for the subject, O else), a blank line between."""
    folder.mkdir(parents=True)
    for split, count, seed in (("train", 120, 0), ("dev", 40, 1)):
        lines = []
        for sentence, _ in task_sentences(count, seed):
            words = sentence.split()
            subject = 3 if words[:3] in (["the", "old", "man"], ["a", "small", "bird"]) else 2
            tags = ["B-SUBJ"] + ["I-SUBJ"] * (subject - 1) + ["O"] * (len(words) - subject)
            lines += [f"{word} {tag}" for word, tag in zip(words, tags, strict=True)] + [""]
        (folder / f"{split}.conll").write_text("\n".join(lines) + "\n", encoding="utf-8")


def squad_task(folder: Path) -> None:
    """SQuAD v1.1's layout: train.json and dev.json, "who VERB OBJECT ?" on two sentences of the
    tests' tiny grammar, the answer the subject of the sentence asked about."""
    import json

    folder.mkdir(parents=True)
    for split, count, seed in (("train", 60, 0), ("dev", 20, 1)):
        sentences = [sentence for sentence, _ in task_sentences(2 * count, seed)]
        paragraphs = []
        for number in range(count):
            pair = sentences[2 * number: 2 * number + 2]
            context = " ".join(pair)
            words = pair[number % 2].split()
            subject = 3 if words[:3] in (["the", "old", "man"], ["a", "small", "bird"]) else 2
            answer = " ".join(words[:subject])
            question = {"id": f"{split}-{number}", "question": f"who {' '.join(words[subject:-1])} ?",
                        "answers": [{"text": answer, "answer_start": context.index(pair[number % 2])}]}
            paragraphs.append({"context": context, "qas": [question]})
        document = {"version": "1.1", "data": [{"title": "tiny", "paragraphs": paragraphs}]}
        (folder / f"{split}.json").write_text(json.dumps(document), encoding="utf-8")


FIXTURES = {"bert-base-uncased": released_bert, "roberta-base": released_roberta,
            "ModernBERT-base": released_modernbert, "sst2": sentence_task, "mrpc": pair_task,
            "ner": tagging_task, "squad-v1.1": squad_task, "zh-corpus": chinese_corpus,
            "bert-base-chinese": lambda folder: released_bert(folder, chinese=True),
            "medical-words.txt": user_dictionary,
            "electra-small-discriminator": lambda folder: released_electra(folder, "discriminator"),
            "electra-small-generator": lambda folder: released_electra(folder, "generator")}
