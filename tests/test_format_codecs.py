"""The codecs written out in ``formats/`` equal what ``formats._layout`` derives from the construct
schemas (the single declaration of every layout): a schema change fails here, never drifts
silently. And importing the formats does not import construct (a lookup never parses a schema)."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest

from conftest import store_path
from mqtool.formats import checkpoint as cp
from mqtool.formats import commitlog as cl
from mqtool.formats import consumequeue as cq
from mqtool.formats import dledger as dl
from mqtool.formats import index as ix
from mqtool.formats import markers
from mqtool.formats import timer as tm
from mqtool.formats._layout import FixedLayout, derive_field, derive_fixed, derive_whole


def same_layout(written: FixedLayout, derived: FixedLayout) -> None:
    assert (written.names, written.codec.format, written.size) == (derived.names, derived.codec.format, derived.size)
    assert {k: v for k, v in written.offsets.items() if k is not None} == {k: v for k, v in derived.offsets.items() if k is not None}


@pytest.mark.parametrize(
    "written, schema",
    [
        (lambda: cp._FIELDS, lambda: derive_whole(cp.CheckpointStruct).codec),
        (lambda: cq.ENTRY, lambda: derive_whole(cq.ConsumeQueueEntryStruct).codec),
        (lambda: cq.EXT_UNIT_HEADER, lambda: derive_fixed(cq.ConsumeQueueExtUnitStruct).codec),
        (lambda: cq.BATCH_UNIT, lambda: derive_whole(cq.BatchConsumeQueueUnitStruct).codec),
        (lambda: ix.HEADER, lambda: derive_whole(ix.IndexHeaderStruct).codec),
        (lambda: ix.SLOT, lambda: derive_whole(ix.IndexSlotStruct).codec),
        (lambda: ix.ENTRY, lambda: derive_whole(ix.IndexEntryStruct).codec),
        (lambda: tm.UNIT, lambda: derive_whole(tm.TimerLogUnitStruct).codec),
        (lambda: tm.SLOT, lambda: derive_whole(tm.WheelSlotStruct).codec),
        (lambda: tm._CHECK, lambda: derive_whole(tm.TimerCheckStruct).codec),
        (lambda: cl.PROPERTIES_LENGTH, lambda: derive_field(cl.CommitLogMessageStruct, "properties_length")),
        *[(lambda m=m: cl.TOPIC_LENGTH[m], lambda m=m: derive_field(cl.CommitLogMessageStruct, "topic_length", {"magic_code": m})) for m in cl.MESSAGE_MAGICS],
    ],
    ids=["checkpoint", "cq-entry", "cq-ext-unit", "bcq-unit", "index-header", "index-slot", "index-entry", "timer-unit", "timer-slot", "timercheck",
         "properties-length", "topic-length-v1", "topic-length-v2"],
)
def test_written_codec_equals_the_schema_derivation(written, schema):
    assert written().format == schema().format
    assert written().size == schema().size


def test_written_layouts_equal_the_schema_derivation():
    same_layout(cl._PREFIX, derive_fixed(cl.CommitLogBlankStruct))
    for born_v6, store_v6 in itertools.product((False, True), repeat=2):
        flags = cl.SysFlag.BORNHOST_V6 * born_v6 | cl.SysFlag.STOREHOST_V6 * store_v6
        same_layout(cl.HEADER_LAYOUTS[(born_v6, store_v6)], derive_fixed(cl.CommitLogMessageStruct, {"sys_flag": flags}, stop_at="body"))
    same_layout(dl.ENTRY_HEADER_LAYOUT, derive_whole(dl.DLedgerEntryHeaderStruct))
    same_layout(dl.INDEX_UNIT_LAYOUT, derive_whole(dl.DLedgerIndexUnitStruct))
    same_layout(cq.ENTRY_LAYOUT, derive_whole(cq.ConsumeQueueEntryStruct))
    same_layout(cq.BATCH_UNIT_LAYOUT, derive_whole(cq.BatchConsumeQueueUnitStruct))
    same_layout(ix.ENTRY_LAYOUT, derive_whole(ix.IndexEntryStruct))


@pytest.mark.parametrize("version", ["4.9.7", "5.3.3"])
def test_the_abort_marker_equals_its_schema(version):
    raw = (store_path(version, "crashed-small") / "abort").read_bytes()
    assert markers.decode_abort(raw).content == markers.AbortFileStruct.parse(raw).content


def test_a_changed_schema_fails_the_comparison():
    """The comparison can fail: a layout with one field wider is not the written one."""
    from construct import Int64sb, Struct

    wider = Struct("phys_offset" / Int64sb, "size" / Int64sb, "tags_code" / Int64sb)
    assert derive_whole(wider).codec.format != cq.ENTRY.format


def test_the_formats_import_no_construct_until_a_schema_is_read():
    code = ("import sys, mqtool.formats, mqtool.formats.commitlog, mqtool.formats.consumequeue, mqtool.formats.index, mqtool.formats.checkpoint, "
            "mqtool.formats.timer, mqtool.formats.dledger, mqtool.formats.markers; before = 'construct' in sys.modules; "
            "from mqtool.formats import CommitLogMessageStruct; print(before, 'construct' in sys.modules, type(CommitLogMessageStruct).__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "True", "Struct"]


def test_an_unknown_name_is_an_attribute_error_without_building_the_schemas():
    code = "import sys, mqtool.formats.index as ix; print(hasattr(ix, 'NoSuchStruct'), 'construct' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == ["False", "False"]
