"""RoBERTa's config part (and XLM-R's, the same network under its own names): BERT's keys, a
position table that starts after the padding's row, and config.json both ways."""
from __future__ import annotations

from bertpre.errors import UserError
from bertpre.model.bert_config import bert_layout_keys, bert_relative_positions, read_bert_layout
from bertpre.model.config import BertConfig, FamilyConfig

# Hugging Face's class-name prefix of each RoBERTa-layout model_type.
ROBERTA_CLASS_PREFIXES = {"roberta": "Roberta", "xlm-roberta": "XLMRoberta"}
# the padding's id is where RoBERTa's positions start
ROBERTA_SHAPE_FIELDS = ("architecture", "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                        "intermediate_size", "max_position_embeddings", "type_vocab_size", "pad_token_id")


def validate_roberta(config: BertConfig) -> None:
    """RoBERTa's own rules: Hugging Face's RoBERTa has absolute positions alone, no ALBERT
    options, and a position table that starts after the padding's row."""
    if config.is_albert:
        raise UserError(f"model.embedding_size and model.share_layers are ALBERT's options, which "
                        f"RoBERTa's layout does not have; remove them for model.architecture {config.architecture}")
    if config.position_embedding_type != "absolute":
        raise UserError(f"model.architecture {config.architecture} has RoBERTa's absolute position table; "
                        f"remove model.position_embedding_type {config.position_embedding_type}")
    if config.max_tokens < 1:
        raise UserError(f"model.max_position_embeddings ({config.max_position_embeddings}) leaves no "
                        f"position for a token: RoBERTa's positions start after the padding's row "
                        f"(pad_token_id {config.pad_token_id}); raise it to at least {config.position_offset + 1}")


def write_roberta_hf(config: BertConfig) -> dict:
    """config.json of Hugging Face's `RobertaForMaskedLM` (or `XLMRobertaForMaskedLM`): BERT's
    names, RoBERTa's model_type; `bos_token_id` and `eos_token_id` are the export's to add
    (they name the tokenizer's ids, which the config does not hold)."""
    hf = {"architectures": [f"{ROBERTA_CLASS_PREFIXES[config.architecture]}ForMaskedLM"],
          "model_type": config.architecture}
    hf.update({name: getattr(config, name) for name in bert_layout_keys()
               if name not in ("embedding_size", "share_layers", "rope_theta")})
    hf.update(tie_word_embeddings=True)
    return hf


def roberta_config_part(architecture: str) -> FamilyConfig:
    """The config part of `roberta` or `xlm-roberta` (one network, two model_types)."""
    return FamilyConfig(
        model_types=(architecture,),
        read_hf=lambda hf: read_bert_layout(hf, architecture, pad_token_id=1),  # transformers' default
        write_hf=write_roberta_hf, shape_fields=ROBERTA_SHAPE_FIELDS, validate=validate_roberta,
        relative_positions=bert_relative_positions, position_offset=lambda config: config.pad_token_id + 1,
        unpads=lambda config: not bert_relative_positions(config))
