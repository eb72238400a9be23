"""The process's end without the interpreter's teardown (``Py_FinalizeEx`` freeing every module, a
sizeable part of a small store's command; every file mqtool writes is closed by then).

``exit_process`` does what finalisation does that is seen from outside, in its order (non-daemon
threads, atexit handlers: ``private_api.exit_steps``; flushing stdout and stderr, a failure other than
a closed pipe exiting 120 as CPython's), then ``os._exit``. A Ctrl-C during a step is no traceback.
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
