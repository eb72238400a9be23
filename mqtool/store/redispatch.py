"""What the next start re-dispatches into the queues and index by itself, and from where (§8.4, rules §2.3, §2.11)."""

from __future__ import annotations

from .startfile import abnormal_bound, log_recovery_mode, max_queue_phys_offset
from .store import Store


def abnormal_recovery_start(store: Store) -> tuple[int, str, int]:
    """(offset, why, time bound) of the abnormal recovery the abort file announces (§8.4; DLedger: ``dledger_start``)."""
    from .nextstart import start_of

    bound, _ = abnormal_bound(store)
    start = start_of(store)
    if start is None:
        from .dledgerstart import data_recovery, dledger_start

        start = dledger_start(store, data_recovery(store.commitlog), store.version or store.version_guess.candidates[0], mode="abnormal")
    return start.offset, start.rule, bound


def redispatch_start(store: Store) -> tuple[int | None, str]:
    """Where the next start re-dispatches into the queues and index, and why (rules §2.11, §8.4); None: it does not."""
    from .rules import VersionRules

    version, dledger = store.version, store.recovers_dledger_data
    unknown = None, "broker version unknown (pass --broker-version): assuming nothing is re-dispatched"
    if dledger and version is None and len({(r.reput_from_cq_max, r.dledger_abnormal_redispatch)
                                            for r in map(VersionRules, store.version_guess.candidates)}) > 1:
        return unknown
    mode = dispatching_recovery(store)
    if mode == "abnormal":
        start, _, _ = abnormal_recovery_start(store)
        whose = "DLedger's " if dledger else ""
        return start, f"the abort file is present, so {whose}abnormal recovery re-dispatches every record from offset {start}"
    if version is None and not dledger:
        return unknown
    who, rules = f"broker {version or store.version_guess.label}", store.rules
    nothing = "DLedger's recovery dispatches nothing; " if dledger else ""
    if mode == "normal":
        top = max_queue_phys_offset(store)
        return top + 1, f"{who}: normal recovery dispatches records after the consume queues' max offset {top}"
    if rules.reput_from_cq_max:
        top = max(max_queue_phys_offset(store), store.commitlog.min_offset, 0)
        return top, f"{who}: {nothing}the reput service resumes at the consume queues' max offset {top}"
    if dledger:  # 5.x: from getConfirmOffset() (``dledgerstart.reput_start``, as ``recovery.dledger.DLedgerLog.reput_from``)
        from .dledgerstart import data_recovery, reput_start

        start, where = reput_start(store.commitlog, data_recovery(store.commitlog))
        return start, f"{who}: {nothing}the reput service resumes at {where}"
    when = "after a clean shutdown" if not store.abort_present else "(DLedgerCommitLog recovers the classic log as after a clean stop)"
    return None, f"{who} does not re-dispatch records {when}"


def dispatching_recovery(store: Store) -> str | None:
    """The next start's dispatching recovery: "abnormal", 5.3.2+'s "normal" (rules §2.3, §8.4), or None."""
    if store.recovers_dledger_data:
        return "abnormal" if store.abort_present and store.rules.dledger_abnormal_redispatch else None
    mode = log_recovery_mode(store, store.rules)
    return mode if mode == "abnormal" or store.rules.normal_dispatches else None
