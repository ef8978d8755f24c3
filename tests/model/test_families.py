"""The family table: every row complete and consistent with the objectives and the config."""
from __future__ import annotations

import json
import re
from dataclasses import fields, replace
from pathlib import Path

import pytest
import torch
from _killed_run import pretrain_dying_after

from bertpre.config import load_config
from bertpre.config.sections import OBJECTIVES as CONFIG_OBJECTIVES
from bertpre.errors import UserError
from bertpre.model import BertConfig
from bertpre.model.config import ARCHITECTURE_KEY
from bertpre.model.cost import ForwardShape, inference_shortfall
from bertpre.model.families import (
    FAMILIES,
    Family,
    family,
    family_of,
    load_pretraining_model,
    token_types,
)
from bertpre.model.hf_format import read_config
from bertpre.train.objectives import OBJECTIVES
from tests._toy_family import ARCHITECTURE, TOY, ToyFields

TINY = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def test_every_objective_a_family_trains_with_is_an_object_and_a_config_choice():
    named = {name for row in FAMILIES.values() for name in row.objectives}
    assert named == set(OBJECTIVES) == set(CONFIG_OBJECTIVES)


def test_an_unknown_architecture_is_one_line():
    with pytest.raises(UserError, match="model.architecture 'gpt' is not built; use one of bert, xlnet"):
        family(BertConfig(architecture="gpt", **TINY))


def test_a_family_without_pairs_defaults_to_no_pair_task_and_refuses_anothers_objective():
    assert load_config(None, ["model.architecture=xlnet", "data.objective=plm"]).data.pair_task == "none"
    trains = " or ".join(FAMILIES["bert"].objectives)  # mlm, and rtd
    with pytest.raises(UserError, match=f"model.architecture bert trains with data.objective {trains}, not plm; "
                                        f"set model.architecture: xlnet for plm, or data.objective: {trains}$"):
        load_config(None, ["data.objective=plm", "data.pair_task=none"])


# --- the conformance suite: every row of the table, and a toy family registered from tests ---

transformers = pytest.importorskip("transformers")
CONFORMING = [*FAMILIES, ARCHITECTURE]  # the toy's row is added by `register_toy`
# each family's tiny shape beyond TINY: ModernBERT's window within its positions, RoBERTa's
# positions after the padding's row
TINY_EXTRA = {"modernbert": dict(local_attention=16, max_position_embeddings=64),
              "roberta": dict(max_position_embeddings=66), "xlm-roberta": dict(max_position_embeddings=66),
              "bert": dict(max_position_embeddings=64), ARCHITECTURE: dict(max_position_embeddings=64),
              # ELECTRA's factorized embeddings, projected to the layers (transformers' embeddings_project)
              "electra": dict(max_position_embeddings=64, embedding_size=16)}


@pytest.fixture
def register_toy(monkeypatch) -> Family:
    """The toy's row in the family table for one test, removed after it."""
    monkeypatch.setitem(FAMILIES, ARCHITECTURE, TOY)
    return TOY


@pytest.fixture(params=CONFORMING)
def conforming(request) -> tuple[Family, BertConfig]:
    """A row of the table (the toy's registered for the test) and a tiny config of it."""
    if request.param == ARCHITECTURE:
        request.getfixturevalue("register_toy")
    row = FAMILIES[request.param]
    config = BertConfig(**{**row.model_defaults, **TINY, "architecture": request.param,
                           **TINY_EXTRA.get(request.param, {})})
    config.validate()
    return row, config


def padded_ids() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 50, (2, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:] = 0
    input_ids[attention_mask == 0] = 0
    return input_ids, attention_mask


