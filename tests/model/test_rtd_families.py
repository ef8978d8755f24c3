"""Replaced-token detection on the BERT, RoBERTa and ModernBERT rows (`Family.replaced_token`): the
pair built from the row (RoBERTa's and ModernBERT's: the family's encoder, its masked-LM model as
the generator at the discriminator's width, the embeddings shared), a tiny run resuming bit for
bit, its export as transformers' classes (`AutoModel` for the encoder, `AutoModelForMaskedLM` for
`generator/`) with equal outputs, fill-mask, evaluate and fine-tuning reading it, and XLNet refused
in one line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from _in_process import run_main
from _killed_run import pretrain_dying_after
from safetensors.torch import load_file

import bertpre.train.trainer as trainer
from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.inventory import read_inventory
from bertpre.model.families import load_encoder_weights, load_pretraining_model
from bertpre.model.replaced_token import DisentangledEmbedding, ReplacedTokenDetection
from bertpre.tools import inference
from bertpre.tools.export import export

transformers = pytest.importorskip("transformers")

RTD = ["data.objective=rtd", "data.pair_task=none", "objective.generator_size=0.5"]
# (preset, settings, the generator's class, its encoder's attribute, the word table, the encoder's class)
ROWS = {
    # BERT's generator is ELECTRA's network (narrower, through ELECTRA's projection): ElectraForMaskedLM
    "bert": ("tiny", ["data.max_seq_length=32"], "ElectraForMaskedLM", "electra", "word_embeddings", "BertModel"),
    "roberta": ("tiny", ["model.architecture=roberta", "model.max_position_embeddings=34", "data.max_seq_length=32"],
                "RobertaForMaskedLM", "roberta", "word_embeddings", "RobertaModel"),
    "modernbert": ("tiny-modernbert", ["data.max_seq_length=32"],
                   "ModernBertForMaskedLM", "model", "tok_embeddings", "ModernBertModel"),
}
# XLM-R is RoBERTa's network under its own names: built and exported, not trained again here
BUILT = {**ROWS, "xlm-roberta": ("tiny", ["model.architecture=xlm-roberta", "model.max_position_embeddings=34",
                                          "data.max_seq_length=32"],
                                 "RobertaForMaskedLM", "roberta", "word_embeddings", "RobertaModel")}


def rtd_config(architecture: str, *overrides: str):
    preset, settings, *_ = BUILT[architecture]
    return load_config(preset, [*RTD, *settings, *overrides])


@pytest.mark.parametrize("sharing", ["tied", "gdes"])
@pytest.mark.parametrize("architecture", ["roberta", "xlm-roberta", "modernbert"])
def test_the_pair_is_built_from_the_family_row(architecture, sharing):
    _, _, generator_class, encoder_attribute, word_table, encoder_class = BUILT[architecture]
    config = rtd_config(architecture, "model.vocab_size=100", f"objective.embedding_sharing={sharing}").model
    torch.manual_seed(0)
    pair = ReplacedTokenDetection(config, 0.5, sharing)
    generator = pair.generator
    assert (type(pair.electra).__name__, type(generator).__name__) == (encoder_class, generator_class)
    # the discriminator's width, half its layers (rounded): no projection, which transformers' class lacks
    assert generator.config.hidden_size == config.hidden_size
    assert generator.config.num_hidden_layers == round(config.num_hidden_layers * 0.5)
    shared, own = pair.electra.embeddings, getattr(generator, encoder_attribute).embeddings
    decoder = generator.decoder if architecture == "modernbert" else generator.lm_head.decoder
    if sharing == "tied":
        assert own is shared
    else:  # the generator's table itself, the discriminator's through a residual; the rest shared
        assert own is not shared and isinstance(getattr(shared, word_table), DisentangledEmbedding)
        assert getattr(shared, word_table).source is getattr(own, word_table)
        assert all(getattr(own, name) is getattr(shared, name) for name, _ in own.named_children() if name != word_table)
    assert decoder.weight is getattr(own, word_table).weight
    ids = torch.randint(5, 100, (2, 12))
    assert pair.discriminate(ids, None, torch.zeros_like(ids)).shape == (2, 12)
    pair.set_gradient_checkpointing(True)  # both encoders' switches, wherever the family keeps them
    switches = [module.gradient_checkpointing for module in pair.modules() if hasattr(module, "gradient_checkpointing")]
    assert len(switches) == 2 and all(switches)


@pytest.mark.parametrize("architecture", list(BUILT))
def test_the_generator_s_loss_is_never_chunked_since_rtd_samples_from_its_logits(architecture):
    """`model.loss_chunk_rows` chunks the discriminator's family's masked LM in training; the
    generator's training forward must still give its logits (the objective draws from them)."""
    from bertpre.train.objectives.rtd import replaced_token_sums

    config = rtd_config(architecture, "model.vocab_size=100", "model.loss_chunk_rows=2").model
    torch.manual_seed(0)
    pair = ReplacedTokenDetection(config, 0.5).train()
    assert pair.generator.config.loss_chunk_rows == 0
    ids = torch.randint(5, 100, (2, 12))
    positions = torch.tensor([[1, 3, 5, 7], [2, 4, 6, 8]])
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "masked_lm_positions": positions,
             "masked_lm_ids": ids.gather(1, positions)}
    mlm_sum, rtd_sum, sums = replaced_token_sums(pair, batch, lambda logits: torch.rand_like(logits))
    assert torch.isfinite(mlm_sum) and torch.isfinite(rtd_sum) and sums.shape == (6,)


