"""``Store.open``: a store, commit log folder or segment, read-only (reference §1.1); files the load refuses in ``problems``."""

from __future__ import annotations

import io
import itertools
import os
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import BadInput, BadStoreFile, NotAStore, StoreNotFound
from ..fileops import A_DIRECTORY, A_SOCKET, A_SPECIAL, not_a_file, shell_path
from ..formats import checkpoint as cpfmt
from ..formats import config as cfgfmt
from ..formats import markers
from ..formats.dispatch import LMQ_PREFIX, parse_delay_levels
from .commitlog import CommitLog, Segment
from .config import StoreConfig
from .consumequeue import ConsumeQueue, QueueDirectory, TopicListing, discover_queues, infer_queue_file_size, queue_directories, queue_path_files
from .consumequeue import topic_listing, topic_strays
from .index import IndexFile, IndexGeometry, index_strays, list_index_files, store_index_geometry
from .mappedfile import CREATED, DELETED, INDEX_SERVICE, LEFT_OUT, LOAD_CONSUME_QUEUE, LOADED, MAPPED_FILE_QUEUE, OFFSET_NAME, REFUSED, SKIPPED
from .mappedfile import MappedFile, StrayEntry, unmounted_text
from .mappedfile import file_size, folder_entries, inferred_file_size, load_effect, offset_named_files, stray_after, stray_entries
from .rules import Era, VersionRules, era_of
from .version import BrokerVersion, VersionGuess, check_first_record, detect_version

if TYPE_CHECKING:
    from .batchconsumequeue import BatchConsumeQueue
    from .dledger import DLedgerLayout
    from .timer import TimerLogListing

STORE_PARTS = ("commitlog", "consumequeue", "index", "checkpoint")
MISSING = "missing"  # why ``load_config`` passed over a config file that is not there
# why ``load_config`` passed over a config file (``MixAll.file2String`` 3.2.6-5.3.3): a directory or socket throws (the
# ``.bak`` loaded), a FIFO's open waits for a writer (the start hangs), a device node reads as empty; none is opened here
NOT_A_FILE = "a directory, which FileInputStream cannot read"
A_FIFO = "a FIFO, whose open by FileInputStream waits for a writer"
A_SOCKET_CONFIG = "a socket, whose open by FileInputStream throws (ENXIO)"
A_DEVICE_CONFIG = "a device node, which MixAll.file2String reads as empty (File.length() is 0)"
EMPTY_LAST_SEGMENT = "segment-empty-last"  # the FileProblem kind of a zero-length last commit log file
SEGMENT_SIZE, SEGMENT_NAME = "segment-size", "segment-name"  # ... of a commit log file of another length, or named by no segment start: left out
STRAY_ENTRY = "stray-entry"  # the FileProblem kind of an entry of commitlog/ that is no segment (``mappedfile.StrayEntry``)


def _names_a_dledger_member(path: Path) -> bool:
    """Whether ``path`` holds a ``dledger-*`` entry, without which the DLedger modules stay unloaded."""
    try:
        with os.scandir(path) as entries:
            return any(e.name.startswith("dledger-") for e in entries)
    except OSError:
        return False


def not_a_store(path: Path) -> NotAStore:
    """The error for a path ``Store.open`` cannot read, with the store it probably means."""
    shown = path.absolute()
    try:
        found = "a file" if path.is_file() else "an empty directory" if not any(path.iterdir()) else "a directory without commitlog/, consumequeue/, index/ or checkpoint"
        hint = next((f"; its store is probably {p}" for p in shown.parents if (p / "commitlog").is_dir()), "")
        if not hint and path.is_dir():
            inner = sorted(str(c) for c in itertools.islice(shown.iterdir(), 1000) if (c / "commitlog").is_dir())
            hint = f"; the store is probably {inner[0]}" if len(inner) == 1 else f"; stores inside: {', '.join(inner[:3])}" if inner else ""
    except OSError:  # an unreadable directory: say what is known
        found, hint = "something else", ""
    return NotAStore(f"{shown}: not a RocketMQ store: expected a broker store directory (with commitlog/), a commitlog/ folder "
                     f"or one segment file named by its 20-digit start offset; found {found}{hint}")


