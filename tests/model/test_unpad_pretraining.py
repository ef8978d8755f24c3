"""`model.unpad`: a pretraining step on the real tokens alone (issue 49, item 4; ModernBERT's
local layers and document masks, the GPU step round 2)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import bertpre.model.modernbert as modernbert
import bertpre.model.unpad as unpad
from bertpre.batches.padding import unpadded_layout
from bertpre.errors import UserError
from bertpre.model import BertConfig, BertForPreTraining
from bertpre.model.modernbert import ModernBertForMaskedLM
from bertpre.model.roberta import RobertaForMaskedLM
from bertpre.model.unpad import Unpadded, varlen_usable
from bertpre.train.objectives.mlm import MaskedLMStep

B, T, P = 4, 16, 4
LENGTHS = np.array([16, 9, 12, 5])  # ragged: 42 real tokens of 64


def tiny_config(architecture: str = "bert", **changes) -> BertConfig:
    if architecture == "modernbert":  # layer 0 global, 1 and 2 (the last) local: keys within 3 each way
        own = {"local_attention": 6, "global_attn_every_n_layers": 3, "pad_token_id": 0}
    else:
        own = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
               **({"pad_token_id": 1} if architecture == "roberta" else {})}
    return BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=4,
                      intermediate_size=64, max_position_embeddings=64, architecture=architecture,
                      **own, **changes)


def ragged_batch(pad_token_id: int = 0, pair: bool = True) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    mask = np.arange(T)[None] < LENGTHS[:, None]  # (B, T)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 100, (B, T), generator=generator)
    ids[~torch.from_numpy(mask)] = pad_token_id
    positions, labels = np.zeros((B, P), np.int64), np.full((B, P), -100)
    for row, length in enumerate(LENGTHS):
        chosen = np.sort(np.random.default_rng(row).choice(np.arange(1, length), 3, replace=False))
        positions[row, :3], labels[row, :3] = chosen, ids[row, chosen].numpy()
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
             "attention_mask": torch.from_numpy(mask).long(),
             "masked_lm_positions": torch.from_numpy(positions), "masked_lm_ids": torch.from_numpy(labels)}
    if pair:
        batch["next_sentence_label"] = torch.tensor([0, 1, 0, 1])
    return batch, mask


def with_layout(batch: dict[str, torch.Tensor], mask: np.ndarray, **options) -> dict[str, torch.Tensor]:
    layout = unpadded_layout(mask, batch["masked_lm_positions"].numpy(), **options)
    return {**batch, **{name: torch.from_numpy(array) for name, array in layout.items()}}


def build(architecture: str, **changes) -> torch.nn.Module:
    torch.manual_seed(0)
    model_class = {"roberta": RobertaForMaskedLM, "modernbert": ModernBertForMaskedLM}.get(architecture,
                                                                                           BertForPreTraining)
    return model_class(tiny_config(architecture, **changes)).train()


def loss_and_grads(step: MaskedLMStep, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    step.model.zero_grad()
    (mlm, pair), _, _ = step(batch)
    (mlm + pair).backward()
    return (mlm + pair).detach(), [p.grad.clone() for p in step.model.parameters() if p.grad is not None]


def test_the_layout_is_built_on_the_host_exactly():
    mask = np.arange(4)[None] < np.array([4, 2, 3])[:, None]  # (3, 4), 9 real tokens
    positions = np.array([[1, 2], [1, 0], [2, 0]])
    layout = unpadded_layout(mask, positions, bucket=4)  # 9 -> 12: three padding positions
    assert layout["token_index"].tolist() == [0, 1, 2, 3, 4, 5, 8, 9, 10, 6, 7, 11]
    assert layout["cu_seqlens"].tolist() == [0, 4, 6, 9, 12]
    assert layout["cls_token_index"].tolist() == [0, 4, 6]
    assert layout["masked_lm_token_index"].tolist() == [[1, 2], [5, 4], [8, 6]]
    packed = unpadded_layout(mask, positions, document_starts=np.array([2, 2, 3]))
    assert packed["cu_seqlens"].tolist() == [0, 2, 4, 6, 6, 9, 9, 9]
    assert packed["document_ids"].tolist() == [[1, 1, 2, 2], [1, 1, 0, 0], [1, 1, 1, 0]]


@pytest.mark.parametrize("architecture,changes", [
    ("bert", {}), ("bert", {"last_layer_rows": False}), ("bert", {"embedding_size": 16, "share_layers": True}),
    ("roberta", {}), ("roberta", {"last_layer_rows": False}),
    ("modernbert", {}), ("modernbert", {"last_layer_rows": False}),
])
@pytest.mark.parametrize("bucket", [1, 16])
def test_losses_and_gradients_equal_the_padded_paths(architecture, changes, bucket):
    model = build(architecture, **changes)
    step = MaskedLMStep(model)
    batch, mask = ragged_batch(pad_token_id=model.config.pad_token_id, pair=architecture == "bert")
    padded_loss, padded_grads = loss_and_grads(step, batch)
    loss, grads = loss_and_grads(step, with_layout(batch, mask, bucket=bucket))
    torch.testing.assert_close(loss, padded_loss, rtol=0, atol=1e-5)
    assert len(grads) == len(padded_grads)
    for grad, padded_grad in zip(grads, padded_grads, strict=True):
        torch.testing.assert_close(grad, padded_grad, rtol=0, atol=1e-5)


class MatmulRows(TorchDispatchMode):
    """The rows of every matrix product's input."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten.addmm.default, torch.ops.aten.mm.default):
            self.rows.append((args[1] if func is torch.ops.aten.addmm.default else args[0]).shape[0])
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("last_layer_rows", [True, False])
def test_matrix_products_compute_the_real_tokens_alone(last_layer_rows):
    model = build("bert", last_layer_rows=last_layer_rows)
    batch, mask = ragged_batch()
    real = int(LENGTHS.sum())  # 42
    with torch.no_grad(), MatmulRows() as padded:
        MaskedLMStep(model)(batch)
    with torch.no_grad(), MatmulRows() as unpadded:
        MaskedLMStep(model)(with_layout(batch, mask))
    assert B * T in padded.rows  # today's path: the padding's rows too
    # Every layer's projections and feed-forward on the 42 real tokens; the heads on [CLS] and the
    # slots (B·(1 + P) in the last layer's rows, B·P in the MLM head, B in the pooler).
    layer_products = 4 * 2 if model.config.fused_qkv is True else 6
    heads = {B * (1 + P), B * P, B}
    assert set(unpadded.rows) <= {real} | heads
    computed_layers = model.config.num_hidden_layers - (1 if last_layer_rows else 0)
    assert unpadded.rows.count(real) == computed_layers * layer_products + (2 if last_layer_rows else 0)


