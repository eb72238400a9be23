"""The read-only store model: open a store directory, list and map its files, iterate records.

Imports ``formats`` only (never the CLI, typer, rich or Spark). Nothing here opens a file for
writing.
"""

from .commitlog import CommitLog, CommitLogScan, ScanEnd, Segment, StopReason
from .config import StoreConfig, load_broker_config
from .consumequeue import ConsumeQueue, QueueRecovery
from .index import IndexFile, IndexGeometry, query_offsets
from .store import Store
from .version import BrokerVersion, VersionGuess

__all__ = [
    "BrokerVersion",
    "CommitLog",
    "CommitLogScan",
    "ConsumeQueue",
    "IndexFile",
    "IndexGeometry",
    "QueueRecovery",
    "ScanEnd",
    "Segment",
    "StopReason",
    "Store",
    "StoreConfig",
    "VersionGuess",
    "load_broker_config",
    "query_offsets",
]
