"""The pretraining data path by role on a RoBERTa-like byte-level BPE DATA folder: `<s> A </s></s> B </s>`
pairs within max_seq_length, `</s>` between packed documents and after every segment document,
`<mask>` for masking, the roles never predicted, whole words by their `Ġ` starts."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _released_tokenizers import roberta_data as released_roberta_data

from bertpre.batches.collator import MaskingCollator
from bertpre.batches.pairs import PretrainingInstances
from bertpre.batches.segments import SegmentInstances
from bertpre.data.folder import load_data
from bertpre.labels import IGNORE_INDEX, MASKED
from bertpre.tokenizer.roles import token_roles

pytest.importorskip("transformers")  # the source folder is saved by save_pretrained


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return load_data(released_roberta_data(tmp_path_factory.mktemp("roberta-data")))


def rows_of(batch) -> list[np.ndarray]:
    return np.split(batch.input_ids, np.cumsum(batch.lengths)[:-1])


@pytest.mark.parametrize("pair_task", ["nsp", "sop"])
def test_pairs_take_robertas_layout_within_the_length(data, pair_task):
    roles = token_roles(data.tokenizer)
    instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=20, pair_task=pair_task, seed=1)
    batch = instances.__getitems__(list(range(len(instances))))
    types = np.split(batch.token_type_ids, np.cumsum(batch.lengths)[:-1])
    for ids, type_ids in zip(rows_of(batch), types, strict=True):
        assert len(ids) <= 20 and ids[0] == roles.cls_token_id and ids[-1] == roles.sep_token_id
        separators = np.flatnonzero(ids == roles.sep_token_id)
        assert len(separators) == 3 and separators[1] == separators[0] + 1  # A </s></s> B </s>
        assert not np.isin(ids[1:-1], [roles.cls_token_id, roles.pad_token_id, roles.mask_token_id]).any()
        assert (type_ids[:separators[1] + 1] == 0).all() and (type_ids[separators[1] + 1:] == 1).all()
    assert batch.lengths.max() == 20  # the budget is used to the last token


def test_packed_documents_are_parted_by_two_separators(data):
    roles = token_roles(data.tokenizer)
    instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=40, pair_task="none", seed=1,
                                     pack_documents=True)
    batch = instances.__getitems__(list(range(len(instances))))
    counts = [int((ids == roles.sep_token_id).sum()) for ids in rows_of(batch)]
    assert set(counts) <= {1, 3} and 3 in counts and batch.lengths.max() <= 40
    assert (batch.token_type_ids == 0).all()  # one segment type, as RoBERTa has


def test_the_collator_masks_with_mask_and_never_predicts_the_roles(data):
    roles = token_roles(data.tokenizer)
    instances = PretrainingInstances(data.train, data.tokenizer, max_seq_length=32, pair_task="none", seed=2)
    collator = MaskingCollator(data.tokenizer, seed=3)
    batch = collator(instances.__getitems__(list(range(min(64, len(instances))))))
    labels, ids = batch["labels"].numpy(), batch["input_ids"].numpy()
    predicted = labels != IGNORE_INDEX
    assert predicted.any()
    assert not np.isin(labels[predicted], sorted(roles.special_ids)).any()
    assert (ids[batch["mask_action"].numpy() == MASKED] == roles.mask_token_id).all()
    assert (ids[batch["attention_mask"].numpy() == 0] == roles.pad_token_id).all()


def test_whole_words_follow_the_byte_level_word_starts(data):
    tokenizer = data.tokenizer
    instances = PretrainingInstances(data.train, tokenizer, max_seq_length=32, pair_task="none", seed=2)
    collator = MaskingCollator(tokenizer, whole_word_mask=True, seed=4)
    batch = collator(instances.__getitems__(list(range(min(64, len(instances))))))
    labels, attention = batch["labels"].numpy(), batch["attention_mask"].numpy().astype(bool)
    original = np.where(labels != IGNORE_INDEX, labels, batch["input_ids"].numpy())
    eligible = attention & ~collator.never_predicted[original]
    continues = eligible & collator.is_continuation[original]
    continues[:, 0] = False
    continues[:, 1:] &= eligible[:, :-1]
    predicted = labels != IGNORE_INDEX
    # A piece without Ġ continues the word before it: both are predicted, or neither.
    rows, columns = np.nonzero(continues)
    assert len(rows) and (predicted[rows, columns] == predicted[rows, columns - 1]).all()
    starts = [token for token in tokenizer.get_vocab() if token.startswith("Ġ")]
    assert not collator.is_continuation[[tokenizer.token_to_id(token) for token in starts]].any()


def test_segments_end_each_document_with_the_separator(data):
    roles = token_roles(data.tokenizer)
    segments = SegmentInstances(data.train, data.tokenizer, segment_length=16, lanes=2, seed=0)
    assert segments.sep_token_id == roles.sep_token_id == 2


def test_the_roles_survive_the_data_folder_round_trip(data: object):
    roles = token_roles(load_data(Path(data.path)).tokenizer)
    assert (roles.kind, roles.mask_token, roles.pair_layout) == ("bpe", "<mask>", "roberta")
