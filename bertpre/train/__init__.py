"""One pretraining run: trainer, optimizer and schedule, checkpoints, evaluation, metrics, runtime."""
from bertpre.train.evaluation import Evaluator, evaluate
from bertpre.train.trainer import StepStats, Trainer, TrainResult, pretrain

__all__ = ["Evaluator", "StepStats", "TrainResult", "Trainer", "evaluate", "pretrain"]
