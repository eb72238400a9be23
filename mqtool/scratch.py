"""mqtool's working files, unnamed temporary files in ``$TMPDIR`` that keep memory flat (``working_file_error``)."""

from __future__ import annotations

import errno
import os

from .errors import BadInput
from .fileops import WRITE_REFUSED

REFUSED = WRITE_REFUSED + (errno.ENOENT, errno.EACCES)  # what the machine refuses, not a bug: a write, or the directory


def scratch_file(prefix: str):
    """A new unnamed temporary file, opened for reading and writing (``OSError`` where the machine refuses it)."""
    import tempfile  # here: a command that never spills need not load it

    return tempfile.TemporaryFile(prefix=prefix)


def short_write() -> OSError:
    """What a write that wrote less than it was given means for a regular file: its file system is full."""
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def working_file_error(exc: OSError) -> Exception:
    """``exc`` from writing a working file as ``BadInput`` naming the refused directory; anything else as it is."""
    import tempfile

    return exc if exc.errno not in REFUSED else BadInput(f"cannot write mqtool's working files in {tempfile.gettempdir()} ({exc.strerror}): "
                                                         "free space there, or set TMPDIR to a directory with room")
