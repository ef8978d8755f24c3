"""bench.continue_roberta at toy size on text written here: the released folder its transformers
half makes, the held-out masks drawn once, the loss both libraries give, and (slow) the whole
check through the bertpre CLI."""
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
# The bench package lives at the repository root, which pytest does not put on sys.path.
sys.path.insert(0, str(ROOT))
from bench import continue_roberta as bench  # noqa: E402
from bertpre.model.families import load_pretraining_model  # noqa: E402
from bertpre.tokenizer import load_tokenizer  # noqa: E402
from bertpre.tokenizer.roles import read_roles  # noqa: E402

WORDS = ("the cat sat on a mat while the dog ran after a red ball and the bird sang over the green hill "
         "so every child in the small town heard it and laughed").split()
PARAGRAPHS = [" ".join(WORDS[(i * 7) % len(WORDS):] + WORDS[: (i * 7) % len(WORDS)]) for i in range(40)]


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def released(tmp_path_factory) -> Path:
    """A released folder at toy size: a 300-piece byte-level BPE and a 1-layer RoBERTa, 5 steps."""
    folder = tmp_path_factory.mktemp("released")
    tokenizer = bench.train_byte_level_bpe(PARAGRAPHS, folder, vocab_size=300)
    model = bench.small_roberta(len(tokenizer), hidden=32, layers=1, seed=0)
    losses = bench.train_with_transformers(model, tokenizer, bench.blocks(tokenizer, PARAGRAPHS, 16), steps=5,
                                           batch_size=4, lr=1e-3, seed=0)
    assert len(losses) == 5 and all(loss > 0 for loss in losses)
    model.save_pretrained(folder)
    return folder


def test_the_released_folder_reads_as_roberta_in_both_libraries(released):
    theirs = transformers.AutoTokenizer.from_pretrained(released)
    assert [theirs.convert_ids_to_tokens(i) for i in range(5)] == bench.ROBERTA_SPECIALS
    assert theirs.mask_token == "<mask>" and theirs.pad_token_id == 1
    ours = load_tokenizer(released)
    text = "the red dog laughed"
    assert ours.encode(text).ids == theirs(text)["input_ids"]  # <s> … </s> both sides
    roles = read_roles(released, ours)
    assert (roles.cls_token_id, roles.pad_token_id, roles.sep_token_id, roles.mask_token_id) == (0, 1, 2, 4)
    assert roles.kind == "bpe"
    config = transformers.AutoConfig.from_pretrained(released)
    assert (config.model_type, config.max_position_embeddings, config.type_vocab_size) == ("roberta", 514, 1)


