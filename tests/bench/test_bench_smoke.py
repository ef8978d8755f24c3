"""bench/ scripts: argument parsing, their exact helpers, and a tiny run of each CPU bench."""
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from unittest import mock

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
# The bench package lives at the repository root, which pytest does not put on sys.path.
sys.path.insert(0, str(ROOT))
from _tiny_data import build_tiny_data  # noqa: E402

from bench import (  # noqa: E402
    collate,
    common,
    create_instances,
    epoch_boundary,
    gpu,
    loader,
    model,
    pretrain,
    run_cpu,
    tokenize_scale,
    tokenize_speed,
)

WIKITEXT = "\n".join([" ", " = First Article = ", " ", " One sentence here . Another one there . ",
                      " ", " = = A Section = = ", " ", " A third sentence . ", " ",
                      " = Second Article = ", " ", " Only this . ", ""])


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Scratch folders the benches make go under tmp_path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
@pytest.mark.parametrize("command", [["throughput"], ["checkpointing", "--model", "large"], ["matmul"]])
def test_gpu_without_cuda_says_so_and_exits_0(command, tmp_path, capsys):
    assert gpu.main(["--out", str(tmp_path), *command]) == 0
    assert capsys.readouterr().out.strip() == "no CUDA device: skipping"
    assert list(tmp_path.iterdir()) == []


def test_gpu_arguments():
    args = gpu.parse_args(["throughput", "--model", "large", "--seq-length", "512",
                           "--micro-batch-size", "64", "--compile"])
    assert (args.model, args.seq_length, args.batch_size, args.micro_batch_size, args.compile) == \
        ("large", 512, 256, 64, True)
    assert args.precision == "bf16"
    args = gpu.parse_args(["checkpointing", "--precision", "fp16"])
    assert (args.model, args.seq_length, args.micro_batch_size, args.granularity, args.precision) == \
        ("base", 128, 64, 8, "fp16")
    with pytest.raises(SystemExit):
        gpu.parse_args(["throughput", "--model", "huge"])


@pytest.mark.parametrize("precision, batching", [("bf16", []), ("fp16", ["--micro-batch-size", "2"])])
def test_gpu_throughput_runs_on_cpu_as_a_code_check(precision, batching, tmp_path, capsys):
    pytest.importorskip("transformers")
    assert gpu.main(["--allow-cpu", "--out", str(tmp_path), "throughput", "--model", "tiny",
                     "--seq-length", "32", "--batch-size", "4", "--steps", "2", "--short-rows", "0.5",
                     "--precision", precision, *batching]) == 0
    out = capsys.readouterr().out
    assert gpu.PRECISIONS[precision] in out and "ratio bertpre / transformers:" in out
    assert "ms a step" in out and re.search(r"executed / useful FLOPs a step \(FlopCounterMode / cost model\): "
                                            r"bertpre \d\.\d{3}, transformers \d+\.\d{3}; padding share", out)
    assert list(tmp_path.iterdir()) == []  # CPU figures are not GPU results


def test_gpu_modernbert_arguments_default_to_its_length_and_batch():
    args = gpu.parse_args(["throughput", "--architecture", "modernbert"])
    assert (args.architecture, args.model, args.seq_length, args.batch_size) == ("modernbert", "base", 1024, 32)
    args = gpu.parse_args(["throughput", "--architecture", "modernbert", "--seq-length", "512", "--batch-size", "64"])
    assert (args.seq_length, args.batch_size) == (512, 64)
    args = gpu.parse_args(["throughput"])
    assert (args.architecture, args.seq_length, args.batch_size) == ("bert", 128, 256)
    config = gpu.modernbert_config("base", 1024)
    assert (config.num_hidden_layers, config.intermediate_size, config.local_attention, config.vocab_size) == \
        (22, 1152, 128, 50368)