@dataclass(frozen=True)
class FileProblem:
    """A store file the broker would refuse or misplace, left out (``verify``'s finding ``kind``; ``path`` absolute)."""

    kind: str
    path: Path
    message: str
    expected: int | str | None = None
    found: int | str | None = None
    entry: StrayEntry | None = None  # a ``STRAY_ENTRY``'s, with ``later``: a segment sorts after it; an ``EMPTY_LAST_SEGMENT``'s: one after
    later: bool = False


def empty_not_last(after: StrayEntry | None, eras=None) -> str:
    """Why an empty file with a stray entry ``after`` it is not deleted (5.1.3+, ``last_listed``), in words, or ""."""
    if after is None or (eras is not None and not any(VersionRules(e.representative).zero_length_last_file_deleted for e in eras)):
        return ""
    return f" (5.1.3+ delete an empty file only as the folder's last entry, and {after.path.name}, {after.what}, sorts after it)"


def stray_effects(eras, entry: StrayEntry, file_size: int | None, later: bool, loader: str = MAPPED_FILE_QUEUE) -> dict[str, list[Era]]:
    """``{load_effect: eras}`` for a stray entry a ``loader`` loads; left out with nothing after it: skipped."""
    effects: dict[str, list[Era]] = {}
    for era in eras:
        effect = load_effect(entry, file_size, VersionRules(era.representative), loader)
        effects.setdefault(SKIPPED if effect == LEFT_OUT and not later else effect, []).append(era)
    return effects


def stray_refused_why(entry: StrayEntry, file_size: int | None, loader: str = MAPPED_FILE_QUEUE) -> str:
    """Why ``loader`` refuses ``entry`` (``mappedfile.load_effect`` said ``REFUSED``), in words."""
    if loader == INDEX_SERVICE:
        return "IndexFile's MappedFile.init cannot open it (IOException), so the load returns false"
    if loader == LOAD_CONSUME_QUEUE:
        return f"{loader}: Integer.parseInt of its name throws NumberFormatException, caught only by DefaultMessageStore.load, which fails"
    if entry.length != file_size:
        return f"{loader}: {entry.length} bytes, not {file_size} (\"length not matched\")"
    return "the length of a file of the folder, but MappedFile.init's Long.parseLong of its name throws"


def stray_text(effects: dict[str, list[Era]], entry: StrayEntry, file_size: int | None, noun: str, loader: str = MAPPED_FILE_QUEUE,
               later: int = 0) -> str:
    """What each era does with a stray entry (``stray_effects``) in words, ``noun`` the folder's files."""
    from .version import eras_label

    left_out = (f"stops IndexService.load there (IOException) and starts without the {later} index file{'s' * (later != 1)} after it: its queries by "
                "key do not find their keys") if loader == INDEX_SERVICE else f"leaves it and every later {noun} out at load and starts without them"
    said = {
        REFUSED: f"refuses to start ({stray_refused_why(entry, file_size, loader)})",
        LEFT_OUT: left_out,
        LOADED: f"loads it as the {noun} at offset {entry.offset}, which mqtool does not read",
        SKIPPED: "passes over it", DELETED: "deletes it at load (zero-length last)",
        CREATED: "creates the file it points to (MappedFile.init's new RandomAccessFile(file, \"rw\") follows the link, its map grows "
                 "that to the index file size) and loads it as an empty index file",
    }
    return "; ".join(f"the broker of {eras_label(eras)} {said[effect]}" for effect, eras in effects.items())


def stray_differs(effects: dict[str, list[Era]]) -> list[Era]:
    """The eras whose broker refuses a stray entry, loads its folder otherwise than mqtool reads it, or creates a file."""
    return [e for effect in (REFUSED, LEFT_OUT, LOADED, CREATED) for e in effects.get(effect, [])]


