"""The advice to a seed stuck at one class (issue 51, item 7): following it never leads back to
the advice given before; once the rate and the epochs are where they can help, it says plainly
that the model or the data falls short."""
from __future__ import annotations

import dataclasses
import re

import pytest

from bertpre.config.finetune import PRESETS, Hyperparameters, advice_when_stuck


def follow(hp: Hyperparameters, advice: str) -> Hyperparameters | None:
    """The settings a user runs next on reading `advice`, or None when it suggests no setting."""
    changes: dict = {}
    if (lr := re.search(r"--lr ([0-9.e-]+)", advice)) is not None:
        changes["lr"] = float(lr.group(1))
    if (epochs := re.search(r"--epochs (\d+)", advice)) is not None:
        changes["epochs"] = int(epochs.group(1))
    if "--preset small-data" in advice:
        changes.setdefault("epochs", PRESETS["small-data"].epochs)
    if "another --lr" in advice or "another of BERT's rates" in advice:
        changes["lr"] = 5e-5 if hp.lr != 5e-5 else 3e-5  # one of the paper's others
    if "more epochs" in advice:
        changes.setdefault("epochs", PRESETS["small-data"].epochs)
    return dataclasses.replace(hp, **changes) if changes else None


def says_plainly(advice: str) -> bool:
    """Whether the advice says the model or the data falls short (the end of the chain)."""
    return any(words in advice for words in ("too small", "too little pretrained", "do not tell the classes apart"))


def advice_chain(hp: Hyperparameters, hidden_size: int) -> list[str]:
    """The advice a user reads, following each, until it says plainly what falls short."""
    chain: list[str] = []
    while True:
        advice = advice_when_stuck(hp, hidden_size)
        assert advice not in chain, f"the advice loops: {chain + [advice]}"
        chain.append(advice)
        following = follow(hp, advice)
        if says_plainly(advice) or following is None or following == hp:
            return chain
        assert len(chain) < 5, chain
        hp = following


def test_the_reported_loop_on_a_small_model_ends_in_plain_words():
    """The report: "try --lr 0.001", then at 0.001 "try another --lr than 0.001 (BERT's paper
    chose among 5e-5…)", which sends the user back to the rate that did not move the model."""
    first = advice_when_stuck(Hyperparameters(), 32)
    assert first == ("lr 2e-05 is a rate for BERT-base (hidden 768) and barely moves a hidden-32 model: "
                     "try --lr 0.001, and more epochs with --preset small-data")
    assert advice_when_stuck(Hyperparameters(lr=1e-3), 32) == "try more epochs at lr 0.001 (--epochs 20)"
    assert advice_when_stuck(Hyperparameters(lr=1e-3, epochs=20), 32) == (
        "a hidden-32 model at lr 0.001 for 20 epochs still predicts one class: the model is too small or "
        "too little pretrained for this task, or the training set too small; pretrain a larger model or "
        "longer, or give more examples")


@pytest.mark.parametrize("hidden_size", [32, 256, 768, 1024])
@pytest.mark.parametrize("hp", [
    Hyperparameters(), Hyperparameters(lr=1e-3), Hyperparameters(lr=0.5), Hyperparameters(epochs=20),
    Hyperparameters(lr=5e-5, epochs=1), PRESETS["probe"], dataclasses.replace(PRESETS["probe"], lr=1e-5),
], ids=["bert", "lr-1e-3", "lr-0.5", "20-epochs", "lr-5e-5", "probe", "probe-lr-1e-5"])
def test_following_the_advice_never_loops_and_ends_in_plain_words(hp, hidden_size):
    chain = advice_chain(hp, hidden_size)
    assert says_plainly(chain[-1]), chain
    if hidden_size < 768 and hp.mode == "full":  # BERT-base's rates are no advice for a small model
        assert not any("BERT's paper" in advice or "BERT's rates" in advice for advice in chain), chain
