"""ELECTRA's replaced-token detection (`data.objective: rtd`): its own config keys, the generator
and discriminator as one module sharing its embeddings, a tiny run's named terms and statistics,
a run stopped after a checkpoint continuing bit for bit, the step compiled as one graph, and two
DDP processes continuing bit for bit."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _gloo import run_two_gloo_processes
from _killed_run import pretrain_dying_after

import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX
from bertpre.model.replaced_token import ReplacedTokenDetection
from bertpre.train.objectives import objective_for
from bertpre.train.objectives.rtd import (
    AUC_BINS,
    histogram_auc,
    logit_histogram,
    replaced_token_sums,
    sample_tokens,
)

ROOT = Path(__file__).parents[2]
TINY = ROOT / "configs" / "tiny.yaml"
RTD = ["data.objective=rtd", "data.pair_task=none"]


def rtd_config(*overrides: str):
    return load_config(TINY, [*RTD, *overrides])


def test_the_objective_s_keys_take_their_defaults_and_set_values():
    config = rtd_config()
    assert (config.objective.generator_size, config.objective.rtd_weight, config.objective.embedding_sharing) == (
        0.25, 50.0, "tied")
    assert config.to_dict()["objective"] == {"generator_size": 0.25, "rtd_weight": 50.0, "embedding_sharing": "tied"}
    config = rtd_config("objective.rtd_weight=20", "objective.generator_size=0.5")
    assert (config.objective.rtd_weight, config.objective.generator_size) == (20.0, 0.5)
    assert objective_for("rtd", config.objective).terms[1].weight == 20.0


def test_an_objective_without_keys_writes_no_objective_section():
    config = load_config(TINY)
    assert config.objective is None and "objective" not in config.to_dict()


@pytest.mark.parametrize(("overrides", "message"), [
    (["objective.rtd_weight=.nan"], "objective.rtd_weight must be a finite number"),
    (["objective.rtd_weight=-1"], "objective.rtd_weight must be a finite number of at least 0"),
    (["objective.generator_size=2"], r"objective.generator_size must be in \(0, 1\]"),
    (["objective.generator_size=0.3"], "hidden_size 19.2 .* must be whole numbers"),
    (["model.hidden_size=320", "objective.generator_size=0.625"], "hidden size 200 is not divisible by its 3 heads"),
    (["objective.generator_sise=0.5"], "did you mean 'generator_size'"),
    (["objective.embedding_sharing=shared"], "use one of tied, gdes"),
    (["data.pair_task=nsp"], "rtd trains no sentence-pair task"),
    (["model.unpad=true"], "set model.unpad: false"),
])
def test_bad_rtd_keys_are_refused_in_one_line(overrides, message):
    with pytest.raises(UserError, match=message) as error:
        rtd_config(*overrides)
    assert "\n" not in str(error.value)


def test_another_objective_s_key_is_refused_naming_the_objective_that_has_it():
    with pytest.raises(UserError, match="objective.rtd_weight is data.objective rtd's key, and this config's "
                                        "objective is mlm"):
        load_config(TINY, ["objective.rtd_weight=20"])


def test_the_pair_shares_one_embedding_module_and_has_electra_s_names():
    config = rtd_config().model
    config.vocab_size = 100
    torch.manual_seed(0)
    pair = ReplacedTokenDetection(config, 0.25)
    generator = pair.generator
    assert generator.electra.embeddings is pair.electra.embeddings
    word = pair.electra.embeddings.word_embeddings.weight
    assert generator.generator_lm_head.weight is word
    assert (generator.config.hidden_size, generator.config.num_attention_heads,
            generator.config.intermediate_size, generator.config.embedding_size) == (16, 1, 64, 64)
    # the generator's width differs from the embeddings': projected (ELECTRA's embeddings_project)
    assert generator.electra.encoder.embedding_hidden_mapping_in.weight.shape == (16, 64)
    names = set(dict(pair.named_parameters()))
    assert {"discriminator_predictions.dense.weight", "discriminator_predictions.dense_prediction.weight",
            "generator.generator_predictions.dense.weight", "generator.generator_lm_head.bias"} <= names
    assert not any(name.startswith("generator.electra.embeddings.") for name in names)  # counted once
    ids = torch.randint(5, 100, (2, 12))
    assert pair.discriminate(ids, None, torch.zeros_like(ids)).shape == (2, 12)


def test_a_saved_pair_loads_back_exactly(tmp_path):
    config = rtd_config().model
    config.vocab_size = 100
    torch.manual_seed(0)
    pair = ReplacedTokenDetection(config, 0.5)
    pair.save_pretrained(tmp_path)
    loaded = ReplacedTokenDetection.from_pretrained(tmp_path)
    assert loaded.generator.config.hidden_size == 32
    assert loaded.generator.electra.embeddings is loaded.electra.embeddings
    for (name, tensor), (other, loaded_tensor) in zip(pair.state_dict().items(), loaded.state_dict().items(),
                                                      strict=True):
        assert name == other and torch.equal(tensor, loaded_tensor), name


def test_samples_follow_the_generator_s_distribution():
    logits = torch.log(torch.tensor([0.7, 0.2, 0.1])).expand(20000, 3)
    torch.manual_seed(0)
    drawn = sample_tokens(logits, torch.rand(20000, 3))
    shares = torch.bincount(drawn, minlength=3) / 20000
    torch.testing.assert_close(shares, torch.tensor([0.7, 0.2, 0.1]), atol=0.015, rtol=0)


def test_the_labels_are_the_tokens_the_generator_changed(monkeypatch):
    """A discriminator that sees the original text calls exactly the changed tokens replaced: every
    call right, every replaced token caught, AUC 1. Labels a position off, or counting a sample equal
    to the original, or an unused slot's write-back as replaced, would miss."""
    config = rtd_config("model.vocab_size=60").model
    torch.manual_seed(0)
    pair = ReplacedTokenDetection(config, 0.5).train()
    original = torch.randint(5, 60, (2, 12))
    positions = torch.tensor([[1, 3, 5, 7], [2, 4, 6, 0]])  # the second row's last slot unused
    targets = original.gather(1, positions)
    targets[1, 3] = IGNORE_INDEX
    masked = original.scatter(1, positions[:, :3], 4)  # [MASK] where predicted; position 0 untouched
    seen = {}

    def oracle(corrupted, attention_mask, token_type_ids):
        seen["corrupted"] = corrupted
        return torch.where(corrupted != original, 20.0, -20.0)

    monkeypatch.setattr(pair, "discriminate", oracle)

    def noise(logits):  # the first slot's Gumbel noise picks its original token: a sample equal to it
        uniform = torch.rand(logits.shape, generator=torch.Generator().manual_seed(1))
        uniform[0, 0, targets[0, 0]] = 1 - 2**-24
        return uniform

    histogram = torch.zeros(2, AUC_BINS, dtype=torch.float64)
    batch = {"input_ids": masked, "token_type_ids": torch.zeros_like(masked), "masked_lm_positions": positions,
             "masked_lm_ids": targets}
    *_, sums = replaced_token_sums(pair, batch, noise, histogram=histogram)
    _, _, _, correct, caught, replaced = sums.tolist()
    changed = int((seen["corrupted"] != original).sum())
    assert seen["corrupted"][0, 1] == original[0, 1]  # sampled back: an original token
    assert torch.equal(seen["corrupted"][:, 0], original[:, 0])  # the unused slot wrote its token back
    assert 0 < changed <= 6 and replaced == caught == changed and correct == original.numel()
    assert histogram_auc(histogram[0].tolist(), histogram[1].tolist()) == 1.0


