"""The applied-entry audit file: records round-trip, restarts re-append identical entries, a
disagreement at one index is reported, and a torn tail is dropped."""

from __future__ import annotations

from pathlib import Path

from raftsched.replica.raft.applied_log import AppliedLogWriter, read_applied_log


def write(path: Path, records: list[tuple[int, bytes]]) -> None:
    writer = AppliedLogWriter(str(path))
    for index, data in records:
        writer.append(index, data)
    writer.close()


def test_round_trip_and_reapplied_entries(tmp_path: Path) -> None:
    path = tmp_path / "applied.log"
    write(path, [(1, b"a"), (2, b""), (5, b"c" * 1000)])
    write(path, [(1, b"a"), (2, b""), (5, b"c" * 1000), (6, b"d")])  # a restart re-applies
    log = read_applied_log(str(path))
    assert log.entries == {1: b"a", 2: b"", 5: b"c" * 1000, 6: b"d"}
    assert log.reapplied == 3
    assert log.conflicts == []
    assert log.torn_tail_bytes == 0


def test_a_different_entry_at_an_applied_index_is_a_conflict(tmp_path: Path) -> None:
    path = tmp_path / "applied.log"
    write(path, [(1, b"a"), (2, b"b"), (2, b"B")])
    log = read_applied_log(str(path))
    assert log.entries[2] == b"b"
    assert log.conflicts == [(2, b"b", b"B")]


def test_a_torn_tail_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "applied.log"
    write(path, [(1, b"abc"), (2, b"defgh")])
    data = path.read_bytes()
    path.write_bytes(data[:-2])
    log = read_applied_log(str(path))
    assert log.entries == {1: b"abc"}
    assert log.torn_tail_bytes == len(data) - 2 - (12 + 3)