@dataclass
class ConfigDocument:
    """A config file as the broker loads it: document, source file (None: neither) and why files were passed over."""

    name: str
    doc: dict | None
    offsets: dict | None  # the offset table as the broker converts it (``cfgfmt.decode_config``), or None
    source: str | None  # "config/<name>" or "config/<name>.bak"
    problems: dict[str, str] = field(default_factory=dict)  # "config/<file>" -> why it was not read
    nulls: tuple[str, ...] = ()  # of those, the files ``MixAll.file2String`` reads as null (``load_config``'s ``by_chars``)

    @property
    def notes(self) -> list[str]:
        return [f"{path}: {why}" for path, why in self.problems.items()]

    @property
    def fifo(self) -> str | None:
        """The file (``config/<file>``) the load stopped at, a FIFO it never opens (``A_FIFO``: the broker's start hangs there), or None."""
        return next((path for path, why in self.problems.items() if why == A_FIFO), None)

    @property
    def bak_unusable(self) -> str | None:
        """Why ``ConfigManager.loadBak`` returns false (the ``.bak`` throws), or None (an empty or absent one loads as empty)."""
        absent, bak = cfgfmt.absent(self.name), f"config/{self.name}.bak"
        why = self.problems.get(bak, MISSING)
        if (self.doc is not None or self.problems.get(f"config/{self.name}") == absent
                or why in (MISSING, cfgfmt.empty(self.name), absent, A_DEVICE_CONFIG) or bak in self.nulls):
            return None
        return why


