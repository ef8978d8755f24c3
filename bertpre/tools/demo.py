"""`bertpre demo`: the whole flow on the built-in sample corpus, on CPU, in minutes."""
from __future__ import annotations

import math
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc

from bertpre.claim import Claim, claimed
from bertpre.config import load_config, resolve_config_path
from bertpre.configs import preset_names
from bertpre.data.build import tokenize_corpus
from bertpre.data.folder import DataFolder, load_data
from bertpre.errors import Stopped, UserError
from bertpre.folders import (
    MARKERS,
    content_names,
    describe,
    enclosing_output,
    real_out,
    refuse_edits,
)
from bertpre.inventory import (
    Inventory,
    foreign_paths,
    read_inventory,
    remove_listed,
    shown,
    take_inventory,
)
from bertpre.links import refuse_links
from bertpre.tools.export import export
from bertpre.tools.inference import (
    Prediction,
    fill_in,
    fill_mask,
    load_model_and_tokenizer,
    shown_probability,
)
from bertpre.train.evaluation import evaluate
from bertpre.train.trainer import pretrain
from data_prep.sample_corpus import write_sample_corpus

MARKER = MARKERS["demo"][0]  # only a folder carrying this is replaced by the next demo
PARTS = ("corpus", "data", "run", "model")  # what the demo writes, each rebuilt whole
DEMO_VOCAB_SIZE = 4000
DEMO_VALIDATION_SHARE = 0.05  # 26 documents: enough for a steady accuracy figure
# The sample corpus is Python's own documentation, so these ask for words it teaches.
DEMO_SENTENCES = (
    "Return a new [MASK] containing the items of the iterable.",
    "If the file does not exist, an [MASK] is raised.",
    "The default value of this [MASK] is none.",
)


@dataclass
class DemoResult:
    """What the demo made and measured."""

    out: Path
    run_dir: Path
    export_dir: Path
    tensorboard_dir: Path
    steps: int
    evaluation: dict[str, float]
    unigram_accuracy: float
    predictions: list[tuple[str, str, list[list[Prediction]]]]  # (text, filled-in text, top-k)
    objective: str = "mlm"  # what the run learned to predict: its metrics are named for it


def run_demo(
    out: str | Path,
    *,
    config_path: str | Path | None = None,
    max_steps: int | None = None,
    say: Callable[[str], None] = print,
) -> DemoResult:
    """Sample corpus → small vocab → `configs/tiny.yaml` → export → fill-mask, all under `out`."""
    out = Path(out)
    config_path = resolve_config_path(config_path or "tiny")
    if not config_path.is_file():
        raise UserError(f"config {config_path} not found; pass --config with a YAML file or a "
                        f"preset ({', '.join(preset_names())})")
    # A bad config or --max-steps fails now, before anything is written or minutes are spent.
    load_config(config_path, values={} if max_steps is None else {"train.max_steps": max_steps})
    target = check_demo_folder(out)
    with claimed(target, "demo") as claim:
        check_demo_folder(out, claim)  # again, now that no other bertpre command can fill it
        kept = prepare_folder(target)
        claim.keep_folder()
        if kept:
            say(f"note: kept what the demo did not write in {out}: {shown(kept)}")
        data_dir, run_dir, export_dir = out / "data", out / "run", out / "model"

        say("1/4  writing the built-in sample corpus (Python's own documentation)")
        corpus = write_sample_corpus(out / "corpus")
        say(f"2/4  training a {DEMO_VOCAB_SIZE}-token WordPiece vocab and tokenizing into {data_dir}")
        tokenize_corpus([corpus], data_dir, vocab_size=DEMO_VOCAB_SIZE, lowercase=True,
                        validation_share=DEMO_VALIDATION_SHARE)

        # Typed: as `data.path=...` text, YAML would read a path such as `my demo #1` as `my demo`.
        values: dict[str, Any] = {"data.path": str(data_dir), "train.out": str(run_dir)}
        if max_steps is not None:
            values["train.max_steps"] = max_steps
        config = load_config(config_path, values=values)
        say(f"3/4  pretraining {config_path.name} for {config.train.max_steps} steps into {run_dir}")
        result = pretrain(config, resume=False, export_to=str(export_dir))
        if result.exit_code != 0:  # a stop signal, after the run saved its checkpoint
            raise Stopped(result.exit_code - 128)  # exit codes are 128 + the signal, as a shell's

        say(f"4/4  exporting to {export_dir} and filling masks")
        export(run_dir, export_dir, overwrite=True)
        model, tokenizer = load_model_and_tokenizer(export_dir)
        data = load_data(data_dir)
        evaluation = evaluate(model, data, config.data, micro_batch_size=config.train.micro_batch_size,
                              seed=config.train.seed)
        predictions = []
        for text in DEMO_SENTENCES:
            candidates = fill_mask(model, tokenizer, text, top_k=5)
            predictions.append((text, fill_in(tokenizer, text, candidates), candidates))
        take_inventory(target, "demo", skip=kept)
        return DemoResult(out=out, run_dir=run_dir, export_dir=export_dir,
                          tensorboard_dir=run_dir / "tensorboard", steps=result.step,
                          evaluation=evaluation, unigram_accuracy=unigram_accuracy(data),
                          predictions=predictions, objective=config.data.objective)


