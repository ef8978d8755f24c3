"""Exact-duplicate document detection with 16-byte hashes, so memory grows with documents, not text."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence


class DuplicateFilter:
    """Remembers a 16-byte BLAKE2b digest of each document it has seen."""

    def __init__(self) -> None:
        self.seen: set[bytes] = set()

    def is_duplicate(self, lines: Sequence[str]) -> bool:
        """True when the same lines came before; otherwise remember them and return False."""
        text = "\n".join(lines).encode("utf-8", errors="surrogatepass")
        key = hashlib.blake2b(text, digest_size=16).digest()
        if key in self.seen:
            return True
        self.seen.add(key)
        return False
