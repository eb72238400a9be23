"""The broker's store rules by version: the eras of ``rocketmq-rules-by-version.md`` and ``VersionRules``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

from ..errors import UnknownStoreVersion
from ..formats.dispatch import (INDEX_KEYS_ONLY, INDEX_UNIQ_AND_KEYS, LMQ_SKIP_NONE, LMQ_SKIP_RETRY, LMQ_SKIP_RETRY_TIMER_SCHEDULE, LMQ_SKIP_SYSTEM,
                                NO_MULTI_DISPATCH)


class BrokerVersion(NamedTuple):
    major: int
    minor: int
    patch: int

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"

    @classmethod
    def parse(cls, text: str) -> "BrokerVersion":
        """A RocketMQ release (``4.4.0``, ``rocketmq-all-4.4.0``, ``v5.3.3``); a later 5.3.x reads as 5.3.3's era."""
        raw = text.strip()
        core = raw.lower().removeprefix("rocketmq-all-").removeprefix("v").removesuffix("-incubating")
        try:
            parts = [int(p) for p in core.split(".")]
        except ValueError:
            parts = []
        if not 1 <= len(parts) <= 3:
            raise UnknownStoreVersion(f"broker version {raw!r} is not of the form X.Y.Z (e.g. 4.4.0)")
        version = cls(*(parts + [0] * (3 - len(parts))))
        if version in RELEASES or (version[:2] == LAST_RELEASE[:2] and version > LAST_RELEASE):
            return version
        raise UnknownStoreVersion(f"broker version {version} is not a RocketMQ release mqtool knows (3.2.6 and 4.0.0 to {LAST_RELEASE}; "
                                  f"later 5.3.x read as {LAST_RELEASE}): pass the release the broker ran")


def _v(text: str) -> BrokerVersion:
    return BrokerVersion(*map(int, text.split(".")))


# every release from 3.2.6 to 5.3.3 (4.5.0 is untagged in the git history; it is the 4.5.1 era)
RELEASES = tuple(map(_v, (
    "3.2.6 4.0.0 4.1.0 4.2.0 4.3.0 4.3.1 4.3.2 4.4.0 4.5.0 4.5.1 4.5.2 4.6.0 4.6.1 4.7.0 4.7.1 4.8.0 "
    "4.9.0 4.9.1 4.9.2 4.9.3 4.9.4 4.9.5 4.9.6 4.9.7 4.9.8 5.0.0 5.1.0 5.1.1 5.1.2 5.1.3 5.1.4 5.2.0 "
    "5.3.0 5.3.1 5.3.2 5.3.3"
).split()))
LAST_RELEASE = RELEASES[-1]


class Era(NamedTuple):
    """A run of releases with the same variant of every rule (rules file, "Tier-A eras")."""

    index: int
    name: str
    first: BrokerVersion
    last: BrokerVersion
    representative: BrokerVersion  # the release mqtool plans under when only the era is known
    distinct: str  # what sets it apart from the era before

    @property
    def releases(self) -> str:
        return str(self.first) if self.first == self.last else f"{self.first}-{self.last}"

    def __str__(self) -> str:
        return f"{self.name} ({self.releases})"


