"""Declarative layouts of every store file and the codecs derived from them (reference §N: rocketmq-store-format.md)."""

from importlib import import_module

# the schemas re-exported here, each read from its module when first asked for
_SCHEMAS = {
    "CheckpointStruct": "checkpoint", "CommitLogBlankStruct": "commitlog", "CommitLogMessageStruct": "commitlog",
    "ConsumeQueueEntryStruct": "consumequeue", "IndexEntryStruct": "index", "IndexHeaderStruct": "index",
}


def __getattr__(name: str):
    if name not in _SCHEMAS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f".{_SCHEMAS[name]}", __name__), name)
