"""A WordPiece run stays bit-identical across the tokenizer-roles change (issue 37, item 1).

The pins below were recorded with the code before special tokens were read by role (branch
token-roles, from main at 2f60548, by running this module's `current_digests`): the bytes of
every file of a DATA folder, the batches the pretraining data path builds from it (pairs and
single segments, whole words or not, XLNet's permutation batches), and the losses of the first
training steps. Any change of a byte, an id, a mask or a loss fails here.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

import bertpre
from tests._tiny_data import tiny_documents

# A little of everything the WordPiece path treats specially: accents, Chinese, a literal
# "[MASK]" and "[SEP]" (text only), an over-long word, emoji, tabs.
EXTRA_DOCUMENTS = [
    ["Café déjà vu, naïve façade.", "我们今天学习自然语言处理。", "A literal [MASK] and [SEP] stay text."],
    ["x" * 120 + " is too long", "emoji 🙂 and\ttabs", "北京大学的图书馆很好"],
]

PINNED = {
    "data": "21ac9ed39f4a42951f65306d46cb13001636196dfb3f6d2fb3d9a5cb924e5cd2",
    "batches": "ada291c80f4b19c87e421c59f951199e63589293a09053d44e314c25af9eb750",
    "losses": [5.813071875561513, 5.776254689693451, 5.789619982537657],
}


def _build(folder: Path, monkeypatch) -> Path:
    from bertpre.data.build import tokenize_corpus

    monkeypatch.setattr(bertpre, "__version__", "pinned")  # recorded in the manifest and fingerprints
    monkeypatch.chdir(folder.parent)  # the manifest records the corpus's path as given
    corpus = Path("unchanged.txt")
    documents = tiny_documents(40, seed=3) + EXTRA_DOCUMENTS
    corpus.write_text("\n\n".join("\n".join(doc) for doc in documents) + "\n", encoding="utf-8")
    tokenize_corpus([corpus], folder.name, vocab_size=160, min_frequency=1, split_sentences=False,
                    validation_share=0.1, seed=0, show_progress=False)
    return folder


def _data_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _batches_digest(folder: Path) -> str:
    from bertpre.batches.collator import MaskingCollator
    from bertpre.batches.pairs import PretrainingInstances
    from bertpre.batches.plm import PermutationCollator
    from bertpre.data import load_data

    data = load_data(folder)
    digest = hashlib.sha256()
    for pair_task, whole_word, pack in (("nsp", False, False), ("sop", True, False), ("none", True, True)):
        instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=24, pair_task=pair_task,
                                         seed=5, pack_documents=pack)
        collator = MaskingCollator(data.tokenizer, whole_word_mask=whole_word, max_predictions_per_seq=6,
                                   seed=7)
        for epoch in (0, 1):
            instances.set_epoch(epoch)
            batch = collator(instances.__getitems__(list(range(min(8, len(instances))))))
            for name in sorted(batch):
                digest.update(name.encode() + batch[name].numpy().tobytes())
    instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=24, pair_task="none", seed=5)
    permutation = PermutationCollator(data.tokenizer, seed=7)
    batch = permutation(instances.__getitems__(list(range(8))))
    for name in sorted(batch):
        digest.update(name.encode() + np.ascontiguousarray(batch[name].numpy()).tobytes())
    return digest.hexdigest()


def _losses(folder: Path, out: Path) -> list[float]:
    from bertpre.config import load_config
    from bertpre.train.trainer import Trainer

    tiny = Path(__file__).parents[2] / "configs" / "tiny.yaml"
    # The whole last layer, as when the losses were pinned: `model.last_layer_rows` (on by default
    # since) draws the last layer's dropout for the rows it computes, so a seed's losses move.
    config = load_config(tiny, [f"data.path={folder}", f"train.out={out}", "train.log_every=1",
                                "train.eval_every=1000", "train.max_steps=3", "data.num_workers=0",
                                "model.last_layer_rows=false"])
    with Trainer(config) as run:
        return [run.train_step().loss for _ in range(3)]


def current_digests(tmp_path: Path, monkeypatch) -> dict:
    folder = _build(tmp_path / "data", monkeypatch).resolve()
    return {"data": _data_digest(folder), "batches": _batches_digest(folder),
            "losses": _losses(folder, tmp_path / "run")}


@pytest.mark.slow
def test_wordpiece_data_batches_and_losses_are_bit_identical(tmp_path, monkeypatch):
    current = current_digests(tmp_path, monkeypatch)
    print(json.dumps(current))
    assert current == PINNED
