"""``mqtool dump timer STORE``: the 5.x timer store's units, each joined with its timer message and its fate
(``mqtool/scan/timer.py``)."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

from ..errors import BadInput
from ..scan.timer import TIMER_FIELDS, timer_report
from ..store.timer import TimerStore
from .common import note, open_store
from .output import OutputFormat, emit_rows

TIMER_TABLE = ("timer_log_offset", "offset", "delivery_time", "real_queue_id", "state", "uniq_key", "real_topic")  # topic last: a long one runs past the edge
TIMER_TABLE_OPTIONAL = ("timer_log_offset", "uniq_key", "delivery_time")
# the delivery's queue and topic headed as `info`'s "Next timer deliveries" heads them (one line at 100 columns)
TIMER_HEADERS = {"real_queue_id": "queue", "real_topic": "topic"}


def dump_timer(path: Path, fmt: OutputFormat, broker_config, broker_version, limit: int | None) -> None:
    with open_store(path, broker_config, broker_version) as store:
        timer = TimerStore.open(store.root) if store.root is not None else None
        if timer is None:
            raise BadInput(f"{path}: no timer store (timerlog/, timerwheel, config/timercheck): the broker ran without timerWheelEnable or before 5.0")
        report = timer_report(store, timer)
        emit_rows(islice(report.rows, limit), fmt, TIMER_FIELDS, TIMER_TABLE, optional=TIMER_TABLE_OPTIONAL, headers=TIMER_HEADERS)
        end = report.log_end
        note(f"timer log {'ends' if end.clean else 'stops'} at offset {end.offset} ({end.reason}); commit log logical end {report.commitlog_end}")
