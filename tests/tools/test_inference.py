"""fill-mask: loading a model with its tokenizer, top-k predictions that match a plain forward, and
XLNet's reading of a long text in windows with memory; fill-mask and evaluate on a released
BertForMaskedLM (no pooler, no pair head): one note, no pair metrics of a head never trained."""
from __future__ import annotations

import random
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from _in_process import run_main

from bertpre.batches.segments import plan_segments
from bertpre.errors import UserError
from bertpre.model import xlnet as xlnet_module
from bertpre.model.bert import BertConfig, BertForPreTraining
from bertpre.model.xlnet import (
    XLNetRelativeAttention,
    choose_window,
    reading_windows,
    xlnet_mask_logits,
)
from bertpre.tokenizer import SPECIAL_TOKENS
from bertpre.tokenizer.wordpiece import save_tokenizer, train_tokenizer
from bertpre.tools.inference import (
    evaluate_saved_model,
    fill_in,
    fill_mask,
    load_model_and_tokenizer,
)

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

SENTENCES = [
    "the cat sat on the mat.", "the dog sat on the log.", "a cat and a dog met on a mat.",
    "the sun is hot and the moon is cold.", "dogs and cats like the sun.",
] * 4


@pytest.fixture(scope="module")
def export_folder(tmp_path_factory):
    """A tiny model and its tokenizer in one folder, as `bertpre export` writes it."""
    tokenizer = train_tokenizer([SENTENCES], vocab_size=60, min_frequency=1)
    torch.manual_seed(0)
    model = BertForPreTraining(BertConfig(
        vocab_size=tokenizer.get_vocab_size(), hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=64, max_position_embeddings=32))
    folder = tmp_path_factory.mktemp("export")
    model.save_pretrained(folder)
    save_tokenizer(tokenizer, folder)
    return folder


def test_predictions_are_the_top_non_special_tokens_of_a_plain_forward(export_folder):
    model, tokenizer = load_model_and_tokenizer(export_folder)
    text = "the [MASK] sat on the [MASK]."
    predictions = fill_mask(model, tokenizer, text, top_k=3)

    ids = torch.tensor([tokenizer.encode(text).ids])
    with torch.no_grad():
        logits = model(ids).prediction_logits[0]  # (T, V)
    probabilities = logits.softmax(-1)
    special = [tokenizer.token_to_id(token) for token in SPECIAL_TOKENS]
    probabilities[:, special] = 0.0
    positions = (ids[0] == tokenizer.token_to_id("[MASK]")).nonzero().flatten()
    assert len(predictions) == 2
    for row, candidates in zip(probabilities[positions], predictions, strict=True):
        expected = row.topk(3)
        assert [c.token for c in candidates] == [tokenizer.id_to_token(int(i)) for i in expected.indices]
        torch.testing.assert_close(torch.tensor([c.probability for c in candidates]), expected.values)
        assert not {c.token for c in candidates} & set(SPECIAL_TOKENS)


def test_a_top_k_past_the_vocabulary_lists_every_token_but_the_special_ones(export_folder):
    model, tokenizer = load_model_and_tokenizer(export_folder)
    predictions = fill_mask(model, tokenizer, "the [MASK] sat on the [MASK].", top_k=100_000)
    expected = set(tokenizer.get_vocab()) - set(SPECIAL_TOKENS)
    for candidates in predictions:
        assert len(candidates) == len(expected) and {c.token for c in candidates} == expected
        probabilities = [c.probability for c in candidates]
        assert probabilities == sorted(probabilities, reverse=True) and min(probabilities) > 0


def test_fill_in_puts_the_best_token_in_place_of_each_mask(export_folder):
    model, tokenizer = load_model_and_tokenizer(export_folder)
    text = "the cat sat on the [MASK]."
    predictions = fill_mask(model, tokenizer, text, top_k=2)
    ids = tokenizer.encode(text).ids
    mask = ids.index(tokenizer.token_to_id("[MASK]"))
    ids[mask] = tokenizer.token_to_id(predictions[0][0].token)
    filled = fill_in(tokenizer, text, predictions)
    assert filled == tokenizer.decode(ids)
    assert "[MASK]" not in filled


def test_text_without_mask_is_refused(export_folder):
    model, tokenizer = load_model_and_tokenizer(export_folder)
    with pytest.raises(UserError, match=r"no \[MASK\]"):
        fill_mask(model, tokenizer, "the cat sat on the mat.")


def test_text_longer_than_the_model_is_refused(export_folder):
    model, tokenizer = load_model_and_tokenizer(export_folder)
    with pytest.raises(UserError, match="at most 32"):
        fill_mask(model, tokenizer, "the cat " * 40 + "[MASK]")


