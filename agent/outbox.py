"""The durable outbox: reports waiting for the leader's ack, and the attempts this agent runs.

Two lmdb tables in one environment, every write one synced transaction:
- reports, keyed by (fence, kind) big-endian, so a report for (fence, kind) is stored once and
  `pending()` returns them in fence order with STARTED before FINISHED for the same attempt;
- attempt records, keyed by fence: what a restarted agent needs to find its attempts again.

An attempt record lives from just before its process is started until the FINISHED or KILLED
report for it is acked; the ack removes both in the same transaction.

Acks are written lazily: `ack()` only marks the reports (they stop being pending at once) and
their deletion rides in the next synced write, or in a write of its own once
limits.MAX_LAZY_ACKS are waiting, or at `close()`. Nothing needs an ack to be durable: after a
crash an acked report is simply sent again, and the leader's verdict for it is final and
idempotent (a duplicate changes nothing). This takes one synced transaction off every report's
round trip.

`MemoryOutbox` is the same outbox over dicts (the simulation's disk): the rules are shared
(`_ends_record`, `_check_bounds`, the (fence, kind) order), the storage differs.
"""

from __future__ import annotations

import json
import struct
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import lmdb
import msgpack

from agent.model import TERMINAL_REPORT_KINDS, AttemptRecord, AttemptState, Report, ReportKey
from agent.store import StoreError, open_environment
from raftsched import limits

_REPORTS_DB = b"reports"
_ATTEMPTS_DB = b"attempts"
_REPORT_KEY = struct.Struct(">QB")
_FENCE_KEY = struct.Struct(">Q")


class OutboxFull(Exception):
    """A bound of the outbox would be crossed (RESOURCE_EXHAUSTED): nothing was written."""


