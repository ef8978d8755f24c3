"""One pretraining run: trainer, optimizer and schedule, checkpoints, evaluation, metrics, runtime."""
from bertpre.train.trainer import pretrain

__all__ = ["pretrain"]