def real_logits(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    out = model(input_ids, attention_mask=attention_mask)
    logits = getattr(out, "prediction_logits", None)
    return (out.logits if logits is None else logits)[attention_mask.bool()]


def test_a_row_builds_its_model_and_names_its_parts(conforming):
    row, config = conforming
    assert family(config) is row and row.architecture == config.architecture
    torch.manual_seed(0)
    model = row.build_pretraining(config, None)
    assert type(model) is row.pretraining_class and family_of(model) is row
    encoder = row.build_encoder(config)
    # The encoder inside the pretraining model is the encoder the family builds alone.
    inside = getattr(model, row.encoder_attribute).state_dict()
    alone = encoder.state_dict()
    assert {name: tensor.shape for name, tensor in inside.items()} == {
        name: tensor.shape for name, tensor in alone.items()}
    assert row.objectives and row.padding_side in ("left", "right")
    head = row.sequence_head(config, 3)
    assert getattr(head, row.encoder_attribute) is not None


def test_a_row_builds_its_model_and_counts_its_parameters_by_its_own_formula(conforming):
    row, config = conforming
    torch.manual_seed(0)
    model = row.build_pretraining(config, None)
    assert isinstance(model, row.pretraining_class) and family_of(model) is row
    assert row.count_parameters(config).total == model.num_parameters()
    assert config.to_hf_dict() == row.config.write_hf(config)
    assert set(row.config.shape_fields) <= set(config.to_dict()) and "architecture" in row.config.shape_fields


def test_a_rows_own_numeric_keys_are_ranged_by_the_row_and_the_config_asks_it(conforming):
    from bertpre.config.rules import RULES

    row, _ = conforming
    assert set(row.config.ranges) <= set(row.config.own_keys)
    assert all(RULES[f"model.{name}"] is rule for name, rule in row.config.ranges.items())
    preset, settings = RUN_SETTINGS[row.architecture]
    for name, rule in row.config.ranges.items():  # a value just below each range, refused in the range's words
        below = rule.low - 1 if rule.integer or not rule.low_open else rule.low
        with pytest.raises(UserError, match=re.escape(f"model.{name} must be {rule.describe()}, got")):
            load_config(preset, [*settings, f"model.{name}={below}"])
    if row.architecture == "modernbert":
        assert "local_attention" in row.config.ranges


def test_a_rows_export_loads_in_transformers_with_every_weight_and_equal_logits_and_starts_a_run(
        conforming, tmp_path):
    row, config = conforming
    torch.manual_seed(0)
    model = row.build_pretraining(config, None).eval()
    model.save_pretrained(tmp_path)
    named = json.loads((tmp_path / "config.json").read_text())["architectures"][0]
    theirs, loading = getattr(transformers, named).from_pretrained(tmp_path, output_loading_info=True)
    assert not loading["missing_keys"] and not loading["mismatched_keys"]
    input_ids, attention_mask = padded_ids()
    with torch.no_grad():
        torch.testing.assert_close(real_logits(model, input_ids, attention_mask),
                                   real_logits(theirs.eval(), input_ids, attention_mask), atol=1e-4, rtol=1e-4)
    # model.init_from of the export: the family config.json names (the toy's is BERT's), every weight
    started = load_pretraining_model(tmp_path, strict=True)
    run = load_config(None, [f"model.init_from={tmp_path}", "data.pair_task=none",
                             f"data.objective={row.objectives[0]}"])
    assert run.model.architecture == family_of(started).architecture
    assert {name: tensor.shape for name, tensor in started.state_dict().items()} == \
        {name: tensor.shape for name, tensor in model.state_dict().items()}
    for name, tensor in started.state_dict().items():
        assert torch.equal(tensor, model.state_dict()[name]), name


def test_a_row_says_its_token_types_and_refuses_a_forward_past_the_memory(conforming):
    row, config = conforming
    types = row.token_types(config, [0, 0, 0, 1, 1])
    assert len(types) == 5 and len(set(types[:3])) == 1  # a type a token, the first text's alike
    assert types == token_types(config, [0, 0, 0, 1, 1])
    need = row.estimate_inference_memory(config, ForwardShape(batch_size=4, seq_length=32, predicted_rows=32),
                                         device_type="cpu")
    assert need.total > need.weights > 0
    assert inference_shortfall(need, need.total, "this machine has") is None
    refused = inference_shortfall(need, need.total - 1, "this machine has")
    assert refused is not None and "\n" not in refused


def test_the_toy_family_is_routed_by_the_table_alone(register_toy):
    config = load_config(None, [f"model.architecture={ARCHITECTURE}", "model.hidden_size=32",
                                "model.num_attention_heads=4"]).model
    assert config.type_vocab_size == 1 and family(config) is register_toy  # its model default, its row
    with pytest.raises(UserError, match="model.architecture toy has one token type"):
        load_config(None, [f"model.architecture={ARCHITECTURE}", "model.type_vocab_size=2"])
    with pytest.raises(UserError, match="model.local_attention is ModernBERT's, which model.architecture toy"):
        load_config(None, [f"model.architecture={ARCHITECTURE}", "model.local_attention=16"])
    assert "local_attention" not in config.architecture_fields()


def test_the_toy_familys_own_key_goes_through_its_typed_record(register_toy, tmp_path):
    """Issue 53 item 1, checked: a family's own key is a field of its record (`FamilyConfig.fields`),
    routed, ranged, checked, refused elsewhere and written in config.yaml by asking the table, with no
    edit outside tests/ (the toy's record is tests/_toy_family.py's `ToyFields`)."""
    from bertpre.train.run_config import read_run_config

    run = load_config(None, [f"model.architecture={ARCHITECTURE}", "model.toy_window=4", "data.pair_task=none"])
    config = run.model
    assert config.family_fields == ToyFields(toy_window=4) and config.toy_window == 4
    assert "toy_window" not in {item.name for item in fields(BertConfig)}  # a field of the record, not of BertConfig
    assert BertConfig(architecture=ARCHITECTURE).family_fields == ToyFields()  # the record's default
    assert BertConfig(architecture=ARCHITECTURE, toy_window=6).toy_window == 6
    changed = replace(config, toy_window=6)  # a copy with another value; the original keeps its own
    assert changed.toy_window == 6 and config.toy_window == 4
    changed.toy_window = 5
    assert changed.family_fields == ToyFields(toy_window=5) and config.toy_window == 4
    # the flat model: section of a run's config.yaml writes it, and reads it back
    assert config.to_dict()["toy_window"] == 4 and "toy_window" in config.architecture_fields()
    run.save(tmp_path / "config.yaml")
    assert "  toy_window: 4\n" in (tmp_path / "config.yaml").read_text()
    assert read_run_config(tmp_path / "config.yaml").model == config
    # its range (the row's), its rule (the row's validate)
    with pytest.raises(UserError, match="model.toy_window must be a positive integer of at most 64, got 0"):
        load_config(None, [f"model.architecture={ARCHITECTURE}", "model.toy_window=0"])
    with pytest.raises(UserError, match=r"model.toy_window \(40\) is wider than the model.max_position_embeddings"):
        load_config(None, [f"model.architecture={ARCHITECTURE}", "model.toy_window=40",
                           "model.max_position_embeddings=32", "data.max_seq_length=32"])
    # another family refuses it, naming its owner, whether from a config or in code
    refused = "model.toy_window is the toy's, which model.architecture bert does not have; remove it, or set " \
              f"model.architecture: {ARCHITECTURE}"
    with pytest.raises(UserError, match=refused):
        load_config(None, ["model.toy_window=4"])
    with pytest.raises(UserError, match=refused):
        BertConfig(toy_window=4)
    with pytest.raises(UserError, match="model.toy_window is the toy's, which model.architecture modernbert"):
        load_config("tiny-modernbert", ["model.toy_window=4"])
    # a family's key is no attribute of another's config; setting the architecture gives its record
    bert = BertConfig(**TINY)
    assert bert.family_fields is None and not hasattr(bert, "toy_window")
    bert.architecture = ARCHITECTURE
    assert bert.family_fields == ToyFields()


# What each row needs to pretrain a tiny config (its preset, then settings) on the tiny WordPiece
# DATA (the reliability suite's FAMILY_SETTINGS, and the toy's): a new row says what it needs here.
RUN_SETTINGS = {
    "bert": ("tiny", []),
    "roberta": ("tiny", ["model.architecture=roberta", "data.pair_task=none", "model.max_position_embeddings=34"]),
    "xlm-roberta": ("tiny", ["model.architecture=xlm-roberta", "data.pair_task=none",
                             "model.max_position_embeddings=34"]),
    "modernbert": ("tiny-modernbert", []),
    "xlnet": ("tiny", ["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none", "model.mem_len=16"]),
    ARCHITECTURE: ("tiny", [f"model.architecture={ARCHITECTURE}", "data.pair_task=none", "model.type_vocab_size=1"]),
    # the preset's file: the shared venv's editable install finds presets in the main checkout's configs/
    "electra": (str(Path(__file__).parents[2] / "configs" / "tiny-electra.yaml"), []),
}


def train_losses(data, out, architecture: str, monkeypatch, stop_after: int | None = None) -> list[float]:
    """Four steps of the row's tiny config into `out`, a checkpoint a step; with `stop_after`, the
    run dies once that checkpoint is saved and a second run takes it up."""
    import bertpre.train.trainer as trainer

    preset, settings = RUN_SETTINGS[architecture]
    config = load_config(preset, [f"data.path={data}", f"train.out={out}", "train.max_steps=4",
                                  "train.log_every=1", "train.eval_every=1000", "train.save_every=1",
                                  "data.max_seq_length=32", *settings])
    if stop_after is not None:
        pretrain_dying_after(config, stop_after, monkeypatch)
    trainer.pretrain(config)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row["train/loss"] for row in rows if "train/loss" in row]


