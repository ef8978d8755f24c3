"""`evaluate`: fixed validation instances, consistent metrics, the model's mode left as it was."""
import math
from pathlib import Path

import pytest
import torch

from bertpre.config import load_config, resolve
from bertpre.data.folder import load_data
from bertpre.model.bert import BertForPreTraining
from bertpre.train.evaluation import evaluate, perplexity

TINY = Path(__file__).parents[2] / "configs" / "tiny.yaml"


def test_perplexity_is_exp_of_the_loss_inf_past_a_float_and_nan_for_nan():
    assert perplexity(0.0) == 1.0
    assert perplexity(math.log(30522.0)) == math.exp(math.log(30522.0))
    assert perplexity(700.0) == math.exp(700.0)
    assert perplexity(709.0) == math.exp(709.0)  # the largest exp a float holds is at 709.78
    assert perplexity(710.0) == math.inf
    assert perplexity(math.inf) == math.inf
    assert perplexity(-math.inf) == 0.0
    assert math.isnan(perplexity(math.nan))


def test_evaluate_is_repeatable_and_consistent(tiny_data):
    data = load_data(tiny_data)
    config = resolve(load_config(TINY), data.tokenizer)
    torch.manual_seed(0)
    model = BertForPreTraining(config.model).train()

    first = evaluate(model, data, config.data, micro_batch_size=4, seed=42)
    second = evaluate(model, data, config.data, micro_batch_size=8, seed=42)
    assert model.training
    assert first == pytest.approx(second, rel=1e-6)  # same instances and masks, any batching
    assert first["perplexity"] == pytest.approx(math.exp(first["mlm_loss"]))
    # an untrained model is close to uniform over the vocabulary
    assert abs(first["mlm_loss"] - math.log(config.model.vocab_size)) < 0.5
    assert 0 <= first["mlm_acc"] <= 1 and 0 <= first["pair_acc"] <= 1
    assert first["sequences"] > 0 and first["predictions"] > first["sequences"]

    other_seed = evaluate(model, data, config.data, micro_batch_size=4, seed=7)
    assert other_seed["predictions"] != first["predictions"] or other_seed["mlm_loss"] != first["mlm_loss"]


def test_evaluate_without_pairs_reports_no_pair_accuracy(tiny_data):
    data = load_data(tiny_data)
    config = resolve(load_config(TINY, ["data.pair_task=none"]), data.tokenizer)
    torch.manual_seed(0)
    results = evaluate(BertForPreTraining(config.model), data, config.data, micro_batch_size=8)
    assert math.isnan(results["pair_acc"]) and math.isfinite(results["mlm_loss"])
