"""Conformance of every row of the families table to one rule: no command starts a forward that
would not fit. Each row's `max_input_tokens` bounds what one forward reads: `fill-mask` refuses a
longer text in one line (or reads it in windows, as XLNet does, where the row sets no bound) and
`evaluate` a longer --max-seq-length; fine-tuning (every task kind, QA too) cuts its rows to it
with a note; `pretrain` refuses a longer data.max_seq_length (each phase's that a phase reads, a
config's model's or `model.init_from`'s) in one line; and a batch × length whose estimate (the
device's: a CPU's or a GPU's) exceeds the machine's memory is refused in one line before any
model is built. The commands run as a user runs them, on a tiny model of each row
saved as `bertpre export` writes it; a new row is checked here without a line added."""
from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import torch
from _in_process import run_main

from bertpre.errors import UserError
from bertpre.model import BertConfig
from bertpre.model.cost import (
    ForwardShape,
    estimate_inference_memory,
    estimate_memory,
    readable,
    training_memory_floor,
)
from bertpre.model.families import FAMILIES
from bertpre.model.hf_format import read_config
from bertpre.tokenizer import load_tokenizer
from bertpre.tools import inference
from bertpre.train import memory
from bertpre.train.objectives import objective_for

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

ROWS = list(FAMILIES)
# max_position_embeddings 130: a BERT or ModernBERT (its window of 128 within) reads 130 tokens, a RoBERTa
# fewer (its padding's rows)
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=130)
WORDS = ["the", "cat", "sees", "river", "a", "dog", "farmer", "apple", "red", "."]
SMALL_MACHINE = 64 * 2**20
QUICK = 20.0  # seconds: a refusal comes before any forward, a window's forward is a tiny model's


@pytest.fixture(scope="module")
def folders(tiny_data, tmp_path_factory) -> dict[str, Path]:
    """A tiny model of every row, written by the row's own export writer with the tiny DATA's
    tokenizer (laid out as the row reads it)."""
    root = tmp_path_factory.mktemp("families")
    tokenizer = load_tokenizer(tiny_data / "tokenizer")
    made = {}
    for architecture, row in FAMILIES.items():
        config = BertConfig(**{**row.model_defaults, **TINY, "architecture": architecture,
                               "vocab_size": tokenizer.get_vocab_size()})
        torch.manual_seed(0)
        # the model a run of the row's first objective trains (ELECTRA's: its generator and discriminator)
        model = objective_for(row.objectives[0]).build_model(config, tokenizer, row.build_pretraining)
        _, write = row.export_writer(model, tiny_data / "tokenizer")
        made[architecture] = root / architecture
        made[architecture].mkdir()
        write(made[architecture])
    return made


def machine_of(size: int, monkeypatch) -> None:
    """This machine has `size` bytes, as every memory check reads it."""
    monkeypatch.setattr(memory, "device_memory", lambda device: (size, "this machine has"))


def words(count: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(count))


def limit_of(folder: Path) -> int | None:
    config = read_config(folder)
    return FAMILIES[config.architecture].max_input_tokens(config)


