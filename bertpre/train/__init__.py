"""One pretraining run: trainer, optimizer and schedule, checkpoints, evaluation, metrics, runtime."""
from bertpre.train.evaluation import Evaluator, MixtureEvaluator, build_evaluator, evaluate
from bertpre.train.metrics import StepStats
from bertpre.train.trainer import Trainer, TrainResult, pretrain

__all__ = ["Evaluator", "MixtureEvaluator", "StepStats", "TrainResult", "Trainer", "build_evaluator", "evaluate",
           "pretrain"]
