"""DeBERTa-v3's gradient-disentangled embedding sharing (`objective.embedding_sharing: gdes`): the
discriminator reads stop-gradient(the generator's word table) + a residual of its own, so the
generator's masked LM alone trains the shared table and the discriminator's loss the residual alone;
the pair starts equal to a `tied` one, saves and loads back exactly, exports its discriminator with
the summed table (transformers' logits equal) and reads the export back as a `gdes` pair."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _killed_run import pretrain_dying_after

import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.model.replaced_token import ReplacedTokenDetection
from bertpre.train.objectives.rtd import replaced_token_sums

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
TINY_ELECTRA = ROOT / "configs" / "tiny-electra.yaml"
WORD = "electra.embeddings.word_embeddings"


def pair(sharing: str, seed: int = 0) -> ReplacedTokenDetection:
    config = load_config(TINY, ["data.objective=rtd", "data.pair_task=none", "model.vocab_size=100",
                                "model.hidden_dropout_prob=0", "model.attention_probs_dropout_prob=0"]).model
    torch.manual_seed(seed)
    return ReplacedTokenDetection(config, 0.25, sharing)


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, 100, (3, 16), generator=generator)
    positions = torch.tensor([[1, 4, 9], [2, 3, 11], [5, 8, 0]])
    original = input_ids.gather(1, positions)
    original[2, 2] = -100  # an unused slot
    return {"input_ids": input_ids.scatter(1, positions, 4), "token_type_ids": torch.zeros_like(input_ids),
            "attention_mask": torch.ones_like(input_ids), "masked_lm_positions": positions, "masked_lm_ids": original}


def sums(model: ReplacedTokenDetection) -> tuple[torch.Tensor, torch.Tensor]:
    noise = torch.Generator().manual_seed(2)
    mlm, rtd, _ = replaced_token_sums(model, batch(), lambda logits: torch.rand(logits.shape, generator=noise))
    return mlm, rtd


def test_a_gdes_pair_starts_as_the_tied_pair_and_has_one_residual_table_more():
    tied, gdes = pair("tied"), pair("gdes")
    assert gdes.electra.embeddings is not gdes.generator.electra.embeddings
    for name in ("position_embeddings", "token_type_embeddings", "LayerNorm"):  # tied as ELECTRA ties them
        assert getattr(gdes.electra.embeddings, name) is getattr(gdes.generator.electra.embeddings, name)
    assert gdes.generator.generator_lm_head.weight is gdes.generator.electra.embeddings.word_embeddings.weight
    delta = gdes.electra.embeddings.word_embeddings.delta
    assert not delta.any() and gdes.num_parameters() == tied.num_parameters() + delta.numel()
    for ours, theirs in zip(sums(gdes), sums(tied), strict=True):
        assert torch.equal(ours, theirs)


def test_each_loss_trains_its_own_table():
    model = pair("gdes")
    shared, delta = model.generator.electra.embeddings.word_embeddings.weight, model.electra.embeddings.word_embeddings.delta
    positions = model.electra.embeddings.position_embeddings.weight
    mlm, rtd = sums(model)
    rtd.backward(retain_graph=True)
    assert shared.grad is None or not shared.grad.any()  # the discriminator's loss stops at the shared table
    assert delta.grad.any() and positions.grad.any()
    model.zero_grad(set_to_none=True)
    mlm.backward()
    assert shared.grad.any() and delta.grad is None  # the generator's masked LM never reaches the residual
    # tied: the discriminator's loss reaches the one table
    tied = pair("tied")
    _, rtd = sums(tied)
    rtd.backward()
    assert tied.electra.embeddings.word_embeddings.weight.grad.any()


def test_a_saved_gdes_pair_loads_back_exactly(tmp_path):
    model = pair("gdes")
    with torch.no_grad():
        model.electra.embeddings.word_embeddings.delta.normal_(std=0.1)
    model.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["bertpre_replaced_token_detection"][
        "embedding_sharing"] == "gdes"
    loaded = ReplacedTokenDetection.from_pretrained(tmp_path)
    assert loaded.embedding_sharing == "gdes"
    for (name, tensor), (other, loaded_tensor) in zip(model.state_dict().items(), loaded.state_dict().items(),
                                                      strict=True):
        assert name == other and torch.equal(tensor, loaded_tensor), name
    assert loaded.generator.generator_lm_head.weight is loaded.generator.electra.embeddings.word_embeddings.weight


def run(data: Path, out: Path, steps: int, *extra: str, stop_after: int | None = None, monkeypatch=None) -> list[dict]:
    config = load_config(TINY_ELECTRA, [f"data.path={data}", f"train.out={out}", f"train.max_steps={steps}",
                                        "train.log_every=1", "train.eval_every=1000", "train.save_every=2",
                                        "data.max_seq_length=32", "objective.embedding_sharing=gdes", *extra])
    if stop_after is not None:
        pretrain_dying_after(config, stop_after, monkeypatch)
    trainer.pretrain(config)
    return [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "train/loss" in row]


def test_a_gdes_run_resumes_bit_for_bit_and_exports_its_summed_table(tiny_data, tmp_path, one_thread, monkeypatch):
    transformers = pytest.importorskip("transformers")
    from bertpre.model.families import load_pretraining_model
    from bertpre.tools.export import export

    straight = run(tiny_data, tmp_path / "straight", 4)
    resumed = run(tiny_data, tmp_path / "resumed", 4, stop_after=2, monkeypatch=monkeypatch)
    assert [row["train/loss"] for row in resumed] == [row["train/loss"] for row in straight]
    checkpoint = tmp_path / "straight" / "checkpoints" / "step-00000004"
    model = ReplacedTokenDetection.from_pretrained(checkpoint).eval()
    other = ReplacedTokenDetection.from_pretrained(tmp_path / "resumed" / "checkpoints" / "step-00000004")
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), other.state_dict().values(), strict=True))
    delta = model.electra.embeddings.word_embeddings.delta
    assert delta.any()  # the discriminator trained its residual

    out = tmp_path / "export"
    export(tmp_path / "straight", out)
    discriminator = transformers.AutoModelForPreTraining.from_pretrained(out).eval()
    generator = transformers.AutoModelForMaskedLM.from_pretrained(out / "generator").eval()
    shared = model.generator.electra.embeddings.word_embeddings.weight
    torch.testing.assert_close(discriminator.electra.embeddings.word_embeddings.weight, shared + delta,
                               atol=0, rtol=0)
    torch.testing.assert_close(generator.electra.embeddings.word_embeddings.weight, shared, atol=0, rtol=0)
    inputs = batch()
    with torch.no_grad():
        ours = model.discriminate(inputs["input_ids"], inputs["attention_mask"], inputs["token_type_ids"])
        theirs = discriminator(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                               token_type_ids=inputs["token_type_ids"]).logits
    assert (theirs - ours).abs().max() < 1e-5
    loaded = load_pretraining_model(out)  # the export reads back as the gdes pair it was
    assert loaded.embedding_sharing == "gdes"
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, atol=1e-7, rtol=0, msg=name)
