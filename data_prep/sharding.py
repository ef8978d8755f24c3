"""Which documents a process takes: shard membership and a vocabulary sample, both by content hash.

Every raw document (its lines as read, before cleaning) gets a 16-byte BLAKE2b digest. The
first 8 bytes pick its shard, the next 8 its sampling priority. A content hash, not a position,
so that:

- each document lands in exactly one of N shards whatever the order or spelling of the files,
  and every copy of a duplicated document lands in the same shard, whose deduplication then
  drops it as the unsharded corpus would;
- the sample is the same set of documents however the corpus is laid out.

Hashing the raw lines costs a fraction of cleaning them, so a shard process skips the cleaning
and sentence splitting of every document that is not its own.
"""

from __future__ import annotations

import hashlib
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

DIGEST_BYTES = 16


def raw_digest(lines: Sequence[str]) -> bytes:
    """The 16-byte digest of a raw document's lines."""
    text = "\n".join(lines).encode("utf-8", errors="surrogatepass")
    return hashlib.blake2b(text, digest_size=DIGEST_BYTES).digest()


def sampling_priority(digest: bytes) -> int:
    """A document's place in the sample's order (lower is taken first), from its digest."""
    return int.from_bytes(digest[8:16], "little")


@dataclass(frozen=True)
class Shard:
    """Shard `index` of `count`: the documents whose digest falls in it."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(f"shard {self.index} of {self.count} does not exist")

    def owns(self, digest: bytes) -> bool:
        return int.from_bytes(digest[:8], "little") % self.count == self.index


@dataclass(order=True)
class _Kept:
    negated_priority: int  # heapq is a min-heap: the root is the highest priority kept
    digest: bytes = field(compare=False)
    sentences: list[str] = field(compare=False)
    size: int = field(compare=False)


class ByteBudgetSample:
    """The documents of lowest priority whose UTF-8 bytes together fit a budget, kept while
    the corpus streams past.

    The result is the longest run of documents in priority order whose sizes sum to at most
    `max_bytes`: a uniform sample without replacement, a function of the set of documents
    alone. Memory holds the sample and nothing else.
    """

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 1:
            raise ValueError("the sample's budget must be at least one byte")
        self.max_bytes = max_bytes
        self.kept: list[_Kept] = []
        self.kept_digests: set[bytes] = set()
        self.total_bytes = 0
        # Every document at or above the lowest priority ever turned away is outside the run:
        # the sample only gains documents of lower priority, so that one never fits again.
        self.cutoff = 1 << 64

    def wants(self, digest: bytes) -> bool:
        """Whether a document could enter the sample (decided before cleaning it)."""
        return sampling_priority(digest) < self.cutoff and digest not in self.kept_digests

    def offer(self, digest: bytes, sentences: list[str]) -> None:
        """Consider a cleaned document; call only when `wants(digest)`."""
        priority = sampling_priority(digest)
        size = sum(len(sentence.encode("utf-8", errors="surrogatepass")) for sentence in sentences)
        heapq.heappush(self.kept, _Kept(-priority, digest, sentences, size))
        self.kept_digests.add(digest)
        self.total_bytes += size
        while self.total_bytes > self.max_bytes:
            dropped = heapq.heappop(self.kept)
            self.kept_digests.discard(dropped.digest)
            self.total_bytes -= dropped.size
            self.cutoff = min(self.cutoff, -dropped.negated_priority)

    def documents(self) -> list[list[str]]:
        """The sample in priority order (so the same however the corpus's files are ordered)."""
        return [kept.sentences for kept in sorted(self.kept, reverse=True)]
