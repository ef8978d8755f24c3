"""The peak of the CPU tensors a piece of work allocates, from the profiler's allocation events:
what the memory estimates are checked against."""
from __future__ import annotations

from collections.abc import Callable

import pytest
from torch.profiler import ProfilerActivity, profile


def peak_of(work: Callable[[], object]) -> int:
    """The most bytes of CPU tensors alive at once while `work` runs (the profiler's allocation
    events), counted from what was alive when it started."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        work()
    results = getattr(profiler.profiler, "kineto_results", None)
    if results is None:
        pytest.skip("this torch's profiler does not expose its allocation events")
    live = peak = 0
    for event in sorted((e for e in results.events() if e.name() == "[memory]"), key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return peak
