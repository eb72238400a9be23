"""Java ``String.hashCode`` of text fields, composable (reference §3.4), equal to ``java_string_hash``."""

from __future__ import annotations

import numpy as np

from ._textscan import java_hash_states, java_hash_utf8  # noqa: F401  (for Python callers)


def pow31_table(n: int = 1 << 15) -> np.ndarray:
    """``31**i mod 2**32`` for ``i < n`` (a properties value has at most 32767 UTF-16 units)."""
    powers = np.ones(n, dtype=np.uint64)
    np.cumprod(np.full(n - 1, 31, dtype=np.uint64), out=powers[1:])  # wraps mod 2**64, a multiple of 2**32
    return (powers & np.uint64(0xFFFFFFFF)).astype(np.int64)


POW31 = pow31_table()


def utf16_units_of(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The UTF-16 code units of ``texts`` end to end (a Java ``String``'s), and where each text's units start and end."""
    encoded = [t.encode("utf-16-be", "surrogatepass") for t in texts]
    lengths = np.fromiter((len(e) >> 1 for e in encoded), dtype=np.int64, count=len(encoded))
    ends = np.cumsum(lengths)
    return np.frombuffer(b"".join(encoded), dtype=">u2").astype(np.int64), ends - lengths, ends


def index_key_hashes(states: np.ndarray) -> np.ndarray:
    """``IndexFile.indexKeyHashMethod`` of unsigned hash states: abs of the int32, MIN_VALUE -> 0 (reference §6.4)."""
    h = np.where(states >= 1 << 31, (1 << 32) - states, states)
    return np.where(h > 0x7FFFFFFF, 0, h)