def test_packed_documents_do_not_attend_across():
    model = build("roberta").eval()
    batch, mask = ragged_batch(pad_token_id=1, pair=False)
    starts = np.array([10, 9, 6, 5])  # rows 0 and 2 hold a second document from 10 and 6 on
    changed = batch["input_ids"].clone()
    changed[0, 10:16] = 7  # the second documents' tokens, and nothing else
    changed[2, 6:12] = 7

    def logits(input_ids: torch.Tensor, **options) -> torch.Tensor:
        laid_out = with_layout({**batch, "input_ids": input_ids}, mask, **options)
        with torch.no_grad():
            out = model(input_ids, masked_lm_positions=laid_out["masked_lm_positions"],
                        unpadded=Unpadded.from_batch(laid_out))
        return out.prediction_logits  # (B, P, V)

    first_document = torch.from_numpy(batch["masked_lm_positions"].numpy() < starts[:, None])  # (B, P) slots
    separate, separate_changed = logits(batch["input_ids"], document_starts=starts), logits(changed, document_starts=starts)
    torch.testing.assert_close(separate[first_document], separate_changed[first_document], rtol=0, atol=0)
    joined, joined_changed = logits(batch["input_ids"]), logits(changed)  # one document a row: they do read it
    assert not torch.allclose(joined[first_document], joined_changed[first_document])


def test_the_varlen_kernel_is_cuda_only_and_its_inputs_are_the_layouts():
    batch, mask = ragged_batch()
    unpadded = Unpadded.from_batch(with_layout(batch, mask, bucket=16))
    assert unpadded.cu_seqlens.dtype == torch.int32 and unpadded.cu_seqlens.tolist() == [0, 16, 25, 37, 42, 48]
    assert not varlen_usable(torch.zeros(48, 32, dtype=torch.bfloat16), unpadded, 0.0)  # a CPU tensor


@pytest.mark.parametrize("architecture,changes", [("xlnet", {}), ("bert", {"position_embedding_type": "rope"})])
def test_families_whose_positions_enter_attention_refuse_it(architecture, changes):
    config = BertConfig(vocab_size=100, architecture=architecture, unpad=True, **changes)
    with pytest.raises(UserError, match="model.unpad"):
        config.validate()
    BertConfig(vocab_size=100, architecture="modernbert", unpad=True).validate()  # rotary, and built