def test_evaluate_on_data_of_another_vocabulary_is_refused_with_advice_evaluate_can_take(export_folder, tiny_data):
    with pytest.raises(UserError, match="made by another tokenizer") as refused:
        evaluate_saved_model(export_folder, tiny_data)
    assert str(refused.value).endswith("(bertpre tokenize --tokenizer)")  # evaluate has no --out to change


def test_a_folder_without_model_is_refused(tmp_path):
    with pytest.raises(UserError):
        load_model_and_tokenizer(tmp_path)


# --- a released BertForMaskedLM: no pooler, no pair head --------------------------------------


@pytest.fixture(scope="module")
def released_mlm(tiny_data, tmp_path_factory) -> Path:
    """A transformers BertForMaskedLM saved as released ones are (no pooler, no pair head), with
    the tiny DATA's tokenizer."""
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("released") / "bert-mlm"
    torch.manual_seed(0)
    transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        max_position_embeddings=64)).save_pretrained(folder)
    for file in (tiny_data / "tokenizer").iterdir():
        shutil.copy(file, folder / file.name)
    return folder


def run_quietly(args: list, monkeypatch, capsys) -> tuple[int, str, str]:
    """`run_main`, failing on any warning of bertpre's that escapes the command (pytest would catch
    it before it reached stderr)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=UserWarning, module=r"bertpre\.")
        return run_main(args, monkeypatch, capsys)


def test_evaluate_a_released_mlm_notes_the_fresh_pair_head_once_and_reports_no_pair_metrics(
        released_mlm, tiny_data, monkeypatch, capsys):
    code, out, err = run_quietly(["evaluate", released_mlm, "--data", tiny_data, "--micro-batch-size", "8"],
                                 monkeypatch, capsys)
    assert code == 0, err
    assert err == (f"note: {released_mlm} has no weights for the pooler (bert.pooler), the pair head "
                   "(cls.seq_relationship); they are newly initialized; pair_loss and pair_acc are left out: "
                   "the pair head was never trained\n")
    names = [line.split()[0] for line in out.splitlines()]
    assert names == ["mlm_loss", "perplexity", "mlm_acc", "mlm_acc_mask", "mlm_acc_random", "mlm_acc_kept",
                     "predictions", "sequences"]


def test_fill_mask_on_a_released_mlm_says_the_fresh_parts_in_one_note(released_mlm, monkeypatch, capsys):
    code, out, err = run_quietly(["fill-mask", released_mlm, "the cat [MASK] the river ."], monkeypatch, capsys)
    assert code == 0, err
    assert err == (f"note: {released_mlm} has no weights for the pooler (bert.pooler), the pair head "
                   "(cls.seq_relationship); they are newly initialized\n")
    assert "[MASK] 1:" in out


def test_evaluate_without_pairs_reports_no_pair_metrics(tiny_data, tmp_path):
    """A model trained with data.pair_task none (here: a config saying so) has no pair score to
    report; NaN lines would only puzzle."""
    folder = tmp_path / "export"
    BertForPreTraining(BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=32)).save_pretrained(folder)
    for file in (tiny_data / "tokenizer").iterdir():  # the DATA's vocabulary, which evaluate requires
        shutil.copy(file, folder / file.name)
    config = tmp_path / "no-pairs.yaml"
    config.write_text("data:\n  pair_task: none\n", encoding="utf-8")
    metrics = evaluate_saved_model(folder, tiny_data, config_path=config, micro_batch_size=8)
    assert not {"pair_loss", "pair_acc"} & set(metrics) and metrics["predictions"] > 0


# --- XLNet: long text in windows with memory ---------------------------------------------------


@pytest.fixture(scope="module")
def xlnet_runs(tiny_data, tmp_path_factory):
    """Tiny XLNet RUN folders, with memory (mem_len 8) and without, loaded."""
    from _xlnet_run import xlnet_run

    root = tmp_path_factory.mktemp("xlnet-fill-mask")
    return {memory: load_model_and_tokenizer(xlnet_run(root / f"memory-{memory}", tiny_data, mem_len=memory))
            for memory in (8, 0)}


@pytest.fixture
def small_windows(monkeypatch):
    """Windows of 16 tokens, one every 8: a long text in a few tokens, so the tests stay fast."""
    monkeypatch.setattr(xlnet_module, "MASK_WINDOW", 16)
    monkeypatch.setattr(xlnet_module, "MASK_WINDOW_STEP", 8)


def attention_sizes(monkeypatch) -> list[tuple[int, int]]:
    """(queries, keys) of every attention XLNet computes from now on."""
    sizes = []
    attend = XLNetRelativeAttention.attend

    def recording(self, query, key, *args):
        sizes.append((query.shape[2], key.shape[2]))
        return attend(self, query, key, *args)

    monkeypatch.setattr(XLNetRelativeAttention, "attend", recording)
    return sizes


def tiny_words(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(["the", "cat", "sees", "river", "a", "dog", "farmer", "apple", "red", "."])
            for _ in range(count)]


@pytest.mark.parametrize(("length", "expected"), [
    (3, [(0, 3)]), (16, [(0, 16)]), (17, [(0, 16), (8, 17)]), (40, [(0, 16), (8, 24), (16, 32), (24, 40)])])
def test_windows_are_the_segments_training_cuts_from_a_document(length, expected):
    assert reading_windows(length, 16, 8) == expected
    plan = plan_segments(np.array([length - 1]), np.array([0]), segment_length=16, reuse_length=8)  # + [SEP]
    assert list(zip(plan.start.tolist(), plan.stop.tolist(), strict=True)) == expected


@pytest.mark.parametrize(("length", "position", "memory", "expected"), [
    (24, 2, 0, 0),  # in the first window alone
    (24, 10, 0, 0),  # 10 before it and 5 after it, against 2 and 13 in the second window
    (24, 12, 0, 1),  # 12 and 3, against 4 and 11
    (24, 10, 8, 1),  # the memory gives the second window 8 more before it: 10 and 13
    (32, 19, 0, 1),  # 11 and 4, against 3 and 12 in the third window
    (32, 19, 8, 2),  # 19 and 4, against 11 and 12
    (32, 30, 8, 2),  # only the last window holds it
])
def test_each_mask_is_read_in_the_window_where_its_poorer_side_has_most_context(length, position, memory, expected):
    assert choose_window(position, reading_windows(length, 16, 8), memory) == expected


def test_a_text_within_one_window_reads_as_one_forward_with_every_mask_hidden(xlnet_runs):
    model, tokenizer = xlnet_runs[8]
    text = "the [MASK] sees the river . a dog [MASK] the farmer ."
    ids = tokenizer.encode(text, add_special_tokens=False).ids + [tokenizer.token_to_id("[SEP]")]
    masks = [index for index, token in enumerate(ids) if token == tokenizer.token_to_id("[MASK]")]
    perm_mask = torch.zeros(1, len(ids), len(ids))
    perm_mask[0, :, masks] = 1.0  # no position sees a target (what fill-mask computed before windows)
    target_mapping = torch.zeros(1, len(masks), len(ids))
    target_mapping[0, torch.arange(len(masks)), masks] = 1.0
    with torch.no_grad():
        expected = model(torch.tensor([ids]), perm_mask=perm_mask, target_mapping=target_mapping).logits[0]
    torch.testing.assert_close(xlnet_mask_logits(model, tokenizer, text), expected, rtol=0, atol=1e-5)


@pytest.mark.parametrize("memory", [8, 0])
def test_a_long_text_is_read_in_windows_whose_attention_is_bounded(memory, xlnet_runs, small_windows,
                                                                  monkeypatch):
    model, tokenizer = xlnet_runs[memory]
    words = tiny_words(100)
    words[3] = words[50] = words[-2] = "[MASK]"
    sizes = attention_sizes(monkeypatch)
    logits = xlnet_mask_logits(model, tokenizer, " ".join(words))
    assert logits.shape == (3, model.config.vocab_size) and torch.isfinite(logits).all()
    # Attention is at most a window's queries over the window and the memory, which is used.
    assert max(queries for queries, _ in sizes) == 16 and max(keys for _, keys in sizes) == 16 + memory
    assert model.transformer.config.reuse_len is None  # the run's own setting, back after reading


def test_a_mask_sees_nothing_past_its_window_and_without_memory_nothing_before_it(xlnet_runs, small_windows):
    words = tiny_words(120)
    words[60] = "[MASK]"

    def logits(memory: int, changed: int) -> torch.Tensor:
        model, tokenizer = xlnet_runs[memory]
        text = words[:changed] + ["apple" if words[changed] != "apple" else "dog"] + words[changed + 1:]
        return xlnet_mask_logits(model, tokenizer, " ".join(text))

    for memory in (8, 0):
        model, tokenizer = xlnet_runs[memory]
        reference = xlnet_mask_logits(model, tokenizer, " ".join(words))
        torch.testing.assert_close(logits(memory, 100), reference, rtol=0, atol=0)  # after its window
        assert not torch.equal(logits(memory, 58), reference)  # beside it, in its window
    reference = xlnet_mask_logits(*xlnet_runs[0], " ".join(words))
    torch.testing.assert_close(logits(0, 20), reference, rtol=0, atol=0)  # before it, no memory
