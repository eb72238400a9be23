"""The global options of a run (``--debug``, ``--quiet``), set by the top-level callback before any
command module is imported."""


class State:
    debug = False
    quiet = False
