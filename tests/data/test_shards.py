"""A corpus in shards: every document once, the shards read back as one checked corpus, a
vocabulary from a sample."""
from __future__ import annotations

import json
import shutil
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
from _tokenize_helpers import documents, folder_bytes, run, write_corpus  # tests/ is on sys.path

from bertpre.data import load_data, load_mixture, open_data
from bertpre.data.shards import resolve_shard, write_merged_manifest
from bertpre.data.vocab import train_vocab
from bertpre.errors import UserError
from data_prep import Shard, sample_documents

SHARDS = 4


def all_ids(folder) -> Counter:
    """Every document's token ids, train and validation, as a multiset."""
    return Counter(json.dumps(document) for split in (folder.train, folder.validation)
                   for document in split["input_ids"])


@pytest.fixture(scope="module")
def sharded(tmp_path_factory) -> tuple[Path, Path]:
    """A corpus with repeated documents, its unsharded DATA, and 4 shards of it in root/shards."""
    root = tmp_path_factory.mktemp("shards")
    texts = documents(120)
    corpus = [write_corpus(root / "a.txt", texts[:70] + texts[:10]),  # 10 repeated inside a.txt
              write_corpus(root / "b.txt", texts[70:] + texts[60:65])]  # 5 repeated across files
    vocab = root / "vocab"
    train_vocab(corpus, vocab, vocab_size=150, min_frequency=1, show_progress=False)
    run(corpus, root / "whole", tokenizer_path=vocab)
    for index in range(SHARDS):
        run(corpus, root / "shards" / f"shard-{index}", tokenizer_path=vocab, shard=Shard(index, SHARDS))
    return root, vocab


def test_four_shards_hold_the_unsharded_documents_each_exactly_once(sharded):
    root, _ = sharded
    whole = load_data(root / "whole")
    shards = [load_data(root / "shards" / f"shard-{index}") for index in range(SHARDS)]
    union = sum((all_ids(shard) for shard in shards), Counter())
    assert union == all_ids(whole)
    assert sum(union.values()) == 120  # the 15 repeats were dropped, across shards too
    assert all(shard.manifest["shard"] == {"index": index, "count": SHARDS}
               for index, shard in enumerate(shards))
    assert sum(shard.manifest["counts"]["duplicate_documents_dropped"] for shard in shards) == 15


def test_a_glob_of_shards_is_read_as_one_corpus_with_merged_counts(sharded):
    root, _ = sharded
    whole = load_data(root / "whole")
    combined = open_data(str(root / "shards" / "shard-*"))
    assert combined.shards == [root / "shards" / f"shard-{index}" for index in range(SHARDS)]
    assert all_ids(combined) == all_ids(whole)
    merged, unsharded = combined.manifest["counts"], whole.manifest["counts"]
    for key in ("documents", "sentences", "tokens", "characters", "duplicate_documents_dropped"):
        assert merged[key] == unsharded[key], key
    assert combined.tokenizer.get_vocab() == whole.tokenizer.get_vocab()
    assert combined.tokenizer_dir == root / "shards" / "shard-0" / "tokenizer"
    # The folder that holds the shards names the same set, and in a mixture it is one source.
    assert all_ids(open_data(root / "shards")) == all_ids(whole)
    mixture = load_mixture([(str(root / "shards" / "shard-*"), 3.0), (str(root / "whole"), 1.0)])
    assert mixture.names == ["shards", "whole"] and mixture.weights == [0.75, 0.25]


def test_merge_manifests_writes_one_manifest_for_the_set(sharded, tmp_path):
    root, _ = sharded
    folder = tmp_path / "set"
    shutil.copytree(root / "shards", folder)
    manifest, written = write_merged_manifest(folder)
    assert json.loads(written.read_text()) == manifest and written == folder / "manifest.json"
    assert [entry["path"] for entry in manifest["shards"]["folders"]] == [f"shard-{i}" for i in range(SHARDS)]
    assert manifest["counts"]["documents"] == 120
    assert manifest["sources"] == load_data(root / "whole").manifest["sources"]
    assert open_data(folder).manifest["counts"] == manifest["counts"]  # the folder still opens


@pytest.mark.parametrize("damage, message", [
    ("missing", r"lacks shard 2 of 4 \(it holds 3\); tokenize it with --num-shards 4 --shard-index 2"),
    ("duplicated", r"shard 1 of 4 is held twice, by .*shard-1 and .*shard-1-copy; remove one"),
    ("other corpus", r"differ in their corpus"),
    ("not a shard", r"which is not a shard \(tokenized without --num-shards\)"),
])
def test_a_broken_set_of_shards_is_refused_in_one_line(sharded, tmp_path, damage, message):
    root, vocab = sharded
    folder = tmp_path / "set"
    shutil.copytree(root / "shards", folder)
    if damage == "missing":
        shutil.rmtree(folder / "shard-2")
    elif damage == "duplicated":
        shutil.copytree(folder / "shard-1", folder / "shard-1-copy")
    elif damage == "other corpus":
        other = write_corpus(tmp_path / "other.txt", documents(30))
        shutil.rmtree(folder / "shard-3")
        run(other, folder / "shard-3", tokenizer_path=vocab, shard=Shard(3, SHARDS))
    else:
        shutil.copytree(root / "whole", folder / "whole")
    with pytest.raises(UserError, match=message) as caught:
        open_data(str(folder / "*"))
    assert "\n" not in str(caught.value)


