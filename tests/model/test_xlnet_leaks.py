"""The permutation collator and the XLNet model together, trained a few hundred steps: on i.i.d.
random tokens nothing can be learned beyond the unigram distribution, so the PLM loss must stay
at ln V (V: the tokens drawn); anything lower is a leak, which a deliberately leaky mask shows.
And with memory over a repeated segment the loss falls: the memory carries the context."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer
from tokenizers.models import WordPiece

from bertpre.batches.plm import PermutationCollator, expand_plm
from bertpre.model.xlnet import XLNetConfig, XLNetLMHeadModel

SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
DRAWN = 64  # the tokens random text is drawn from


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    vocab = {token: i for i, token in enumerate(SPECIALS + [f"w{i}" for i in range(DRAWN)])}
    return Tokenizer(WordPiece(vocab, unk_token="[UNK]"))


def model(mem_len: int = 0) -> XLNetLMHeadModel:
    torch.manual_seed(0)
    return XLNetLMHeadModel(XLNetConfig(vocab_size=len(SPECIALS) + DRAWN, hidden_size=32, num_hidden_layers=2,
                                        num_attention_heads=4, intermediate_size=64, dropout=0.0,
                                        mem_len=mem_len))


def random_rows(rng: np.random.Generator, count: int, length: int) -> list[list[int]]:
    return rng.integers(len(SPECIALS), len(SPECIALS) + DRAWN, size=(count, length)).tolist()


def train_plm(tokenizer, *, steps: int, leak: bool = False) -> float:
    """Mean PLM loss of the last 50 of `steps` on fresh random rows."""
    net = model()
    optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
    collator = PermutationCollator(tokenizer, plm_probability=1 / 4, max_span_length=2, seed=0)
    rng = np.random.default_rng(0)
    losses = []
    for step in range(steps):
        batch = collator([{"input_ids": row, "seed_key": step * 100 + n}
                          for n, row in enumerate(random_rows(rng, 16, 32))])
        perm_mask, target_mapping = expand_plm(batch)
        if leak:  # a target's query may read its own token: the mistake the test must catch
            perm_mask = perm_mask & ~torch.eye(perm_mask.shape[1], dtype=torch.bool)
        out = net(batch["input_ids"], perm_mask=perm_mask, target_mapping=target_mapping, labels=batch["labels"])
        optimizer.zero_grad()
        out.loss.backward()
        optimizer.step()
        losses.append(out.loss.item())
    return float(np.mean(losses[-50:]))


@pytest.mark.slow  # ~20 s on 2 cores
def test_random_tokens_teach_nothing_but_a_leak_would(tokenizer):
    floor = math.log(DRAWN)
    assert train_plm(tokenizer, steps=250) > floor - 0.05
    assert train_plm(tokenizer, steps=250, leak=True) < floor - 1.0  # the detector detects


@pytest.mark.slow  # ~15 s on 2 cores
def test_memory_over_a_repeated_segment_carries_its_context(tokenizer):
    """Segment X, then X again: with X's states in memory the second pass can be predicted;
    without memory it is random text."""
    floor = math.log(DRAWN)
    results = {}
    for mem_len in (0, 16):
        net = model(mem_len)
        optimizer = torch.optim.AdamW(net.parameters(), lr=3e-3)
        collator = PermutationCollator(tokenizer, plm_probability=1 / 4, max_span_length=2, seed=1)
        rng = np.random.default_rng(1)
        losses = []
        for step in range(250):
            rows = random_rows(rng, 16, 16)
            first = collator([{"input_ids": row, "seed_key": 2 * (step * 100 + n)} for n, row in enumerate(rows)])
            second = collator([{"input_ids": row, "seed_key": 2 * (step * 100 + n) + 1} for n, row in enumerate(rows)])
            with torch.no_grad():
                mems = net(first["input_ids"]).mems if mem_len else None
            perm_mask, target_mapping = expand_plm(second)
            out = net(second["input_ids"], perm_mask=perm_mask, target_mapping=target_mapping,
                      labels=second["labels"], mems=mems)
            optimizer.zero_grad()
            out.loss.backward()
            optimizer.step()
            losses.append(out.loss.item())
        results[mem_len] = float(np.mean(losses[-50:]))
    assert results[0] > floor - 0.05
    assert results[16] < floor - 1.0, results
