"""The masked LM's loss a chunk of rows at a time (`model.loss_chunk_rows`): the same loss sum,
hit count and gradients as the whole (rows, V) product, in fp32 and under bf16 autocast; a
training step of a tiny ModernBERT and BERT the same either way; the (rows, V) logits never
made: the step's largest tensor is a chunk's; and the forward's peak the cost model's."""
from __future__ import annotations

import pytest
import torch
from _cpu_peak import peak_of
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from bertpre.config import load_config
from bertpre.errors import UserError
from bertpre.labels import IGNORE_INDEX
from bertpre.model import BertConfig, BertForPreTraining
from bertpre.model.bert_cost import chunked_loss_memory
from bertpre.model.chunked_loss import (
    ChunkedCrossEntropy,
    VocabularyHead,
    chunk_rows,
    chunked_cross_entropy,
)
from bertpre.model.common import summed_cross_entropy
from bertpre.model.modernbert import ModernBertForMaskedLM
from bertpre.train.objectives.mlm import MaskedLMStep
from bertpre.train.run_folder import check_resume_config

ROWS, WIDTH, VOCAB = 23, 16, 97


def decoder_and_rows(seed: int = 0) -> tuple[nn.Linear, torch.Tensor, torch.Tensor]:
    """A decoder (WIDTH → VOCAB, bias drawn off zero), ROWS feature rows and their labels: every
    other one the row's argmax (a hit), every third one -100 (ragged: 23 rows in chunks of 4, 5, 7)."""
    torch.manual_seed(seed)
    decoder = nn.Linear(WIDTH, VOCAB)
    nn.init.normal_(decoder.bias)
    features = torch.randn(ROWS, WIDTH) * 2
    labels = torch.randint(0, VOCAB, (ROWS,))
    with torch.no_grad():
        labels[1::2] = decoder(features).argmax(-1)[1::2]
    labels[::3] = IGNORE_INDEX
    return decoder, features, labels


def whole(decoder: nn.Linear, features: torch.Tensor, labels: torch.Tensor, smoothing: float
          ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, ...]]:
    """The unchunked path (the Linear, then `summed_cross_entropy`, the argmax of the logits):
    loss sum, hits and the gradients of features, weight and bias, for a loss scaled by 0.37."""
    return run(lambda f: (lambda logits: (summed_cross_entropy(logits, labels, smoothing),
                                          (logits.argmax(-1) == labels).sum()))(decoder(f)), decoder, features)


def chunked(decoder: nn.Linear, features: torch.Tensor, labels: torch.Tensor, smoothing: float, rows: int):
    return run(lambda f: chunked_cross_entropy(f, decoder, labels, smoothing, rows), decoder, features)


def run(loss_of, decoder: nn.Linear, features: torch.Tensor):
    decoder.zero_grad()
    features = features.clone().requires_grad_()
    loss, correct = loss_of(features)
    (loss * 0.37).backward()  # a gradient scale other than 1 (the step's 1 / predictions)
    return loss.detach(), correct, (features.grad, decoder.weight.grad.clone(), decoder.bias.grad.clone())


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("rows", [4, 5, 7, ROWS, 64])
def test_chunks_give_the_whole_products_loss_hits_and_gradients_in_fp32(smoothing, rows):
    decoder, features, labels = decoder_and_rows()
    expected_loss, expected_correct, expected_grads = whole(decoder, features, labels, smoothing)
    loss, correct, grads = chunked(decoder, features, labels, smoothing, rows)
    assert loss.dtype == torch.float32 and correct.dtype == torch.int64
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-5)
    assert int(correct) == int(expected_correct) > 0
    for got, expected, name in zip(grads, expected_grads, ("features", "weight", "bias"), strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5, msg=name)
    assert grads[0][::3].abs().max() == 0  # a -100 row gets no gradient