@pytest.mark.slow  # about 30 s on 2 cores
def test_gpu_modernbert_throughput_runs_on_cpu_as_a_code_check(tmp_path, capsys):
    """bertpre's ModernBERT step beside transformers' (sparse prediction), accumulated over two
    micro-batches; on the CPU local layers take SDPA's dense window mask, and nothing is written."""
    pytest.importorskip("transformers")
    assert gpu.main(["--allow-cpu", "--out", str(tmp_path), "throughput", "--architecture", "modernbert",
                     "--model", "tiny", "--seq-length", "48", "--batch-size", "4", "--micro-batch-size", "2",
                     "--steps", "2", "--short-rows", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "ModernBERT-tiny, length 48, batch 4, bf16 autocast, fused AdamW" in out
    assert "bertpre's local layers: SDPA, window mask (dense); transformers: sdpa attention" in out
    assert "ratio bertpre / transformers:" in out
    assert list(tmp_path.iterdir()) == []  # CPU figures are not GPU results


def test_gpu_modernbert_record_and_loss_equal_the_peer():
    """Same weights, same batch: bertpre's trainer loss is transformers' sparse-prediction loss; the
    record says which attention each side took."""
    pytest.importorskip("transformers")
    device = torch.device("cpu")
    models = gpu.build_modernbert_models("tiny", 48, device, peer=True)
    assert models["transformers"].config.sparse_prediction is True
    batch = common.make_batch(4, 48, "cpu", seed=1, short_rows=0.5, predicted_share=gpu.MODERNBERT_MASKING,
                              capped=False, vocab_size=gpu.MODERNBERT_VOCAB_SIZE)
    del batch["next_sentence_label"]
    stepper, inputs, described = gpu.bertpre_stepper(models["bertpre"], [batch], device, True, "bf16", capped=False)
    assert described["pairs"] == 0 and described["prediction_slots"] == 14  # round(0.3 · 45), uncapped
    with torch.no_grad():
        ours = float(stepper.loss(inputs[0]))
        theirs = models["transformers"](**{name: batch[name] for name in gpu.MODERNBERT_PEER_INPUTS}).loss
    assert ours == pytest.approx(float(theirs), rel=1e-5)
    result = gpu.measure_step_rate("tiny", 48, 4, steps=1, peer=True, warmup=1, round_steps=1,
                                   device=device, architecture="modernbert")
    settings = result["settings"]
    assert (settings["architecture"], settings["bertpre_flex_attention"], settings["peer_sparse_prediction"]) == \
        ("modernbert", False, True)
    assert settings["predicted_share"] > 0.25 and result["transformers"]["attention"] == "sdpa"


def test_gpu_session_script_parses():
    assert subprocess.run(["bash", "-n", str(ROOT / "bench" / "gpu_session.sh")]).returncode == 0


def test_gpu_session_counts_a_failed_step_whose_log_ends_mid_line(tmp_path):
    """pytest killed mid-run leaves dots with no newline: the step's status line still starts a
    line, so the summary counts the step (the first H100 run's said 8 of 8 for 8 of 9)."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nprintf '....'\nexit 3\n")
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "ONLY": "^pytest-gpu$", "OUT": str(out), "PYTHON_DRY": str(fake)}
    run = subprocess.run(["bash", str(ROOT / "bench" / "gpu_session.sh"), "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    lines = (out / "session.log").read_text().splitlines()
    assert "....step pytest-gpu: rc 3 (0 s)" not in lines
    assert any(re.fullmatch(r"step pytest-gpu: rc 3 \(\d+ s\)", line) for line in lines)  # seconds: load
    assert any(line.endswith("0 of 1 steps exited 0") for line in lines)


@pytest.mark.slow
def test_gpu_session_dry_run_runs_the_modernbert_step_and_packs_its_log(tmp_path):
    """The device script's ModernBERT step on the CPU (--dry-run), alone (ONLY), its log packed for $OUT."""
    pytest.importorskip("transformers")
    env = {**os.environ, "ONLY": "^throughput-modernbert$", "OUT": str(tmp_path), "PYTHON_DRY": sys.executable}
    run = subprocess.run(["bash", str(ROOT / "bench" / "gpu_session.sh"), "--dry-run"], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    log = (tmp_path / "session.log").read_text()
    assert "step throughput-modernbert: rc 0" in log and "1 of 1 steps exited 0" in log
    assert "step throughput-bert:" not in log  # ONLY kept the others out
    with tarfile.open(tmp_path / "gpu-session.tgz") as packed:
        assert "./throughput-modernbert.log" in packed.getnames()


def test_gpu_fixed_size_predictions():
    labels = torch.full((3, 8), -100)
    labels[0, [6, 1, 4]] = torch.tensor([70, 10, 40])
    labels[1, 7] = 77
    positions, ids = gpu.fixed_size_predictions(labels, slots=4)
    assert positions.tolist() == [[1, 4, 6, 0], [7, 0, 0, 0], [0, 0, 0, 0]]
    assert ids.tolist() == [[10, 40, 70, -100], [77, -100, -100, -100], [-100] * 4]
    batch = common.make_batch(8, 128, "cpu", seed=1, short_rows=0.5)
    assert gpu.prediction_slots(128, [batch]) == 20 and gpu.prediction_slots(32, [batch]) == 19
    positions, ids = gpu.fixed_size_predictions(batch["labels"], slots=20)
    for row, row_labels in enumerate(batch["labels"]):
        predicted = (row_labels != -100).nonzero().flatten()  # in increasing order
        count = len(predicted)
        assert positions[row, :count].tolist() == predicted.tolist() and not positions[row, count:].any()
        assert ids[row, :count].tolist() == row_labels[predicted].tolist()
        assert (ids[row, count:] == -100).all()
    with pytest.raises(ValueError, match="more than 4 slots"):
        gpu.fixed_size_predictions(batch["labels"], slots=4)


def test_gpu_bertpre_step_loss_equals_the_peer_loss():
    """The trainer's loss (sums over the step's counts, accumulated) is HF's loss of the whole batch."""
    pytest.importorskip("transformers")
    device = torch.device("cpu")
    models = gpu.build_models("tiny", 32, device, peer=True)
    for network in models.values():
        network.eval()  # no dropout: the same weights give the same loss
    batches = [common.make_batch(4, 32, "cpu", seed, short_rows=0.5) for seed in range(2)]
    batches[1]["attention_mask"][:] = 1  # a micro-batch without padding runs without its mask
    stepper, inputs, described = gpu.bertpre_stepper(models["bertpre"], batches, device, True, "bf16")
    assert described["micro_batches_without_mask"] == 1 and stepper.scaler is None
    assert ["labels" in batch for batch in inputs] == [False, False]
    whole = {name: torch.cat([batch[name] for batch in batches]) for name in batches[0]}
    with torch.no_grad():
        ours = sum(float(stepper.loss(batch)) for batch in inputs)
        assert ours == pytest.approx(float(models["transformers"](**whole).loss), rel=1e-5)
    peer, _ = gpu.peer_stepper(models["transformers"], batches, device, True, "fp16")
    assert peer.scaler is not None  # fp16 only


def test_make_batch_has_exact_predictions_and_segments():
    assert [common.predictions_per_row(s) for s in (128, 512, 64)] == [19, 76, 9]
    batch = common.make_batch(4, 128, torch.device("cpu"))
    labels, input_ids = batch["labels"], batch["input_ids"]
    predicted = labels != -100
    assert predicted.sum(dim=1).tolist() == [19] * 4
    assert not predicted[:, [0, 64, 127]].any()  # [CLS] and the two [SEP] are never predicted
    assert (input_ids[predicted] == 4).all() and (labels[predicted] >= 5).all()
    assert input_ids[:, 0].tolist() == [2] * 4 and input_ids[:, 127].tolist() == [3] * 4
    assert batch["token_type_ids"].sum(dim=1).tolist() == [63] * 4


def test_make_batch_short_rows_are_padded_and_masked_within_their_length():
    batch = common.make_batch(64, 128, torch.device("cpu"), seed=3, short_rows=0.5)
    lengths = batch["attention_mask"].sum(dim=1)
    assert 0 < int((lengths < 128).sum()) < 64 and int(lengths.min()) >= 16
    for row, length in enumerate(lengths.tolist()):
        assert batch["attention_mask"][row, :length].all() and not batch["attention_mask"][row, length:].any()
        assert (batch["input_ids"][row, length:] == 0).all()
        assert batch["input_ids"][row, length - 1] == 3 and batch["input_ids"][row, length // 2] == 3
        predicted = batch["labels"][row] != -100
        assert int(predicted.sum()) == common.predictions_per_row(length, 128)
        assert not predicted[length - 1:].any() and not predicted[0]
        assert int(batch["token_type_ids"][row].sum()) == length - length // 2 - 1


def test_make_batch_uncapped_share_and_seed():
    batch = common.make_batch(2, 128, "cpu", predicted_share=0.5, capped=False, vocab_size=100)
    assert (batch["labels"] != -100).sum(dim=1).tolist() == [62, 62]  # round(0.5 · 125), no cap
    assert int(batch["input_ids"].max()) < 100
    again = common.make_batch(2, 128, "cpu", predicted_share=0.5, capped=False, vocab_size=100)
    assert all(torch.equal(batch[name], again[name]) for name in batch)


def test_gpu_largest_micro_batch_search(monkeypatch):
    tried = []

    def fits(stepper, micro_batch_size, seq_length, device):
        tried.append(micro_batch_size)
        return micro_batch_size <= 100

    monkeypatch.setattr(gpu, "fits", fits)
    assert gpu.largest_micro_batch(None, 128, None, start=64, granularity=8, limit=8192) == 96
    assert tried == [64, 128, 96, 112, 104]
    monkeypatch.setattr(gpu, "fits", lambda *args: True)
    assert gpu.largest_micro_batch(None, 128, None, start=64, granularity=8, limit=512) == 512


def test_run_cpu_lists_every_cpu_bench(capsys):
    assert run_cpu.main(["--dry-run"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("== ")]
    assert [line.split(":")[0][3:] for line in lines] == list(run_cpu.BENCHMARKS)
    assert all("skipped" not in line for line in lines)
    command = run_cpu.command_for("tokenize", Path("/r"))
    assert command[1:3] == ["-m", "bench.tokenize_speed"] and command[-2:] == ["--results", "/r"]


def test_read_wikitext_and_write_bert_format(tmp_path):
    path = tmp_path / "wiki.txt"
    path.write_text(WIKITEXT, encoding="utf-8")
    documents = common.read_wikitext(path)
    assert documents == [["One sentence here .", "Another one there .", "A third sentence ."],
                         ["Only this ."]]
    out = common.write_bert_format(documents, tmp_path / "bert.txt")
    assert out.read_text(encoding="utf-8") == (
        "One sentence here .\nAnother one there .\nA third sentence .\n\nOnly this .\n\n")


def test_create_instances_tiny_run(private_tmp, capsys):
    corpus = private_tmp / "wiki.txt"
    def sentences(d: int) -> str:
        return " . ".join(f"the cat number {i} sat on mat {d} near door {i % 7}" for i in range(40))

    corpus.write_text("".join(f" = Title {d} = \n\n {sentences(d)} . \n\n" for d in range(4)),
                      encoding="utf-8")
    out = private_tmp / "results"
    assert create_instances.main(["--corpus", str(corpus), "--rounds", "1", "--vocab-size", "120",
                                  "--out", str(out)]) == 0
    [path] = out.iterdir()
    result = json.loads(path.read_text())
    assert result["benchmark"] == "create_instances-wiki" and result["settings"]["documents"] == 4
    assert result["bertpre"]["instances"] > 0
    assert set(result["bertpre"]["median_seconds"]) == {"tokenize", "plan", "collate", "total"}
    if result["peer"]["installed"]:
        assert result["peer"]["instances"] > 0 and result["ratio"] > 0
    else:
        assert "pip install --no-deps bert-tensorflow" in capsys.readouterr().out


def test_loader_tiny_run_without_cuda(private_tmp, capsys):
    data = build_tiny_data(private_tmp / "data", documents=60)
    out = private_tmp / "results"
    assert loader.main(["--data", str(data), "--workers", "0", "--batches", "3", "--rounds", "1",
                        "--out", str(out)]) == 0
    [path] = out.iterdir()
    result = json.loads(path.read_text())
    assert result["settings"]["workers"] == 0 and result["bertpre"]["loader_sequences_per_s"] > 0
    if not torch.cuda.is_available():
        assert result["ratio"] is None
        assert "no CUDA device and no --consumption" in capsys.readouterr().out


@pytest.fixture(autouse=True)
def keep_torch_threads():
    """The benches set torch's thread count for the whole process: put it back after each test."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def read_only_result(out: Path) -> dict:
    [path] = out.iterdir()
    return json.loads(path.read_text())


RECORD_KEYS = ["benchmark", "date", "command", "machine", "versions"]


def test_model_tiny_run(private_tmp, keep_torch_threads, capsys):
    out = private_tmp / "results"
    assert model.main(["--steps", "1", "--warmup", "0", "--batch-size", "2", "--seq-length", "16",
                       "--threads", "1", "--out", str(out)]) == 0
    assert "ratio bertpre / transformers:" in capsys.readouterr().out
    [path] = out.iterdir()
    assert path.name.startswith("model-threads1-")
    result = json.loads(path.read_text())
    assert list(result) == [*RECORD_KEYS, "settings", "bertpre", "peer", "ratio"]
    assert result["benchmark"] == "model training step (forward, backward, AdamW)"
    assert result["machine"]["device"] == "cpu" and result["machine"]["torch_threads"] == 1
    assert set(result["versions"]) == {"python", "bertpre", "torch", "transformers"}
    assert len(result["bertpre"]["step_s"]) == 1 and result["ratio"] > 0


def test_collate_tiny_run(private_tmp, keep_torch_threads):
    corpus = private_tmp / "wiki.txt"
    corpus.write_text(WIKITEXT * 20, encoding="utf-8")
    out = private_tmp / "results"
    assert collate.main(["--rounds", "1", "--corpus", str(corpus), "--out", str(out)]) == 0
    result = read_only_result(out)
    assert list(result) == [*RECORD_KEYS, "settings", "bertpre", "peer", "ratio", "planning",
                            "target_ratio"]
    assert result["benchmark"] == "collate" and result["settings"]["corpus"] == "wiki.txt"
    assert result["machine"]["torch_threads"] == 1 and result["planning"] is None
    assert len(result["bertpre"]["rounds"]) == 1 and result["ratio"] > 0


def test_tokenize_speed_tiny_run(private_tmp):
    corpus = private_tmp / "wiki.txt"
    corpus.write_text(WIKITEXT * 20, encoding="utf-8")
    out = private_tmp / "results"
    assert tokenize_speed.main(["--corpora", str(corpus), "--vocab-size", "200", "--num-proc", "1",
                                "--rounds", "1", "--results", str(out)]) == 0
    [path] = out.iterdir()
    assert path.name.startswith("tokenize-")
    result = json.loads(path.read_text())
    assert list(result) == [*RECORD_KEYS, "corpus", "settings", "figures", "seconds", "target"]
    assert result["benchmark"] == "tokenize" and result["corpus"]["files"] == ["wiki.txt"]
    assert set(result["figures"]) == {"vocab training", "encode+write", "end to end"}


def test_tokenize_speed_with_word_boundaries(private_tmp):
    pytest.importorskip("rjieba")
    corpus = private_tmp / "zh.txt"
    corpus.write_text("我们在北京大学学习自然语言处理。今天天气很好。\n\n他们研究中文模型的训练数据。\n\n" * 30,
                      encoding="utf-8")
    out = private_tmp / "results"
    assert tokenize_speed.main(["--corpora", str(corpus), "--vocab-size", "100", "--num-proc", "1",
                                "--rounds", "1", "--word-boundaries", "jieba", "--results", str(out)]) == 0
    [path] = out.iterdir()
    result = json.loads(path.read_text())
    assert result["benchmark"] == "tokenize-word-boundaries"
    assert result["figures"]["encode+write with word boundaries"]["bertpre_mb_per_s"] > 0


def test_pretrain_tiny_run(private_tmp, keep_torch_threads):
    data = build_tiny_data(private_tmp / "data", documents=60)
    out = private_tmp / "results"
    assert pretrain.main(["--data", str(data), "--steps", "2", "--warmup", "0", "--threads", "1",
                          "--set", "train.batch_size=8", "--set", "train.micro_batch_size=8",
                          "--out", str(out)]) == 0
    result = read_only_result(out)
    assert list(result) == [*RECORD_KEYS, "settings", "bertpre", "peer", "ratio"]
    assert result["benchmark"].startswith("pretraining throughput, whole loop")
    assert set(result["machine"]["load_average_1_5_15_min"]) == {"before", "after"}
    assert len(result["bertpre"]["tokens_per_s"]) == len(result["peer"]["tokens_per_s"]) == 2


def test_tokenize_scale_builds_fresh_documents_in_eight_files(tmp_path):
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(f"Line number {index} has a few words in it." for index in range(300)) + "\n",
                      encoding="utf-8")
    corpus = tokenize_scale.build_corpus(tmp_path / "corpus", 0.05, [source])
    files = sorted((tmp_path / "corpus").iterdir())
    assert len(files) == corpus["files"] == 8
    documents = [block for path in files for block in path.read_text(encoding="utf-8").split("\n\n") if block.strip()]
    assert len(documents) == corpus["documents"] and len(set(documents)) == len(documents)
    assert sum(path.stat().st_size for path in files) >= 50_000


def test_tokenize_scale_measures_a_process_anonymous_memory(tmp_path):
    allocate = [sys.executable, "-c", "import time; block = bytearray(80 * 2**20); time.sleep(0.5)"]
    measured = tokenize_scale.run_processes([allocate], [{}], tmp_path)
    assert measured["peak_rss_anon_mib"] >= 75 and measured["peak_rss_mib"] >= 75
    assert 0.4 < measured["seconds"] < 30


@pytest.mark.slow
def test_tokenize_scale_tiny_run(tmp_path):
    source = tmp_path / "lines.txt"
    source.write_text("\n".join(f"Sentence {index} of the tiny corpus. It has two sentences." for index in range(500)),
                      encoding="utf-8")
    assert tokenize_scale.main(["--corpora", str(source), "--megabytes", "0.05", "0.1", "--shards", "2",
                                "--num-proc", "1", "--sample-bytes", "20000", "--floor-shards", "0", "--out", str(tmp_path / "r")]) == 0
    (result,) = (tmp_path / "r").iterdir()
    record = json.loads(result.read_text())
    assert set(record["sizes"]["0.1"]["runs"]) == {"vocab sample", "unsharded, --num-proc 1", "2 shards together",
                                                   "one task of 2 alone"}


@pytest.mark.slow  # two tiny training runs in subprocesses, about a minute on 2 cores
def test_epoch_boundary_times_the_steps_that_start_an_epoch(tmp_path):
    """This checkout against itself as the peer: a short run crosses epochs, and both sides say so."""
    assert epoch_boundary.main(["--peer", str(ROOT), "--workers", "1", "--steps", "16", "--rounds", "1",
                                "--out", str(tmp_path)]) is None
    [path] = tmp_path.iterdir()
    result = json.loads(path.read_text())
    for side in ("bertpre", "peer"):
        assert result[side]["epochs"] >= 2 and result[side]["steps_per_s"] > 0
        assert result[side]["epoch_start_step_ms"] > 0 and result[side]["other_step_ms"] > 0


@pytest.mark.parametrize("changes, rows", [({}, 4 * (1 + 4)), ({"last_layer_rows": False}, 4 * 32)])
def test_gpu_throughput_steps_the_last_layer_on_the_rows_read_unless_set_off(changes, rows):
    """bertpre's side is the trainer's step: its last layer computes [CLS] and the 4 prediction
    slots of each row (round(0.15 · 29) at 32 tokens); `--set last_layer_rows=false`, every token.
    The result records how the model ran (what step_cost's refit traces)."""
    seen: list[int] = []
    build = gpu.build_models

    def build_and_hook(*args, **kwargs):
        models = build(*args, **kwargs)
        ffn = models["bertpre"].bert.encoder.layer[-1].intermediate.dense
        ffn.register_forward_hook(lambda _m, inputs, _o: seen.append(inputs[0].shape[:-1].numel()))
        return models

    with mock.patch.object(gpu, "build_models", build_and_hook):
        result = gpu.measure_step_rate("tiny", 32, 4, steps=1, peer=False, warmup=1, round_steps=1,
                                       short_rows=0.0, device=torch.device("cpu"), changes=changes)
    assert set(seen) == {rows}
    assert result["settings"]["model_runtime"]["last_layer_rows"] is changes.get("last_layer_rows", True)


def test_gpu_throughput_times_the_trainers_batches_of_a_data_folder(tiny_data):
    """--data: the batches are the trainer's stream of DATA (base's recipe at this length), both
    models sized to its tokenizer; the record holds their padding share, counted from the batches,
    and bertpre's loss on them equals transformers'."""
    pytest.importorskip("transformers")
    from bertpre.config import load_config
    from bertpre.data import load_mixture
    from bertpre.train.objectives import objective_for

    batches, drawn = gpu.data_batches(tiny_data, "bert", 32, batch_size=8, micro_batch_size=4)
    config = load_config("base", [f"data.path={tiny_data}", "data.max_seq_length=32", "data.num_workers=0",
                                  "train.micro_batch_size=4", "train.batch_size=8"])
    stream = objective_for("mlm").stream(load_mixture(config.data.sources), config, accumulation=2, rank=0,
                                         world_size=1, pin_memory=False)
    for ours, trainers in zip(batches, [stream.next(), stream.next()], strict=True):
        assert all(torch.equal(ours[name], trainers[name]) for name in ours)
    assert drawn["vocab_size"] == load_mixture(config.data.sources).tokenizer.get_vocab_size()
    padding = 1 - sum(int(batch["attention_mask"].sum()) for batch in batches) / (8 * 32)
    assert padding > 0
    result = gpu.measure_step_rate("tiny", 32, 4, steps=1, peer=True, batch_size=8, warmup=1, round_steps=1,
                                   device=torch.device("cpu"), data=tiny_data)
    settings = result["settings"]
    assert settings["data"] == drawn and settings["padding_share"] == pytest.approx(padding)
    assert settings["prediction_slots"] == 20  # base's data.max_predictions_per_seq, the collator's (B, P)
    models = gpu.build_models("tiny", 32, torch.device("cpu"), peer=True, vocab_size=drawn["vocab_size"])
    for network in models.values():
        network.eval()  # no dropout: the same function of the same weights
    stepper, inputs, _ = gpu.bertpre_stepper(models["bertpre"], batches[:1], torch.device("cpu"), True, "bf16")
    with torch.no_grad():
        mine = float(stepper.loss(inputs[0]))
        theirs = models["transformers"](**{name: batches[0][name] for name in gpu.BERT_PEER_INPUTS}).loss
    assert mine == pytest.approx(float(theirs), rel=1e-5)


def test_chunked_loss_runs_each_setting_in_its_own_process_with_the_same_loss(tmp_path, capsys):
    from bench import chunked_loss

    assert chunked_loss.main(["--rows", "64", "--vocab", "1000", "--width", "32", "--chunks", "0", "16",
                              "--out", str(tmp_path)]) == 0
    record = json.loads(next(tmp_path.glob("chunked_loss-*.json")).read_text())
    runs = record["runs"]
    assert [run["loss_chunk_rows"] for run in runs] == [0, 16]
    assert runs[1]["loss"] == pytest.approx(runs[0]["loss"], rel=1e-6) and runs[0]["loss"] > 0
    assert record["command"].endswith("--chunks 0 16 --out " + str(tmp_path))
