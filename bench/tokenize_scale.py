"""MB/s and peak RSS of `bertpre tokenize` in 1, 2 and 4 shard processes, next to the unsharded run.

What runs, each as the CLI in its own process (as a Slurm array task would), timed by wall clock:

- vocab: `--vocab-only --vocab-sample-bytes S`, one streaming pass over the corpus;
- unsharded: `--tokenizer VOCAB --out whole` (the peer: one process for the whole corpus),
  with `--num-proc 1` and with `--num-proc` = all cores;
- N shards together: N processes at once, `--tokenizer VOCAB --num-shards N`, one
  `SLURM_ARRAY_TASK_ID` each; the wall time is the slowest task's;
- one task of N alone: shard 0 of N with the machine to itself, which is what each task of an
  array sees when every task has its own machine (N shards together on one machine of C cores
  can scale at most to min(N, C));
- one task of 1000 alone (`--floor-shards`): what every task pays whatever N, reading and
  hashing the whole corpus; the bound on a task's speed as N grows.

MB/s is the corpus's bytes on disk over the wall time. Memory, per process (its largest):
`peak_rss` is the kernel's high-water mark (`ru_maxrss` from `os.wait4`); it counts the pages of
memory-mapped Arrow files the process has read, which are page cache the kernel takes back
under pressure. So the bench also polls /proc/PID/status every 20 ms (the process and its
worker children) for the peak of `RssAnon`, the memory the process itself holds, and of
`RssFile`, the mapped files' resident pages. The corpus is built
from ../shared/corpora's lines: documents of 2-10 lines drawn at random from all of them, until
the size asked, written to 8 files, so that a bigger corpus is fresh text, not duplicates the
deduplication drops. The whole set runs on a small corpus and on the big one: peak RSS must not
grow with the corpus.

    .venv/bin/python -m bench.tokenize_scale                       # 25 MB and 50 MB, shards 1 2 4
    .venv/bin/python -m bench.tokenize_scale --megabytes 50 200 --shards 4   # less startup in the figures
    .venv/bin/python -m bench.tokenize_scale --megabytes 4 8       # quick
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.common import CORPORA, RESULTS, write_result

FILES = 8


def build_corpus(folder: Path, megabytes: float, sources: list[Path], seed: int = 0) -> dict:
    """Documents of 2-10 random lines (over 20 characters) of `sources`, `megabytes` in `FILES` files."""
    lines = [line.strip() for path in sources
             for line in path.read_text(encoding="utf-8").splitlines() if len(line.strip()) > 20]
    if not lines:
        raise SystemExit(f"no lines of over 20 characters in {', '.join(map(str, sources))}")
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    target = int(megabytes * 1e6)
    files = [open(folder / f"part-{number:02d}.txt", "w", encoding="utf-8") for number in range(FILES)]
    written = documents = 0
    try:
        while written < target:
            text = "\n".join(rng.choice(lines) for _ in range(rng.randint(2, 10))) + "\n\n"
            files[documents % FILES].write(text)
            written += len(text.encode("utf-8"))
            documents += 1
    finally:
        for file in files:
            file.close()
    return {"megabytes": round(written / 1e6, 2), "documents": documents, "files": FILES,
            "line_pool": len(lines)}


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (datasets' worker processes), from /proc."""
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def resident_kib(pid: int) -> tuple[int, int]:
    """(RssAnon, RssFile) of a process in KiB; zeros once it is gone."""
    values = {"RssAnon:": 0, "RssFile:": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            name, *rest = line.split()
            if name in values:
                values[name] = int(rest[0])
    except (OSError, ValueError, IndexError):
        pass
    return values["RssAnon:"], values["RssFile:"]


class MemoryWatch:
    """Polls the peak RssAnon and RssFile of each watched process (summed over its tree)."""

    def __init__(self, pids: list[int], interval: float = 0.02) -> None:
        self.peaks = {pid: [0, 0] for pid in pids}
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._poll, args=(interval,), daemon=True)
        self.thread.start()

    def _poll(self, interval: float) -> None:
        while not self.stopped.is_set():
            for pid, peak in self.peaks.items():
                sizes = [resident_kib(member) for member in process_tree(pid)]
                peak[0] = max(peak[0], sum(anon for anon, _ in sizes))
                peak[1] = max(peak[1], sum(file for _, file in sizes))
            self.stopped.wait(interval)

    def stop(self) -> dict[int, list[int]]:
        self.stopped.set()
        self.thread.join()
        return self.peaks


def run_processes(commands: list[list[str]], environments: list[dict[str, str]], cwd: Path) -> dict:
    """Start every command at once; the wall time until the last ends, and the largest
    process's peak RSS (kernel high-water mark), peak RssAnon and peak RssFile, in MiB."""
    start = time.perf_counter()
    processes = [subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE)
                 for command, environment in zip(commands, environments, strict=True)]
    watch = MemoryWatch([process.pid for process in processes])
    high_water = []
    for process in processes:
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        errors = process.stderr.read().decode() if process.stderr else ""
        if process.returncode != 0:
            raise SystemExit(f"{' '.join(process.args)} failed ({process.returncode}): {errors[-2000:]}")
        high_water.append(usage.ru_maxrss)  # Linux: KiB
    seconds = time.perf_counter() - start
    peaks = watch.stop()
    return {"seconds": seconds, "processes": len(processes),
            "peak_rss_mib": max(high_water) / 1024,
            "peak_rss_anon_mib": max(anon for anon, _ in peaks.values()) / 1024,
            "peak_rss_file_mib": max(file for _, file in peaks.values()) / 1024}


def bertpre(*args: str) -> list[str]:
    return [sys.executable, "-m", "bertpre", "tokenize", *args]


