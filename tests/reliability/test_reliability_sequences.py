"""Random sequences of bertpre commands in a workspace sprinkled with your files.

A seeded generator picks each step: a command (tokenize, pretrain, export, finetune; demo too
under `make test-slow`), its `--out` (new, beside, inside or on top of an earlier output, or inside
a folder of yours), with or without `--overwrite`; after a command that wrote a folder it may
put a file of yours inside it. After every step it checks what a user relies on: each file of
yours is byte-identical, the command ended with 0 or 2, an exit 2 said exactly one line, and no
temporary folder is left behind. A failure names the seed and the steps, to be replayed.

Round 4's sequences (`make test-slow`) add what a cluster and a user add: pretraining of every
row of the families table, a pretrain run in a process group of its own with DataLoader workers
and SIGTERM or SIGINT sent to the whole group mid-run (as Slurm and `timeout` send it), and links
of yours put where bertpre writes (a RUN's `metrics.jsonl`, a fine-tuning's `model/`, an export's
`config.json` …), whose targets must stay byte-identical.
"""
from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from _in_process import run_main
from _reliability_harness import assert_group_ended, bertpre_command, child_env, wait_for

from bertpre.model.families import FAMILIES

FAST_SEQUENCES = 100  # in `make test`
SLOW_SEQUENCES = 150  # more, with demo among the commands, in `make test-slow`
STEPS = 4

ROUND4_SEQUENCES = 12  # in `make test-slow`
# What each row of the families table needs to pretrain the tiny config on the tiny WordPiece DATA;
# a new row must say (`test_every_family_is_in_the_round4_command_pool`).
FAMILY_SETTINGS = {
    "bert": [],
    "roberta": ["model.architecture=roberta", "data.pair_task=none", "model.max_position_embeddings=34"],
    "xlm-roberta": ["model.architecture=xlm-roberta", "data.pair_task=none", "model.max_position_embeddings=34"],
    "modernbert": ["model.architecture=modernbert", "data.pair_task=none", "model.local_attention=16"],
    "xlnet": ["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none", "model.mem_len=16"],
    "electra": ["model.architecture=electra", "data.objective=rtd", "data.pair_task=none", "model.embedding_size=32"],
}
# Names bertpre writes inside each command's output, where a user of round 4 puts a link of theirs.
WRITTEN_NAMES = {"pretrain": ["metrics.jsonl", "config.yaml", "tensorboard", "checkpoints/latest"],
                 "finetune": ["model", "results.jsonl", "run.json"],
                 "export": ["config.json", "model.safetensors"],
                 "tokenize": ["manifest.json", "tokenizer"],
                 "demo": ["run", "model"]}

TASK_ROWS = ["the cat sees the river .\tanimal", "my sister feeds a dog .\tperson",
             "a small bird finds the tall tree .\tanimal", "the farmer likes an open door .\tperson"] * 4




