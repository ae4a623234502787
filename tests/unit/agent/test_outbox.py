"""The outbox: survives reopen, dedupes by (fence, kind), keeps order, ack removes; attempt
records live until their terminal report is acked."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from agent.model import AttemptRecord, AttemptState, Report, ReportKey, ReportKind, Resources
from agent.outbox import MemoryOutbox, Outbox
from raftsched import limits
from tests.support import paths


def _report(fence: int, kind: ReportKind, reason: str = "") -> Report:
    return Report(kind, "job", f"t{fence}", fence, 0 if kind == ReportKind.FINISHED else None,
                  reason=reason)


def _record(fence: int, state: AttemptState = AttemptState.RUNNING) -> AttemptRecord:
    return AttemptRecord(fence, "job", f"t{fence}", 1, state, Resources(500, 64, 0),
                         f"/attempts/{fence}", 1_700_000_000_000, 4242, 99)


def test_reports_survive_reopen_in_fence_then_kind_order(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o") as outbox:
        assert outbox.put([_report(9, ReportKind.FINISHED), _report(3, ReportKind.STARTED),
                           _report(9, ReportKind.STARTED)]) == 3
    with Outbox(tmp_path / "o") as outbox:
        assert [(r.fence, r.kind) for r in outbox.pending(10)] == [
            (3, ReportKind.STARTED), (9, ReportKind.STARTED), (9, ReportKind.FINISHED)]
        assert outbox.pending(10)[2] == _report(9, ReportKind.FINISHED)
        assert len(outbox.pending(2)) == 2


def test_a_report_is_stored_once_per_fence_and_kind(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o") as outbox:
        assert outbox.put([_report(1, ReportKind.REJECTED, "first")]) == 1
        assert outbox.put([_report(1, ReportKind.REJECTED, "second")]) == 0
        assert outbox.count() == 1
        assert outbox.pending(5)[0].reason == "first"
        assert outbox.has(ReportKey(1, ReportKind.REJECTED))
        assert not outbox.has(ReportKey(1, ReportKind.STARTED))


def test_ack_removes_only_what_is_acked_and_survives_reopen(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o") as outbox:
        outbox.put([_report(1, ReportKind.STARTED), _report(2, ReportKind.STARTED)])
        assert outbox.ack([ReportKey(1, ReportKind.STARTED), ReportKey(7, ReportKind.KILLED)]) == 1
    with Outbox(tmp_path / "o") as outbox:
        assert [r.fence for r in outbox.pending(10)] == [2]
        # Acked, then stored again (a redelivery): it is pending again.
        assert outbox.put([_report(1, ReportKind.STARTED)]) == 1
        assert outbox.count() == 2


def test_attempt_records_survive_and_end_with_their_terminal_ack(tmp_path: Path) -> None:
    with Outbox(tmp_path / "o") as outbox:
        outbox.write(records=[_record(5), _record(6)], reports=[_report(5, ReportKind.STARTED)])
        outbox.write(records=[_record(5).finished()], reports=[_report(5, ReportKind.FINISHED)])
    with Outbox(tmp_path / "o") as outbox:
        assert outbox.attempt(5) == _record(5).finished()
        assert [r.fence for r in outbox.attempts()] == [5, 6]
        outbox.ack([ReportKey(5, ReportKind.STARTED)])
        assert outbox.attempt(5) is not None          # STARTED acked: still waiting to finish
        outbox.ack([ReportKey(6, ReportKind.KILLED)])
        assert outbox.attempt(6) is not None          # a RUNNING record is never dropped by ack
        outbox.ack([ReportKey(5, ReportKind.FINISHED)])
        assert outbox.attempt(5) is None
        assert outbox.count() == 0
        outbox.write(delete_records=[6])
        assert outbox.attempts() == []


CRASHING_CHILD = """
import os, sys
from pathlib import Path

import pytest
from agent.model import Report, ReportKey, ReportKind
from agent.outbox import MemoryOutbox, Outbox
outbox = Outbox(Path(sys.argv[1]))
outbox.put([Report(ReportKind.STARTED, "job", "t1", 1), Report(ReportKind.STARTED, "job", "t2", 2),
            Report(ReportKind.STARTED, "job", "t3", 3)])
