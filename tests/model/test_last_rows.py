"""The last layer on the rows read: `BertModel(..., last_rows=1)` computed for [CLS] alone gives the
same pooled output and the same gradients as the whole layer (every step after attention is per
position); in pretraining (`model.last_layer_rows`) the last layer computes [CLS] and the predicted
positions alone, with the same losses and gradients, for every BERT-layout family."""
import pytest
import torch

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.model import BertConfig, BertForPreTraining, BertModel
from bertpre.model.modernbert import ModernBertForMaskedLM
from bertpre.model.roberta import RobertaForMaskedLM
from bertpre.train.objectives.mlm import MaskedLMStep


@pytest.mark.parametrize("positions", ["absolute", "rope", "transformer_xl"])
def test_the_cls_row_alone_equals_the_whole_last_layer(positions):
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=16, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0, position_embedding_type=positions)
    model = BertModel(config)
    input_ids = torch.randint(5, 50, (3, 12))
    attention_mask = torch.ones(3, 12, dtype=torch.long)
    attention_mask[1, 7:] = 0  # a padded row
    outputs = []
    for rows in (None, 1):
        model.zero_grad()
        out = model(input_ids, attention_mask, last_rows=rows)
        out.pooler_output.pow(2).sum().backward()
        outputs.append((out, {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}))
    (whole, whole_grads), (cls, cls_grads) = outputs
    assert cls.last_hidden_state.shape == (3, 1, 32)
    torch.testing.assert_close(cls.last_hidden_state[:, 0], whole.last_hidden_state[:, 0], rtol=0, atol=1e-6)
    torch.testing.assert_close(cls.pooler_output, whole.pooler_output, rtol=0, atol=1e-6)
    assert whole_grads.keys() == cls_grads.keys()
    for name, grad in whole_grads.items():
        torch.testing.assert_close(cls_grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)


# --- pretraining: the last layer on [CLS] and the predicted positions ------------------------

