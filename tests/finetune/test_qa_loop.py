"""One seed of question answering on windows (`bertpre.finetune.qa_loop`), on tiny random BERT,
XLNet and ModernBERT encoders: padding (right for BERT and ModernBERT, left for XLNet) moves neither
the logits nor the answer positions, the loss is transformers' QA loss, and a probe leaves the
encoder as it was (ModernBERT's probe trains its head and classifier)."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _xlnet_run import TINY_XLNET

from bertpre.config.finetune import Hyperparameters
from bertpre.finetune.model import build_task_model
from bertpre.finetune.qa_data import Answer, QAExample
from bertpre.finetune.qa_loop import pad_windows, span_loss, train_question_answering, window_logits
from bertpre.finetune.qa_windows import encode_qa_windows
from bertpre.finetune.source import Encoder
from bertpre.model import BertConfig
from bertpre.model.families import encoder_of, family
from bertpre.tokenizer import load_tokenizer
from bertpre.train.runtime import Runtime

transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.usefixtures("one_thread_per_module")  # see conftest

CPU = Runtime(device=torch.device("cpu"))
TINY_BERT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                 max_position_embeddings=64)
# 3 layers: 0 global, 1 and 2 reading 4 tokens each way (the windows below are longer); [PAD] is 0.
TINY_MODERNBERT = dict(architecture="modernbert", hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                       intermediate_size=48, max_position_embeddings=64, local_attention=8,
                       global_attn_every_n_layers=3, pad_token_id=0)
CONTEXTS = ["my sister feeds the cat today .", "the cat sees the river and my sister sees a red apple in the field .",
            "the river ."]
EXAMPLES = [QAExample(f"q{number}", question, context, (Answer(answer, context.index(answer)),))
            for number, (question, context, answer) in enumerate(zip(
                ["who feeds the cat ?", "what does my sister see ?", "what ?"], CONTEXTS,
                ["my sister", "a red apple", "the river"], strict=True))]


def tiny_encoder(shape: dict, tiny_data: Path) -> Encoder:
    folder = tiny_data / "tokenizer"
    tokenizer = load_tokenizer(folder)
    config = BertConfig(**{**shape, "vocab_size": tokenizer.get_vocab_size()})
    config.validate()
    torch.manual_seed(0)
    row = family(config)
    return Encoder(source=folder, model_folder=folder, tokenizer_folder=folder, config=config,
                   state=row.build_encoder(config).state_dict(), tokenizer=row.tokenizer_layout(tokenizer),
                   step=None, weights_sha256="")


@pytest.mark.parametrize("shape", [TINY_BERT, TINY_XLNET, TINY_MODERNBERT], ids=["bert", "xlnet", "modernbert"])
def test_padding_moves_neither_logits_nor_answers(shape, tiny_data):
    encoder = tiny_encoder(shape, tiny_data)
    windows = encode_qa_windows(encoder.tokenizer, EXAMPLES, max_seq_length=20, doc_stride=4,
                                config=encoder.config)
    assert len({len(ids) for ids in windows.input_ids}) > 1  # windows of several lengths: padded together
    model = build_task_model(encoder.config, encoder.state, 2, tagging=False, question_answering=True)
    batched = window_logits(model, windows, batch_size=8, pad_id=0, runtime=CPU, padding_side=encoder.padding_side)
    alone = window_logits(model, windows, batch_size=1, pad_id=0, runtime=CPU, padding_side=encoder.padding_side)
    for mine, reference in zip(batched, alone, strict=True):
        torch.testing.assert_close(torch.from_numpy(mine), torch.from_numpy(reference), atol=1e-5, rtol=0)
    batch = pad_windows(windows, list(range(len(windows))), 0, encoder.padding_side)
    for row, index in enumerate(range(len(windows))):
        start, end = batch["start_positions"][row], batch["end_positions"][row]
        ids = windows.input_ids[index]
        own = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        assert own == ids
        shift = batch["input_ids"].shape[1] - len(ids) if encoder.padding_side == "left" else 0
        assert (start - shift, end - shift) == (windows.start_positions[index], windows.end_positions[index])


@pytest.mark.parametrize("shape", [TINY_BERT, TINY_XLNET], ids=["bert", "xlnet"])
def test_the_loss_is_transformers_question_answering_loss(shape, tiny_data):
    encoder = tiny_encoder(shape, tiny_data)
    windows = encode_qa_windows(encoder.tokenizer, EXAMPLES, max_seq_length=20, doc_stride=4,
                                config=encoder.config)
    ours = build_task_model(encoder.config, encoder.state, 2, tagging=False, question_answering=True).eval()
    name = family(encoder.config).question_answering_head.__name__
    hf_config = encoder.config.to_hf_dict()
    theirs = getattr(transformers, name)(transformers.AutoConfig.for_model(**hf_config)).eval()
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not missing and all(key.startswith("bert.pooler.") for key in unexpected)
    batch = pad_windows(windows, list(range(len(windows))), 0, encoder.padding_side)
    with torch.no_grad():
        loss = span_loss(ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]),
                         batch["start_positions"], batch["end_positions"])
        reference = theirs(**batch).loss
    torch.testing.assert_close(loss, reference, atol=1e-5, rtol=0)


@pytest.mark.parametrize("shape", [TINY_BERT, TINY_XLNET], ids=["bert", "xlnet"])
def test_a_windows_loss_is_its_own_whatever_its_batch_mates(shape, tiny_data):
    """Padding is left out of the span softmax: a padded batch's loss is the mean of its windows'
    losses each alone (transformers' loss would count the padding's logits)."""
    encoder = tiny_encoder(shape, tiny_data)
    windows = encode_qa_windows(encoder.tokenizer, EXAMPLES, max_seq_length=20, doc_stride=4,
                                config=encoder.config)
    lengths = [len(ids) for ids in windows.input_ids]
    assert len(set(lengths)) > 1, "the batch must need padding"
    ours = build_task_model(encoder.config, encoder.state, 2, tagging=False, question_answering=True).eval()
    torch.nn.init.normal_(ours.qa_outputs.bias)  # padding's logits are the bias: make it matter

    def loss_of(indices):
        batch = pad_windows(windows, indices, 0, encoder.padding_side)
        with torch.no_grad():
            logits = ours(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"])
        return span_loss(logits, batch["start_positions"], batch["end_positions"], batch["attention_mask"])

    everyone = list(range(len(windows)))
    alone = torch.stack([loss_of([index]) for index in everyone])
    torch.testing.assert_close(loss_of(everyone), alone.mean(), atol=1e-5, rtol=0)


def test_a_probe_trains_the_start_and_end_layer_alone(tiny_data):
    encoder = tiny_encoder(TINY_BERT, tiny_data)
    windows = encode_qa_windows(encoder.tokenizer, EXAMPLES, max_seq_length=20, doc_stride=4,
                                config=encoder.config)
    hp = Hyperparameters(mode="probe", epochs=2, lr=1e-2, batch_size=4)
    model = train_question_answering(encoder, windows, hp=hp, seed=0, runtime=CPU)
    trained = encoder_of(model, encoder.config).state_dict()
    assert all(torch.equal(trained[name], tensor) for name, tensor in encoder.state.items())
    torch.manual_seed(0)
    fresh = build_task_model(encoder.config, encoder.state, 2, tagging=False, question_answering=True)
    assert not torch.equal(model.qa_outputs.weight, fresh.qa_outputs.weight)


def test_a_modernbert_probe_trains_its_head_and_classifier_alone(tiny_data):
    encoder = tiny_encoder(TINY_MODERNBERT, tiny_data)
    windows = encode_qa_windows(encoder.tokenizer, EXAMPLES, max_seq_length=20, doc_stride=4,
                                config=encoder.config)
    hp = Hyperparameters(mode="probe", epochs=2, lr=1e-2, batch_size=4)
    model = train_question_answering(encoder, windows, hp=hp, seed=0, runtime=CPU)
    trained = encoder_of(model, encoder.config).state_dict()
    assert all(torch.equal(trained[name], tensor) for name, tensor in encoder.state.items())
    torch.manual_seed(0)
    fresh = build_task_model(encoder.config, encoder.state, 2, tagging=False, question_answering=True)
    assert not torch.equal(model.classifier.weight, fresh.classifier.weight)
    assert not torch.equal(model.head.dense.weight, fresh.head.dense.weight)
