"""`BertModel(..., last_rows=1)`: the last layer computed for [CLS] alone gives the same pooled
output and the same gradients as the whole layer (every step after attention is per position)."""
import pytest
import torch

from bertpre.model import BertConfig, BertModel


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
