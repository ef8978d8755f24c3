"""Tiny models, configs and batches shared by the Hugging Face format and export tests."""
from __future__ import annotations

import torch

TINY = dict(vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=64, max_position_embeddings=64)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(92)]


def hf_config(**changes):
    """A `transformers.BertConfig` of the tiny shape (transformers is a test extra)."""
    import transformers

    return transformers.BertConfig(**{**TINY, **changes})


def randomize(model: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    """Perturb every parameter so biases and LayerNorms are not at their init values."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval()


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, 97, (2, 10), generator=generator)
    attention_mask = torch.ones(2, 10, dtype=torch.long)
    attention_mask[1, 6:] = 0
    input_ids[1, 6:] = 0
    token_type_ids = torch.zeros(2, 10, dtype=torch.long)
    token_type_ids[:, 4:] = 1
    labels = torch.full((2, 10), -100)
    labels[0, [1, 3, 7]] = torch.tensor([11, 12, 13])
    labels[1, [2, 4]] = torch.tensor([21, 22])
    return dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                labels=labels, next_sentence_label=torch.tensor([1, 0]))
