"""ModernBERT's config part: its own keys (Hugging Face's ModernBertConfig names), its rules, its
shape, and config.json both ways (transformers 5's `layer_types` and `rope_parameters`, and the
older keys released folders carry)."""
from __future__ import annotations

from dataclasses import dataclass, fields

from bertpre.errors import UserError
from bertpre.model.config import HIDDEN_ACTS, BertConfig, FamilyConfig, FamilyFields
from bertpre.ranges import MAX_SEQ_LENGTH, MAX_SIZE, integers, numbers


@dataclass(frozen=True)
class ModernBertFields(FamilyFields):
    """ModernBERT's own keys (Hugging Face's ModernBertConfig names), `BertConfig.family_fields`
    of an `architecture: modernbert` config; defaults are ModernBERT-base's. Other architectures
    refuse them."""

    hidden_activation: str = "gelu"
    norm_eps: float = 1e-5
    norm_bias: bool = False
    local_attention: int = 128
    global_attn_every_n_layers: int = 3
    global_rope_theta: float = 160000.0
    local_rope_theta: float = 10000.0
    attention_bias: bool = False
    mlp_bias: bool = False
    decoder_bias: bool = True
    embedding_dropout: float = 0.0
    attention_dropout: float = 0.0
    mlp_dropout: float = 0.0
    initializer_cutoff_factor: float = 2.0
    classifier_pooling: str = "cls"
    classifier_activation: str = "gelu"
    classifier_bias: bool = False
    classifier_dropout: float = 0.0

    def layer_is_global(self, index: int) -> bool:
        """Whether layer `index` attends globally (layers 0, n, 2n … for `global_attn_every_n_layers`
        n, as transformers lays them out) rather than in the window."""
        return index % self.global_attn_every_n_layers == 0

    @property
    def sliding_window(self) -> int:
        """How far a local layer's token looks each way: keys at distance <= local_attention // 2
        (transformers' window, `local_attention` the whole width)."""
        return self.local_attention // 2


# ModernBERT's own keys, in the order a run's config.yaml writes them.
MODERNBERT_FIELDS = tuple(item.name for item in fields(ModernBertFields))
# BERT's keys that have no meaning in ModernBERT's layout, each with what to set instead; a config
# that gives one for `modernbert` is refused (a silently ignored key would be a silent surprise).
MODERNBERT_INSTEAD = {
    "hidden_act": "model.hidden_activation",
    "layer_norm_eps": "model.norm_eps",
    "hidden_dropout_prob": "model.embedding_dropout and model.mlp_dropout",
    "attention_probs_dropout_prob": "model.attention_dropout",
    "type_vocab_size": "nothing: ModernBERT has no token types",
    "position_embedding_type": "nothing: ModernBERT's positions are rotary (model.global_rope_theta, "
                               "model.local_rope_theta)",
    "rope_theta": "model.global_rope_theta and model.local_rope_theta",
    "embedding_size": "nothing: ModernBERT has no factorized embeddings",
    "share_layers": "nothing: ModernBERT's layers are not shared",
    "mem_len": "nothing: ModernBERT has no Transformer-XL memory",
    "clamp_len": "nothing: ModernBERT has no Transformer-XL memory",
}
# The ranges of its numeric keys (`config.rules.RULES` takes them from the row).
MODERNBERT_RANGES = {
    "norm_eps": numbers("(0, 1]"),
    "local_attention": integers(1, MAX_SEQ_LENGTH),  # the whole window: local_attention // 2 each way
    "global_attn_every_n_layers": integers(1, MAX_SIZE),  # 1: every layer global
    "global_rope_theta": numbers("(1, 1e12]"),
    "local_rope_theta": numbers("(1, 1e12]"),
    "embedding_dropout": numbers("[0, 1)"),
    "attention_dropout": numbers("[0, 1)"),
    "mlp_dropout": numbers("[0, 1)"),
    "classifier_dropout": numbers("[0, 1)"),
    "initializer_cutoff_factor": numbers("(0, 100]"),  # truncation at ± factor × std
}
CLASSIFIER_POOLINGS = ("cls", "mean")
# Fields that shape a ModernBERT's weights.
MODERNBERT_SHAPE_FIELDS = ("architecture", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size", "norm_bias", "attention_bias", "mlp_bias", "decoder_bias",
                           "classifier_bias")
# What a ModernBERT's config.json says in transformers' names beyond the shared ones (the rest of
# MODERNBERT_FIELDS are written as they are).
MODERNBERT_HF_SHARED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "max_position_embeddings", "initializer_range", "pad_token_id")


