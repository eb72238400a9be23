"""Declarative layouts of every RocketMQ store file, and the fast codecs derived from them.

Pure: imports only ``construct`` and the standard library; knows nothing of files or the CLI.
See ``../shared/reference/rocketmq-store-format.md`` (cited as "reference §N").
"""

from .checkpoint import CheckpointStruct, StoreCheckpoint, decode_checkpoint
from .commitlog import (
    BLANK_MAGIC,
    MESSAGE_MAGIC_V1,
    MESSAGE_MAGIC_V2,
    BlankRecord,
    CommitLogBlankStruct,
    CommitLogMessageStruct,
    CommitLogRecord,
    SysFlag,
    TransactionType,
    decode_record,
    encode_message,
)
from .consumequeue import ConsumeQueueEntry, ConsumeQueueEntryStruct
from .dispatch import DispatchRequest, dispatch_request
from .errors import CorruptRecord, FormatError, LengthMismatch, TruncatedRecord
from .index import IndexEntry, IndexEntryStruct, IndexHeader, IndexHeaderStruct

__all__ = [
    "BLANK_MAGIC",
    "MESSAGE_MAGIC_V1",
    "MESSAGE_MAGIC_V2",
    "BlankRecord",
    "CheckpointStruct",
    "CommitLogBlankStruct",
    "CommitLogMessageStruct",
    "CommitLogRecord",
    "ConsumeQueueEntry",
    "ConsumeQueueEntryStruct",
    "CorruptRecord",
    "DispatchRequest",
    "FormatError",
    "IndexEntry",
    "IndexEntryStruct",
    "IndexHeader",
    "IndexHeaderStruct",
    "LengthMismatch",
    "StoreCheckpoint",
    "SysFlag",
    "TransactionType",
    "TruncatedRecord",
    "decode_checkpoint",
    "decode_record",
    "dispatch_request",
    "encode_message",
]
