"""How far a resynchronisation searches in pure Python.

Where ``--from-offset`` inside a record, or ``--keep-going`` past damage, reads from (the next
position whose magic, size chain and self-describing PHYSICALOFFSET agree): the pure-Python
search (``mqtool.store.resync``, ``mmap.find`` of the magic codes) settles the usual case, the
next record a few KiB on; it hands over to the compiled one (``fastscan.scan_start``) past
``resync.WINDOW`` bytes.
"""

from __future__ import annotations


def resync_window() -> int:
    """How many bytes a resynchronisation searches in pure Python (``mqtool.store.resync``) before
    the compiled search takes over."""
    from ..store.resync import WINDOW

    return WINDOW