def test_chunks_under_bf16_autocast_match_the_whole_product_within_bf16():
    decoder, features, labels = decoder_and_rows(seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected_loss, expected_correct, expected_grads = whole(decoder, features, labels, 0.1)
        loss, correct, grads = chunked(decoder, features, labels, 0.1, 6)
    torch.testing.assert_close(loss, expected_loss, rtol=2e-3, atol=2e-3)  # both sum fp32 log-probs of bf16 logits
    assert int(correct) == int(expected_correct)  # argmax of the same bf16 logits
    for got, expected in zip(grads, expected_grads, strict=True):
        assert got.dtype == torch.float32  # cast back to the parameters' and features' dtype
        torch.testing.assert_close(got, expected, rtol=2e-2, atol=2e-2 * expected.abs().max().item())


def test_auto_chunks_where_more_than_one_chunk_of_2_27_logits_is_needed():
    assert chunk_rows("auto", 9_920, 50_368) == 2_624  # ModernBERT-base: 2,664 rows, down to a multiple of 64
    assert chunk_rows("auto", 2_000, 250_002) == 512  # XLM-R
    assert chunk_rows("auto", 2_000, 50_368) == 0  # one chunk would hold them: the whole product
    assert chunk_rows("auto", 640, 30_522) == 0  # BERT-base's 32 x 20 slots
    assert chunk_rows(0, 4_900, 50_368) == 0
    assert chunk_rows(100, 4_900, 50_368) == 100
    assert chunk_rows(5_000, 4_900, 50_368) == 0


class LargestTensor(TorchDispatchMode):
    """The most elements of any tensor a kernel returns."""

    def __init__(self) -> None:
        super().__init__()
        self.numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(tensor, torch.Tensor):
                self.numel = max(self.numel, tensor.numel())
        return out


@pytest.mark.parametrize("rows", [0, 40])
def test_the_whole_logits_are_never_made_with_chunks(rows):
    torch.manual_seed(0)
    decoder, features = nn.Linear(WIDTH, VOCAB), torch.randn(200, WIDTH, requires_grad=True)
    labels = torch.randint(0, VOCAB, (200,))
    labels[::3] = IGNORE_INDEX
    with LargestTensor() as largest:
        if rows:
            loss, _ = chunked_cross_entropy(features, decoder, labels, 0.1, rows)
        else:
            loss = summed_cross_entropy(decoder(features), labels, 0.1)
        loss.backward()
    # without chunks the (200, V) logits and their gradient; with them a (40, V) chunk's (above (V, E) and (200, E))
    assert largest.numel == (rows * VOCAB if rows else 200 * VOCAB) > 200 * WIDTH > VOCAB * WIDTH


class Products(TorchDispatchMode):
    """The matrix products run, as (forward or backward, rows of the product's output)."""

    def __init__(self) -> None:
        super().__init__()
        self.phase, self.products = "forward", []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.addmm_):
            self.products.append(self.phase)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("rows", [0, 40])
def test_chunks_run_no_more_decoder_products_than_the_whole_loss(rows):
    """The whole loss: one product forward, two backward; chunks: each chunk's three in the
    forward (logits, then the features' and the weight's gradients) and none in the backward,
    which scales what the forward made: no second product of the logits."""
    torch.manual_seed(0)
    decoder, features = nn.Linear(WIDTH, VOCAB), torch.randn(200, WIDTH, requires_grad=True)
    labels = torch.randint(0, VOCAB, (200,))
    with Products() as products:
        if rows:
            loss, _ = chunked_cross_entropy(features, decoder, labels, 0.0, rows)
        else:
            loss = summed_cross_entropy(decoder(features), labels, 0.0)
        products.phase = "backward"
        loss.backward()
    chunks = 200 // rows if rows else 1
    expected = ["forward"] * 3 * chunks if rows else ["forward", "backward", "backward"]
    assert products.products == expected


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("rows", "width", "vocab_size", "chunk"), [(300, 32, 4000, 64), (300, 256, 4000, 64),
                                                                    (1000, 32, 3000, 128)])
