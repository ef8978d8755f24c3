"""bertpre.batches.padding and as_instance_batch: what both collators are given and the grid they pad it to, and the fixed-size prediction slots."""
from __future__ import annotations

import numpy as np
import pytest

from bertpre.batches.instance_batch import InstanceBatch, as_instance_batch
from bertpre.batches.padding import pad_instances, padded_length, prediction_slots
from bertpre.errors import UserError


def test_padded_length_is_the_longest_rounded_up_or_the_fixed_length():
    assert padded_length(5) == 5
    assert padded_length(5, multiple_of=8) == 8
    assert padded_length(16, multiple_of=8) == 16
    assert padded_length(7, multiple_of=2) == 8
    assert padded_length(5, multiple_of=8, pad_to_length=12) == 12
    assert padded_length(12, pad_to_length=12) == 12
    with pytest.raises(UserError, match=r"^an instance has 13 tokens, more than pad_to_length 12; do this$"):
        padded_length(13, pad_to_length=12, hint="; do this")


def test_pad_instances_scatters_ids_and_types_after_which_pad():
    batch = InstanceBatch(input_ids=np.array([2, 7, 3, 2, 8, 3, 9, 3]), token_type_ids=np.array([0, 0, 0, 0, 0, 0, 1, 1]),
                          lengths=np.array([3, 5]), seed_keys=np.zeros(2, np.uint64))
    input_ids, attention_mask, token_type_ids = pad_instances(batch, 6, pad_token_id=0, vocab_size=10)
    assert input_ids.tolist() == [[2, 7, 3, 0, 0, 0], [2, 8, 3, 9, 3, 0]]
    assert input_ids.dtype == np.int64 and attention_mask.dtype == bool
    assert attention_mask.tolist() == [[True] * 3 + [False] * 3, [True] * 5 + [False]]
    assert token_type_ids.tolist() == [[0] * 6, [0, 0, 0, 1, 1, 0]]
    with pytest.raises(UserError, match=r"^token id 9 is outside the tokenizer's vocabulary of 9; "):
        pad_instances(batch, 6, pad_token_id=0, vocab_size=9)


def test_prediction_slots_list_each_rows_predictions_in_order_then_0_and_minus_100():
    predicted = np.array([[False, True, False, True], [False, False, False, False], [True, True, True, False]])
    values = np.array([[10, 11, 12, 13], [20, 21, 22, 23], [30, 31, 32, 33]])
    positions, ids = prediction_slots(predicted, values, 3)
    assert positions.tolist() == [[1, 3, 0], [0, 0, 0], [0, 1, 2]]
    assert ids.tolist() == [[11, 13, -100], [-100, -100, -100], [30, 31, 32]]
    assert positions.dtype == ids.dtype == np.int64
    positions, ids = prediction_slots(predicted, values, 2)  # fewer slots: later predictions left out
    assert positions.tolist() == [[1, 3], [0, 0], [0, 1]] and ids.tolist() == [[11, 13], [-100, -100], [30, 31]]
    positions, ids = prediction_slots(predicted, values, 6)  # more slots than positions
    assert positions.tolist() == [[1, 3, 0, 0, 0, 0], [0] * 6, [0, 1, 2, 0, 0, 0]]
    assert ids.tolist() == [[11, 13] + [-100] * 4, [-100] * 6, [30, 31, 32] + [-100] * 3]


def test_as_instance_batch_keeps_a_batch_converts_dicts_and_refuses_nothing():
    batch = InstanceBatch(input_ids=np.array([2, 3]), token_type_ids=np.zeros(2, np.int64), lengths=np.array([2]),
                          seed_keys=np.zeros(1, np.uint64))
    assert as_instance_batch(batch) is batch
    converted = as_instance_batch([{"input_ids": [2, 7, 3], "token_type_ids": [0, 0, 1]}, {"input_ids": [2, 3]}])
    assert converted.input_ids.tolist() == [2, 7, 3, 2, 3] and converted.lengths.tolist() == [3, 2]
    assert converted.token_type_ids.tolist() == [0, 0, 0, 0, 0]  # not every instance has types: all 0
    with pytest.raises(ValueError, match="^cannot collate an empty list of instances$"):
        as_instance_batch([])