@pytest.mark.parametrize("architecture", ROWS)
def test_fill_mask_refuses_an_over_long_text_in_one_line_or_reads_it_in_windows(
        architecture, folders, monkeypatch, capsys):
    """The issue's 17,000 words: refused in one line before any forward, or read in windows each
    of whose forwards the cost model passed on a machine of 64 MiB."""
    folder = folders[architecture]
    text = "the [MASK] sees " + words(17_000) + " [MASK] ."
    length = len(load_tokenizer(folder).encode(text.replace("[MASK]", "river")).ids)
    shapes: list[ForwardShape] = []
    check = inference.check_forward_fits
    monkeypatch.setattr(inference, "check_forward_fits",
                        lambda config, shape, *rest, **options: shapes.append(shape)
                        or check(config, shape, *rest, **options))
    machine_of(SMALL_MACHINE, monkeypatch)
    start = time.perf_counter()
    code, stdout, stderr = run_main(["fill-mask", folder, text], monkeypatch, capsys)
    elapsed = time.perf_counter() - start
    limit = limit_of(folder)
    assert elapsed < QUICK
    if limit is None:  # windows: every forward is one the check passed, each far shorter than the text
        assert code == 0, stderr
        assert sum(line.strip().startswith("[MASK]") for line in stdout.splitlines()) == 2
        assert shapes and max(shape.seq_length for shape in shapes) < length // 10
        return
    assert length > limit and not shapes  # refused before a forward was even estimated
    assert (code, stdout) == (2, "")
    assert stderr.splitlines() == [f"error: the text is {length:,} tokens long; this model reads at most {limit:,}; "
                                   "shorten the text"]


@pytest.mark.parametrize("architecture", ROWS)
def test_fill_mask_refuses_a_text_within_the_length_whose_forward_would_not_fit(
        architecture, folders, monkeypatch, capsys):
    folder = folders[architecture]
    text = "the [MASK] sees the river ."
    machine_of(2**10, monkeypatch)  # smaller than any model's weights
    code, _, stderr = run_main(["fill-mask", folder, text], monkeypatch, capsys)
    assert code == 2 and len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("error: reading the text (") and stderr.rstrip().endswith(
        "but this machine has 1.0 KiB; shorten the text")


@pytest.mark.parametrize("architecture", ROWS)
def test_evaluate_refuses_a_length_past_the_row_or_a_batch_past_the_machine_in_one_line(
        architecture, folders, tiny_data, monkeypatch, capsys):
    folder = folders[architecture]
    machine_of(SMALL_MACHINE, monkeypatch)
    start = time.perf_counter()
    code, stdout, stderr = run_main(["evaluate", folder, "--data", tiny_data, "--max-seq-length", "32768",
                                     "--micro-batch-size", "256"], monkeypatch, capsys)
    assert time.perf_counter() - start < QUICK
    assert (code, stdout) == (2, "") and len(stderr.splitlines()) == 1, stderr
    limit = limit_of(folder)
    if limit is None:
        assert stderr.startswith("error: scoring 256 sequences of 32,768 tokens at once needs about ")
    else:
        assert stderr.startswith(f"error: --max-seq-length 32768 is longer than the {limit} positions of {folder} (")


