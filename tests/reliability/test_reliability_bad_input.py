"""Bad input over every command: exit 2, one stderr line naming the problem, no traceback, and
nothing written or overwritten anywhere (every path's size and mtime compared before/after).

Most cases run `bertpre.cli.main` in this process (a subprocess costs seconds of imports);
those marked `subprocess` run the real `python -m bertpre` to catch what only a fresh
process would print (warnings, logging set up at import).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _reliability_harness import ENV, TINY_CONFIG, bertpre_command, folder_state, run_cli


@dataclass
class World:
    """What a case may build its input from; `tmp` is the case's own folder."""

    tmp: Path
    data: Path
    config: Path
    reference: Path

    def write(self, name: str, content: str | bytes) -> Path:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return path

    def config_with(self, old: str, new: str) -> Path:
        assert old in TINY_CONFIG
        return self.write("bad.yaml", TINY_CONFIG.replace(old, new))

    def folder(self, name: str) -> Path:
        path = self.tmp / name
        path.mkdir(parents=True)
        return path

    def run_copy(self) -> Path:
        target = self.tmp / "run"
        shutil.copytree(self.reference, target)
        return target

    def latest(self, run: Path) -> Path:
        return run / "checkpoints" / (run / "checkpoints" / "latest").read_text().strip()

    def pretrain(self, *extra: str | Path, config: Path | None = None, data: Path | None = None,
                 out: Path | None = None) -> list[str | Path]:
        return ["pretrain", "--config", config or self.config, "--data", data or self.data,
                "--out", out or self.tmp / "run", *extra]


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


class Payload:
    """Unpickling this would create a file: proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


CASES: dict[str, tuple[Callable[[World], list], str, bool]] = {}


def case(name: str, expected: str, *, in_subprocess: bool = False):
    """Register a case: `build(world)` makes its input and returns the command line."""
    def register(build: Callable[[World], list]) -> Callable[[World], list]:
        CASES[name] = (build, expected, in_subprocess)
        return build
    return register


def tokenize(world: World, corpus: Path | str, *extra: str) -> list:
    return ["tokenize", corpus, "--out", world.tmp / "data", "--vocab-size", "150", *extra]


# --- bad corpora (tokenize) ---
case("corpus-missing", "no such file or folder", in_subprocess=True)(
    lambda w: tokenize(w, w.tmp / "nowhere.txt"))
case("corpus-empty", "the corpus is empty")(lambda w: tokenize(w, w.write("empty.txt", "")))
case("corpus-blank-lines", "the corpus is empty")(lambda w: tokenize(w, w.write("blank.txt", "\n \n\t\n")))
case("corpus-binary", "looks binary")(
    lambda w: tokenize(w, w.write("photo.txt", bytes(range(256)) * 40)))
case("corpus-invalid-utf8-only", "the corpus has no text")(
    lambda w: tokenize(w, w.write("latin1.txt", b"\xe9\xe8\xe0 \xe7\xf9\n" * 300)))
case("corpus-huge-single-line", "is over 1 MiB")(
    lambda w: tokenize(w, w.write("one-line.txt", "word " * 300_000)))
case("corpus-wrong-json-field", "no 'text' field", in_subprocess=True)(
    lambda w: tokenize(w, w.write("docs.jsonl", '{"body": "a cat sat"}\n{"body": "a dog ran"}\n')))
case("corpus-broken-json", "not valid JSON")(
    lambda w: tokenize(w, w.write("docs.jsonl", '{"text": "a cat sat"\n')))
case("corpus-unknown-extension", "unknown corpus file type")(
    lambda w: tokenize(w, w.write("report.docx", "a cat sat\n")))
case("corpus-empty-folder", "no corpus files")(lambda w: tokenize(w, w.folder("empty-dir")))
case("corpus-glob-matches-nothing", "no files match this pattern")(lambda w: tokenize(w, str(w.tmp / "*.jsonl")))
case("tokenize-out-is-data-folder", "already exists; pass --overwrite")(
    lambda w: ["tokenize", w.write("c.txt", "a cat sat.\n"), "--out", w.data])
case("tokenize-vocab-size-zero", "--vocab-size 0 is too small")(lambda w: tokenize(w, w.write("c.txt", "a cat.\n"), "--vocab-size", "0"))
case("tokenize-validation-share-over-1", "--validation-share 1.5 must be")(
    lambda w: tokenize(w, w.write("c.txt", "a cat.\n"), "--validation-share", "1.5"))
case("tokenize-tokenizer-not-a-tokenizer", "is not a Hugging Face tokenizer.json")(
    lambda w: ["tokenize", w.write("c.txt", "a cat.\n"), "--out", w.tmp / "data", "--tokenizer",
               w.write("vocab.json", "{}")])


def reuse(world: World, *extra: str) -> list:
    """tokenize with the reference DATA's tokenizer (a trained WordPiece, lowercase) and `extra`."""
    return ["tokenize", world.write("c.txt", "A Cat sat.\n"), "--out", world.tmp / "data", "--tokenizer",
            world.data / "tokenizer", *extra]


