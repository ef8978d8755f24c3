"""BERT's config part (ALBERT's options, relative positions): its shape, and config.json both
ways, Hugging Face's `BertForPreTraining` or, for relative positions, bertpre's remote code."""
from __future__ import annotations

from bertpre.errors import UserError
from bertpre.model.config import FAMILIES, RUNTIME_FIELDS, SHARED_KEYS, BertConfig, FamilyConfig

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
# bertpre's keys that no BERT-layout config.json carries: the family, XLNet's memory.
NOT_IN_CONFIG_JSON = ("architecture", "mem_len", "clamp_len")
BERT_SHAPE_FIELDS = ("architecture", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size", "embedding_size",
                     "share_layers", "position_embedding_type", "rope_theta")


def bert_layout_keys() -> list[str]:
    """The BertConfig keys a BERT-layout config.json (BERT's, RoBERTa's, bertpre's remote code)
    holds: no family's own keys, no run-time switch, none of NOT_IN_CONFIG_JSON."""
    left_out = {name for row in FAMILIES.values() for name in row.config.own_keys}
    left_out |= {*RUNTIME_FIELDS, *NOT_IN_CONFIG_JSON}
    return [name for name in SHARED_KEYS if name not in left_out]


def bert_relative_positions(config: BertConfig) -> bool:
    """Whether positions enter attention (`rope`, `transformer_xl`) rather than the absolute table."""
    return config.position_embedding_type != "absolute"


def write_bert_hf(config: BertConfig) -> dict:
    """config.json content: Hugging Face `BertConfig` / `BertForPreTraining` for absolute
    positions; for relative ones, the remote-code config of an export's `configuration_bertpre.py`
    (`model_type` "bertpre", `auto_map`)."""
    if config.relative_positions:
        hf = {"architectures": ["BertpreForPreTraining"], "model_type": REMOTE_MODEL_TYPE,
              "auto_map": dict(REMOTE_AUTO_MAP)}
        hf.update({name: getattr(config, name) for name in bert_layout_keys()})
        hf.update(tie_word_embeddings=True)
        return hf
    hf = {"architectures": ["BertForPreTraining"], "model_type": "bert"}
    hf.update({name: getattr(config, name) for name in bert_layout_keys()
               if name not in ("embedding_size", "share_layers", "rope_theta")})
    hf.update(position_embedding_type="absolute", tie_word_embeddings=True)
    # Kept (harmless to transformers, which stores unknown keys) so a round trip is exact.
    if config.is_albert:
        hf.update(embedding_size=config.embedding_size, share_layers=config.share_layers)
    return hf


def read_bert_layout(hf: dict, architecture: str, pad_token_id: int) -> BertConfig:
    """A validated BertConfig of `architecture` from a BERT-layout config.json (BERT's names;
    `pad_token_id` where it names none: transformers' default); unknown keys are ignored."""
    model_type = hf.get("model_type", "bert")
    embedding_type = hf.get("position_embedding_type", "absolute")
    if model_type != REMOTE_MODEL_TYPE and embedding_type != "absolute":
        raise UserError(
            f"config.json has position_embedding_type {embedding_type!r}; bertpre reads "
            f"{model_type}'s 'absolute', and 'rope' or 'transformer_xl' from its own exports"
        )
    known = set(bert_layout_keys()) | set(RUNTIME_FIELDS)
    values = {key: value for key, value in hf.items() if key in known}
    if values.get("pad_token_id") is None:
        values["pad_token_id"] = pad_token_id
    config = BertConfig(architecture=architecture, **values)
    config.validate()
    return config


BERT_CONFIG = FamilyConfig(
    model_types=("bert", REMOTE_MODEL_TYPE),
    read_hf=lambda hf: read_bert_layout(hf, "bert", pad_token_id=0),
    write_hf=write_bert_hf, shape_fields=BERT_SHAPE_FIELDS, relative_positions=bert_relative_positions,
    unpads=lambda config: not bert_relative_positions(config))