outbox.ack([ReportKey(1, ReportKind.STARTED)])                 # lazy: not written
assert [r.fence for r in outbox.pending(10)] == [2, 3] and outbox.count() == 2
outbox.ack([ReportKey(2, ReportKind.STARTED)])
outbox.put([Report(ReportKind.FINISHED, "job", "t3", 3, 0)])    # carries both deletions
outbox.ack([ReportKey(3, ReportKind.STARTED)])                 # lazy again
os._exit(0)                                                    # no close(): a crash
"""


def test_acks_are_written_lazily_and_a_crash_only_resends(tmp_path: Path) -> None:
    """An ack needs no sync of its own: the next synced write carries it. After a crash the
    reports whose ack was not written yet are pending again (sent again: a duplicate verdict
    changes nothing), and nothing else is lost."""
    subprocess.run([sys.executable, "-c", CRASHING_CHILD, str(tmp_path / "o")], check=True,
                   timeout=60, cwd=paths.REPO)
    with Outbox(tmp_path / "o") as outbox:
        assert [(r.fence, r.kind) for r in outbox.pending(10)] == [
            (3, ReportKind.STARTED), (3, ReportKind.FINISHED)]
        outbox.ack([ReportKey(3, ReportKind.STARTED)])
    with Outbox(tmp_path / "o") as outbox:  # close() wrote it
        assert [(r.fence, r.kind) for r in outbox.pending(10)] == [(3, ReportKind.FINISHED)]


@pytest.mark.parametrize("seed", range(5))
def test_the_memory_outbox_answers_as_the_lmdb_outbox(tmp_path: Path, seed: int) -> None:
    """The simulation's outbox and the real one share the rules: the same writes and acks give
    the same answers (new reports, drops, pending order, records ended by a terminal ack)."""
    rng = random.Random(seed)
    memory = MemoryOutbox()
    kinds = list(ReportKind)
    with Outbox(tmp_path / "o") as real:
        for _ in range(150):
            fences = rng.sample(range(1, 9), rng.randint(1, 3))
            if rng.random() < 0.6:
                reports = [_report(f, rng.choice(kinds)) for f in fences]
                records = [_record(f, rng.choice(list(AttemptState))) for f in fences
                           if rng.random() < 0.4]
                deleted = [f for f in fences if rng.random() < 0.1]
                assert real.write(reports=reports, records=records, delete_records=deleted) \
                    == memory.write(reports=reports, records=records, delete_records=deleted)
            else:
                keys = [ReportKey(f, rng.choice(kinds)) for f in fences]
                assert real.ack(keys) == memory.ack(keys)
            assert real.pending(100) == memory.pending(100)
            assert (real.count(), real.attempts()) == (memory.count(), memory.attempts())
            assert [real.has(ReportKey(f, k)) for f in range(1, 9) for k in kinds] \
                == [memory.has(ReportKey(f, k)) for f in range(1, 9) for k in kinds]
            assert [real.attempt(f) for f in range(1, 9)] \
                == [memory.attempt(f) for f in range(1, 9)]


def test_an_outbox_an_earlier_version_wrote_in_json_is_read_and_drained(tmp_path: Path) -> None:
    """Earlier agents stored records and reports as JSON objects; an agent upgraded over that
    data dir reads them (and sends the reports), and writes msgpack from then on."""
    import json
    import struct

    from agent.store import open_environment

    report, record = _report(7, ReportKind.FINISHED, reason="done"), _record(7)
    env = open_environment(tmp_path / "o")
    with env.begin(write=True) as txn:
        txn.put(struct.pack(">QB", 7, int(ReportKind.FINISHED)),
                json.dumps(report.to_dict()).encode(), db=env.open_db(b"reports", txn=txn))
        txn.put(struct.pack(">Q", 7), json.dumps(record.to_dict()).encode(),
                db=env.open_db(b"attempts", txn=txn))
    env.close()
    with Outbox(tmp_path / "o") as outbox:
        assert outbox.pending(10) == [report] and outbox.attempt(7) == record
        outbox.put([_report(8, ReportKind.STARTED)])
    with Outbox(tmp_path / "o") as outbox:  # a mix of both encodings reads back in order
        assert [(r.fence, r.kind) for r in outbox.pending(10)] == [
            (7, ReportKind.FINISHED), (8, ReportKind.STARTED)]


@pytest.mark.parametrize("kind", ["lmdb", "memory"])
def test_outputs_survive_the_outbox_and_bound_a_batch_by_bytes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    monkeypatch.setattr(limits, "REPORT_BATCH_MAX_OUTPUTS_BYTES", 100)
    outbox = Outbox(tmp_path / "outbox") if kind == "lmdb" else MemoryOutbox()
    try:
        big = '{"v":"' + "x" * 60 + '"}'
        reports = [Report(ReportKind.FINISHED, "j", f"t{fence}", fence, 0, False, "", big)
                   for fence in (1, 2, 3)]
        reports.append(Report(ReportKind.FINISHED, "j", "bad", 4, 0, False, "not JSON", "",
                              True))
        outbox.put(reports)
        first = outbox.pending(limits.REPORT_BATCH_MAX)
        assert first == reports[:1]  # a second would pass the 100 bytes: it waits
        outbox.ack([first[0].key])
        assert outbox.pending(limits.REPORT_BATCH_MAX) == reports[1:2]
        outbox.ack([reports[1].key])
        assert outbox.pending(limits.REPORT_BATCH_MAX) == reports[2:]  # 68 bytes + none
    finally:
        outbox.close()
