"""The global options of a run (``--debug``, ``-q/--quiet``), set before any command module is imported; imports nothing."""


class State:
    debug = False
    quiet = False
    output_may_close = False  # an apply is confirmed: a closed stdout or stderr drops what is written to it
    version_said = False  # a --broker-version the store's marks rule out is said once a run
    root_said = False  # a --broker-config whose storePathRootDir is another store is said once a run
    broker_configs: dict = {}  # each --broker-config read once a run (a pipe, as bash's <(...), reads once): path -> StoreConfig
    args: list[str] = []  # the command line's words after ``mqtool``, as given (``common.this_command_with_yes``)
    interrupt_kept = False  # a Ctrl-C a finalizer could not raise (``interrupts_in_finalizers_kept``): the command ends interrupted
