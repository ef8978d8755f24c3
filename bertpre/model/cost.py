"""What a model config costs to train (see `bertpre.model.bert_cost`)."""
from bertpre.model.bert_cost import *  # noqa: F403
from bertpre.model.bert_cost import (  # noqa: F401
    BYTES_PER_ELEMENT,
    MemoryEstimate,
    ParameterCounts,
    XLNetFlops,
    count_parameters,
    count_xlnet_parameters,
    estimate_memory,
    memory_shortfall,
    plm_query_rows,
    readable,
    training_flops_per_token,
    training_memory_floor,
    xlnet_activations,
    xlnet_training_flops,
)
