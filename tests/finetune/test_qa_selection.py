"""`bertpre finetune --task qa` choosing on dev, as a user runs it: `--select-by dev` picks each
seed's epoch by validation F1 (SQuAD v2.0: at the null threshold chosen there, then applied to
the test split) and reports the test split; a sweep over a RUN's checkpoints scores QA at each,
writes EM/F1 (and HasAns/NoAns) to the RUN's TensorBoard and, by dev, reports the best one."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_finetune import run_main
from test_qa_finetune import write_squad
from test_sweep import downstream_scalars, sweep_run  # noqa: F401 (sweep_run: a fixture, a RUN of 3 checkpoints)

from bertpre.finetune.qa_answers import predict_answers
from bertpre.finetune.qa_data import read_qa_file
from bertpre.finetune.qa_metrics import best_null_threshold
from bertpre.finetune.qa_windows import encode_qa_windows
from bertpre.finetune.source import load_encoder

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

OPTIONS = ["--lr", "0.002", "--batch-size", "16", "--max-seq-length", "48", "--doc-stride", "8"]


@pytest.fixture(scope="module")
def squad_v2(tmp_path_factory) -> dict[str, Path]:
    """SQuAD v2.0-layout train, dev and test files (every third question unanswerable)."""
    folder = tmp_path_factory.mktemp("squad-v2") / "who-acts"
    folder.mkdir()
    return {split: write_squad(folder / f"{split}.json", count, seed, unanswerable=True)
            for split, count, seed in (("train", 48, 0), ("validation", 15, 1), ("test", 15, 2))}


def files_of(squad: dict[str, Path]) -> list:
    return [argument for split, path in squad.items() for argument in (f"--{split}", path)]


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def difference(row: dict, seed: str) -> float:
    """An n-best row's null score minus its best span's score (null: no span, so +inf)."""
    value = row["null_score_difference"][seed]
    return math.inf if value is None else value


def test_select_by_dev_chooses_each_seeds_epoch_by_dev_f1_and_applies_dev_thresholds_to_test(
        run_folder, squad_v2, tmp_path, monkeypatch, capsys):
    results, reports = {}, {}
    for select_by in ("dev", "last"):
        out = tmp_path / select_by
        code, reports[select_by], stderr = run_main(
            ["finetune", run_folder, "--task", "qa", "--version-2", *files_of(squad_v2), "--out", out, "--seed", "0",
             "--seed", "2", "--epochs", "3", *OPTIONS, "--select-by", select_by,
             *(["--save-model"] if select_by == "dev" else [])], monkeypatch, capsys)
        assert code == 0, stderr
        results[select_by] = json.loads((out / "results.json").read_text())
    chosen, last = results["dev"], results["last"]
    assert chosen["split"] == "test" and set(chosen["splits"]) == {"test", "validation"}
    selection = chosen["selection"]
    assert (selection["by"], selection["split"], selection["metric"]) == ("dev", "validation", "f1")
    assert last["selection"]["epochs"] == [3, 3] and "scores_by_epoch" not in last["selection"]
    for number, curve in enumerate(selection["scores_by_epoch"]):
        assert len(curve) == 3 and selection["epochs"][number] == curve.index(max(curve)) + 1
        assert chosen["splits"]["validation"]["metrics"]["f1"]["per_seed"][number] == pytest.approx(max(curve))
        # The same seed trained the same way: scoring dev after each epoch changes nothing, and
        # its last epoch is the other command's report.
        assert last["splits"]["validation"]["metrics"]["f1"]["per_seed"][number] == pytest.approx(curve[-1])
        if selection["epochs"][number] == 3:
            assert chosen["metrics"]["f1"]["per_seed"][number] == pytest.approx(last["metrics"]["f1"]["per_seed"][number])
    assert "epochs chosen by validation f1 (of 3): seed 0: " in reports["dev"]
    assert "null thresholds chosen on validation f1" in reports["dev"]

    # The thresholds: SQuAD v2.0's search on dev's n-best, applied unchanged to the test split.
    out = tmp_path / "dev"
    validation, test = (read_qa_file(squad_v2[split], version_2_with_negative=True) for split in ("validation", "test"))
    dev_best = read_lines(out / chosen["splits"]["validation"]["n_best"])
    test_best = read_lines(out / chosen["splits"]["test"]["n_best"])
    test_answers = read_lines(out / chosen["splits"]["test"]["predictions"])
    for number, seed in enumerate(map(str, chosen["seeds"])):
        differences = {row["id"]: difference(row, seed) for row in dev_best}
        spans = {row["id"]: row["n_best"][seed][0]["text"] for row in dev_best}
        dev_f1, threshold = best_null_threshold(differences, spans, validation)
        reported = chosen["null_threshold"]["per_seed"][number]
        assert (-math.inf if reported is None else reported) == pytest.approx(threshold)  # None: -inf
        assert chosen["splits"]["validation"]["metrics"]["f1"]["per_seed"][number] == pytest.approx(dev_f1)
        expected = {row["id"]: "" if difference(row, seed) > threshold else row["n_best"][seed][0]["text"]
                    for row in test_best}
        assert {row["id"]: row["predicted"][seed] for row in test_answers} == expected
    assert [row["id"] for row in test_best] == [example.id for example in test]

    # --save-model keeps the best seed at its chosen epoch: transformers' model of OUT/model
    # finds the spans (and null scores) that seed's dev n-best file has.
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    seed = str(chosen["saved_model"]["seed"])
    dev_f1 = chosen["splits"]["validation"]["metrics"]["f1"]["per_seed"]
    assert dev_f1[chosen["seeds"].index(int(seed))] == max(dev_f1)
    encoder = load_encoder(run_folder)
    windows = encode_qa_windows(encoder.tokenizer, validation, 48, 8, config=encoder.config)
    longest = max(map(len, windows.input_ids))
    ids = torch.tensor([row + [0] * (longest - len(row)) for row in windows.input_ids])
    types = torch.tensor([row + [0] * (longest - len(row)) for row in windows.token_type_ids])
    mask = torch.tensor([[1] * len(row) + [0] * (longest - len(row)) for row in windows.input_ids])
    hf = transformers.AutoModelForQuestionAnswering.from_pretrained(out / "model").eval()
    with torch.no_grad():
        logits = hf(input_ids=ids, attention_mask=mask, token_type_ids=types)
    answered = predict_answers(validation, windows, logits.start_logits.numpy(), logits.end_logits.numpy())
    assert [prediction.n_best[0].text for prediction in answered] == [row["n_best"][seed][0]["text"]
                                                                       for row in dev_best]
    assert [prediction.null_score - prediction.n_best[0].score for prediction in answered] == pytest.approx(
        [difference(row, seed) for row in dev_best], abs=1e-4)


def test_select_by_dev_for_qa_needs_a_test_split(run_folder, squad_v2, tmp_path, monkeypatch, capsys):
    code, _, stderr = run_main(["finetune", run_folder, "--task", "qa", "--version-2", "--train", squad_v2["train"],
                                "--validation", squad_v2["validation"], "--out", tmp_path / "out",
                                "--select-by", "dev"], monkeypatch, capsys)
    assert code == 2 and len(stderr.splitlines()) == 1, stderr
    assert "--select-by dev chooses the epoch by the --validation score and reports --test; give --test" in stderr
    assert not (tmp_path / "out").exists()


def test_a_qa_sweep_scores_every_checkpoint_logs_em_and_f1_and_reports_the_best_on_dev(
        sweep_run, squad_v2, tmp_path, monkeypatch, capsys):  # noqa: F811 (the fixture imported above)
    out = tmp_path / "sweep"
    code, stdout, stderr = run_main(
        ["finetune", sweep_run, "--task", "qa", "--version-2", *files_of(squad_v2), "--out", out, "--seeds", "2",
         "--epochs", "2", *OPTIONS, "--checkpoints", "all", "--select-by", "dev"], monkeypatch, capsys)
    assert code == 0, stderr
    lines = read_lines(out / "results.jsonl")
    assert [line["checkpoint_step"] for line in lines] == [10, 20, 30]
    names = ["exact_match", "f1", "HasAns_exact_match", "HasAns_f1", "NoAns_exact_match", "NoAns_f1"]
    assert stdout.splitlines()[0].split() == ["step", *names]
    assert all(list(line["metrics"]) == names and line["task"] == "qa" for line in lines)

    dev = [line["splits"]["validation"]["metrics"]["f1"]["mean"] for line in lines]
    best = dev.index(max(dev))  # the earliest of equals
    result = json.loads((out / "results.json").read_text())
    assert result["checkpoint_step"] == lines[best]["checkpoint_step"] and result["metrics"] == lines[best]["metrics"]
    assert result["checkpoint_selection"] == {"by": "dev", "split": "validation", "metric": "f1",
                                              "steps": [10, 20, 30], "means": dev,
                                              "chosen_step": lines[best]["checkpoint_step"]}
    rows = [row for row in stdout.splitlines() if row.strip().split(" ")[0] in ("10", "20", "30")]
    assert [row.endswith("<- reported") for row in rows] == [number == best for number in range(3)]

    scalars = downstream_scalars(sweep_run)
    for name in names:  # the task is the training file's folder
        assert scalars[f"downstream/who-acts/{name}"] == pytest.approx(
            {line["checkpoint_step"]: line["metrics"][name]["mean"] for line in lines})

    code, _, stderr = run_main(
        ["finetune", sweep_run, "--task", "qa", "--version-2", *files_of(squad_v2), "--out", out, "--seeds", "2",
         "--epochs", "2", *OPTIONS, "--checkpoints", "all", "--select-by", "dev"], monkeypatch, capsys)
    assert code == 0 and stderr.count("already done") == 3 and "seed 0" not in stderr, stderr
