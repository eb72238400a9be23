"""``python -m mqtool``: the CLI imported inside ``main``, so a Ctrl-C while it loads exits 130 in one line."""

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
    """The process again in UTF-8 mode under a non-UTF-8 locale (the broker's names are UTF-8); arguments keep their bytes."""
    options = sys.orig_argv[1:len(sys.orig_argv) - len(sys.argv)]  # the interpreter's own, before ``-m`` or the script
    chosen = any(o.startswith(("utf8", "-Xutf8")) for o in options)  # ``-X utf8=0`` given: kept (and no second run)
    if not sys.flags.utf8_mode and sys.getfilesystemencoding() != "utf-8" and sys.executable and not chosen:
        os.execv(sys.executable, [sys.executable, "-X", "utf8", *sys.orig_argv[1:]])


if __name__ == "__main__":
    main()
