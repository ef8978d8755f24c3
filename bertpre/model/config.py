"""The models' shapes: `BertConfig` (Hugging Face BERT names, bertpre's ALBERT and architecture options) and `XLNetConfig`."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from bertpre.errors import UserError
from bertpre.model.layer_norm import LOW_PRECISION_CHOICES
from bertpre.model.positions import POSITION_EMBEDDING_TYPES

HIDDEN_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")
# `bert`: BERT's layout (and ALBERT's options, relative positions); `xlnet`: XLNet's layout,
# two-stream relative attention and Transformer-XL's memory (`bertpre.model.xlnet`); `roberta`
# and `xlm-roberta`: RoBERTa's layout (`bertpre.model.roberta`), the two named as Hugging Face
# names their config.json's model_type and classes (XLM-R is RoBERTa's network).
ROBERTA_ARCHITECTURES = ("roberta", "xlm-roberta")
# `modernbert`: ModernBERT's layout (`bertpre.model.modernbert`), its own keys named as Hugging
# Face's ModernBertConfig names them (MODERNBERT_FIELDS).
ARCHITECTURES = ("bert", "xlnet", *ROBERTA_ARCHITECTURES, "modernbert")
# Hugging Face's class-name prefix of each RoBERTa-layout model_type.
ROBERTA_CLASS_PREFIXES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta"}
# Fields that shape an XLNet's weights (the rest of BERT's have no meaning there).
XLNET_SHAPE_FIELDS = ("architecture", "vocab_size", "hidden_size", "num_hidden_layers",
                      "num_attention_heads", "intermediate_size")
# Fields bertpre adds for XLNet; a BERT export's config.json leaves them out.
XLNET_FIELDS = ("architecture", "mem_len", "clamp_len")
# How a model computes, not what it is: no config.json carries them (an export reads as before).
RUNTIME_FIELDS = ("low_precision_layernorm", "fused_qkv", "last_layer_rows")
# ModernBERT's own keys (Hugging Face's ModernBertConfig names); other architectures refuse them.
MODERNBERT_FIELDS = ("hidden_activation", "norm_eps", "norm_bias", "local_attention", "global_attn_every_n_layers",
                     "global_rope_theta", "local_rope_theta", "attention_bias", "mlp_bias", "decoder_bias",
                     "embedding_dropout", "attention_dropout", "mlp_dropout", "initializer_cutoff_factor",
                     "classifier_pooling", "classifier_activation", "classifier_bias", "classifier_dropout")
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
CLASSIFIER_POOLINGS = ("cls", "mean")
# Fields that shape a ModernBERT's weights.
MODERNBERT_SHAPE_FIELDS = ("architecture", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                           "intermediate_size", "norm_bias", "attention_bias", "mlp_bias", "decoder_bias",
                           "classifier_bias")
# What a ModernBERT's config.json says in transformers' names beyond the shared ones (the rest of
# MODERNBERT_FIELDS are written as they are).
MODERNBERT_HF_SHARED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "max_position_embeddings", "initializer_range", "pad_token_id")
# A model with relative positions exports as Hugging Face remote code (transformers has no
# such BERT): config.json names these classes of the export's own two Python files.
REMOTE_MODEL_TYPE = "bertpre"
REMOTE_AUTO_MAP = {
    "AutoConfig": "configuration_bertpre.BertpreConfig",
    "AutoModel": "modeling_bertpre.BertpreModel",
    "AutoModelForMaskedLM": "modeling_bertpre.BertpreForMaskedLM",
    "AutoModelForPreTraining": "modeling_bertpre.BertpreForPreTraining",
    # the task classes too, so that a user fine-tunes an export as any other model
    "AutoModelForSequenceClassification": "modeling_bertpre.BertpreForSequenceClassification",
    "AutoModelForTokenClassification": "modeling_bertpre.BertpreForTokenClassification",
    "AutoModelForQuestionAnswering": "modeling_bertpre.BertpreForQuestionAnswering",
}


@dataclass
class BertConfig:
    """The model's shape; field names and meanings are those of Hugging Face's `BertConfig`.

    `vocab_size` may be the string "auto" until it is resolved from the tokenizer.
    `embedding_size` (ALBERT factorized embeddings) and `share_layers` (ALBERT cross-layer
    sharing) are bertpre's additions; `None` / `False` give plain BERT.
    `position_embedding_type` is BERT's `absolute` table, or relative positions: `rope`
    (rotary, with `rope_theta`) or `transformer_xl` (see `bertpre.model.positions`); with
    these `max_position_embeddings` is only the length the model is meant for, not a limit.

    `architecture: xlnet` builds `XLNetLMHeadModel` from the same names (`xlnet_config`):
    hidden_size is XLNet's d_model, intermediate_size its d_inner, hidden_dropout_prob its one
    dropout; `mem_len` is Transformer-XL's memory (states kept per layer, 0: none) and
    `clamp_len` the distance beyond which relative positions share one encoding (-1: none).
    Positions are relative by construction; `max_position_embeddings`, `type_vocab_size` and
    the ALBERT options have no meaning there.

    `architecture: roberta` (or `xlm-roberta`, the same network under XLM-R's Hugging Face
    names) builds RoBERTa (`bertpre.model.roberta`) from BERT's names: its positions start at
    `pad_token_id + 1` and count real tokens alone (`position_offset`), so a table of
    `max_position_embeddings` rows reads `max_tokens` = 514 - 2 = 512 tokens.
    """

    vocab_size: int | str = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    pad_token_id: int = 0
    embedding_size: int | None = None
    share_layers: bool = False
    position_embedding_type: str = "absolute"
    rope_theta: float = 10000.0
    architecture: str = "bert"
    mem_len: int = 0
    clamp_len: int = -1
    # LayerNorm in the autocast dtype, so that the residual stream stays 16-bit (`bertpre.model.layer_norm`):
    # true, false, or auto (under bf16 autocast alone). How the model runs, not its shape: no config.json has it.
    low_precision_layernorm: bool | str = "auto"
    # Query, key and value from one (3C, C) matrix product (`BertSelfAttention.qkv_joined`): true,
    # false, or auto (under autocast); the parameters stay three. How the model runs, not its
    # shape: no config.json has it.
    fused_qkv: bool | str = "auto"
    # Pretraining's last layer computes only the rows its heads read ([CLS] and the predicted
    # positions), its keys and values still from every token; false: every position (A/B). How the
    # model runs, not its shape: no config.json has it.
    last_layer_rows: bool = True
    # ModernBERT's (architecture: modernbert); defaults are ModernBERT-base's.
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

    def validate(self) -> None:
        """Raise UserError naming the first field that cannot build a model."""
        if not isinstance(self.vocab_size, int) or isinstance(self.vocab_size, bool):
            raise UserError(
                f"model.vocab_size is {self.vocab_size!r}; resolve it to an integer "
                "(from the tokenizer) before building the model"
            )
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"model.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads != 0:
            raise UserError(
                f"model.hidden_size ({self.hidden_size}) must be divisible by "
                f"model.num_attention_heads ({self.num_attention_heads})"
            )
        if self.hidden_act not in HIDDEN_ACTS:
            raise UserError(
                f"model.hidden_act {self.hidden_act!r} is not supported; use one of "
                + ", ".join(HIDDEN_ACTS)
            )
        for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
            value = getattr(self, name)
            if not 0.0 <= float(value) < 1.0:
                raise UserError(f"model.{name} must be in [0, 1), got {value!r}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise UserError(
                f"model.pad_token_id ({self.pad_token_id}) must be below vocab_size ({self.vocab_size})"
            )
        if self.position_embedding_type not in POSITION_EMBEDDING_TYPES:
            raise UserError(f"model.position_embedding_type {self.position_embedding_type!r} is not "
                            f"supported; use one of {', '.join(POSITION_EMBEDDING_TYPES)}")
        head_size = self.hidden_size // self.num_attention_heads
        if self.position_embedding_type == "rope" and head_size % 2:
            raise UserError(f"model.position_embedding_type rope rotates pairs of a head's "
                            f"{head_size} dimensions; choose hidden_size / num_attention_heads even")
        if self.position_embedding_type == "transformer_xl" and self.hidden_size % 2:
            raise UserError("model.position_embedding_type transformer_xl needs an even hidden_size "
                            "(its sinusoids come in sin/cos pairs)")
        if isinstance(self.rope_theta, bool) or not isinstance(self.rope_theta, (int, float)) \
                or not self.rope_theta > 1:
            raise UserError(f"model.rope_theta must be a number above 1 (e.g. 10000), got {self.rope_theta!r}")
        for name in ("low_precision_layernorm", "fused_qkv"):  # the run-time switches: true, false or auto
            value = getattr(self, name)
            if value not in LOW_PRECISION_CHOICES or not isinstance(value, (bool, str)):
                raise UserError(f"model.{name} must be true, false or auto, got {value!r}")
        if not isinstance(self.last_layer_rows, bool):
            raise UserError(f"model.last_layer_rows must be true or false, got {self.last_layer_rows!r}")
        if self.embedding_size is not None and (
            not isinstance(self.embedding_size, int) or self.embedding_size < 1
        ):
            raise UserError(
                f"model.embedding_size must be a positive integer or null, got {self.embedding_size!r}"
            )
        self.validate_architecture()

    def validate_architecture(self) -> None:
        """The architecture's own rules: XLNet's options only with `xlnet`, ALBERT's and relative
        positions only with `bert`."""
        if self.architecture not in ARCHITECTURES:
            raise UserError(f"model.architecture {self.architecture!r} is not built; use one of "
                            f"{', '.join(ARCHITECTURES)}")
        for name, low in (("mem_len", 0), ("clamp_len", -1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise UserError(f"model.{name} must be an integer of at least {low}, got {value!r}")
        if self.architecture != "xlnet" and self.mem_len:
            raise UserError(f"model.mem_len is Transformer-XL's memory, which {self.architecture}'s layout "
                            "does not carry; set model.architecture: xlnet, or model.mem_len: 0")
        if self.architecture == "bert":
            return
        if self.is_modernbert:
            self.validate_modernbert()
            return
        if self.is_roberta:
            self.validate_roberta()
            return
        if self.is_albert:
            raise UserError("model.embedding_size and model.share_layers are ALBERT's options, which "
                            "XLNet's layout does not have; remove them for model.architecture xlnet")
        if self.low_precision_layernorm is True:  # auto and false read alike there
            raise UserError("model.low_precision_layernorm is not built for XLNet's layers (their LayerNorm "
                            "stays float32 under autocast); remove it for model.architecture xlnet")
        if self.position_embedding_type == "rope":
            raise UserError("model.architecture xlnet has its own relative positions (Transformer-XL's "
                            "sinusoids); remove model.position_embedding_type rope")
        if self.hidden_size % 2:
            raise UserError("model.architecture xlnet needs an even model.hidden_size (its sinusoids "
                            "come in sin/cos pairs)")
        if self.hidden_dropout_prob != self.attention_probs_dropout_prob:
            raise UserError(f"XLNet has one dropout rate, but model.hidden_dropout_prob is "
                            f"{self.hidden_dropout_prob:g} and model.attention_probs_dropout_prob "
                            f"{self.attention_probs_dropout_prob:g}; make them equal")

    def validate_roberta(self) -> None:
        """RoBERTa's own rules: Hugging Face's RoBERTa has absolute positions alone, no ALBERT
        options, and a position table that starts after the padding's row."""
        if self.is_albert:
            raise UserError(f"model.embedding_size and model.share_layers are ALBERT's options, which "
                            f"RoBERTa's layout does not have; remove them for model.architecture {self.architecture}")
        if self.position_embedding_type != "absolute":
            raise UserError(f"model.architecture {self.architecture} has RoBERTa's absolute position table; "
                            f"remove model.position_embedding_type {self.position_embedding_type}")
        if self.max_tokens < 1:
            raise UserError(f"model.max_position_embeddings ({self.max_position_embeddings}) leaves no "
                            f"position for a token: RoBERTa's positions start after the padding's row "
                            f"(pad_token_id {self.pad_token_id}); raise it to at least {self.position_offset + 1}")

    def validate_modernbert(self) -> None:
        """ModernBERT's own rules: rotary positions in every head, a window the positions hold,
        a global layer at least every few layers, and its choices (activations, pooling)."""
        head_size = self.hidden_size // self.num_attention_heads
        if head_size % 2:
            raise UserError(f"ModernBERT's rotary positions turn pairs of a head's {head_size} dimensions; choose "
                            f"model.hidden_size / model.num_attention_heads even (it is {self.hidden_size} / "
                            f"{self.num_attention_heads})")
        for name in ("local_attention", "global_attn_every_n_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"model.{name} must be a positive integer, got {value!r}")
        if self.local_attention > self.max_position_embeddings:
            raise UserError(f"model.local_attention ({self.local_attention}) is wider than the "
                            f"model.max_position_embeddings ({self.max_position_embeddings}) the model reads; "
                            "lower it, or raise max_position_embeddings")
        for name in ("hidden_activation", "classifier_activation"):
            if getattr(self, name) not in HIDDEN_ACTS:
                raise UserError(f"model.{name} {getattr(self, name)!r} is not supported; use one of "
                                + ", ".join(HIDDEN_ACTS))
        if self.classifier_pooling not in CLASSIFIER_POOLINGS:
            raise UserError(f"model.classifier_pooling {self.classifier_pooling!r} is not built; use one of "
                            + ", ".join(CLASSIFIER_POOLINGS))

    def layer_is_global(self, index: int) -> bool:
        """Whether ModernBERT's layer `index` attends globally (layers 0, n, 2n … for
        `global_attn_every_n_layers` n, as transformers lays them out) rather than in the window."""
        return index % self.global_attn_every_n_layers == 0

    @property
    def sliding_window(self) -> int:
        """How far a local layer's token looks each way: keys at distance <= local_attention // 2
        (transformers' window, `local_attention` the whole width)."""
        return self.local_attention // 2

    def architecture_fields(self) -> tuple[str, ...]:
        """The fields with a meaning for this architecture (a run's config.yaml writes these):
        ModernBERT's own for `modernbert`, without BERT's that it refuses; the rest without ModernBERT's."""
        if self.is_modernbert:
            return tuple(f.name for f in fields(self) if f.name not in MODERNBERT_INSTEAD)
        return tuple(f.name for f in fields(self) if f.name not in MODERNBERT_FIELDS)

    @property
    def is_modernbert(self) -> bool:
        return self.architecture == "modernbert"

    @property
    def is_xlnet(self) -> bool:
        return self.architecture == "xlnet"

    @property
    def is_roberta(self) -> bool:
        """RoBERTa's layout (`roberta` or `xlm-roberta`)."""
        return self.architecture in ROBERTA_ARCHITECTURES

    @property
    def position_offset(self) -> int:
        """The position-table row of a sequence's first token: 0 for BERT; for RoBERTa
        pad_token_id + 1, the rows up to the padding's being the padding's (positions count
        the real tokens alone, as fairseq's `make_positions` does)."""
        return self.pad_token_id + 1 if self.is_roberta else 0

    @property
    def max_tokens(self) -> int:
        """The longest sequence the position table reads (RoBERTa's 514 rows read 512 tokens);
        with relative positions only the length the model is meant for."""
        return self.max_position_embeddings - self.position_offset

    def shape_fields(self) -> tuple[str, ...]:
        """The fields two models must share for one's weights to load into the other."""
        if self.is_xlnet:
            return XLNET_SHAPE_FIELDS
        if self.is_modernbert:
            return MODERNBERT_SHAPE_FIELDS
        if self.is_roberta:  # the padding's id is where RoBERTa's positions start
            return ("architecture", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                    "intermediate_size", "max_position_embeddings", "type_vocab_size", "pad_token_id")
        return ("architecture", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings", "type_vocab_size", "embedding_size",
                "share_layers", "position_embedding_type", "rope_theta")

    def xlnet_config(self, *, reuse_len: int | None = None, cls_token_id: int | None = 2,
                     sep_token_id: int | None = 3) -> XLNetConfig:
        """The `XLNetConfig` of an `architecture: xlnet` model."""
        return XLNetConfig(vocab_size=self.vocab_size, hidden_size=self.hidden_size,
                           num_hidden_layers=self.num_hidden_layers,
                           num_attention_heads=self.num_attention_heads,
                           intermediate_size=self.intermediate_size, hidden_act=self.hidden_act,
                           dropout=self.hidden_dropout_prob, layer_norm_eps=self.layer_norm_eps,
                           initializer_range=self.initializer_range, mem_len=self.mem_len,
                           reuse_len=reuse_len, clamp_len=self.clamp_len, pad_token_id=self.pad_token_id,
                           cls_token_id=cls_token_id, sep_token_id=sep_token_id)

    @property
    def relative_positions(self) -> bool:
        """Whether positions enter attention (`rope`, `transformer_xl`, XLNet) rather than a table."""
        return self.position_embedding_type != "absolute" or self.is_xlnet or self.is_modernbert

    @property
    def is_albert(self) -> bool:
        """Whether an ALBERT option (factorized embeddings or shared layers) is on."""
        return self.embedding_size is not None or self.share_layers

    def check_vocab_fits(self, tokenizer_vocab_size: int, tokenizer_source: str) -> None:
        """Refuse a tokenizer whose ids reach past the model's embedding rows."""
        if tokenizer_vocab_size > self.vocab_size:
            raise UserError(
                f"model.vocab_size ({self.vocab_size}) is smaller than the tokenizer's vocabulary "
                f"({tokenizer_vocab_size} tokens, {tokenizer_source}); use the model's own "
                f"tokenizer, or set model.vocab_size to 'auto' or at least {tokenizer_vocab_size}"
            )

    def to_dict(self) -> dict:
        """The fields as a plain dict (YAML/JSON friendly)."""
        return asdict(self)

    def bert_dict(self) -> dict:
        """The fields a BERT-layout model has (XLNet's left out), for its config.json."""
        return {name: value for name, value in self.to_dict().items()
                if name not in (*XLNET_FIELDS, *MODERNBERT_FIELDS, *RUNTIME_FIELDS)}

    def to_hf_dict(self) -> dict:
        """config.json content: Hugging Face `BertConfig` / `BertForPreTraining` for absolute
        positions; for relative ones, the remote-code config of an export's
        `configuration_bertpre.py` (`model_type` "bertpre", `auto_map`); for `xlnet`, Hugging
        Face's `XLNetLMHeadModel` config."""
        if self.is_xlnet:
            return self.xlnet_config().to_hf_dict()
        if self.is_roberta:
            return self.roberta_hf_dict()
        if self.is_modernbert:
            return self.modernbert_hf_dict()
        if self.relative_positions:
            hf = {"architectures": ["BertpreForPreTraining"], "model_type": REMOTE_MODEL_TYPE,
                  "auto_map": dict(REMOTE_AUTO_MAP)}
            hf.update(self.bert_dict())
            hf.update(tie_word_embeddings=True)
            return hf
        hf = {"architectures": ["BertForPreTraining"], "model_type": "bert"}
        hf.update({f.name: getattr(self, f.name) for f in fields(self)
                   if f.name not in ("embedding_size", "share_layers", "rope_theta", *XLNET_FIELDS, *MODERNBERT_FIELDS,
                                 *RUNTIME_FIELDS)})
        hf.update(position_embedding_type="absolute", tie_word_embeddings=True)
        # Kept (harmless to transformers, which stores unknown keys) so a round trip is exact.
        if self.is_albert:
            hf.update(embedding_size=self.embedding_size, share_layers=self.share_layers)
        return hf

    def roberta_hf_dict(self) -> dict:
        """config.json of Hugging Face's `RobertaForMaskedLM` (or `XLMRobertaForMaskedLM`): BERT's
        names, RoBERTa's model_type; `bos_token_id` and `eos_token_id` are the export's to add
        (they name the tokenizer's ids, which the config does not hold)."""
        hf = {"architectures": [f"{ROBERTA_CLASS_PREFIXES[self.architecture]}ForMaskedLM"],
              "model_type": self.architecture}
        hf.update({f.name: getattr(self, f.name) for f in fields(self)
                   if f.name not in ("embedding_size", "share_layers", "rope_theta", *XLNET_FIELDS, *MODERNBERT_FIELDS,
                                 *RUNTIME_FIELDS)})
        hf.update(tie_word_embeddings=True)
        return hf

    def modernbert_hf_dict(self) -> dict:
        """config.json of Hugging Face's `ModernBertForMaskedLM`: transformers 5's `layer_types` and
        `rope_parameters`, and the keys released ModernBERT folders (and transformers 4) read,
        `global_attn_every_n_layers`, `global_rope_theta`, `local_rope_theta`. The special tokens'
        ids are the export's to add (the tokenizer holds them); None here, not transformers'
        defaults, which are ids of ModernBERT's own vocabulary."""
        hf = {"architectures": ["ModernBertForMaskedLM"], "model_type": "modernbert"}
        hf.update({name: getattr(self, name) for name in (*MODERNBERT_HF_SHARED, *MODERNBERT_FIELDS)})
        hf.update(layer_types=["full_attention" if self.layer_is_global(index) else "sliding_attention"
                               for index in range(self.num_hidden_layers)],
                  rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": self.global_rope_theta},
                                   "sliding_attention": {"rope_type": "default", "rope_theta": self.local_rope_theta}},
                  bos_token_id=None, eos_token_id=None, cls_token_id=None, sep_token_id=None,
                  tie_word_embeddings=True)
        return hf

    @classmethod
    def from_modernbert_dict(cls, hf: dict) -> BertConfig:
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
        config = cls(architecture="modernbert", **values)
        config.validate()
        return config

    @classmethod
    def from_hf_dict(cls, hf: dict) -> BertConfig:
        """Build from a Hugging Face BERT, RoBERTa or XLM-RoBERTa config.json dict (or a bertpre
        remote-code one, or an XLNet one); unknown keys are ignored."""
        model_type = hf.get("model_type", "bert")
        if model_type == "xlnet":
            return cls.from_xlnet_dict(hf)
        if model_type == "modernbert":
            return cls.from_modernbert_dict(hf)
        if model_type not in ("bert", REMOTE_MODEL_TYPE, *ROBERTA_ARCHITECTURES):
            raise UserError(
                f"config.json has model_type {model_type!r}, which bertpre does not build; it builds "
                f"{', '.join(('bert', *ROBERTA_ARCHITECTURES, 'modernbert'))} and xlnet (and reads its own exports' "
                f"{REMOTE_MODEL_TYPE!r})"
            )
        embedding_type = hf.get("position_embedding_type", "absolute")
        if model_type != REMOTE_MODEL_TYPE and embedding_type != "absolute":
            raise UserError(
                f"config.json has position_embedding_type {embedding_type!r}; bertpre reads "
                f"{model_type}'s 'absolute', and 'rope' or 'transformer_xl' from its own exports"
            )
        known = {f.name for f in fields(cls)} - set(XLNET_FIELDS) - set(MODERNBERT_FIELDS)
        values = {k: v for k, v in hf.items() if k in known}
        if model_type in ROBERTA_ARCHITECTURES:
            values["architecture"] = model_type
        if values.get("pad_token_id") is None:
            values["pad_token_id"] = 1 if model_type in ROBERTA_ARCHITECTURES else 0  # transformers' defaults
        config = cls(**values)
        config.validate()
        return config

    @classmethod
    def from_xlnet_dict(cls, hf: dict) -> BertConfig:
        """An `architecture: xlnet` BertConfig from an XLNet config.json (checked by `XLNetConfig`)."""
        xlnet = XLNetConfig.from_hf_dict(hf)
        return cls(architecture="xlnet", vocab_size=xlnet.vocab_size, hidden_size=xlnet.hidden_size,
                   num_hidden_layers=xlnet.num_hidden_layers, num_attention_heads=xlnet.num_attention_heads,
                   intermediate_size=xlnet.intermediate_size, hidden_act=xlnet.hidden_act,
                   hidden_dropout_prob=xlnet.dropout, attention_probs_dropout_prob=xlnet.dropout,
                   layer_norm_eps=xlnet.layer_norm_eps, initializer_range=xlnet.initializer_range,
                   pad_token_id=xlnet.pad_token_id, mem_len=xlnet.mem_len, clamp_len=xlnet.clamp_len)


