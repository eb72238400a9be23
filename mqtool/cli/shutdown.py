"""The process's end without the interpreter's teardown.

After the last atexit handler, CPython clears every module and frees every object it still holds
(``Py_FinalizeEx``). After a command that loaded numpy and pyarrow that is a sizeable part of a
small store's command. Nothing mqtool does needs
it: every file it writes is closed by a ``with`` (and fsynced where it matters), temporary files
are unlinked at creation or removed by atexit handlers (``weakref.finalize``, ``tempfile``).

So ``exit_process`` does what finalisation does that is seen from outside, in its order, then
ends the process with ``os._exit``: it waits for non-daemon threads (a thread pool's workers,
``private_api.exit_steps``), runs the atexit handlers and flushes stdout and stderr. A closed pipe
at that flush leaves the exit code as it is, as the CLI does for one met while printing
(``common.silence_stdout``); any other failure to flush exits 120, as CPython's own exit does
(the commands flush and report a full disk themselves: exit 3). A Ctrl-C during a step is no
traceback: the steps after it run, and a command that had succeeded exits 130 ("interrupted").
A Python without those steps exits the usual way.
"""

from __future__ import annotations

import os
import sys

from ..private_api import exit_steps


def exit_code(code: object) -> int:
    """The process exit status ``sys.exit(code)`` gives (``None`` 0, an int itself, else 1)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def exit_process(code: object) -> None:
    """End the process with ``code`` as ``sys.exit`` would, without the interpreter's teardown."""
    steps = exit_steps()
    if steps is None:
        sys.exit(code)
    status = exit_code(code)
    for step in steps:
        try:
            step()
        except KeyboardInterrupt:  # Ctrl-C while a pool's threads end or an atexit handler runs: the next step still runs
            if status == 0:
                sys.stderr.write("mqtool: error: interrupted\n")
                status = 130
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (BrokenPipeError, ValueError):  # the reader went away; a stream closed by a command
            pass
        except OSError:  # a full disk under stdout: what the interpreter's own exit says (status 120)
            status = status or 120
    os._exit(status)
