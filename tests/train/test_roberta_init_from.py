"""`model.init_from` a RoBERTa or XLM-R folder: the architecture from its model_type, the masked LM
alone, transformers' logits at the start, and after a few of bertpre's steps the export's."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model.families import load_pretraining_model
from bertpre.tools.export import export
from bertpre.train.trainer import Trainer, pretrain

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).parents[2]
SHAPE = dict(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=66, type_vocab_size=1, layer_norm_eps=1e-5)
PAD = 0  # the tiny DATA's [PAD]: the source pads with its tokenizer's id, as a released RoBERTa does


def roberta_folder(data: Path, folder: Path, kind: str = "RobertaForMaskedLM", **changes) -> tuple[Path, torch.nn.Module]:
    """A transformers model of `kind`, off its init values, saved with DATA's tokenizer files."""
    config_class = transformers.XLMRobertaConfig if kind.startswith("XLM") else transformers.RobertaConfig
    torch.manual_seed(7)
    model = getattr(transformers, kind)(config_class(**{**SHAPE, "pad_token_id": PAD, **changes})).eval()
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    model.save_pretrained(folder)
    for file in (data / "tokenizer").iterdir():
        shutil.copy(file, folder / file.name)
    return folder, model


def config_file(tmp_path: Path, source: Path, **data) -> Path:
    """A user's config for continuing `source`: no shape keys, no pair task (unless `data` gives one)."""
    path = tmp_path / "continue.yaml"
    path.write_text(json.dumps({
        "model": {"init_from": str(source)},
        "data": {"max_seq_length": 32, "max_predictions_per_seq": 5, "num_workers": 0, **data},
        "optim": {"lr": 1e-3, "warmup_steps": 0},
        "train": {"batch_size": 8, "micro_batch_size": 8, "precision": "fp32", "max_steps": 4, "save_every": 4,
                  "eval_every": 1000, "log_every": 1}}))
    return path


def padded_inputs() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, 120, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, 8:], attention_mask[1, 8:] = PAD, 0
    input_ids[2, :3], attention_mask[2, :3] = PAD, 0
    return dict(input_ids=input_ids, attention_mask=attention_mask)


def mlm_logits(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits at the real tokens, of bertpre's model or transformers'."""
    with torch.no_grad():
        out = model.eval()(**inputs)
    logits = getattr(out, "prediction_logits", None)
    return (out.logits if logits is None else logits)[inputs["attention_mask"].bool()]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["RobertaForMaskedLM", "XLMRobertaForMaskedLM"])
def test_a_roberta_folder_continues_and_exports_natively_with_bertpres_logits(kind, tiny_data, tmp_path, capsys):
    source, reference = roberta_folder(tiny_data, tmp_path / "source", kind)
    config = load_config(config_file(tmp_path, source), [f"data.path={tiny_data}", f"train.out={tmp_path / 'run'}"])
    architecture = "xlm-roberta" if kind.startswith("XLM") else "roberta"
    with Trainer(config) as trainer:
        assert trainer.config.model.architecture == architecture  # from config.json's model_type
        assert trainer.config.data.pair_task == "none"  # no pair head: the default pair task is dropped
        assert (trainer.config.model.max_position_embeddings, trainer.config.model.type_vocab_size) == (66, 1)
        torch.testing.assert_close(mlm_logits(trainer.model, padded_inputs()),
                                   mlm_logits(reference, padded_inputs()), rtol=0, atol=1e-5)
    assert f"starting from the weights of {source}" in capsys.readouterr().err

    run = pretrain(config)
    assert run.step == 4
    export(run.run_dir, tmp_path / "export")
    exported, info = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "export", output_loading_info=True)
    assert type(exported).__name__ == kind
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    trained = load_pretraining_model(run.run_dir / "checkpoints" / "step-00000004", strict=True)
    ours = mlm_logits(trained, padded_inputs())
    torch.testing.assert_close(ours, mlm_logits(exported, padded_inputs()), rtol=0, atol=1e-4)
    assert (ours - mlm_logits(reference, padded_inputs())).abs().max() > 1e-2  # the steps moved the weights


def test_a_pair_task_asked_for_or_another_padding_id_is_refused(tiny_data, tmp_path):
    source, _ = roberta_folder(tiny_data, tmp_path / "source")
    # refused as the config is read: the architecture is the source's (issue 51), not BERT's default
    with pytest.raises(UserError, match=rf"data.pair_task sop trains a sentence-pair head, which {source}'s model "
                                        r"\(RoBERTa\) does not have.*set data.pair_task: none"):
        load_config(config_file(tmp_path, source, pair_task="sop"),
                    [f"data.path={tiny_data}", f"train.out={tmp_path / 'run'}"])
    other_pad, _ = roberta_folder(tiny_data, tmp_path / "pad-1", pad_token_id=1)
    config = load_config(config_file(tmp_path, other_pad), [f"data.path={tiny_data}", f"train.out={tmp_path / 'r2'}"])
    with pytest.raises(UserError, match=r"pads with id 1, but the DATA folder's tokenizer with id 0; roberta's "
                                        r"positions count from the padding's id"):
        Trainer(config)
    with pytest.raises(UserError, match=r"data.max_seq_length \(66\) is larger than the 65 tokens the 66 positions"):
        Trainer(load_config(config_file(tmp_path, source, max_seq_length=66),
                            [f"data.path={tiny_data}", f"train.out={tmp_path / 'r3'}"]))


@pytest.mark.slow
def test_a_resumed_roberta_run_reads_its_checkpoint_and_trains_as_the_straight_one(tiny_data, tmp_path):
    source, _ = roberta_folder(tiny_data, tmp_path / "source")

    def config(out: str, steps: int):
        (tmp_path / out).mkdir(exist_ok=True)
        # in warmup the learning rate does not depend on max_steps: 3 + 3 steps are the 6 straight ones
        return load_config(config_file(tmp_path / out, source),
                           [f"data.path={tiny_data}", f"train.out={tmp_path / out / 'run'}",
                            f"train.max_steps={steps}", "train.save_every=3", "optim.warmup_steps=30"])

    straight = pretrain(config("straight", 6))
    pretrain(config("resumed", 3))
    shutil.rmtree(source)  # the checkpoint holds the weights and the shape
    resumed = pretrain(config("resumed", 6))
    assert resumed.step == 6
    a = (straight.run_dir / "checkpoints" / "step-00000006" / "model.safetensors").read_bytes()
    b = (resumed.run_dir / "checkpoints" / "step-00000006" / "model.safetensors").read_bytes()
    assert a == b
