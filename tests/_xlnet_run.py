"""A tiny XLNet RUN folder as `bertpre pretrain` writes one (`save_checkpoint` of an
`XLNetLMHeadModel`, the DATA folder's BERT-layout tokenizer copied to RUN/tokenizer), for the
export and fine-tuning tests."""
from __future__ import annotations

import shutil
from pathlib import Path

import torch

from bertpre.model import BertConfig
from bertpre.model.xlnet import XLNetLMHeadModel
from bertpre.model.xlnet_config import xlnet_config
from bertpre.tokenizer import load_tokenizer
from bertpre.train.checkpoint import MEMORY_FILE, save_checkpoint
from bertpre.train.runtime import Runtime

TINY_XLNET = dict(architecture="xlnet", hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, mem_len=8, clamp_len=-1)


def xlnet_run(folder: Path, data: Path, *, steps: tuple[int, ...] = (20,), seed: int = 0,
              memory: bool = False, **changes) -> Path:
    """RUN `folder` with one checkpoint per step (each with other random weights, every
    parameter perturbed off its init), `latest` the last; the tokenizer is DATA's. With `memory`,
    each checkpoint also holds a recurrent memory (one slot of 2 rows), as a plm run's do."""
    shutil.copytree(data / "tokenizer", folder / "tokenizer")
    vocab_size = load_tokenizer(folder / "tokenizer").get_vocab_size()
    config = BertConfig(**{**TINY_XLNET, "vocab_size": vocab_size, **changes})
    config.validate()
    torch.manual_seed(seed)
    model = XLNetLMHeadModel(xlnet_config(config))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for step in steps:
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(torch.randn_like(parameter) * 0.05)
        states = {f"slot0.layer{layer}": torch.randn(2, config.mem_len, config.hidden_size)
                  for layer in range(config.num_hidden_layers)}
        save_checkpoint(folder, step, model=model, optimizer=optimizer, scaler=None,
                        trainer_state={"epoch": 0}, runtime=Runtime(device=torch.device("cpu")),
                        keep_last=len(steps),
                        rank_tensors={MEMORY_FILE: {**states, "slot0.mask": torch.ones(2, config.mem_len,
                                                                                        dtype=torch.bool)}}
                        if memory else None)
    return folder
