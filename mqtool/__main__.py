"""``python -m mqtool`` and the ``mqtool`` console script.

The command line is imported and run inside ``main``: a Ctrl-C while typer and the CLI load (the
first tens of milliseconds of every command) is then the one line and exit 130 of any interrupt,
not a traceback from the middle of an import. Nothing is imported here before that but ``os`` and ``sys``.
"""

import os
import sys


def main() -> None:
    in_utf8_mode()
    try:
        from mqtool.cli import main as cli_main

        cli_main()  # ends the process itself; an interrupt it does not catch (its first lines) ends here
    except KeyboardInterrupt:
        try:
            os.write(2, b"mqtool: error: interrupted\n")
        except OSError:  # stderr closed
            pass
        os._exit(130)


def in_utf8_mode() -> None:
    """The process again in Python's UTF-8 mode (``-X utf8``) under a locale that is not UTF-8 (Latin-1, EUC-JP,
    C with PYTHONUTF8=0): the broker names a topic's consumequeue/ folder and writes the records' strings in UTF-8,
    which such a locale decoded wrongly (``TÃ³pico``) and could not encode on stdout: "internal error", exit 5,
    nothing written. The arguments keep their bytes (a topic typed in UTF-8 is then read as one)."""
    options = sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv)]  # the interpreter's own, before ``-m`` or the script
    chosen = any(o.startswith(("utf8", "-Xutf8")) for o in options)  # ``-X utf8=0`` given: kept (and no second run)
    if not sys.flags.utf8_mode and sys.getfilesystemencoding() != "utf-8" and sys.executable and not chosen:
        os.execv(sys.executable, [sys.executable, "-X", "utf8", *sys.orig_argv[1:]])


if __name__ == "__main__":
    main()
