"""The model's shape: `BertConfig`, Hugging Face BERT's names shared by every family, and the
routing of each family's own part (its keys, rules and config.json both ways) to its row.

Nothing here names a family: `FAMILIES` is the table (`bertpre.model.families` fills it; the
table imports every family's network, which imports this module), and each row's `config`
(a `FamilyConfig`) answers for its family.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from functools import wraps
from typing import Any

from bertpre.errors import UserError
from bertpre.model.layer_norm import LOW_PRECISION_CHOICES
from bertpre.model.positions import POSITION_EMBEDDING_TYPES
from bertpre.ranges import Range

HIDDEN_ACTS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish")
# How a model computes, not what it is: no config.json carries them (an export reads as before).
RUNTIME_FIELDS = ("low_precision_layernorm", "fused_qkv", "last_layer_rows", "unpad", "low_precision_rotary",
                  "loss_chunk_rows")
# The family table, by `model.architecture`: `bertpre.model.families.FAMILIES` is this dict,
# filled there (importing `bertpre.model` fills it). A row's `config` is its `FamilyConfig`.
FAMILIES: dict[str, Any] = {}
# A checkpoint's config.json names its bertpre architecture under this key beside the
# model_type, and `from_hf_dict` reads it first: a family that writes another's model_type (a
# family that exports as BERT) reads back as itself. Folders without it route by model_type.
ARCHITECTURE_KEY = "bertpre_architecture"


@dataclass(frozen=True)
class FamilyFields:
    """A family's own `model:` keys, as one typed record: a family that has keys of its own
    subclasses this (a frozen dataclass whose fields are its keys with their defaults, e.g.
    `modernbert_config.ModernBertFields`) and names the subclass in its `FamilyConfig.fields`.
    `BertConfig.family_fields` holds the record of its architecture (None for a family without one)."""


@dataclass(frozen=True)
class FamilyConfig:
    """What a family's config is: the keys only it reads, its rules, its shape, and its
    Hugging Face config.json both ways. A row of the family table points at one."""

    # config.json `model_type`s it reads (`read_hf`); the first is the one it writes
    model_types: tuple[str, ...]
    read_hf: Callable[[dict], BertConfig]  # a config.json dict -> a validated BertConfig
    write_hf: Callable[[BertConfig], dict]  # config.json's content
    shape_fields: tuple[str, ...]  # what two models must share for one's weights to load into the other
    validate: Callable[[BertConfig], None] = lambda config: None  # its own rules, after the shared ones
    relative_positions: Callable[[BertConfig], bool] = lambda config: True  # positions enter attention
    # `model.unpad`: whether its pretraining step computes the real tokens alone (its layers take `Unpadded`)
    unpads: Callable[[BertConfig], bool] = lambda config: False
    # the position-table row of a sequence's first token (RoBERTa's pad_token_id + 1)
    position_offset: Callable[[BertConfig], int] = lambda config: 0
    # `model:` keys only it reads; another family's config refuses them. A family with a `fields`
    # record leaves it out: its keys are the record's fields.
    own_keys: tuple[str, ...] = ()
    # shared keys it does not read, with what to set instead: a config that gives one is refused
    refused_keys: dict[str, str] = field(default_factory=dict)
    # what its refusal of another family's key says: "ModernBERT's"
    owner: str = ""
    # the ranges of its own numeric keys, by name: the run config's rules take them from the table
    ranges: dict[str, Range] = field(default_factory=dict)
    # whether it keeps Transformer-XL's memory (`model.mem_len`); `mem_len` and `clamp_len` stay
    # shared keys (at 0 and -1) because every BERT run's config.yaml writes them
    memory: bool = False
    # the record of its own keys (a `FamilyFields` dataclass with their defaults), which
    # `BertConfig.family_fields` holds; None: it has no keys of its own
    fields: type[FamilyFields] | None = None

    def __post_init__(self) -> None:
        if self.fields is not None and not self.own_keys:
            object.__setattr__(self, "own_keys", tuple(item.name for item in dataclasses.fields(self.fields)))


def family_config(architecture: str) -> FamilyConfig:
    """The `FamilyConfig` of `model.architecture`, or UserError naming the built ones."""
    row = FAMILIES.get(architecture)
    if row is None:
        raise UserError(f"model.architecture {architecture!r} is not built; use one of {', '.join(FAMILIES)}")
    return row.config


def fields_record(architecture: str) -> type[FamilyFields] | None:
    """The record class of `architecture`'s own keys (None: it has none, or is not built)."""
    row = FAMILIES.get(architecture)
    return None if row is None else row.config.fields