def task_files(folder: Path, task: str) -> tuple[list[str], str]:
    """(the command's task options, the word for a batch's rows) for 300 examples of `task` whose
    texts (contexts) run past 140 tokens: longer than any tiny model's positions."""
    rng = random.Random(0)
    texts = [words(rng.randint(140, 180), seed) for seed in range(300)]
    path = folder / f"{task}.jsonl"
    if task == "tagging":
        path = folder / "tagging.conll"
        path.write_text("\n\n".join("\n".join(f"{word} {'B-X' if word == 'cat' else 'O'}" for word in text.split())
                                    for text in texts) + "\n", encoding="utf-8")
        return ["--task", "tagging", "--train", str(path), "--validation", str(path)], "examples"
    if task == "qa":
        path = folder / "qa.json"
        paragraphs = [{"context": text + " the farmer sees the cat .", "qas": [{
            "id": f"q{number}", "question": "who sees the cat ?",
            "answers": [{"text": "the farmer", "answer_start": len(text) + 1}]}]}
            for number, text in enumerate(texts)]
        path.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs}]}),
                        encoding="utf-8")
        return ["--task", "qa", "--train", str(path), "--validation", str(path), "--doc-stride", "16"], "windows"
    rows = [{"text": text, "other": words(20, -number), "label": float(len(text) % 7) if task == "regression"
             else ("a" if len(text) % 2 else "b")} for number, text in enumerate(texts)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    options = {"classification": [], "pairs": ["--text-pair-column", "other"], "regression": ["--task", "regression"]}
    return [*options[task], "--train", str(path), "--validation", str(path)], "examples"


@pytest.mark.parametrize("task", ["classification", "pairs", "regression", "tagging", "qa"])
@pytest.mark.parametrize("architecture", ROWS)
def test_finetune_cuts_rows_to_the_row_and_refuses_a_batch_past_the_machine_in_one_line(
        architecture, task, folders, tmp_path, monkeypatch, capsys):
    """--max-seq-length 32768 and --batch-size 256: rows cut to what the row reads (with a note),
    then a batch the machine cannot hold refused in one line, before anything is written."""
    folder = folders[architecture]
    options, unit = task_files(tmp_path, task)
    machine_of(SMALL_MACHINE, monkeypatch)
    start = time.perf_counter()
    code, stdout, stderr = run_main(["finetune", folder, *options, "--out", tmp_path / "out", "--seeds", "1",
                                     "--epochs", "1", "--max-seq-length", "32768", "--batch-size", "256",
                                     "--precision", "fp32"], monkeypatch, capsys)
    assert time.perf_counter() - start < QUICK
    assert (code, stdout) == (2, ""), stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors == stderr.splitlines()[-1:], stderr
    assert errors[0].startswith(f"error: fine-tuning a batch of 256 {unit} of ")
    assert errors[0].endswith("lower --batch-size or --max-seq-length")
    length = int(errors[0].split(f"256 {unit} of ")[1].split(" tokens")[0].replace(",", ""))
    limit = limit_of(folder)
    if limit is not None:
        assert length <= limit and f"examples are cut at {limit}" in stderr
    else:
        assert length > 140  # read whole: nothing cut, and the check saw the whole length
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("architecture", ROWS)
def test_the_fine_tuning_estimate_grows_with_the_batch_and_the_length(architecture, folders) -> None:
    """The pre-check's figure at batch 8, 64 and 256 and at two lengths: every one different, the
    batch's share linear in it, the length's between linear and T² (ModernBERT's dense window on a
    CPU: `test_modernbert_at_32768_tokens_is_judged_by_batch_with_the_windows_square_on_a_cpu`)."""
    config = read_config(folders[architecture])
    cpu = torch.device("cpu")

    def activations(batch: int, length: int) -> int:
        return estimate_memory(config, length, 0.0, "fp32", memory_length=0, query_rows=0,
                               device_type=cpu.type).activation_peak(batch)

    figures = {(batch, length): activations(batch, length) for batch in (8, 64, 256) for length in (1024, 2048)}
    assert len(set(figures.values())) == len(figures)
    assert figures[256, 2048] > figures[64, 2048] > figures[8, 2048]
    assert figures[64, 2048] == pytest.approx(8 * figures[8, 2048], rel=0.01)
    assert 2 <= figures[8, 2048] / figures[8, 1024] <= 4  # linear at the least, T² at the most
    shape = ForwardShape(batch_size=8, seq_length=2048, predicted_rows=0)
    assert estimate_inference_memory(config, shape, device_type="cpu").activations > 0


def test_modernbert_at_32768_tokens_is_judged_by_batch_with_the_windows_square_on_a_cpu() -> None:
    """The report: a ModernBERT-base fine-tuned at --max-seq-length 32768 passed the pre-check
    at batch 8, 64 and 256 alike, as if FlexAttention ran on the CPU. Its forward there holds
    the local layers' additive T×T window (4 bytes an element in fp32) and the boolean one a row."""
    config = BertConfig(architecture="modernbert", vocab_size=50368, intermediate_size=1152, num_hidden_layers=22,
                        max_position_embeddings=8192, pad_token_id=50283)
    length = 32768
    cpu = estimate_memory(config, length, 0.0, "fp32", device_type="cpu")
    gpu = estimate_memory(config, length, 0.0, "fp32", device_type="cuda")
    assert cpu.activations_per_sequence - gpu.activations_per_sequence == 4 * length * length
    assert cpu.forward_masks_per_sequence == length * length and gpu.forward_masks_per_sequence == 0
    peaks = [cpu.activation_peak(batch) for batch in (8, 64, 256)]
    assert peaks == [batch * (cpu.activations_per_sequence + length * length) for batch in (8, 64, 256)]
    assert [readable(peak) for peak in peaks] == ["305.10 GiB", "2.38 TiB", "9.53 TiB"]  # GPU: 265.10 GiB at 8


# --- pretrain: the same row bounds the length a phase reads; the device's estimate bounds the rest ---

LONG = 32768  # past every tiny row's positions; on a machine of 64 MiB, past any row's memory too


def pretrain_config(folder: Path, architecture: str, data: Path, *, init_from: Path | None = None,
                    max_seq_length: int = 64, micro_batch_size: int = 8, phases: list | None = None) -> Path:
    """A YAML config pretraining a tiny model of `architecture` (or `init_from`'s) on `data` for
    one step on the CPU, with the row's first objective and no pair task."""
    row = FAMILIES[architecture]
    # a source's architecture is named too: a config is validated before the source is read
    model = {"init_from": str(init_from), "architecture": architecture} if init_from \
        else {**TINY, "architecture": architecture}
    config = {"model": model,
              "data": {"path": str(data), "max_seq_length": max_seq_length, "pair_task": "none",
                       "objective": row.objectives[0], "num_workers": 0},
              "train": {"batch_size": micro_batch_size, "micro_batch_size": micro_batch_size, "max_steps": 2,
                        "precision": "fp32", "device": "cpu", "out": str(folder / "run")},
              **({"phases": phases} if phases else {})}
    path = folder / "config.yaml"
    path.write_text(json.dumps(config), encoding="utf-8")  # JSON is YAML
    return path


def no_model_built(monkeypatch) -> list:
    """Record every model the trainer would build: a refusal before allocation builds none."""
    from bertpre.train import trainer

    built: list = []
    monkeypatch.setattr(trainer, "build_model", lambda run, say: built.append(run) or pytest.fail("model built"))
    return built


def pretrain_refusal(config: Path, monkeypatch, capsys) -> str:
    """The one `error:` line of `bertpre pretrain --config CONFIG`, which must exit 2 quickly,
    print nothing on stdout, build no model and write no checkpoint."""
    built = no_model_built(monkeypatch)
    start = time.perf_counter()
    code, stdout, stderr = run_main(["pretrain", "--config", config], monkeypatch, capsys)
    assert time.perf_counter() - start < QUICK
    assert (code, stdout, built) == (2, "", []), stderr
    assert len(stderr.splitlines()) == 1 and stderr.startswith("error: "), stderr
    assert not (config.parent / "run" / "checkpoints").exists()
    return stderr.rstrip("\n")


@pytest.mark.parametrize("source", ["config", "init_from"])
@pytest.mark.parametrize("architecture", ROWS)
def test_pretrain_refuses_a_length_past_the_row_in_one_line_or_a_run_past_the_machine(
        architecture, source, folders, tiny_data, tmp_path, monkeypatch, capsys):
    """data.max_seq_length 32768: past the row's `max_input_tokens` refused in one line before the
    data is read (from a config's model, or from `model.init_from`'s, whose positions the run
    cannot raise); where the row sets no bound, the memory pre-check refuses it on 64 MiB."""
    init_from = folders[architecture] if source == "init_from" else None
    config = pretrain_config(tmp_path, architecture, tiny_data, init_from=init_from, max_seq_length=LONG)
    machine_of(SMALL_MACHINE, monkeypatch)
    error = pretrain_refusal(config, monkeypatch, capsys)
    limit = limit_of(folders[architecture])
    if limit is None:
        assert error.startswith(f"error: a micro-batch of 8 sequences of {LONG:,} tokens needs at least "), error
        assert error.endswith("but this machine has 64.0 MiB; make train.micro_batch_size or data.max_seq_length"
                              + (", model.mem_len" if "memory states" in error else "")
                              + " smaller (`bertpre info --config CFG` estimates the memory)"), error
    elif init_from is None:
        assert error.startswith(f"error: data.max_seq_length ({LONG}) is larger than model.max_position_embeddings "
                                f"(130)") and error.endswith("lower one or raise the other"), error
        assert f"{limit} tokens" in error or limit == 130
    else:
        assert error.startswith(f"error: data.max_seq_length ({LONG}) is larger than the ") and error.endswith(
            f"positions of {init_from} read; lower it"), error
        assert f"the {limit} " in error


@pytest.mark.parametrize("architecture", ROWS)
def test_pretrain_checks_each_phase_s_length_and_never_a_top_level_one_no_phase_reads(
        architecture, folders, tiny_data, tmp_path, monkeypatch, capsys):
    """A top-level data.max_seq_length that every phase replaces is not the run's: not refused
    (the run goes on to the memory check, here a machine of 1 KiB); a phase's own is."""
    init_from = folders[architecture]
    unread = [{"steps": 1, "data": {"max_seq_length": 64}}, {"steps": 1, "data": {"max_seq_length": 128}}]
    for model in (None, init_from):
        config = pretrain_config(tmp_path, architecture, tiny_data, init_from=model, max_seq_length=LONG,
                                 phases=unread)
        machine_of(2**10, monkeypatch)
        error = pretrain_refusal(config, monkeypatch, capsys)
        assert error.startswith("error: phase 1: the model has "), error
    limit = limit_of(init_from)
    if limit is None:
        return
    over = [{"steps": 1}, {"steps": 1, "data": {"max_seq_length": limit + 2}}]
    for model in (None, init_from):
        config = pretrain_config(tmp_path, architecture, tiny_data, init_from=model, phases=over)
        machine_of(SMALL_MACHINE, monkeypatch)
        error = pretrain_refusal(config, monkeypatch, capsys)
        assert error.startswith(f"error: phases[1]: data.max_seq_length ({limit + 2}) is larger than "), error


@pytest.mark.parametrize("architecture", ROWS)
def test_pretrain_refuses_a_micro_batch_past_the_machine_before_building_the_model(
        architecture, tiny_data, tmp_path, monkeypatch, capsys):
    """A length the row reads, at a micro-batch of 65,536 on 64 MiB: refused by the pre-check,
    with the device's figure, before a model or a batch exists."""
    config = pretrain_config(tmp_path, architecture, tiny_data, micro_batch_size=65536)
    machine_of(SMALL_MACHINE, monkeypatch)
    error = pretrain_refusal(config, monkeypatch, capsys)
    assert error.startswith("error: a micro-batch of 65,536 sequences of 64 tokens needs at least "), error
    assert "but this machine has 64.0 MiB" in error


@pytest.mark.parametrize("architecture", ROWS)
def test_the_pretraining_floor_grows_with_the_micro_batch_and_the_length_on_either_device(architecture) -> None:
    """The pre-check's activations at micro-batch 8, 64 and 256 and two lengths, on a CPU and on a
    GPU: each different, linear in the micro-batch, between linear and T² in the length."""
    config = BertConfig(**{**FAMILIES[architecture].model_defaults, **TINY, "architecture": architecture,
                           "vocab_size": 1000, "max_position_embeddings": 8192})
    for device_type in ("cpu", "cuda"):
        figures = {(batch, length): training_memory_floor(config, length, 0.15, batch, device_type=device_type)[1]
                   for batch in (8, 64, 256) for length in (2048, 4096)}
        assert len(set(figures.values())) == len(figures)
        assert figures[256, 4096] > figures[64, 4096] > figures[8, 4096]
        assert figures[64, 4096] == pytest.approx(8 * figures[8, 4096], rel=0.01)
        assert 2 <= figures[8, 4096] / figures[8, 2048] <= 4


def test_modernbert_pretraining_is_judged_by_the_cpu_s_estimate_where_it_runs_on_a_cpu(monkeypatch) -> None:
    """ModernBERT-base at 8,192 tokens, micro-batch 2: a GPU's FlexAttention keeps no T×T window,
    a CPU's SDPA reads a dense one. A machine between the two
    floors takes the run on a GPU and refuses it on a CPU, as `pretrain` there would."""
    from bertpre.config import load_config
    from bertpre.train.setup import check_fits_in_memory, predicted_share

    config = load_config("modernbert-base", ["data.max_seq_length=8192", "train.micro_batch_size=2",
                                             "train.batch_size=4608", "model.vocab_size=50368"])
    config.phases = []
    floors = {device: sum(training_memory_floor(config.model, 8192, predicted_share(config.data), 2,
                                                device_type=device)) for device in ("cpu", "cuda")}
    # each row's additive window in bf16 and its boolean one, which FlexAttention does without; and
    # in the loss's chunks (4,915 rows, 2 of 2,624) the float32 copy of the bf16 gradient a CPU makes
    # for the bias's float32 sum: (2 + 4)·c·V at most where a GPU's is the log-softmax's 4·c·V
    assert floors["cpu"] - floors["cuda"] == 2 * (2 + 1) * 8192 * 8192 + 2 * 2624 * 50368
    machine_of((floors["cpu"] + floors["cuda"]) // 2, monkeypatch)
    check_fits_in_memory(config, torch.device("cuda"))
    with pytest.raises(UserError, match=r"^a micro-batch of 2 sequences of 8,192 tokens needs at least .* but this "
                                        r"machine has .*; make train.micro_batch_size or data.max_seq_length smaller"):
        check_fits_in_memory(config, torch.device("cpu"))


@pytest.mark.parametrize("architecture", ROWS)
def test_info_prints_the_estimate_for_the_device_the_config_asks_for(
        architecture, tiny_data, tmp_path, monkeypatch, capsys):
    """`info` keeps the GPU's figure (the README's) for train.device auto and cuda, and prints a
    CPU's, so headed, for train.device cpu: larger where a GPU runs FlexAttention (ModernBERT past
    1,024 tokens), the same elsewhere."""
    config = pretrain_config(tmp_path, architecture, tiny_data)
    # heads of 16 (a size FlexAttention's kernels take) and rows past 1,024 tokens
    longer = ["--set", "model.max_position_embeddings=8192", "--set", "data.max_seq_length=4096",
              "--set", "model.num_attention_heads=2"]
    reports = {}
    for device in ("auto", "cuda", "cpu"):
        code, stdout, stderr = run_main(["info", "--config", config, *longer, "--set", f"train.device={device}"],
                                        monkeypatch, capsys)
        assert code == 0, stderr
        reports[device] = stdout
    assert reports["auto"] == reports["cuda"] and "memory estimate (" in reports["cuda"]
    assert "memory estimate on a CPU (" in reports["cpu"]

    def total(report: str) -> str:
        return next(line for line in report.splitlines() if line.startswith("  at micro_batch_size 8: "))

    config_of = BertConfig(**{**FAMILIES[architecture].model_defaults, **TINY, "architecture": architecture,
                              "vocab_size": 1000, "max_position_embeddings": 8192, "num_attention_heads": 2})
    flex_on_a_gpu = estimate_memory(config_of, 4096, 0.15, device_type="cpu").forward_masks_per_sequence > \
        estimate_memory(config_of, 4096, 0.15, device_type="cuda").forward_masks_per_sequence
    assert (total(reports["cpu"]) != total(reports["cuda"])) == flex_on_a_gpu
    assert flex_on_a_gpu == (architecture == "modernbert")  # the row whose estimate depends on the device
