"""What a pretraining run learns to predict: one object per `data.objective`, asked once.

A new objective is one module here (its batches, step module, named loss terms, carry and
evaluator) and one row in OBJECTIVES.
"""
from bertpre.train.objectives.base import LossTerm, NoCarry, Objective, step_totals
from bertpre.train.objectives.mlm import MaskedLanguageModel
from bertpre.train.objectives.plm import PermutationLanguageModel

OBJECTIVES: dict[str, type[Objective]] = {
    "mlm": MaskedLanguageModel,  # BERT: masked tokens (and the sentence-pair task)
    "plm": PermutationLanguageModel,  # XLNet: a permutation LM over segments carried by memory
    "clm": PermutationLanguageModel,  # Transformer-XL: left to right over segments carried by memory
}


def objective_for(objective: str) -> Objective:
    """The object of `data.objective` (checked by the config)."""
    return OBJECTIVES[objective](objective)


__all__ = ["OBJECTIVES", "LossTerm", "NoCarry", "Objective", "objective_for", "step_totals"]