def family_keys() -> dict[str, FamilyConfig]:
    """Every family's own keys, each with its (first) owner's config part, in table order."""
    owners: dict[str, FamilyConfig] = {}
    for row in FAMILIES.values():
        for name in row.config.own_keys:
            owners.setdefault(name, row.config)
    return owners


def other_families_keys(architecture: str) -> dict[str, FamilyConfig]:
    """The keys other families own (and `architecture`'s row does not), each with its owner."""
    own = set(family_config(architecture).own_keys)
    return {name: row.config for row in FAMILIES.values() for name in row.config.own_keys if name not in own}


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

    A family's own keys (ModernBERT's `local_attention` …) are not fields here: they are one
    record, `family_fields`, of the class its row names (`FamilyConfig.fields`). The `model:`
    section and `to_dict` stay flat: the constructor (and so `dataclasses.replace`) takes a
    family's keys by name and routes them into the record, refusing another family's key by
    asking the table; reading or setting `config.local_attention` reads or replaces the record's
    (attribute delegation, `__getattr__` / `__setattr__`), so a family's code reads its keys as
    before. Setting `architecture` gives the record of the new family (its defaults) where the
    old one's is of another class.
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
    # Pretraining steps compute on the real tokens alone, (N, C) from the embeddings to the heads,
    # attention on each row's (each packed document's) own tokens; false: the padded (B, T, C)
    # batch. Off by default: dropout draws (N, C) masks, so a seed's losses differ from the padded
    # path's. Families with a position table (BERT, ALBERT, RoBERTa, XLM-R). No config.json has it.
    unpad: bool = False
    # ModernBERT's rotary positions applied in the autocast dtype instead of float32 and cast back
    # (`modernbert.rotate`): true, false, or auto (under bf16 autocast alone). How the model runs,
    # not its shape: no config.json has it.
    low_precision_rotary: bool | str = "auto"
    # A pretraining step's masked-LM decoder and cross-entropy on this many predicted rows at a time
    # (`bertpre.model.chunked_loss`), each chunk's gradients made in its forward, so that the
    # (rows, V) logits never exist whole: auto (chunks of at most 2**27 float32 logits, where the
    # rows need more than one), 0 (the whole product) or a row count. No config.json has it.
    loss_chunk_rows: int | str = "auto"
    # The architecture's own keys (ModernBERT's), one typed record: `FamilyConfig.fields`'s class,
    # filled from its defaults and the flat keys given (`BertConfig(architecture="modernbert",
    # local_attention=64)`); None for a family without keys of its own. See the class docstring.
    family_fields: FamilyFields | None = None

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
        for name in ("low_precision_layernorm", "fused_qkv", "low_precision_rotary"):  # the run-time switches: true, false or auto
            value = getattr(self, name)
            if value not in LOW_PRECISION_CHOICES or not isinstance(value, (bool, str)):
                raise UserError(f"model.{name} must be true, false or auto, got {value!r}")
        if not isinstance(self.last_layer_rows, bool):
            raise UserError(f"model.last_layer_rows must be true or false, got {self.last_layer_rows!r}")
        if self.loss_chunk_rows != "auto" and (not isinstance(self.loss_chunk_rows, int)
                                               or isinstance(self.loss_chunk_rows, bool) or self.loss_chunk_rows < 0):
            raise UserError(f"model.loss_chunk_rows must be auto, 0 (no chunks) or a number of rows, "
                            f"got {self.loss_chunk_rows!r}")
        if not isinstance(self.unpad, bool):
            raise UserError(f"model.unpad must be true or false, got {self.unpad!r}")
        if self.embedding_size is not None and (
            not isinstance(self.embedding_size, int) or self.embedding_size < 1
        ):
            raise UserError(
                f"model.embedding_size must be a positive integer or null, got {self.embedding_size!r}"
            )
        own = family_config(self.architecture)
        for name, low in (("mem_len", 0), ("clamp_len", -1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise UserError(f"model.{name} must be an integer of at least {low}, got {value!r}")
        if self.mem_len and not own.memory:
            with_memory = next((name for name, row in FAMILIES.items() if row.config.memory), "another")
            raise UserError(f"model.mem_len is Transformer-XL's memory, which {self.architecture}'s layout does "
                            f"not carry; set model.architecture: {with_memory}, or model.mem_len: 0")
        if self.unpad and not own.unpads(self):
            raise UserError(f"model.unpad is built for ModernBERT and for BERT, ALBERT, RoBERTa, XLM-R with "
                            f"positions from a table; {self.architecture}'s enter attention: set model.unpad false")
        own.validate(self)

    def architecture_fields(self) -> tuple[str, ...]:
        """The keys with a meaning for this architecture (a run's config.yaml writes these): the
        shared ones but those this family refuses, then its own."""
        left_out = {*other_families_keys(self.architecture), *family_config(self.architecture).refused_keys}
        return tuple(name for name in self.to_dict() if name not in left_out)

    @property
    def position_offset(self) -> int:
        """The position-table row of a sequence's first token: 0 for BERT; for RoBERTa
        pad_token_id + 1, the rows up to the padding's being the padding's (positions count
        the real tokens alone, as fairseq's `make_positions` does)."""
        return family_config(self.architecture).position_offset(self)

    @property
    def max_tokens(self) -> int:
        """The longest sequence the position table reads (RoBERTa's 514 rows read 512 tokens);
        with relative positions only the length the model is meant for."""
        return self.max_position_embeddings - self.position_offset

    def shape_fields(self) -> tuple[str, ...]:
        """The fields two models must share for one's weights to load into the other."""
        return family_config(self.architecture).shape_fields

    @property
    def relative_positions(self) -> bool:
        """Whether positions enter attention (`rope`, `transformer_xl`, XLNet, ModernBERT) rather than a table."""
        return family_config(self.architecture).relative_positions(self)

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

    def __getattr__(self, name: str) -> Any:
        # Only what normal lookup misses: the architecture's own keys (and the record's methods),
        # read from `family_fields`.
        record = self.__dict__.get("family_fields")
        if record is not None and not name.startswith("_") and hasattr(record, name):
            return getattr(record, name)
        raise AttributeError(f"{type(self).__name__} of architecture {self.__dict__.get('architecture')!r} "
                             f"has no {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in SHARED_KEYS or name == "family_fields" or name.startswith("_"):
            object.__setattr__(self, name, value)
            if "family_fields" in self.__dict__:  # after __init__: the record of the (new) family
                object.__setattr__(self, "family_fields", routed_record(self.architecture, self.family_fields, {}))
            return
        record = self.__dict__.get("family_fields")
        if record is not None and name in record.__dataclass_fields__:
            # a replaced record, never a changed one: copies of this config (copy.copy,
            # dataclasses.replace) may share the old
            object.__setattr__(self, "family_fields", dataclasses.replace(record, **{name: value}))
            return
        if name in family_keys():
            refuse_family_key(name, self.architecture)
        object.__setattr__(self, name, value)

    @classmethod
    def model_keys(cls) -> tuple[str, ...]:
        """Every `model:` key a config may give: the shared ones, then each family's own (the table's order)."""
        return (*SHARED_KEYS, *(name for name in family_keys() if name not in SHARED_KEYS))

    def to_dict(self) -> dict:
        """The keys as a plain, flat dict (YAML/JSON friendly): the shared ones, then the
        architecture's own (its `family_fields`), as the `model:` section writes them."""
        values = {name: getattr(self, name) for name in SHARED_KEYS}
        if self.family_fields is not None:
            values.update(dataclasses.asdict(self.family_fields))
        return values

    def to_hf_dict(self) -> dict:
        """config.json content, as the family writes it (`FamilyConfig.write_hf`)."""
        return family_config(self.architecture).write_hf(self)

    @classmethod
    def from_hf_dict(cls, hf: dict) -> BertConfig:
        """Build from a Hugging Face config.json dict of any family the table holds (the family
        whose `model_types` name its `model_type`, or the one `ARCHITECTURE_KEY` names where a
        checkpoint's config.json has it); unknown keys are ignored."""
        named = hf.get(ARCHITECTURE_KEY)
        if named is not None and named not in FAMILIES:
            raise UserError(f"config.json names bertpre architecture {named!r}, which this bertpre "
                            f"does not build; it builds {', '.join(FAMILIES)}")
        model_type = hf.get("model_type", "bert")
        rows = [FAMILIES[named]] if named is not None else \
            [row for row in FAMILIES.values() if model_type in row.config.model_types]
        if rows:
            return rows[0].config.read_hf(hf)
        # the masked-LM encoders first, as their readers know them; each family's own model_type
        built = [row.config.model_types[0] for row in sorted(FAMILIES.values(), key=lambda row: row.objectives[0] != "mlm")
                 if row.config.model_types]
        readable = ", ".join(built[:-1]) + f" and {built[-1]}"
        also = [name for row in FAMILIES.values() for name in row.config.model_types[1:]]
        raise UserError(f"config.json has model_type {model_type!r}, which bertpre does not build; it builds "
                        f"{readable}" + (f" (and reads its own exports' {', '.join(map(repr, also))})" if also else ""))


# The keys every family's config has: BertConfig's fields but the record of a family's own.
SHARED_KEYS = tuple(item.name for item in fields(BertConfig) if item.name != "family_fields")


def _routing_init(init: Callable[..., None]) -> Callable[..., None]:
    """BertConfig's dataclass `__init__`, taking a family's own keys by name too and routing them
    into `family_fields` (the record of the architecture's class, from its defaults or the given one)."""

    @wraps(init)
    def __init__(self: BertConfig, **values: Any) -> None:
        owners = family_keys()
        own = {name: values.pop(name) for name in list(values) if name in owners and name not in SHARED_KEYS}
        init(self, **values)
        object.__setattr__(self, "family_fields", routed_record(self.architecture, self.family_fields, own))

    return __init__


BertConfig.__init__ = _routing_init(BertConfig.__init__)


def routed_record(architecture: str, record: FamilyFields | None, own: dict[str, Any]) -> FamilyFields | None:
    """`architecture`'s record of its own keys: `record` where it is of the family's class (else
    the class's defaults), with the keys `own` gives; a key of another family's is refused."""
    record_class = fields_record(architecture)
    for name in own:
        if name not in getattr(record_class, "__dataclass_fields__", ()):
            refuse_family_key(name, architecture)
    if record_class is None:
        return None
    if not isinstance(record, record_class):
        record = record_class()
    return dataclasses.replace(record, **own) if own else record


def refuse_family_key(name: str, architecture: str) -> None:
    """Refuse another family's own key `name` for `architecture`, naming its owner."""
    owner = family_keys()[name]
    raise UserError(f"model.{name} is {owner.owner}, which model.architecture {architecture} does "
                    f"not have; remove it, or set model.architecture: {owner_architecture(owner)}")


def refuse_keys_of_other_layouts(config: BertConfig, given: frozenset[str] | set[str]) -> None:
    """Refuse a `model:` key a config gives (`given`) that `config.architecture` has no use for:
    another family's own keys (ModernBERT's for BERT), shared keys the family does not read
    (BERT's that ModernBERT has not, naming ModernBERT's key to use instead)."""
    row = family_config(config.architecture)
    for name in row.refused_keys:
        if name in given:
            raise UserError(f"model.{name} is BERT's, which model.architecture {config.architecture} does not read; "
                            f"remove it (set {row.refused_keys[name]} instead)")
    for name in other_families_keys(config.architecture):
        if name in given:
            refuse_family_key(name, config.architecture)


def owner_architecture(owner: FamilyConfig) -> str:
    """The first architecture whose row's config is `owner`."""
    return next(name for name, row in FAMILIES.items() if row.config is owner)