# an option a reused tokenizer would ignore is refused, not dropped
case("tokenize-vocab-size-with-tokenizer", "--vocab-size 500 sizes a vocab being trained; --tokenizer reuses one")(
    lambda w: reuse(w, "--vocab-size", "500"))
case("tokenize-cased-with-a-lowercase-tokenizer", "--cased: the tokenizer at")(lambda w: reuse(w, "--cased"))
case("tokenize-limit-alphabet-with-tokenizer", "--limit-alphabet 50 limits the alphabet of a vocab being trained")(
    lambda w: reuse(w, "--limit-alphabet", "50"))
case("tokenize-min-frequency-with-tokenizer", "--tokenizer without --add-vocab uses it nowhere")(
    lambda w: reuse(w, "--min-frequency", "5"))

# --- config problems (pretrain, info) ---
case("config-missing", "does not exist", in_subprocess=True)(
    lambda w: w.pretrain(config=w.tmp / "nowhere.yaml"))
case("config-typo-key", "did you mean 'max_steps'")(
    lambda w: w.pretrain(config=w.config_with("max_steps: 36", "max_step: 36")))
case("config-typo-section", "did you mean 'optim'")(
    lambda w: w.pretrain(config=w.config_with("optim:", "optimizer:")))
case("config-wrong-type", "train.batch_size must be an integer")(
    lambda w: w.pretrain(config=w.config_with("batch_size: 8", "batch_size: eight")))
case("config-negative-size", "model.hidden_size must be a positive integer of at most 1,000,000,000,000,000, got -32")(
    lambda w: w.pretrain(config=w.config_with("hidden_size: 32", "hidden_size: -32")))
case("config-zero-size", "train.micro_batch_size must be a positive integer")(
    lambda w: w.pretrain(config=w.config_with("micro_batch_size: 4", "micro_batch_size: 0")))
case("config-heads-do-not-divide", "must be divisible by model.num_attention_heads (5)")(
    lambda w: w.pretrain(config=w.config_with("num_attention_heads: 4", "num_attention_heads: 5")))
case("config-batch-not-divisible", "not divisible")(
    lambda w: w.pretrain(config=w.config_with("micro_batch_size: 4", "micro_batch_size: 3")))
case("config-seq-longer-than-positions", "larger than model.max_position_embeddings")(
    lambda w: w.pretrain(config=w.config_with("max_seq_length: 32", "max_seq_length: 64")))
case("config-vocab-smaller-than-data", "smaller than the tokenizer's vocabulary")(
    lambda w: w.pretrain(config=w.config_with("hidden_size: 32", "hidden_size: 32\n  vocab_size: 50")))
case("config-probabilities-contradict", "at most 1")(
    lambda w: w.pretrain("--set", "data.mask_replace_prob=0.9", "--set", "data.random_replace_prob=0.2"))
case("config-not-yaml", "is not valid YAML", in_subprocess=True)(
    lambda w: w.pretrain(config=w.write("bad.yaml", "model: [hidden_size: 32\ntrain: {")))
