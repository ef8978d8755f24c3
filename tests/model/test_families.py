"""The family table: every row complete and consistent with the objectives and the config."""
from __future__ import annotations

import pytest
import torch

from bertpre.config import load_config
from bertpre.config.sections import OBJECTIVES as CONFIG_OBJECTIVES
from bertpre.errors import UserError
from bertpre.model import BertConfig, BertForPreTraining, XLNetLMHeadModel
from bertpre.model.families import FAMILIES, family, family_of
from bertpre.train.objectives import OBJECTIVES

TINY = dict(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64)


def test_every_objective_a_family_trains_with_is_an_object_and_a_config_choice():
    named = {name for row in FAMILIES.values() for name in row.objectives}
    assert named == set(OBJECTIVES) == set(CONFIG_OBJECTIVES)


@pytest.mark.parametrize(("architecture", "model_class"), [("bert", BertForPreTraining), ("xlnet", XLNetLMHeadModel)])
def test_a_row_builds_its_model_and_names_its_parts(architecture, model_class):
    config = BertConfig(architecture=architecture, **TINY)
    row = family(config)
    assert row.architecture == architecture
    torch.manual_seed(0)
    model = row.build_pretraining(config, None)
    assert type(model) is model_class and family_of(model) is row
    encoder = row.build_encoder(config)
    # The encoder inside the pretraining model is the encoder the family builds alone.
    inside = getattr(model, row.encoder_attribute).state_dict()
    alone = encoder.state_dict()
    assert {name: tensor.shape for name, tensor in inside.items()} == {
        name: tensor.shape for name, tensor in alone.items()}
    assert row.count_parameters(config).total == model.num_parameters()
    assert row.objectives and row.padding_side in ("left", "right")
    head = row.sequence_head(config, 3)
    assert getattr(head, row.encoder_attribute) is not None


def test_an_unknown_architecture_is_one_line():
    with pytest.raises(UserError, match="model.architecture 'gpt' is not built; use one of bert, xlnet"):
        family(BertConfig(architecture="gpt", **TINY))


def test_a_family_without_pairs_defaults_to_no_pair_task_and_refuses_anothers_objective():
    assert load_config(None, ["model.architecture=xlnet", "data.objective=plm"]).data.pair_task == "none"
    with pytest.raises(UserError, match="model.architecture bert trains with data.objective mlm, not plm; "
                                        "set model.architecture: xlnet for plm"):
        load_config(None, ["data.objective=plm", "data.pair_task=none"])