def run(data: Path, out: Path, architecture: str, *, stop_after: int | None = None, monkeypatch=None) -> list[dict]:
    config = rtd_config(architecture, f"data.path={data}", f"train.out={out}", "train.max_steps=4",
                        "train.log_every=1", "train.eval_every=1000", "train.save_every=2")
    if stop_after is not None:
        pretrain_dying_after(config, stop_after, monkeypatch)
    trainer.pretrain(config)
    return [row for row in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if "train/loss" in row]


@pytest.fixture(scope="module", params=list(ROWS))
def family_run(request, tiny_data, tmp_path_factory) -> tuple[str, Path, list[dict]]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = tmp_path_factory.mktemp(request.param) / "run"
        return request.param, out, run(tiny_data, out, request.param)
    finally:
        torch.set_num_threads(threads)


def test_a_tiny_rtd_run_of_the_row_has_finite_terms_and_resumes_bit_for_bit(family_run, tiny_data, tmp_path,
                                                                             one_thread, monkeypatch):
    architecture, straight_out, straight = family_run
    assert [row["step"] for row in straight] == [1, 2, 3, 4]
    for row in straight:
        assert all(torch.isfinite(torch.tensor(row[name])) for name in ("train/loss", "train/mlm_loss",
                                                                          "train/rtd_loss"))
        assert row["train/loss"] == pytest.approx(row["train/mlm_loss"] + 50 * row["train/rtd_loss"], rel=1e-12)
    resumed = run(tiny_data, tmp_path / "resumed", architecture, stop_after=2, monkeypatch=monkeypatch)
    assert [{k: v for k, v in row.items() if k.startswith("train/")} for row in resumed] == \
        [{k: v for k, v in row.items() if k.startswith("train/")} for row in straight]
    final = "checkpoints/step-00000004/model.safetensors"
    a, b = load_file(straight_out / final), load_file(tmp_path / "resumed" / final)
    assert a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)
    assert any(name.startswith("generator.") for name in a)  # both networks


@pytest.fixture(scope="module")
def family_export(family_run, tmp_path_factory) -> tuple[str, Path, Path, object]:
    architecture, run_folder, _ = family_run
    out = tmp_path_factory.mktemp(f"{architecture}-export") / "export"
    return architecture, run_folder, out, export(run_folder, out)


