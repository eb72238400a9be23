"""``recover``'s plan keeps what verify's commit log check finds in the records its scan walks
(``store/walkedchain.py``), and ``verify_after``'s commit log check walks on from there
(``analyze_segment(walked=...)``): its findings, result and summary are those of verify's own
walk, on the real-broker fixtures, whole and damaged (a flipped body CRC, which ends the
recovery's walk but not verify's chain; a wrong PHYSICALOFFSET; a record overwritten with
garbage, a damaged range)."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import VERSIONS, copy_store, manifest
from test_recovery_verify_after import lose_queues_and_index

from mqtool.formats import commitlog as clfmt
from mqtool.recovery.planners import PlanOptions, plan_recover
from mqtool.recovery.repair import LOCAL_CHECKS
from mqtool.store.walkedchain import WalkedChain
from mqtool.store import Store
from mqtool.store import fastscan as fs
from mqtool.verify import Verification, VerifyOptions

BODY_CRC = clfmt.HEADER_LAYOUTS[(False, False)].offset_of("body_crc")
DAMAGES = ("none", "body-crc", "phys-offset", "garbage")


def damage(root, version: str, name: str, kind: str) -> int | None:
    """Damage the record in the middle of the manifest (its offset), or nothing."""
    if kind == "none":
        return None
    messages = manifest(version, name)["messages"]
    offset = messages[len(messages) // 2]["commitLogOffset"]
    with Store.open(root, version=version) as store:
        size = store.commitlog.file_size
    seg = root / "commitlog" / f"{offset // size * size:020d}"
    data = bytearray(seg.read_bytes())
    at = offset % size
    if kind == "body-crc":
        data[at + BODY_CRC] ^= 0x01
    elif kind == "phys-offset":
        data[at + fs.POS_PHYS_OFFSET + 7] ^= 0x01
    else:
        data[at : at + 16] = b"not a record!!!!"
    seg.write_bytes(data)
    return offset


def verified(root, walked):
    with Store.open(root) as store:
        run = Verification(store, VerifyOptions(checks=LOCAL_CHECKS))
        run.walked = walked
        findings = list(run.findings())
        summary = dataclasses.replace(run.summary, elapsed_s=0)
        return findings, run.commitlog, summary


CASES = [(v, n, k, True) for v in VERSIONS for n in ("clean-small", "crashed-small") for k in DAMAGES]
CASES += [(v, "crashed-small", k, False) for v in VERSIONS for k in ("none", "body-crc")]  # the checkpoint's start: a later segment


@pytest.mark.parametrize(("version", "name", "kind", "lose"), CASES)
def test_verify_on_the_plans_walk_is_verify_on_its_own(version, name, kind, lose, tmp_path):
    root = copy_store(version, name, tmp_path)
    if lose:
        lose_queues_and_index(root)  # a zeroed checkpoint: the abnormal recovery walks from the first segment
    victim = damage(root, version, name, kind)
    chain = WalkedChain()
    with Store.open(root, version=version) as store:
        plan = plan_recover(store, PlanOptions(mode="abnormal"), walked=chain)
        size, first = store.commitlog.file_size, store.commitlog.min_offset
    assert chain.runs and sum(r.records for r in chain.runs.values()) > 0
    if lose:
        assert first in chain.runs
    if kind == "body-crc" and lose:
        base = victim // size * size
        assert plan.commitlog.valid_end == victim
        assert chain.runs[base].end == victim - base  # the plan's walk stopped there; verify's chain goes on
        assert not chain.runs[base].crc
    if kind == "phys-offset" and victim // size * size in chain.runs:
        assert [p for p, _ in chain.runs[victim // size * size].phys] == [victim % size]
    walked = verified(root, chain.runs)
    alone = verified(root, None)
    assert walked == alone
    kinds = {f.kind for f in alone[0]}
    expected_kind = {"none": None, "body-crc": "crc-mismatch", "phys-offset": "phys-offset-mismatch", "garbage": "damaged-range"}[kind]
    assert expected_kind is None or expected_kind in kinds