@dataclass
class Sequence:
    """One random sequence: its workspace, the outputs it made and the files of yours in it."""

    root: Path
    rng: random.Random
    shared: dict[str, Path]  # corpus, config, data, run, task files: read, never written
    with_demo: bool
    outputs: list[tuple[str, Path]] = field(default_factory=list)  # (command, folder) that succeeded
    yours: dict[Path, str] = field(default_factory=dict)  # file of yours → sha256
    steps: list[str] = field(default_factory=list)
    count: int = 0

    def name(self, stem: str) -> str:
        self.count += 1
        return f"{stem}{self.count}"

    def sprinkle(self, folder: Path) -> None:
        """A file of yours in `folder`: at its top, or in a subfolder of yours."""
        place = folder / (self.name("mine") + ".txt") if self.rng.random() < 0.6 else \
            folder / self.name("notes") / "a file of yours.md"
        place.parent.mkdir(parents=True, exist_ok=True)
        text = f"yours {self.rng.random()}\n"
        place.write_text(text, encoding="utf-8")
        self.yours[place] = hashlib.sha256(text.encode()).hexdigest()

    def pick_out(self) -> tuple[Path, str | None]:
        """Where the next command writes: a new folder, beside, on top of or inside an earlier
        output, or inside a folder of yours; and the command that made it, when on top of one."""
        kinds = ["new", "new"] + (["top", "top", "inside", "inside", "beside"] if self.outputs else []) + \
            ["in yours", "yours"]
        kind = self.rng.choice(kinds)
        if kind == "new":
            return self.root / self.name("out "), None
        if kind == "yours":
            return self.root / "my folder", None
        if kind == "in yours":
            return self.root / "my folder" / self.name("out"), None
        made_by, earlier = self.rng.choice(self.outputs)
        if kind == "top":
            return earlier, made_by
        if kind == "inside":
            return earlier / self.name("in"), None
        return earlier.parent / f"{earlier.name}-{self.name('beside')}", None

    def made(self, command: str) -> list[Path]:
        return [folder for made_by, folder in self.outputs if made_by == command and folder.is_dir()]

    def command(self) -> list:
        """The next command line, with its --out (and sometimes --overwrite)."""
        out, made_by = self.pick_out()
        overwrite = ["--overwrite"] if self.rng.random() < 0.5 else []
        commands = ["tokenize", "export", "export", "pretrain", "finetune"] + (["demo"] if self.with_demo else [])
        # On top of an earlier output, mostly the command that made it: the case --overwrite is for.
        command = made_by if made_by and self.rng.random() < 0.6 else self.rng.choice(commands)
        shared = self.shared
        if command == "tokenize":
            return ["tokenize", shared["corpus"], "--out", out, "--vocab-size", "120", "--min-frequency", "1",
                    *overwrite]
        if command == "export":
            source = self.rng.choice(self.made("pretrain") or [shared["run"]])
            return ["export", source, "--out", out, *overwrite]
        if command == "pretrain":
            data = self.rng.choice(self.made("tokenize") + [shared["data"]])
            family = self.rng.choice(sorted(FAMILY_SETTINGS)) if self.round4 else "bert"
            settings = [item for setting in FAMILY_SETTINGS[family] for item in ("--set", setting)]
            return ["pretrain", "--config", shared["config"], "--data", data, "--out", out,
                    "--set", "train.max_steps=2", "--set", "train.save_every=2", *settings]
        if command == "finetune":
            source = self.rng.choice(self.made("export") + self.made("pretrain") + [shared["run"]])
            return ["finetune", source, "--train", shared["train"], "--validation", shared["validation"],
                    "--out", out, "--epochs", "1", "--seeds", "1", "--batch-size", "8",
                    *(["--save-model"] if self.round4 and self.rng.random() < 0.5 else [])]
        return ["demo", "--out", out, "--max-steps", "1"]

    def check(self, args: list, code: int, stderr: str, allowed: tuple[int, ...] = (0, 2)) -> None:
        where = f"seed {self.rng_seed}, steps so far: {self.steps}"
        assert code in allowed, f"exit {code}: {stderr[-2000:]} ({where})"
        if code == 2:
            lines = [line for line in stderr.splitlines() if line.strip()]
            assert len(lines) == 1 and lines[0].startswith("error: "), f"{lines} ({where})"
        changed = [str(path.relative_to(self.root)) for path, digest in self.yours.items()
                   if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest]
        assert changed == [], f"files of yours lost or changed: {changed} after {args} ({where})"
        temporaries = [str(path.relative_to(self.root)) for path in self.root.rglob("*") if ".tmp-" in path.name]
        assert temporaries == [], f"left behind: {temporaries} ({where})"

    rng_seed: int = 0
    round4: bool = False  # every family, group signals, links of yours

    def place_link(self, out: Path, made_by: str) -> None:
        """A link of yours at a name bertpre writes inside `out` (what was there goes), pointing at
        a file or folder of yours that must come through every later command unchanged."""
        place = out / self.rng.choice(WRITTEN_NAMES[made_by])
        if not place.parent.is_dir() or place.parent.is_symlink():
            return
        was_folder = place.is_dir() and not place.is_symlink()
        if was_folder:
            shutil.rmtree(place)
        elif place.exists() or place.is_symlink():
            place.unlink()
        target = self.root / "my folder" / self.name("linked")
        if was_folder or self.rng.random() < 0.3:
            target.mkdir()
            self.sprinkle(target)
        else:
            text = f"linked {self.rng.random()}\n"
            target.write_text(text, encoding="utf-8")
            self.yours[target] = hashlib.sha256(text.encode()).hexdigest()
        place.symlink_to(target, target_is_directory=target.is_dir())
        self.steps.append(f"ln -s {target.relative_to(self.root)} {place.relative_to(self.root)}")


