"""DATA → masked pretraining batches, fresh each epoch: keyed randomness, pairs, mixtures, collator, stream."""
from bertpre.batches.collator import MaskingCollator
from bertpre.batches.mixture import MixedInstances, build_instances, source_seed
from bertpre.batches.pairs import PretrainingInstances
from bertpre.batches.stream import BatchStream

__all__ = ["BatchStream", "MaskingCollator", "MixedInstances", "PretrainingInstances",
           "build_instances", "source_seed"]