_ERA_ROWS = (  # name, first and last release, representative, what sets it apart
    ("E0", "3.2.6", "3.2.6", "3.2.6", "Alibaba era: no TOTALSIZE check, queues and index written at put time, no UNIQ_KEY index"),
    ("E1", "4.0.0", "4.0.0", "4.0.0", "TOTALSIZE check, reput from the commit log max, UNIQ_KEY and COMMIT indexed"),
    ("E2", "4.1.0", "4.1.0", "4.1.0", "dataVersion.timestamp, batch records, 8-byte batch blanks"),
    ("E3a", "4.2.0", "4.2.0", "4.2.0", "consume queue repeat-write guard, lock file"),
    ("E3b", "4.3.0", "4.3.1", "4.3.0", "transactions as half-topic records"),
    ("E4", "4.3.2", "4.4.0", "4.4.0", "queues truncated after recovery; last queue entry kept by its start offset"),
    ("E5", "4.5.0", "4.5.2", "4.5.1", "queue entries kept by offset+size; reput from the queues' max; a wrong-length file refuses start"),
    ("E6", "4.6.0", "4.6.1", "4.6.1", "broker re-serializes properties with CLUSTER; IPv6 hosts"),
    ("E7", "4.7.0", "4.7.0", "4.7.0", "async sends store the client's properties verbatim"),
    ("E8", "4.7.1", "4.7.1", "4.7.1", "index hashSlotCount counts used slots"),
    ("E9", "4.8.0", "4.9.0", "4.8.0", "batch properties concatenated without a separator"),
    ("E10", "4.9.1", "4.9.1", "4.9.1", "no trailing \\x02, new properties parser, WAIT stripped, 8-byte blanks"),
    ("E11", "4.9.2", "4.9.2", "4.9.2", "delay entries of abnormal recovery get the TAGS hash; a wrong-length file ignored"),
    ("E12", "4.9.3", "4.9.8", "4.9.7", "wrong-length file refused again; batch separator fixed; LMQ"),
    ("E13", "5.0.0", "5.0.0", "5.0.0", "abort holds the PID, abort.bak, stateVersion, timer store, reput from the commit log max"),
    ("E14", "5.1.0", "5.1.0", "5.1.0", "config persisted in place, V2 records, compaction store"),
    ("E15a", "5.1.1", "5.1.1", "5.1.1", "checkpoint confirmPhyOffset; LMQ multi-dispatch skips %RETRY% topics"),
    ("E15b", "5.1.2", "5.1.2", "5.1.2", "LMQ multi-dispatch also skips rmq_sys_wheel_timer, SCHEDULE_TOPIC_XXXX and queue names holding /"),
    ("E16", "5.1.3", "5.1.4", "5.1.4", "a zero-length last commit log file is deleted at load"),
    ("E17", "5.2.0", "5.3.1", "5.3.1", "trailing \\x02 back; queues truncated before the commit log"),
    ("E18", "5.3.2", "5.3.3", "5.3.3", "normal recovery starts at the queues' max and dispatches"),
)
ERAS = tuple(Era(index, name, *map(_v, releases), distinct) for index, (name, *releases, distinct) in enumerate(_ERA_ROWS))
_BY_NAME = {era.name: era for era in ERAS}


def era_of(version: BrokerVersion) -> Era:
    for candidate in reversed(ERAS):
        if version >= candidate.first:
            return candidate
    raise UnknownStoreVersion(f"broker version {version} is older than {ERAS[0].first}")


def eras_between(first: str, last: str) -> frozenset[Era]:
    """The eras from ``first`` to ``last`` (names), inclusive."""
    return frozenset(ERAS[_BY_NAME[first].index : _BY_NAME[last].index + 1])


ALL_ERAS = frozenset(ERAS)


def _rule(since: str = "E0", before: str | None = None) -> property:
    """A rule that holds from era ``since`` up to, not including, era ``before``."""
    low, high = _BY_NAME[since].index, _BY_NAME[before].index if before else len(ERAS)
    return property(lambda rules: low <= rules.era.index < high)


