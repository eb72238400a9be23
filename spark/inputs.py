"""Input paths resolved to brokers and their segments; imports neither pyspark nor pyarrow."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import BadInput, UsageError
from ..formats.dispatch import DEFAULT_DELAY_LEVELS
from ..store import BrokerVersion, Segment, Store, StoreConfig, load_broker_config
from ..store.dledger import commitlog_of
from ..store.dledgerstart import ServedLog

DEFAULT_STORE_DIR = "store"


@dataclass(frozen=True)
class BrokerInput:
    """One broker's commit log segments and the settings its records decode with."""

    broker: str
    paths: tuple[str, ...]
    segments: tuple[Segment, ...]
    file_size: int
    version: str | None
    legacy_properties: bool
    delay_levels: str = DEFAULT_DELAY_LEVELS
    scan_start: int | None = None  # where the broker's next start scans from (``next_start_scan``)
    start: int | None = None  # ``--from-offset``: the record start it names (``resync.record_start``)
    stop: int | None = None  # ``--to-offset``
    served: ServedLog | None = None  # a DLedger store's log, read past the damage its broker keeps (``Split.resume``)

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def resume_before(self) -> int | None:
        """Damage before this offset (the next start's scan start, the last segment) is read past, as ``mqtool dump`` does."""
        return None if self.scan_start is None or not self.segments else min(self.scan_start, self.segments[-1].base_offset)


def store_dir_for(path: Path) -> Path:
    """The directory a path's broker is named after: its store (the parent of one called ``store``)."""
    path = Path(os.path.abspath(path))
    if path.is_file():
        path = path.parent  # a segment: its commit log folder
    if path.name == "commitlog":
        path = path.parent  # a commit log folder: its store
    if path.name == DEFAULT_STORE_DIR and path.parent.name:
        path = path.parent
    return path


def broker_name_for(path: Path) -> str:
    """The default ``broker`` value of a path: its store directory's name."""
    directory = store_dir_for(path)
    return directory.name or str(directory)


def resolve_inputs(paths: Sequence[str | Path], broker_names: Sequence[str] | None = None, *, broker_config: str | Path | None = None,
                   broker_versions: Sequence[str | None] | None = None, from_offset: int | None = None, to_offset: int | None = None
                   ) -> list[BrokerInput]:
    """Every PATH opened read-only, segments grouped by broker, read from ``from_offset``'s record to ``to_offset``."""
    if not paths:
        raise UsageError("no input PATH given")
    names = list(broker_names or [])
    if names and len(names) not in (1, len(paths)):
        raise UsageError(f"--broker-name given {len(names)} times for {len(paths)} paths (give one per PATH, or one for all)")
    versions = list(broker_versions or [None] * len(paths))
    if len(versions) == 1 and len(paths) > 1:
        versions *= len(paths)
    if len(versions) != len(paths):
        raise UsageError("--broker-version: give one for all paths or one per PATH")
    config = load_broker_config(Path(broker_config)) if broker_config else StoreConfig()
    grouped: dict[str, dict] = {}
    named_after: dict[str, Path] = {}
    for i, raw in enumerate(paths):
        path = Path(os.path.abspath(raw))
        if not path.exists():
            raise BadInput(f"{raw}: no such file or directory")
        if names:
            broker = names[i] if len(names) > 1 else names[0]
        else:
            broker = broker_name_for(path)
            directory = store_dir_for(path)
            if named_after.setdefault(broker, directory) != directory:
                raise UsageError(f"{named_after[broker]} and {directory} would both be broker {broker!r}; name them with --broker-name (one per PATH)")
        with Store.open(path, config, versions[i]) as store:
            # BrokerInput's settings: the version is the rules it is read by (the newest era left while several are)
            settings = (store.commitlog.file_size, str(store.rules.version), store.legacy_properties, store.config.delay_levels)
            served = ServedLog.of(store.commitlog) if store.root is not None and store.is_dledger else None
            entry = grouped.setdefault(broker, {"paths": [], "segments": {}, "settings": settings, "scan_start": next_start_scan(store),
                                                "served": served})
            entry["paths"].append(str(path))
            if len(entry["paths"]) > 1:
                entry["scan_start"] = entry["served"] = None  # segments gathered from several PATHs: no store to ask
            for seg in store.commitlog.segments:
                seg = Segment(Path(os.path.abspath(seg.path)), seg.base_offset, seg.size, seg.entries)
                other = entry["segments"].get(seg.base_offset)
                if other is not None and other.path != seg.path:
                    raise UsageError(f"broker {broker!r}: {other.path} and {seg.path} both hold segment {seg.base_offset}; "
                                     "name the brokers with --broker-name (one per PATH)")
                entry["segments"][seg.base_offset] = seg
    inputs = []
    for broker, e in grouped.items():
        segments = tuple(e["segments"][base] for base in sorted(e["segments"]))
        if (from_offset is not None or to_offset is not None) and any(seg.entries for seg in segments):
            raise UsageError(f"broker {broker!r}: --from-offset, --to-offset and --msg-id do not read DLedger data files here; "
                             "`mqtool dump` does")
        start = None
        if from_offset is not None and segments:
            from ..store.resync import record_start

            start = record_start(commitlog_of(list(segments), e["settings"][0]), from_offset)
        inputs.append(BrokerInput(broker, tuple(e["paths"]), segments, *e["settings"], e["scan_start"], start, to_offset, e["served"]))
    return inputs


def next_start_scan(store: Store) -> int | None:
    """Where the next start scans from, before which ``dump`` reads past damage; None without a store, or DLedger."""
    if store.root is None or store.is_dledger or not store.commitlog.segments:
        return None
    from ..store.nextstart import scan_start_offset

    return scan_start_offset(store)


def broker_store(b: BrokerInput, config: StoreConfig | None = None) -> Store:
    """A ``Store`` over one broker's input: its store for one PATH, else a commit log of the segments of its PATHs."""
    config = config or StoreConfig()
    if len(b.paths) == 1:
        return Store.open(b.paths[0], config, b.version)
    version = BrokerVersion.parse(b.version) if b.version else None
    return Store(None, commitlog_of(list(b.segments), b.file_size), config, _version=version)
