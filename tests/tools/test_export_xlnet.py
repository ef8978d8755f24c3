"""bertpre.tools.export of an XLNet run: Hugging Face's native XLNetLMHeadModel folder (loads with no
missing or unexpected keys, the same logits in both streams), the tokenizer in XLNet's layout, the
task classes with only their heads missing, and the export's usual guarantees."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertpre.cli import main
from bertpre.errors import UserError
from bertpre.folders import current_umask
from bertpre.model.xlnet import XLNetLMHeadModel
from bertpre.tokenizer import load_tokenizer
from bertpre.tools.export import export

transformers = pytest.importorskip("transformers")
from _xlnet_run import xlnet_run  # noqa: E402

ATOL = 1e-4
STEP = "step-00000020"
EXPORT_FILES = [".bertpre-export", ".bertpre-inventory.json", "config.json", "model.safetensors", "special_tokens_map.json",
                "tokenizer.json", "tokenizer_config.json"]


pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

@pytest.fixture(scope="module")
def exported(tiny_data, tmp_path_factory) -> tuple[Path, Path]:
    """(RUN, its export), made once: the tests below only read them."""
    root = tmp_path_factory.mktemp("xlnet-export")
    run = xlnet_run(root / "run", tiny_data)
    export(run, root / "export")
    return run, root / "export"


def permutation_inputs(batch: int, length: int, predicted: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """perm_mask (B, T, T) of a random order per row, target_mapping (B, P, T) of its last P."""
    generator = torch.Generator().manual_seed(seed)
    order = torch.stack([torch.randperm(length, generator=generator) for _ in range(batch)])
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(length).expand(batch, length))
    perm_mask = (rank[:, None, :] >= rank[:, :, None]).float()
    target_mapping = torch.zeros(batch, predicted, length)
    target_mapping.scatter_(2, order[:, -predicted:, None], 1.0)
    return perm_mask, target_mapping


def test_the_export_is_a_native_xlnet_folder_with_bertpres_logits(exported):
    run, out = exported
    assert sorted(path.name for path in out.iterdir()) == EXPORT_FILES
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["XLNetLMHeadModel"] and config["model_type"] == "xlnet"
    assert "auto_map" not in config  # transformers' own class: no remote code
    ours = XLNetLMHeadModel.from_pretrained(run / "checkpoints" / STEP).eval()
    for auto in (transformers.XLNetLMHeadModel, transformers.AutoModelForCausalLM):
        theirs, info = auto.from_pretrained(out, output_loading_info=True)
        assert type(theirs).__name__ == "XLNetLMHeadModel"
        assert all(len(keys) == 0 for keys in info.values()), info
    theirs.eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    batch = tokenizer(["the cat sees the river .", "a dog"], ["my sister feeds a red apple today .", "the farmer"],
                      padding=True, return_tensors="pt")
    B, T = batch["input_ids"].shape
    perm_mask, target_mapping = permutation_inputs(B, T, 4, seed=1)
    with torch.no_grad():
        for streams in ({}, {"perm_mask": perm_mask, "target_mapping": target_mapping}):
            mine = ours(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"], **streams).logits
            reference = theirs(**batch, **streams).logits
            assert mine.shape == reference.shape == (B, 4 if streams else T, ours.config.vocab_size)
            torch.testing.assert_close(mine, reference, atol=ATOL, rtol=0)


def test_the_export_reads_back_into_bertpre_with_the_same_weights(exported):
    run, out = exported
    checkpoint = XLNetLMHeadModel.from_pretrained(run / "checkpoints" / STEP)
    back = XLNetLMHeadModel.from_pretrained(out)
    assert back.config.to_dict() == {**checkpoint.config.to_dict(), "cls_token_id": 2, "sep_token_id": 3,
                                     "pad_token_id": 0}
    assert back.state_dict().keys() == checkpoint.state_dict().keys()
    for name, tensor in checkpoint.state_dict().items():
        assert torch.equal(back.state_dict()[name], tensor), name


def test_the_tokenizer_is_in_xlnets_layout(exported, tiny_data):
    _, out = exported
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    bert = load_tokenizer(tiny_data / "tokenizer")  # the run's own: BERT's layout
    sep, cls, pad = (bert.token_to_id(token) for token in ("[SEP]", "[CLS]", "[PAD]"))
    a, b = (bert.encode(text, add_special_tokens=False).ids for text in ("a b", "c d"))
    encoded = tokenizer("a b", "c d")
    assert encoded["input_ids"] == [*a, sep, *b, sep, cls]
    assert encoded["token_type_ids"] == [0] * (len(a) + 1) + [1] * (len(b) + 1) + [2]
    batch = tokenizer(["a b", "the old man sees the river"], ["c d", "a dog"], padding=True)
    short = batch["input_ids"][0]
    padding = len(short) - len(encoded["input_ids"])
    assert padding > 0 and short == [pad] * padding + encoded["input_ids"]  # on the left: [CLS] last
    assert batch["attention_mask"][0] == [0] * padding + [1] * len(encoded["input_ids"])
    assert tokenizer.padding_side == "left" and tokenizer.mask_token_id == bert.token_to_id("[MASK]")
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 512
    config = json.loads((out / "config.json").read_text())
    assert (config["pad_token_id"], config["cls_token_id"], config["sep_token_id"]) == (pad, cls, sep)


@pytest.mark.parametrize(("auto", "head"), [
    ("XLNetForSequenceClassification", {"sequence_summary.summary.weight", "sequence_summary.summary.bias",
                                        "logits_proj.weight", "logits_proj.bias"}),
    ("XLNetForTokenClassification", {"classifier.weight", "classifier.bias"}),
])
def test_the_task_classes_load_the_export_with_only_their_head_missing(auto, head, exported):
    _, out = exported
    model, info = getattr(transformers, auto).from_pretrained(out, num_labels=3, output_loading_info=True)
    assert set(info["missing_keys"]) == head
    assert set(info["unexpected_keys"]) == {"lm_loss.bias"} and not info["mismatched_keys"]
    weights = load_file(out / "model.safetensors")
    assert torch.equal(model.transformer.layer[1].rel_attn.q.detach(), weights["transformer.layer.1.rel_attn.q"])


def test_the_cli_names_the_architecture_and_the_export_keeps_its_guarantees(
        tiny_data, tmp_path, monkeypatch, capsys):
    run = xlnet_run(tmp_path / "run", tiny_data)
    out = tmp_path / "export"

    def cli(*args) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["bertpre", *map(str, args)])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, stdout, stderr = cli("export", run, "--out", out)
    assert code == 0, stderr
    assert stdout.strip() == (f"exported {run / 'checkpoints' / STEP} as XLNetLMHeadModel "
                              f"({XLNetLMHeadModel.from_pretrained(out).num_parameters():,} parameters) with "
                              f"tokenizer.json, tokenizer_config.json, special_tokens_map.json to {out}")
    modes = {path.name: path.stat().st_mode & 0o777 for path in out.iterdir()}
    assert len(set(modes.values())) == 1, modes  # model.safetensors as readable as the rest
    assert out.stat().st_mode & 0o777 == 0o777 & ~current_umask()
    code, _, stderr = cli("export", run, "--out", out)
    assert code == 2 and "already exists" in stderr
    (out / "model-card.md").write_text("yours: --overwrite replaces only what bertpre wrote")
    code, _, stderr = cli("export", run / "checkpoints" / STEP, "--out", out, "--overwrite")
    assert code == 0, stderr
    assert "kept in --out" in stderr and "model-card.md" in stderr
    assert sorted(path.name for path in out.iterdir()) == sorted([*EXPORT_FILES, "model-card.md"])
    assert (out / "model-card.md").read_text() == "yours: --overwrite replaces only what bertpre wrote"
    assert not [path.name for path in tmp_path.iterdir() if path.name.startswith(".")]

    # Damaged input: one line, and --out stays as it was.
    weights = run / "checkpoints" / STEP / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    code, _, stderr = cli("export", run, "--out", tmp_path / "damaged")
    assert code == 2 and len(stderr.splitlines()) == 1 and "model.safetensors is damaged" in stderr, stderr
    (run / "checkpoints" / STEP / "checksums.json").unlink()  # no record: the file itself is read
    code, _, stderr = cli("export", run, "--out", tmp_path / "damaged")
    assert code == 2 and len(stderr.splitlines()) == 1 and "not a readable safetensors file" in stderr, stderr
    state = XLNetLMHeadModel.from_pretrained(out).state_dict()
    save_file({name: tensor.contiguous() for name, tensor in state.items()
               if name not in ("lm_loss.weight", "transformer.mask_emb")}, weights)
    code, _, stderr = cli("export", run, "--out", tmp_path / "damaged")
    assert code == 2 and "weights do not fit XLNet's layout" in stderr and "transformer.mask_emb" in stderr, stderr
    assert not (tmp_path / "damaged").exists()


def test_a_tokenizer_larger_than_the_models_vocabulary_is_refused(tiny_data, tmp_path):
    run = xlnet_run(tmp_path / "run", tiny_data, vocab_size=50)
    with pytest.raises(UserError, match=r"model.vocab_size \(50\) is smaller than the tokenizer's"):
        export(run, tmp_path / "out")
    assert not (tmp_path / "out").exists()
