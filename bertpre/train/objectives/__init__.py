"""What a pretraining run learns to predict: one object per `data.objective`, asked once.

A new objective is one module here (its batches, step module, named loss terms, carry and
evaluator) and one row in OBJECTIVES.
"""
from typing import Any

from bertpre.train.objectives.base import LossTerm, NoCarry, Objective, step_totals
from bertpre.train.objectives.mlm import MaskedLanguageModel
from bertpre.train.objectives.plm import PermutationLanguageModel
from bertpre.train.objectives.rtd import ReplacedTokenObjective

OBJECTIVES: dict[str, type[Objective]] = {
    "mlm": MaskedLanguageModel,  # BERT: masked tokens (and the sentence-pair task)
    "plm": PermutationLanguageModel,  # XLNet: a permutation LM over segments carried by memory
    "clm": PermutationLanguageModel,  # Transformer-XL: left to right over segments carried by memory
    "rtd": ReplacedTokenObjective,  # ELECTRA: a generator's samples, told apart at every token by a discriminator
}


def objective_for(objective: str, keys: Any = None) -> Objective:
    """The object of `data.objective` (checked by the config), with its own keys (the config's
    `objective`: section, `Config.objective`; their defaults where None)."""
    return OBJECTIVES[objective](objective, keys)


__all__ = ["OBJECTIVES", "LossTerm", "NoCarry", "Objective", "objective_for", "step_totals"]