def check_demo_folder(out: Path, claim: Claim | None = None) -> Path:
    """The real path of `out`, refused unless it is new, empty or an earlier demo's folder whose
    parts hold nothing of yours, no file edited since and no symbolic link where the demo writes;
    writes nothing. Your files beside the
    parts are kept by the next demo."""
    target = real_out(out)
    if target.exists():
        if not target.is_dir():
            raise UserError(f"--out {out} exists and is not a folder; choose another --out")
        (claim or Claim(target, "demo")).check_free()
        if content_names(target) and not (target / MARKER).is_file():
            raise UserError(f"{out} exists and was not made by `bertpre demo`; choose another --out")
        earlier = earlier_demo(target)
        refuse_links(target, [*PARTS, MARKER, *earlier.files])
        refuse_edits(out, target, "demo")
        inside = [path for path in foreign_paths(target, earlier_demo(target)) if path.split("/")[0] in PARTS]
        if inside:
            them = "it" if len(inside) == 1 else "them"
            raise UserError(f"--out {out}: {shown(inside)} did not come from the demo, and the demo "
                            f"rebuilds {', '.join(sorted({path.split('/')[0] + '/' for path in inside}))} "
                            f"whole: move {them} out of there (files beside the demo's folders are "
                            "kept), then run again")
    if (around := enclosing_output(target)) is not None:
        raise UserError(f"--out {out} is inside {describe(around)} at {around}, and the demo's run "
                        "cannot be made inside another output; choose a folder outside it")
    return target


def earlier_demo(target: Path) -> Inventory:
    """What an earlier demo wrote in `target` (for a demo before inventories: its parts)."""
    return read_inventory(target, "demo", (*PARTS, MARKER))


def prepare_folder(target: Path) -> list[str]:
    """Clear what an earlier demo wrote in the claimed `target`, keeping everything else, and
    return what was kept (paths relative to `target`)."""
    earlier = earlier_demo(target)
    kept = foreign_paths(target, earlier)
    remove_listed(target, earlier)
    (target / MARKER).write_text("made by `bertpre demo`; the next demo replaces what it wrote "
                                 "here and keeps the rest\n")
    return kept


def unigram_accuracy(data: DataFolder) -> float:
    """MLM accuracy of always guessing the train split's most frequent token, on validation.

    Masked positions are drawn uniformly from the real tokens, so this is the validation share
    of that token: the bar a model must clear to have learned anything beyond frequencies.
    """
    def token_ids(dataset) -> np.ndarray:
        column = dataset.data.column("input_ids")
        return pc.list_flatten(pc.list_flatten(column)).to_numpy()

    train_ids = token_ids(data.train)
    most_frequent = np.bincount(train_ids).argmax()
    validation_ids = token_ids(data.validation)
    return float((validation_ids == most_frequent).mean()) if validation_ids.size else float("nan")


def format_result(result: DemoResult) -> str:
    """The demo's closing summary: accuracy against the unigram guess, predictions, next steps."""
    evaluation, name = result.evaluation, result.objective
    lines = [
        "",
        f"trained {result.steps} steps; validation {name.upper()} loss {evaluation[f'{name}_loss']:.3f}, "
        f"perplexity {evaluation['perplexity']:.1f}",
        f"{name.upper()} accuracy {evaluation[f'{name}_acc']:.1%} against {result.unigram_accuracy:.1%} "
        "for always guessing the most frequent token",
    ]
    pair_accuracy = evaluation.get("pair_acc", math.nan)
    if pair_accuracy == pair_accuracy:  # NaN: the run had no sentence pairs
        lines.append(f"pair accuracy {pair_accuracy:.1%} (chance: 50%)")
    lines += ["", "fill-mask:"]
    for text, filled, candidates in result.predictions:
        lines.append(f"  {text}")
        lines.append(f"    → {filled}")
        for choices in candidates:
            shown = ", ".join(f"{c.text} {shown_probability(c.probability)}" for c in choices)
            lines.append(f"    top 5: {shown}")
    lines += [
        "",
        f"TensorBoard logs: {result.tensorboard_dir}",
        f"  view them with: tensorboard --logdir {shlex.quote(str(result.tensorboard_dir))}",
        f"Hugging Face model: {result.export_dir}",
        f"  try: bertpre fill-mask {shlex.quote(str(result.export_dir))} "
        "'The [MASK] function returns a list.'",
    ]
    return "\n".join(lines)
