"""RoBERTa and XLM-R (`model.architecture: roberta`, `xlm-roberta`) against transformers' own classes
on the same weights: positions after the padding, the MLM head, the task heads, the folders both
ways, the cost, and the refusals."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model import BertConfig
from bertpre.model.bert_cost import ForwardShape
from bertpre.model.families import (
    FAMILIES,
    family,
    family_of,
    load_encoder_weights,
    load_pretraining_model,
)
from bertpre.model.hf_format import read_config
from bertpre.model.roberta import (
    RobertaEmbeddings,
    RobertaForMaskedLM,
    copy_tokenizer_files,
    read_roberta_weights,
    roberta_export_writer,
    roberta_layout,
    roberta_mask_logits,
    write_roberta_task_folder,
)
from bertpre.model.roberta_heads import (
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
)

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).parents[2]
SHAPE = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
             max_position_embeddings=20, type_vocab_size=1, layer_norm_eps=1e-5)
PAD = 1  # RoBERTa's <pad>: positions start at 2
# <s> <pad> </s> <unk> <mask>, as RoBERTa numbers them, then words
VOCAB = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, **{f"w{i}": 5 + i for i in range(92)}}


def hf_model(kind: str = "RobertaForMaskedLM", seed: int = 0, **changes) -> torch.nn.Module:
    """A transformers model of the tiny shape, every parameter moved off its init value."""
    config_class = transformers.XLMRobertaConfig if kind.startswith("XLM") else transformers.RobertaConfig
    torch.manual_seed(seed)
    model = getattr(transformers, kind)(config_class(**{**SHAPE, "pad_token_id": PAD, **changes}))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """Three rows of 16: unpadded, padded on the right, padded on the left."""
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, 97, (3, 16), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    input_ids[1, 11:], attention_mask[1, 11:] = PAD, 0
    input_ids[2, :6], attention_mask[2, :6] = PAD, 0
    return input_ids, attention_mask


def saved(model: torch.nn.Module, folder: Path) -> Path:
    model.save_pretrained(folder)
    return folder


def test_positions_count_real_tokens_after_the_padding_as_transformers_does():
    input_ids, _ = padded_batch()
    config = BertConfig(**SHAPE, pad_token_id=PAD, architecture="roberta")
    ours = RobertaEmbeddings(config).position_ids(input_ids)
    from transformers.models.roberta.modeling_roberta import RobertaEmbeddings as HFEmbeddings

    theirs = HFEmbeddings.create_position_ids_from_input_ids(input_ids, PAD)
    assert torch.equal(ours, theirs)
    assert ours[0].tolist() == list(range(2, 18))  # 16 real tokens: rows 2 … 17
    assert ours[1].tolist() == list(range(2, 13)) + [PAD] * 5
    assert ours[2].tolist() == [PAD] * 6 + list(range(2, 12))  # the left-padded row starts at 2 too
    with pytest.raises(ValueError, match="exceeds the 18 tokens RoBERTa's 20 positions read"):
        RobertaEmbeddings(config).position_ids(torch.full((1, 19), 7))
    assert config.position_offset == 2 and config.max_tokens == 18


@pytest.mark.parametrize("kind", ["RobertaForMaskedLM", "XLMRobertaForMaskedLM"])
def test_a_masked_lm_folder_gives_transformers_logits_on_padded_rows(kind, tmp_path):
    reference = hf_model(kind)
    folder = saved(reference, tmp_path / "source")
    config = read_config(folder)
    assert config.architecture == ("xlm-roberta" if kind.startswith("XLM") else "roberta")
    ours = load_pretraining_model(folder, strict=True).eval()
    assert isinstance(ours, RobertaForMaskedLM) and family_of(ours) is FAMILIES[config.architecture]
    input_ids, attention_mask = padded_batch()
    with torch.no_grad():
        logits = ours(input_ids, attention_mask).prediction_logits
        expected = reference(input_ids=input_ids, attention_mask=attention_mask).logits
    real = attention_mask.bool()
    torch.testing.assert_close(logits[real], expected[real], rtol=0, atol=1e-5)
    # The left-padded row's real tokens read what the same tokens alone would.
    with torch.no_grad():
        alone = ours(input_ids[2:, 6:]).prediction_logits[0]
    torch.testing.assert_close(logits[2, 6:], alone, rtol=0, atol=1e-5)


def test_pytorch_model_bin_and_a_bare_roberta_model_load_with_the_head_named(tmp_path):
    reference = hf_model()
    binary = tmp_path / "bin"  # an older folder: pytorch_model.bin with the tied decoder in it
    reference.config.save_pretrained(binary)
    torch.save(reference.state_dict(), binary / "pytorch_model.bin")
    ours = RobertaForMaskedLM.from_pretrained(binary, strict=True)
    for name, tensor in reference.state_dict().items():
        torch.testing.assert_close(ours.state_dict()[name], tensor, rtol=0, atol=0, msg=name)

    encoder = saved(hf_model("RobertaModel"), tmp_path / "encoder")  # with its pooler
    with pytest.warns(UserWarning) as said:
        model = RobertaForMaskedLM.from_pretrained(encoder)
    text = " ".join(str(warning.message) for warning in said)
    assert "no weights for lm_head.bias, lm_head.dense.weight" in text and "ignored weights roberta.pooler.dense.bias" in text
    assert model.lm_head.bias.abs().sum() == 0  # the new head keeps its fresh init
    with pytest.raises(UserError, match=r"0 missing|missing"):
        RobertaForMaskedLM.from_pretrained(encoder, strict=True)
    state, missing = load_encoder_weights(encoder, read_config(encoder))
    assert missing == [] and "embeddings.position_embeddings.weight" in state


@pytest.mark.parametrize("kind", ["RobertaForMaskedLM", "XLMRobertaForMaskedLM"])
def test_the_export_loads_natively_with_no_missing_keys_and_the_same_logits(kind, tmp_path):
    ours = RobertaForMaskedLM.from_pretrained(saved(hf_model(kind), tmp_path / "source"))
    train_a_few_steps(ours)
    tokenizer_folder = tmp_path / "tokenizer"
    tokenizer_folder.mkdir()
    tokenizer = roberta_tokenizer()
    tokenizer.save(str(tokenizer_folder / "tokenizer.json"))
    (tokenizer_folder / "merges.txt").write_text("#version: 0.2\n")  # any file of the kind is copied as it is
    architecture, write = roberta_export_writer(ours, tokenizer_folder)
    assert architecture == f"{kind.removesuffix('ForMaskedLM')}ForMaskedLM"
    out = tmp_path / "export"
    out.mkdir()
    assert write(out) == ["tokenizer.json", "merges.txt"]
    for name in ("merges.txt", "tokenizer.json"):  # RoBERTa's own layout: as they are
        assert (out / name).read_bytes() == (tokenizer_folder / name).read_bytes()
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == [architecture] and config["model_type"] == ours.config.architecture
    assert (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"]) == (0, 2, PAD)
    loaded, info = transformers.AutoModelForMaskedLM.from_pretrained(out, output_loading_info=True)
    assert type(loaded).__name__ == architecture
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    input_ids, attention_mask = padded_batch()
    with torch.no_grad():
        theirs = loaded.eval()(input_ids=input_ids, attention_mask=attention_mask).logits
        mine = ours(input_ids, attention_mask).prediction_logits
    real = attention_mask.bool()
    torch.testing.assert_close(mine[real], theirs[real], rtol=0, atol=1e-4)


def train_a_few_steps(model: RobertaForMaskedLM, steps: int = 3) -> None:
    """A few AdamW steps of the masked LM on padded rows, as the trainer takes them (the sparse
    head, Google's position layout), leaving the model in eval mode and its weights moved."""
    input_ids, attention_mask = padded_batch()
    positions = torch.tensor([[1, 4, 9], [0, 3, 10], [6, 8, 15]])
    targets = torch.tensor([[11, 12, 13], [21, 22, -100], [31, 32, 33]])
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    before = model.lm_head.dense.weight.detach().clone()
    model.train()
    for _ in range(steps):
        out = model(input_ids, attention_mask, masked_lm_positions=positions, masked_lm_ids=targets)
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
    assert out.pair_loss is None and out.seq_relationship_logits is None  # no pair head
    assert (model.lm_head.dense.weight - before).abs().max() > 1e-3
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight  # still tied
    model.eval()


HEADS = [(RobertaForSequenceClassification, "RobertaForSequenceClassification", 3),
         (RobertaForTokenClassification, "RobertaForTokenClassification", 5),
         (RobertaForQuestionAnswering, "RobertaForQuestionAnswering", 2)]


@pytest.mark.parametrize(("ours_class", "theirs", "labels"), HEADS)
def test_task_heads_have_transformers_names_and_logits(ours_class, theirs, labels, tmp_path):
    source = RobertaForMaskedLM.from_pretrained(saved(hf_model(), tmp_path / "source"))
    config = source.config
    torch.manual_seed(11)
    model = ours_class(config, labels)
    model.roberta.load_state_dict(source.roberta.state_dict())
    model.eval()
    tokenizer_folder = tmp_path / "tokenizer"
    tokenizer_folder.mkdir()
    roberta_tokenizer().save(str(tokenizer_folder / "tokenizer.json"))
    hf = write_roberta_task_folder(tmp_path / "task", model.state_dict(), config, tokenizer_folder, pooler=False)
    hf.update(architectures=[theirs], num_labels=labels)
    (tmp_path / "task" / "config.json").write_text(json.dumps(hf))
    loaded, info = getattr(transformers, theirs).from_pretrained(tmp_path / "task", output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    input_ids, attention_mask = padded_batch()
    with torch.no_grad():
        out = loaded.eval()(input_ids=input_ids, attention_mask=attention_mask)
        expected = (torch.stack([out.start_logits, out.end_logits], dim=-1)
                    if ours_class is RobertaForQuestionAnswering else out.logits)
        mine = model(input_ids, attention_mask)
    if mine.dim() == 3:  # per token: padding's outputs are no one's to read
        mine, expected = mine[attention_mask.bool()], expected[attention_mask.bool()]
    torch.testing.assert_close(mine, expected, rtol=0, atol=1e-5)


def test_the_sequence_head_reads_s_through_dense_tanh_and_out_proj():
    config = BertConfig(**SHAPE, pad_token_id=PAD, architecture="roberta")
    model = RobertaForSequenceClassification(config, 3)
    assert sorted(name for name in model.state_dict() if not name.startswith("roberta.")) == [
        "classifier.dense.bias", "classifier.dense.weight", "classifier.out_proj.bias", "classifier.out_proj.weight"]
    assert not any("pooler" in name for name in model.state_dict())


def roberta_tokenizer() -> Tokenizer:
    """RoBERTa's special tokens and layout (<s> … </s>) over VOCAB's words."""
    tokenizer = Tokenizer(models.WordPiece(VOCAB, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>", "<mask>"])
    tokenizer.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tokenizer


def test_fill_mask_reads_the_mask_token_as_transformers_does(tmp_path):
    reference = hf_model()
    ours = RobertaForMaskedLM.from_pretrained(saved(reference, tmp_path / "source")).eval()
    text = "w3 w10 <mask> w40 <mask> w7"
    logits = roberta_mask_logits(ours, roberta_tokenizer(), text)
    ids = roberta_tokenizer().encode(text).ids
    assert ids[0] == 0 and ids[-1] == 2
    with torch.no_grad():
        expected = reference(input_ids=torch.tensor([ids])).logits[0]
    torch.testing.assert_close(logits, expected[[3, 5]], rtol=0, atol=1e-5)
    no_mask = Tokenizer(models.WordPiece({"<s>": 0, "<pad>": 1, "</s>": 2, "w": 3}, unk_token="w"))
    with pytest.raises(UserError, match=r"has no mask \(none of \[MASK\] <mask>"):
        roberta_mask_logits(ours, no_mask, "w w")


def test_the_cost_model_counts_the_models_parameters():
    for architecture in ("roberta", "xlm-roberta"):
        config = BertConfig(**SHAPE, pad_token_id=PAD, architecture=architecture)
        counts = family(config).count_parameters(config)
        assert counts.total == RobertaForMaskedLM(config).num_parameters()
        assert counts.pooler == 0
    bert = FAMILIES["bert"].count_parameters(BertConfig(**SHAPE)).total
    assert bert - counts.total == (32 * 32 + 32) + (2 * 32 + 2)  # BERT's pooler and pair head
    # roberta-base's shape, as transformers counts its RobertaForMaskedLM (built without values)
    with torch.device("meta"):
        theirs = transformers.RobertaForMaskedLM(transformers.RobertaConfig(
            vocab_size=50265, max_position_embeddings=514, type_vocab_size=1))
    base = BertConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1, pad_token_id=PAD,
                      architecture="roberta")
    assert family(base).count_parameters(base).total == sum(p.numel() for p in theirs.parameters()) == 124_697_433
    # memory: BERT's activations, RoBERTa's weights (fp32 weights, gradients, two AdamW moments)
    row, bert_row = family(base), FAMILIES["bert"]
    ours, bert = row.estimate_memory(base, 128, 0.15, "bf16"), bert_row.estimate_memory(base, 128, 0.15, "bf16")
    assert (ours.weights, ours.gradients, ours.adamw_state) == (4 * 124_697_433, 4 * 124_697_433, 8 * 124_697_433)
    assert ours.activations_per_sequence == bert.activations_per_sequence
    shape = ForwardShape(batch_size=2, seq_length=64, predicted_rows=3)
    assert row.estimate_inference_memory(base, shape).weights == 4 * 124_697_433
    assert row.training_flops(base, 128, 0.15) == bert_row.training_flops(base, 128, 0.15)


def test_an_unbuilt_model_type_is_refused_in_one_line_naming_the_built_ones(tmp_path):
    folder = tmp_path / "deberta"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "deberta-v2", "hidden_size": 32}))
    with pytest.raises(UserError) as refused:
        read_config(folder)
    message = str(refused.value)
    assert "\n" not in message
    assert "model_type 'deberta-v2', which bertpre does not build; it builds bert, roberta, xlm-roberta, modernbert, xlnet and electra" \
        in message


