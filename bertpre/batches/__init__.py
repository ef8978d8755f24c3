"""DATA → masked pretraining batches, fresh each epoch: keyed randomness, pairs, collator, stream."""
from bertpre.batches.collator import MaskingCollator
from bertpre.batches.pairs import PretrainingInstances
from bertpre.batches.stream import BatchStream

__all__ = ["BatchStream", "MaskingCollator", "PretrainingInstances"]
