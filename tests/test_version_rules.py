"""The rule table (``mqtool/store/rules.py``) against ``rocketmq-rules-by-version.md``: each rule flips
exactly at the releases the reference names, on both sides of each boundary, including the 4.9.5-4.9.8
branch (which has no rule first seen in 5.0.0) and the eras no fixture store comes from."""

from __future__ import annotations

import pytest

from mqtool.errors import UnknownStoreVersion
from mqtool.store.rules import ERAS, RELEASES, BrokerVersion, VersionRules, era_of

# (rule, the releases where it holds) as the reference's rows give them; every release not listed has the
# other variant. Row numbers of the reference in the comments.
HOLDS = {
    "checks_record_length": "4.0.0-5.3.3",  # 1.3
    "stale_blank_fill": "3.2.6-4.9.0",  # 1.12
    "legacy_properties": "3.2.6-4.9.0",  # 1.10
    "accepts_v2_magic": "5.1.0-5.3.3",  # 1.1
    "normal_start_from_cq_max": "5.3.2-5.3.3",  # 2.1
    "normal_stops_at_length_mismatch": "4.0.0-5.3.3",  # 2.2
    "normal_dispatches": "5.3.2-5.3.3",  # 2.3
    "normal_truncates_cq": "4.3.2-5.3.3",  # 2.4
    "empty_log_destroys_queues": "4.5.0-5.3.3",  # 2.5
    "abnormal_stops_at_length_mismatch": "4.3.2-5.3.3",  # 2.7
    "abnormal_truncates_cq_always": "3.2.6-4.3.1",  # 2.8
    "writes_confirm_offset": "5.1.1-5.3.3",  # 2.10
    "dispatches_at_put_time": "3.2.6-3.2.6",  # 2.11
    "reput_from_cq_max": "4.5.0-4.9.8",  # 2.11
    "wrong_length_file_ignored": "3.2.6-4.4.0 4.9.2-4.9.2",  # 2.13
    "zero_length_last_file_deleted": "5.1.3-5.3.3",  # 2.13
    "zero_length_last_file_refused": "4.5.0-4.9.1 4.9.3-5.1.2",  # 2.13
    "delay_table_missing_in_recovery": "4.9.2-4.9.8",  # 2.15
    "corrects_delay_offsets": "4.9.2-5.3.3",  # 2.16
    "cq_dedup_by_end": "4.5.0-5.3.3",  # 3.1-3.5
    "cq_repeat_guard": "4.2.0-5.3.3",  # 3.3
    "cq_min_offset_v5": "5.0.0-5.3.3",  # 3.7
    "indexes_uniq_key_and_commit": "4.0.0-5.3.3",  # 4.2
    "index_counts_used_slots": "4.7.1-5.3.3",  # 5.2
    "dledger_abnormal_redispatch": "5.2.0-5.3.3",  # 8.4
}


def holds_at(spans: str, version: BrokerVersion) -> bool:
    for span in spans.split():
        first, last = (BrokerVersion.parse(v) for v in span.split("-"))
        if first <= version <= last:
            return True
    return False


@pytest.mark.parametrize("rule", sorted(HOLDS))
def test_each_rule_holds_exactly_in_the_releases_the_reference_names(rule):
    wrong = [str(v) for v in RELEASES if getattr(VersionRules(v), rule) != holds_at(HOLDS[rule], v)]
    assert not wrong, f"{rule} disagrees with the reference at {wrong}"


def test_the_eras_cover_every_release_once_in_order():
    assert [era_of(v).name for v in RELEASES] == sorted((era_of(v).name for v in RELEASES), key=lambda n: [e.name for e in ERAS].index(n))
    assert {era_of(v) for v in RELEASES} == set(ERAS)
    assert all(era_of(e.representative) == e and e.first <= e.representative <= e.last for e in ERAS)


@pytest.mark.parametrize("text,version", [("4.4.0", "4.4.0"), ("rocketmq-all-4.5.1", "4.5.1"), ("v5.3.3", "5.3.3"), ("4.0.0-incubating", "4.0.0"), ("5.3.9", "5.3.9")])
def test_every_release_and_its_usual_spellings_are_accepted(text, version):
    assert str(BrokerVersion.parse(text)) == version


@pytest.mark.parametrize("text", ["4.3.5", "3.5.0", "9.9.9", "5.4.0", "abc", "4..0"])
def test_what_is_no_release_is_refused(text):
    with pytest.raises(UnknownStoreVersion):
        BrokerVersion.parse(text)


def test_a_5_3_x_after_the_last_known_release_follows_5_3_3():
    assert era_of(BrokerVersion.parse("5.3.9")).name == era_of(BrokerVersion.parse("5.3.3")).name == "E18"
