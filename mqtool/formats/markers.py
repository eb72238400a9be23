"""The ``abort`` and ``lock`` marker files (reference §1.5, §8.1, §14)."""

from __future__ import annotations

from typing import Any, NamedTuple

from ._layout import declared_on_use

ABORT_FILE = "abort"
ABORT_BACKUP_FILE = "abort.bak"
LOCK_FILE = "lock"
LOCK_CONTENT = b"lock"


def _declare() -> dict[str, Any]:
    from construct import Const, GreedyBytes, Struct

    return {"LockFileStruct": Struct("content" / Const(LOCK_CONTENT)), "AbortFileStruct": Struct("content" / GreedyBytes)}


__getattr__ = declared_on_use(__name__, _declare, ("LockFileStruct", "AbortFileStruct"))


class AbortMarker(NamedTuple):
    """The abort file's content (4.x empty, 5.x a PID); ``directory``, ``special``: no file (rules 6.3)."""

    content: bytes
    directory: bool = False
    special: bool = False
    device: bool = False  # a device node: never read, so its content (b"") marks no release

    @property
    def unusable(self) -> str | None:
        """What the ``abort`` is when no regular file (the broker's recovery is still the abnormal one), or None."""
        return "a directory" if self.directory else "a FIFO, socket or device node" if self.special else None

    @property
    def pid(self) -> int | None:
        text = self.content.strip()
        return int(text) if text.isdigit() else None


def decode_abort(raw: bytes) -> AbortMarker:
    """The whole file is the content (``AbortFileStruct``'s ``GreedyBytes``; tests/test_format_codecs.py)."""
    return AbortMarker(bytes(raw))