def auc_of(logits: torch.Tensor, replaced: torch.Tensor, real: torch.Tensor | None = None) -> float:
    counts = logit_histogram(logits, replaced, torch.ones_like(replaced) if real is None else real)
    assert counts.shape == (2, AUC_BINS)
    return histogram_auc(counts[0].tolist(), counts[1].tolist())


def test_the_discriminator_s_auc_from_its_histogram_is_the_ranking_s():
    from sklearn.metrics import roc_auc_score

    generator = torch.Generator().manual_seed(0)
    replaced = torch.rand(4000, generator=generator) < 0.12
    logits = torch.randn(4000, generator=generator) * 3 - 2 + 2.5 * replaced  # replaced tokens score higher
    expected = roc_auc_score(replaced.numpy(), logits.numpy())
    assert 0.7 < expected < 0.95
    assert auc_of(logits, replaced) == pytest.approx(expected, abs=1e-3)
    # padding is not counted: flipping every padded token's label leaves the figure alone
    real = torch.rand(4000, generator=generator) < 0.8
    assert auc_of(logits, replaced ^ ~real, real) == pytest.approx(
        roc_auc_score(replaced[real].numpy(), logits[real].numpy()), abs=1e-3)
    # ranked first, last, or not at all; logits past the range count in the end bins
    separated = torch.tensor([-40.0, -3.0, 1.0, 50.0])
    assert auc_of(separated, torch.tensor([False, False, True, True])) == 1.0
    assert auc_of(separated, torch.tensor([True, True, False, False])) == 0.0
    assert auc_of(torch.zeros(10), torch.arange(10) < 3) == 0.5
    assert torch.isnan(torch.tensor(auc_of(separated, torch.zeros(4, dtype=torch.bool))))


