"""The durable Raft journal: pysyncobj's Journal interface over an append-only file we fsync.

pysyncobj's FileJournal is an mmap never msynced and its term/vote/commit meta is written without
fsync; `DurableJournal` replaces it (CRC per record, `fdatasync` before this replica acks or
applies an entry, meta written tmp + fsync + rename + dir fsync). SyncObj builds its journal with
the module-global `createJournal`, with no parameter for it, so this module replaces that one
global with a dispatcher that hands out journals registered with `pending_journal` and delegates
to the original otherwise, at import (`dumps.py` patches one more global the same way). See
`raftsched.replica.raft.node` for where the journal's `sync` runs (the durability points).
"""

from __future__ import annotations

import os
import struct
import threading
import zlib
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import msgpack
import pysyncobj.syncobj as _pysyncobj_syncobj
from pysyncobj.journal import Journal

from raftsched.errors import Code, RaftschedError
from raftsched.eventlog import EventLogger

log = EventLogger("raftsched.replica.raft")

Entry = tuple[bytes, int, int]
"""A pysyncobj log entry: (command bytes, index, term)."""


_JOURNAL_MAGIC = b"RSRAFTJ\x01"
_RECORD = struct.Struct("<IIQQ")
"""Record header: command length, crc32 of (index, term, command), index, term."""
_INDEX_TERM = struct.Struct("<QQ")


@dataclass(slots=True)
class JournalStats:
    data_syncs: int = 0
    """fdatasync calls on the journal file."""
    meta_syncs: int = 0
    """Durable writes of the term/vote/commit meta file."""
    dir_syncs: int = 0
    rewrites: int = 0
    """Atomic rewrites (log compaction, alignment to a dump)."""
    readopted: int = 0
    """Entries pysyncobj truncated and re-added unchanged: kept on disk, not rewritten."""
    skipped_compactions: int = 0
    """Compactions refused because they would have emptied the log (see module docstring)."""
    torn_tail_bytes: int = 0
    """Bytes of an incomplete last record dropped at open (a crash during a write)."""