def refuse_keys_of_other_layouts(config: BertConfig, given: frozenset[str] | set[str]) -> None:
    """Refuse a `model:` key a config gives (`given`) that `config.architecture` has no use for:
    ModernBERT's own keys for another architecture, BERT's keys that ModernBERT has not (naming
    ModernBERT's key to use instead)."""
    if config.is_modernbert:
        for name in MODERNBERT_INSTEAD:
            if name in given:
                raise UserError(f"model.{name} is BERT's, which model.architecture modernbert does not read; "
                                f"remove it (set {MODERNBERT_INSTEAD[name]} instead)")
        return
    for name in MODERNBERT_FIELDS:
        if name in given:
            raise UserError(f"model.{name} is ModernBERT's, which model.architecture {config.architecture} does "
                            "not have; remove it, or set model.architecture: modernbert")


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


@dataclass
class XLNetConfig:
    """The model's shape with bertpre's `BertConfig` names where the meaning is the same
    (`hidden_size` is XLNet's d_model, `intermediate_size` its d_inner, `hidden_act` its
    ff_activation); `dropout` is XLNet's one rate for embeddings, attention and feed-forward.

    `mem_len`: memory states kept per layer (0: no recurrence). `reuse_len`: how many of a
    segment's first states are cached (None: all). `clamp_len`: distances beyond it share one
    encoding (-1: none). Only `attn_type` "bi", `bi_data` false and `same_length` false are built.
    """

    vocab_size: int = 32000
    hidden_size: int = 1024
    num_hidden_layers: int = 24
    num_attention_heads: int = 16
    intermediate_size: int = 4096
    hidden_act: str = "gelu"
    dropout: float = 0.1
    layer_norm_eps: float = 1e-12
    initializer_range: float = 0.02
    mem_len: int = 0
    reuse_len: int | None = None
    clamp_len: int = -1
    attn_type: str = "bi"
    bi_data: bool = False
    same_length: bool = False
    pad_token_id: int = 0  # bertpre's trained vocabularies: [PAD]=0, [CLS]=2, [SEP]=3
    cls_token_id: int | None = 2
    sep_token_id: int | None = 3
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    def validate(self) -> None:
        """Raise UserError naming the first field that cannot build a model."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UserError(f"model.{name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_attention_heads:
            raise UserError(f"model.hidden_size ({self.hidden_size}) must be divisible by "
                            f"model.num_attention_heads ({self.num_attention_heads})")
        if self.hidden_size % 2:
            raise UserError("XLNet needs an even model.hidden_size (its sinusoids come in sin/cos pairs)")
        if self.hidden_act not in HIDDEN_ACTS:
            raise UserError(f"model.hidden_act {self.hidden_act!r} is not supported; use one of "
                            + ", ".join(HIDDEN_ACTS))
        if not 0.0 <= float(self.dropout) < 1.0:
            raise UserError(f"model.dropout must be in [0, 1), got {self.dropout!r}")
        if not isinstance(self.mem_len, int) or isinstance(self.mem_len, bool) or self.mem_len < 0:
            raise UserError(f"model.mem_len must be an integer >= 0, got {self.mem_len!r}")
        if self.reuse_len is not None and (not isinstance(self.reuse_len, int) or self.reuse_len < 1):
            raise UserError(f"model.reuse_len must be a positive integer or null, got {self.reuse_len!r}")
        if not isinstance(self.clamp_len, int) or isinstance(self.clamp_len, bool):
            raise UserError(f"model.clamp_len must be an integer (-1: no clamp), got {self.clamp_len!r}")
        for name, built in (("attn_type", "bi"), ("bi_data", False), ("same_length", False)):
            if getattr(self, name) != built:
                raise UserError(f"model.{name} {getattr(self, name)!r} is not built; use {built!r}")
        if not 0 <= self.pad_token_id < self.vocab_size:
            raise UserError(f"model.pad_token_id ({self.pad_token_id}) must be below vocab_size "
                            f"({self.vocab_size})")

    @property
    def head_size(self) -> int:
        """XLNet's d_head."""
        return self.hidden_size // self.num_attention_heads

    def to_dict(self) -> dict:
        """The fields as a plain dict (YAML/JSON friendly)."""
        return asdict(self)

    def to_hf_dict(self) -> dict:
        """config.json of Hugging Face's `XLNetLMHeadModel` (native, no remote code)."""
        return {
            "architectures": ["XLNetLMHeadModel"],
            "model_type": "xlnet",
            "vocab_size": self.vocab_size,
            "d_model": self.hidden_size,
            "n_layer": self.num_hidden_layers,
            "n_head": self.num_attention_heads,
            "d_head": self.head_size,
            "d_inner": self.intermediate_size,
            "ff_activation": self.hidden_act,
            "untie_r": True,
            "attn_type": self.attn_type,
            "mem_len": self.mem_len or None,
            "reuse_len": self.reuse_len,
            "bi_data": self.bi_data,
            "clamp_len": self.clamp_len,
            "same_length": self.same_length,
            "initializer_range": self.initializer_range,
            "layer_norm_eps": self.layer_norm_eps,
            "dropout": self.dropout,
            "summary_type": "last",  # XLNet's classification token comes last
            "summary_use_proj": True,
            "summary_activation": "tanh",
            "summary_last_dropout": self.dropout,
            "pad_token_id": self.pad_token_id,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "cls_token_id": self.cls_token_id,
            "sep_token_id": self.sep_token_id,
            "tie_word_embeddings": True,
        }

    @classmethod
    def from_hf_dict(cls, hf: dict) -> XLNetConfig:
        """Build from an XLNet config.json dict; keys without a meaning here are ignored."""
        if hf.get("model_type") != "xlnet":
            raise UserError(f"config.json has model_type {hf.get('model_type')!r}; expected 'xlnet'")
        renamed = {"d_model": "hidden_size", "n_layer": "num_hidden_layers",
                   "n_head": "num_attention_heads", "d_inner": "intermediate_size",
                   "ff_activation": "hidden_act"}
        known = {f.name for f in fields(cls)}
        values = {renamed.get(key, key): value for key, value in hf.items()
                  if renamed.get(key, key) in known}
        values["mem_len"] = values.get("mem_len") or 0
        if values.get("pad_token_id") is None:
            values["pad_token_id"] = 0
        config = cls(**values)
        if hf.get("d_head", config.head_size) != config.head_size:
            raise UserError(f"config.json has d_head {hf['d_head']}; bertpre builds d_model / n_head "
                            f"= {config.head_size}")
        config.validate()
        return config
