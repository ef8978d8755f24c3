"""BERT math (Hugging Face names, ALBERT options) and the Hugging Face folder format."""
from bertpre.model.bert import BertForPreTraining, BertModel
from bertpre.model.config import BertConfig

__all__ = ["BertConfig", "BertForPreTraining", "BertModel"]
