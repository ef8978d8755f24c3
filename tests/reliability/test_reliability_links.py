"""One rule for symbolic links where bertpre writes (`bertpre.links`): a link standing at a file or
folder a command writes is yours; it is refused in one line (exit 2), or kept as a link, and what
it points at is never moved, deleted or rewritten. The `--out` itself (and a run's checkpoints/)
may be a link to a folder on another disk: it is followed, and your files there stay.

Each case places a link to a folder of yours, or to a file of yours, where a writer writes, runs
the real command (`bertpre.cli.main` in this process) and checks that what the link points at is
byte-identical afterwards.
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from _in_process import run_main

from bertpre.errors import UserError
from bertpre.inventory import KEEP_FILE, Inventory, foreign_paths, remove_listed, swap_in
from bertpre.train.checkpoint import prune_checkpoints

TASK_ROWS = ["the cat sees the river .\tanimal", "my sister feeds a dog .\tperson"] * 6


def hashes(folder: Path) -> dict[str, str]:
    """Every file under `folder` by relative path → sha256 (links by their target's text)."""
    return {path.relative_to(folder).as_posix(): hashlib.sha256(
        os.readlink(path).encode() if path.is_symlink() else path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*")) if path.is_file() or path.is_symlink()}


YOUR_NAMES = ("notes.md", "deep/results.csv")
BERTPRE_NAMES = ("config.json", "manifest.json", "model.safetensors")


def folder_of_yours(tmp_path: Path, name: str = "mine", places: tuple[str, ...] = YOUR_NAMES + BERTPRE_NAMES) -> Path:
    """A folder of yours with a file, a nested file and (by default) names bertpre writes too."""
    folder = tmp_path / name
    for place in places:
        (folder / place).parent.mkdir(parents=True, exist_ok=True)
        (folder / place).write_text(f"yours: {place}\n", encoding="utf-8")
    return folder


def file_of_yours(tmp_path: Path, name: str = "mine.txt") -> Path:
    path = tmp_path / name
    path.write_text("yours, and nobody else's\n", encoding="utf-8")
    return path


def link(at: Path, to: Path) -> Path:
    """Put a symbolic link at `at` (replacing what is there) pointing to `to`."""
    if at.is_dir() and not at.is_symlink():
        shutil.rmtree(at)
    elif os.path.lexists(at):
        at.unlink()
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(to)
    return at


def assert_refused(code: int, stdout: str, stderr: str, place: Path) -> None:
    assert code == 2 and stdout == "" and len(stderr.splitlines()) == 1, (code, stderr)
    assert f"{place} is a symbolic link" in stderr and "remove the link" in stderr, stderr


def snapshot(target: Path) -> dict[str, str]:
    return hashes(target) if target.is_dir() else {"": hashlib.sha256(target.read_bytes()).hexdigest()}


# finetune: --save-model's OUT/model, and the results, predictions and marker files


@pytest.fixture
def task(tmp_path) -> Path:
    path = tmp_path / "task.tsv"
    path.write_text("text\tlabel\n" + "\n".join(TASK_ROWS) + "\n", encoding="utf-8")
    return path


@pytest.fixture
def finetuned(reference_run, task, tmp_path, monkeypatch, capsys) -> Path:
    """An earlier `bertpre finetune --out` (no model kept): the folder a user runs again."""
    out = tmp_path / "finetune"
    code, _, stderr = run_main(finetune_args(reference_run, task, out), monkeypatch, capsys)
    assert code == 0, stderr
    return out


def finetune_args(source: Path, task: Path, out: Path, *more: str) -> list:
    return ["finetune", source, "--train", task, "--validation", task, "--out", out, "--epochs", "1",
            "--seeds", "1", *more]


@pytest.mark.parametrize("kind", ["folder", "folder of other names", "file"])
def test_save_model_refuses_out_model_linked_to_yours(kind, reference_run, task, finetuned, tmp_path,
                                                      monkeypatch, capsys):
    """The finding: the user's files were moved out of the linked folder into the new OUT/model
    (a folder of other names than a model's: with a config.json of yours it was kept beside)."""
    target = (folder_of_yours(tmp_path) if kind == "folder" else file_of_yours(tmp_path) if kind == "file"
              else folder_of_yours(tmp_path, places=YOUR_NAMES))
    before = snapshot(target)
    place = link(finetuned / "model", target)
    code, stdout, stderr = run_main(finetune_args(reference_run, task, finetuned, "--save-model"),
                                    monkeypatch, capsys)
    assert_refused(code, stdout, stderr, place)
    assert snapshot(target) == before and place.is_symlink()
    assert not (target / KEEP_FILE).exists()


def test_a_link_made_while_finetune_ran_keeps_the_new_model_beside(reference_run, task, finetuned, tmp_path,
                                                                   monkeypatch, capsys):
    """The check just before the swap: a link that came after the first check is not written through."""
    import bertpre.finetune.run as finetune_run

    target = folder_of_yours(tmp_path)
    before = hashes(target)
    place = link(finetuned / "model", target)
    monkeypatch.setattr(finetune_run, "refuse_linked_places", lambda *args: None)  # as if made later
    code, _, stderr = run_main(finetune_args(reference_run, task, finetuned, "--save-model"), monkeypatch, capsys)
    assert code == 2 and "is a symbolic link to" in stderr and "the new model is at" in stderr, stderr
    assert hashes(target) == before and place.is_symlink()
    beside = [path for path in finetuned.iterdir() if path.name.startswith("model.new-")]
    assert len(beside) == 1 and (beside[0] / "model.safetensors").is_file()


@pytest.mark.parametrize("place, kind", [("results.jsonl", "file"), ("results.json", "file"),
                                         ("run.json", "file"), (".bertpre-finetune", "file"),
                                         ("predictions", "folder"), ("features", "folder")])
def test_finetune_refuses_a_link_where_it_writes(place, kind, reference_run, task, finetuned, tmp_path,
                                                 monkeypatch, capsys):
    target = folder_of_yours(tmp_path) if kind == "folder" else file_of_yours(tmp_path)
    if place == "run.json":  # the run's record is read first: a copy of it, so the run is the same
        target.write_bytes((finetuned / "run.json").read_bytes())
    before = snapshot(target)
    linked = link(finetuned / place, target)
    code, stdout, stderr = run_main(finetune_args(reference_run, task, finetuned, "--seeds", "2"),
                                    monkeypatch, capsys)
    assert_refused(code, stdout, stderr, linked)
    assert snapshot(target) == before


def test_finetune_refuses_a_link_inside_its_predictions(reference_run, task, finetuned, tmp_path,
                                                        monkeypatch, capsys):
    written = next((finetuned / "predictions").rglob("*.jsonl"))
    target = file_of_yours(tmp_path)
    before = snapshot(target)
    linked = link(written, target)
    code, stdout, stderr = run_main(finetune_args(reference_run, task, finetuned, "--seeds", "2"),
                                    monkeypatch, capsys)
    assert_refused(code, stdout, stderr, linked)
    assert snapshot(target) == before


def test_finetune_out_that_is_a_link_to_your_folder_is_followed(reference_run, task, tmp_path, monkeypatch,
                                                                capsys):
    disk = tmp_path / "big-disk"
    disk.mkdir()
    out = link(tmp_path / "runs", disk)
    code, _, stderr = run_main(finetune_args(reference_run, task, out / "ft", "--save-model"), monkeypatch, capsys)
    assert code == 0, stderr
    (disk / "ft" / "model" / "README.md").write_text("my model card\n", encoding="utf-8")
    code, _, stderr = run_main(finetune_args(reference_run, task, out / "ft", "--save-model", "--seeds", "2"),
                               monkeypatch, capsys)
    assert code == 0, stderr
    assert out.is_symlink() and (disk / "ft" / "model" / "model.safetensors").is_file()
    assert (disk / "ft" / "model" / "README.md").read_text() == "my model card\n"


# export and tokenize: the places an earlier output's inventory lists


@pytest.mark.parametrize("place, kind", [("config.json", "file"), ("model.safetensors", "file"),
                                         (".bertpre-export", "file")])
def test_export_overwrite_refuses_a_link_where_it_writes(place, kind, reference_run, tmp_path, monkeypatch,
                                                         capsys):
    out = tmp_path / "export"
    assert run_main(["export", reference_run, "--out", out], monkeypatch, capsys)[0] == 0
    target = folder_of_yours(tmp_path) if kind == "folder" else file_of_yours(tmp_path)
    before = snapshot(target)
    linked = link(out / place, target)
    code, stdout, stderr = run_main(["export", reference_run, "--out", out, "--overwrite"], monkeypatch, capsys)
    assert_refused(code, stdout, stderr, linked)
    assert snapshot(target) == before


def test_export_keeps_a_link_of_yours_beside_its_files_as_a_link(reference_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "export"
    assert run_main(["export", reference_run, "--out", out], monkeypatch, capsys)[0] == 0
    folder, card = folder_of_yours(tmp_path), file_of_yours(tmp_path, "card.md")
    before_folder, before_card = hashes(folder), snapshot(card)
    link(out / "analysis", folder)
    link(out / "README.md", card)
    code, _, stderr = run_main(["export", reference_run, "--out", out, "--overwrite"], monkeypatch, capsys)
    assert code == 0, stderr
    assert "note: kept in --out" in stderr and "README.md" in stderr
    assert (out / "analysis").is_symlink() and (out / "README.md").is_symlink()
    assert hashes(folder) == before_folder and snapshot(card) == before_card
    assert not (folder / KEEP_FILE).exists()


def test_export_out_that_is_a_link_to_your_folder_is_followed(reference_run, tmp_path, monkeypatch, capsys):
    """runs/ on a bigger disk: --out a link works as before; your files in its folder stay there."""
    disk = tmp_path / "big-disk"
    disk.mkdir()
    out = link(tmp_path / "export", disk)
    assert run_main(["export", reference_run, "--out", out], monkeypatch, capsys)[0] == 0
    (disk / "NOTES.md").write_text("mine\n", encoding="utf-8")
    code, _, stderr = run_main(["export", reference_run, "--out", out, "--overwrite"], monkeypatch, capsys)
    assert code == 0, stderr
    assert out.is_symlink() and os.readlink(out) == str(disk)
    assert (disk / "NOTES.md").read_text() == "mine\n" and (disk / "model.safetensors").is_file()


@pytest.mark.parametrize("place, kind", [("dataset", "folder"), ("tokenizer", "folder"),
                                         ("tokenizer/vocab.txt", "file"), ("manifest.json", "file")])
def test_tokenize_overwrite_refuses_a_link_where_it_writes(place, kind, corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "data"
    args = ["tokenize", corpus, "--out", out, "--vocab-size", "150", "--min-frequency", "1"]
    assert run_main(args, monkeypatch, capsys)[0] == 0
    target = folder_of_yours(tmp_path) if kind == "folder" else file_of_yours(tmp_path)
    before = snapshot(target)
    linked = link(out / place, target)
    code, stdout, stderr = run_main([*args, "--overwrite"], monkeypatch, capsys)
    assert_refused(code, stdout, stderr, linked)
    assert snapshot(target) == before


# demo: its parts and its marker


@pytest.mark.parametrize("place, kind", [("data", "folder"), ("model", "folder"), ("run", "folder"),
                                         (".bertpre-demo", "file")])
def test_demo_refuses_a_link_where_it_writes(place, kind, tmp_path, monkeypatch, capsys):
    out = tmp_path / "demo"
    out.mkdir()
    (out / ".bertpre-demo").write_text("made by `bertpre demo`\n", encoding="utf-8")  # an earlier demo's
    target = folder_of_yours(tmp_path) if kind == "folder" else file_of_yours(tmp_path)
    before = snapshot(target)
    linked = link(out / place, target)
    code, stdout, stderr = run_main(["demo", "--out", out], monkeypatch, capsys)
    assert_refused(code, stdout, stderr, linked)
    assert snapshot(target) == before


def test_a_link_at_a_name_an_older_folder_owns_is_kept_not_removed(tmp_path):
    """A folder without an inventory owns its command's names; a link there is still yours."""
    target = folder_of_yours(tmp_path)
    before = hashes(target)
    folder = tmp_path / "old demo"
    folder.mkdir()
    link(folder / "data", target)
    (folder / "run").mkdir()
    inventory = Inventory("demo", legacy_names=frozenset({"data", "run"}))
    assert foreign_paths(folder, inventory) == ["data"]
    remove_listed(folder, inventory)
    assert (folder / "data").is_symlink() and not (folder / "run").exists()
    assert hashes(target) == before


# pretrain: the run folder's files and checkpoints


@pytest.mark.parametrize("place, kind", [("metrics.jsonl", "file"), ("config.yaml", "file"),
                                         ("data.json", "file"), ("tensorboard", "folder"),
                                         ("tokenizer", "folder"), ("checkpoints/latest", "file")])
def test_pretrain_refuses_a_link_where_the_run_writes(place, kind, reference_run, tiny_config, data_dir,
                                                      copy_run, tmp_path, monkeypatch, capsys):
    run = copy_run(reference_run)
    target = folder_of_yours(tmp_path) if kind == "folder" else file_of_yours(tmp_path)
    if place == "config.yaml":  # a copy of the run's own, so only the link is in question
        target.write_bytes((run / "config.yaml").read_bytes())
    before = snapshot(target)
    linked = link(run / place, target)
    code, stdout, stderr = run_main(["pretrain", "--config", tiny_config, "--data", data_dir, "--out", run,
                                     "--set", "train.max_steps=39"], monkeypatch, capsys)
    assert_refused(code, stdout, stderr, linked)
    assert snapshot(target) == before


def test_pretrain_follows_a_checkpoints_folder_linked_to_scratch(reference_run, tiny_config, data_dir, copy_run,
                                                                tmp_path, monkeypatch, capsys):
    """RUN/checkpoints on scratch space, as clusters advise: the run resumes and saves there."""
    run = copy_run(reference_run)
    scratch = tmp_path / "scratch"
    shutil.move(run / "checkpoints", scratch)
    (scratch / "README").write_text("scratch of mine\n", encoding="utf-8")
    link(run / "checkpoints", scratch)
    code, _, stderr = run_main(["pretrain", "--config", tiny_config, "--data", data_dir, "--out", run,
                                "--set", "train.max_steps=39"], monkeypatch, capsys)
    assert code == 0, stderr
    assert (run / "checkpoints").is_symlink() and (scratch / "latest").read_text().strip() == "step-00000039"
    assert (scratch / "README").read_text() == "scratch of mine\n"


def test_pruning_keeps_a_step_folder_that_is_a_link(tmp_path, capsys):
    checkpoints = tmp_path / "run" / "checkpoints"
    for step in (2, 3):
        (checkpoints / f"step-{step:08d}").mkdir(parents=True)
        (checkpoints / f"step-{step:08d}" / "config.json").write_text("{}\n", encoding="utf-8")
    target = folder_of_yours(tmp_path)
    before = hashes(target)
    link(checkpoints / "step-00000001", target)
    (checkpoints / "latest").write_text("step-00000003\n", encoding="utf-8")
    removed = prune_checkpoints(checkpoints, keep_last=1)
    assert removed == [checkpoints / "step-00000002"]
    assert (checkpoints / "step-00000001").is_symlink() and hashes(target) == before
    assert "kept step-00000001 beyond train.keep_last: it is a symbolic link" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_a_folder_is_never_swapped_in_over_a_link(kind, tmp_path):
    """Every folder replacement (an --out, OUT/model, a checkpoint saved again) goes through swap_in."""
    target = folder_of_yours(tmp_path) if kind == "folder" else file_of_yours(tmp_path)
    before = snapshot(target)
    new = tmp_path / "new"
    new.mkdir()
    (new / "config.json").write_text("{}\n", encoding="utf-8")
    place = link(tmp_path / "out" / "step-00000003", target)
    with pytest.raises(UserError, match="is a symbolic link"):
        swap_in(place, new, tmp_path / "out" / ".old-step-00000003", ["notes.md", "deep"])
    assert snapshot(target) == before and place.is_symlink() and (new / "config.json").is_file()


def test_pretrain_out_that_is_a_link_to_your_folder_is_followed(reference_run, tiny_config, data_dir, copy_run,
                                                                 tmp_path, monkeypatch, capsys):
    disk = copy_run(reference_run, "big-disk")
    (disk / "NOTES.md").write_text("mine\n", encoding="utf-8")
    run = link(tmp_path / "run", disk)
    code, _, stderr = run_main(["pretrain", "--config", tiny_config, "--data", data_dir, "--out", run,
                                "--set", "train.max_steps=39"], monkeypatch, capsys)
    assert code == 0, stderr
    assert run.is_symlink() and (disk / "checkpoints" / "latest").read_text().strip() == "step-00000039"
    assert (disk / "NOTES.md").read_text() == "mine\n"


# tokenize --merge-manifests: DATA/manifest.json


def test_merge_manifests_refuses_a_linked_manifest(tmp_path, monkeypatch, capsys):
    data = tmp_path / "data"
    data.mkdir()
    target = file_of_yours(tmp_path)
    before = snapshot(target)
    linked = link(data / "manifest.json", target)
    code, stdout, stderr = run_main(["tokenize", "--merge-manifests", data], monkeypatch, capsys)
    assert_refused(code, stdout, stderr, linked)
    assert snapshot(target) == before
