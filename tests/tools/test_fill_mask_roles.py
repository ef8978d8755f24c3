"""A BERT whose WordPiece vocabulary names its special tokens as RoBERTa does (MPNet's `<s> </s>
<pad> <mask>`): `bertpre predict` finds the mask by role, not by the string "[MASK]"."""
from __future__ import annotations

import pytest
import torch
from _released_tokenizers import mpnet_like

from bertpre.model import BertConfig
from bertpre.model.bert import BertForPreTraining, bert_mask_logits
from bertpre.tokenizer import load_tokenizer
from bertpre.tokenizer.roles import token_roles

pytest.importorskip("transformers")  # mpnet_like saves its folder with transformers


def test_a_bert_reads_its_vocabularys_own_mask(tmp_path):
    tokenizer = load_tokenizer(mpnet_like(tmp_path))
    assert token_roles(tokenizer).mask_token == "<mask>" and tokenizer.token_to_id("[MASK]") is None
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=1,
                                          num_attention_heads=4, intermediate_size=64, max_position_embeddings=64))
    model.eval()
    logits = bert_mask_logits(model, tokenizer, "the <mask> sees a <mask> .")
    assert logits.shape == (2, tokenizer.get_vocab_size())
