"""An audit trail of every entry a replica applies: `index, length, bytes` records appended to one
file, in apply order, for the fault-injection harness (`raftsched replica --applied-log FILE`).

Indices pysyncobj applies itself (a new leader's no-op, a membership change) are recorded as
zero-length entries, so a gap means "not recorded here", never "nothing was there". After a
snapshot is loaded the file simply jumps past the indices the snapshot covers.

The file is append-only and never synced: after a kill -9 its tail may be missing, and after a
restart the entries the replica re-applies from its journal are appended again. A reader keeps
the first copy of each index and reports any later copy that differs (two different entries
applied at one index would break Raft's state machine safety). A torn last record is dropped.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from raftsched import limits

_HEADER = struct.Struct("<QI")


class AppliedLogWriter:
    """Appends one record per applied entry with a single unbuffered write (no torn records in
    the middle of the file even if the process is killed)."""

    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, index: int, data: bytes) -> None:
        os.write(self._fd, _HEADER.pack(index, len(data)) + data)

    def append_internal(self, indices: range) -> None:
        """Zero-length records for entries that never reach the state machine."""
        if indices:
            os.write(self._fd, b"".join(_HEADER.pack(index, 0) for index in indices))

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass
class AppliedLog:
    entries: dict[int, bytes] = field(default_factory=dict)
    """index -> the entry first recorded at that index (b"" for pysyncobj's own entries)."""
    conflicts: list[tuple[int, bytes, bytes]] = field(default_factory=list)
    """(index, first entry, a different later entry) for every disagreement within the file."""
    reapplied: int = 0
    """Records repeating an index already seen with the same bytes (re-applies after restarts)."""
    torn_tail_bytes: int = 0


def iter_records(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(index, entry) per complete record; stops at a torn or impossible record."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        index, length = _HEADER.unpack_from(data, offset)
        end = offset + _HEADER.size + length
        if length > limits.MAX_ENTRY_BYTES or end > len(data):  # corruption, not an entry
            return
        yield index, data[offset + _HEADER.size:end]
        offset = end


def read_applied_log(path: str) -> AppliedLog:
    with open(path, "rb") as source:
        data = source.read()
    log = AppliedLog()
    consumed = 0
    for index, entry in iter_records(data):
        consumed += _HEADER.size + len(entry)
        first = log.entries.get(index)
        if first is None:
            log.entries[index] = entry
        elif first == entry:
            log.reapplied += 1
        else:
            log.conflicts.append((index, first, entry))
    log.torn_tail_bytes = len(data) - consumed
    return log