@dataclass
class Store:
    """An opened store. ``root`` is None when only commit log segments were given."""

    root: Path | None
    commitlog: CommitLog
    config: StoreConfig
    notes: list[str] = field(default_factory=list)
    problems: list[FileProblem] = field(default_factory=list)
    _version: BrokerVersion | None = None
    walked_ends: dict[int, tuple] = field(default_factory=dict, repr=False)  # ``nextstart.ends_before``'s walks: start -> (stop, end)
    _config_parses: dict[str, tuple] = field(default_factory=dict, repr=False)  # load_config's: "config/<file>" -> (bytes, parse or error)
    moved_out: frozenset[str] = frozenset()  # the "config/<file>"s every ``load_config`` reads as missing (``repair``'s prediction)

    # ---- opening --------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path, config: StoreConfig | None = None, version: str | None = None) -> "Store":
        path = Path(path)
        config = config or StoreConfig()
        if not path.exists():
            raise StoreNotFound(f"{path}: no such file or directory")
        if path.is_file():
            from . import dledger  # DLedger modules: imported only where a DLedger store may be

            if not OFFSET_NAME.match(path.name):
                raise not_a_store(path)
            if dledger.is_entry_file(path, int(path.name)):
                return cls._open_dledger_files([(int(path.name), path)], config, version)
            if (size := file_size(path)) == 0:
                raise BadStoreFile(f"{path}: empty file")
            return cls(None, CommitLog([Segment(path, int(path.name), size)], config.commitlog_file_size or size), config)._finish(version)
        if path.name.startswith("dledger-") and (path / "data").is_dir():
            path = path / "data"
        if config.dledger is not False and (config.dledger_data_path is not None or _names_a_dledger_member(path)):
            from . import dledger

            if layout := dledger.locate(path, config.dledger_data_path, config.dledger_self_id):
                return cls._open_dledger(layout, path, config, version)
        if config.dledger and (path / "commitlog").is_dir() is False:
            raise NotAStore(f"{path}: the broker config enables DLedger but there is no dledger-*/data folder")
        if any((path / part).exists() for part in STORE_PARTS):
            return cls._open_commitlog_dirs(config.commitlog_dirs or (path / "commitlog",), path, config, version)
        if files := offset_named_files(path):
            from . import dledger

            if dledger.is_entry_file(files[0][1], files[0][0]):
                return cls._open_dledger_files(files, config, version)
            return cls._open_commitlog_dirs((path,), None, config, version)
        raise not_a_store(path)

    @classmethod
    def _open_commitlog_dirs(cls, dirs, root: Path | None, config: StoreConfig, version: str | None) -> "Store":
        listings = {Path(d): folder_entries(Path(d)) for d in dirs}  # MultiPathMappedFileQueue.load: one doLoad of every folder's entries
        files, strays = [f for fs, _ in listings.values() for f in fs], [e for _, es in listings.values() for e in es]
        sizes = sorted((base, p, file_size(p)) for base, p in files)
        empty = sizes.pop()[1] if sizes and sizes[-1][2] == 0 else None
        expected = config.commitlog_file_size
        if expected is None and any(size for _, _, size in sizes):  # a zero-length file tells no size
            expected = inferred_file_size(size for _, _, size in sizes if size)
        problems, kept = [], []
        if empty is not None:  # MappedFileQueue.load/doLoad, rules §2.13
            after = stray_after(empty, files, strays)  # no last entry: 5.1.3+ refuse it too
            deleted = "5.1.3+ brokers delete it at load" if after is None else (
                f"5.1.3+ brokers delete it at load only as the folder's last entry, but {after.path.name}, {after.what}, sorts after it")
            problems.append(FileProblem(EMPTY_LAST_SEGMENT, empty, f"{empty.name}: a zero-length last segment, left out: {deleted}, 3.2.6-4.4.0 "
                                        "and 4.9.2 leave it out and start, the other versions refuse to start (\"length not matched message "
                                        "store config value\")", expected, 0, after))
        for base, p, size in sizes:
            if size != expected:
                problems.append(FileProblem(SEGMENT_SIZE, p, f"{p.name}: {size} bytes, expected {expected or 'the configured size'} like the other "
                                            "segments: the broker logs \"length not matched message store config value, please check it manually\" and "
                                            "refuses to start (3.2.6-4.4.0 and 4.9.2 leave it and every later file out and start); mqtool leaves it out",
                                            expected, size))
            elif base % expected:
                problems.append(FileProblem(SEGMENT_NAME, p, f"{p.name}: not a multiple of the segment size {expected}, so it is no commit log segment "
                                            "the broker can place (\"[BUG]The mappedFile queue's data is damaged\"); mqtool leaves it out",
                                            f"a multiple of {expected}", base))
            else:
                kept.append(Segment(p, base, size))
        for d, (_, entries) in listings.items():  # MappedFileQueue.load lists every entry (rules §2.13): directories, symlinks, any name
            names = [p.name for base, p, _ in sizes if p.parent == d] + ([empty.name] if empty is not None and empty.parent == d else [])
            for entry in entries:
                problems.append(FileProblem(STRAY_ENTRY, entry.path, f"{entry.path.name}: {entry.what} in {d.name}/, which mqtool passes over and the "
                                            "broker's MappedFileQueue.load lists: before 5.1.0 a directory, and in every release a file, of another "
                                            "length than the segments is refused (3.2.6-4.4.0 and 4.9.2 leave it and every later file out), one of the "
                                            "same length is parsed as an offset (Long.parseLong); "
                                            + (unmounted_text(entry.path) if entry.unmounted else "`mqtool repair` moves it out"),
                                            expected, entry.length, entry, any(name > entry.path.name for name in names)))
        return cls(root, CommitLog(kept, expected or 1 << 30), config, [], problems)._finish(version)

    @classmethod
    def _open_dledger(cls, layout: DLedgerLayout, root: Path, config: StoreConfig, version: str | None) -> "Store":
        """A DLedger store (§15): entry files after a mixed store's classic segments (§15.5, ``super.load()``'s rules)."""
        classic = cls._open_commitlog_dirs(config.commitlog_dirs or (root / "commitlog",), root, config, version) if (root / "commitlog").is_dir() else None
        segments = classic.commitlog.segments if classic else []
        from . import dledger

        return cls(root, dledger.open_commitlog(layout, segments, config.commitlog_file_size), config, classic.notes if classic else [],
                   classic.problems if classic else [])._given(version)

    @classmethod
    def _open_dledger_files(cls, files, config: StoreConfig, version: str | None) -> "Store":
        """DLedger data files without their store (a ``data/`` folder, one file)."""
        from . import dledger

        return cls(None, dledger.open_data_files(files, config.commitlog_file_size), config)._given(version)

    @cached_property
    def dledger_strays(self) -> list[tuple[StrayEntry, int | None, bool]]:
        """``(entry, file size, True)`` of each non-file entry of DLedger's folders (``dledger-stray-entry``)."""
        layout = getattr(self.commitlog, "layout", None) if self.is_dledger else None
        if layout is None:
            return []
        from .dledger import index_file_size  # a DLedger module: loaded for DLedger stores only

        return ([(e, self.commitlog.file_size, True) for e in stray_entries(layout.data_dir)]
                + [(e, index_file_size(self), True) for e in stray_entries(layout.index_dir)])  # True: MmapFileList.load refuses any, later files or not

    @property
    def is_dledger(self) -> bool:
        dledger = sys.modules.get(f"{__package__}.dledger")  # no DLedger commit log exists before its module loads
        return dledger is not None and isinstance(self.commitlog, dledger.DLedgerCommitLog)

    @property
    def recovers_dledger_data(self) -> bool:
        """Whether the recovery walks DLedger data files: a DLedger store with one ("first time to load mixed")."""
        return self.is_dledger and bool(self.commitlog.entry_segments())

    def _given(self, version: str | None) -> "Store":
        """The store, read as written by ``version`` when one is given (``--broker-version``)."""
        if version is not None:
            self._version = BrokerVersion.parse(version)
        return self

    @property
    def log_folder_missing(self) -> Path | None:
        """The root's absent ``commitlog/`` when no broker config names the log's folder (read as an empty log), else None."""
        folder = None if self.root is None or self.is_dledger or self.config.commitlog_dirs else self.root / "commitlog"
        return folder if folder is not None and not folder.is_dir() else None

    def _finish(self, version: str | None) -> "Store":
        self.notes.extend(problem.message for problem in self.problems)
        if self.log_folder_missing is not None:
            self.notes.append("no commitlog/ folder: the commit log reads as empty; if the broker's storePathCommitLog names another "
                              "folder, pass its broker.conf with --broker-config")
        check_first_record(self._given(version))
        return self

    def close(self) -> None:
        self.commitlog.close()
        for f in self.__dict__.get("index_files", []):
            f.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- paths ----------------------------------------------------------------------------

    def path(self, *parts: str) -> Path:
        if self.root is None:
            raise BadInput(self.rootless_refusal())
        return self.root.joinpath(*parts)

    def rootless_refusal(self) -> str:
        """Why commit log segments alone do not do for a command reading the store's other files, naming the root to give."""
        folder = self.commitlog.segments[0].path.parent if self.commitlog.segments else None
        whole = None if folder is None else Path(os.path.abspath(folder))  # ``.`` inside it too; a symlinked folder not followed
        named = whole is not None and whole.name == "commitlog"
        root = f" ({shell_path(folder.parent if folder.name else whole.parent)} here)" if named else ""
        return (f"{'' if folder is None else f'{folder}: '}commit log segments alone: this command needs the store's root directory, "
                f"the folder holding commitlog/{root}")

    def file(self, *parts: str) -> Path | None:
        """``path(*parts)`` when the store has a root and that file exists, else None."""
        path = None if self.root is None else self.root.joinpath(*parts)
        return path if path is not None and path.is_file() else None

    # ---- version ----------------------------------------------------------------------------

    @cached_property
    def version_guess(self) -> VersionGuess:
        return detect_version(self) if self._version is None else VersionGuess.of(self._version, given=True)

    @property
    def version(self) -> BrokerVersion | None:
        return self.version_guess.version

    @contextmanager
    def assumed_version(self, candidate: BrokerVersion):
        """Within the block, read the store as written by ``candidate`` (a planner runs under each detected candidate)."""
        guess = self.version_guess
        self.__dict__["version_guess"] = VersionGuess.of(candidate, evidence=guess.evidence, eras=guess.eras)
        try:
            yield candidate
        finally:
            self.__dict__["version_guess"] = guess

    def assume_eras(self, eras) -> None:
        """Read the store as written in one of ``eras`` (repair's later stages); planners still plan under each."""
        guess = self.version_guess
        if guess.given:
            return
        kept = [e for e in guess.eras if e in eras] or list(eras)
        self.__dict__["version_guess"] = VersionGuess.among(kept, guess.evidence)

    @property
    def rules(self) -> VersionRules:
        """The rules of the store's version; of the newest era while several remain (``recovery.candidates`` plans each)."""
        guess = self.version_guess
        return VersionRules(guess.version or guess.candidates[0])

    def eras_where(self, rule: str) -> list[Era]:
        """The eras the store may be from (the given version's alone) whose ``VersionRules.<rule>`` holds."""
        return [e for e in self.version_guess.eras if getattr(VersionRules(e.representative), rule)]

    @property
    def empty_last_segment(self) -> Path | None:
        """The zero-length last commit log file left out of the segments (rules §2.13), if any."""
        return next((p.path for p in self.problems if p.kind == EMPTY_LAST_SEGMENT), None)

    @property
    def legacy_properties(self) -> bool:
        """True when the broker parses properties with the split-based reader (before 4.9.1, §1.10)."""
        return self.rules.legacy_properties

    @cached_property
    def delay_table(self) -> dict[int, int]:
        return parse_delay_levels(self.config.delay_levels)

    # ---- consume queues ---------------------------------------------------------------------

    @cached_property
    def consume_queue_file_size(self) -> int:
        if self.config.consume_queue_file_size:
            return self.config.consume_queue_file_size
        return (self.root is not None and infer_queue_file_size(self.path("consumequeue"), self.queue_directories)) or 300_000 * 20

    @cached_property
    def _topic_listing(self) -> TopicListing:
        """``consumequeue/``'s topic folders and their entries, listed once (``consumequeue.topic_listing``)."""
        return [] if self.root is None else topic_listing(self.path("consumequeue"))

    @cached_property
    def queue_directories(self) -> list[QueueDirectory]:
        """The queue directories under ``consumequeue/``, those the broker never reads too (``QueueDirectory.read``)."""
        return queue_directories(self.path("consumequeue"), self._topic_listing) if self.root is not None else []

    @cached_property
    def queue_path_files(self) -> list[Path]:
        """The files at a queue's own path (``consumequeue.queue_path_files``), for verify and the write commands' refusal."""
        return queue_path_files(self.path("consumequeue"), self._topic_listing) if self.root is not None else []

    @cached_property
    def topic_strays(self) -> list[tuple[StrayEntry, None, bool]]:
        """``(entry, None, False)`` of each queue-folder entry named by no queue id (``consumequeue.topic_strays``)."""
        return [(entry, None, False) for entry in topic_strays(self.path("consumequeue"), self._topic_listing)] if self.root is not None else []

    @cached_property
    def consume_queues(self) -> list[ConsumeQueue]:
        """The queues the broker loads from ``consumequeue/``, each in ``<topic>/<id>`` (``consumequeue.discover_queues``)."""
        return [] if self.root is None else discover_queues(self.path("consumequeue"), self.consume_queue_file_size, found=self.queue_directories)

    @cached_property
    def batch_consume_queues(self) -> list[BatchConsumeQueue]:
        """The 5.x batch consume queues (``batchconsumequeue/``, §5.5)."""
        from .batchconsumequeue import discover_batch_queues  # a 5.x batch store only: not loaded for a lookup

        return [] if self.root is None else discover_batch_queues(self.path("batchconsumequeue"))

    def consume_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        """One queue: as ``consume_queues`` listed it if they were, else its directory alone (a lookup)."""
        found = self._queues_by_key.get((topic, queue_id)) if "consume_queues" in self.__dict__ else None
        return found or ConsumeQueue(topic, queue_id, self.path("consumequeue", topic, str(queue_id)), self.consume_queue_file_size)

    @cached_property
    def _queues_by_key(self) -> dict[tuple[str, int], ConsumeQueue]:
        return {(q.topic, q.queue_id): q for q in self.consume_queues}

    @property
    def multi_dispatch(self) -> bool:
        """Whether the broker writes LMQ entries (§3.6): ``enableMultiDispatch`` as configured, else yes."""
        return True if self.config.enable_multi_dispatch is None else self.config.enable_multi_dispatch

    @cached_property
    def multi_dispatch_on(self) -> bool:
        """Whether ``enableMultiDispatch`` is known on: ``--broker-config`` says so, or the store has ``%LMQ%`` queues."""
        if self.config.enable_multi_dispatch is not None:
            return self.config.enable_multi_dispatch
        cq = self.path("consumequeue") if self.root is not None else None
        return cq is not None and cq.is_dir() and any(p.name.startswith(LMQ_PREFIX) for p in cq.iterdir())

    @property
    def no_properties_npe(self) -> bool | None:
        """Whether the broker throws on a record without properties (rules §3.12): True, None (only E12 known) or False."""
        guess = self.version_guess
        if not self.multi_dispatch_on:
            return False
        if guess.given:
            return guess.version == BrokerVersion(4, 9, 3)
        eras = [era_of(guess.version)] if guess.version is not None else guess.eras
        return None if any(e.name == "E12" for e in eras) else False

    # ---- index --------------------------------------------------------------------------------

    @cached_property
    def index_geometry(self) -> IndexGeometry | None:
        if self.config.hash_slot_num and self.config.index_num:
            return IndexGeometry(self.config.hash_slot_num, self.config.index_num)
        paths = list_index_files(self.path("index")) if self.root is not None else []
        return store_index_geometry(paths)

    @cached_property
    def unreadable_index(self) -> str | None:
        """Why the index cannot be read (no geometry shown or given), or None; the planners refuse it."""
        try:
            self.index_geometry
        except BadStoreFile as exc:
            return str(exc)
        return None

    @cached_property
    def index_files(self) -> list[IndexFile]:
        if self.root is None or self.index_geometry is None:
            return []
        return [IndexFile(p, self.index_geometry) for p in list_index_files(self.path("index"))]

    @cached_property
    def timer_log_listing(self) -> "TimerLogListing | None":
        """``timerlog/`` as ``TimerLog.load`` lists it (``timer.TimerLogListing``), for verify and ``timer_refusal``."""
        from .timer import TimerLogListing

        return TimerLogListing.of(self.path("timerlog"), self.config.timer_log_file_size) if self.root is not None else None

    @cached_property
    def index_strays(self) -> list[tuple[StrayEntry, None, bool]]:
        """Each ``index/`` entry ``IndexService.load`` lists but mqtool does not read (``index.index_strays``)."""
        return index_strays(self.path("index")) if self.root is not None else []

    # ---- checkpoint, markers, config ----------------------------------------------------------

    @cached_property
    def _checkpoint_read(self) -> tuple[cpfmt.StoreCheckpoint | None, int | None]:
        if (path := self.file("checkpoint")) is None:
            return None, None
        with MappedFile(path) as mf:
            return cpfmt.decode_checkpoint(mf.buf), cpfmt.used_bytes(mf.buf)

    checkpoint = property(lambda self: self._checkpoint_read[0])
    checkpoint_used_bytes = property(lambda self: self._checkpoint_read[1])

    @cached_property
    def checkpoint_size_problem(self) -> str | None:
        """What a checkpoint file not of 4096 bytes means (``StoreCheckpoint`` maps 4096: missing bytes read zero), or None."""
        path = self.file("checkpoint")
        size = cpfmt.CHECKPOINT_FILE_SIZE if path is None else path.stat().st_size
        if size == cpfmt.CHECKPOINT_FILE_SIZE:
            return None
        return f"the checkpoint is {size} bytes, the broker maps {cpfmt.CHECKPOINT_FILE_SIZE}: missing bytes read as zero"

    @cached_property
    def abort(self) -> markers.AbortMarker | None:
        if self.root is not None and (what := not_a_file(self.path(markers.ABORT_FILE))) is not None:  # isTempFileExist: File.exists()
            special = abort_unwritable(self.path(markers.ABORT_FILE), what)
            return markers.AbortMarker(b"", directory=what == A_DIRECTORY, special=special, device=what == A_SPECIAL and not special)
        path = self.file(markers.ABORT_FILE)
        return None if path is None else markers.decode_abort(path.read_bytes())

    @property
    def abort_present(self) -> bool:
        return self.abort is not None

    def load_config(self, name: str, by_chars: bool | None = None, without: frozenset[str] = frozenset()) -> "ConfigDocument":
        """``load_config`` on this store, each file parsed once per content; ``by_chars`` None: the release's way."""
        by_chars = self.rules.reads_config_by_chars if by_chars is None else by_chars
        return load_config(self.root, name, self._config_parses, by_chars, without | self.moved_out)

    def config_file(self, name: str) -> dict | None:
        """``load_config``'s document, as the store's release reads it, or None."""
        return self.load_config(name).doc