class Outbox:
    def __init__(self, path: Path) -> None:
        self._env = open_environment(path)
        try:
            self._reports = self._env.open_db(_REPORTS_DB)
            self._attempts = self._env.open_db(_ATTEMPTS_DB)
        except lmdb.Error as error:
            self._env.close()
            raise StoreError(f"cannot open the outbox at {path}: {error}") from error
        self._lock = threading.Lock()
        self._acked: set[ReportKey] = set()
        """Acked reports whose deletion is not written yet (see the module docstring)."""
        self._ended: set[int] = set()
        """Fences whose FINISHED/KILLED report is in `_acked`: their record is gone, logically."""

    # -- writes (each one synced transaction) --------------------------------------------------

    def write(self, *, reports: Sequence[Report] = (), records: Sequence[AttemptRecord] = (),
              delete_records: Sequence[int] = ()) -> int:
        """Stores reports not already stored (same fence and kind), upserts and deletes attempt
        records, all in one synced transaction. Returns how many reports were new."""
        if not reports and not records and not delete_records:
            return 0
        added = 0
        with self._lock:
            acked = set(self._acked)
        with self._env.begin(write=True) as txn:
            self._delete_acked(txn, acked)
            for fence in delete_records:
                txn.delete(_FENCE_KEY.pack(fence), db=self._attempts)
            for record in records:
                assert record.fence >= 1
                txn.put(_FENCE_KEY.pack(record.fence), _encode(record.to_dict()),
                        db=self._attempts)
            for report in reports:
                assert report.fence >= 1
                if txn.put(_report_key(report.key), _encode(report.to_dict()),
                           db=self._reports, overwrite=False):
                    added += 1
            self._check_bounds(txn)
        self._forget_acked(acked)
        return added

    def put(self, reports: Sequence[Report]) -> int:
        return self.write(reports=reports)

    def ack(self, keys: Iterable[ReportKey]) -> int:
        """Drops the acked reports at once for every reader; an acked FINISHED or KILLED report
        also ends its attempt record. Written lazily (module docstring). Returns how many were
        pending."""
        dropped = 0
        with self._lock, self._env.begin() as txn:
            for key in keys:
                if key in self._acked or txn.get(_report_key(key), db=self._reports) is None:
                    continue
                self._acked.add(key)
                dropped += 1
                if key.kind in TERMINAL_REPORT_KINDS:
                    self._ended.add(key.fence)
            overdue = len(self._acked) >= limits.MAX_LAZY_ACKS
        if overdue:
            self.write_acks()
        return dropped

    def write_acks(self) -> None:
        """Write the lazily kept acks now (one synced transaction)."""
        with self._lock:
            acked = set(self._acked)
        if not acked:
            return
        with self._env.begin(write=True) as txn:
            self._delete_acked(txn, acked)
        self._forget_acked(acked)

    def _delete_acked(self, txn: Any, acked: set[ReportKey]) -> None:
        for key in acked:
            txn.delete(_report_key(key), db=self._reports)
            if key.kind in TERMINAL_REPORT_KINDS:
                self._end_record(txn, key.fence)

    def _forget_acked(self, acked: set[ReportKey]) -> None:
        with self._lock:
            self._acked -= acked
            self._ended -= {key.fence for key in acked if key.kind in TERMINAL_REPORT_KINDS}

    def _end_record(self, txn: Any, fence: int) -> None:
        raw = txn.get(_FENCE_KEY.pack(fence), db=self._attempts)
        if raw is not None and _ends_record(AttemptRecord.from_dict(_decode(raw))):
            txn.delete(_FENCE_KEY.pack(fence), db=self._attempts)

    def _check_bounds(self, txn: Any) -> None:
        """Raising inside the `with` aborts the transaction: nothing is written."""
        _check_bounds(int(txn.stat(self._reports)["entries"]),
                      int(txn.stat(self._attempts)["entries"]))

    # -- reads ---------------------------------------------------------------------------------

    def pending(self, limit: int) -> list[Report]:
        """Up to `limit` unacked reports, in (fence, kind) order, with at most
        REPORT_BATCH_MAX_OUTPUTS_BYTES of outputs (`_fits`)."""
        assert limit >= 1
        reports: list[Report] = []
        outputs = [0]
        with self._lock, self._env.begin() as txn:
            for _, value in txn.cursor(db=self._reports):
                report = Report.from_dict(_decode(value))
                if report.key in self._acked:
                    continue
                if not _fits(reports, report, outputs):
                    break
                reports.append(report)
                if len(reports) >= limit:
                    break
        return reports

    def has(self, key: ReportKey) -> bool:
        with self._lock, self._env.begin() as txn:
            return key not in self._acked and \
                txn.get(_report_key(key), db=self._reports) is not None

    def count(self) -> int:
        with self._lock, self._env.begin() as txn:
            return int(txn.stat(self._reports)["entries"]) - len(self._acked)

    def attempt(self, fence: int) -> AttemptRecord | None:
        with self._lock, self._env.begin() as txn:
            raw = txn.get(_FENCE_KEY.pack(fence), db=self._attempts)
            record = None if raw is None else AttemptRecord.from_dict(_decode(raw))
            ended = fence in self._ended
        if record is not None and ended and _ends_record(record):
            return None
        return record

    def attempts(self) -> list[AttemptRecord]:
        """Every attempt record, in fence order (at most limits.MAX_ATTEMPT_RECORDS)."""
        with self._lock, self._env.begin() as txn:
            records = [AttemptRecord.from_dict(_decode(value))
                       for _, value in txn.cursor(db=self._attempts)]
            ended = set(self._ended)
        return [r for r in records if not (r.fence in ended and _ends_record(r))]

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        self.write_acks()
        self._env.close()

    def __enter__(self) -> Outbox:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class MemoryOutbox:
    """`Outbox` over dicts, acks applied at once (an lmdb ack is only lazy on disk, never in
    what the readers see). Not thread-safe: the simulation has no threads."""

    def __init__(self) -> None:
        self._reports: dict[ReportKey, Report] = {}
        self._records: dict[int, AttemptRecord] = {}

    def write(self, *, reports: Sequence[Report] = (), records: Sequence[AttemptRecord] = (),
              delete_records: Sequence[int] = ()) -> int:
        new_records = dict(self._records)
        for fence in delete_records:
            new_records.pop(fence, None)
        for record in records:
            assert record.fence >= 1
            new_records[record.fence] = record
        new_reports = dict(self._reports)
        for report in reports:
            assert report.fence >= 1
            new_reports.setdefault(report.key, report)
        _check_bounds(len(new_reports), len(new_records))  # raises before anything is kept
        added = len(new_reports) - len(self._reports)
        self._reports, self._records = new_reports, new_records
        return added

    def put(self, reports: Sequence[Report]) -> int:
        return self.write(reports=reports)

    def ack(self, keys: Iterable[ReportKey]) -> int:
        dropped = 0
        for key in keys:
            if self._reports.pop(key, None) is None:
                continue
            dropped += 1
            record = self._records.get(key.fence)
            if key.kind in TERMINAL_REPORT_KINDS and record is not None and _ends_record(record):
                del self._records[key.fence]
        return dropped

    def write_acks(self) -> None:
        """Nothing to write: acks are applied at once."""

    def pending(self, limit: int) -> list[Report]:
        assert limit >= 1
        reports: list[Report] = []
        outputs = [0]
        for key in sorted(self._reports, key=_order)[:limit]:
            if not _fits(reports, self._reports[key], outputs):
                break
            reports.append(self._reports[key])
        return reports

    def has(self, key: ReportKey) -> bool:
        return key in self._reports

    def count(self) -> int:
        return len(self._reports)

    def attempt(self, fence: int) -> AttemptRecord | None:
        return self._records.get(fence)

    def attempts(self) -> list[AttemptRecord]:
        return [self._records[fence] for fence in sorted(self._records)]

    def close(self) -> None:
        """Nothing to close."""


