"""Downstream evaluation: fine-tune (or probe) a pretrained BERT or XLNet on labelled tasks, over seeds."""
from bertpre.config.finetune import PRESETS, Hyperparameters, load_hyperparameters
from bertpre.finetune.metrics import (
    METRICS,
    accuracy,
    f1_binary,
    f1_macro,
    majority_class,
    matthews_corrcoef,
    pearson,
    span_scores,
    spearman,
)
from bertpre.finetune.run import TaskFiles, finetune

__all__ = [
    "METRICS", "PRESETS", "Hyperparameters", "TaskFiles", "accuracy", "f1_binary", "f1_macro", "finetune",
    "load_hyperparameters", "majority_class", "matthews_corrcoef", "pearson", "span_scores",
    "spearman",
]
