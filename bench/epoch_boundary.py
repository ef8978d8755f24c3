"""Does an epoch boundary cost a step? The trainer's step times over many short epochs.

A tiny run (`configs/tiny.yaml`, `data.num_workers` N) on a small DATA folder whose epoch is a few
steps, timed step by step inside `bertpre pretrain`'s process: steps/s without the first step,
and the median time of the steps that start an epoch next to the median of the others. The peer
is another checkout of bertpre (`--peer DIR`, e.g. the commit before the loader change, made with
`git archive COMMIT bertpre configs data_prep | tar -x -C DIR`), run the same way in interleaved
rounds.

    .venv/bin/python -m bench.epoch_boundary --peer /tmp/before --workers 2 --steps 120 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import RESULTS, ROOT, median, write_result

# Run in a fresh process with the checkout under test first on the path: the step times and the
# stream's epoch after each step, as JSON on the last line.
TIMED_RUN = """
import json, sys, time
from bertpre.config import load_config
from bertpre.train import trainer
times, epochs, step = [], [], trainer.Trainer.train_step
def timed(self):
    started = time.perf_counter()
    stats = step(self)
    times.append(time.perf_counter() - started)
    epochs.append(self.stream.epoch)
    return stats
trainer.Trainer.train_step = timed
trainer.pretrain(load_config(sys.argv[1], sys.argv[2:]))
print(json.dumps({"times": times, "epochs": epochs}))
"""


def build_data(folder: Path) -> Path:
    """A DATA folder of the built-in sample corpus, by `bertpre tokenize` (a few steps an epoch)."""
    from data_prep.sample_corpus import write_sample_corpus

    corpus = write_sample_corpus(folder / "corpus", target_bytes=40_000)
    subprocess.run([sys.executable, "-m", "bertpre", "tokenize", str(corpus), "--out", str(folder / "data"),
                    "--vocab-size", "1000"], check=True, capture_output=True, cwd=ROOT)
    return folder / "data"


def timed_run(source: Path, data: Path, out: Path, workers: int, steps: int) -> dict:
    """One run's step times, with bertpre imported from `source`."""
    settings = [f"data.path={data}", f"train.out={out}", f"train.max_steps={steps}", f"data.num_workers={workers}",
                "train.log_every=1000", "train.eval_every=100000", "train.save_every=100000"]
    env = dict(os.environ, PYTHONPATH=str(source), OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", TIMED_RUN, str(ROOT / "configs" / "tiny.yaml"), *settings],
                          env=env, capture_output=True, text=True, check=True, cwd=source)
    record = json.loads(done.stdout.strip().splitlines()[-1])
    epochs = record["epochs"]
    # Each step after the first (which starts everything) with the epoch before and after it.
    steps = list(zip(record["times"][1:], epochs[:-1], epochs[1:], strict=True))
    times = [time for time, _, _ in steps]
    starts = [time for time, before, after in steps if after > before]
    others = [time for time, before, after in steps if after == before]
    return {"steps_per_s": len(times) / sum(times), "epochs": epochs[-1] + 1,
            "epoch_start_step_ms": 1e3 * median(starts), "other_step_ms": 1e3 * median(others)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--peer", type=Path, required=True, help="another checkout of bertpre (the 'before')")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    sides = {"bertpre": ROOT, "peer": args.peer.resolve()}
    runs: dict[str, list[dict]] = {name: [] for name in sides}
    with tempfile.TemporaryDirectory() as scratch:
        data = build_data(Path(scratch))
        for round_index in range(args.rounds):
            for name, source in (sides.items() if round_index % 2 == 0 else reversed(sides.items())):
                out = Path(scratch) / f"{name}-{round_index}"
                runs[name].append(timed_run(source, data, out, args.workers, args.steps))
                print(name, round_index, runs[name][-1], flush=True)
    figures = {name: {key: median([run[key] for run in done]) for key in done[0]} for name, done in runs.items()}
    for name, values in figures.items():
        print(f"{name:8s} {values['steps_per_s']:7.2f} steps/s   step starting an epoch "
              f"{values['epoch_start_step_ms']:7.1f} ms, other steps {values['other_step_ms']:6.1f} ms "
              f"({values['epochs']:.0f} epochs)")
    path = write_result("epoch_boundary", {"settings": vars(args) | {"peer": str(args.peer), "out": str(args.out)},
                                           "bertpre": figures["bertpre"], "peer": figures["peer"], "rounds": runs,
                                           "ratio_steps_per_s": figures["bertpre"]["steps_per_s"]
                                           / figures["peer"]["steps_per_s"]},
                        args.out, argv)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
