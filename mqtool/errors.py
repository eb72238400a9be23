"""mqtool's own errors, each with its exit code: 0 ok, 1 findings, 2 usage, 3 bad input, 4 refused, 5 internal error."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_BAD_INPUT = 3
EXIT_REFUSED = 4
EXIT_INTERNAL = 5


class MqtoolError(Exception):
    """An error the CLI reports as one line on stderr, exiting with ``exit_code``."""

    exit_code = EXIT_INTERNAL


class UsageError(MqtoolError):
    exit_code = EXIT_USAGE


class BadInput(MqtoolError):
    """The input is not what it should be: wrong path, wrong file size, garbage..."""

    exit_code = EXIT_BAD_INPUT


class StoreNotFound(BadInput):
    pass


class NotAStore(BadInput):
    pass


class BadStoreFile(BadInput):
    pass


class UnknownStoreVersion(BadInput):
    pass


class Refused(MqtoolError):
    """mqtool will not do this: the store is in use, the plan is stale, --yes is missing..."""

    exit_code = EXIT_REFUSED


class StoreInUse(Refused):
    pass