def test_every_row_is_in_the_run_settings():
    assert set(RUN_SETTINGS) == set(CONFORMING)


def test_a_rows_run_died_after_a_checkpoint_goes_on_bit_for_bit(conforming, tiny_data, tmp_path, monkeypatch,
                                                              one_thread):
    row, _ = conforming
    straight = train_losses(tiny_data, tmp_path / "straight", row.architecture, monkeypatch)
    resumed = train_losses(tiny_data, tmp_path / "resumed", row.architecture, monkeypatch, stop_after=2)
    assert len(straight) == 4 and resumed == straight
    from safetensors.torch import load_file

    final = "checkpoints/step-00000004/model.safetensors"
    a, b = load_file(tmp_path / "straight" / final), load_file(tmp_path / "resumed" / final)
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    # the checkpoint names its family by bertpre's name, whatever model_type it writes (the toy: BERT's)
    written = json.loads((tmp_path / "resumed" / "checkpoints/step-00000004/config.json").read_text())
    assert written[ARCHITECTURE_KEY] == row.architecture
    assert read_config(tmp_path / "resumed" / "checkpoints/step-00000004").architecture == row.architecture


def test_a_checkpoint_written_before_it_named_its_architecture_still_resumes(tiny_data, tmp_path, monkeypatch,
                                                                           one_thread):
    """An older checkpoint (no ARCHITECTURE_KEY, no checksums.json) routes by its model_type."""
    straight = train_losses(tiny_data, tmp_path / "straight", "roberta", monkeypatch)
    config = load_config(RUN_SETTINGS["roberta"][0], [
        f"data.path={tiny_data}", f"train.out={tmp_path / 'resumed'}", "train.max_steps=4", "train.log_every=1",
        "train.eval_every=1000", "train.save_every=1", "data.max_seq_length=32", *RUN_SETTINGS["roberta"][1]])
    pretrain_dying_after(config, 2, monkeypatch)
    for step in (1, 2):
        folder = tmp_path / "resumed" / "checkpoints" / f"step-{step:08d}"
        if not folder.is_dir():
            continue
        hf = json.loads((folder / "config.json").read_text())
        del hf[ARCHITECTURE_KEY]
        (folder / "config.json").write_text(json.dumps(hf))
        (folder / "checksums.json").unlink()
        assert read_config(folder).architecture == "roberta"  # its model_type's row
    import bertpre.train.trainer as trainer

    trainer.pretrain(config)
    rows = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [row["train/loss"] for row in rows if "train/loss" in row] == straight


