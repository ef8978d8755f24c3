"""bertpre.tokenizer.roles: special tokens by role, a tokenizer's kind and pair layout, read as
AutoTokenizer reads them (tokenizer_config.json, special_tokens_map.json over it) or found."""
from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors

from bertpre.errors import UserError
from bertpre.tokenizer.roles import read_roles, token_roles
from bertpre.tokenizer.wordpiece import build_tokenizer, load_tokenizer

BERT = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "##b"]
ROBERTA = ["<s>", "<pad>", "</s>", "<unk>", "a", "Ġb", "<mask>"]


def bpe(tokens: list[str], processor=None) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE({token: index for index, token in enumerate(tokens)}, []))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    if processor is not None:
        tokenizer.post_processor = processor
    return tokenizer


def test_a_bert_wordpiece_vocab_has_bert_roles_and_layout():
    roles = token_roles(build_tokenizer({token: index for index, token in enumerate(BERT)}, lowercase=True))
    assert (roles.kind, roles.pair_layout, roles.word_prefix) == ("wordpiece", "bert", "##")
    assert (roles.pad_token_id, roles.unk_token_id, roles.cls_token_id, roles.sep_token_id,
            roles.mask_token_id) == (0, 1, 2, 3, 4)
    assert roles.special_ids == {0, 2, 3, 4}  # [UNK] is text the vocab lacks: it may be predicted
    assert roles.separators_between_segments == 1
    assert roles.begins_word("a") and not roles.begins_word("##b")


def test_a_roberta_bpe_has_roberta_roles_from_its_post_processor_and_names():
    roles = token_roles(bpe(ROBERTA, processors.RobertaProcessing(("</s>", 2), ("<s>", 0))))
    assert (roles.kind, roles.pair_layout, roles.word_prefix) == ("bpe", "roberta", "Ġ")
    assert (roles.cls_token, roles.sep_token, roles.pad_token, roles.mask_token, roles.unk_token) == (
        "<s>", "</s>", "<pad>", "<mask>", "<unk>")
    assert roles.mask_token_id == 6 and roles.separators_between_segments == 2
    assert roles.begins_word("Ġb") and not roles.begins_word("b")


def test_a_template_says_the_layout_by_its_separators_between_a_and_b():
    bert_like = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                              special_tokens=[("<s>", 0), ("</s>", 2)])
    roberta_like = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                 special_tokens=[("<s>", 0), ("</s>", 2)])
    assert token_roles(bpe(ROBERTA, bert_like)).pair_layout == "bert"
    assert token_roles(bpe(ROBERTA, roberta_like)).pair_layout == "roberta"
    bert_processing = processors.BertProcessing(("</s>", 2), ("<s>", 0))
    assert token_roles(bpe(ROBERTA, bert_processing)).pair_layout == "bert"


def test_the_config_files_name_the_roles_as_autotokenizer_reads_them(tmp_path):
    tokens = [*ROBERTA, "<special_mask>", "<sep2>"]
    tokenizer = bpe(tokens, processors.RobertaProcessing(("</s>", 2), ("<s>", 0)))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"mask_token": {"content": "<special_mask>", "__type": "AddedToken"}, "sep_token": "<sep2>"}))
    (tmp_path / "special_tokens_map.json").write_text(json.dumps({"sep_token": "</s>"}))  # read second: wins
    roles = read_roles(tmp_path, tokenizer)
    assert (roles.mask_token, roles.mask_token_id) == ("<special_mask>", 7)
    assert roles.sep_token == "</s>"


def test_a_role_without_a_token_is_refused_naming_the_role(tmp_path):
    with pytest.raises(UserError, match=r"has no mask \(none of \[MASK\] <mask>, and tokenizer_config.json "
                                        r"names no mask_token\) token"):
        token_roles(bpe(ROBERTA[:-1]), source="my-tokenizer")
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"pad_token": "<nope>"}))
    with pytest.raises(UserError, match=r"has no pad \(<nope> is not in its vocabulary\) token"):
        read_roles(tmp_path, bpe(ROBERTA))


def test_load_tokenizer_attaches_the_roles_of_a_folder(tmp_path):
    tokenizer = bpe(ROBERTA, processors.RobertaProcessing(("</s>", 2), ("<s>", 0)))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"pad_token": "<unk>"}))
    loaded = load_tokenizer(tmp_path)
    assert token_roles(loaded).pad_token_id == 3  # the config's, not the usual name's (1)


def test_a_model_whose_kind_bertpre_does_not_take_is_refused():
    with pytest.raises(UserError, match="model is WordLevel; bertpre takes WordPiece, byte-level BPE and Unigram"):
        token_roles(Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))


def test_a_unigram_with_metaspace_marks_word_starts_with_its_replacement():
    tokenizer = Tokenizer(models.Unigram([("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0),
                                          ("▁a", -1.0), ("b", -2.0), ("<mask>", 0.0)], unk_id=3))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")])
    roles = token_roles(tokenizer)
    assert (roles.kind, roles.word_prefix, roles.unk_token_id, roles.mask_token_id) == ("unigram", "▁", 3, 6)
    assert roles.begins_word("▁a") and not roles.begins_word("b")