def abort_unwritable(path: Path, what: str | None) -> bool:
    """Whether an ``abort`` that is no file is a FIFO or socket, which 5.0.0+ ``string2File`` hangs or throws on (6.3)."""
    return what == A_SOCKET or what == A_SPECIAL and stat.S_ISFIFO(os.stat(path).st_mode)


def load_config(root: Path | None, name: str, parses: dict[str, tuple] | None = None, by_chars: bool = False,
                without: frozenset[str] = frozenset()) -> ConfigDocument:
    """A ``config/*.json`` file as ``ConfigManager.load`` reads it: else its ``.bak`` (missing, directory, unreadable, empty,
    undecodable); ``parses``: a cache; ``by_chars``: 3.2.6/4.0.0's ``file2String`` (rules 7.4); ``without``: read as missing."""
    parses = {} if parses is None else parses
    problems, nulls = {}, []
    for candidate in (name, name + ".bak"):
        shown = f"config/{candidate}"
        path = None if root is None or shown in without else root / "config" / candidate
        if path is not None and path.exists() and stat.S_ISFIFO(path.stat().st_mode):
            problems[shown] = A_FIFO
            break
        if path is None or not path.is_file():
            what = not_a_file(path) if path is not None else None
            problems[shown] = {A_DIRECTORY: NOT_A_FILE, A_SOCKET: A_SOCKET_CONFIG, A_SPECIAL: A_DEVICE_CONFIG}.get(what, MISSING)
            nulls += [shown] if by_chars or problems[shown] == MISSING else []
            continue
        try:
            raw = path.read_bytes()
        except OSError as exc:
            problems[shown] = exc.strerror or str(exc)
            nulls += [shown] if by_chars else []
            continue
        if by_chars and (chars := _utf16_length(raw)) != len(raw):  # FileReader.read fills fewer chars: result false
            problems[shown] = f"{len(raw)} bytes a FileReader reads as {chars} chars, which 3.2.6's and 4.0.0's file2String reads as null"
            nulls.append(shown)
            continue
        if (parsed := parses.get(shown)) is None or parsed[0] != raw:
            text = io.TextIOWrapper(io.BytesIO(raw), encoding="utf-8", errors="replace").read()  # Path.read_text's decoding
            try:
                parsed = raw, cfgfmt.decode_config(name, text)
            except cfgfmt.ConfigError as exc:
                parsed = raw, str(exc)
            parses[shown] = parsed
        if isinstance(parsed[1], str):
            problems[shown] = parsed[1]
            continue
        return ConfigDocument(name, *parsed[1], shown, problems, tuple(nulls))
    return ConfigDocument(name, None, None, None, problems, tuple(nulls))


def _utf16_length(raw: bytes) -> int:
    """How many chars Java's UTF-8 decoder makes of ``raw``: a UTF-16 unit each, two for a supplementary character."""
    text = raw.decode("utf-8", errors="replace")
    return len(text) + sum(ch > "\uffff" for ch in text)
