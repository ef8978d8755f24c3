"""BERT math (Hugging Face names, ALBERT options) and the Hugging Face folder format."""
from bertpre.labels import IGNORE_INDEX
from bertpre.model.bert import BertForPreTraining, BertModel
from bertpre.model.config import BertConfig
from bertpre.model.vocab_growth import grow_vocab_rows
from bertpre.model.xlnet import XLNetConfig, XLNetLMHeadModel

__all__ = ["IGNORE_INDEX", "BertConfig", "BertForPreTraining", "BertModel", "grow_vocab_rows"]
__all__ += ["XLNetConfig", "XLNetLMHeadModel"]

# Last: the family table fills `bertpre.model.config.FAMILIES`, which the config asks for every
# family's keys and config.json (its rows import the modules above).
from bertpre.model import families  # noqa: E402, F401
