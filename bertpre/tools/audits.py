"""`bertpre inspect`'s audits by the name an objective gives (`Objective.audit`): sample batches
as that objective's training would and measure them."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bertpre.config import DataConfig
from bertpre.data import DataFolder, DataMixture
from bertpre.tools.audit import format_report, inspect_data
from bertpre.tools.plm_audit import format_permutation_report, inspect_segments

# name → (measure the batches, the report as text)
AUDITS: dict[str, tuple[Callable[..., Any], Callable[[Any], str]]] = {
    "masking": (inspect_data, format_report),  # pairs, masks and their 80/10/10 split
    "segments": (inspect_segments, format_permutation_report),  # segments, spans, query slots, memory resets
}


def audit_report(audit: str, data: DataFolder | DataMixture, data_config: DataConfig, *, batches: int,
                 batch_size: int, seed: int, split: str) -> str:
    """The `audit` of `batches` sampled batches of `data` (one folder or a mixture), as text."""
    measure, describe = AUDITS[audit]
    return describe(measure(data, data_config, batches=batches, batch_size=batch_size, seed=seed, split=split))