@dataclass(frozen=True)
class VersionRules:
    """Which variant of each store rule ``version`` follows (rules file §1-§8)."""

    version: BrokerVersion

    @cached_property
    def era(self) -> Era:
        return era_of(self.version)

    # ---- §1 the commit log record and its writer ----------------------------------------------

    v5 = _rule("E13")

    accepts_v2_magic = _rule("E14")
    """§1.1: 5.1.0+ read V2 records (2-byte topic length), and abnormal recovery's ``isMappedFileMatchedRecover`` matches them."""

    checks_record_length = _rule("E1")
    """§1.3: 4.0.0+ ``checkMessageAndReturnSize`` compares TOTALSIZE with the computed length; 3.2.6 trusts TOTALSIZE."""

    stale_blank_fill = _rule(before="E10")
    """§1.12: up to 4.9.0 ``doAppend`` writes a ``maxBlank``-byte blank (stale encode-buffer bytes in its tail); 4.9.1+ its 8-byte header."""

    legacy_properties = _rule(before="E10")
    """§1.10: up to 4.9.0 ``string2messageProperties`` splits on the separators (keeping an empty key); 4.9.1+ walks the string by index."""

    # ---- §2 commit log recovery ---------------------------------------------------------------

    normal_start_from_cq_max = _rule("E18")
    """§2.1: 5.3.2+ ``recoverNormally`` starts at the newest segment at or below the CQ max; before, at the third-from-last."""

    normal_stops_at_length_mismatch = _rule("E1")
    """§2.2: from 4.0.0 a record failing the checks ends ``recoverNormally``; 3.2.6's has no success flag: a positive size advances it."""

    normal_dispatches = _rule("E18")
    """§2.3: 5.3.2+ ``recoverNormally`` dispatches the records after the CQ max."""

    normal_truncates_cq = _rule("E4")
    """§2.4: ``recoverNormally`` truncates the consume queues past the log's end from 4.3.2."""

    empty_log_destroys_queues = _rule("E5")
    """§2.5: normal recovery of an empty commit log destroys the consume queues from 4.5.0."""

    abnormal_stops_at_length_mismatch = _rule("E4")
    """§2.7: from 4.3.2 a record whose TOTALSIZE disagrees with its fields ends ``recoverAbnormally``; before, it is dispatched and passed."""

    abnormal_truncates_cq_always = _rule(before="E4")
    """§2.8: up to 4.3.1 abnormal recovery truncates the consume queues always; from 4.3.2 only when they reach past the log's end."""

    writes_confirm_offset = _rule("E15a")
    """§2.10, §6.1: 5.1.1+ write the checkpoint's confirmPhyOffset (start of the last valid record)."""

    dispatches_at_put_time = _rule(before="E1")
    """§2.11: the 3.2.6 master writes queue and index entries at put time: no reput service re-dispatches after a clean stop."""

    reput_from_cq_max = _rule("E5", before="E13")
    """§2.11: 4.5.0-4.9.8 ``start()`` re-dispatches from the max CQ physical offset and waits; 4.0-4.4 and 5.x reput from the log max."""

    @property
    def wrong_length_file_ignored(self) -> bool:
        """§2.13: 3.2.6-4.4.0 and 4.9.2 ``MappedFileQueue.load`` leave out a wrong-length file and every later one and start; others refuse."""
        return self.era.index < _BY_NAME["E5"].index or self.era.name == "E11"

    load_skips_directories = _rule("E14")
    """§2.13: 5.1.0+ ``MappedFileQueue.doLoad`` skips a directory; before, ``File.length`` of one is not the file size."""

    index_load_failure_refuses = _rule("E14")
    """§2.13: 5.1.0+ ``DefaultMessageStore.load`` takes ``IndexService.load``'s false (an index entry it cannot map) as a
    failed start; up to 5.0.0 it ignores it and starts without that entry and the later index files."""

    config_persisted_in_place = _rule("E14")
    """§7.4: 5.1.0+ ``MixAll.string2File`` writes the ``.bak`` from the old content, then the file in place; up to 5.0.0 it writes a
    ``.tmp``, deletes the file and renames the ``.tmp`` over it (a device node there is replaced, not written into)."""

    zero_length_last_file_deleted = _rule("E16")
    """§2.13: 5.1.3+ ``MappedFileQueue.doLoad`` deletes a zero-length last file ("size is 0, auto delete")."""

    @property
    def zero_length_last_file_refused(self) -> bool:
        """§2.13: 4.5.0-4.9.1 and 4.9.3-5.1.2 refuse to start on a zero-length last file ("length not matched")."""
        return not (self.wrong_length_file_ignored or self.zero_length_last_file_deleted)

    delay_table_missing_in_recovery = _rule("E11", before="E13")
    """§2.15: 4.9.2-4.9.8 load the schedule service after recovery: abnormal recovery's delay entries get the TAGS hash, not the delivery time."""

    delay_tags_from_pre_lock_time = _rule(before="E1")
    """§2.15: the 3.2.6 master dispatches at put time (``CommitLog.putMessage``) with a delivery time from ``System.currentTimeMillis()``
    before the put lock, the record stores ``SystemClock.now()`` inside it: a SCHEDULE_TOPIC_XXXX tags code can be a few ms off
    STORETIMESTAMP + delay (1-3 ms on the 3.2.6 fixture), which no rebuild recovers. 4.0.0+ dispatch from the record."""

    corrects_delay_offsets = _rule("E11")
    """§2.16: ``ScheduleMessageService.correctDelayOffset`` clamps delayOffset.json at load from 4.9.2."""

    # ---- §3 consume queue ---------------------------------------------------------------------

    cq_dedup_by_end = _rule("E5")
    """§3.1, §3.2, §3.4, §3.5: ``putMessagePositionInfo``/``recover``/``truncateDirtyLogicFiles``
    keep ``maxPhysicOffset`` as offset + size from 4.5.0; up to 4.4.0 as the entry's start offset."""

    cq_repeat_guard = _rule("E3a")
    """§3.3: 4.2.0+ ``putMessagePositionInfo`` skips an entry whose queue offset is written; before, it appends it where it is."""

    queue_id_parse_caught = _rule("E1")
    """(the reference omits it) 4.0.0+ ``DefaultMessageStore.loadConsumeQueue`` (5.x ``ConsumeQueueStore.load``, batch queues
    too) catch the ``NumberFormatException`` of ``Integer.parseInt`` on an entry of a topic's folder named by no queue id (a
    file or a directory: ``File.listFiles``) and skip it; 3.2.6's (@8abef783) does not: ``DefaultMessageStore.load`` catches
    it ("load exception") and returns false, so the broker does not start (``mappedfile.load_effect``)."""

    cq_min_offset_v5 = _rule("E13")
    """§3.7: 5.x ``correctMinOffset``: a queue whose last unit is below the commit log min is empty."""

    @property
    def lmq_rule(self) -> int:
        """§3.12: which ``INNER_MULTI_DISPATCH`` records ``checkMultiDispatchQueue`` skips (``LMQ_SKIP_*``): all before 4.9.3,
        none to 5.1.0, %RETRY% in 5.1.1, timer/schedule and "/" too in 5.1.2-5.1.4, every rmq_sys_ topic from 5.2.0."""
        index = self.era.index
        for since, rule in (("E17", LMQ_SKIP_SYSTEM), ("E15b", LMQ_SKIP_RETRY_TIMER_SCHEDULE), ("E15a", LMQ_SKIP_RETRY), ("E12", LMQ_SKIP_NONE)):
            if index >= _BY_NAME[since].index:
                return rule
        return NO_MULTI_DISPATCH

    # ---- §4, §5 dispatch and index ------------------------------------------------------------

    indexes_uniq_key_and_commit = _rule("E1")
    """§4.2: 4.0.0+ ``buildIndex`` indexes NOT, PREPARED and COMMIT records under UNIQ_KEY and KEYS; 3.2.6 NOT and PREPARED under KEYS."""

    @property
    def index_rule(self) -> int:
        """§4.2 (``IndexService.buildIndex``): ``INDEX_UNIQ_AND_KEYS`` from 4.0.0, ``INDEX_KEYS_ONLY`` in 3.2.6."""
        return INDEX_UNIQ_AND_KEYS if self.indexes_uniq_key_and_commit else INDEX_KEYS_ONLY

    index_counts_used_slots = _rule("E8")
    """§5.2: from 4.7.1 the index header's hashSlotCount counts newly used slots; before, every put."""

    # ---- §7 config files ------------------------------------------------------------------------

    reads_config_by_chars = _rule(before="E2")
    """§7.4: 3.2.6's and 4.0.0's ``MixAll.file2String`` reads a ``FileReader`` into a char array of the file's byte length and
    returns null where fewer chars come (non-ASCII UTF-8) or the open throws (caught); 4.1.0+ read the bytes and throw."""

    # ---- §8 5.x stores ---------------------------------------------------------------------------

    dledger_commitlog = _rule("E5")
    """§8.3, §8.4: from 4.5.0 a DLedger commit log; its first load of a classic one writes an end-of-file blank at the recovered end."""

    dledger_commit_reads_entry = _rule("E5", before="E12")
    """§8.3: DLedger 0.1 and 0.2.2 (4.5.0-4.9.2) ``updateCommittedIndex`` reads the committed entry through ``get`` (its index unit,
    then the entry there, whose pos must be the unit's), which throws at load on a stale unit; 0.2.3+ (4.9.3+) read the unit alone
    (``getEntryPosAndSize``, DLedgerMmapFileStore @dledger-0.2.2, 0.2.3)."""

    dledger_abnormal_redispatch = _rule("E17")
    """§8.4: from 5.2.0 a DLedger store's abnormal recovery (``dledgerRecoverAbnormally``, apache/rocketmq#7355) picks a start file
    and re-dispatches; 4.5.0-5.1.4's ``recover`` does not."""

    clamps_timer_queue_offset = _rule("E18")
    """§8.1: 5.3.2+ ``TimerMessageStore.recover`` clamps the timer queue offset it resumes at to ``rmq_sys_wheel_timer`` queue 0's
    [min, max]; 5.0.0-5.3.1 resume at it as it is (timercheck's ``lastTimerQueueOffset`` where ``reviseQueueOffset`` fails)."""


