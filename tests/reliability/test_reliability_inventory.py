"""`--overwrite` replaces only what bertpre wrote: your files inside an output survive it.

Each case runs the real command (`bertpre.cli.main` in this process), hashes the tree before and
after, and checks that every file bertpre did not write is byte-identical afterwards.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _in_process import run_main

from bertpre.data.folder import load_data
from bertpre.errors import UserError
from bertpre.folders import claimed_out, temporary_prefix
from bertpre.inventory import INVENTORY_FILE, KEEP_FILE, take_inventory
from bertpre.tools.demo import check_demo_folder, prepare_folder


def hashes(folder: Path) -> dict[str, str]:
    """Every file under `folder` by relative path → sha256 (links by their target's text)."""
    return {path.relative_to(folder).as_posix(): hashlib.sha256(
        os.readlink(path).encode() if path.is_symlink() else path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*")) if path.is_file() or path.is_symlink()}


def sprinkle(folder: Path, *places: str) -> dict[str, str]:
    """Write a file of yours at each place (a path relative to `folder`); their hashes."""
    for place in places:
        path = folder / place
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"yours: {place}\n", encoding="utf-8")
    return {place: hashlib.sha256(f"yours: {place}\n".encode()).hexdigest() for place in places}


def test_export_overwrite_keeps_a_model_card_notes_and_an_export_nested_inside(
        reference_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "my bert"
    assert run_main(["export", reference_run, "--out", out], monkeypatch, capsys)[0] == 0
    inner = out / "older export"
    code, _, stderr = run_main(["export", reference_run, "--out", inner], monkeypatch, capsys)
    assert code == 0, stderr
    inner_before = hashes(inner)
    yours = sprinkle(out, "README.md", "analysis/plots/loss.txt", ".notes")
    code, _, stderr = run_main(["export", reference_run, "--out", out, "--overwrite"], monkeypatch, capsys)
    assert code == 0, stderr
    assert "note: kept in --out" in stderr and "README.md" in stderr
    after = hashes(out)
    assert {place: after[place] for place in yours} == yours
    assert {path: digest for path, digest in hashes(inner).items()} == inner_before
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert not [path for path in tmp_path.iterdir() if path.name.startswith(".")]  # no temporaries


def test_tokenize_overwrite_keeps_notes_a_folder_and_a_file_inside_dataset(
        corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "data"
    args = ["tokenize", corpus, "--out", out, "--vocab-size", "150", "--min-frequency", "1"]
    assert run_main(args, monkeypatch, capsys)[0] == 0
    yours = sprinkle(out, "notes.md", "analysis/counts.csv", "dataset/where-it-came-from.txt")
    code, _, stderr = run_main([*args, "--overwrite", "--vocab-size", "140"], monkeypatch, capsys)
    assert code == 0, stderr
    after = hashes(out)
    assert {place: after[place] for place in yours} == yours
    assert load_data(out).tokenizer.get_vocab_size() <= 140  # the new DATA, whole and readable


def test_a_file_bertpre_wrote_that_you_edited_is_not_replaced(reference_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "export"
    assert run_main(["export", reference_run, "--out", out], monkeypatch, capsys)[0] == 0
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "note": "my edit"}))
    before = hashes(out)
    code, _, stderr = run_main(["export", reference_run, "--out", out, "--overwrite"], monkeypatch, capsys)
    assert code == 2 and len(stderr.splitlines()) == 1, stderr
    assert "config.json changed since `bertpre export` wrote it" in stderr
    assert hashes(out) == before


def test_a_copied_folder_is_not_taken_for_an_edited_one(reference_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "export"
    assert run_main(["export", reference_run, "--out", tmp_path / "first"], monkeypatch, capsys)[0] == 0
    subprocess.run(["cp", "-r", str(tmp_path / "first"), str(out)], check=True)  # new times, same bytes
    code, _, stderr = run_main(["export", reference_run, "--out", out, "--overwrite"], monkeypatch, capsys)
    assert code == 0, stderr


def test_what_the_earlier_output_wrote_and_the_new_one_does_not_goes(corpus, tmp_path, monkeypatch, capsys):
    out = tmp_path / "vocab"
    code, _, stderr = run_main(["tokenize", corpus, "--out", out, "--vocab-only", "--vocab-size", "150",
                                "--min-frequency", "1"], monkeypatch, capsys)
    assert code == 0, stderr
    vocab_files = set(hashes(out)) - {INVENTORY_FILE}
    yours = sprinkle(out, "mine.txt")
    code, _, stderr = run_main(["tokenize", corpus, "--out", out, "--overwrite", "--vocab-size", "150",
                                "--min-frequency", "1"], monkeypatch, capsys)
    assert code == 0, stderr
    after = hashes(out)
    assert after["mine.txt"] == yours["mine.txt"]
    gone = {name for name in vocab_files if name not in after}
    assert gone and gone <= vocab_files  # the VOCAB's own files went, e.g. its top-level tokenizer.json
    assert set(json.loads((out / INVENTORY_FILE).read_text())["files"]) == set(after) - {INVENTORY_FILE, "mine.txt"}


def test_a_folder_from_before_inventories_keeps_the_names_the_command_does_not_write(
        reference_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "export"
    assert run_main(["export", reference_run, "--out", out], monkeypatch, capsys)[0] == 0
    (out / INVENTORY_FILE).unlink()
    yours = sprinkle(out, "README.md")
    code, _, stderr = run_main(["export", reference_run, "--out", out, "--overwrite"], monkeypatch, capsys)
    assert code == 0, stderr
    assert hashes(out)["README.md"] == yours["README.md"]
    assert (out / INVENTORY_FILE).is_file()


def dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_kill_between_the_swap_and_the_move_back_loses_nothing(tmp_path):
    """The old folder sits aside, with its list of what to keep, and its process is gone: the next
    command writing the same --out moves those entries into the new folder."""
    out = tmp_path / "export"
    out.mkdir()
    (out / ".bertpre-export").write_text("")
    aside = tmp_path / f"{temporary_prefix(out).replace(str(os.getpid()), str(dead_pid()))}old"
    aside.mkdir()
    yours = sprinkle(aside, "README.md", "analysis/a.txt")
    (aside / KEEP_FILE).write_text(json.dumps(["README.md", "analysis"]))
    with claimed_out(out, "export", overwrite=True) as output:
        (output.staging / ".bertpre-export").write_text("")
        (output.staging / "config.json").write_text("{}")
        output.commit()
    after = hashes(out)
    assert {place: after[place] for place in yours} == yours
    assert not aside.exists() and socket.gethostname() in aside.name


def test_a_file_of_yours_where_the_new_output_writes_keeps_the_new_one_beside(tmp_path):
    out = tmp_path / "export"
    with claimed_out(out, "export") as output:
        (output.staging / ".bertpre-export").write_text("")
        output.commit()
    yours = sprinkle(out, "vocab.txt")
    with pytest.raises(UserError, match="vocab.txt, which bertpre did not write, stands where the new one writes"):
        with claimed_out(out, "export", overwrite=True) as output:
            (output.staging / ".bertpre-export").write_text("")
            (output.staging / "vocab.txt").write_text("[PAD]\n")
            output.commit()
    assert hashes(out)["vocab.txt"] == yours["vocab.txt"]
    assert len(list(tmp_path.glob("export.new-*"))) == 1


def earlier_demo(folder: Path) -> None:
    """A folder as an earlier `bertpre demo` left it (its parts, its marker, its inventory)."""
    sprinkle(folder, "corpus/sample.txt", "data/manifest.json", "run/config.yaml", "model/config.json")
    (folder / ".bertpre-demo").write_text("made by `bertpre demo`\n")
    take_inventory(folder, "demo")


def test_a_repeated_demo_keeps_your_files_beside_its_parts(tmp_path):
    folder = tmp_path / "demo"
    earlier_demo(folder)
    yours = sprinkle(folder, "mynotes.md", "experiments/a.txt")
    target = check_demo_folder(folder)
    assert sorted(prepare_folder(target)) == ["experiments", "mynotes.md"]
    assert hashes(folder) == {**yours, ".bertpre-demo": hashes(folder)[".bertpre-demo"]}


def test_a_demo_refuses_files_of_yours_inside_the_parts_it_rebuilds(tmp_path):
    folder = tmp_path / "demo"
    earlier_demo(folder)
    sprinkle(folder, "data/analysis.md")
    before = hashes(folder)
    with pytest.raises(UserError, match=r"data/analysis.md did not come from the demo.*rebuilds data/"):
        check_demo_folder(folder)
    assert hashes(folder) == before


@pytest.mark.slow
def test_the_real_demo_twice_keeps_your_notes(tmp_path, monkeypatch, capsys):
    out = tmp_path / "demo"
    assert run_main(["demo", "--out", out, "--max-steps", "2"], monkeypatch, capsys)[0] == 0
    yours = sprinkle(out, "mynotes.md", "plots/loss.png")
    code, stdout, stderr = run_main(["demo", "--out", out, "--max-steps", "2"], monkeypatch, capsys)
    assert code == 0, stderr
    after = hashes(out)
    assert {place: after[place] for place in yours} == yours
    assert "kept what the demo did not write" in stdout + stderr


def fake_checkpoint(checkpoints: Path, step: int) -> Path:
    folder = checkpoints / f"step-{step:08d}"
    sprinkle(folder, "config.json", "model.safetensors", "optimizer.pt", "trainer_state.json")
    (folder / "checksums.json").write_text(json.dumps({"files": {name: {"bytes": 1, "sha256": "0" * 64} for name in
                                                                 ("config.json", "model.safetensors", "optimizer.pt", "trainer_state.json")}}))
    return folder


def test_pruning_keeps_a_checkpoint_that_holds_files_of_yours(tmp_path, capsys):
    from bertpre.train.checkpoint import prune_checkpoints

    checkpoints = tmp_path / "run" / "checkpoints"
    folders = [fake_checkpoint(checkpoints, step) for step in (10, 20, 30, 40)]
    (checkpoints / "latest").write_text(folders[-1].name + "\n")
    yours = sprinkle(folders[0], "downstream/results.json")  # e.g. a finetune --out placed there
    removed = prune_checkpoints(checkpoints, keep_last=1)
    assert removed == folders[1:3]
    assert hashes(folders[0])["downstream/results.json"] == yours["downstream/results.json"]
    assert "kept checkpoint step-00000010" in capsys.readouterr().err


def test_a_killed_resave_of_a_checkpoint_gives_your_files_back(tmp_path):
    from bertpre.train.checkpoint import remove_partial_checkpoints

    checkpoints = tmp_path / "run" / "checkpoints"
    final = fake_checkpoint(checkpoints, 10)
    aside = checkpoints / ".old-step-00000010"
    aside.mkdir()
    yours = sprinkle(aside, "notes.md")
    (aside / KEEP_FILE).write_text(json.dumps(["notes.md"]))
    remove_partial_checkpoints(tmp_path / "run")
    assert hashes(final)["notes.md"] == yours["notes.md"] and not aside.exists()


def test_a_fresh_start_removes_only_the_event_files_bertpre_wrote(tmp_path):
    from bertpre.train.metrics import remove_event_files

    board = tmp_path / "tensorboard"
    sprinkle(board, "events.out.tfevents.1.host.1.0", "plugins/events.out.tfevents.2.host.1.0")
    yours = sprinkle(board, "my-layout.json")
    remove_event_files(board)
    assert hashes(board) == yours


def test_a_demo_inside_another_output_is_refused_before_any_work(reference_run, tmp_path, monkeypatch, capsys):
    """Found by the random sequences: the demo wrote its corpus and DATA, then its run was refused."""
    export = tmp_path / "export"
    assert run_main(["export", reference_run, "--out", export], monkeypatch, capsys)[0] == 0
    before = hashes(export)
    code, stdout, stderr = run_main(["demo", "--out", export / "demo"], monkeypatch, capsys)
    assert code == 2 and stdout == "" and len(stderr.splitlines()) == 1, stderr
    assert "the demo's run cannot be made inside another output" in stderr
    assert hashes(export) == before and not (export / "demo").exists()


def test_finetune_results_inside_an_export_survive_its_overwrite(reference_run, tmp_path, monkeypatch, capsys):
    """The finding: `finetune --out` inside an export was lost to the next `export --overwrite`."""
    export = tmp_path / "my-bert"
    assert run_main(["export", reference_run, "--out", export], monkeypatch, capsys)[0] == 0
    rows = ["the cat sees the river .\tanimal", "my sister feeds a dog .\tperson"] * 6
    task = tmp_path / "task.tsv"
    task.write_text("text\tlabel\n" + "\n".join(rows) + "\n", encoding="utf-8")
    code, _, stderr = run_main(["finetune", export, "--train", task, "--validation", task, "--out",
                                export / "downstream", "--epochs", "1", "--seeds", "1"], monkeypatch, capsys)
    assert code == 0, stderr
    results = hashes(export / "downstream")
    assert "results.json" in results
    code, _, stderr = run_main(["export", reference_run, "--out", export, "--overwrite"], monkeypatch, capsys)
    assert code == 0, stderr
    assert hashes(export / "downstream") == results
