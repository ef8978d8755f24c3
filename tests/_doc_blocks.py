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
when the page's run reaches it, so the config a guide shows is the config its commands read.

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


def runnable_blocks(page: Path) -> list[Block]:
    """The page's blocks marked `<!-- try it -->` or `<!-- save as: NAME -->`, in page order."""
    text = page.read_text(encoding="utf-8")
    blocks = []
    for match in MARKER.finditer(text):
        line_number = text.count("\n", 0, match.start()) + 1
        if match.group(1) == "save as: ":
            blocks.append(Block(page, line_number, match.group(3), save_as=match.group(2).strip()))
            continue
        writes, extra_args = [], {}
        for line in match.group(2).strip().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "writes":
                writes += value.split()
            elif key.strip():
                extra_args[key.strip()] = value.strip()
        blocks.append(Block(page, line_number, match.group(3), writes, extra_args))
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
            continue
        result = run_block(block, folder, steps)
        where = f"{page.name}:{block.line}"
        assert result.returncode == 0, f"{where} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        missing = [path for path in block.writes if not (folder / path).exists()]
        assert not missing, f"{where} did not write {missing}\n{result.stdout}\n{result.stderr}"
    return sum(block.save_as is None for block in blocks)
