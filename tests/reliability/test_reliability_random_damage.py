"""Random damage to DATA and RUN files (issue 29): a seeded generator truncates a file, flips
bytes in it, empties it or replaces it with another file's content, then runs a command that
reads it. Whatever the damage, the command either succeeds (damage it cannot see, such as a
flipped bit inside a weight) or says so in one `error:` line with exit 2, writing nothing; it
never reaches a traceback (exit 1)."""
from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest
from _reliability_harness import folder_state
from test_reliability_bad_input import run_in_process

FAST_CASES = 400
SLOW_CASES = 4000
DAMAGES = ("truncate", "flip", "empty", "swap")


def files_of(folder: Path) -> list[Path]:
    return sorted(path.relative_to(folder) for path in folder.rglob("*")
                  if path.is_file() and "tensorboard" not in path.parts)


def damage(path: Path, kind: str, rng: random.Random, other: Path) -> None:
    data = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(data[:rng.randrange(len(data))] if data else b"")
    elif kind == "flip":
        changed = bytearray(data or b"\0")
        for _ in range(rng.randint(1, 8)):
            changed[rng.randrange(len(changed))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(changed))
    elif kind == "empty":
        path.write_bytes(b"")
    else:
        path.write_bytes(other.read_bytes())


def commands(kind: str, target: Path, data: Path, run: Path, tmp: Path, config: Path) -> list[list]:
    """The commands that read a damaged DATA (`target`) or RUN (`target`) folder."""
    if kind == "data":
        return [["inspect", target, "--batches", "1"],
                ["evaluate", run, "--data", target, "--micro-batch-size", "16"],
                ["pretrain", "--config", config, "--data", target, "--out", tmp / "new-run",
                 "--set", "train.max_steps=1"]]
    return [["export", target, "--out", tmp / "export"],
            ["fill-mask", target, "the cat [MASK] the river ."],
            ["evaluate", target, "--data", data, "--micro-batch-size", "16"],
            ["pretrain", "--config", config, "--data", data, "--out", target, "--set", "train.max_steps=37"]]


def run_case(number: int, tmp_path: Path, data_dir: Path, reference_run: Path, tiny_config: Path,
             monkeypatch, capsys) -> None:
    rng = random.Random(number)
    kind = rng.choice(["data", "run"])
    source = data_dir if kind == "data" else reference_run
    case = tmp_path / f"case-{number}"
    case.mkdir()
    target = case / kind
    shutil.copytree(source, target)
    names = files_of(target)
    name, other = rng.choice(names), rng.choice(names)
    how = rng.choice(DAMAGES)
    damage(target / name, how, rng, target / other)
    data, run = (target, reference_run) if kind == "data" else (data_dir, target)
    args = rng.choice(commands(kind, target, data, run, case, tiny_config))
    before = folder_state(target)
    monkeypatch.chdir(case)
    code, stderr = run_in_process(args, monkeypatch, capsys)
    said = f"case {number}: {how} {kind}/{name} (with {other}), then {args[0]}: exit {code}\n{stderr[-2000:]}"
    assert code in (0, 2), said
    if code == 2:
        lines = stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), said
        assert folder_state(target) == before, said
        assert not (case / "export").exists() and not (case / "new-run").exists(), said
    shutil.rmtree(case)


@pytest.mark.parametrize("block", range(FAST_CASES // 20))
def test_random_damage_is_one_line_or_harmless(block, tmp_path, data_dir, reference_run, tiny_config,
                                               monkeypatch, capsys):
    for number in range(block * 20, block * 20 + 20):
        run_case(number, tmp_path, data_dir, reference_run, tiny_config, monkeypatch, capsys)


@pytest.mark.slow
@pytest.mark.parametrize("block", range(FAST_CASES // 20, SLOW_CASES // 20))
def test_more_random_damage(block, tmp_path, data_dir, reference_run, tiny_config, monkeypatch, capsys):
    for number in range(block * 20, block * 20 + 20):
        run_case(number, tmp_path, data_dir, reference_run, tiny_config, monkeypatch, capsys)