def pretrain_stopped_by_the_group(sequence: Sequence, args: list) -> tuple[int, str]:
    """`args` (a pretrain) in a process group of its own with two DataLoader workers, longer, and
    SIGTERM or SIGINT sent to the whole group once it trains: the exit code and stderr."""
    args = [*args, "--set", "data.num_workers=2", "--set", "train.max_steps=400", "--set", "train.save_every=25"]
    signum = sequence.rng.choice([signal.SIGTERM, signal.SIGTERM, signal.SIGINT])
    delay = sequence.rng.uniform(0.0, 2.0)
    sequence.steps[-1] += f" (num_workers 2, max_steps 400; {signal.Signals(signum).name} to the group "\
                          f"{delay:.2f} s after its first metrics row)"
    out = Path(args[args.index("--out") + 1])
    process = subprocess.Popen(bertpre_command(*args), env=child_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        if wait_for(lambda: (out / "metrics.jsonl").is_file(), process, timeout=240):
            time.sleep(delay)
            if process.poll() is None:
                os.killpg(process.pid, signum)
        _, stderr = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert_group_ended(process.pid)  # workers end with the run
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr[-2000:]
    if process.returncode in (130, 143):
        latest = (out / "checkpoints" / "latest").read_text().strip()
        assert (out / "checkpoints" / latest / "model.safetensors").is_file(), latest
    return process.returncode, stderr


def run_sequence(seed: int, shared: dict[str, Path], root: Path, monkeypatch, capsys, *, with_demo: bool,
                 round4: bool = False) -> list[str]:
    """Run one seeded sequence of STEPS commands, checking after each; the steps, as replayed."""
    sequence = Sequence(root, random.Random(seed), shared, with_demo, rng_seed=seed, round4=round4)
    root.mkdir(parents=True)
    sequence.sprinkle(root)
    (root / "my folder").mkdir()
    sequence.sprinkle(root / "my folder")
    for _ in range(STEPS):
        args = sequence.command()
        sequence.steps.append(" ".join(str(arg).replace(str(root), "WS") for arg in args))
        if round4 and args[0] == "pretrain" and sequence.rng.random() < 0.5:
            code, stderr = pretrain_stopped_by_the_group(sequence, args)
            sequence.check(args, code, stderr if code == 2 else "", allowed=(0, 2, 130, 143))
        else:
            code, _, stderr = run_main(args, monkeypatch, capsys)
            sequence.check(args, code, stderr)
        out = Path(args[args.index("--out") + 1])
        if code in (0, 130, 143):
            sequence.outputs.append((args[0], out))
            if sequence.rng.random() < 0.7:
                sequence.sprinkle(out)
            if round4 and sequence.rng.random() < 0.4:
                sequence.place_link(out, args[0])
    return sequence.steps


@pytest.fixture(scope="module")
def shared(tmp_path_factory, corpus, tiny_config, data_dir, reference_run) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("task")
    header = "text\tlabel\n"
    (folder / "train.tsv").write_text(header + "\n".join(TASK_ROWS) + "\n", encoding="utf-8")
    (folder / "validation.tsv").write_text(header + "\n".join(TASK_ROWS[:8]) + "\n", encoding="utf-8")
    return {"corpus": corpus, "config": tiny_config, "data": data_dir, "run": reference_run,
            "train": folder / "train.tsv", "validation": folder / "validation.tsv"}


@pytest.mark.parametrize("block", range(10))
def test_random_sequences_keep_your_files_and_end_cleanly(block, shared, tmp_path, monkeypatch, capsys):
    """FAST_SEQUENCES sequences in ten blocks (so a failure shows which)."""
    per_block = FAST_SEQUENCES // 10
    for seed in range(block * per_block, (block + 1) * per_block):
        run_sequence(seed, shared, tmp_path / f"seq{seed}", monkeypatch, capsys, with_demo=False)


@pytest.mark.slow
@pytest.mark.parametrize("block", range(10))
def test_more_random_sequences_with_the_demo(block, shared, tmp_path, monkeypatch, capsys):
    per_block = SLOW_SEQUENCES // 10
    for seed in range(10_000 + block * per_block, 10_000 + (block + 1) * per_block):
        run_sequence(seed, shared, tmp_path / f"seq{seed}", monkeypatch, capsys, with_demo=True)


def test_every_family_is_in_the_round4_command_pool() -> None:
    assert sorted(FAMILY_SETTINGS) == sorted(FAMILIES)


@pytest.mark.slow
def test_round4_sequences_with_every_family_group_signals_and_links(shared, tmp_path, monkeypatch, capsys):
    steps = [step for seed in range(20_000, 20_000 + ROUND4_SEQUENCES)
             for step in run_sequence(seed, shared, tmp_path / f"seq{seed}", monkeypatch, capsys, with_demo=True,
                                      round4=True)]
    # what round 4 adds was exercised, not merely possible
    assert any("to the group" in step for step in steps) and any(step.startswith("ln -s") for step in steps)
    families = {name for name in FAMILY_SETTINGS if any(f"model.architecture={name} " in step + " " for step in steps)}
    assert len(families) >= 3, families
