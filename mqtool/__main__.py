"""``python -m mqtool`` and the ``mqtool`` console script.

The command line is imported inside ``main``: a Ctrl-C while typer and the CLI load (the first
tens of milliseconds of every command) is then the one line and exit 130 of any interrupt, not
a traceback from the middle of an import. Nothing is imported here before that but ``os``.
"""

import os


def main() -> None:
    try:
        from mqtool.cli import main as cli_main
    except KeyboardInterrupt:
        os.write(2, b"mqtool: error: interrupted\n")
        os._exit(130)
    cli_main()


if __name__ == "__main__":
    main()
