"""`bertpre info` names each family's own classes and the tokens its position table reads: a
RoBERTa's is RobertaModel / RobertaForMaskedLM with the MLM head alone, at most 512 tokens of its
514 rows; BERT's report is as it was."""
from __future__ import annotations

from bertpre.model import BertConfig
from bertpre.tools.info import format_info, model_info

SHAPE = {"vocab_size": 1000, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 128}


def parameter_names(text: str) -> list[str]:
    lines = text.splitlines()
    rows = lines[lines.index("parameters") + 1:lines.index("parameters") + 9]
    return [row.split("  ")[1].strip() for row in rows]


def test_a_roberta_is_counted_under_its_own_classes_and_token_limit():
    config = BertConfig(**SHAPE, architecture="roberta", max_position_embeddings=514, pad_token_id=1,
                        type_vocab_size=1)
    text = format_info(model_info(config))
    assert "absolute positions (at most 512 tokens, 514 rows)" in text.splitlines()[0]
    assert parameter_names(text)[-3:] == ["encoder (RobertaModel)", "heads (MLM)", "total (RobertaForMaskedLM)"]
    xlmr = format_info(model_info(BertConfig(**{**config.to_dict(), "architecture": "xlm-roberta"})))
    assert parameter_names(xlmr)[-3:] == ["encoder (XLMRobertaModel)", "heads (MLM)", "total (XLMRobertaForMaskedLM)"]
    assert "  total (XLMRobertaForMaskedLM) " in xlmr  # the column widens to the longest name


def test_a_bert_keeps_its_names_and_its_position_count():
    text = format_info(model_info(BertConfig(**SHAPE)))
    assert "absolute positions (at most 512)" in text.splitlines()[0]
    assert parameter_names(text)[-3:] == ["encoder (BertModel)", "heads (MLM + pair)", "total (BertForPreTraining)"]
    assert "  total (BertForPreTraining)  " in text


def test_the_bert_base_remark_is_made_of_a_bert_alone():
    base = {**SHAPE, "hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12, "intermediate_size": 3072}
    assert "(BERT-base: the encoder is the paper's 110M" in format_info(model_info(BertConfig(**base)))
    roberta = BertConfig(**base, architecture="roberta", max_position_embeddings=514, pad_token_id=1, type_vocab_size=1)
    assert "BERT-base" not in format_info(model_info(roberta))