case("config-a-list", "must be a mapping")(lambda w: w.pretrain(config=w.write("bad.yaml", "- 1\n- 2\n")))
case("config-binary", "not UTF-8")(lambda w: w.pretrain(config=w.write("bad.yaml", b"\xff\xfe\x00model")))
case("config-yaml-bomb", "YAML aliases")(lambda w: w.pretrain(config=w.write("bomb.yaml", "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]))))
case("info-bad-config", "model.num_hidden_layers must be a positive integer")(
    lambda w: ["info", "--config", w.config_with("num_hidden_layers: 2", "num_hidden_layers: 0")])
case("set-unknown-key", "did you mean 'max_steps'", in_subprocess=True)(
    lambda w: w.pretrain("--set", "train.max_stepz=3"))
case("set-unknown-section", "unknown config section")(lambda w: w.pretrain("--set", "trian.max_steps=3"))
case("set-not-key-value", "must look like section.key=value")(lambda w: w.pretrain("--set", "train.max_steps"))
case("set-wrong-type", "must be an integer")(lambda w: w.pretrain("--set", "train.max_steps=ten"))
case("info-set-unknown-key", "did you mean")(
    lambda w: ["info", "--config", w.config, "--set", "model.hidden_sise=64"])

# --- bad data and checkpoints ---
case("data-missing", "does not exist")(lambda w: w.pretrain(data=w.tmp / "no-data"))
case("data-not-a-data-folder", "is not a DATA folder")(lambda w: w.pretrain(data=w.folder("plain")))


@case("data-manifest-damaged", "manifest.json is not valid JSON")
def damaged_manifest(w: World) -> list:
    shutil.copytree(w.data, w.tmp / "data")
    (w.tmp / "data" / "manifest.json").write_text("{")
    return w.pretrain(data=w.tmp / "data")


@case("data-from-another-tokenizer", "was made by another tokenizer than run")
def resume_with_another_tokenizer(w: World) -> list:
    tokenizer = w.run_copy() / "tokenizer"  # the run's tokenizer becomes another vocabulary
    (tokenizer / "tokenizer.json").unlink()
    (tokenizer / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nzebra\n")
    return w.pretrain("--set", "train.max_steps=40")


@case("checkpoint-other-model-size", "is for a different model (hidden_size 64, config has 32)", in_subprocess=True)
def resume_with_another_size(w: World) -> list:
    """The checkpoint's own config.json against the run's (a config change is refused before it,
    by the run's config.yaml: `resume-changes-model-shape`)."""
    from bertpre.train.checkpoint import write_checksums

    run = w.run_copy()
    saved = w.latest(run) / "config.json"
    saved.write_text(json.dumps({**json.loads(saved.read_text()), "hidden_size": 64}))
    write_checksums(saved.parent, run / "tokenizer")  # a config.json written so, not a damaged one
    return w.pretrain("--set", "train.max_steps=40")


@case("checkpoint-truncated-safetensors", "model.safetensors is damaged (")
def resume_truncated_weights(w: World) -> list:
    truncate(w.latest(w.run_copy()) / "model.safetensors")
    return w.pretrain("--set", "train.max_steps=40")


@case("checkpoint-pickle-payload", "is not safe to load")
def resume_pickle_payload(w: World) -> list:
    checkpoint = w.latest(w.run_copy())
    torch.save({"state": Payload(w.tmp / "payload-ran")}, checkpoint / "optimizer.pt")
    (checkpoint / "checksums.json").unlink()  # whoever plants a payload can rewrite the checksums too
    return w.pretrain("--set", "train.max_steps=40")


@case("checkpoint-latest-names-missing-folder", "missing or incomplete")
def resume_dangling_latest(w: World) -> list:
    (w.run_copy() / "checkpoints" / "latest").write_text("step-00000099\n")
    return w.pretrain("--set", "train.max_steps=40")


@case("pretrain-no-resume-over-a-run", "already holds checkpoints")
def no_resume_over_a_run(w: World) -> list:
    w.run_copy()
    return w.pretrain("--no-resume")


case("inspect-not-a-data-folder", "is not a DATA folder")(lambda w: ["inspect", w.folder("plain")])
case("inspect-bad-split", "split must be train or validation")(lambda w: ["inspect", w.data, "--split", "test"])


@case("export-truncated-safetensors", "model.safetensors is damaged")
def export_truncated_weights(w: World) -> list:
    truncate(w.latest(w.run_copy()) / "model.safetensors")
    return ["export", w.tmp / "run", "--out", w.tmp / "export"]


@case("export-out-not-empty", "already exists; pass --overwrite")
def export_over_a_folder(w: World) -> list:
    w.write("export/keep.txt", "mine")
    return ["export", w.reference, "--out", w.tmp / "export"]


case("export-not-a-run", "neither a RUN folder")(
    lambda w: ["export", w.folder("plain"), "--out", w.tmp / "export"])
case("fill-mask-no-mask", "the text has no [MASK]", in_subprocess=True)(
    lambda w: ["fill-mask", w.reference, "the cat sees the river ."])
case("fill-mask-top-k-zero", "--top-k must be at least 1")(
    lambda w: ["fill-mask", w.reference, "the cat [MASK] the river .", "--top-k", "0"])
case("fill-mask-not-a-model", "no such folder")(lambda w: ["fill-mask", w.tmp / "nowhere", "a [MASK] ."])


@case("evaluate-other-tokenizer-data", "made by another tokenizer")
def evaluate_on_other_data(w: World) -> list:
    shutil.copytree(w.data, w.tmp / "data2")
    (w.tmp / "data2" / "tokenizer" / "tokenizer.json").unlink()
    (w.tmp / "data2" / "tokenizer" / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nzebra\n")
    manifest = json.loads((w.tmp / "data2" / "manifest.json").read_text())
    del manifest["files"], manifest["manifest_sha256"]  # as older DATA (else: tokenizer.json "is missing")
    (w.tmp / "data2" / "manifest.json").write_text(json.dumps(manifest))
    return ["evaluate", w.reference, "--data", w.tmp / "data2"]


case("evaluate-missing-source", "no such folder")(
    lambda w: ["evaluate", w.tmp / "nowhere", "--data", w.data])
case("demo-config-missing", "not found")(
    lambda w: ["demo", "--out", w.tmp / "demo", "--config", w.tmp / "nowhere.yaml"])
case("demo-bad-config", "did you mean 'max_steps'")(
    lambda w: ["demo", "--out", w.tmp / "demo", "--config", w.config_with("max_steps: 36", "max_step: 36")])
case("demo-max-steps-zero", "train.max_steps must be a positive integer")(
    lambda w: ["demo", "--out", w.tmp / "demo", "--max-steps", "0"])


@case("demo-out-is-not-a-demo", "was not made by `bertpre demo`")
def demo_over_a_folder(w: World) -> list:
    w.write("mine/notes.txt", "keep me")
    return ["demo", "--out", w.tmp / "mine"]


# --- --overwrite never deletes what the command did not make, nor what it reads (issue 18) ---
def export_of_reference(w: World) -> Path:
    from bertpre.tools.export import export

    return export(w.reference, w.tmp / "export").out


case("export-overwrite-onto-its-run", "holds")(
    lambda w: ["export", w.run_copy(), "--out", w.tmp / "run", "--overwrite"])
case("export-overwrite-onto-its-checkpoint", "holds")(
    lambda w: ["export", w.latest(w.run_copy()), "--out", w.latest(w.tmp / "run"), "--overwrite"])
case("export-overwrite-onto-its-tokenizer", "holds")(
    lambda w: ["export", w.run_copy(), "--out", w.tmp / "run" / "tokenizer", "--overwrite"])
case("export-overwrite-onto-a-data-folder", "is a DATA folder")(
    lambda w: ["export", w.reference, "--out", w.data, "--overwrite"])
case("export-overwrite-onto-another-run", "is a RUN folder")(
    lambda w: ["export", w.reference, "--out", w.run_copy(), "--overwrite"])
@case("export-overwrite-onto-a-run-without-its-config", "is a RUN folder without its config.yaml, which")
def export_onto_a_run_without_config(w: World) -> list:
    run = w.run_copy()
    (run / "config.yaml").unlink()
    return ["export", w.reference, "--out", run, "--overwrite"]


case("export-overwrite-onto-user-files", "is a folder of other files")(
    lambda w: ["export", w.reference, "--out", w.write("mine/notes.txt", "keep").parent, "--overwrite"])
case("export-overwrite-onto-a-file", "exists and is not a folder")(
    lambda w: ["export", w.reference, "--out", w.write("model.bin", "keep"), "--overwrite"])
case("export-out-under-a-file", "is a file, not a folder")(
    lambda w: ["export", w.reference, "--out", w.write("model.bin", "keep") / "export"])
case("tokenize-overwrite-onto-a-run", "is a RUN folder")(
    lambda w: tokenize(w, w.write("c.txt", "a cat sat.\n"))[:2] + ["--out", w.run_copy(), "--overwrite"])
case("tokenize-overwrite-onto-an-export", "is an export (made by `bertpre export`)")(
    lambda w: tokenize(w, w.write("c.txt", "a cat sat.\n"))[:2] + ["--out", export_of_reference(w), "--overwrite"])
case("tokenize-overwrite-onto-user-files", "is a folder of other files")(
    lambda w: tokenize(w, w.write("c.txt", "a cat.\n"))[:2] + ["--out", w.write("mine/n.txt", "k").parent, "--overwrite"])
case("tokenize-overwrite-onto-its-corpus-folder", "holds")(
    lambda w: ["tokenize", w.write("corpus/c.txt", "a cat sat.\n").parent, "--out", w.tmp / "corpus", "--overwrite"])
case("tokenize-overwrite-onto-its-tokenizer", "holds")(
    lambda w: ["tokenize", w.write("c.txt", "a cat.\n"), "--out", w.data, "--tokenizer", w.data / "tokenizer",
               "--overwrite"])
case("tokenize-out-is-a-file", "exists and is not a folder")(
    lambda w: ["tokenize", w.write("c.txt", "a cat.\n"), "--out", w.write("data.txt", "keep"), "--overwrite"])
case("demo-out-is-a-run", "was not made by `bertpre demo`")(lambda w: ["demo", "--out", w.run_copy()])

# --- smaller stumbles (issue 51, item 7) ---
case("tokenize-min-frequency-with-unigram", "--min-frequency 3 has no effect on a unigram vocab")(
    lambda w: tokenize(w, w.write("c.txt", "a cat.\n"), "--tokenizer-type", "unigram", "--min-frequency", "3"))
case("inspect-set-unknown-key", "did you mean 'mlm_probability'")(
    lambda w: ["inspect", w.data, "--set", "data.mlm_probabilty=0.2"])
case("roberta-with-nsp-names-the-missing-pair-head",
     "data.pair_task nsp trains a sentence-pair head, which model.architecture roberta (RoBERTa) does not have")(
    lambda w: w.pretrain("--set", "model.architecture=roberta", "--set", "model.max_position_embeddings=34",
                         "--set", "data.pair_task=nsp"))


# --- one run, one config, one process (issue 18) ---
case("resume-changes-pair-task", "was started with data.pair_task='nsp' and this config has 'sop'")(
    lambda w: (w.run_copy(), w.pretrain("--set", "data.pair_task=sop"))[1])
case("resume-changes-max-seq-length", "was started with data.max_seq_length=32")(
    lambda w: (w.run_copy(), w.pretrain("--set", "data.max_seq_length=16"))[1])
case("resume-changes-lr", "was started with optim.lr=0.001 and this config has 0.01")(
    lambda w: (w.run_copy(), w.pretrain("--set", "optim.lr=0.01"))[1])
case("resume-changes-model-shape", "was started with model.intermediate_size=64 and this config has 128")(
    lambda w: (w.run_copy(), w.pretrain("--set", "model.intermediate_size=128"))[1])
case("resume-changes-dropout", "was started with model.hidden_dropout_prob=0.1")(
    lambda w: (w.run_copy(), w.pretrain("--set", "model.hidden_dropout_prob=0.2"))[1])
case("resume-max-steps-below-the-step", "is at step 36 already")(
    lambda w: (w.run_copy(), w.pretrain("--set", "train.max_steps=10"))[1])


def lock_run(w: World, host: str, pid: int) -> list:
    import json

    (w.run_copy() / ".bertpre-claim").write_text(json.dumps({"command": "pretrain", "host": host,
                                                             "pid": pid, "started": "then"}))
    return w.pretrain("--set", "train.max_steps=40")


case("pretrain-run-in-use-here", "is in use by process 1 on")(
    lambda w: lock_run(w, __import__("socket").gethostname(), 1))  # pid 1 is always alive
case("pretrain-run-in-use-elsewhere", "is in use by process 4242 on another-host")(
    lambda w: lock_run(w, "another-host", 4242))


# --- bounds on options, and outputs that cannot be written (issue 18) ---
case("evaluate-micro-batch-size-zero", "--micro-batch-size 0 must be at least 1")(
    lambda w: ["evaluate", w.reference, "--data", w.data, "--micro-batch-size", "0"])
case("evaluate-micro-batch-size-negative", "--micro-batch-size -4 must be at least 1")(
    lambda w: ["evaluate", w.reference, "--data", w.data, "--micro-batch-size", "-4"])
case("evaluate-seed-negative", "--seed -1 must be 0 or more")(
    lambda w: ["evaluate", w.reference, "--data", w.data, "--seed", "-1"])
case("tokenize-seed-negative", "--seed -1 must be 0 or more")(
    lambda w: tokenize(w, w.write("c.txt", "a cat.\n"), "--seed", "-1"))
case("tokenize-vocab-size-beyond-any-bert", "is beyond any BERT vocabulary")(
    lambda w: tokenize(w, w.write("c.txt", "a cat.\n"))[:-2] + ["--vocab-size", "100000000"])
case("pretrain-out-under-a-file", "Not a directory")(
    lambda w: w.pretrain(out=w.write("notes.txt", "keep") / "run"))
case("demo-out-under-a-file", "Not a directory")(
    lambda w: ["demo", "--out", w.write("notes.txt", "keep") / "demo"])


# --- --out is claimed, and every path is compared as a real path (issue 29) ---
def symlink(w: World, name: str, target: Path) -> Path:
    link = w.tmp / name
    link.symlink_to(target)
    return link


def claim_for(w: World, folder: Path, command: str, pid: int = 1) -> Path:
    import json
    import socket

    (folder / ".bertpre-claim").write_text(json.dumps(
        {"command": command, "pid": pid, "host": socket.gethostname(), "started": "then"}))
    return folder


case("pretrain-out-is-a-data-folder", "is a DATA folder (made by `bertpre tokenize`), not a RUN folder")(
    lambda w: w.pretrain(out=w.data))
case("pretrain-out-is-an-export", "is an export (made by `bertpre export`), not a RUN folder")(
    lambda w: w.pretrain(out=export_of_reference(w)))
case("pretrain-out-is-a-users-folder", "is a folder of other files, not a RUN folder")(
    lambda w: w.pretrain(out=w.write("mine/config.yaml", "my: own\n").parent))
case("pretrain-out-is-a-file", "exists and is not a folder")(lambda w: w.pretrain(out=w.write("notes.txt", "keep")))
case("pretrain-out-is-a-symlink-loop", "symbolic link that leads nowhere")(
    lambda w: w.pretrain(out=symlink(w, "loop", w.tmp / "loop")))
case("pretrain-out-is-a-dangling-symlink", "symbolic link that leads nowhere")(
    lambda w: w.pretrain(out=symlink(w, "dangling", w.tmp / "gone")))
case("pretrain-out-inside-a-data-folder", "is inside a DATA folder")(
    lambda w: w.pretrain(out=w.data / "run"))
case("pretrain-out-inside-an-export", "is inside an export")(
    lambda w: w.pretrain(out=export_of_reference(w) / "run"))
case("pretrain-out-inside-a-run", "is inside the RUN folder")(
    lambda w: w.pretrain(out=w.run_copy() / "more"))
case("pretrain-out-through-a-link-to-data", "is a DATA folder")(
    lambda w: w.pretrain(out=symlink(w, "link", w.data)))
case("export-out-is-a-symlink-loop", "symbolic link that leads nowhere")(
    lambda w: ["export", w.reference, "--out", symlink(w, "loop", w.tmp / "loop")])
case("tokenize-out-is-a-symlink-loop", "symbolic link that leads nowhere")(
    lambda w: ["tokenize", w.write("c.txt", "a cat.\n"), "--out", symlink(w, "loop", w.tmp / "loop")])
case("demo-out-is-a-symlink-loop", "symbolic link that leads nowhere")(
    lambda w: ["demo", "--out", symlink(w, "loop", w.tmp / "loop")])


@case("tokenize-overwrite-reads-its-corpus-through-a-link", "which this command reads")
def tokenize_own_corpus_through_link(w: World) -> list:
    data = w.tmp / "data"
    shutil.copytree(w.data, data)
    (data / "my.txt").write_text("a cat sat.\n")  # the user keeps the corpus beside its DATA
    return ["tokenize", symlink(w, "L", data) / "my.txt", "--out", data, "--overwrite"]


@case("export-overwrite-reads-its-run-through-a-link", "which this command reads")
def export_own_run_through_link(w: World) -> list:
    exported = export_of_reference(w)
    shutil.copytree(w.reference, exported / "run")
    return ["export", symlink(w, "LX", exported) / "run", "--out", exported, "--overwrite"]


@case("export-overwrite-through-dotdot", "which this command reads")
def export_own_run_through_dotdot(w: World) -> list:
    run = w.run_copy()
    (w.tmp / "elsewhere").mkdir()
    return ["export", w.tmp / "elsewhere" / ".." / "run", "--out", run, "--overwrite"]


case("tokenize-out-claimed-by-a-live-process", "is in use by process 1 on")(
    lambda w: tokenize(w, w.write("c.txt", "a cat sat.\n"))[:2] + [
        "--out", claim_for(w, w.folder("data"), "tokenize"), "--vocab-size", "150"])
case("export-out-claimed-by-a-live-process", "is in use by process 1 on")(
    lambda w: ["export", w.reference, "--out", claim_for(w, w.folder("export"), "export")])
case("demo-out-claimed-by-a-live-process", "is in use by process 1 on")(
    lambda w: ["demo", "--out", claim_for(w, w.folder("demo"), "demo")])
case("pretrain-out-claimed-by-tokenize", "is in use by process 1 on")(
    lambda w: w.pretrain(out=claim_for(w, w.folder("run"), "tokenize")))


# --- every number finite and in range; sizes that cannot fit refused before allocation (issue 29) ---
case("config-nan-lr", "optim.lr must be a finite number, got nan")(
    lambda w: w.pretrain(config=w.config_with("lr: 1.0e-3", "lr: .nan")))
case("config-nan-eps", "optim.eps must be a finite number, got nan")(
    lambda w: w.pretrain(config=w.config_with("optim:", "optim:\n  eps: .nan")))
case("config-nan-mlm-probability", "data.mlm_probability must be a finite number, got nan")(
    lambda w: w.pretrain(config=w.config_with("data:", "data:\n  mlm_probability: .nan")))
case("config-nan-max-grad-norm", "optim.max_grad_norm must be a finite number, got nan")(
    lambda w: w.pretrain(config=w.config_with("optim:", "optim:\n  max_grad_norm: .nan")))
case("config-inf-warmup-ratio", "optim.warmup_ratio must be a finite number, got inf")(
    lambda w: w.pretrain(config=w.config_with("warmup_steps: 3", "warmup_ratio: .inf")))
case("config-nan-beta", "optim.betas[0] must be a finite number, got nan")(
    lambda w: w.pretrain(config=w.config_with("optim:", "optim:\n  betas: [.nan, 0.999]")))
case("config-max-steps-1e23", "train.max_steps must be a positive integer of at most 1,000,000,000,000")(
    lambda w: w.pretrain(config=w.config_with("max_steps: 36", "max_steps: 100000000000000000000000")))
case("config-max-steps-beyond-any-run", "train.max_steps must be a positive integer of at most 1,000,000,000,000")(
    lambda w: w.pretrain(config=w.config_with("max_steps: 36", "max_steps: 100000000000000")))
case("config-model-cannot-fit", "alone need")(
    lambda w: w.pretrain(config=w.config_with("hidden_size: 32", "hidden_size: 100000000")))
case("set-nan-lr", "optim.lr must be a finite number, got nan")(lambda w: w.pretrain("--set", "optim.lr=.nan"))
case("set-inf-dropout", "model.hidden_dropout_prob must be a finite number")(
    lambda w: w.pretrain("--set", "model.hidden_dropout_prob=.inf"))
case("info-nan-lr", "optim.lr must be a finite number, got nan")(
    lambda w: ["info", "--config", w.config_with("lr: 1.0e-3", "lr: .nan")])
case("inspect-nan-mlm-probability", "data.mlm_probability must be a finite number, got nan")(
    lambda w: ["inspect", w.data, "--config", w.config_with("data:", "data:\n  mlm_probability: .nan")])
case("evaluate-nan-config", "data.mlm_probability must be a finite number, got nan")(
    lambda w: ["evaluate", w.reference, "--data", w.data, "--config",
               w.config_with("data:", "data:\n  mlm_probability: .nan")])
case("demo-nan-config", "optim.lr must be a finite number, got nan")(
    lambda w: ["demo", "--out", w.tmp / "demo", "--config", w.config_with("lr: 1.0e-3", "lr: .nan")])


def run_in_process(args: list, monkeypatch, capsys) -> tuple[int, str]:
    """`bertpre ARGS` through `bertpre.cli.main`, as the console script runs it."""
    from bertpre.cli import main

    monkeypatch.setattr(sys, "argv", ["bertpre", *map(str, args)])
    capsys.readouterr()
    with warnings.catch_warnings():
        warnings.simplefilter("always")  # a warning must not hide behind an earlier case's
        try:
            main()
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
    return code, capsys.readouterr().err


def test_the_matrix_is_large_and_covers_every_command(tmp_path, data_dir, tiny_config, reference_run):
    commands = []
    for index, (build, _, _) in enumerate(CASES.values()):
        world = World(tmp_path / str(index), data_dir, tiny_config, reference_run)
        world.tmp.mkdir()
        commands.append(str(build(world)[0]))
    assert len(CASES) >= 30
    assert set(commands) == {"tokenize", "pretrain", "inspect", "export", "info", "fill-mask",
                             "evaluate", "demo"}
    assert sum(in_subprocess for _, _, in_subprocess in CASES.values()) >= 5


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
        name, tmp_path, data_dir, tiny_config, reference_run, monkeypatch, capsys):
    build, expected, in_subprocess = CASES[name]
    world = World(tmp_path / "case", data_dir, tiny_config, reference_run)
    world.tmp.mkdir()
    monkeypatch.chdir(world.tmp)  # a stray relative write would land here and be seen
    args = build(world)
    watched = [world.tmp, data_dir, reference_run]
    before = [folder_state(folder) for folder in watched]

    if in_subprocess:
        result = run_cli(*args)
        code, stderr = result.returncode, result.stderr
    else:
        code, stderr = run_in_process(args, monkeypatch, capsys)

    assert code == 2, stderr[-3000:]
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert expected in lines[0], lines[0]
    assert [folder_state(folder) for folder in watched] == before
    assert not (world.tmp / "payload-ran").exists()


@pytest.mark.parametrize(("args", "named"), [
    (["pretrain", "--data", "x"], "--config"),  # --config missing
    (["tokenize", "c.txt", "--out", "o", "--vocab-size", "many"], "--vocab-size"),
    (["pretrian", "--config", "c.yaml"], "pretrian"),  # a typo'd command
])
def test_command_line_usage_errors_are_one_line(args, named, tmp_path):
    # Click's usage errors are caught in main() and said in one line, like every other bad input.
    result = subprocess.run(bertpre_command(*args), env=ENV, cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and named in lines[0], result.stderr
    assert list(tmp_path.iterdir()) == []
