"""Damaged files (issue 29): every file bertpre reads is checked when it is opened. A damaged one
gives exit 2 and exactly one `error:` line naming the file and what to do, no traceback, and
nothing written or changed anywhere; or, for damage that cannot matter (a torn metrics.jsonl
line) or cannot be seen (a flipped bit in a float of a checkpoint written before checksums), a
normal run.

Folders are checked two ways: as written now (the DATA manifest lists every file's size and
sha256, a checkpoint's checksums.json does the same for its files and the run's tokenizer), so
any change to a recorded file is named; and as older folders without those records ("old"),
where each file's own structure is checked. Cases run in this process through
`bertpre.cli.main` (see test_reliability_bad_input.py).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from _reliability_harness import folder_state
from test_reliability_bad_input import run_in_process

from bertpre.inventory import INVENTORY_FILE

ARROW = "dataset/train/data-00000-of-00001.arrow"
LATEST = "checkpoints/step-00000036"
FILL_MASK_TEXT = "the cat [MASK] the river ."


def make_old(folder: Path) -> Path:
    """Drop the records newer folders carry: DATA's manifest `files`, checkpoints' checksums.json."""
    manifest = folder / "manifest.json"
    if manifest.is_file():
        values = json.loads(manifest.read_text())
        values.pop("files", None)
        values.pop("manifest_sha256", None)
        manifest.write_text(json.dumps(values, indent=2))
    for record in folder.rglob("checksums.json"):
        record.unlink()
    return folder


def data_commands(data: Path, tmp: Path, config: Path, reference: Path) -> dict[str, list]:
    """Every command that reads a DATA folder."""
    return {"inspect": ["inspect", data, "--batches", "1"],
            "evaluate": ["evaluate", reference, "--data", data, "--micro-batch-size", "16"],
            "pretrain": ["pretrain", "--config", config, "--data", data, "--out", tmp / "new-run",
                         "--set", "train.max_steps=1"]}


def run_commands(run: Path, tmp: Path, config: Path, data: Path) -> dict[str, list]:
    """Every command that reads a RUN folder; pretrain resumes it for one more step."""
    return {"export": ["export", run, "--out", tmp / "export"],
            "fill-mask": ["fill-mask", run, FILL_MASK_TEXT],
            "evaluate": ["evaluate", run, "--data", data, "--micro-batch-size", "16"],
            "pretrain": ["pretrain", "--config", config, "--data", data, "--out", run,
                         "--set", "train.max_steps=37"]}


# --- explicit cases -----------------------------------------------------------------------------
@dataclass
class Case:
    kind: str  # "data" or "run": which folder is copied and damaged
    damaged: str  # the file named in the error, relative to that folder
    damage: Callable[[Path], None]  # applied to the damaged file
    expected: str  # in the error line
    commands: tuple[str, ...]  # which of the folder's readers to run
    old: bool = False  # the folder without its size and sha256 records


CASES: dict[str, Case] = {}


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip(path: Path, at: float = 0.5) -> None:
    data = bytearray(path.read_bytes())
    data[int(len(data) * at)] ^= 0x10
    path.write_bytes(bytes(data))


def write(content: str | bytes) -> Callable[[Path], None]:
    return lambda path: path.write_bytes(content if isinstance(content, bytes) else content.encode())


def content_of(name: str) -> Callable[[Path], None]:
    """Replace the file with its folder's (or its checkpoint's) file `name`."""
    def replace(path: Path) -> None:
        source = path.parent / name if (path.parent / name).exists() else path.parents[1] / name
        path.write_bytes(source.read_bytes())
    return replace


def edit_json(change: Callable[[dict], object]) -> Callable[[Path], None]:
    """Change the JSON object in the file in place (`change` mutates it)."""
    def edit(path: Path) -> None:
        values = json.loads(path.read_text())
        change(values)
        path.write_text(json.dumps(values))
    return edit


def add(name: str, case: Case) -> None:
    assert name not in CASES
    CASES[name] = case


DATA_READERS = ("inspect", "evaluate", "pretrain")
RUN_READERS = ("export", "fill-mask", "evaluate", "pretrain")

# DATA/dataset Arrow files: recorded in the manifest, and checked on their own in older DATA.
for old in (False, True):
    tag = "-old" if old else ""
    add(f"arrow-truncated{tag}", Case("data", ARROW, truncate,
                                      "not a whole Arrow file" if old else "is damaged (5,", DATA_READERS, old))
    add(f"arrow-empty{tag}", Case("data", ARROW, write(b""),
                                  "not a whole Arrow file" if old else "is damaged (0 bytes", DATA_READERS, old))
    add(f"arrow-garbage{tag}", Case("data", ARROW, write(b"\xff" * 9000),
                                    "not a whole Arrow file" if old else "is damaged (9,000 bytes", DATA_READERS, old))
add("arrow-flipped", Case("data", ARROW, flip, "is damaged (its sha256 differs", DATA_READERS))
add("arrow-other-split", Case("data", ARROW, content_of("../validation/data-00000-of-00001.arrow"),
                              "is damaged (", DATA_READERS))
add("arrow-other-split-old", Case("data", ARROW, content_of("../validation/data-00000-of-00001.arrow"),
                                  "holds 5 documents but the manifest counts 45", DATA_READERS, old=True))


def arrow_of_strings(path: Path) -> None:
    import pyarrow as pa

    table = pa.table({"input_ids": [[["a", "b"]]] * 45})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


def arrow_of_ids_out_of_vocab(path: Path) -> None:
    import pyarrow as pa

    table = pa.table({"input_ids": pa.array([[[5, 6, 99999]]] * 45, pa.list_(pa.list_(pa.int32())))})
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)


add("arrow-input-ids-strings-old", Case("data", ARROW, arrow_of_strings, "not lists of sentences of integers",
                                        DATA_READERS, old=True))
add("arrow-ids-outside-vocab-old", Case("data", ARROW, arrow_of_ids_out_of_vocab,
                                        "holds token id 99999, outside the tokenizer's", DATA_READERS, old=True))
add("state-json-garbage-old", Case("data", "dataset/train/state.json", write(b"\x00garbage"),
                                   "is damaged (not a JSON object)", DATA_READERS, old=True))
add("state-json-no-files-old", Case("data", "dataset/train/state.json", edit_json(lambda v: v.pop("_data_files")),
                                    "does not list its Arrow files", DATA_READERS, old=True))
add("dataset-info-truncated-old", Case("data", "dataset/validation/dataset_info.json", truncate,
                                       "is damaged (not a JSON object)", DATA_READERS, old=True))
add("dataset-dict-a-list-old", Case("data", "dataset/dataset_dict.json", write("[1, 2, 3]"),
                                    "is damaged (not a JSON object)", DATA_READERS, old=True))

# DATA/manifest.json: an object with its parts, of their types.
def sign(manifest: dict, **values: object) -> None:
    """Set `values` and a matching manifest_sha256: a manifest consistent with itself, yet wrong."""
    from bertpre.data.folder import manifest_digest

    manifest.update(values)
    manifest["manifest_sha256"] = manifest_digest(manifest)


for name, content, expected in [
        ("list", "[1, 2, 3]", "is not a DATA manifest (a JSON object; it holds a list)"),
        ("string", '"manifest"', "it holds a str"),
        ("counts-a-list", None, "has no 'counts' object"),
        ("negative-count", None, "counts.train_documents must be a number of at least 0, got -45"),
        ("count-a-string", None, "counts.tokens must be a number of at least 0, got '2640'"),
        ("tokenizer-hash-a-number", None, "tokenizer.sha256 must be a sha256 hex digest, got 123"),
        ("files-a-list", None, "files must map each file to its bytes and sha256"),
        ("files-outside", None, "files must map each file to its bytes and sha256"),
        ("binary", b"\xff\xfe\x00{", "is not valid JSON")]:
    change = {"counts-a-list": lambda v: v.update(counts=[1, 2]),
              "negative-count": lambda v: v["counts"].update(train_documents=-45),
              "count-a-string": lambda v: v["counts"].update(tokens="2640"),
              "tokenizer-hash-a-number": lambda v: v["tokenizer"].update(sha256=123),
              "files-a-list": lambda v: sign(v, files=["tokenizer/vocab.txt"]),
              "files-outside": lambda v: sign(v, files={"../../etc/passwd": {"bytes": 1, "sha256": "0" * 64}}),
              }.get(name)
    add(f"manifest-{name}-old", Case("data", "manifest.json", edit_json(change) if change else write(content),
                                     expected, DATA_READERS, old=True))
add("manifest-count-changed", Case("data", "manifest.json", edit_json(lambda v: v["counts"].update(tokens=2641)),
                                   "is damaged (its content does not match its manifest_sha256)", DATA_READERS))
add("manifest-files-key-renamed", Case("data", "manifest.json",
                                       lambda p: p.write_text(p.read_text().replace('"files"', '"filez"')),
                                       "does not match its manifest_sha256", DATA_READERS))
add("manifest-digest-key-renamed", Case("data", "manifest.json",
                                        lambda p: p.write_text(p.read_text().replace('"manifest_sha256"', '"x"')),
                                        "does not match its manifest_sha256", DATA_READERS))

# DATA/tokenizer: vocab.txt and tokenizer.json as the dataset was made with.
add("vocab-edited", Case("data", "tokenizer/vocab.txt",
                         lambda p: p.write_text(p.read_text().replace("\nthe\n", "\nthy\n")),
                         "is damaged (its sha256 differs", DATA_READERS))
add("vocab-edited-old", Case("data", "tokenizer/vocab.txt",
                             lambda p: p.write_text(p.read_text().replace("\nthe\n", "\nthy\n")),
                             "does not list", DATA_READERS, old=True))
add("vocab-reordered-old", Case("data", "tokenizer/vocab.txt",
                                lambda p: p.write_text("".join(reversed(p.read_text().splitlines(True)))),
                                "tokens in order (edited or damaged)", DATA_READERS, old=True))
add("tokenizer-json-edited-old", Case("data", "tokenizer/tokenizer.json",
                                      lambda p: p.write_text(p.read_text().replace('"the"', '"thy"')),
                                      "is not the tokenizer the dataset was made with", DATA_READERS, old=True))
add("tokenizer-config-a-list-old", Case("data", "tokenizer/tokenizer_config.json", write("[]"),
                                        "is damaged (not a JSON object)", DATA_READERS, old=True))

# RUN checkpoint: trainer_state.json checked field by field (and by sha256 in new checkpoints).
STATE = f"{LATEST}/trainer_state.json"
for name, change, expected in [
        ("negative-step", lambda v: v.update(step=-5), "step must be an integer of at least 0, got -5"),
        ("step-a-string", lambda v: v.update(step="36"), "step must be an integer of at least 0, got '36'"),
        ("step-a-float", lambda v: v.update(step=36.0), "got 36.0"),
        ("step-of-another-folder", lambda v: v.update(step=33), "says step 33, but its folder is step-00000036"),
        ("negative-epoch", lambda v: v.update(epoch=-1), "epoch must be an integer of at least 0"),
        ("position-missing", lambda v: v.pop("position"), "position must be an integer of at least 0, got None"),
        ("skipped-a-bool", lambda v: v.update(skipped_steps=True), "skipped_steps must be an integer"),
        ("world-size-zero", lambda v: v.update(world_size=0), "world_size must be an integer of at least 1"),
        ("a-list", None, "must be a JSON object of counters")]:
    add(f"trainer-state-{name}-old", Case("run", STATE, edit_json(change) if change else write("[1, 2, 3]"),
                                          expected, ("pretrain",), old=True))
add("trainer-state-garbage-old", Case("run", STATE, write(b"\x89PNG\r\n"), "is not valid JSON", ("pretrain",), old=True))
add("trainer-state-negative-step", Case("run", STATE, edit_json(lambda v: v.update(step=-5)),
                                        "is damaged (", ("pretrain",)))

# RUN checkpoint weights and states: sha256 in new checkpoints; readable, the right kind, in old.
MODEL = f"{LATEST}/model.safetensors"
for name, damage in [("truncated", truncate), ("flipped", flip), ("garbage", write(b"\x00" * 100)),
                     ("optimizer-content", content_of("optimizer.pt"))]:
    add(f"safetensors-{name}", Case("run", MODEL, damage, "is damaged (", RUN_READERS))
for name, damage in [("truncated", truncate), ("garbage", write(b"\x00" * 100)),
                     ("optimizer-content", content_of("optimizer.pt"))]:
    add(f"safetensors-{name}-old", Case("run", MODEL, damage, "not a readable safetensors file", RUN_READERS, old=True))
for file in ("optimizer.pt", "rng_state_0.pt"):
    path = f"{LATEST}/{file}"
    for name, damage in [("truncated", truncate), ("flipped", flip), ("garbage", write(b"garbage")),
                         ("empty", write(b""))]:
        add(f"{file}-{name}", Case("run", path, damage, "is damaged (", ("pretrain",)))
    for name, damage in [("truncated", truncate), ("garbage", write(b"garbage")), ("empty", write(b""))]:
        add(f"{file}-{name}-old", Case("run", path, damage, "cannot be read (", ("pretrain",), old=True))
add("optimizer-is-rng-state-old", Case("run", f"{LATEST}/optimizer.pt", content_of("rng_state_0.pt"),
                                       "is damaged or from another setup", ("pretrain",), old=True))
add("rng-state-is-optimizer-old", Case("run", f"{LATEST}/rng_state_0.pt", content_of("optimizer.pt"),
                                       "is damaged or from another setup", ("pretrain",), old=True))
add("rng-state-a-tensor-old", Case("run", f"{LATEST}/rng_state_0.pt", lambda p: torch.save(torch.zeros(3), p),
                                   "is damaged or from another setup", ("pretrain",), old=True))


def weight_not_finite(path: Path) -> None:
    from safetensors.torch import load_file, save_file

    tensors = load_file(path)
    tensors["bert.encoder.layer.0.intermediate.dense.weight"][0, 0] = float("nan")
    save_file(tensors, path, metadata={"format": "pt"})


def optimizer_moment_infinite(path: Path) -> None:
    state = torch.load(path, weights_only=True)
    next(iter(state["state"].values()))["exp_avg_sq"].view(-1)[0] = float("inf")
    torch.save(state, path)


add("safetensors-nan-weight-old", Case("run", MODEL, weight_not_finite,
                                       "not finite, in bert.encoder.layer.0.intermediate.dense.weight",
                                       ("pretrain",), old=True))
add("optimizer-inf-moment-old", Case("run", f"{LATEST}/optimizer.pt", optimizer_moment_infinite,
                                     "holds a value that is not finite", ("pretrain",), old=True))
add("scaler-garbage-old", Case("run", f"{LATEST}/scaler.pt", write(b"\x80\x04garbage"), "cannot be read (",
                               ("pretrain",), old=True))
add("checksums-garbage", Case("run", f"{LATEST}/checksums.json", write(b"\xff\x00"),
                              "is damaged (not the checkpoint's list of file sizes and sha256s)", RUN_READERS))
add("checksums-outside", Case("run", f"{LATEST}/checksums.json",
                              edit_json(lambda v: v["files"].update({"../../x": {"bytes": 1, "sha256": "0" * 64}})),
                              "is damaged (names '../../x')", RUN_READERS))

# RUN/checkpoints/latest, RUN/config.yaml, RUN/tokenizer.
for name, content in [("garbage", b"\x00\xffgarbage\n"), ("empty", b""), ("path", b"../../../etc\n"),
                      ("step-without-digits", b"step-\n")]:
    add(f"latest-{name}", Case("run", "checkpoints/latest", write(content), "does not name a checkpoint", RUN_READERS))
add("latest-missing-step", Case("run", "checkpoints/latest", write("step-00000099\n"),
                                "names 'step-00000099', which is missing or incomplete", RUN_READERS))
add("config-yaml-truncated", Case("run", "config.yaml", truncate, "the run's config", ("evaluate", "pretrain")))
add("config-yaml-empty", Case("run", "config.yaml", write(""), "lacks the model section and 3 more",
                              ("evaluate", "pretrain")))
add("config-yaml-a-list", Case("run", "config.yaml", write("- 1\n- 2\n"), "must be a mapping", ("evaluate", "pretrain")))
add("config-yaml-binary", Case("run", "config.yaml", write(b"\xff\xfe\x00"), "not UTF-8", ("evaluate", "pretrain")))
add("config-yaml-key-cut", Case("run", "config.yaml",
                                lambda p: p.write_text(p.read_text().replace("  keep_last: 2\n", "")),
                                "lacks train.keep_last (cut short or edited", ("evaluate", "pretrain")))
add("run-vocab-edited", Case("run", "tokenizer/vocab.txt",
                             lambda p: p.write_text(p.read_text().replace("\nthe\n", "\nthy\n")),
                             "is damaged (its sha256 differs", RUN_READERS))
add("run-vocab-edited-old", Case("run", "tokenizer/vocab.txt",
                                 lambda p: p.write_text(p.read_text().replace("\nthe\n", "\nthy\n")),
                                 "does not list", RUN_READERS, old=True))
# Every checkpoint reads the RUN's one tokenizer: its loss is not mended by another checkpoint.
RESTORE_TOKENIZER = "every checkpoint of the run reads it); copy it back from the DATA folder the run trained on ("
for old in (False, True):
    add(f"run-tokenizer-missing{'-old' if old else ''}",
        Case("run", "tokenizer", shutil.rmtree, RESTORE_TOKENIZER,
             ("export", "fill-mask", "evaluate") if old else RUN_READERS, old))
add("run-vocab-missing", Case("run", "tokenizer/vocab.txt", Path.unlink,
                              "is missing (the checkpoint's checksums.json lists it); it is part of the run's "
                              "tokenizer", RUN_READERS))
add("config-yaml-missing", Case("run", "config.yaml", Path.unlink,
                                "is a RUN folder without its config.yaml (it has checkpoints/", ("pretrain",)))
add("run-tokenizer-config-empty-old", Case("run", "tokenizer/tokenizer_config.json", write(""),
                                           "is damaged (not a JSON object)", RUN_READERS, old=True))

EXPLICIT = [(name, command) for name, case in CASES.items() for command in case.commands]


def prepare(case: Case, tmp: Path, data_dir: Path, reference_run: Path) -> Path:
    target = tmp / case.kind
    shutil.copytree(data_dir if case.kind == "data" else reference_run, target)
    if case.old:
        make_old(target)
    path = target / case.damaged
    if not path.exists():  # scaler.pt: an fp16 run's; this reference is fp32
        path.write_bytes(b"")
    case.damage(path)
    return target


@pytest.mark.parametrize(("name", "command"), EXPLICIT, ids=[f"{n}-{c}" for n, c in EXPLICIT])
def test_damaged_file_is_one_line_naming_it(name, command, tmp_path, data_dir, reference_run, tiny_config,
                                            monkeypatch, capsys):
    case = CASES[name]
    target = prepare(case, tmp_path, data_dir, reference_run)
    commands = (data_commands(target, tmp_path, tiny_config, reference_run) if case.kind == "data"
                else run_commands(target, tmp_path, tiny_config, data_dir))
    watched = [tmp_path, data_dir, reference_run]
    before = [folder_state(folder) for folder in watched]
    monkeypatch.chdir(tmp_path)
    code, stderr = run_in_process(commands[command], monkeypatch, capsys)
    lines = stderr.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert str(target / case.damaged) in lines[0], lines[0]
    assert case.expected in lines[0], lines[0]
    assert [folder_state(folder) for folder in watched] == before


def test_every_command_and_file_kind_is_covered():
    assert {command for _, command in EXPLICIT} == {"inspect", "evaluate", "pretrain", "export", "fill-mask"}
    damaged = {Path(case.damaged).name for case in CASES.values()}
    assert {"data-00000-of-00001.arrow", "state.json", "dataset_info.json", "dataset_dict.json",
            "manifest.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "trainer_state.json",
            "model.safetensors", "optimizer.pt", "rng_state_0.pt", "scaler.pt", "checksums.json",
            "latest", "config.yaml"} <= damaged
    assert len(EXPLICIT) >= 150


@pytest.mark.parametrize("old", [False, True], ids=["new", "old"])
def test_damaged_metrics_log_is_a_warning_on_resume(old, tmp_path, data_dir, tiny_config, reference_run,
                                                     monkeypatch, capsys):
    run = shutil.copytree(reference_run, tmp_path / "run")
    if old:
        make_old(run)
    rows = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_bytes("\n".join(rows[:5]).encode() + b"\n\x00\xff\xfe binary\n{torn"
                                        + b"\n[1, 2]\n" + "\n".join(rows[5:]).encode() + b"\n")
    monkeypatch.chdir(tmp_path)
    code, stderr = run_in_process(run_commands(run, tmp_path, tiny_config, data_dir)["pretrain"], monkeypatch,
                                  capsys)
    assert code == 0, stderr[-3000:]
    warnings = [line for line in stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "metrics.jsonl: 3 damaged line(s) skipped" in warnings[0], stderr[-3000:]
    kept = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in kept if "train/loss" in row] == list(range(1, 38))


def test_new_folders_record_their_files(data_dir, reference_run):
    manifest = json.loads((data_dir / "manifest.json").read_text())
    assert ARROW in manifest["files"] and "tokenizer/vocab.txt" in manifest["files"]
    record = json.loads((reference_run / LATEST / "checksums.json").read_text())
    assert set(record["files"]) == {"config.json", "model.safetensors", "optimizer.pt", "rng_state_0.pt",
                                    "trainer_state.json"}
    assert set(record["tokenizer"]) == {path.name for path in (reference_run / "tokenizer").iterdir()}


# --- random damage ------------------------------------------------------------------------------
FAST_CASES = 240
SLOW_CASES = int(os.environ.get("BERTPRE_DAMAGE_CASES", "1200"))  # more to search: set it higher
DAMAGES = ("truncate", "flip", "swap", "empty")
# What a successful command may write in the folder it read (a resume's new checkpoint and logs).
WRITTEN_BY_PRETRAIN = ("checkpoints/", "metrics.jsonl", "tensorboard/", "config.yaml", "data.json")


def files_read(folder: Path) -> list[Path]:
    """Every file a command may read: all but TensorBoard's event files, which none reads, and the
    inventory, which only a command replacing the folder reads (`test_reliability_inventory.py`)."""
    return sorted(path.relative_to(folder) for path in folder.rglob("*")
                  if path.is_file() and "tensorboard" not in path.parts and path.name != INVENTORY_FILE)


def damage_file(path: Path, how: str, rng: random.Random, other: Path) -> None:
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: rng.randrange(len(data))] if data else b"")
    elif how == "flip":
        changed = bytearray(data or b"\0")
        for _ in range(rng.randint(1, 4)):
            changed[rng.randrange(len(changed))] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(changed))
    elif how == "swap":
        path.write_bytes(other.read_bytes())
    else:
        path.write_bytes(b"")


def undetectable(kind: str, old: bool, name: Path, how: str) -> bool:
    """Damage no check can see, so a command may succeed on it: a flipped bit in a checkpoint's
    float tensors (or RNG state) written before checksums, informational manifest fields in DATA
    written before `files`, and files none of these commands read."""
    never_read = {"data.json", "metrics.jsonl"}
    if name.name in never_read or (kind == "run" and name.parts[:2] != ("checkpoints", "step-00000036")
                                   and name.parts[0] == "checkpoints" and name.name != "latest"):
        return True  # the older checkpoint is read by nothing when latest is whole
    return old and how in ("flip", "swap")


def run_random_case(number: int, root: Path, data_dir: Path, reference_run: Path, config: Path,
                    monkeypatch, capsys) -> dict:
    rng = random.Random(number)
    kind = rng.choice(["data", "run"])
    old = rng.random() < 0.5
    case = root / f"case-{number}"
    target = case / kind
    shutil.copytree(data_dir if kind == "data" else reference_run, target)
    if old:
        make_old(target)
    names = files_read(target)
    name = rng.choice(names)
    other = rng.choice([candidate for candidate in names if candidate != name])
    how = rng.choice(DAMAGES)
    original = (target / name).read_bytes()
    damage_file(target / name, how, rng, target / other)
    # Text whose only change is a trailing newline or space lost is not damaged.
    unchanged_text = name.suffix in (".json", ".txt", ".yaml", ".jsonl", "") and \
        original.strip() == (target / name).read_bytes().strip()
    commands = (data_commands(target, case, config, reference_run) if kind == "data"
                else run_commands(target, case, config, data_dir))
    results = {}
    monkeypatch.chdir(case)
    for command, args in commands.items():
        before = folder_state(target)
        damaged_bytes = (target / name).read_bytes()
        code, stderr = run_in_process(args, monkeypatch, capsys)
        said = (f"case {number}: {how} {'old ' if old else ''}{kind}/{name} (with {other}), then {command}: "
                f"exit {code}\n{stderr[-2000:]}")
        lines = stderr.splitlines()
        assert code in (0, 2), said
        assert not any("Traceback" in line for line in lines), said
        # A flipped exponent bit can make a weight huge yet finite (0.02 → 7e36): in a checkpoint
        # without checksums.json that is seen only when the resumed run diverges, in its one error line.
        diverged = code == 2 and lines[-1].startswith("error: training diverged")
        if diverged:
            assert old and command == "pretrain" and name.name in ("model.safetensors", "optimizer.pt"), said
        if code == 2 and not diverged:
            assert len(lines) == 1 and lines[0].startswith("error: "), said
            assert folder_state(target) == before, said
        else:
            changed = {path for path in set(before) | set(folder_state(target))
                       if before.get(path) != folder_state(target).get(path)}
            allowed = WRITTEN_BY_PRETRAIN if command == "pretrain" and kind == "run" else ()
            unexpected = [path for path in changed
                          if not any(path == prefix.rstrip("/") or path.startswith(prefix) for prefix in allowed)]
            assert not unexpected, f"{said}\nchanged: {unexpected}"
            if command == "pretrain" and kind == "run":  # later commands read the damaged file again
                shutil.rmtree(target)
                shutil.copytree(reference_run, target)
                if old:
                    make_old(target)
                (target / name).write_bytes(damaged_bytes)
        for output in ("export", "new-run"):
            assert code == 0 or not (case / output).exists(), said
            shutil.rmtree(case / output, ignore_errors=True)
        results[command] = code
    shutil.rmtree(case)
    return {"kind": kind, "old": old, "name": name, "how": how, "codes": results,
            "undetectable": unchanged_text or undetectable(kind, old, name, how)}


def check_detected(outcomes: list[dict]) -> None:
    """Damage to a file the commands read is caught by at least the commands that read it, unless
    it is of a kind no check can see; new folders (with size and sha256 records) catch all of it."""
    missed = [outcome for outcome in outcomes
              if not outcome["undetectable"] and all(code == 0 for code in outcome["codes"].values())
              and outcome["name"].name not in ("special_tokens_map.json", "checksums.json", "config.yaml")]
    assert not [m for m in missed if not m["old"]], missed
    assert len(missed) <= len(outcomes) // 20, missed  # old folders: structure checks catch nearly all


@pytest.mark.parametrize("block", range(FAST_CASES // 20))
def test_random_damage_is_caught_or_harmless(block, tmp_path, data_dir, reference_run, tiny_config,
                                             monkeypatch, capsys):
    started = time.monotonic()
    outcomes = [run_random_case(number, tmp_path, data_dir, reference_run, tiny_config, monkeypatch, capsys)
                for number in range(block * 20, block * 20 + 20)]
    check_detected(outcomes)
    assert time.monotonic() - started < 60  # 20 cases, each every command reading the damaged folder


@pytest.mark.slow
@pytest.mark.parametrize("block", range(FAST_CASES // 20, SLOW_CASES // 20))
def test_more_random_damage(block, tmp_path, data_dir, reference_run, tiny_config, monkeypatch, capsys):
    outcomes = [run_random_case(number, tmp_path, data_dir, reference_run, tiny_config, monkeypatch, capsys)
                for number in range(block * 20, block * 20 + 20)]
    check_detected(outcomes)


# --- a set of shards is checked shard by shard --------------------------------------------------
@pytest.fixture(scope="module")
def shards(tmp_path_factory, corpus, data_dir) -> Path:
    from bertpre.data.build import tokenize_corpus
    from data_prep import Shard

    root = tmp_path_factory.mktemp("shards")
    for index in range(2):
        tokenize_corpus([corpus], root / f"shard-{index}", tokenizer_path=data_dir / "tokenizer",
                        validation_share=0.1, shard=Shard(index, 2))
    return root


SHARD_CASES = {
    "arrow-truncated": (f"shard-1/{ARROW}", truncate, "is damaged (", False),
    "arrow-truncated-old": (f"shard-1/{ARROW}", truncate, "not a whole Arrow file", True),
    "index-a-string-old": ("shard-1/manifest.json", edit_json(lambda v: v["shard"].update(index="1")),
                           "shard must hold an index from 0 to count - 1", True),
    "index-beyond-count-old": ("shard-0/manifest.json", edit_json(lambda v: v["shard"].update(index=7)),
                               "shard must hold an index from 0 to count - 1", True),
}


@pytest.mark.parametrize("command", DATA_READERS)
@pytest.mark.parametrize("name", list(SHARD_CASES))
def test_damaged_shard_is_one_line_naming_it(name, command, shards, tmp_path, reference_run, tiny_config,
                                             monkeypatch, capsys):
    damaged, damage, expected, old = SHARD_CASES[name]
    copy = shutil.copytree(shards, tmp_path / "shards")
    for shard in copy.iterdir():
        if old:
            make_old(shard)
    damage(copy / damaged)
    before = folder_state(tmp_path)
    monkeypatch.chdir(tmp_path)
    args = data_commands(str(copy / "shard-*"), tmp_path, tiny_config, reference_run)[command]
    code, stderr = run_in_process(args, monkeypatch, capsys)
    lines = stderr.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), stderr[-3000:]
    assert str(copy / damaged) in lines[0] and expected in lines[0], lines[0]
    assert folder_state(tmp_path) == before
