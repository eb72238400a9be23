"""The read-only store model: open a store directory, list and map its files, iterate records. Imports ``formats`` only; nothing
here opens a file for writing."""

from .commitlog import ScanEnd, Segment
from .config import StoreConfig, load_broker_config
from .consumequeue import ConsumeQueue
from .index import IndexFile, query_offsets
from .store import Store
from .version import BrokerVersion

__all__ = ["BrokerVersion", "ConsumeQueue", "IndexFile", "ScanEnd", "Segment", "Store", "StoreConfig", "load_broker_config", "query_offsets"]