def test_blocks_concatenate_every_text_with_its_specials_and_drop_the_rest(released):
    tokenizer = transformers.AutoTokenizer.from_pretrained(released)
    ids = [token for text in PARAGRAPHS[:3] for token in tokenizer(text)["input_ids"]]
    rows = bench.blocks(tokenizer, PARAGRAPHS[:3], 8)
    assert rows.shape == (len(ids) // 8, 8)
    assert rows.flatten().tolist() == ids[: rows.numel()]


def test_held_out_masks_are_drawn_once_from_the_seed_over_text_tokens_alone():
    rows = torch.randint(5, 300, (40, 16), generator=torch.Generator().manual_seed(1))
    rows[:, 0], rows[:, -1] = 0, 2  # <s> … </s>
    first = bench.fixed_masked_batches(rows, [0, 1, 2, 3, 4], 4, 300, batch_size=16, seed=7)
    again = bench.fixed_masked_batches(rows, [0, 1, 2, 3, 4], 4, 300, batch_size=16, seed=7)
    other = bench.fixed_masked_batches(rows, [0, 1, 2, 3, 4], 4, 300, batch_size=16, seed=8)
    assert [len(batch["input_ids"]) for batch in first] == [16, 16, 8]
    input_ids = torch.cat([batch["input_ids"] for batch in first])
    labels = torch.cat([batch["labels"] for batch in first])
    assert all(torch.equal(a[key], b[key]) for a, b in zip(first, again, strict=True) for key in a)
    assert not torch.equal(labels, torch.cat([batch["labels"] for batch in other]))
    predicted = labels != -100
    assert not predicted[:, 0].any() and not predicted[:, -1].any()  # specials never predicted
    assert torch.equal(labels[predicted], rows[predicted])
    assert torch.equal(input_ids[~predicted], rows[~predicted])  # only predicted tokens change
    share = predicted.sum().item() / (rows.numel() - 80)
    assert 0.10 < share < 0.20
    masked = (input_ids[predicted] == 4).float().mean().item()
    assert 0.65 < masked < 0.95


def test_transformers_and_bertpre_score_the_same_model_alike(released):
    tokenizer = transformers.AutoTokenizer.from_pretrained(released)
    rows = bench.blocks(tokenizer, PARAGRAPHS, 16)
    batches = bench.fixed_masked_batches(rows, tokenizer.all_special_ids, tokenizer.mask_token_id, len(tokenizer),
                                         batch_size=8, seed=0)
    theirs = bench.mlm_loss(bench.transformers_logits(released), batches)
    model = load_pretraining_model(released, strict=True).eval()
    ours = bench.mlm_loss(lambda input_ids: model(input_ids).prediction_logits, batches)
    assert theirs["predicted_tokens"] == ours["predicted_tokens"] > 0
    assert abs(theirs["loss"] - ours["loss"]) < 1e-5 and theirs["accuracy"] == ours["accuracy"]
    # The mean is over tokens, not batches: a uniform guess scores log(V).
    uniform = bench.mlm_loss(lambda input_ids: torch.zeros(*input_ids.shape, len(tokenizer)), batches)
    assert uniform["loss"] == pytest.approx(torch.log(torch.tensor(float(len(tokenizer)))).item(), rel=1e-6)


def test_speeches_split_at_blank_lines_with_the_last_share_held_out():
    text = "A:\nOne.\n\nB:\nTwo.\n\n\nC:\nThree.\n\nD:\nFour.\n"
    train, held_out = bench.split_speeches(text, 0.25)
    assert train == ["A:\nOne.", "B:\nTwo.", "C:\nThree."] and held_out == ["D:\nFour."]


def test_the_continue_config_loads_as_a_roberta_run(released, tmp_path):
    from bertpre.config import load_config

    path = tmp_path / "continue.yaml"
    path.write_text(bench.continue_config(released, tmp_path / "data", tmp_path / "run", steps=10, batch_size=4,
                                          lr=5e-4, length=32, seed=0))
    config = load_config(path)
    assert config.init_from == str(released) and config.data.pair_task == "none"
    assert (config.train.max_steps, config.data.max_seq_length, config.optim.warmup_steps) == (10, 32, 1)


@pytest.mark.slow
def test_the_whole_check_runs_through_the_cli_and_the_export_scores_as_bertpre(tmp_path):
    if not bench.BERTPRE.is_file():
        pytest.skip(f"no bertpre command beside {sys.executable}")
    speeches = "\n\n".join(f"SPEAKER {i % 3}:\n" + " ".join(WORDS[i % 9:] + WORDS[:i % 9]) for i in range(60))
    figures = bench.run_check(tmp_path, PARAGRAPHS, speeches, vocab_size=300, hidden=32, layers=1, length=32,
                              release_steps=5, continue_steps=4, batch_size=4, release_lr=1e-3, continue_lr=1e-3,
                              held_out_rows=8, seed=0)
    assert figures["held_out"]["rows"] >= 1 and figures["held_out"]["predicted_tokens"] > 0
    assert abs(figures["export_minus_bertpre"]) < 1e-4
    assert figures["loss_before_transformers"]["loss"] != figures["loss_after_transformers_on_export"]["loss"]
    assert (tmp_path / "export" / "config.json").is_file() and (tmp_path / "export" / "merges.txt").is_file()
