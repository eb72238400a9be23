"""The read-only store model: open a store, list and map its files, iterate records; imports ``formats`` only."""

from .commitlog import ScanEnd, Segment
from .config import StoreConfig, load_broker_config
from .consumequeue import ConsumeQueue
from .index import IndexFile, query_offsets
from .store import Store
from .version import BrokerVersion

__all__ = ["BrokerVersion", "ConsumeQueue", "IndexFile", "ScanEnd", "Segment", "Store", "StoreConfig", "load_broker_config", "query_offsets"]
