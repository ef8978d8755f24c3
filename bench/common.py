"""What the benchmarks share: their WikiText reader and synthetic batch, and what each records
beside its figures (machine, library versions, date, command)."""
from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import re
import statistics
import sys
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
BENCH = ROOT / "bench"
CORPORA = ROOT.parent / "shared" / "corpora"  # WikiText and other corpora, beside the repository
VOCAB_SIZE = 30522  # BERT's uncased vocabulary
MAX_PREDICTIONS = {128: 20, 512: 76}  # Google's max_predictions_per_seq at these lengths
SENTENCE_END = re.compile(r"(?<= \.) ")  # WikiText's tokenized full stop, then a space


def read_wikitext(path: Path) -> list[list[str]]:
    """A WikiText file's articles (each opened by a ` = Title = ` line) as documents.

    Section headings (` = = ... = = `) and lines before the first article are dropped; each
    paragraph line is split into sentences after every ` .`.
    """
    documents: list[list[str]] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line.startswith("= ") and not line.startswith("= = "):
            documents.append([])
        elif line and not line.startswith("= = ") and documents:
            documents[-1] += [part for part in SENTENCE_END.split(line) if part.strip()]
    return [document for document in documents if document]


def write_bert_format(documents: list[list[str]], path: Path) -> Path:
    """Write `documents` as the original BERT format: one sentence a line, a blank line after each."""
    path.write_text("".join("\n".join(d) + "\n\n" for d in documents), encoding="utf-8")
    return path


def predictions_per_row(length: int, seq_length: int | None = None, predicted_share: float = 0.15,
                        capped: bool = True) -> int:
    """round(predicted_share · eligible tokens) of a row of `length` tokens ([CLS] and the two
    [SEP] are not eligible); with `capped`, at most Google's recipe's count for `seq_length`."""
    count = round(predicted_share * (length - 3))
    cap = MAX_PREDICTIONS.get(seq_length or length) if capped else None
    return min(count, cap) if cap else count


def make_batch(batch_size: int, seq_length: int, device: torch.device | str = "cpu", seed: int = 0,
               short_rows: float = 0.0, predicted_share: float = 0.15, capped: bool = True,
               vocab_size: int = VOCAB_SIZE) -> dict[str, torch.Tensor]:
    """A synthetic NSP training batch: [CLS] A [SEP] B [SEP], then padding, ids drawn from `seed`.

    Each row of n tokens has `predictions_per_row(n, seq_length, predicted_share, capped)`
    positions replaced by [MASK] (their ids in `labels`, -100 elsewhere) and a random pair label.
    A `short_rows` share of rows gets a length drawn uniformly from [s/8, s), the rest are full:
    0.1 gives the ~4% padding measured on article-level wikitext-2 NSP instances at s=128.
    Special ids follow bertpre's vocab: [PAD] 0, [CLS] 2, [SEP] 3, [MASK] 4.
    """
    import torch  # here, so that importing bench.common stays light

    generator = torch.Generator().manual_seed(seed)
    lengths = torch.full((batch_size,), seq_length)
    short = torch.rand(batch_size, generator=generator) < short_rows
    lengths[short] = torch.randint(seq_length // 8, seq_length, (int(short.sum()),), generator=generator)
    input_ids = torch.randint(5, vocab_size, (batch_size, seq_length), generator=generator)
    positions = torch.arange(seq_length)
    split = lengths // 2  # the first [SEP]
    special = (positions == 0) | (positions == split[:, None]) | (positions == lengths[:, None] - 1)
    padding = positions >= lengths[:, None]
    input_ids[:, 0] = 2  # [CLS]
    input_ids[positions == split[:, None]] = 3  # [SEP]
    input_ids[positions == lengths[:, None] - 1] = 3
    input_ids[padding] = 0  # [PAD]
    token_type_ids = ((positions > split[:, None]) & ~padding).long()
    # The k lowest random keys among a row's eligible positions are its predictions.
    keys = torch.rand(batch_size, seq_length, generator=generator).masked_fill(special | padding, 2.0)
    ranks = keys.argsort(dim=1).argsort(dim=1)
    counts = torch.tensor([predictions_per_row(int(n), seq_length, predicted_share, capped)
                           for n in lengths])
    predicted = ranks < counts[:, None]
    labels = torch.where(predicted, input_ids, -100)
    input_ids = input_ids.masked_fill(predicted, 4)  # [MASK]
    batch = dict(input_ids=input_ids, attention_mask=(~padding).long(), token_type_ids=token_type_ids,
                 labels=labels, next_sentence_label=torch.randint(0, 2, (batch_size,), generator=generator))
    return {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}


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


def source_digest() -> str:
    """The first 12 hex digits of a SHA-256 over bertpre's Python source (each file's path and
    bytes, in path order): the code a run was trained with, where the installed version (0.1.0)
    says nothing. Records that keep runs across invocations compare it."""
    import hashlib

    import bertpre

    package = Path(bertpre.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


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
    script = Path(sys.argv[0]).resolve()  # the module's file under `python -m bench.NAME`
    module = f"bench.{script.stem}" if script.parent == BENCH else "bench.<script>"
    arguments = sys.argv[1:] if argv is None else argv
    return " ".join([".venv/bin/python", "-m", module, *arguments])


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


def print_table(rows: list[tuple[str, float | None, float | None]], unit: str, peer_name: str) -> None:
    """Rows of (what, bertpre, peer): the figures and their ratio, aligned; None prints as -."""
    width = max(len(row[0]) for row in rows) + 2
    print(f"{unit:<{width}}{'bertpre':>14}{peer_name:>16}{'ratio':>8}")
    for what, ours, peer in rows:
        ours_text = f"{ours:>14,.1f}" if ours is not None else f"{'-':>14}"
        peer_text = f"{peer:>16,.1f}" if peer is not None else f"{'-':>16}"
        ratio = f"{ours / peer:>8.2f}" if peer and ours is not None else f"{'-':>8}"
        print(f"{what:<{width}}{ours_text}{peer_text}{ratio}")


def transformers_bert_tokenizer(vocab_file: Path, lowercase: bool):
    """transformers' BertTokenizerFast on a vocab.txt. Version 5 reads `vocab=` and silently
    ignores `vocab_file=` (every id would be [UNK]); version 4 wants `vocab_file=`."""
    import transformers

    argument = "vocab" if int(transformers.__version__.split(".")[0]) >= 5 else "vocab_file"
    return transformers.BertTokenizerFast(**{argument: str(vocab_file)}, do_lower_case=lowercase)


def parse_changes(items: list[str]) -> dict[str, Any]:
    """`--set KEY=VALUE` model keys, values read as YAML scalars (true, 0.0, auto)."""
    import yaml

    changes = {}
    for item in items:
        name, _, value = item.partition("=")
        if not value:
            raise SystemExit(f"--set {item!r}: write KEY=VALUE, e.g. low_precision_layernorm=false")
        changes[name.strip()] = yaml.safe_load(value)
    return changes