TINY = dict(vocab_size=99, hidden_size=32, num_hidden_layers=3, num_attention_heads=4, intermediate_size=64,
            max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
FAMILIES = {
    "bert": (BertForPreTraining, dict(TINY)),
    "albert": (BertForPreTraining, dict(TINY, embedding_size=16, share_layers=True)),
    "albert-factorized": (BertForPreTraining, dict(TINY, embedding_size=16)),
    "bert-rope": (BertForPreTraining, dict(TINY, position_embedding_type="rope")),
    "bert-transformer-xl": (BertForPreTraining, dict(TINY, position_embedding_type="transformer_xl")),
    "roberta": (RobertaForMaskedLM, dict(TINY, architecture="roberta", pad_token_id=1, type_vocab_size=1,
                                         max_position_embeddings=18)),
    # 3 layers, global every 3rd: the last is local (its window mask cut to the rows read) …
    "modernbert-local": (ModernBertForMaskedLM, dict(TINY, architecture="modernbert", local_attention=4,
                                                     hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)),
    # … or global (ModernBERT-base's 22nd layer is)
    "modernbert-global": (ModernBertForMaskedLM, dict(TINY, architecture="modernbert", local_attention=4,
                                                      global_attn_every_n_layers=2, hidden_dropout_prob=0.1,
                                                      attention_probs_dropout_prob=0.1)),
}
for _name, (_cls, _values) in FAMILIES.items():  # ModernBERT refuses BERT's dropout keys
    if _values.get("architecture") == "modernbert":
        del _values["hidden_dropout_prob"], _values["attention_probs_dropout_prob"]
PAIRED = {"bert", "albert", "albert-factorized", "bert-rope", "bert-transformer-xl"}


def build(family: str, last_layer_rows: bool) -> torch.nn.Module:
    cls, values = FAMILIES[family]
    torch.manual_seed(0)
    return cls(BertConfig(**values, last_layer_rows=last_layer_rows)).train()


def ragged_batch(family: str, padded: bool = True) -> dict[str, torch.Tensor]:
    """3 rows of 12 tokens, two padded (7 and 10 real tokens), P = 4 slots: 4, 2 and 1
    predictions, the rest padding slots (position 0, id -100), as the collator lays them out."""
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, 99, (3, 12), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    if padded:
        attention_mask[1, 7:] = attention_mask[2, 10:] = 0
    input_ids[attention_mask == 0] = FAMILIES[family][1].get("pad_token_id", 0)
    positions = torch.tensor([[1, 3, 5, 11], [2, 6, 0, 0], [9, 0, 0, 0]])
    ids = torch.tensor([[7, 8, 9, 10], [11, 12, -100, -100], [13, -100, -100, -100]])
    batch = {"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids),
             "masked_lm_positions": positions, "masked_lm_ids": ids}
    if padded:  # the trainer drops the mask of a batch without padding (SDPA's fastest kernel)
        batch["attention_mask"] = attention_mask
    if family in PAIRED:
        batch["next_sentence_label"] = torch.tensor([0, 1, -100])
    return batch


def step(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The trainer's micro-batch loss through `MaskedLMStep`, and every parameter's gradient."""
    model.zero_grad()
    (mlm_loss_sum, pair_loss_sum), _, _ = MaskedLMStep(model)(batch)
    loss = mlm_loss_sum / 7 + pair_loss_sum / 2
    loss.backward()
    return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}


def last_ffn(model: torch.nn.Module) -> torch.nn.Linear:
    """The last layer's feed-forward expansion (ALBERT's one shared layer: its last application)."""
    if isinstance(model, ModernBertForMaskedLM):
        return model.model.layers[-1].mlp.Wi
    encoder = model.roberta.encoder if isinstance(model, RobertaForMaskedLM) else model.bert.encoder
    return encoder.layer[-1].intermediate.dense


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_the_last_layers_feed_forward_sees_the_rows_read_alone(family):
    model = build(family, last_layer_rows=True)
    rows_seen: list[int] = []
    last_ffn(model).register_forward_hook(lambda _m, inputs, _o: rows_seen.append(inputs[0].shape[:-1].numel()))
    batch = ragged_batch(family)
    step(model, batch)
    B, P = batch["masked_lm_positions"].shape
    read = B * (1 + P) if family in PAIRED else B * P  # [CLS] for the pooler where there is one
    assert rows_seen[-1] == read  # the predictions (padding slots included: fixed shapes) and [CLS]
    earlier = rows_seen[:-1]  # ALBERT's shared layer: every application before the last sees every token
    assert all(rows == B * 12 for rows in earlier)


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("padded", [True, False])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_losses_and_gradients_equal_the_whole_last_layers(family, padded, checkpointing):
    results = {}
    for rows in (False, True):
        model = build(family, last_layer_rows=rows)
        model.set_gradient_checkpointing(checkpointing)
        results[rows] = step(model, ragged_batch(family, padded))
    (whole_loss, whole_grads), (rows_loss, rows_grads) = results[False], results[True]
    torch.testing.assert_close(rows_loss, whole_loss, rtol=0, atol=1e-5)
    assert rows_grads.keys() == whole_grads.keys()
    for name, grad in whole_grads.items():
        torch.testing.assert_close(rows_grads[name], grad, rtol=1e-5, atol=1e-5, msg=name)


@pytest.mark.parametrize("family", ["bert", "roberta", "modernbert-global"])
def test_evaluation_runs_the_whole_last_layer(family):
    """Evaluation and fill-mask (eval mode) compute every position: the inference memory figures
    are the whole layer's, and so are the logits."""
    batch = ragged_batch(family)
    logits = []
    for rows in (False, True):
        model = build(family, rows).eval()
        rows_seen: list[int] = []
        last_ffn(model).register_forward_hook(lambda _m, inputs, _o, seen=rows_seen: seen.append(inputs[0].shape[:-1].numel()))
        logits.append(model(**batch).prediction_logits)
        assert rows_seen[-1] == batch["input_ids"].numel()
    assert logits[0].shape == logits[1].shape == (3, 4, 99)
    torch.testing.assert_close(logits[1], logits[0], rtol=0, atol=0)


def test_the_switch_is_a_runtime_key_no_export_or_checkpoint_sees():
    assert load_config(None).model.last_layer_rows is True
    assert load_config(None, ["model.last_layer_rows=false"]).model.last_layer_rows is False
    with pytest.raises(UserError, match="model.last_layer_rows must be true or false"):
        load_config(None, ["model.last_layer_rows=sometimes"])
    for family, (_, values) in FAMILIES.items():
        assert "last_layer_rows" not in BertConfig(**values, last_layer_rows=False).to_hf_dict(), family
        names = [set(build(family, rows).state_dict()) for rows in (False, True)]
        assert names[0] == names[1], family
