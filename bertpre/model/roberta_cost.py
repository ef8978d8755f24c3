"""What a RoBERTa (`architecture: roberta`, `xlm-roberta`) costs: BERT's figures less the pooler and
the pair head, which RoBERTa's pretraining model does not have."""
from __future__ import annotations

from dataclasses import replace

from bertpre.model.bert_cost import (
    ForwardShape,
    InferenceMemory,
    MemoryEstimate,
    ParameterCounts,
    count_bert_parameters,
    estimate_bert_inference_memory,
    estimate_bert_memory,
    with_fewer_weights,
)
from bertpre.model.config import BertConfig


def count_roberta_parameters(config: BertConfig) -> ParameterCounts:
    """Parameters of `RobertaForMaskedLM(config)` by part: BERT's with no pooler and no pair
    classifier (its MLM head, dense + LayerNorm + bias, is BERT's transform in size)."""
    counts = count_bert_parameters(config)
    pair_head = 2 * config.hidden_size + 2
    return replace(counts, pooler=0, heads=counts.heads - pair_head)


def _bert_weights_less(config: BertConfig) -> int:
    """How many parameters BERT's count has that RoBERTa's has not."""
    return count_bert_parameters(config).total - count_roberta_parameters(config).total


def estimate_roberta_memory(config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32",
                            **options: int | None) -> MemoryEstimate:
    """BERT's training memory (`bert_cost.estimate_bert_memory`: activations are the same, the
    pooler's one row a sequence left out there too) with RoBERTa's parameters."""
    estimate = estimate_bert_memory(config, seq_length, predicted_share, precision, **options)
    return with_fewer_weights(estimate, _bert_weights_less(config))


def estimate_roberta_inference_memory(config: BertConfig, shape: ForwardShape, precision: str = "fp32", *,
                                      device_type: str = "cuda") -> InferenceMemory:
    """BERT's forward peak with RoBERTa's (fewer) fp32 weights."""
    memory = estimate_bert_inference_memory(config, shape, precision, device_type=device_type)
    return replace(memory, weights=memory.weights - 4 * _bert_weights_less(config))
