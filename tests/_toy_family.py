"""A toy model family defined in tests alone: BERT's network with one token type and no pair
task, its own config part (a key of its own in a typed record, its range, a rule, its shape
fields) and a config.json that transformers reads as BERT's. `test_families.register_toy` adds its row to the family table; nothing under bertpre/ names it.

It is what the README's "one module and one row" promises, checked: the conformance suite
(`test_families.py`) runs it beside the real rows.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from bertpre.errors import UserError
from bertpre.model.bert import BertForPreTraining
from bertpre.model.bert_config import BERT_SHAPE_FIELDS, read_bert_layout, write_bert_hf
from bertpre.model.config import BertConfig, FamilyConfig, FamilyFields
from bertpre.model.families import FAMILIES
from bertpre.model.token_types import no_token_types
from bertpre.ranges import integers

ARCHITECTURE = "toy"


@dataclass(frozen=True)
class ToyFields(FamilyFields):
    """The toy's own key, as a family writes its keys: a field with its default. The network does
    not read it; the config routes it, ranges it (TOY_RANGES), checks it (`validate_toy`) and
    writes it in a run's config.yaml."""

    toy_window: int = 8  # tokens; at most the positions


TOY_RANGES = {"toy_window": integers(1, 64)}


def validate_toy(config: BertConfig) -> None:
    """The toy's own rules: one token type, absolute positions, no ALBERT options, a window
    within its positions."""
    if config.toy_window > config.max_position_embeddings:
        raise UserError(f"model.toy_window ({config.toy_window}) is wider than the "
                        f"model.max_position_embeddings ({config.max_position_embeddings}) the toy reads")
    if config.type_vocab_size != 1:
        raise UserError(f"model.architecture toy has one token type; set model.type_vocab_size: 1, "
                        f"not {config.type_vocab_size}")
    if config.is_albert or config.position_embedding_type != "absolute":
        raise UserError("model.architecture toy is BERT's absolute layout alone")


def build_toy(config: BertConfig, tokenizer=None) -> BertForPreTraining:
    return BertForPreTraining(config)


def count_toy_parameters(config: BertConfig):
    """The toy's own formula, written out (not BERT's cost function): tables, layers, heads."""
    from bertpre.model.bert_cost import ParameterCounts

    C, inner, V, L = config.hidden_size, config.intermediate_size, config.vocab_size, config.num_hidden_layers
    embeddings = (V + config.max_position_embeddings + config.type_vocab_size) * C
    attention = L * (4 * C * C + 4 * C)
    feed_forward = L * (2 * C * inner + inner + C)
    layer_norms = 2 * C + L * 2 * 2 * C
    pooler = C * C + C
    heads = (C * C + C) + 2 * C + V + (2 * C + 2)  # transform, its LayerNorm, the decoder bias, the pair head
    matrices = V * C + config.max_position_embeddings * C + config.type_vocab_size * C + L * (4 * C * C + 2 * C * inner)
    return ParameterCounts(embeddings=embeddings, attention=attention, feed_forward=feed_forward,
                           layer_norms=layer_norms, pooler=pooler, heads=heads, matrices=matrices)


TOY_CONFIG = FamilyConfig(
    # it exports as transformers' BERT (model_type "bert"): a folder it writes reads back as BERT's
    model_types=(), read_hf=lambda hf: read_bert_layout(hf, ARCHITECTURE, pad_token_id=0),
    write_hf=write_bert_hf, shape_fields=BERT_SHAPE_FIELDS, validate=validate_toy,
    relative_positions=lambda config: False, fields=ToyFields, ranges=TOY_RANGES, owner="the toy's")

TOY = replace(FAMILIES["bert"], architecture=ARCHITECTURE, config=TOY_CONFIG, display_name="Toy",
              pair_task=False, build_pretraining=build_toy, count_parameters=count_toy_parameters,
              token_types=no_token_types, model_defaults={"type_vocab_size": 1}, parameter_note=lambda config: None)