def _ends_record(record: AttemptRecord) -> bool:
    """An acked FINISHED or KILLED report ends its attempt's record once the attempt finished
    (a record still RUNNING stays: its process may run)."""
    return record.state == AttemptState.FINISHED


def _check_bounds(reports: int, records: int) -> None:
    if reports > limits.MAX_PENDING_REPORTS or records > limits.MAX_ATTEMPT_RECORDS:
        raise OutboxFull(f"outbox full: {reports} reports (max {limits.MAX_PENDING_REPORTS}), "
                         f"{records} attempt records (max {limits.MAX_ATTEMPT_RECORDS})")


def _order(key: ReportKey) -> tuple[int, int]:
    """Reports go out in fence order, STARTED before FINISHED for one attempt (the lmdb key)."""
    return key.fence, int(key.kind)


def _report_key(key: ReportKey) -> bytes:
    return _REPORT_KEY.pack(*_order(key))


def _encode(data: dict[str, Any]) -> bytes:
    """A record or report as msgpack (a map): about 12x cheaper to encode than the JSON earlier
    versions wrote (7 us a report), which was a quarter of a busy agent's CPU."""
    packed: bytes = msgpack.packb(data, use_bin_type=True)
    return packed


def _decode(raw: bytes) -> dict[str, Any]:
    """msgpack, or the JSON object an earlier version stored (it starts with '{', which no
    msgpack map does): an agent upgraded over a data dir with pending reports still sends them."""
    value = bytes(raw)
    data = json.loads(value) if value[:1] == b"{" else msgpack.unpackb(value, raw=False)
    if not isinstance(data, dict):
        raise ValueError(f"an outbox value is not a map: {value[:40]!r}")
    return data


def _fits(batch: list[Report], report: Report, outputs: list[int]) -> bool:
    """Whether `report` joins `batch` within REPORT_BATCH_MAX_OUTPUTS_BYTES of outputs (a batch
    always takes its first report); `outputs[0]` carries the running total."""
    size = len(report.outputs)
    if batch and outputs[0] + size > limits.REPORT_BATCH_MAX_OUTPUTS_BYTES:
        return False
    outputs[0] += size
    return True