@pytest.mark.parametrize("architecture", ["bert", "modernbert"])
def test_a_compiled_step_compiles_at_most_a_graph_a_bucket_and_breaks_none(architecture):
    model = build(architecture)
    graphs = []

    def count_graphs(graph_module, example_inputs):
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    step = torch.compile(MaskedLMStep(model), backend=count_graphs, fullgraph=True)  # a break raises
    batch, mask = ragged_batch(pair=architecture == "bert")
    buckets = set()
    for cut in range(6):  # 42, 40, ... 32 real tokens: buckets of 16 give 48 and 32
        trimmed = mask.copy()
        trimmed[0, T - 2 * cut:] = False
        trimmed_batch = {**batch, "attention_mask": torch.from_numpy(trimmed).long()}
        layout = with_layout(trimmed_batch, trimmed, bucket=16)
        buckets.add(layout["token_index"].shape[0])
        step(layout)
    torch._dynamo.reset()
    assert buckets == {48, 32}
    assert 1 <= len(graphs) <= len(buckets)


@pytest.mark.parametrize("last_layer_rows", [True, False])
def test_modernbert_s_projections_read_the_real_tokens_alone(last_layer_rows):
    model = build("modernbert", last_layer_rows=last_layer_rows)
    batch, mask = ragged_batch(pair=False)
    real = int(LENGTHS.sum())  # 42
    entering_wqkv = []
    hooks = [layer.attn.Wqkv.register_forward_pre_hook(lambda module, args: entering_wqkv.append(args[0].shape))
             for layer in model.model.layers]
    with torch.no_grad(), MatmulRows() as unpadded:
        MaskedLMStep(model)(with_layout(batch, mask))
    for hook in hooks:
        hook.remove()
    # Wqkv as a module on the 42 real tokens in every layer; the last layer's rows read its
    # weight directly (the slots' queries, every token's keys and values)
    computed_layers = model.config.num_hidden_layers - (1 if last_layer_rows else 0)
    assert entering_wqkv == [torch.Size([real, 32])] * computed_layers
    # Wqkv, Wo, Wi, Wo a layer on the real tokens; the last layer's keys and values too where it
    # computes the slots alone, whose other products, and the head's, take B·P rows
    assert set(unpadded.rows) <= {real, B * P}
    assert unpadded.rows.count(real) == 4 * computed_layers + (1 if last_layer_rows else 0)


def separate_documents(batch: dict[str, torch.Tensor], lengths: np.ndarray, starts: np.ndarray
                       ) -> tuple[dict[str, torch.Tensor], np.ndarray]:
    """Each document of packed rows as a padded row of its own, its predicted slots moved with it."""
    pieces = [(row, begin, end) for row, (start, length) in enumerate(zip(starts, lengths, strict=True))
              for begin, end in ((0, min(start, length)), (start, length)) if end > begin]
    ids = torch.zeros(len(pieces), T, dtype=torch.long)
    positions, labels = np.zeros((len(pieces), P), np.int64), np.full((len(pieces), P), -100)
    for index, (row, begin, end) in enumerate(pieces):
        ids[index, :end - begin] = batch["input_ids"][row, begin:end]
        slots = [(int(position), int(label)) for position, label in zip(
            batch["masked_lm_positions"][row], batch["masked_lm_ids"][row], strict=True)
            if label != -100 and begin <= position < end]
        for slot, (position, label) in enumerate(slots):
            positions[index, slot], labels[index, slot] = position - begin, label
    mask = np.arange(T)[None] < np.array([end - begin for _, begin, end in pieces])[:, None]
    return ({"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.from_numpy(mask).long(),
             "masked_lm_positions": torch.from_numpy(positions), "masked_lm_ids": torch.from_numpy(labels)}, mask)


@pytest.mark.parametrize("bucket", [1, 16])
@pytest.mark.parametrize("last_layer_rows", [True, False])
def test_modernbert_s_packed_documents_train_as_each_document_alone(bucket, last_layer_rows):
    """Rows 0 and 2 hold a second document from 10 and 6 on: the unpadded step on the packed rows
    (a document mask, local layers' windows within it) gives the losses and gradients of each
    document as a padded row of its own."""
    model = build("modernbert", last_layer_rows=last_layer_rows)
    step = MaskedLMStep(model)
    batch, mask = ragged_batch(pair=False)
    starts = np.array([10, 9, 6, 5])
    alone, alone_mask = separate_documents(batch, LENGTHS, starts)
    assert len(alone_mask) == 6 and int(alone["masked_lm_ids"].ne(-100).sum()) == 12
    alone_loss, alone_grads = loss_and_grads(step, alone)
    loss, grads = loss_and_grads(step, with_layout(batch, mask, document_starts=starts, bucket=bucket))
    torch.testing.assert_close(loss, alone_loss, rtol=0, atol=1e-5)
    for grad, alone_grad in zip(grads, alone_grads, strict=True):
        torch.testing.assert_close(grad, alone_grad, rtol=0, atol=1e-5)