def measure(folder: Path, megabytes: float, sources: list[Path], shard_counts: list[int],
            sample_bytes: int, num_proc: int, floor_shards: int | None = None) -> dict:
    """Every run on one corpus of `megabytes`; figures per run."""
    corpus = build_corpus(folder / "corpus", megabytes, sources)
    size = corpus["megabytes"]
    environment = {**os.environ}
    for variable in ("SLURM_ARRAY_TASK_ID", "RANK"):
        environment.pop(variable, None)
    runs: dict[str, dict] = {}

    def record(name: str, measured: dict) -> None:
        measured["mb_per_s"] = size / measured["seconds"]
        runs[name] = measured
        print(f"  {size:6.1f} MB  {name:<26} {measured['seconds']:6.1f} s  {measured['mb_per_s']:6.2f} MB/s  "
              f"peak RSS {measured['peak_rss_mib']:5.0f} MiB (anon {measured['peak_rss_anon_mib']:4.0f}, "
              f"mapped files {measured['peak_rss_file_mib']:4.0f})", flush=True)

    record("vocab sample", run_processes(
        [bertpre("corpus", "--vocab-only", "--vocab-sample-bytes", str(sample_bytes), "--out", "vocab")],
        [environment], folder))
    record("unsharded, --num-proc 1", run_processes(
        [bertpre("corpus", "--tokenizer", "vocab", "--out", "whole")], [environment], folder))
    shutil.rmtree(folder / "whole")
    if num_proc > 1:
        record(f"unsharded, --num-proc {num_proc}", run_processes(
            [bertpre("corpus", "--tokenizer", "vocab", "--num-proc", str(num_proc), "--out", "whole")],
            [environment], folder))
        shutil.rmtree(folder / "whole")
    for count in shard_counts:
        command = bertpre("corpus", "--tokenizer", "vocab", "--num-shards", str(count),
                          "--out", f"shards-{count}/shard-{{shard}}")
        record(f"{count} shard{'s' if count > 1 else ''} together", run_processes(
            [command] * count, [{**environment, "SLURM_ARRAY_TASK_ID": str(index)} for index in range(count)],
            folder))
        shutil.rmtree(folder / f"shards-{count}")
        if count > 1:
            record(f"one task of {count} alone", run_processes(
                [command], [{**environment, "SLURM_ARRAY_TASK_ID": "0"}], folder))
            shutil.rmtree(folder / f"shards-{count}")
    if floor_shards:
        record(f"one task of {floor_shards} alone", run_processes(
            [bertpre("corpus", "--tokenizer", "vocab", "--num-shards", str(floor_shards),
                     "--shard-index", "0", "--out", "floor")], [environment], folder))
        shutil.rmtree(folder / "floor")
    return {"corpus": corpus, "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=float, nargs="+", default=[25.0, 50.0],
                        help="corpus sizes; the last is the one the shards are compared on")
    parser.add_argument("--shards", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sample-bytes", type=int, default=5_000_000, help="--vocab-sample-bytes")
    parser.add_argument("--num-proc", type=int, default=os.cpu_count() or 1,
                        help="the unsharded run's second --num-proc")
    parser.add_argument("--floor-shards", type=int, default=1000,
                        help="also time one task of this many shards alone (0: no)")
    parser.add_argument("--corpora", type=Path, nargs="+", default=None,
                        help="text files whose lines make the corpus (default: ../shared/corpora/*.txt)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sources = args.corpora or sorted(CORPORA.glob("*.txt"))
    if not sources:
        print(f"no corpora at {CORPORA}: skipping")
        return 0

    sizes = {}
    with tempfile.TemporaryDirectory(prefix="bertpre-scale-") as scratch:
        for megabytes in args.megabytes:
            folder = Path(scratch) / f"{megabytes:g}MB"
            sizes[f"{megabytes:g}"] = measure(folder, megabytes, sources, args.shards,
                                              args.sample_bytes, args.num_proc, args.floor_shards)
            shutil.rmtree(folder)
    small, big = sizes[f"{args.megabytes[0]:g}"], sizes[f"{args.megabytes[-1]:g}"]
    growth = {name: {measure: big["runs"][name][measure] / small["runs"][name][measure]
                     for measure in ("peak_rss_mib", "peak_rss_anon_mib", "peak_rss_file_mib")}
              for name in big["runs"]}
    unsharded = big["runs"]["unsharded, --num-proc 1"]["mb_per_s"]
    speedups = {name: run["mb_per_s"] / unsharded for name, run in big["runs"].items()}
    print(f"peak memory, {args.megabytes[-1]:g} MB over {args.megabytes[0]:g} MB (RSS / anon / mapped files):")
    for name, ratios in growth.items():
        print(f"  {name:<26} " + " / ".join(f"{ratio:.2f}" for ratio in ratios.values()))
    print("MB/s over the unsharded --num-proc 1 run: " + ", ".join(f"{name} {ratio:.2f}" for name, ratio in speedups.items()))
    default_sizes = parser.get_default("megabytes")
    name = "tokenize_scale" if args.megabytes == default_sizes else \
        "tokenize_scale-" + "-".join(f"{megabytes:g}" for megabytes in args.megabytes) + "MB"
    path = write_result(name, {
        "settings": {"megabytes": args.megabytes, "shards": args.shards, "sample_bytes": args.sample_bytes,
                     "num_proc": args.num_proc, "floor_shards": args.floor_shards, "corpora": [path.name for path in sources]},
        "sizes": sizes,
        "peak_rss_growth_big_over_small": growth,
        "speedup_over_unsharded": speedups,
        "target": "peak memory the process holds (RssAnon) the same at both sizes (growth near 1); "
                  "MB/s rising with shard processes up to the cores, and a task of N alone "
                  "faster than the unsharded run",
    }, args.out, argv, versions=("tokenizers", "datasets"))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
