"""Errors raised by the decoders. Each carries the byte position it concerns."""

from __future__ import annotations


class FormatError(Exception):
    """Bytes that do not decode as the expected on-disk structure."""

    def __init__(self, position: int, reason: str):
        super().__init__(f"{reason} at position {position}")
        self.position = position
        self.reason = reason


class TruncatedRecord(FormatError):
    """The record runs past the end of the available bytes."""

    def __init__(self, position: int, needed: int, available: int):
        super().__init__(position, f"record needs {needed} bytes, only {available} available")
        self.needed = needed
        self.available = available


class CorruptRecord(FormatError):
    """Impossible fields (bad magic code, negative length...): ``checkMessageAndReturnSize``'s ``(-1, false)``."""


class LengthMismatch(CorruptRecord):
    """TOTALSIZE is not its fields' sum ("[BUG]read total count not equals msg total size", the broker's half message)."""

    def __init__(self, position: int, total_size: int, computed: int):
        super().__init__(position, f"total size {total_size} != {computed} from the record's fields")
        self.total_size = total_size
        self.computed = computed
