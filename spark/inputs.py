"""What a scan reads: input paths resolved to brokers, their segments and how they decode.

A PATH is a store root, a commitlog folder or one segment file (``Store.open`` decides). Every
row names its ``broker``: ``--broker-name`` when given (one per PATH, or one for all), otherwise
the store directory's name (its parent's name when it is called ``store``, RocketMQ's default
``storePathRootDir``). Several PATHs may name the same broker (e.g. single segments of one
store); two different files holding the same segment of one broker are refused. Imports neither
pyspark nor pyarrow, so the driver, the data source planner and tests share it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from ..errors import BadInput, UsageError
from ..formats.dispatch import DEFAULT_DELAY_LEVELS
from ..store import BrokerVersion, Segment, Store, StoreConfig, load_broker_config
from ..store.dledger import commitlog_of

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
    resume_before: int | None = None  # read past damage before it, as ``mqtool dump`` does (``resume_before``)

    @property
    def bytes(self) -> int:
        return sum(s.size for s in self.segments)


def store_dir_for(path: Path) -> Path:
    """The directory a path's broker is named after: the store holding a segment or commit log
    folder (its parent when it is called ``store``, RocketMQ's default ``storePathRootDir``)."""
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


def resolve_inputs(
    paths: Sequence[str | Path],
    broker_names: Sequence[str] | None = None,
    *,
    broker_config: str | Path | None = None,
    broker_versions: Sequence[str | None] | None = None,
) -> list[BrokerInput]:
    """Open every PATH read-only and group its segments by broker (absolute paths throughout)."""
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
            entry = grouped.setdefault(broker, {"paths": [], "segments": {}, "settings": settings, "resume_before": resume_before(store)})
            entry["paths"].append(str(path))
            if len(entry["paths"]) > 1:
                entry["resume_before"] = None  # segments gathered from several PATHs: no store to ask
            for seg in store.commitlog.segments:
                seg = Segment(Path(os.path.abspath(seg.path)), seg.base_offset, seg.size, seg.entries)
                other = entry["segments"].get(seg.base_offset)
                if other is not None and other.path != seg.path:
                    raise UsageError(
                        f"broker {broker!r}: {other.path} and {seg.path} both hold segment {seg.base_offset}; "
                        "name the brokers with --broker-name (one per PATH)"
                    )
                entry["segments"][seg.base_offset] = seg
    return [
        BrokerInput(broker, tuple(e["paths"]), tuple(e["segments"][base] for base in sorted(e["segments"])), *e["settings"], e["resume_before"])
        for broker, e in grouped.items()
    ]


def resume_before(store: Store) -> int | None:
    """The offset before which ``mqtool dump`` reads past damage and zeros (``cli.common.read_on``):
    where the broker's next start scans from, and before the last segment; None for a commit log
    without its store (segment files, a commitlog folder) or a DLedger one, whose reads stop there."""
    segments = store.commitlog.segments
    if store.root is None or store.is_dledger or not segments:
        return None
    from ..store.nextstart import scan_start_offset

    return min(scan_start_offset(store), segments[-1].base_offset)


def broker_store(b: BrokerInput, config: StoreConfig | None = None) -> Store:
    """A ``Store`` over one broker's input: its store when one PATH was given, otherwise a
    commit log of the segments gathered from its PATHs."""
    config = config or StoreConfig()
    if len(b.paths) == 1:
        return Store.open(b.paths[0], config, b.version)
    version = BrokerVersion.parse(b.version) if b.version else None
    return Store(None, commitlog_of(list(b.segments), b.file_size), config, _version=version)