def test_a_checkpoint_naming_an_architecture_not_built_is_one_line(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**BertConfig(**TINY).to_hf_dict(), ARCHITECTURE_KEY: "gpt"}))
    with pytest.raises(UserError, match="config.json names bertpre architecture 'gpt', which this bertpre does not build"):
        read_config(tmp_path)


# task: (transformers' Auto class, bertpre's label names); every task kind's `--save-model`
SAVED_TASKS = {
    "classification": ("AutoModelForSequenceClassification", ["neg", "neutral", "pos"]),
    "regression": ("AutoModelForSequenceClassification", []),
    "tagging": ("AutoModelForTokenClassification", ["O", "B-X", "I-X"]),
    "qa": ("AutoModelForQuestionAnswering", []),
}


@pytest.mark.parametrize("task", list(SAVED_TASKS))
def test_a_rows_saved_task_model_loads_in_transformers_with_every_weight_and_equal_logits(
        conforming, task, tiny_data, tmp_path):
    """`--save-model` of every task kind for every row: the folder loads through transformers'
    Auto class with no missing, unexpected or redrawn tensor and gives the task model's logits
    on a padded batch."""
    import inspect

    from bertpre.finetune.model import build_task_model
    from bertpre.finetune.saved_model import save_task_model

    row, config = conforming
    auto_class, label_names = SAVED_TASKS[task]
    torch.manual_seed(0)
    encoder_state = row.build_encoder(config).state_dict()
    ours = build_task_model(config, encoder_state, {"regression": 1, "qa": 2}.get(task, len(label_names)),
                            tagging=task == "tagging", question_answering=task == "qa")
    with torch.no_grad():
        for parameter in ours.parameters():  # every weight off its init, so that each one counts
            parameter.add_(torch.randn_like(parameter) * 0.05)
    ours.eval()
    saved = save_task_model(tmp_path, ours, config, task=task, label_names=label_names,
                            tokenizer_folder=tiny_data / "tokenizer")
    theirs, loading = getattr(transformers, auto_class).from_pretrained(saved, output_loading_info=True)
    assert all(len(keys) == 0 for keys in loading.values()), loading
    input_ids, attention_mask = padded_ids()
    token_type_ids = torch.zeros_like(input_ids)
    inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "token_type_ids" in inspect.signature(theirs.forward).parameters:
        inputs["token_type_ids"] = token_type_ids
    with torch.no_grad():
        mine = ours(input_ids, attention_mask, token_type_ids)
        out = theirs.eval()(**inputs)
    real = attention_mask.bool()
    if task == "qa":
        torch.testing.assert_close(out.start_logits[real], mine[..., 0][real], atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(out.end_logits[real], mine[..., 1][real], atol=1e-4, rtol=1e-4)
    elif task == "tagging":
        torch.testing.assert_close(out.logits[real], mine[real], atol=1e-4, rtol=1e-4)
    else:
        torch.testing.assert_close(out.logits, mine, atol=1e-4, rtol=1e-4)
    assert mine.abs().max() > 0.01  # not a trivially equal pair of zeros