def run(data: Path, out: Path, steps: int, *extra: str, stop_after: int | None = None, monkeypatch=None) -> list[dict]:
    config = load_config(TINY, [f"data.path={data}", f"train.out={out}", f"train.max_steps={steps}",
                                "train.log_every=1", "train.eval_every=1000", *RTD, *extra])
    if stop_after is not None:
        pretrain_dying_after(config, stop_after, monkeypatch)
    trainer.pretrain(config)
    return [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "train/loss" in row]


def test_a_tiny_rtd_run_logs_its_named_terms_and_resumes_bit_for_bit(tiny_data, tmp_path, one_thread, monkeypatch):
    extra = ("train.save_every=2", "objective.rtd_weight=20")
    straight = run(tiny_data, tmp_path / "straight", 4, *extra)
    assert [row["step"] for row in straight] == [1, 2, 3, 4]
    for row in straight:
        assert row["train/loss"] == pytest.approx(row["train/mlm_loss"] + 20 * row["train/rtd_loss"], rel=1e-12)
        assert 0.05 < row["train/replaced_share"] < 0.2  # the masked 15%, less the samples equal to the original
        assert 0 <= row["train/rtd_acc_replaced"] <= 1 and 0 <= row["train/rtd_acc_original"] <= 1
        caught = row["train/replaced_share"] * row["train/rtd_acc_replaced"]  # the same sums, another way
        wrong = (1 - row["train/replaced_share"]) * (1 - row["train/rtd_acc_original"])
        assert row["train/rtd_precision"] == pytest.approx(caught / (caught + wrong) if caught + wrong else 0.0)
    resumed = run(tiny_data, tmp_path / "resumed", 4, *extra, stop_after=2, monkeypatch=monkeypatch)
    def trained(rows: list[dict]) -> list[dict]:
        return [{name: value for name, value in row.items() if name.startswith("train/")} for row in rows]

    assert trained(resumed) == trained(straight)
    first = ReplacedTokenDetection.from_pretrained(tmp_path / "straight" / "checkpoints" / "step-00000004")
    second = ReplacedTokenDetection.from_pretrained(tmp_path / "resumed" / "checkpoints" / "step-00000004")
    for (name, tensor), other in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(tensor, other), name  # both networks
    optimizer = [torch.load(tmp_path / run_dir / "checkpoints" / "step-00000004" / "optimizer.pt", weights_only=True)
                 for run_dir in ("straight", "resumed")]
    for state, other in zip(optimizer[0]["state"].values(), optimizer[1]["state"].values(), strict=True):
        assert all(torch.equal(state[key], other[key]) for key in state)


@pytest.mark.slow
def test_a_tiny_rtd_discriminator_learns_to_find_the_replaced_tokens(tiny_data, tmp_path, one_thread):
    """600 steps on the tiny grammar (about 45 s): on held-out documents the discriminator catches
    far more replaced tokens than the share replaced, and what it calls replaced mostly was; a
    discriminator whose labels missed the replacements would score the share and an AUC of 0.5.
    Rotary positions: at this size learned absolute ones leave it at the prior for 1,500 steps."""
    out = tmp_path / "run"
    run(tiny_data, out, 600, "model.position_embedding_type=rope", "train.log_every=100", "train.eval_every=600",
        "train.save_every=600")
    (scores,) = [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
                 if "eval/rtd_auc" in row]
    share = scores["eval/replaced_share"]
    assert 0.08 < share < 0.15
    assert scores["eval/rtd_acc_replaced"] > 2 * share
    assert scores["eval/rtd_precision"] > 3 * share
    assert scores["eval/rtd_auc"] > 0.8


