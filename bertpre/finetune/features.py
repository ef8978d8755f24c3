"""Frozen features kept on disk: a probe computes a checkpoint's features once, and every later
probe of the same checkpoint and inputs (other seeds, another lr, a rerun, the next task file
that encodes the same way) reads them back instead of running the encoder again.

A cache file is named by what makes the features what they are: the weights' sha256, the token
ids and types, what is pooled, and the precision they were computed in. A file that is damaged or
does not fit (count, width, a non-finite value) is computed again, with a note."""
from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bertpre.finetune.encoding import Encoded
from bertpre.finetune.kinds import task_kind
from bertpre.finetune.loop import encoder_features
from bertpre.finetune.source import Encoder
from bertpre.labels import IGNORE_INDEX
from bertpre.train.runtime import Runtime

FEATURES_FOLDER = "features"


def features_key(encoder: Encoder, encoded: Encoded, *, task: str, pooling: str, precision: str) -> str:
    """The sha256 naming these features: weights, inputs, pooling and precision."""
    digest = hashlib.sha256()
    digest.update(f"{encoder.weights_sha256}|{task_kind(task).per_token}|{pooling}|{precision}|".encode())
    for rows in (encoded.input_ids, encoded.token_type_ids):
        digest.update(np.asarray([len(row) for row in rows], dtype=np.int64).tobytes())
        digest.update(np.asarray([value for row in rows for value in row], dtype=np.int64).tobytes())
    if pooling == "first-piece":  # which pieces are a word's first: the positions features are taken at
        digest.update(np.asarray([label != IGNORE_INDEX for row in encoded.labels for label in row]).tobytes())
    return digest.hexdigest()


def cached_features(encoder: Encoder, encoded: Encoded, *, task: str, pooling: str, batch_size: int,
                    runtime: Runtime, folder: Path | None, say: Callable[[str], None] = print) -> torch.Tensor:
    """`encoder_features` for these inputs, read from `folder` when an earlier command kept them
    there, else computed and kept (nothing is kept when `folder` is None)."""
    pooling = task_kind(task).pooling or pooling
    if folder is None:
        return encoder_features(encoder, encoded, task=task, pooling=pooling, batch_size=batch_size, runtime=runtime)
    key = features_key(encoder, encoded, task=task, pooling=pooling, precision=runtime.precision)
    path = Path(folder) / f"{key}.safetensors"
    expected = (task_kind(task).output_rows(encoded), int(encoder.config.hidden_size))
    if path.is_file():
        features = read_features(path, expected)
        if features is not None:
            return features
        say(f"note: {path} is damaged or does not fit these inputs; computing the features again")
    features = encoder_features(encoder, encoded, task=task, pooling=pooling, batch_size=batch_size, runtime=runtime)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        save_file({"features": features.contiguous()}, str(staging))
        staging.replace(path)  # a reader sees the whole file or none
    finally:
        staging.unlink(missing_ok=True)
    return features


def read_features(path: Path, shape: tuple[int, int]) -> torch.Tensor | None:
    """The features in `path` if they are whole, of `shape`, fp32 and finite; else None."""
    try:
        features = load_file(str(path)).get("features")
    except (SafetensorError, OSError, ValueError, RuntimeError):
        return None
    if (features is None or tuple(features.shape) != shape or features.dtype != torch.float32
            or not bool(torch.isfinite(features).all())):
        return None
    return features
