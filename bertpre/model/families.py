"""The table of model families: for each, the classes, heads, layout, cost and Hugging Face names
the rest of bertpre asks of a model. Nothing outside `bertpre.model` decides which family a model
is; it asks `family(config)` and calls the row.

A new family is one module under `model/` (its config reading, network, heads and, where its
cost differs, its cost functions) and one row in FAMILIES.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer
from torch import nn

from bertpre.errors import UserError
from bertpre.model import hf_format
from bertpre.model.bert import BertForPreTraining, BertModel, bert_mask_logits
from bertpre.model.bert_config import BERT_CONFIG
from bertpre.model.bert_cost import (
    ForwardShape,
    bert_base_note,
    bert_shape_details,
    bert_training_flops,
    count_bert_parameters,
    estimate_bert_inference_memory,
    estimate_bert_memory,
)
from bertpre.model.bert_heads import (
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
)
from bertpre.model.config import FAMILIES, RUNTIME_FIELDS, SHARED_KEYS, BertConfig, FamilyConfig
from bertpre.model.electra import (
    ElectraForPreTraining,
    electra_encoder,
    electra_export_writer,
    electra_generator_writer,
    electra_mask_logits,
    load_electra,
    load_electra_generator,
)
from bertpre.model.electra_config import ELECTRA_CONFIG
from bertpre.model.electra_cost import (
    count_electra_parameters,
    estimate_electra_inference_memory,
    estimate_electra_memory,
)
from bertpre.model.electra_generator import GENERATOR_DIR, read_electra_weights
from bertpre.model.electra_heads import (
    ElectraForQuestionAnswering,
    ElectraForSequenceClassification,
    ElectraForTokenClassification,
    write_electra_task_folder,
)
from bertpre.model.modernbert import (
    ModernBertForMaskedLM,
    ModernBertModel,
    build_modernbert,
    modernbert_export_writer,
    modernbert_mask_logits,
    modernbert_max_input_tokens,
    read_modernbert_weights,
)
from bertpre.model.modernbert_config import (
    MODERNBERT_CONFIG,
    MODERNBERT_FIELDS,
    MODERNBERT_HF_SHARED,
)
from bertpre.model.modernbert_cost import (
    count_modernbert_parameters,
    estimate_modernbert_inference_memory,
    estimate_modernbert_memory,
    modernbert_flops_by_part,
    modernbert_shape_details,
    modernbert_training_flops,
)
from bertpre.model.modernbert_heads import (
    ModernBertForQuestionAnswering,
    ModernBertForSequenceClassification,
    ModernBertForTokenClassification,
    write_modernbert_task_folder,
)
from bertpre.model.replaced_token import (
    BERT_PARTS,
    PAIR_ENCODER,
    ReplacedTokenDetection,
    ReplacedTokenParts,
    family_generator,
    generator_depth_config,
    pair_generator_size,
    refuse_pair,
)
from bertpre.model.replaced_token_export import (
    exported_pair,
    family_pair_export_writer,
    generator_of,
)
from bertpre.model.roberta import (
    RobertaForMaskedLM,
    RobertaModel,
    build_roberta,
    read_roberta_weights,
    roberta_export_writer,
    roberta_layout,
    roberta_mask_logits,
    write_roberta_task_folder,
)
from bertpre.model.roberta_config import ROBERTA_CLASS_PREFIXES, roberta_config_part
from bertpre.model.roberta_cost import (
    count_roberta_parameters,
    estimate_roberta_inference_memory,
    estimate_roberta_memory,
)
from bertpre.model.roberta_heads import (
    RobertaForQuestionAnswering,
    RobertaForSequenceClassification,
    RobertaForTokenClassification,
)
from bertpre.model.token_types import bert_token_types, no_token_types, xlnet_token_types
from bertpre.model.vocab_growth import grow_vocab_rows
from bertpre.model.xlnet import (
    XLNetLMHeadModel,
    write_xlnet_task_folder,
    xlnet_export_writer,
    xlnet_mask_logits,
)
from bertpre.model.xlnet_config import (
    XLNET_CONFIG,
    XLNET_SHAPE_FIELDS,
    from_xlnet_dict,
    xlnet_config,
)
from bertpre.model.xlnet_cost import (
    count_xlnet_parameters,
    estimate_xlnet_inference_memory,
    estimate_xlnet_memory,
    xlnet_training_flops,
    xlnet_training_flops_per_token,
)
from bertpre.model.xlnet_heads import (
    XLNetForQuestionAnsweringSimple,
    XLNetForSequenceClassification,
    XLNetForTokenClassification,
    xlnet_encoder,
)
from bertpre.tokenizer.roles import token_roles
from bertpre.tokenizer.xlnet_layout import xlnet_layout


@dataclass(frozen=True)
class Family:
    """One model family: what building, loading, fine-tuning, exporting and costing it takes."""

    architecture: str  # `model.architecture`
    config: FamilyConfig  # its own keys, rules, shape and config.json both ways
    display_name: str  # in the run's start block: "BERT"
    pretraining_class: type[nn.Module]  # from_pretrained(folder), save_pretrained, num_parameters
    sequence_head: type[nn.Module]  # fine-tuning: one label (or score) a text or pair
    token_head: type[nn.Module]  # fine-tuning: one label a token
    # fine-tuning: a start and an end logit a token (extractive QA); named as transformers' class,
    # which a saved model's config.json names
    question_answering_head: type[nn.Module]
    # a saved task model's transformers class: prefix + the head's name from "For" on
    # ("Albert" + "ForSequenceClassification")
    hf_task_prefix: Callable[[BertConfig], str]
    encoder_attribute: str  # where the pretraining and task models keep the encoder
    padding_side: str  # where a batch's padding goes ("left": the classification token is last)
    objectives: tuple[str, ...]  # the `data.objective` values it trains with; the first is its default
    pair_task: bool  # whether it has a sentence-pair head (NSP / SOP)
    build_pretraining: Callable[[BertConfig, Tokenizer | None], nn.Module]
    build_encoder: Callable[[BertConfig], nn.Module]  # the bare encoder (fine-tuning, shapes)
    tokenizer_layout: Callable[[Tokenizer], Tokenizer]  # the special-token layout it reads
    read_weights: Callable[[Path], dict[str, torch.Tensor]]  # a folder's tensors under bertpre's names
    export_writer: Callable[[nn.Module, Path], tuple[str, hf_format.ExportWriter]]  # (model, tokenizer folder)
    write_task_folder: Callable[..., dict]  # a fine-tuned model's folder; returns config.json's content
    native_task_models: Callable[[BertConfig], bool]  # whether a transformers class (or remote code) holds it
    optional_encoder_parts: tuple[str, ...]  # encoder parts a folder may lack (drawn fresh)
    optional_parts: dict[str, str]  # pretraining-model parts a folder may lack, as users know them
    count_parameters: Callable[[BertConfig], Any]  # -> ParameterCounts
    training_flops: Callable[..., float]  # (config, seq_length, predicted_share, **options)
    # (config, seq_length, predicted_share, precision, *, memory_length, query_rows, device_type)
    estimate_memory: Callable[..., Any]
    # (config, ForwardShape, precision, *, device_type) -> InferenceMemory
    estimate_inference_memory: Callable[..., Any]
    # The most tokens one forward may read (fill-mask's text, evaluate's and fine-tuning's rows,
    # a QA window), or None where any length reads and only the memory check bounds it. Every
    # command asks it: fill-mask refuses a longer text in one line (XLNet's windows never meet
    # it), evaluate a longer --max-seq-length, fine-tuning and QA cut their rows to it.
    max_input_tokens: Callable[[BertConfig], int | None]
    shape_words: Callable[[BertConfig], str]  # the shape in words: "12 layers, hidden 768, ..."
    source_fields: tuple[str, ...]  # what a run started from a released model takes from its config
    # the model settings its config.json holds beside the shape (dropout, the init of new parts,
    # fine-tuning's pooling): a run from a released model takes the source's where the config gives none
    source_settings: tuple[str, ...]
    grow_vocabulary: Callable[..., dict] | None  # (state, new pieces) -> state with the rows added
    # fill-mask: (M, V) at each [MASK]; the callable is told the largest ForwardShape before any forward
    mask_logits: Callable[[nn.Module, Tokenizer, str, Callable[[ForwardShape], None]], torch.Tensor]
    # an input's token types from which text each token belongs to (`tokenizer.roles.text_segments`),
    # wherever fine-tuning builds inputs: never the tokenizer's template (`model.token_types`)
    token_types: Callable[[BertConfig, Sequence[int]], list[int]]
    # model keys whose default is the family's own (RoBERTa's one token type), where a config
    # leaves them out; a key the config gives, or a source's config.json, wins
    model_defaults: dict[str, Any] = field(default_factory=dict)
    # pretraining-model parts a task model has under the same names, which fine-tuning starts from
    # where the source has them (ModernBERT's `head.`, as transformers' ModernBertFor* load it)
    task_head_parts: tuple[str, ...] = ()
    # where `pair_task`: the prefix of the pair head's weights, which a folder may lack (a released
    # BertForMaskedLM's); evaluate reports no pair metrics of a head drawn fresh
    pair_head: str | None = None
    # whether its LayerNorms take `model.low_precision_layernorm` (XLNet's do not: "auto" is off there)
    low_precision_layernorm: bool = True
    # `bertpre info`: the report's layout, "encoder" (parameters by part, FLOPs, memory) or
    # "two-stream" (XLNet's content and query streams and memory states)
    cost_report: str = "encoder"
    # `bertpre info`: the shape line past the sizes (", absolute positions (at most 512)")
    shape_details: Callable[[BertConfig], str] = lambda config: ""
    # `bertpre info`: a line under the parameter counts tying them to a published count, or None
    parameter_note: Callable[[BertConfig], str | None] = lambda config: None
    # `bertpre info`: (encoder class, pretraining class) as users know them; None: the row's classes' own names
    class_names: Callable[[BertConfig], tuple[str, str]] | None = None
    # `bertpre info`: training FLOPs per token by part, (config, seq_length, predicted_share, micro_batch_size)
    flops_by_part: Callable[..., Any] | None = None
    # (folder, strict) -> the model a folder of the family holds, where that is more than
    # `pretraining_class.from_pretrained` (ELECTRA's: a run's generator and discriminator, or an
    # export's discriminator with its generator/); None: `pretraining_class.from_pretrained`
    load_pretrained: Callable[..., nn.Module] | None = None
    # replaced-token detection (`data.objective: rtd`, where `objectives` names it): the
    # discriminator's encoder, the generator and the embeddings they share; None: not trained so
    replaced_token: ReplacedTokenParts | None = None

    def fresh_parts(self, missing: list[str]) -> list[str]:
        """The optional parts, as users know them (`optional_parts`), whose weights are among `missing`."""
        return [label for prefix, label in self.optional_parts.items() if any(name.startswith(prefix) for name in missing)]


# Model keys a run may set whatever the source says: they shape training, not the weights. Those
# config.json holds are the source's settings (`Family.source_settings`), taken where a config gives none.
BERT_SOURCE_SETTINGS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "initializer_range")
TRAINING_ONLY_KEYS = (*BERT_SOURCE_SETTINGS, "pad_token_id", "mem_len", "clamp_len")
# How the step computes (`RUNTIME_FIELDS`: unpadding, one QKV product, LayerNorm's precision...)
# is the run's to choose: no config.json holds it, and the weights are the same.
BERT_SOURCE_FIELDS = tuple(name for name in SHARED_KEYS if name not in (*TRAINING_ONLY_KEYS, *RUNTIME_FIELDS))
# ModernBERT's training-only keys: dropout, the init of new parts, fine-tuning's pooling.
MODERNBERT_SOURCE_SETTINGS = ("embedding_dropout", "attention_dropout", "mlp_dropout", "classifier_dropout",
                              "initializer_range", "initializer_cutoff_factor", "classifier_pooling")
MODERNBERT_SOURCE_FIELDS = ("architecture", *(name for name in (*MODERNBERT_HF_SHARED, *MODERNBERT_FIELDS)
                                              if name not in MODERNBERT_SOURCE_SETTINGS))
# What XLNet's config.json holds beside its shape (`from_xlnet_dict`): its one dropout rate (both of
# BERT's names), its activation and LayerNorm eps, the init of new parts, Transformer-XL's memory.
XLNET_SOURCE_SETTINGS = (*BERT_SOURCE_SETTINGS, "hidden_act", "layer_norm_eps", "mem_len", "clamp_len")


def build_bert(config: BertConfig, tokenizer: Tokenizer | None = None) -> BertForPreTraining:
    return BertForPreTraining(config)


def build_xlnet(config: BertConfig, tokenizer: Tokenizer | None = None) -> XLNetLMHeadModel:
    """XLNet's LM model; config.json names the tokenizer's own [CLS] and [SEP] ids (by role)."""
    roles = None if tokenizer is None else token_roles(tokenizer)
    ids = {} if roles is None else {"cls_token_id": roles.cls_token_id, "sep_token_id": roles.sep_token_id}
    return XLNetLMHeadModel(xlnet_config(config, **ids))


def table_positions(config: BertConfig) -> int:
    """The tokens an absolute position table reads (RoBERTa's 514 rows read 512: `max_tokens`)."""
    return config.max_tokens


def bert_max_input_tokens(config: BertConfig) -> int | None:
    """An absolute table's tokens; relative positions (rope, transformer_xl) read any length."""
    return None if config.relative_positions else table_positions(config)


def same_layout(tokenizer: Tokenizer) -> Tokenizer:
    return tokenizer


def read_bert_weights(folder: Path) -> dict[str, torch.Tensor]:
    """A BERT folder's tensors under bertpre's names (`hf_format.normalize_keys`)."""
    return hf_format.normalize_keys(hf_format.read_weights(folder))


def pair_export_writer(writer: Callable[[nn.Module, Path], tuple[str, hf_format.ExportWriter]]
                       ) -> Callable[[nn.Module, Path], tuple[str, hf_format.ExportWriter]]:
    """A family's export writer (`writer`, for its pretraining model) that writes an rtd run's pair
    as the family's classes: its encoder, and its generator in `generator/`
    (`replaced_token.family_pair_export_writer`)."""
    def export_writer(model: nn.Module, tokenizer_folder: Path) -> tuple[str, hf_format.ExportWriter]:
        if not isinstance(model, ReplacedTokenDetection):
            return writer(model, tokenizer_folder)
        row = family(model.config)
        return family_pair_export_writer(model, tokenizer_folder, write_encoder=row.write_task_folder,
                                         encoder_attribute=row.encoder_attribute,
                                         encoder_class=f"{row.hf_task_prefix(model.config)}Model")
    return export_writer


def generator_mask_logits(mask_logits: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
    """A family's fill-mask (`mask_logits`) that reads an rtd run's generator where given the pair."""
    def read(model: nn.Module, tokenizer: Tokenizer, text: str,
             fits: Callable[[ForwardShape], None] = lambda shape: None) -> torch.Tensor:
        return mask_logits(generator_of(model), tokenizer, text, fits)
    return read


def refuse_bert_pair_export(config: BertConfig) -> str | None:
    """Why a BERT rtd run of this shape has no export: its generator is exported as ELECTRA's
    (`ElectraForMaskedLM`: absolute positions, distinct layers) and its encoder as `BertModel`."""
    if config.relative_positions or config.is_albert:
        return ("an rtd run of BERT exports its encoder as BertModel and its generator as ElectraForMaskedLM, "
                "which have absolute positions and no ALBERT options; this run has "
                + ("relative positions" if config.relative_positions else "ALBERT options")
                + ", and no transformers class holds it")
    return None


# BERT's generator is ELECTRA's network (BERT's layers, ELECTRA's projection and head), exported as such.
BERT_REPLACED_TOKEN = replace(BERT_PARTS, export_generator=electra_generator_writer,
                              load_generator=load_electra_generator, refuse_export=refuse_bert_pair_export)

# RoBERTa's values where BERT's differ: one token type, LayerNorm eps 1e-5, and a table of 514
# positions (512 tokens after the padding's rows, `BertConfig.max_tokens`).
ROBERTA_MODEL_DEFAULTS = {"type_vocab_size": 1, "layer_norm_eps": 1e-5, "max_position_embeddings": 514}

ROBERTA = Family(
    architecture="roberta", config=roberta_config_part("roberta"), display_name="RoBERTa",
    pretraining_class=RobertaForMaskedLM, sequence_head=RobertaForSequenceClassification,
    token_head=RobertaForTokenClassification, question_answering_head=RobertaForQuestionAnswering,
    hf_task_prefix=lambda config: ROBERTA_CLASS_PREFIXES[config.architecture], encoder_attribute="roberta",
    padding_side="right", objectives=("mlm", "rtd"), pair_task=False,
    build_pretraining=build_roberta, build_encoder=RobertaModel, tokenizer_layout=roberta_layout,
    read_weights=read_roberta_weights, optional_encoder_parts=(), optional_parts={"lm_head.": "the MLM head (lm_head)"},
    export_writer=pair_export_writer(roberta_export_writer), write_task_folder=write_roberta_task_folder,
    native_task_models=lambda config: True,
    count_parameters=count_roberta_parameters, training_flops=bert_training_flops,
    estimate_memory=estimate_roberta_memory, estimate_inference_memory=estimate_roberta_inference_memory,
    max_input_tokens=table_positions,
    shape_words=lambda config: (f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
                                f"absolute positions from pad_token_id + 1"),
    # the padding's id is where positions start: a source's, not the run's to choose
    source_fields=(*BERT_SOURCE_FIELDS, "pad_token_id"), source_settings=BERT_SOURCE_SETTINGS,
    grow_vocabulary=partial(grow_vocab_rows, word_embeddings="roberta.embeddings.word_embeddings.weight",
                            head_rows=("lm_head.bias",)),
    mask_logits=generator_mask_logits(roberta_mask_logits), token_types=no_token_types,
    model_defaults=ROBERTA_MODEL_DEFAULTS, shape_details=bert_shape_details,
    # one class here serves RoBERTa and XLM-R; transformers names each its own
    class_names=lambda config: (f"{ROBERTA_CLASS_PREFIXES[config.architecture]}Model",
                                f"{ROBERTA_CLASS_PREFIXES[config.architecture]}ForMaskedLM"),
    replaced_token=ReplacedTokenParts(
        encoder=RobertaModel, generator_config=generator_depth_config,
        generator=partial(family_generator, build=RobertaForMaskedLM, encoder_attribute="roberta"),
        export_generator=roberta_export_writer, load_generator=RobertaForMaskedLM.from_pretrained))

# ModernBERT-base's values where BERT-base's differ (its other keys are ModernBERT's own).
MODERNBERT_MODEL_DEFAULTS = {"intermediate_size": 1152, "num_hidden_layers": 22, "max_position_embeddings": 8192}

MODERNBERT = Family(
    architecture="modernbert", config=MODERNBERT_CONFIG, display_name="ModernBERT",
    pretraining_class=ModernBertForMaskedLM, sequence_head=ModernBertForSequenceClassification,
    token_head=ModernBertForTokenClassification, question_answering_head=ModernBertForQuestionAnswering,
    hf_task_prefix=lambda config: "ModernBert", encoder_attribute="model",
    padding_side="right", objectives=("mlm", "rtd"), pair_task=False,
    build_pretraining=build_modernbert, build_encoder=ModernBertModel, tokenizer_layout=same_layout,
    read_weights=read_modernbert_weights, optional_encoder_parts=(),
    optional_parts={"head.": "the MLM head (head)", "decoder.": "the decoder's bias (decoder.bias)"},
    export_writer=pair_export_writer(modernbert_export_writer), write_task_folder=write_modernbert_task_folder,
    native_task_models=lambda config: True,
    count_parameters=count_modernbert_parameters, training_flops=modernbert_training_flops,
    estimate_memory=estimate_modernbert_memory, estimate_inference_memory=estimate_modernbert_inference_memory,
    max_input_tokens=modernbert_max_input_tokens,
    shape_words=lambda config: (f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, rotary "
                                f"positions, global attention every {config.global_attn_every_n_layers} "
                                f"layers, a window of {config.local_attention} elsewhere"),
    source_fields=MODERNBERT_SOURCE_FIELDS, source_settings=MODERNBERT_SOURCE_SETTINGS,
    grow_vocabulary=partial(grow_vocab_rows, word_embeddings="model.embeddings.tok_embeddings.weight",
                            head_rows=("decoder.bias",)),
    mask_logits=generator_mask_logits(modernbert_mask_logits), token_types=no_token_types,
    model_defaults=MODERNBERT_MODEL_DEFAULTS, task_head_parts=("head.",), shape_details=modernbert_shape_details,
    flops_by_part=lambda config, seq_length, predicted_share, micro_batch_size: modernbert_flops_by_part(
        config, seq_length, predicted_share),
    # the embeddings are tok_embeddings and norm (rotary positions: no table); the switch is the encoder's
    replaced_token=ReplacedTokenParts(
        encoder=ModernBertModel, generator_config=generator_depth_config,
        generator=partial(family_generator, build=ModernBertForMaskedLM, encoder_attribute="model"),
        word_table="tok_embeddings", checkpointed=lambda encoder: encoder,
        export_generator=modernbert_export_writer, load_generator=ModernBertForMaskedLM.from_pretrained))

# ELECTRA: BERT's encoder (embeddings `embedding_size` wide where that differs from the layers'), the
# discriminator as its pretraining model; it trains with replaced-token detection alone, its generator
# the rtd objective's (`model.replaced_token`), exported beside it in `generator/`.
ELECTRA = Family(
    architecture="electra", config=ELECTRA_CONFIG, display_name="ELECTRA",
    pretraining_class=ElectraForPreTraining, sequence_head=ElectraForSequenceClassification,
    token_head=ElectraForTokenClassification, question_answering_head=ElectraForQuestionAnswering,
    hf_task_prefix=lambda config: "Electra", encoder_attribute="electra",
    padding_side="right", objectives=("rtd",), pair_task=False,
    build_pretraining=lambda config, tokenizer=None: ElectraForPreTraining(config), build_encoder=electra_encoder,
    tokenizer_layout=same_layout, read_weights=read_electra_weights, optional_encoder_parts=(),
    optional_parts={"discriminator_predictions.": "the discriminator head (discriminator_predictions)",
                    "generator.": "the generator (generator/: drawn at objective.generator_size)"},
    export_writer=electra_export_writer, write_task_folder=write_electra_task_folder,
    native_task_models=lambda config: True,
    count_parameters=count_electra_parameters, training_flops=bert_training_flops,
    estimate_memory=estimate_electra_memory, estimate_inference_memory=estimate_electra_inference_memory,
    max_input_tokens=table_positions,
    shape_words=lambda config: (f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, embeddings "
                                f"{config.embedding_size or config.hidden_size}, absolute positions"),
    source_fields=BERT_SOURCE_FIELDS, source_settings=BERT_SOURCE_SETTINGS, grow_vocabulary=None,
    mask_logits=electra_mask_logits,
    token_types=bert_token_types, shape_details=bert_shape_details,
    class_names=lambda config: ("ElectraModel", "ElectraForPreTraining"), load_pretrained=load_electra,
    replaced_token=BERT_PARTS)

# The table is `bertpre.model.config.FAMILIES`, filled here: the config routes each key and
# config.json's model_type by asking it, without importing the families' networks.
FAMILIES.update({
    "bert": Family(
        architecture="bert", config=BERT_CONFIG, display_name="BERT",
        pretraining_class=BertForPreTraining, sequence_head=BertForSequenceClassification,
        token_head=BertForTokenClassification, question_answering_head=BertForQuestionAnswering,
        hf_task_prefix=hf_format.bert_task_prefix, encoder_attribute="bert",
        padding_side="right", objectives=("mlm", "rtd"), pair_task=True,
        build_pretraining=build_bert, build_encoder=BertModel, tokenizer_layout=same_layout,
        read_weights=read_bert_weights, optional_encoder_parts=("pooler.",),
        optional_parts={"bert.pooler.": "the pooler (bert.pooler)", "cls.predictions.": "the MLM head (cls.predictions)",
                        "cls.seq_relationship.": "the pair head (cls.seq_relationship)"},
        export_writer=pair_export_writer(hf_format.bert_export_writer),
        write_task_folder=hf_format.write_bert_task_folder,
        # BertFor*, AlbertFor* (ALBERT options), BertpreFor* (relative positions: remote code)
        native_task_models=lambda config: True,
        count_parameters=count_bert_parameters, training_flops=bert_training_flops,
        estimate_memory=estimate_bert_memory, estimate_inference_memory=estimate_bert_inference_memory,
        max_input_tokens=bert_max_input_tokens,
        shape_words=lambda config: (f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
                                    f"{config.position_embedding_type} positions"),
        source_fields=BERT_SOURCE_FIELDS, source_settings=BERT_SOURCE_SETTINGS, grow_vocabulary=grow_vocab_rows,
        mask_logits=generator_mask_logits(bert_mask_logits),
        token_types=bert_token_types, shape_details=bert_shape_details, parameter_note=bert_base_note,
        pair_head="cls.seq_relationship.", replaced_token=BERT_REPLACED_TOKEN),
    "xlnet": Family(
        architecture="xlnet", config=XLNET_CONFIG, display_name="XLNet",
        pretraining_class=XLNetLMHeadModel, sequence_head=XLNetForSequenceClassification,
        token_head=XLNetForTokenClassification, question_answering_head=XLNetForQuestionAnsweringSimple,
        hf_task_prefix=lambda config: "XLNet", encoder_attribute="transformer",
        padding_side="left", objectives=("plm", "clm"), pair_task=False,
        build_pretraining=build_xlnet, build_encoder=xlnet_encoder, tokenizer_layout=xlnet_layout,
        read_weights=hf_format.read_weights, optional_encoder_parts=(), optional_parts={},
        export_writer=xlnet_export_writer, write_task_folder=write_xlnet_task_folder,
        native_task_models=lambda config: True,
        count_parameters=count_xlnet_parameters, training_flops=xlnet_training_flops_per_token,
        estimate_memory=estimate_xlnet_memory, estimate_inference_memory=estimate_xlnet_inference_memory,
        # relative positions with recurrent memory: any length, fill-mask in windows (`xlnet_mask_logits`)
        max_input_tokens=lambda config: None,
        shape_words=lambda config: (f"{config.num_hidden_layers} layers, hidden {config.hidden_size}, "
                                    f"relative positions, memory {config.mem_len}"),
        source_fields=XLNET_SHAPE_FIELDS, source_settings=XLNET_SOURCE_SETTINGS, grow_vocabulary=None,
        mask_logits=xlnet_mask_logits,
        token_types=xlnet_token_types, low_precision_layernorm=False, cost_report="two-stream",
        flops_by_part=lambda config, seq_length, predicted_share, micro_batch_size: xlnet_training_flops(
            config, seq_length, predicted_share, micro_batch_size=micro_batch_size)),
    "roberta": ROBERTA,
    # XLM-R is RoBERTa's network under its own Hugging Face names (model_type, classes)
    "xlm-roberta": replace(ROBERTA, architecture="xlm-roberta", config=roberta_config_part("xlm-roberta"),
                           display_name="XLM-RoBERTa"),
    "modernbert": MODERNBERT,
    "electra": ELECTRA,
})


def family(config: BertConfig) -> Family:
    """The row of `config.architecture`."""
    try:
        return FAMILIES[config.architecture]
    except KeyError:
        raise UserError(f"model.architecture {config.architecture!r} is not built; use one of "
                        f"{', '.join(FAMILIES)}") from None


def max_input_tokens(config: BertConfig) -> int | None:
    """The most tokens one forward of `config`'s model may read (`Family.max_input_tokens`)."""
    return family(config).max_input_tokens(config)


def token_types(config: BertConfig, segments: Sequence[int]) -> list[int]:
    """The token types `config`'s family reads for an input whose tokens belong to `segments`
    (0: the first text, 1: the second; `tokenizer.roles.text_segments`)."""
    return family(config).token_types(config, segments)


def family_of(model: nn.Module) -> Family:
    """The row of a pretraining model, as its config names it (one class may serve two rows:
    RoBERTa's and XLM-R's)."""
    return family(pretraining_config(model))


def pretraining_config(model: nn.Module) -> BertConfig:
    """The shape of a pretraining model of any family under bertpre's names (XLNet's model keeps
    its own XLNetConfig), as the cost model reads it."""
    config = model.config
    return config if isinstance(config, BertConfig) else from_xlnet_dict(config.to_hf_dict())


def load_pretraining_model(folder: str | Path, *, strict: bool = False) -> nn.Module:
    """The pretraining model (of whichever family config.json names) of a Hugging Face folder; the
    parts a folder may lack (a BertModel-only folder's heads) are newly initialized, unless `strict`."""
    path = hf_format.check_folder(folder)
    row = family(hf_format.read_config(path))
    if row.load_pretrained is not None:
        return row.load_pretrained(folder, strict=strict)
    if row.replaced_token is not None and row.replaced_token.exports:
        if pair_generator_size(path) is not None:  # an rtd run's checkpoint: generator and discriminator
            return ReplacedTokenDetection.from_pretrained(path, strict=strict)
        if exported_pair(path):  # its export: the generator, the masked LM that fill-mask and evaluate read
            return row.replaced_token.load_generator(path / GENERATOR_DIR, strict=strict)
    refuse_pair(folder, row.display_name)  # an rtd run whose export is not built
    return row.pretraining_class.from_pretrained(folder, strict=strict)


def encoder_of(model: nn.Module, config: BertConfig) -> nn.Module:
    """The encoder inside a pretraining or task model of `config`'s family."""
    return getattr(model, family(config).encoder_attribute)


def load_encoder_weights(folder: Path, config: BertConfig) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The encoder's tensors (its own names, no `bert.` or `transformer.` prefix) of a pretraining
    model's, a task model's or a bare encoder's folder, checked against the family's layout; the
    parts it may lack (BERT's pooler) are drawn from the current torch seed.

    Returns:
        (the encoder's state, the names of the parts drawn fresh).
    """
    state, _, missing = load_task_start(folder, config)
    return state, missing


def load_task_start(folder: Path, config: BertConfig) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor],
                                                                 list[str]]:
    """What a fine-tuning starts from in `folder`: the encoder's tensors (`load_encoder_weights`)
    and the pretrained parts the family's task models share by name (`Family.task_head_parts`:
    ModernBERT's `head.…`, under the task model's names), those the folder has.

    Returns:
        (the encoder's state, the shared head's state (often empty), the names of the encoder's
        parts drawn fresh).
    """
    row = family(config)
    if pair_generator_size(folder) is not None:  # an rtd run's checkpoint: its discriminator's encoder
        weights = ReplacedTokenDetection.from_pretrained(folder).discriminator_state()
        prefix = PAIR_ENCODER + "."
    else:
        weights = row.read_weights(folder)
        prefix = row.encoder_attribute + "."
    head = {name: tensor for name, tensor in weights.items() if name.startswith(row.task_head_parts)} \
        if row.task_head_parts else {}
    state = {name.removeprefix(prefix): tensor for name, tensor in weights.items()
             if name.startswith(prefix)} or weights  # a bare encoder's names have no prefix
    with torch.device("meta"):  # the shapes only
        expected = {name: tensor.shape for name, tensor in row.build_encoder(config).state_dict().items()}
    missing, _ = hf_format.match_state_dict(expected, state, folder, layout=row.display_name,
                                            optional=row.optional_encoder_parts)
    if not missing:
        return {name: state[name] for name in expected}, head, missing
    encoder = row.build_encoder(config)  # the missing parts drawn from the seed
    with torch.no_grad():
        encoder.load_state_dict({name: tensor for name, tensor in state.items() if name in expected}, strict=False)
    return encoder.state_dict(), head, missing