def test_the_forwards_peak_is_the_cost_models_within_one_and_a_half_percent(precision, bias, rows, width,
                                                                          vocab_size, chunk):
    """The loss's forward on a CPU, inputs cast beforehand (the decoder weight's autocast copy is
    left out of the estimate, as the unchunked head's): its peak is the rows' (N, E) gradient plus
    `chunked_loss_memory`, the (V, E) and (V,) gradients kept and one chunk's tensors at their
    most; the few (N,) vectors left out. Before each chunk's tensors were freed at the end of its
    turn, the next chunk's were made beside them: 1.4 times this in fp32."""
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    torch.manual_seed(0)
    weight, features = torch.randn(vocab_size, width, dtype=dtype), torch.randn(rows, width, dtype=dtype)
    decoder_bias = torch.randn(vocab_size, dtype=dtype) if bias else None
    labels = torch.randint(0, vocab_size, (rows,))
    measured = peak_of(lambda: ChunkedCrossEntropy.apply(features, weight, decoder_bias, labels, 0.0, chunk, True))
    chunks = chunked_loss_memory(BertConfig(vocab_size=vocab_size, loss_chunk_rows=chunk), rows, width, precision,
                                 decoder_bias=bias, device_type="cpu")
    assert (chunks.rows, chunks.count) == (chunk, -(-rows // chunk))
    estimated = rows * width * features.element_size() + chunks.bytes
    assert estimated <= measured <= 1.015 * estimated, (measured, estimated)


def tiny_modernbert(loss_chunk_rows: int | str) -> ModernBertForMaskedLM:
    config = BertConfig(architecture="modernbert", vocab_size=120, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=4, intermediate_size=48, max_position_embeddings=64, local_attention=8,
                        initializer_range=0.2, loss_chunk_rows=loss_chunk_rows)
    config.validate()
    torch.manual_seed(0)
    return ModernBertForMaskedLM(config)


def slot_batch(vocab_size: int, pair: bool = False) -> dict[str, torch.Tensor]:
    """3 rows of 24 tokens, 6 prediction slots each (the collator's (B, P) layout), 4 of them unused."""
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(5, vocab_size, (3, 24), generator=generator)
    positions = torch.stack([torch.randperm(23, generator=generator)[:6] + 1 for _ in range(3)])
    ids = input_ids.gather(1, positions)
    ids[2, 3:], ids[1, 5] = IGNORE_INDEX, IGNORE_INDEX
    batch = {"input_ids": input_ids, "token_type_ids": torch.zeros_like(input_ids),
             "attention_mask": torch.ones_like(input_ids), "masked_lm_positions": positions, "masked_lm_ids": ids}
    if pair:
        batch["next_sentence_label"] = torch.tensor([0, 1, 0])
    return batch


def step_results(model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A training step's device sums (mlm loss, mlm correct, pair loss, pair correct) and each
    parameter's gradient of the summed losses; dropout drawn from one seed (the loss draws nothing)."""
    torch.manual_seed(1)
    step = MaskedLMStep(model.train(), label_smoothing=0.1)
    (mlm_loss_sum, pair_loss_sum), sums, _ = step(batch)
    (mlm_loss_sum + pair_loss_sum).backward()
    return sums, {name: parameter.grad for name, parameter in model.named_parameters() if parameter.grad is not None}


@pytest.mark.parametrize("build", ["modernbert", "bert"])
def test_a_training_step_is_the_same_with_and_without_chunks(build):
    if build == "modernbert":
        models = [tiny_modernbert(rows) for rows in (0, 4)]
        batch = slot_batch(120)
    else:
        models = []
        for rows in (0, 4):
            torch.manual_seed(0)
            models.append(BertForPreTraining(BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2,
                                                        num_attention_heads=4, intermediate_size=48,
                                                        max_position_embeddings=64, loss_chunk_rows=rows)))
        batch = slot_batch(120, pair=True)
    (sums, grads), (chunked_sums, chunked_grads) = (step_results(model, batch) for model in models)
    torch.testing.assert_close(chunked_sums, sums, rtol=1e-5, atol=1e-5)
    assert sums[0] > 0 and sums[1] >= 0
    assert chunked_grads.keys() == grads.keys()
    for name, gradient in grads.items():
        torch.testing.assert_close(chunked_grads[name], gradient, rtol=1e-5, atol=1e-5, msg=name)


def test_a_chunked_training_forward_keeps_no_logits_and_evaluation_keeps_them():
    model = tiny_modernbert(4)
    batch = slot_batch(120)
    inputs = {name: batch[name] for name in ("input_ids", "attention_mask", "masked_lm_positions", "masked_lm_ids")}
    trained = model.train()(**inputs)
    assert trained.prediction_logits is None and trained.mlm_correct is not None
    evaluated = model.eval()(**inputs)
    assert evaluated.prediction_logits.shape == (3, 6, 120) and evaluated.mlm_correct is None
    torch.testing.assert_close(trained.mlm_loss_sum, evaluated.mlm_loss_sum)  # no dropout in ModernBERT's default


def test_a_chunked_step_compiles_as_one_graph_with_the_eager_steps_results():
    eager_sums, eager_grads = step_results(tiny_modernbert(4), slot_batch(120))
    model = tiny_modernbert(4)
    torch._dynamo.reset()
    compiled = torch.compile(MaskedLMStep(model.train(), label_smoothing=0.1), backend="aot_eager", fullgraph=True)
    (mlm_loss_sum, _), sums, _ = compiled(slot_batch(120))  # a graph break raises
    mlm_loss_sum.backward()
    torch._dynamo.reset()
    torch.testing.assert_close(sums, eager_sums, rtol=1e-5, atol=1e-5)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter.grad, eager_grads[name], rtol=1e-5, atol=1e-5, msg=name)


def test_the_head_is_one_head_either_way():
    model = tiny_modernbert("auto")
    head = model.vocabulary_head()
    assert isinstance(head, VocabularyHead) and head.decoder.weight is model.model.embeddings.tok_embeddings.weight
    states = torch.randn(2, 32)
    torch.testing.assert_close(model.predict(states), model.decoder(model.head(states)))


@pytest.mark.parametrize("value", [-1, 1.5, "some", True])
def test_a_bad_loss_chunk_rows_is_refused_naming_the_key(value):
    with pytest.raises(UserError, match="model.loss_chunk_rows"):
        BertConfig(vocab_size=120, loss_chunk_rows=value).validate()


def test_a_resumed_run_may_change_its_chunks_and_not_its_math(tmp_path):
    saved = load_config("tiny-modernbert")
    assert check_resume_config(saved, load_config("tiny-modernbert", ["model.loss_chunk_rows=256"]), 10, tmp_path) \
        == ["model.loss_chunk_rows 'auto' → 256"]
    with pytest.raises(UserError, match="was started with model.low_precision_rotary='auto'"):
        check_resume_config(saved, load_config("tiny-modernbert", ["model.low_precision_rotary=false"]), 10, tmp_path)