def varlen_on_the_cpu(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, window_size=(-1, -1)):
    """`varlen_attn`'s contract on the CPU, sequence by sequence: each of `cu_seq_q`'s sequences
    attends to itself alone, within `window_size` (left, right) where not (-1, -1)."""
    assert cu_seq_q is cu_seq_k and cu_seq_q.dtype == torch.int32 and max_q == max_k == T
    outputs = []
    for begin, end in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist(), strict=True):
        if end == begin:
            continue
        place = torch.arange(end - begin)
        offset = place[:, None] - place[None, :]  # query - key
        left, right = window_size
        allowed = ((offset <= left) | (left < 0)) & ((-offset <= right) | (right < 0))
        parts = [part[begin:end].transpose(0, 1) for part in (query, key, value)]  # (nh, L, hs)
        outputs.append(F.scaled_dot_product_attention(*parts, attn_mask=allowed).transpose(0, 1))
    return torch.cat(outputs)  # (N, nh, hs)


@pytest.mark.parametrize("packed", [False, True])
def test_modernbert_on_varlen_attention_gives_the_padded_views_step(packed, monkeypatch):
    """The CUDA path's inputs (cu_seqlens, a local layer's window (3, 3)) through `varlen_attn`'s
    contract, computed on the CPU: the step of the padded view's document and window masks."""
    model = build("modernbert", last_layer_rows=False)
    step = MaskedLMStep(model)
    batch, mask = ragged_batch(pair=False)
    laid_out = with_layout(batch, mask, bucket=16, **({"document_starts": np.array([10, 9, 6, 5])} if packed else {}))
    padded_view_loss, padded_view_grads = loss_and_grads(step, laid_out)
    windows = []
    monkeypatch.setattr(modernbert, "varlen_usable", lambda states, unpadded, dropout_p: dropout_p == 0.0)
    monkeypatch.setattr(unpad, "varlen_attn", lambda *args, window_size, **options: windows.append(window_size)
                        or varlen_on_the_cpu(*args, window_size=window_size))
    loss, grads = loss_and_grads(step, laid_out)
    assert windows == [(-1, -1), (3, 3), (3, 3)]  # layer 0 global, 1 and 2 local
    torch.testing.assert_close(loss, padded_view_loss, rtol=0, atol=1e-5)
    for grad, padded_view_grad in zip(grads, padded_view_grads, strict=True):
        torch.testing.assert_close(grad, padded_view_grad, rtol=0, atol=1e-5)


@pytest.mark.gpu
def test_modernbert_s_varlen_step_on_cuda_equals_the_padded_views(monkeypatch):
    """On a GPU under bf16 autocast the unpadded step takes `varlen_attn` (layer 0 global, layer 1
    local with the window (64, 64); the last layer's slots read the padded view) and gives the
    padded view's loss and gradients to bf16's precision, packed documents included."""
    torch.manual_seed(8)
    config = BertConfig(vocab_size=1000, architecture="modernbert", hidden_size=256, num_hidden_layers=3,
                        num_attention_heads=4, intermediate_size=384, local_attention=128,
                        max_position_embeddings=1024, pad_token_id=0)
    model = ModernBertForMaskedLM(config).cuda().train()
    lengths, length = np.array([512, 300, 450, 77]), 512
    mask = np.arange(length)[None] < lengths[:, None]
    ids = torch.randint(5, 1000, (4, length), generator=torch.Generator().manual_seed(0))
    ids[~torch.from_numpy(mask)] = 0
    positions = np.stack([np.sort(np.random.default_rng(row).choice(np.arange(1, size), 20, replace=False))
                          for row, size in enumerate(lengths)])
    batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.from_numpy(mask).long(),
             "masked_lm_positions": torch.from_numpy(positions),
             "masked_lm_ids": ids.gather(1, torch.from_numpy(positions))}
    laid_out = {name: tensor.cuda() for name, tensor in with_layout(
        batch, mask, document_starts=np.array([200, 300, 100, 77]), bucket=256).items()}
    step, windows, kernel = MaskedLMStep(model), [], unpad.varlen_attn
    monkeypatch.setattr(unpad, "varlen_attn", lambda *args, **options: windows.append(options["window_size"])
                        or kernel(*args, **options))

    def loss_and_grad() -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            (mlm, _), _, _ = step(laid_out)
        mlm.backward()
        return mlm.detach().float(), model.model.layers[1].attn.Wqkv.weight.grad.clone()

    varlen = loss_and_grad()
    assert windows == [(-1, -1), (64, 64)]
    monkeypatch.setattr(modernbert, "varlen_usable", lambda *args: False)
    padded_view = loss_and_grad()
    torch.testing.assert_close(varlen[0], padded_view[0], rtol=1e-2, atol=0)
    torch.testing.assert_close(varlen[1], padded_view[1], rtol=5e-2, atol=1e-3)