def test_a_pair_task_is_refused_for_roberta_with_the_reason(tmp_path):
    tiny = ROOT / "configs" / "tiny.yaml"
    shape = ["model.architecture=roberta", "model.max_position_embeddings=66"]
    with pytest.raises(UserError, match=r"data.pair_task nsp trains a sentence-pair head, which model.architecture "
                                        r"roberta \(RoBERTa\) does not have: RoBERTa is pretrained on the masked LM "
                                        r"alone.*set data.pair_task: none"):
        load_config(tiny, shape)  # tiny.yaml asks for nsp
    config = load_config(None, ["model.architecture=xlm-roberta"])  # no pair task asked for: none
    assert config.data.pair_task == "none"
    # RoBERTa's defaults where BERT's differ; a key given is kept.
    assert (config.model.type_vocab_size, config.model.layer_norm_eps, config.model.max_position_embeddings) == \
        (1, 1e-5, 514)
    assert load_config(None, ["model.architecture=roberta", "model.type_vocab_size=2"]).model.type_vocab_size == 2
    with pytest.raises(UserError, match=r"data.max_seq_length \(512\) is larger than model.max_position_embeddings "
                                        r"\(512\) less the row before the first token"):
        load_config(None, ["model.architecture=roberta", "model.max_position_embeddings=512",
                           "data.max_seq_length=512"])
    with pytest.raises(UserError, match="ALBERT's options, which RoBERTa's layout does not have"):
        load_config(None, ["model.architecture=roberta", "model.embedding_size=16"])


