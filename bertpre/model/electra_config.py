"""ELECTRA's config part: BERT's keys, the embeddings `embedding_size` wide where that differs from
`hidden_size` (`BertConfig.embedding_size`, as ALBERT's factorized embeddings), and config.json both
ways as Hugging Face's `ElectraConfig` (which always names `embedding_size`)."""
from __future__ import annotations

from bertpre.errors import UserError
from bertpre.model.bert_config import BERT_SHAPE_FIELDS, bert_layout_keys, read_bert_layout
from bertpre.model.config import BertConfig, FamilyConfig


def validate_electra(config: BertConfig) -> None:
    """ELECTRA's own rules: transformers' ELECTRA has an absolute position table, no shared layers,
    and a projection only where the embeddings are narrower or wider than the layers."""
    if config.share_layers:
        raise UserError("model.share_layers is ALBERT's; ELECTRA's layers are distinct: remove it for "
                        "model.architecture electra")
    if config.position_embedding_type != "absolute":
        raise UserError(f"model.architecture electra has BERT's absolute position table; remove "
                        f"model.position_embedding_type {config.position_embedding_type}")
    if config.embedding_size == config.hidden_size:
        raise UserError(f"model.embedding_size {config.embedding_size} equals model.hidden_size; leave it "
                        "null for embeddings as wide as the layers (ELECTRA projects only where they differ)")


def write_electra_hf(config: BertConfig, architecture: str = "ElectraForPreTraining") -> dict:
    """config.json of Hugging Face's `ElectraForPreTraining` (the discriminator), or of
    `architecture` (`ElectraForMaskedLM`: the generator; a task class)."""
    hf = {"architectures": [architecture], "model_type": "electra"}
    hf.update({name: getattr(config, name) for name in bert_layout_keys()
               if name not in ("embedding_size", "share_layers", "rope_theta")})
    hf.update(embedding_size=config.embedding_size or config.hidden_size, position_embedding_type="absolute",
              tie_word_embeddings=True)
    return hf


def read_electra_hf(hf: dict) -> BertConfig:
    """A validated BertConfig of `electra` from an `ElectraConfig` config.json (transformers'
    defaults where it names nothing: embeddings as wide as the layers, pad id 0)."""
    values = dict(hf)
    if values.get("embedding_size") in (None, values.get("hidden_size", BertConfig.hidden_size)):
        values.pop("embedding_size", None)
    return read_bert_layout(values, "electra", pad_token_id=0)


ELECTRA_CONFIG = FamilyConfig(
    model_types=("electra",), read_hf=read_electra_hf, write_hf=write_electra_hf,
    shape_fields=BERT_SHAPE_FIELDS, validate=validate_electra, relative_positions=lambda config: False)
