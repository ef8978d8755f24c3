"""What an ELECTRA discriminator (`architecture: electra`) costs: BERT's figures with its factorized
embeddings, no pooler, and the discriminator's head (dense, then one logit a token) where BERT's
MLM and pair heads are. The generator a run trains beside it is the rtd objective's, not counted here."""
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


def count_electra_parameters(config: BertConfig) -> ParameterCounts:
    """Parameters of `ElectraForPreTraining(config)` by part: BERT's encoder (the projection with the
    embeddings), no pooler, the discriminator head's two dense layers (C·C + C, then C + 1)."""
    counts = count_bert_parameters(config)
    hidden = config.hidden_size
    return replace(counts, pooler=0, heads=hidden * hidden + hidden + hidden + 1)


def _bert_weights_less(config: BertConfig) -> int:
    """How many parameters BERT's count has that ELECTRA's discriminator has not."""
    return count_bert_parameters(config).total - count_electra_parameters(config).total


def estimate_electra_memory(config: BertConfig, seq_length: int, predicted_share: float, precision: str = "fp32",
                            **options: int | None) -> MemoryEstimate:
    """BERT's training memory with the discriminator's parameters."""
    estimate = estimate_bert_memory(config, seq_length, predicted_share, precision, **options)
    return with_fewer_weights(estimate, _bert_weights_less(config))


def estimate_electra_inference_memory(config: BertConfig, shape: ForwardShape, precision: str = "fp32", *,
                                      device_type: str = "cuda") -> InferenceMemory:
    """BERT's forward peak with the discriminator's (fewer) fp32 weights."""
    memory = estimate_bert_inference_memory(config, shape, precision, device_type=device_type)
    return replace(memory, weights=memory.weights - 4 * _bert_weights_less(config))
