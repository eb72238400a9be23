"""mqtool's working files: unnamed temporary files in ``tempfile``'s directory (``$TMPDIR``, else
``/tmp``), gone when the process ends, that keep memory flat: the dispatch a plan spills
(``dispatch/scanner.py``: it goes on without its file), the queue units a recovery plan places
(``recovery/queues.py``) and the findings verify holds back (``verify/sharedwalk.py``). Where
those two cannot go on, a full or missing directory is said as what it is, with what to do, not
as a write that failed somewhere (``working_file_error``)."""

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
    """``exc``, raised writing a working file, as ``BadInput`` naming the directory where the machine
    refused it (no room, no such directory, no permission); anything else as it is."""
    import tempfile

    return exc if exc.errno not in REFUSED else BadInput(f"cannot write mqtool's working files in {tempfile.gettempdir()} ({exc.strerror}): "
                                                         "free space there, or set TMPDIR to a directory with room")
