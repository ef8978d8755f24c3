"""The values a numeric setting may take (`Range`), and the bounds no real run comes near:
shared by the run config's rules (`bertpre.config.rules`) and each model family's own keys
(`FamilyConfig.ranges`), which the config asks the family table for."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Range:
    """The values one numeric key may take: `low` to `high`, an end excluded where it is open;
    `words` are the strings it also takes (`auto`)."""

    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    high_open: bool = False
    words: tuple[str, ...] = ()

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self) -> str:
        """The range in words: 'a positive integer of at most 4,096', 'in (0, 1]'."""
        if self.integer:
            if self.low == 1:
                return f"a positive integer of at most {self.high:,}"
            return f"an integer from {self.low:,} to {self.high:,}"
        if self.high == math.inf:
            return f"a finite number {'above' if self.low_open else 'of at least'} {self.low:g}"
        return (f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                f"{')' if self.high_open else ']'}")


def integers(low: int, high: int, words: tuple[str, ...] = ()) -> Range:
    return Range(low, high, integer=True, words=words)


def numbers(interval: str) -> Range:
    """A range of reals written as an interval: '[0, 1)', '(0, inf)'."""
    low, high = (float(end) for end in interval[1:-1].split(","))
    return Range(low, high, low_open=interval[0] == "(", high_open=interval[-1] == ")")


# Bounds that no real run comes near, chosen so that no arithmetic on a config can overflow
# (an ETA, an int64 tensor, a padded batch): steps, widths and lengths beyond them are typos.
MAX_STEPS = 10**12  # a million steps a second for 30 years
MAX_SIZE = 10**15  # a model dimension; whether the model fits is checked from its memory estimate
MAX_SEQ_LENGTH = 2**20  # tokens a sequence; one padded micro-batch of them is already GiBs
MAX_BATCH = 2**24  # sequences a step: 256× the largest BERT batch published (65,536)
MAX_SEED = 2**32 - 1  # what every random generator (Python, NumPy, PyTorch) accepts
MAX_WORKERS = 256  # DataLoader processes
MAX_WEIGHT = 1e15  # a mixture weight; token counts as weights fit, and their sum stays finite
