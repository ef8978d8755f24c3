"""Downstream evaluation: fine-tune (or probe) a pretrained BERT on labelled tasks, over seeds."""
from bertpre.finetune.run import PRESETS, TaskFiles, finetune, load_hyperparameters

__all__ = ["PRESETS", "TaskFiles", "finetune", "load_hyperparameters"]
