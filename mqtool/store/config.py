"""Store configuration: the broker.conf settings that decide how files decode (reference §1.3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadInput
from ..formats.config import parse_java_properties
from ..formats.dispatch import DEFAULT_DELAY_LEVELS, java_parse_int
from ..formats.timer import DEFAULT_LOG_FILE_SIZE


@dataclass(frozen=True)
class StoreConfig:
    store_root: Path | None = None
    commitlog_dirs: tuple[Path, ...] | None = None
    commitlog_file_size: int | None = None
    consume_queue_file_size: int | None = None
    hash_slot_num: int | None = None
    index_num: int | None = None
    message_index_enable: bool = True
    message_index_safe: bool = False
    check_crc_on_recover: bool = True
    timer_log_file_size: int | None = None  # mappedFileSizeTimerLog (5.x), its default where broker.conf leaves it; None: no broker.conf
    delay_levels: str = DEFAULT_DELAY_LEVELS
    enable_multi_dispatch: bool | None = None  # enableMultiDispatch, false where broker.conf leaves it out; None: no broker.conf
    # (the records decide: Store.multi_dispatch)
    reput_notifies: bool = True  # longPollingEnable, brokerRole not SLAVE: 4.9.x's reput notifies (formats.dispatch.LmqNotifyThrows)
    slave: bool = False  # brokerRole=SLAVE, not DLedger's, a controller's or an acting master's to decide: 5.x timers not dequeued
    dledger: bool | None = None  # enableDLegerCommitLog; None: detected from dledger-*/data
    dledger_data_path: Path | None = None  # storePathDLedgerCommitLog
    dledger_self_id: str | None = None  # dLegerSelfId
    settings: tuple[str, ...] = field(default=(), compare=False)  # the keys ``load_broker_config`` read from the file


class _Settings(dict):
    """A parsed broker.conf noting each key read (``read``): the settings given, known from the reads themselves."""

    def __init__(self, items: dict[str, str]):
        super().__init__(items)
        self.read: dict[str, None] = {}

    def __contains__(self, key) -> bool:
        held = super().__contains__(key)
        if held:
            self.read[key] = None
        return held

    def __getitem__(self, key):
        value = super().__getitem__(key)
        self.read[key] = None
        return value

    def get(self, key, default=None):
        return self[key] if key in self else default


def _int(conf: dict[str, str], *keys: str) -> int | None:
    for key in keys:
        if key in conf:
            try:
                return java_parse_int(conf[key])
            except ValueError:
                raise BadInput(f"broker config: {key}={conf[key]!r} is not a number: the broker ignores it (Integer.parseInt throws in "
                               "MixAll.properties2Object) and keeps its default; give the value in a copy of the file, or leave out "
                               "--broker-config to take it from the store's files") from None
    return None


def _size(conf: dict[str, str], *keys: str, what: str = "file size", written: str = "record") -> int | None:
    """A size setting (``what``), refused when 0 or less: no broker wrote files or index entries with it (§6.6)."""
    size = _int(conf, *keys)
    if size is not None and size <= 0:
        key = next(k for k in keys if k in conf)
        raise BadInput(f"broker config: {key}={conf[key]!r} is an impossible {what}: a broker given it can write no {written}, "
                       "so this store was not written with it; give the size the broker ran with in a copy of the file, or leave out "
                       "--broker-config to take it from the store's files")
    return size


def _bool(conf: dict[str, str], key: str, default: bool | None) -> bool | None:
    return conf[key].lower() == "true" if key in conf else default  # Boolean.parseBoolean: no trimming


def load_broker_config(path: Path) -> StoreConfig:
    """Read ``broker.conf`` (Java properties) into a ``StoreConfig``."""
    try:
        conf = _Settings(parse_java_properties(Path(path).read_text(encoding="utf-8", errors="replace")))
    except OSError as exc:
        raise BadInput(f"{path}: {exc.strerror}") from None
    root = Path(conf["storePathRootDir"]) if conf.get("storePathRootDir") else None
    commitlog_dirs = tuple(Path(p) for p in conf["storePathCommitLog"].split(",") if p.strip()) if conf.get("storePathCommitLog") else None
    cq_size = _size(conf, "mappedFileSizeConsumeQueue", "mapedFileSizeConsumeQueue")
    if cq_size is not None:
        cq_size = -(-cq_size // 20) * 20  # getMappedFileSizeConsumeQueue rounds up to units
    timer_size = _size(conf, "mappedFileSizeTimerLog")  # TimerMessageStore's TimerLog size, as given (5.0.0-5.3.3)
    return StoreConfig(
        store_root=root, commitlog_dirs=commitlog_dirs, commitlog_file_size=_size(conf, "mappedFileSizeCommitLog", "mapedFileSizeCommitLog"),
        consume_queue_file_size=cq_size, hash_slot_num=_size(conf, "maxHashSlotNum", what="index size", written="index entry"),
        index_num=_size(conf, "maxIndexNum", what="index size", written="index entry"),
        message_index_enable=_bool(conf, "messageIndexEnable", True), message_index_safe=_bool(conf, "messageIndexSafe", False),
        check_crc_on_recover=_bool(conf, "checkCRCOnRecover", True), timer_log_file_size=DEFAULT_LOG_FILE_SIZE if timer_size is None else timer_size,
        delay_levels=conf.get("messageDelayLevel", DEFAULT_DELAY_LEVELS),
        enable_multi_dispatch=_bool(conf, "enableMultiDispatch", False),  # MessageStoreConfig's default: off
        reput_notifies=bool(_bool(conf, "longPollingEnable", True)) and conf.get("brokerRole") != "SLAVE",
        slave=(conf.get("brokerRole") == "SLAVE" and not _bool(conf, "enableDLegerCommitLog", False)
               and not _bool(conf, "enableControllerMode", False) and not _bool(conf, "enableSlaveActingMaster", False)),
        dledger=_bool(conf, "enableDLegerCommitLog", None),
        dledger_data_path=Path(conf["storePathDLedgerCommitLog"]) if conf.get("storePathDLedgerCommitLog") else None,
        dledger_self_id=conf.get("dLegerSelfId") or None,
        settings=tuple(conf.read),
    )