def test_a_grown_vocabulary_starts_each_new_row_as_the_mean_of_its_pieces(tmp_path):
    folder = saved(hf_model(), tmp_path / "source")
    state = read_roberta_weights(folder)
    grown = FAMILIES["roberta"].grow_vocabulary(state, [[5, 6], [7]])
    words, bias = "roberta.embeddings.word_embeddings.weight", "lm_head.bias"
    assert grown[words].shape == (99, 32) and grown[bias].shape == (99,)
    torch.testing.assert_close(grown[words][97], state[words][[5, 6]].mean(dim=0))
    torch.testing.assert_close(grown[bias][98], state[bias][7])
    model = RobertaForMaskedLM(dataclasses.replace(read_config(folder), vocab_size=99))
    assert model.load_weights(grown, folder, strict=True) == ([], [])
    assert model.lm_head.decoder.weight is model.roberta.embeddings.word_embeddings.weight  # still tied


def test_a_wordpiece_vocabulary_is_laid_out_as_roberta_reads_pairs(tmp_path):
    vocab = {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4, "a": 5, "b": 6}
    bert = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    bert.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    bert.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    encoded = roberta_layout(bert).encode("a a", "b")
    assert encoded.ids == [2, 5, 5, 3, 3, 6, 3] and encoded.type_ids == [0] * 7  # <s> A </s></s> B </s>
    assert bert.encode("a", "b").type_ids == [0, 0, 0, 1, 1]  # the original is left as it was
    assert roberta_layout(roberta_tokenizer()).encode("w1", "w2").ids == [0, 6, 2, 2, 7, 2]
    with pytest.raises(UserError, match=r"has no cls \(none of \[CLS\] <s>"):
        roberta_layout(Tokenizer(models.WordPiece({"x": 0}, unk_token="x")))
    # An export of such a run: tokenizer.json in RoBERTa's layout, read by transformers' generic class.
    folder, out = tmp_path / "tokenizer", tmp_path / "out"
    folder.mkdir(), out.mkdir()
    bert.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "BertTokenizer", "pad_token": "[PAD]"}))
    copy_tokenizer_files(folder, out)
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert transformers.AutoTokenizer.from_pretrained(out)("a a", "b")["input_ids"] == [2, 5, 5, 3, 3, 6, 3]