# The rules a recovery or repair plan depends on: candidate eras that agree on all of them plan the same
PLANNING_RULES = (
    "accepts_v2_magic", "checks_record_length", "legacy_properties", "normal_start_from_cq_max",
    "normal_stops_at_length_mismatch", "normal_dispatches", "normal_truncates_cq", "empty_log_destroys_queues",
    "abnormal_stops_at_length_mismatch", "abnormal_truncates_cq_always", "writes_confirm_offset",
    "dispatches_at_put_time", "reput_from_cq_max", "wrong_length_file_ignored", "zero_length_last_file_deleted",
    "delay_table_missing_in_recovery", "cq_dedup_by_end", "cq_repeat_guard", "cq_min_offset_v5",
    "indexes_uniq_key_and_commit", "index_counts_used_slots", "v5", "dledger_commitlog", "dledger_abnormal_redispatch", "lmq_rule",
)


def planning_key(version: BrokerVersion, names=PLANNING_RULES) -> tuple:
    """The variants ``version`` follows of the rules ``names`` (the planning rules by default)."""
    rules = VersionRules(version)
    return tuple(getattr(rules, name) for name in names)


def rules_deciding(a: BrokerVersion, b: BrokerVersion) -> list[str]:
    """The planning rules whose variants differ between two versions."""
    ra, rb = VersionRules(a), VersionRules(b)
    return [name for name in PLANNING_RULES if getattr(ra, name) != getattr(rb, name)]
