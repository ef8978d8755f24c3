"""fill-mask's text handling and inspect's counts read the tokenizer's roles: RoBERTa's `<mask>`
(and `[MASK]` taken for it), its specials never proposed, its words by their `Ġ` starts."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from _released_tokenizers import roberta_data as released_roberta_data

from bertpre.config import DataConfig
from bertpre.data.folder import load_data
from bertpre.tokenizer.roles import token_roles
from bertpre.tools.audit import inspect_data
from bertpre.tools.inference import Prediction, fill_in, top_tokens, with_own_mask

pytest.importorskip("transformers")  # the source folder is saved by save_pretrained


@pytest.fixture(scope="module")
def roberta_data(tmp_path_factory):
    return load_data(released_roberta_data(tmp_path_factory.mktemp("roberta-tools")))


def test_bert_mask_is_taken_for_the_tokenizers_own(roberta_data):
    tokenizer = roberta_data.tokenizer
    assert with_own_mask(tokenizer, "the [MASK] sees a <mask>") == "the <mask> sees a <mask>"
    ids = tokenizer.encode(with_own_mask(tokenizer, "the cat [MASK] today"), add_special_tokens=False).ids
    assert ids.count(token_roles(tokenizer).mask_token_id) == 1


def test_specials_are_never_proposed_and_the_best_fills_the_mask(roberta_data):
    tokenizer = roberta_data.tokenizer
    roles = token_roles(tokenizer)
    probabilities = torch.full((1, tokenizer.get_vocab_size()), 0.01)
    probabilities[0, sorted(roles.special_ids | {roles.unk_token_id})] = 1.0  # the model's favourites
    probabilities[0, tokenizer.token_to_id("Ġdog")] = 0.5
    (candidates,) = top_tokens(probabilities, tokenizer, top_k=8)
    assert candidates[0] == ("Ġdog", 0.5)
    assert not {token for token, _ in candidates} & {"<s>", "</s>", "<pad>", "<mask>", "<unk>"}
    text = fill_in(tokenizer, "the cat [MASK] today", [[Prediction("Ġdog", 0.5)]])
    assert text == "the cat dog today"


def test_inspect_counts_words_by_their_byte_level_starts(roberta_data):
    report = inspect_data(roberta_data, DataConfig(pair_task="none", whole_word_mask=True, max_seq_length=32),
                          batches=2, batch_size=16)
    assert report.word_source == "Ġ word starts"
    assert "  predicted as <mask>" in [row[0] for row in report.rows()]
    assert report.partly_masked_words == 0 and report.masked_words > 0
    assert report.masked_word_tokens >= report.masked_words
    roles = token_roles(roberta_data.tokenizer)
    tokens = np.array([token_id for row in roberta_data.train for sentence in row["input_ids"] for token_id in sentence])
    assert not np.isin(tokens, [roles.cls_token_id, roles.sep_token_id]).any()  # DATA holds text only


@pytest.mark.slow
def test_a_bert_trains_on_roberta_tokenized_data_and_exports_its_tokenizer(roberta_data, tmp_path):
    from transformers import AutoTokenizer

    from bertpre.config import load_config
    from bertpre.tools.export import export
    from bertpre.train.trainer import Trainer

    tiny = Path(__file__).parents[2] / "configs" / "tiny.yaml"
    config = load_config(tiny, [f"data.path={roberta_data.path}", f"train.out={tmp_path / 'run'}",
                                "train.max_steps=2", "train.save_every=2", "train.eval_every=1000",
                                "data.num_workers=0", "data.pair_task=none", "data.whole_word_mask=true"])
    with Trainer(config) as trainer:
        assert trainer.model.config.pad_token_id == token_roles(roberta_data.tokenizer).pad_token_id == 1
        trainer.train()
    export(tmp_path / "run", tmp_path / "export")
    for name in ("tokenizer.json",):  # tokenizer_config.json gets the model's model_max_length
        assert (tmp_path / "export" / name).read_bytes() == (roberta_data.tokenizer_dir / name).read_bytes()
    exported = AutoTokenizer.from_pretrained(str(tmp_path / "export"))
    line = "Don't stop pretraining: 北京大学 ThisTextHasNoSpaces."
    assert exported(line)["input_ids"] == roberta_data.tokenizer.encode(line).ids
    assert exported.mask_token == "<mask>" and exported.model_max_length == 64


def test_candidates_are_shown_as_text_under_the_models_own_mask(roberta_data):
    """The report: RoBERTa's candidates printed as raw byte-level pieces (`ĠCONTRIBUTORS`) under
    a `[MASK] 1:` label. They are shown as the decoder writes them, under `<mask> 1:`."""
    from bertpre.tools.inference import decoded, format_predictions

    tokenizer = roberta_data.tokenizer
    assert decoded(tokenizer, "Ġdog") == " dog"
    piece = next(token for token in sorted(tokenizer.get_vocab()) if len(token) > 2 and token.isascii() and token.isalpha())
    assert decoded(tokenizer, piece) == piece  # a piece inside a word has no space
    predictions = [[Prediction("Ġdog", 0.5, " dog"), Prediction(piece, 0.25, piece)], [Prediction("Ġcat", 0.125, " cat")]]
    assert format_predictions(tokenizer, predictions) == [
        f"  <mask> 1:  dog (0.500)  {piece} (0.250)", "  <mask> 2:  cat (0.125)"]


def test_a_small_probability_is_shown_as_a_number_not_as_zero():
    """The report: an XLNet's candidates all printed `(0.000)`. A model unsure over thousands of
    tokens gives its best ones about 1e-4 each: shown in two significant digits, not as zero."""
    from bertpre.tools.inference import shown_probability

    assert [shown_probability(p) for p in (0.5, 0.0123, 0.0005, 0.00049, 3.2e-05, 0.0)] == [
        "0.500", "0.012", "0.001", "4.9e-04", "3.2e-05", "0.000"]
