"""What every benchmark records beside its figures: machine, library versions, date, command.

Import this from a bench script only after `use_repository_imports()` has run, i.e.

    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from bench.common import use_repository_imports  # noqa: E402
    use_repository_imports()
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BENCH = ROOT / "bench"


def use_repository_imports() -> None:
    """Put the repository first on the import path and take bench/ off it.

    Python puts a script's own folder first, where a script named like a standard module
    (bench/tokenize.py once) shadows it for every library importing that module.
    """
    sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != BENCH]


def machine_info(torch_threads: int | None = None) -> dict:
    """Platform, CPU count, load and, where CUDA is present, the GPU's name and memory."""
    info = {
        "platform": platform.platform(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        # Other work on the machine while measuring: ratios from the same run stay fair, absolute
        # figures do not.
        "load_average_1_5_15": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    if torch_threads is not None:
        info["torch_threads"] = torch_threads
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available():
        properties = torch.cuda.get_device_properties(0)
        info["gpu"] = {"name": properties.name, "memory_gib": properties.total_memory / 2**30,
                       "count": torch.cuda.device_count(), "cuda": torch.version.cuda}
    return info


def library_versions(*names: str) -> dict:
    """Installed versions of python, bertpre and the named distributions (None when absent)."""
    versions = {"python": platform.python_version()}
    for name in ("bertpre", *names):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def command_line(argv: list[str] | None) -> str:
    """The command that reproduces a run, as typed from the repository root."""
    script = Path(sys.argv[0]).resolve()
    shown = f"bench/{script.name}" if script.parent == BENCH else "bench/<script>"
    arguments = sys.argv[1:] if argv is None else argv
    return " ".join([".venv/bin/python", shown, *arguments])


def median(values: list[float]) -> float:
    """Median, or NaN for an empty list (a measurement that did not run)."""
    return statistics.median(values) if values else float("nan")


def write_result(name: str, result: dict, out: Path, argv: list[str] | None,
                 versions: tuple[str, ...] = ("torch",), torch_threads: int | None = None, *,
                 benchmark: str | None = None, machine: dict | None = None) -> Path:
    """Write `out/NAME-DATE.json` with the date, command, machine and versions around `result`.

    Args:
        benchmark: the `benchmark` field, where it says more than NAME (default NAME).
        machine: fields added to `machine_info()`'s, e.g. the device a run used.

    Returns:
        The path written.
    """
    today = date.today().isoformat()
    document = {
        "benchmark": name if benchmark is None else benchmark,
        "date": today,
        "command": command_line(argv),
        "machine": {**machine_info(torch_threads), **(machine or {})},
        "versions": library_versions(*versions),
        **result,
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{today}.json"
    path.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    return path


def print_table(rows: list[tuple[str, float, float | None]], unit: str, peer_name: str) -> None:
    """Rows of (what, bertpre, peer): the figures and their ratio, aligned."""
    width = max(len(row[0]) for row in rows) + 2
    print(f"{unit:<{width}}{'bertpre':>14}{peer_name:>16}{'ratio':>8}")
    for what, ours, peer in rows:
        peer_text = f"{peer:>16,.1f}" if peer is not None else f"{'-':>16}"
        ratio = f"{ours / peer:>8.2f}" if peer else f"{'-':>8}"
        print(f"{what:<{width}}{ours:>14,.1f}{peer_text}{ratio}")


def transformers_bert_tokenizer(vocab_file: Path, lowercase: bool):
    """transformers' BertTokenizerFast on a vocab.txt. Version 5 reads `vocab=` and silently
    ignores `vocab_file=` (every id would be [UNK]); version 4 wants `vocab_file=`."""
    import transformers

    argument = "vocab" if int(transformers.__version__.split(".")[0]) >= 5 else "vocab_file"
    return transformers.BertTokenizerFast(**{argument: str(vocab_file)}, do_lower_case=lowercase)
