"""The global options of a run (``--debug``, ``-q/--quiet``), given before or after the command
name and set before any command module is imported. Imports nothing (``mqtool --help`` loads
only this module of the CLI)."""


class State:
    debug = False
    quiet = False