def validate_modernbert(config: BertConfig) -> None:
    """ModernBERT's own rules: rotary positions in every head, a window the positions hold,
    a global layer at least every few layers, and its choices (activations, pooling)."""
    head_size = config.hidden_size // config.num_attention_heads
    if head_size % 2:
        raise UserError(f"ModernBERT's rotary positions turn pairs of a head's {head_size} dimensions; choose "
                        f"model.hidden_size / model.num_attention_heads even (it is {config.hidden_size} / "
                        f"{config.num_attention_heads})")
    for name in ("local_attention", "global_attn_every_n_layers"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise UserError(f"model.{name} must be a positive integer, got {value!r}")
    if config.local_attention > config.max_position_embeddings:
        raise UserError(f"model.local_attention ({config.local_attention}) is wider than the "
                        f"model.max_position_embeddings ({config.max_position_embeddings}) the model reads; "
                        "lower it, or raise max_position_embeddings")
    for name in ("hidden_activation", "classifier_activation"):
        if getattr(config, name) not in HIDDEN_ACTS:
            raise UserError(f"model.{name} {getattr(config, name)!r} is not supported; use one of "
                            + ", ".join(HIDDEN_ACTS))
    if config.classifier_pooling not in CLASSIFIER_POOLINGS:
        raise UserError(f"model.classifier_pooling {config.classifier_pooling!r} is not built; use one of "
                        + ", ".join(CLASSIFIER_POOLINGS))


def modernbert_hf_dict(config: BertConfig) -> dict:
    """config.json of Hugging Face's `ModernBertForMaskedLM`: transformers 5's `layer_types` and
    `rope_parameters`, and the keys released ModernBERT folders (and transformers 4) read,
    `global_attn_every_n_layers`, `global_rope_theta`, `local_rope_theta`. The special tokens'
    ids are the export's to add (the tokenizer holds them); None here, not transformers'
    defaults, which are ids of ModernBERT's own vocabulary."""
    hf = {"architectures": ["ModernBertForMaskedLM"], "model_type": "modernbert"}
    hf.update({name: getattr(config, name) for name in (*MODERNBERT_HF_SHARED, *MODERNBERT_FIELDS)})
    hf.update(layer_types=["full_attention" if config.layer_is_global(index) else "sliding_attention"
                           for index in range(config.num_hidden_layers)],
              rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": config.global_rope_theta},
                               "sliding_attention": {"rope_type": "default", "rope_theta": config.local_rope_theta}},
              bos_token_id=None, eos_token_id=None, cls_token_id=None, sep_token_id=None,
              tie_word_embeddings=True)
    return hf

def from_modernbert_dict(hf: dict) -> BertConfig:
    """An `architecture: modernbert` BertConfig from a ModernBERT config.json: transformers 5's
    `layer_types` and `rope_parameters`, or the older `global_attn_every_n_layers`,
    `global_rope_theta` and `local_rope_theta`."""
    known = (*MODERNBERT_HF_SHARED, *MODERNBERT_FIELDS)
    values = {name: hf[name] for name in known if name in hf and hf[name] is not None}
    layers = values.get("num_hidden_layers", 22)
    layer_types = hf.get("layer_types")
    if layer_types is not None:
        values["global_attn_every_n_layers"] = global_layer_period(layer_types, layers)
    rope = hf.get("rope_parameters") or {}
    for kind, name in (("full_attention", "global_rope_theta"), ("sliding_attention", "local_rope_theta")):
        parameters = rope.get(kind) or {}
        if parameters.get("rope_type", "default") != "default":
            raise UserError(f"config.json's rope_parameters.{kind} has rope_type {parameters['rope_type']!r}; "
                            "bertpre builds ModernBERT's 'default' rotary positions only")
        if parameters.get("rope_theta") is not None:
            values[name] = parameters["rope_theta"]
    values.setdefault("pad_token_id", 50283)  # transformers' default
    config = BertConfig(architecture="modernbert", **values)
    config.validate()
    return config


def global_layer_period(layer_types: list, num_hidden_layers: int) -> int:
    """ModernBERT's `global_attn_every_n_layers` n from transformers' `layer_types` (layers 0, n,
    2n … "full_attention", the rest "sliding_attention"); another pattern is refused."""
    if len(layer_types) != num_hidden_layers:
        raise UserError(f"config.json's layer_types names {len(layer_types)} layers, but num_hidden_layers "
                        f"is {num_hidden_layers}")
    global_layers = [index for index, kind in enumerate(layer_types) if kind == "full_attention"]
    period = global_layers[1] if len(global_layers) > 1 else max(num_hidden_layers, 1)
    expected = ["full_attention" if index % period == 0 else "sliding_attention" for index in range(num_hidden_layers)]
    if list(layer_types) != expected:
        raise UserError("config.json's layer_types are not global every n-th layer from layer 0 (the "
                        "pattern bertpre builds, global_attn_every_n_layers); got " + ", ".join(map(str, layer_types)))
    return period


MODERNBERT_CONFIG = FamilyConfig(
    model_types=("modernbert",), read_hf=from_modernbert_dict, write_hf=modernbert_hf_dict,
    shape_fields=MODERNBERT_SHAPE_FIELDS, validate=validate_modernbert, fields=ModernBertFields,
    refused_keys=MODERNBERT_INSTEAD, owner="ModernBERT's", ranges=MODERNBERT_RANGES, unpads=lambda config: True)
