"""bertpre.batches.mixture: weighted draws from several DATA folders, keyed by (seed, epoch)."""
from __future__ import annotations

import math
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from _tiny_data import build_tiny_data  # tests/ is on sys.path

from bertpre.batches import (
    BatchStream,
    MaskingCollator,
    MixedInstances,
    PretrainingInstances,
    build_instances,
)
from bertpre.batches.instance_batch import InstanceBatch
from bertpre.batches.mixture import largest_remainder
from bertpre.config import DataConfig
from bertpre.data import DataMixture, load_mixture

DATA_CONFIG = DataConfig(max_seq_length=32)


@pytest.fixture(scope="module")
def second_folder(tiny_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200 documents (about three times tiny_data's), tokenized with tiny_data's tokenizer."""
    return build_tiny_data(tmp_path_factory.mktemp("mixture") / "wiki", documents=200, seed=1,
                           tokenizer=tiny_data / "tokenizer")


@pytest.fixture(scope="module")
def mixture(tiny_data: Path, second_folder: Path) -> DataMixture:
    return load_mixture([(tiny_data, 0.7), (second_folder, 0.3)])


def mixed(mixture: DataMixture, *, seed: int = 5, rank: int = 0, world_size: int = 1) -> MixedInstances:
    instances = build_instances(mixture, DATA_CONFIG, seed=seed, rank=rank, world_size=world_size)
    assert isinstance(instances, MixedInstances)
    return instances


def keys_of(instances: MixedInstances) -> np.ndarray:
    return instances.__getitems__(range(len(instances))).seed_keys


def test_largest_remainder_counts_sum_to_the_total():
    assert largest_remainder([0.7, 0.3], 10).tolist() == [7, 3]
    assert largest_remainder([1, 1, 1], 10).tolist() == [4, 3, 3]
    assert largest_remainder([0.5, 0.25, 0.25], 7).tolist() == [3, 2, 2]  # 3.5, 1.75, 1.75


def test_every_epoch_realises_the_weights_and_every_stretch_of_it_samples_them(mixture):
    instances = mixed(mixture)
    assert instances.size == sum(instances.stream_block) > 400
    # Source 0 (60 documents) is upsampled past its own epoch; source 1 gives part of its own.
    assert instances.draws[0] > instances.stream_block[0] and instances.draws[1] < instances.stream_block[1]
    window = 64
    for epoch in range(3):
        instances.set_epoch(epoch)
        counts = np.bincount(instances.source_of(range(len(instances))), minlength=2)
        assert counts.tolist() == instances.draws.tolist()
        assert abs(instances.shares["wiki"] - 0.3) <= 1 / instances.size
        # The interleaving is a random draw without replacement: each window is within a
        # binomial tolerance (4 standard deviations) of the weights.
        for start in range(0, len(instances) - window + 1, window):
            share = (instances.source_of(range(start, start + window)) == 1).mean()
            assert abs(share - 0.3) <= 4 * math.sqrt(0.3 * 0.7 / window)


def test_same_seed_and_epoch_same_instances_another_epoch_or_seed_others(mixture):
    one, two = mixed(mixture), mixed(mixture)
    one.set_epoch(3), two.set_epoch(3)
    assert np.array_equal(keys_of(one), keys_of(two))
    batch_one, batch_two = one.__getitems__(range(40)), two.__getitems__(range(40))
    assert np.array_equal(batch_one.input_ids, batch_two.input_ids)
    third = keys_of(one)
    one.set_epoch(4)
    assert not np.array_equal(keys_of(one)[:50], third[:50])
    one.set_epoch(3)  # back again: a pure function of (seed, epoch), not of what came before
    assert np.array_equal(keys_of(one), third)
    assert not np.array_equal(keys_of(mixed(mixture, seed=6))[:50], keys_of(mixed(mixture))[:50])


def test_no_two_instances_share_a_key_even_from_one_folder_twice(tiny_data):
    folder = load_mixture(tiny_data).folders[0]
    twice = mixed(DataMixture([folder, folder], [0.5, 0.5], ["a", "b"]))
    keys = keys_of(twice)
    assert len(np.unique(keys)) == len(keys)
    sources = twice.source_of(range(len(twice)))
    batch = twice.__getitems__(range(len(twice)))
    # Each source pairs and masks its documents its own way: the same document gives other pairs.
    assert not np.array_equal(batch.document_index[sources == 0][:20], batch.document_index[sources == 1][:20])


def test_items_come_in_the_order_asked_as_getitem_gives_them(mixture):
    instances = mixed(mixture)
    asked = [17, 2, 300, 2, 41, 5]
    batch = instances.__getitems__(asked)
    for place, index in enumerate(asked):
        assert batch.instance(place) == instances[index]
    assert instances.source_of(asked).tolist().count(1) > 0  # both sources are in the batch
    copy = pickle.loads(pickle.dumps(instances))  # as a spawned DataLoader worker gets it
    assert np.array_equal(copy.__getitems__(asked).input_ids, batch.input_ids)


def test_a_light_source_moves_on_through_its_data_epoch_after_epoch(mixture):
    instances = MixedInstances.from_config(
        DataMixture(mixture.folders, [0.95, 0.05], mixture.names), DATA_CONFIG, seed=5)
    wiki = instances.sources[1]
    per_epoch, own_epoch = int(instances.draws[1]), int(instances.stream_block[1])
    epochs = -(-own_epoch // per_epoch)
    assert epochs > 3
    seen = set()
    for epoch in range(epochs):
        instances.set_epoch(epoch)
        batch = instances.__getitems__(np.flatnonzero(instances.source_of(range(len(instances))) == 1))
        seen |= set(batch.seed_keys.tolist())
    # Every instance of the source's own first epoch came once, none twice.
    assert set(wiki.epoch_rows(0)[1].tolist()) <= seen and len(seen) == epochs * per_epoch


def test_ranks_get_equal_disjoint_shares_of_the_one_epoch(mixture):
    whole = mixed(mixture)
    ranks = [mixed(mixture, rank=rank, world_size=3) for rank in range(3)]
    assert len({len(part) for part in ranks}) == 1 and len(ranks[0]) == whole.size // 3
    keys = np.concatenate([keys_of(part) for part in ranks])
    assert len(np.unique(keys)) == len(keys) and set(keys.tolist()) <= set(keys_of(whole).tolist())


def test_resuming_the_stream_at_a_position_gives_the_same_remaining_batches(mixture):
    collate = MaskingCollator(mixture.tokenizer, seed=5, pad_to_length=32)
    instances = mixed(mixture)
    count = len(instances) // 16 + 3  # into the next epoch

    def stream(state: dict | None = None) -> BatchStream:
        made = BatchStream(instances, collate, micro_batch_size=16, num_workers=0, pin_memory=False, seed=5)
        if state is not None:
            made.load_state_dict(state)
        return made

    straight = stream()
    batches, states = [], []
    for _ in range(count):
        states.append(straight.state_dict())
        batches.append(straight.next())
    assert straight.epoch == 1
    for resume_at in (5, count - 2):
        resumed = stream(states[resume_at])
        for batch in batches[resume_at:]:
            again = resumed.next()
            assert all(torch.equal(batch[name], again[name]) for name in batch)
    workers = BatchStream(instances, collate, micro_batch_size=16, num_workers=2, pin_memory=False, seed=5)
    workers.load_state_dict(states[count - 4])
    for batch in batches[count - 4:]:  # worker processes fetch the same batches
        again = workers.next()
        assert all(torch.equal(batch[name], again[name]) for name in batch)


def test_one_folder_is_not_wrapped(tiny_data):
    single = load_mixture(tiny_data)
    instances = build_instances(single, DATA_CONFIG, seed=5)
    plain = PretrainingInstances.from_config(single.folders[0].train, single.tokenizer, DATA_CONFIG, seed=5)
    assert type(instances) is PretrainingInstances
    assert np.array_equal(instances.__getitems__(range(20)).input_ids, plain.__getitems__(range(20)).input_ids)


def test_packed_documents_keep_their_starts_through_a_mixture_into_the_unpadded_layout(mixture):
    """`data.pack_documents` rows of a mixture: each instance's second document starts where its
    source built alone puts it (so `model.unpad`'s document mask sees it), also through the dict
    form (`__getitem__`, `InstanceBatch.from_instances`)."""
    config = DataConfig(max_seq_length=32, pair_task="none")  # pack_documents: true by default
    instances = build_instances(mixture, config, seed=5)
    asked = list(range(64))
    batch = instances.__getitems__(asked)
    sources = instances.source_of(asked)
    packed = batch.document_starts < batch.lengths
    assert packed[sources == 0].any() and packed[sources == 1].any()  # both sources pack rows
    alone = [int(instances.__getitems__([index]).document_starts[0]) for index in asked]
    assert batch.document_starts.tolist() == alone
    from_dicts = InstanceBatch.from_instances([instances[index] for index in asked])
    assert np.array_equal(from_dicts.document_starts, batch.document_starts)
    collated = MaskingCollator.from_config(mixture.tokenizer, config, 5, unpad_bucket=1)(batch)
    assert collated["cu_seqlens"].shape[0] == 2 * len(asked) + 2  # two documents a row, the fillers
    positions = np.arange(collated["input_ids"].shape[1])[None, :]
    real = positions < batch.lengths[:, None]
    expected = np.where(real, 1 + (positions >= batch.document_starts[:, None]), 0)
    assert np.array_equal(collated["document_ids"].numpy(), expected)