def padded_batch(vocab_size: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, vocab_size, (2, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:] = 0
    input_ids[attention_mask == 0] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def test_the_export_is_the_family_s_encoder_and_masked_lm_with_equal_outputs(family_export):
    architecture, run_folder, out, summary = family_export
    _, _, generator_class, _, _, encoder_class = ROWS[architecture]
    assert summary.architecture == f"{encoder_class} + generator/ {generator_class}"
    assert summary.note.startswith("the discriminator head (discriminator_predictions) is not a transformers "
                                   "class: kept in discriminator_head.safetensors")
    pair = ReplacedTokenDetection.from_pretrained(run_folder / "checkpoints" / "step-00000004").eval()
    assert json.loads((out / "config.json").read_text())["architectures"] == [encoder_class]
    encoder, loading = transformers.AutoModel.from_pretrained(out, output_loading_info=True)
    assert type(encoder).__name__ == encoder_class
    # BertModel's and RobertaModel's pooler, which the discriminator has not, alone is drawn fresh
    pooler = {"pooler.dense.weight", "pooler.dense.bias"} if architecture != "modernbert" else set()
    assert set(loading.pop("missing_keys")) == pooler
    assert all(len(keys) == 0 for keys in loading.values()), loading
    generator, loading = transformers.AutoModelForMaskedLM.from_pretrained(out / "generator", output_loading_info=True)
    assert type(generator).__name__ == generator_class
    assert all(len(keys) == 0 for keys in loading.values()), loading
    inputs = padded_batch(pair.config.vocab_size)
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        states = pair.electra(inputs["input_ids"], inputs["attention_mask"])
        states = getattr(states, "last_hidden_state", states)
        torch.testing.assert_close(encoder.eval()(**inputs).last_hidden_state[real], states[real], atol=1e-5, rtol=0)
        ours = pair.generator(inputs["input_ids"], inputs["attention_mask"]).prediction_logits
        torch.testing.assert_close(generator.eval()(**inputs).logits[real], ours[real], atol=1e-5, rtol=0)
    head = load_file(out / "discriminator_head.safetensors")
    assert set(head) == {name for name in pair.state_dict() if name.startswith("discriminator_predictions.")}
    assert all(torch.equal(tensor, pair.state_dict()[name]) for name, tensor in head.items())
    listed = set(read_inventory(out, "export", ()).files)
    assert {"config.json", "model.safetensors", "discriminator_head.safetensors", "generator/config.json",
            "generator/model.safetensors", "generator/tokenizer.json"} <= listed
    # fine-tuning starts from the discriminator's encoder (BERT's pooler, which it has not, drawn fresh)
    state, fresh = load_encoder_weights(out, pair.config)
    assert fresh == (["pooler.dense.weight", "pooler.dense.bias"] if architecture == "bert" else [])
    assert all(torch.equal(tensor, pair.electra.state_dict()[name]) for name, tensor in state.items() if name not in fresh)


@pytest.mark.parametrize("architecture", list(BUILT))
def test_a_gdes_pair_exports_the_discriminator_s_table_and_the_generator_s(architecture, tiny_data, tmp_path):
    from bertpre.model.families import family

    config = rtd_config(architecture, "objective.embedding_sharing=gdes").model
    config.vocab_size = 120
    torch.manual_seed(0)
    pair = ReplacedTokenDetection(config, 0.5, "gdes").eval()
    word_table = BUILT[architecture][4]
    with torch.no_grad():
        getattr(pair.electra.embeddings, word_table).delta.normal_(std=0.1)  # as training leaves it: tables differ
    _, write = family(config).export_writer(pair, tiny_data / "tokenizer")
    write(tmp_path)
    encoder = transformers.AutoModel.from_pretrained(tmp_path).eval()
    assert type(encoder).__name__ == {"xlm-roberta": "XLMRobertaModel"}.get(architecture, BUILT[architecture][5])
    generator = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "generator").eval()
    inputs = padded_batch(config.vocab_size)
    real = inputs["attention_mask"].bool()
    with torch.no_grad():
        states = pair.electra(inputs["input_ids"], inputs["attention_mask"])
        states = getattr(states, "last_hidden_state", states)
        torch.testing.assert_close(encoder(**inputs).last_hidden_state[real], states[real], atol=1e-5, rtol=0)
        ours = pair.generator(inputs["input_ids"], inputs["attention_mask"]).prediction_logits
        torch.testing.assert_close(generator(**inputs).logits[real], ours[real], atol=1e-5, rtol=0)
    assert not torch.equal(encoder.get_input_embeddings().weight, generator.get_input_embeddings().weight)


