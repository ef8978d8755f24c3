"""Run every CPU benchmark once with short settings, in sequence (what `make bench` does).

Each runs as `python -m bench.NAME` from the repository root and writes its
bench/results/NAME-DATE.json. The exit status is 1 if any of them failed, after all have run.
The GPU set (bench.gpu) is not among them.

    .venv/bin/python -m bench.run_cpu                    # all
    .venv/bin/python -m bench.run_cpu --only model loader
    .venv/bin/python -m bench.run_cpu --dry-run          # print the commands only
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent

# name: (module in bench/, short-run arguments, its option for the results folder)
BENCHMARKS: dict[str, tuple[str, list[str], str]] = {
    "model": ("model", ["--steps", "6", "--warmup", "2"], "--out"),
    "collate": ("collate", ["--rounds", "3"], "--out"),
    "tokenize": ("tokenize_speed", ["--rounds", "1"], "--results"),
    "tokenize_scale": ("tokenize_scale", ["--megabytes", "5", "10"], "--out"),
    "create_instances": ("create_instances", ["--rounds", "3"], "--out"),
    "loader": ("loader", ["--batches", "300", "--rounds", "3"], "--out"),
    "pretrain": ("pretrain", ["--steps", "12", "--warmup", "4"], "--out"),
    "positions": ("positions", ["--steps", "40", "--rounds", "2", "--round-steps", "3"], "--out"),
    "modernbert_speed": ("modernbert_speed", [], "--out"),
    # A smaller model and run, under its own name so that it never replaces a full-size record.
    "learning": ("learning", ["--steps", "60", "--warmup", "6", "--seeds", "2", "--hidden", "64",
                              "--layers", "2", "--name", "learning-quick"], "--out"),
}


def command_for(name: str, out: Path | None) -> list[str] | None:
    """The command line of one benchmark, run from the repository root; None when its module is missing."""
    module, arguments, results_option = BENCHMARKS[name]
    if not (BENCH / f"{module}.py").exists():
        return None
    results = [results_option, str(out)] if out is not None else []
    return [sys.executable, "-m", f"bench.{module}", *arguments, *results]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), default=list(BENCHMARKS))
    parser.add_argument("--out", type=Path, default=None, help="results folder (default bench/results)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)

    failed, summary = [], []
    for name in args.only:
        command = command_for(name, args.out)
        if command is None:
            print(f"== {name}: script missing, skipped")
            failed.append(name)
            continue
        print(f"== {name}: {' '.join(command)}", flush=True)
        if args.dry_run:
            continue
        start = time.perf_counter()
        status = subprocess.run(command, cwd=BENCH.parent).returncode
        summary.append((name, status, time.perf_counter() - start))
        if status != 0:
            failed.append(name)
    for name, status, seconds in summary:
        print(f"{name:<18}{'ok' if status == 0 else f'FAILED (exit {status})':<20}{seconds:>8.1f} s")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
