"""The process's end without the interpreter's teardown: ``exit_process`` does what finalisation does that is seen from outside
(threads, atexit: ``private_api.exit_steps``; flushing, 120 on failure as CPython), then ``os._exit``."""

from __future__ import annotations

import os
import sys

from ..private_api import exit_steps


def exit_process(code: object) -> None:
    """End the process with ``code`` as ``sys.exit`` would, without the interpreter's teardown."""
    steps = exit_steps()
    if steps is None:
        sys.exit(code)
    if code is None or isinstance(code, int):  # the status sys.exit gives: None 0, an int itself
        status = (code or 0) & 0xFF
    else:  # else the message on stderr, status 1
        print(code, file=sys.stderr)
        status = 1
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