def test_fill_mask_reads_the_generator_of_the_run_and_of_its_export(family_export, monkeypatch, capsys):
    architecture, run_folder, out, _ = family_export
    assert type(load_pretraining_model(out)).__name__ == {"bert": "ElectraGenerator"}.get(architecture,
                                                                                           ROWS[architecture][2])
    text = "the [MASK] sees the river ."
    model, tokenizer = inference.load_model_and_tokenizer(out)
    from_export = inference.fill_mask(model, tokenizer, text, top_k=3)
    model, tokenizer = inference.load_model_and_tokenizer(run_folder)
    assert isinstance(model, ReplacedTokenDetection)
    assert inference.fill_mask(model, tokenizer, text, top_k=3) == from_export
    code, stdout, stderr = run_main(["fill-mask", out, text], monkeypatch, capsys)
    assert code == 0, stderr
    assert from_export[0][0].token in stdout


def test_the_export_command_prints_where_the_discriminator_head_is(family_run, tmp_path, monkeypatch, capsys):
    _, run_folder, _ = family_run
    code, stdout, stderr = run_main(["export", run_folder, "--out", tmp_path / "export"], monkeypatch, capsys)
    assert code == 0, stderr
    assert stdout.splitlines()[-1].startswith("the discriminator head (discriminator_predictions) is not a "
                                              "transformers class: kept in discriminator_head.safetensors")


def test_xlnet_has_no_replaced_token_detection():
    with pytest.raises(UserError, match="model.architecture xlnet trains with data.objective plm or clm, not rtd") \
            as error:
        load_config("tiny", ["model.architecture=xlnet", *RTD])
    assert "\n" not in str(error.value)
    config = load_config("tiny", ["model.architecture=xlnet", "data.objective=plm", "data.pair_task=none",
                                  "model.vocab_size=100"]).model
    with pytest.raises(UserError, match="^model.architecture xlnet has no replaced-token detection "
                                        r"\(data.objective rtd\); use one of bert, roberta, xlm-roberta, "
                                        "modernbert, electra$"):
        ReplacedTokenDetection(config, 0.5)


def test_evaluate_scores_the_run_with_the_rtd_metrics_and_the_export_s_generator_as_a_masked_lm(
        family_export, tiny_data, monkeypatch, capsys):
    _, run_folder, out, _ = family_export
    scores = []
    for args, names in ((["evaluate", run_folder], {"mlm_loss", "rtd_loss", "rtd_acc", "replaced_share"}),
                        (["evaluate", out, "--data", tiny_data], {"mlm_loss", "perplexity", "mlm_acc"})):
        code, stdout, stderr = run_main(args, monkeypatch, capsys)
        assert code == 0, stderr
        values = dict(line.split() for line in stdout.splitlines() if line.strip())
        assert names <= set(values)
        scores.append(float(values["mlm_loss"]))
    assert all(0 < score < 10 for score in scores)


def test_fine_tuning_reads_a_run_as_its_discriminator_s_encoder(family_run):
    """`bertpre finetune RUN` (and the benches that probe a run) reads the pair's discriminator:
    the encoder's tensors equal the pair's `electra.…`; only BERT's pooler, which the
    discriminator never had, is drawn fresh."""
    from bertpre.finetune.source import load_encoder

    _, run_folder, _ = family_run
    encoder = load_encoder(run_folder)
    pair = ReplacedTokenDetection.from_pretrained(run_folder / "checkpoints" / "step-00000004")
    discriminator = {name.removeprefix("electra."): tensor for name, tensor in pair.discriminator_state().items()
                     if name.startswith("electra.")}
    read = [name for name in encoder.state if not name.startswith("pooler.")]
    assert set(read) <= discriminator.keys()
    assert len(read) > 10 and all(torch.equal(encoder.state[name], discriminator[name]) for name in read)
