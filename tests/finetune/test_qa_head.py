"""The extractive question-answering head of each family (the family table's
`question_answering_head`): a tiny task model written by `save_task_model` loads in transformers'
AutoModelForQuestionAnswering as the family's class, with no missing or unexpected keys, and gives
the same start and end logits on a padded batch of (question, context) pairs."""
from __future__ import annotations

import pytest
import torch
from _xlnet_run import TINY_XLNET
from safetensors.torch import load_file

from bertpre.finetune.model import build_task_model
from bertpre.finetune.saved_model import save_task_model
from bertpre.model import BertConfig
from bertpre.model.bert_heads import BertForQuestionAnswering
from bertpre.model.families import family
from bertpre.model.hf_format import read_config
from bertpre.model.xlnet_heads import XLNetForQuestionAnsweringSimple
from bertpre.tokenizer import load_tokenizer

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=64)
QUESTIONS = ["who feeds the cat ?", "what does my sister see ?", "where ?"]
CONTEXTS = ["my sister feeds the cat today .", "the cat sees the river and my sister sees a red apple .",
            "the river ."]


@pytest.mark.parametrize(("shape", "expected_class"), [(TINY_BERT, BertForQuestionAnswering),
                                                       (TINY_XLNET, XLNetForQuestionAnsweringSimple)])
def test_a_saved_question_answering_model_gives_transformers_start_and_end_logits(
        shape, expected_class, tiny_data, tmp_path):
    tokenizer_folder = tiny_data / "tokenizer"
    config = BertConfig(**{**shape, "vocab_size": load_tokenizer(tokenizer_folder).get_vocab_size()})
    config.validate()
    torch.manual_seed(0)
    encoder_state = family(config).build_encoder(config).state_dict()
    ours = build_task_model(config, encoder_state, 2, tagging=False, question_answering=True)
    assert type(ours) is expected_class is family(config).question_answering_head
    with torch.no_grad():  # the head off its init (zero bias) so that every weight counts
        for parameter in ours.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    saved = save_task_model(tmp_path / "out", ours, config, task="qa", label_names=[],
                            tokenizer_folder=tokenizer_folder)

    hf, info = transformers.AutoModelForQuestionAnswering.from_pretrained(saved, output_loading_info=True)
    assert type(hf).__name__ == expected_class.__name__
    assert all(len(keys) == 0 for keys in info.values()), info
    reloaded = expected_class(read_config(saved))
    reloaded.load_state_dict(load_file(saved / "model.safetensors"), strict=shape is TINY_XLNET)  # BERT: no pooler
    tokenizer = transformers.AutoTokenizer.from_pretrained(saved)
    batch = tokenizer(QUESTIONS, CONTEXTS, padding=True, return_tensors="pt")
    assert not bool(batch["attention_mask"].all())  # padded: the head must read past it
    reloaded.eval(), ours.eval(), hf.eval()
    with torch.no_grad():
        mine = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])  # (B, T, 2)
        again = reloaded(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        theirs = hf(**batch)
    assert mine.shape == (*batch["input_ids"].shape, 2)
    torch.testing.assert_close(again, mine, atol=0, rtol=0)
    torch.testing.assert_close(mine[..., 0], theirs.start_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(mine[..., 1], theirs.end_logits, atol=1e-5, rtol=0)


def test_the_question_answering_head_is_drawn_from_the_seed_as_transformers_draws_it(tiny_data):
    """`torch.manual_seed(s)` + build_task_model: the same initial `qa_outputs` as transformers'
    init of the same shape after `set_seed(s)` (normal(0, initializer_range), zero bias)."""
    config = BertConfig(**{**TINY_BERT, "vocab_size": load_tokenizer(tiny_data / "tokenizer").get_vocab_size()})
    encoder_state = family(config).build_encoder(config).state_dict()
    torch.manual_seed(3)
    ours = build_task_model(config, encoder_state, 2, tagging=False, question_answering=True)
    torch.manual_seed(3)
    weight = torch.empty(2, config.hidden_size).normal_(std=config.initializer_range)
    assert torch.equal(ours.qa_outputs.weight, weight)
    assert not ours.qa_outputs.bias.any()