def test_export_refuses_a_bert_rtd_run_no_transformers_class_holds_in_one_line(tiny_data, tmp_path, one_thread):
    from bertpre.tools.export import export

    run(tiny_data, tmp_path / "run", 1, "train.save_every=1", "model.position_embedding_type=rope")
    with pytest.raises(UserError, match="^an rtd run of BERT exports its encoder as BertModel and its generator as "
                                        "ElectraForMaskedLM, which have absolute positions and no ALBERT options; "
                                        "this run has relative positions, and no transformers class holds it$"):
        export(tmp_path / "run", tmp_path / "export")
    assert not (tmp_path / "export").exists()


def test_the_compiled_rtd_step_is_one_graph_and_trains_as_the_eager_one(tiny_data, tmp_path):
    """train.compile on the pair (compiled by default on a CUDA GPU): the generator's sampling,
    the labels and both losses in one graph, compiled once over batches of different lengths, giving
    the eager step's losses where the compiled code draws the eager step's random numbers."""
    from torch._dynamo.utils import counters
    from torch._inductor import config as inductor_config

    torch._dynamo.reset()
    counters.clear()
    steps = ("train.save_every=1000", "model.hidden_dropout_prob=0.0", "model.attention_probs_dropout_prob=0.0")
    # torch's own draws, not Inductor's; its config's own patch (monkeypatch's undo deletes the key)
    with inductor_config.patch(fallback_random=True):
        compiled = run(tiny_data, tmp_path / "compiled", 4, *steps, "train.compile=true")
    graph_breaks, stats = dict(counters["graph_break"]), dict(counters["stats"])
    torch._dynamo.reset()
    assert graph_breaks == {}
    assert stats["unique_graphs"] == 1  # compiled at the first step, never again
    eager = run(tiny_data, tmp_path / "eager", 4, *steps)
    for name in ("train/loss", "train/mlm_loss", "train/rtd_loss", "train/replaced_share"):
        assert [row[name] for row in compiled] == pytest.approx([row[name] for row in eager], abs=2e-3), name


def ddp_rtd_run(data: Path, out: Path, steps: int) -> None:
    """`bertpre pretrain` of the tiny pair in two gloo processes, to step `steps` (a run folder with a
    checkpoint continues); warmup (30 steps) outlasts the run, so the schedule is the same at 2 and 4."""
    settings = [*RTD, "train.batch_size=16", "train.micro_batch_size=4", f"train.max_steps={steps}",
                "train.save_every=2", "train.log_every=1", "train.eval_every=1000", "data.num_workers=0"]
    run_two_gloo_processes(["pretrain", "--config", TINY, "--data", data, "--out", out,
                            *[arg for item in settings for arg in ("--set", item)]])


def test_two_gloo_processes_train_the_pair_and_continue_it_bit_for_bit(tiny_data, tmp_path):
    """DDP over the pair: each process draws its own samples and keeps its own random state, so a
    run stopped at step 2 and continued ends where the straight run does, both networks alike."""
    ddp_rtd_run(tiny_data, tmp_path / "straight", 4)
    ddp_rtd_run(tiny_data, tmp_path / "continued", 2)
    ddp_rtd_run(tiny_data, tmp_path / "continued", 4)
    rows = {name: [row for row in map(json.loads, (tmp_path / name / "metrics.jsonl").read_text().splitlines())
                   if "train/loss" in row] for name in ("straight", "continued")}
    assert [row["step"] for row in rows["continued"]] == [1, 2, 3, 4]
    assert [row["train/rtd_loss"] for row in rows["continued"]] == [row["train/rtd_loss"] for row in rows["straight"]]
    assert all(0.05 < row["train/replaced_share"] < 0.2 for row in rows["straight"])
    checkpoint = tmp_path / "straight" / "checkpoints" / "step-00000004"
    assert {path.name for path in checkpoint.glob("rng_state_*.pt")} == {"rng_state_0.pt", "rng_state_1.pt"}
    first = ReplacedTokenDetection.from_pretrained(checkpoint)
    second = ReplacedTokenDetection.from_pretrained(tmp_path / "continued" / "checkpoints" / "step-00000004")
    for (name, tensor), other in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(tensor, other), name
