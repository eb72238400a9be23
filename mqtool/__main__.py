"""``python -m mqtool`` and the ``mqtool`` console script.

The command line is imported and run inside ``main``: a Ctrl-C while typer and the CLI load (the
first tens of milliseconds of every command) is then the one line and exit 130 of any interrupt,
not a traceback from the middle of an import. Nothing is imported here before that but ``os``.
"""

import os


def main() -> None:
    try:
        from mqtool.cli import main as cli_main

        cli_main()  # ends the process itself; an interrupt it does not catch (its first lines) ends here
    except KeyboardInterrupt:
        try:
            os.write(2, b"mqtool: error: interrupted\n")
        except OSError:  # stderr closed
            pass
        os._exit(130)


if __name__ == "__main__":
    main()