def test_vocab_sample_is_deterministic_and_keeps_the_vocab_size(tmp_path):
    texts = documents(400)
    corpus = [write_corpus(tmp_path / "corpus.txt", texts)]
    shuffled = [write_corpus(tmp_path / "shuffled.txt", texts[::-1])]
    options = {"vocab_size": 120, "min_frequency": 1, "vocab_sample_bytes": 6000, "show_progress": False}
    first = train_vocab(corpus, tmp_path / "v1", **options)
    again = train_vocab(corpus, tmp_path / "v2", **options)
    reordered = train_vocab(shuffled, tmp_path / "v3", **options)
    vocab_bytes = folder_bytes(tmp_path / "v1")
    del vocab_bytes["manifest.json"]
    assert {name: data for name, data in folder_bytes(tmp_path / "v2").items() if name != "manifest.json"} == vocab_bytes
    assert (tmp_path / "v3" / "vocab.txt").read_bytes() == vocab_bytes["vocab.txt"]
    assert first == again and first["tokenizer"] == reordered["tokenizer"]
    assert first["tokenizer"]["vocab_size"] == 120
    assert 0 < first["trained_on"]["bytes"] <= 6000 and first["trained_on"]["documents"] < 400
    # A bigger sample is a bigger part of the same corpus, and a different vocab.
    bigger = train_vocab(corpus, tmp_path / "v4", **(options | {"vocab_sample_bytes": 20000}))
    assert bigger["trained_on"]["documents"] > first["trained_on"]["documents"]


def test_vocab_only_of_the_whole_corpus_is_the_vocab_tokenize_trains(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents(60))
    manifest = train_vocab([corpus], tmp_path / "vocab", vocab_size=150, min_frequency=1, show_progress=False)
    run(corpus, tmp_path / "data")
    assert (tmp_path / "vocab" / "tokenizer.json").read_bytes() == \
        (tmp_path / "data" / "tokenizer" / "tokenizer.json").read_bytes()
    assert manifest["kind"] == "vocab" and manifest["trained_on"]["documents"] == 60
    assert manifest["sources"][0]["sha256"]
    with pytest.raises(UserError, match="is a VOCAB folder .*--tokenizer"):
        load_data(tmp_path / "vocab")


def test_sample_memory_does_not_grow_with_the_corpus(tmp_path):
    peaks = []
    for count in (2000, 8000):
        corpus = write_corpus(tmp_path / f"corpus-{count}.txt", documents(count))
        tracemalloc.start()
        try:
            sample_documents([corpus], 20_000)
            peaks.append(tracemalloc.get_traced_memory()[1])
        finally:
            tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0]


def test_a_shard_needs_one_vocabulary_for_all(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt", documents(20))
    with pytest.raises(UserError, match="--num-shards needs --tokenizer VOCAB"):
        run(corpus, tmp_path / "data", shard=Shard(0, 2))
    with pytest.raises(UserError, match="--vocab-sample-bytes samples the corpus to train a vocab"):
        run(corpus, tmp_path / "data", tokenizer_path=tmp_path, vocab_sample_bytes=100)


def test_the_shard_index_comes_from_the_launcher(tmp_path):
    out = "data/shard-{shard}"
    assert resolve_shard(4, None, out, {"SLURM_ARRAY_TASK_ID": "3", "RANK": "1"}) == \
        (Shard(3, 4), Path("data/shard-3"))
    assert resolve_shard(4, None, out, {"RANK": "1"}) == (Shard(1, 4), Path("data/shard-1"))
    assert resolve_shard(4, 2, "data/two", {"RANK": "1"}) == (Shard(2, 4), Path("data/two"))
    assert resolve_shard(None, None, "data/x", {"RANK": "1"}) == (None, Path("data/x"))
    refusals = [
        ((4, None, out, {}), "needs --shard-index I .*SLURM_ARRAY_TASK_ID or RANK"),
        ((4, None, "data/same", {"RANK": "0"}), r"same folder for every task; put \{shard\} in it"),
        ((4, None, out, {"SLURM_ARRAY_TASK_ID": "4"}), r"outside --num-shards 4 .*--array=0-3"),
        ((4, 7, out, {}), "--shard-index 7 is outside --num-shards 4"),
        ((None, 1, out, {}), "--shard-index needs --num-shards"),
        ((0, None, out, {}), "--num-shards 0 must be 1 or more"),
    ]
    for arguments, message in refusals:
        with pytest.raises(UserError, match=message):
            resolve_shard(*arguments)
