"""XLNet's config part: `XLNetConfig` (XLNet's own shape, Hugging Face's config.json names
both ways), XLNet's rules for bertpre's `BertConfig` names and the conversion between the two."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from bertpre.errors import UserError
from bertpre.model.config import HIDDEN_ACTS, BertConfig, FamilyConfig

# Transformer-XL's keys, which XLNet alone reads (shared keys all the same, at 0 and -1 elsewhere:
# every BERT run's config.yaml writes them).
XLNET_MEMORY_KEYS = ("mem_len", "clamp_len")
# Fields that shape an XLNet's weights (the rest of BERT's have no meaning there).
XLNET_SHAPE_FIELDS = ("architecture", "vocab_size", "hidden_size", "num_hidden_layers",
                      "num_attention_heads", "intermediate_size")


def validate_xlnet(config: BertConfig) -> None:
    """XLNet's own rules: no ALBERT options, its own relative positions (no rope), sinusoids in
    pairs, one dropout rate, and LayerNorms that stay float32."""
    if config.is_albert:
        raise UserError("model.embedding_size and model.share_layers are ALBERT's options, which "
                        "XLNet's layout does not have; remove them for model.architecture xlnet")
    if config.low_precision_layernorm is True:  # auto and false read alike there
        raise UserError("model.low_precision_layernorm is not built for XLNet's layers (their LayerNorm "
                        "stays float32 under autocast); remove it for model.architecture xlnet")
    if config.position_embedding_type == "rope":
        raise UserError("model.architecture xlnet has its own relative positions (Transformer-XL's "
                        "sinusoids); remove model.position_embedding_type rope")
    if config.hidden_size % 2:
        raise UserError("model.architecture xlnet needs an even model.hidden_size (its sinusoids "
                        "come in sin/cos pairs)")
    if config.hidden_dropout_prob != config.attention_probs_dropout_prob:
        raise UserError(f"XLNet has one dropout rate, but model.hidden_dropout_prob is "
                        f"{config.hidden_dropout_prob:g} and model.attention_probs_dropout_prob "
                        f"{config.attention_probs_dropout_prob:g}; make them equal")


def xlnet_config(config: BertConfig, *, reuse_len: int | None = None, cls_token_id: int | None = 2,
                 sep_token_id: int | None = 3) -> XLNetConfig:
    """The `XLNetConfig` of an `architecture: xlnet` model."""
    return XLNetConfig(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                       num_hidden_layers=config.num_hidden_layers,
                       num_attention_heads=config.num_attention_heads,
                       intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
                       dropout=config.hidden_dropout_prob, layer_norm_eps=config.layer_norm_eps,
                       initializer_range=config.initializer_range, mem_len=config.mem_len,
                       reuse_len=reuse_len, clamp_len=config.clamp_len, pad_token_id=config.pad_token_id,
                       cls_token_id=cls_token_id, sep_token_id=sep_token_id)


def from_xlnet_dict(hf: dict) -> BertConfig:
    """An `architecture: xlnet` BertConfig from an XLNet config.json (checked by `XLNetConfig`)."""
    xlnet = XLNetConfig.from_hf_dict(hf)
    return BertConfig(architecture="xlnet", vocab_size=xlnet.vocab_size, hidden_size=xlnet.hidden_size,
                      num_hidden_layers=xlnet.num_hidden_layers, num_attention_heads=xlnet.num_attention_heads,
                      intermediate_size=xlnet.intermediate_size, hidden_act=xlnet.hidden_act,
                      hidden_dropout_prob=xlnet.dropout, attention_probs_dropout_prob=xlnet.dropout,
                      layer_norm_eps=xlnet.layer_norm_eps, initializer_range=xlnet.initializer_range,
                      pad_token_id=xlnet.pad_token_id, mem_len=xlnet.mem_len, clamp_len=xlnet.clamp_len)


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


XLNET_CONFIG = FamilyConfig(
    model_types=("xlnet",), read_hf=from_xlnet_dict, write_hf=lambda config: xlnet_config(config).to_hf_dict(),
    shape_fields=XLNET_SHAPE_FIELDS, validate=validate_xlnet, memory=True)