class DurableJournal(Journal):  # type: ignore[misc]
    """pysyncobj's Journal interface over an append-only file we fsync ourselves.

    Called only from the tick thread (and the constructor before it starts). `add`, `clear` and
    `deleteEntriesFrom` change the file in the page cache; `sync` makes every change durable.
    Operations that drop a prefix of the log (`clear`, `deleteEntriesTo`) first make the dump
    durable, since the dropped entries then live only there.

    Suffix truncation is logical. pysyncobj's follower truncates everything after `prevLogIdx`
    on every append_entries that overlaps its log, even when the leader merely re-sends entries
    it already has (the leader's nextIndex moves back on each in-flight ack) — then re-adds them.
    Truncating the file would open a window where entries this replica acknowledged (and that
    may be committed) are on disk nowhere here. So truncated records stay in the file as a
    "shadow" tail; an `add` equal to the shadow's first record adopts it without writing; the
    first different `add` (a real conflict) cuts the file there. After a crash the shadow tail
    reappears as log entries: a state this replica really held, which Raft tolerates (a
    committed entry in it matches the leader's; an uncommitted one is overwritten again).
    """

    def __init__(self, path: str, *, dump_path: str, fsync: bool = True) -> None:
        self.path = path
        self.fsync = fsync
        self.stats = JournalStats()
        self.claimed = False
        """Set when pysyncobj's createJournal handed this object to a SyncObj."""
        self._meta_path = path + ".meta"
        self._dump_path = dump_path
        self._dir = os.path.dirname(os.path.abspath(path))
        self._entries: list[Entry] = []
        self._offsets: list[int] = []
        self._end = len(_JOURNAL_MAGIC)
        """Logical end: where the next record goes."""
        self._shadow: deque[Entry] = deque()
        """Records on disk between `_end` and `_file_end` (logically truncated)."""
        self._file_end = self._end
        self._synced_end = self._end
        """Bytes [0, _synced_end) of the file as it is now are durable."""
        self._dirty = False
        self._meta: dict[str, Any] = self._read_meta()
        self._meta_dirty = False
        self._fd: int | None = self._open()

    # -- pysyncobj's Journal interface --------------------------------------------------------

    def add(self, command: Any, idx: int, term: int) -> None:
        data = command.encode() if isinstance(command, str) else bytes(command)
        if self._entries:
            assert idx == self._entries[-1][1] + 1, f"journal gap: {self._entries[-1][1]} -> {idx}"
        if self._shadow:
            if self._shadow[0] == (data, idx, term):
                self._shadow.popleft()
                self._append(data, idx, term)
                self.stats.readopted += 1
                return
            self._cut_file(self._end)
        crc = zlib.crc32(data, zlib.crc32(_INDEX_TERM.pack(idx, term)))
        self._write(_RECORD.pack(len(data), crc, idx, term), self._end)
        self._write(data, self._end + _RECORD.size)
        self._append(data, idx, term)
        self._file_end = self._end
        self._dirty = True

    def clear(self) -> None:
        self._make_dump_durable()
        self._entries = []
        self._offsets = []
        self._cut_file(len(_JOURNAL_MAGIC))
        self._end = len(_JOURNAL_MAGIC)

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        if entryFrom >= len(self._entries):
            return
        self._shadow.extendleft(reversed(self._entries[entryFrom:]))
        self._end = self._offsets[entryFrom]
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]

    def deleteEntriesTo(self, entryTo: int) -> None:
        if entryTo <= 0:
            return
        if entryTo > len(self._entries) - 2:
            # The log was cut below the snapshot point since the snapshot was taken (see the
            # module docstring). Compacting now would leave < 2 entries (pysyncobj's own journal
            # would leave none and the replica would fail on every tick). Keep the older prefix;
            # the dump stays valid and the next compaction retries.
            self.stats.skipped_compactions += 1
            log.warning("raft_compaction_skipped", cut=entryTo, entries=len(self._entries),
                        first_index=self.first_index())
            return
        self._make_dump_durable()
        self._rewrite(self._entries[entryTo:])

    def __getitem__(self, item: Any) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        if self._fd is None:
            return
        self.sync()
        if self._meta_dirty:
            self._write_meta()
        os.close(self._fd)
        self._fd = None

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:
        if self._meta.get("commit") != raftCommitIndex:
            self._meta["commit"] = int(raftCommitIndex)
            self._meta_dirty = True

    def getRaftCommitIndex(self) -> int:
        return int(self._meta.get("commit", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        # Raft: term and vote are durable before any message reflecting them is sent.
        self._meta["term"] = int(term)
        self._meta["voted_for"] = None if votedForNodeId is None else str(votedForNodeId)
        self._write_meta()

    def getCurrentTerm(self) -> int:
        return int(self._meta.get("term", 0))

    def getVotedForNodeId(self) -> str | None:
        voted = self._meta.get("voted_for")
        return None if voted is None else str(voted)

    def onOneSecondTimer(self) -> None:
        if self._meta_dirty:
            self._write_meta()

    # -- ours ---------------------------------------------------------------------------------

    def sync(self) -> None:
        """Make every change so far durable (one fdatasync for any number of entries)."""
        if not self._dirty or self._fd is None:
            return
        if self.fsync:
            os.fdatasync(self._fd)
            self.stats.data_syncs += 1
        self._dirty = False
        self._synced_end = self._file_end

    def is_durable(self, index: int) -> bool:
        """Whether the entry at `index` is in the log and on disk."""
        position = index - self.first_index()
        if not 0 <= position < len(self._entries):
            return False
        return self._record_end(position) <= self._synced_end

    def durable_index(self) -> int:
        """The last index of the log's durable prefix (0 if none)."""
        low, high = 0, len(self._entries)
        while low < high:
            middle = (low + high) // 2
            if self._record_end(middle) <= self._synced_end:
                low = middle + 1
            else:
                high = middle
        return self._entries[low - 1][1] if low else 0

    def first_index(self) -> int:
        try:
            return self._entries[0][1]
        except IndexError:
            return 0

    def last_index(self) -> int:
        try:
            return self._entries[-1][1]
        except IndexError:
            return 0

    def align_to_dump(self, previous: Entry, last: Entry) -> bool:
        """Drop the entries before `previous` if the journal holds `previous, last` further on.

        pysyncobj compacts the journal one tick after the dump is renamed into place; a crash in
        between leaves a new dump with an uncompacted journal, which `__loadDumpFile` would clear
        entirely — losing acknowledged entries that follow the dump. Returns True if it cut.
        """
        entries = self._entries
        if not entries or (len(entries) >= 2 and entries[0] == previous and entries[1] == last):
            return False
        position = previous[1] - entries[0][1]
        if position <= 0 or position + 1 >= len(entries):
            return False
        if entries[position] != previous or entries[position + 1] != last:
            return False
        log.info("raft_journal_aligned_to_dump", dropped=position, first_index=previous[1])
        self._make_dump_durable()
        self._rewrite(entries[position:])
        return True

    # -- files --------------------------------------------------------------------------------

    def _append(self, data: bytes, idx: int, term: int) -> None:
        self._entries.append((data, idx, term))
        self._offsets.append(self._end)
        self._end += _RECORD.size + len(data)

    def _record_end(self, position: int) -> int:
        return self._offsets[position] + _RECORD.size + len(self._entries[position][0])

    def _open(self) -> int:
        if not os.path.exists(self.path):
            self._create_empty(self.path)
        self._load()
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        size = os.fstat(fd).st_size
        if size != self._end:
            self.stats.torn_tail_bytes = size - self._end
            log.warning("raft_journal_torn_tail", path=self.path, dropped_bytes=size - self._end)
            os.ftruncate(fd, self._end)
        if self.fsync:
            # What a killed predecessor wrote may still be only in the page cache.
            os.fsync(fd)
        self._file_end = self._synced_end = self._end
        return fd

    def _create_empty(self, path: str) -> None:
        with open(path, "wb") as out:
            out.write(_JOURNAL_MAGIC)
            out.flush()
            if self.fsync:
                os.fsync(out.fileno())
        self._sync_dir()

    def _load(self) -> None:
        with open(self.path, "rb") as source:
            size = os.fstat(source.fileno()).st_size
            if source.read(len(_JOURNAL_MAGIC)) != _JOURNAL_MAGIC:
                raise RaftschedError(Code.FAILED_PRECONDITION,
                                     f"{self.path} is not a raftsched Raft journal")
            offset = len(_JOURNAL_MAGIC)
            while True:
                entry = self._read_record(source, offset, size)
                if entry is None:
                    break
                if self._entries and entry[1] != self._entries[-1][1] + 1:
                    raise self._corrupt(offset, "index gap")
                self._entries.append(entry)
                self._offsets.append(offset)
                offset += _RECORD.size + len(entry[0])
        self._end = offset

    def _read_record(self, source: Any, offset: int, size: int) -> Entry | None:
        """The record at `offset`, or None at the end or at a torn last record."""
        header = source.read(_RECORD.size)
        if len(header) < _RECORD.size:
            return None
        length, crc, idx, term = _RECORD.unpack(header)
        record_end = offset + _RECORD.size + length
        if record_end > size:
            return None
        data = source.read(length)
        if zlib.crc32(data, zlib.crc32(_INDEX_TERM.pack(idx, term))) != crc:
            if record_end >= size:
                return None
            raise self._corrupt(offset, "checksum mismatch before the last record")
        return data, idx, term

    def _corrupt(self, offset: int, what: str) -> RaftschedError:
        return RaftschedError(
            Code.FAILED_PRECONDITION,
            f"{self.path} is corrupt at byte {offset} ({what}); rebuild this replica from its "
            "peers: remove it from the cluster, wipe its data dir, add it back",
        )

    def _write(self, data: bytes, offset: int) -> None:
        assert self._fd is not None, "journal used after close"
        view = memoryview(data)
        while view:
            written = os.pwrite(self._fd, view, offset)
            view = view[written:]
            offset += written

    def _cut_file(self, offset: int) -> None:
        """Physically truncate the file at `offset`, dropping the shadow tail."""
        assert self._fd is not None, "journal used after close"
        os.ftruncate(self._fd, offset)
        self._shadow.clear()
        self._file_end = offset
        self._synced_end = min(self._synced_end, offset)
        self._dirty = True

    def _rewrite(self, entries: list[Entry]) -> None:
        """Replace the file by one holding `entries` then the shadow tail, atomically
        (tmp + fsync + rename + directory fsync)."""
        tmp_path = self.path + ".tmp"
        offsets: list[int] = []
        offset = len(_JOURNAL_MAGIC)
        with open(tmp_path, "wb") as out:
            out.write(_JOURNAL_MAGIC)
            for data, idx, term in [*entries, *self._shadow]:
                crc = zlib.crc32(data, zlib.crc32(_INDEX_TERM.pack(idx, term)))
                out.write(_RECORD.pack(len(data), crc, idx, term))
                out.write(data)
                offsets.append(offset)
                offset += _RECORD.size + len(data)
            out.flush()
            if self.fsync:
                os.fsync(out.fileno())
        os.replace(tmp_path, self.path)
        self._sync_dir()
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        self._entries = list(entries)
        self._offsets = offsets[: len(entries)]
        self._end = offsets[len(entries)] if len(offsets) > len(entries) else offset
        self._file_end = self._synced_end = offset
        self._dirty = False
        self.stats.rewrites += 1

    def _make_dump_durable(self) -> None:
        """The dump was renamed into place by pysyncobj without a directory fsync."""
        if not self.fsync:
            return
        if os.path.exists(self._dump_path):
            fd = os.open(self._dump_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self._sync_dir()

    def _sync_dir(self) -> None:
        if not self.fsync:
            return
        fd = os.open(self._dir, os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self.stats.dir_syncs += 1

    def _read_meta(self) -> dict[str, Any]:
        try:
            with open(self._meta_path, "rb") as source:
                meta = msgpack.unpackb(source.read(), raw=False)
        except FileNotFoundError:
            return {}
        except ValueError as exc:
            # Written tmp + fsync + rename, so damage is not a crash artefact. Guessing the term
            # or vote could let this replica vote twice in one term: refuse.
            raise RaftschedError(Code.FAILED_PRECONDITION,
                                 f"{self._meta_path} is unreadable: {exc}") from exc
        if not isinstance(meta, dict):
            raise RaftschedError(Code.FAILED_PRECONDITION, f"{self._meta_path} is not a map")
        return meta

    def _write_meta(self) -> None:
        tmp_path = self._meta_path + ".tmp"
        with open(tmp_path, "wb") as out:
            out.write(msgpack.packb(self._meta, use_bin_type=True))
            out.flush()
            if self.fsync:
                os.fsync(out.fileno())
        os.replace(tmp_path, self._meta_path)
        self._sync_dir()
        self._meta_dirty = False
        self.stats.meta_syncs += 1


# --- hooking the journal into SyncObj (a patched module global) ---------------------------------

_ORIGINAL_CREATE_JOURNAL = _pysyncobj_syncobj.createJournal
_PENDING_JOURNALS: dict[str, DurableJournal] = {}
_PENDING_JOURNALS_LOCK = threading.Lock()


def _create_journal(journalFile: Any = None) -> Any:
    with _PENDING_JOURNALS_LOCK:
        journal = _PENDING_JOURNALS.pop(journalFile, None) if journalFile else None
    if journal is None:
        return _ORIGINAL_CREATE_JOURNAL(journalFile)
    journal.claimed = True
    return journal


_pysyncobj_syncobj.createJournal = _create_journal


@contextmanager
def pending_journal(journal: DurableJournal) -> Iterator[None]:
    """While inside, a SyncObj built with `journalFile=journal.path` gets `journal`."""
    with _PENDING_JOURNALS_LOCK:
        _PENDING_JOURNALS[journal.path] = journal
    try:
        yield
    finally:
        with _PENDING_JOURNALS_LOCK:
            _PENDING_JOURNALS.pop(journal.path, None)
