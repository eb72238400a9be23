"""Which recovery rules a broker version follows (reference §0.3, §5.10, §8.2-§8.12).

The store format barely changed from 4.0 to 5.3, but the recovery algorithm did: where normal and
abnormal recovery start, who re-dispatches consume queue and index entries and with which tags
code, whether consume queues are truncated, what the checkpoint keeps. ``RecoveryRules`` answers
each of those questions for one version, with the source it follows.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..store.version import BrokerVersion

V4_4_0 = BrokerVersion(4, 4, 0)
V4_5_1 = BrokerVersion(4, 5, 1)
V4_8_0 = BrokerVersion(4, 8, 0)
V4_9_1 = BrokerVersion(4, 9, 1)
V4_9_2 = BrokerVersion(4, 9, 2)
V4_9_8 = BrokerVersion(4, 9, 8)
V5_0_0 = BrokerVersion(5, 0, 0)
V5_1_0 = BrokerVersion(5, 1, 0)
V5_1_1 = BrokerVersion(5, 1, 1)
V5_3_2 = BrokerVersion(5, 3, 2)


@dataclass(frozen=True)
class RecoveryRules:
    version: BrokerVersion

    @property
    def v5(self) -> bool:
        return self.version >= V5_0_0

    @property
    def accepts_v2_magic(self) -> bool:
        """``isMappedFileMatchedRecover`` accepts MESSAGE_MAGIC_CODE_V2 from 5.1.0 (§8.4)."""
        return self.version >= V5_1_0

    @property
    def normal_start_from_cq_max(self) -> bool:
        """5.3.2+: normal recovery starts at the newest segment at or below the CQ max (§8.5);
        before, at the third-from-last segment."""
        return self.version >= V5_3_2

    @property
    def normal_dispatches(self) -> bool:
        """5.3.2+: normal recovery dispatches records past the CQ max (§8.5)."""
        return self.version >= V5_3_2

    @property
    def reput_from_cq_max(self) -> bool:
        """4.5.1-4.9.8: ``start()`` re-dispatches from the max CQ physical offset and waits for it
        (§8.12); 4.0-4.4 and 5.x start the reput at the commit log max."""
        return V4_5_1 <= self.version < V5_0_0

    @property
    def delay_table_missing_in_recovery(self) -> bool:
        """4.9.2-4.9.8 load the schedule service after recovery, so records dispatched by
        abnormal recovery get the TAGS hash instead of the delivery time (§3.5)."""
        return V4_9_2 <= self.version <= V4_9_8

    @property
    def cq_dedup_by_end(self) -> bool:
        """4.5.1+: ``putMessagePositionInfo`` skips ``offset + size <= maxPhysicOffset``;
        4.0-4.4: ``offset <= maxPhysicOffset`` (§5.10)."""
        return self.version >= V4_5_1

    @property
    def normal_truncates_cq(self) -> bool:
        """4.4.0+: normal recovery calls ``truncateDirtyLogicFiles`` (if the CQs reach past the end)."""
        return self.version >= V4_4_0

    @property
    def abnormal_truncates_cq_always(self) -> bool:
        """4.0-4.3: abnormal recovery truncates the CQs unconditionally (§8.6)."""
        return self.version < V4_4_0

    @property
    def writes_confirm_offset(self) -> bool:
        """5.1.1+: the checkpoint's confirmPhyOffset = start of the last valid record (§7, §8.5)."""
        return self.version >= V5_1_1

    @property
    def legacy_properties(self) -> bool:
        """Before 4.9.1 the broker parses properties with the split-based reader (§2.8)."""
        return self.version < V4_9_1

    @property
    def index_counts_used_slots(self) -> bool:
        """4.8.0+: the index header's hashSlotCount counts newly used slots, before every put (§6.2)."""
        return self.version >= V4_8_0

    @property
    def cq_min_offset_v5(self) -> bool:
        """5.x ``correctMinOffset``: a queue whose last unit is below the commit log min is empty (§5.9)."""
        return self.version >= V5_0_0
