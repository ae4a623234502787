"""The Raft adapter: the only module in raftsched that imports pysyncobj (pinned to 0.3.17).

`RaftNode` runs one replica. Everything about the log except consensus is ours (DESIGN.md §2, §4):

- **One replicated method** taking `bytes`: it runs `fsm.apply(state, entry)` on the tick thread
  under `self._lock`; readers on other threads take the same lock (`read`, `status`).
- **Durability.** pysyncobj's FileJournal is an mmap never msynced and its term/vote/commit meta
  is written without fsync. We give SyncObj our own `DurableJournal` (append-only file, CRC per
  record, `fdatasync` before this replica acks or applies an entry; term/vote written tmp + fsync
  + rename + dir fsync before the vote leaves). See "Durability points" below.
- **Snapshots** are `raftsched.snapshot` files written through pysyncobj's serializer hooks; the
  library's bookkeeping (last applied entry, the entry before it, cluster members) rides in the
  snapshot's `extra` record. Loading one replaces the State wholesale.
- **Security.** Every Raft frame is a pickle; only the cluster secret (Fernet, checked before
  unpickling) stands between the Raft port and code execution, so a replica refuses to start
  without one unless `insecure_dev`. It binds only `self_address`, never 0.0.0.0.
- **Outcomes.** `propose` returns the FSM outcome or raises `NotLeader` (nothing was appended) or
  `OutcomeUnknown` (may or may not commit: retry with the same request id). Never "failed".
- **Leadership** is confirmed by committing a `Barrier` (`is_leader_confirmed`), never by
  `_isLeader()` alone: an isolated pysyncobj leader believes it leads for leaderFallbackTimeout.

Durability points. Entries reach the journal through `DurableJournal.add` (a plain write into the
page cache: survives kill -9). `DurableJournal.sync` makes them durable (one `fdatasync` covers
every entry added since the last one: group commit). It runs:
(1) in `_SyncingTransport` before any message other than a leader's append_entries leaves this
    replica — above all a follower's acks (`next_node_idx`), which it holds back until the end
    of the tick and sends after one fdatasync, so a follower never acknowledges an entry it
    could lose;
(2) at the end of every tick (a tick callback, after pysyncobj appended the tick's new commands);
(3) before the FSM applies an entry (`_apply_committed`).
A leader sends new entries before its own copy is durable, as Raft allows (the leader's write
overlaps replication), but it counts itself in a quorum only at the start of a later tick —
after (2) synced every entry appended in earlier ticks: pysyncobj appends leader entries inside
`_onTick` (synced by (2) of the same tick) or, for the first no-op of a term, while handling a
vote in the poll — whose acks can only arrive in a later poll, after the next (2). So every
committed entry is durable on the leader and on each follower that acknowledged it; (3) is then a
checked invariant (`status()["durability"]["unsynced_applies"]` counts violations).

pysyncobj internals this module relies on (re-check them when changing the pinned version):
- `pysyncobj/syncobj.py`: `SyncObj.__init__` builds its journal with the module-global
  `createJournal(conf.journalFile)`; there is no parameter for it, so we replace that one global
  with a dispatcher (`_create_journal`) that returns our journal for paths a RaftNode registered
  and delegates to the original otherwise. This is the one monkeypatch, done at import.
- `SyncObj.__tryLogCompaction` passes the serializer `(None, last_applied_entry, previous_entry,
  cluster_nodes)`; `pysyncobj/serializer.py` `Serializer.serialize` calls our serializer with
  `data[1:]` (a 3-tuple: the state element is not passed at all) and the path `fullDumpFile +
  '.tmp'`, then renames it over `fullDumpFile`; `Serializer.deserialize` returns `(None,) +
  deserializer(fullDumpFile)`. A custom serializer disables pysyncobj's fork: it runs
  synchronously on the tick thread.
- `SyncObj.__loadDumpFile` clears the journal unless `journal[0] == data[2]` and
  `journal[1] == data[1]`; on startup we first align the journal to the dump (see
  `DurableJournal.align_to_dump`) so a crash between the dump rename and the journal compaction
  does not make pysyncobj drop acknowledged entries that follow the dump.
- `SyncObj.__onMessageReceived`: on a `next_node_idx` ack the leader moves the follower's
  nextIndex back to the ack's position although later entries are in flight, so the next
  append_entries re-sends them all; a follower truncates from `prevLogIdx + 1` whenever it holds
  more entries, even identical ones (CRITICAL "truncating already-applied log entries" when they
  were applied), then re-adds them. If a compaction (`__tryLogCompaction` ->
  `__deleteEntriesTo(serializeID)`) lands beyond the shortened log, FileJournal.deleteEntriesTo
  empties the whole log and every later tick fails on `self.__raftLog[-1]`: the replica is dead
  (DESIGN.md §4). We avoid and contain it in four layers: `_SyncingTransport` cuts the already
  carried prefix off re-sent append_entries (followers no longer truncate in steady state);
  `DurableJournal` truncates logically (re-added identical entries stay on disk);
  `DurableJournal.deleteEntriesTo` refuses a cut that would leave fewer than two entries (the
  dump stays valid, the older prefix stays, the next compaction retries); and a filter on
  pysyncobj's logger counts truncations and tick failures per replica
  (`status()["library_alarms"]`). The `next_node_idx` handler does not check the term, which is
  why held-back acks never overtake another message (see `_SyncingTransport`).
- Message dicts: `type` ('append_entries', 'next_node_idx', ...), and for append_entries
  `term`, `prevLogIdx`, `prevLogTerm`, `entries` or `transmission` or `serialized`; for
  next_node_idx `reset`, `success`. pysyncobj ignores `Transport.send`'s result for these.
- `TCPTransport.send` is the single exit for Raft messages (`transportClass` parameter);
  `addOnTickCallback`; properties `raftLastApplied`, `raftCommitIndex`, `raftCurrentTerm`,
  `otherNodes`; `_isLeader`, `_getLeader`, `transferLeadership`, `addNodeToCluster`,
  `removeNodeFromCluster`, `forceLogCompaction`, `destroy`, `tick_thread_alive`, `waitBinded`.

Threads: pysyncobj's one tick thread runs polling, elections, replication, apply, the serializer
and every callback. Never block in them. SyncObj's tick thread stops when the thread that built
it exits: construct RaftNode on a long-lived thread (the main thread).
"""

from __future__ import annotations

import fcntl
import functools
import logging
import os
import struct
import threading
import time
import uuid
import zlib
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import msgpack
import pysyncobj.syncobj as _pysyncobj_syncobj
from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj.config import FAIL_REASON
from pysyncobj.journal import Journal
from pysyncobj.node import TCPNode
from pysyncobj.transport import TCPTransport
from pysyncobj.version import VERSION as _PYSYNCOBJ_VERSION

from raftsched import limits
from raftsched.errors import Code, RaftschedError
from raftsched.replica.applied_log import AppliedLogWriter
from raftsched.state import fsm, snapshot
from raftsched.state.commands import Barrier, encode
from raftsched.state.fsm import Applied, Outcome, Rejected
from raftsched.state.model import State

logger = logging.getLogger(__name__)

PYSYNCOBJ_VERSION = "0.3.17"
"""The only pysyncobj this adapter was read against (see the internals listed above)."""
if _PYSYNCOBJ_VERSION != PYSYNCOBJ_VERSION:
    raise ImportError(
        f"raftsched.raft_node needs pysyncobj=={PYSYNCOBJ_VERSION}, found {_PYSYNCOBJ_VERSION}"
    )

# --- tuning (loopback / small clusters; see DESIGN.md §4) ----------------------------------------
RAFT_MIN_TIMEOUT_S = 0.4
RAFT_MAX_TIMEOUT_S = 1.0
"""Election timeout range. pysyncobj requires min > 3 x APPEND_ENTRIES_PERIOD_S."""
APPEND_ENTRIES_PERIOD_S = 0.1
"""Leader heartbeat period; with appendEntriesUseBatch=False new entries go out at once."""
CONNECTION_TIMEOUT_S = 60.0
"""A link with no traffic this long is dropped. Follower<->follower links are idle; a short value
made the first election after a leader crash fail (DESIGN.md §4)."""
CONNECTION_RETRY_S = 0.5
"""Reconnect attempts to an unreachable peer (pysyncobj default 5 s slows restarts)."""
LEADER_FALLBACK_TIMEOUT_S = 5.0
"""A leader without a majority's responses this long steps down (pysyncobj default 30 s)."""
BIND_RETRY_S = 0.5
MAX_BIND_ATTEMPTS = 6
"""The Raft port must bind within about MAX_BIND_ATTEMPTS x BIND_RETRY_S or start-up fails."""
COMMANDS_QUEUE_MAX = 20_000
"""Submissions waiting for the tick thread; beyond it pysyncobj answers QUEUE_FULL."""
MAX_PIPELINED_PROPOSALS = 10_000
"""Entries one `propose_many` call may submit."""
LOG_COMPACTION_MIN_ENTRIES = 20_000
LOG_COMPACTION_MIN_TIME_S = 600.0
"""A snapshot is written when the log holds more entries than this, or this long after the last
one. It runs synchronously on the tick thread, so its cost is the state's dump time."""
FIRST_TICK_TIMEOUT_S = 120.0
"""Start-up waits this long for the first tick, which loads the dump (seconds for big states)."""
CLOSE_TIMEOUT_S = 10.0
"""How long `close` waits for the tick thread to exit."""
TRANSFER_POLL_S = 0.02

JOURNAL_FILE_NAME = "raft.journal"
DUMP_FILE_NAME = "raft.dump"
LOCK_FILE_NAME = "raft.lock"
EXTRA_FORMAT = 1
"""Version of the pysyncobj bookkeeping we keep in a snapshot's `extra` record."""

_FAIL_NAMES = {
    value: name for name, value in vars(FAIL_REASON).items() if not name.startswith("_")
}
_RAFT_STATE_LEADER = 2
"""pysyncobj `_RAFT_STATE.LEADER`, as passed to `onStateChanged`."""

T = TypeVar("T")
Entry = tuple[bytes, int, int]
"""A pysyncobj log entry: (command bytes, index, term)."""


# --- errors -------------------------------------------------------------------------------------


class NotLeader(RaftschedError):
    """This replica is not the leader; nothing was appended. `leader` is the last known one."""

    def __init__(self, leader: str | None) -> None:
        where = f"the leader is {leader}" if leader else "no leader is known right now"
        super().__init__(Code.UNAVAILABLE, f"this replica is not the leader; {where}")
        self.leader = leader


class OutcomeUnknown(RaftschedError):
    """The command may or may not have committed."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            Code.DEADLINE_EXCEEDED,
            f"{detail}: the command may or may not have committed; retry with the same request id",
        )


# --- the journal --------------------------------------------------------------------------------

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
            logger.warning(
                "event raft_compaction_skipped cut=%d entries=%d first_index=%d",
                entryTo, len(self._entries), self.first_index(),
            )
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
        logger.info("event raft_journal_aligned_to_dump dropped=%d first_index=%d",
                    position, previous[1])
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
            logger.warning("event raft_journal_torn_tail path=%s dropped_bytes=%d",
                           self.path, size - self._end)
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


# --- hooking the journal into SyncObj (the one monkeypatch) -------------------------------------

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


# --- watching pysyncobj's own alarms ------------------------------------------------------------


@dataclass(slots=True)
class LibraryAlarms:
    """pysyncobj log lines that mean trouble, counted per replica (by tick thread)."""

    truncated_applied: int = 0
    """CRITICAL "truncating already-applied log entries" (see the module docstring)."""
    tick_failures: int = 0
    """"failed _onTick in _autoTickThread": an exception escaped a tick."""
    dump_failures: int = 0
    """"Failed to store full dump" / "failed to load full dump"."""


_ALARM_PREFIXES = (
    ("truncating already-applied", "truncated_applied"),
    ("failed _onTick", "tick_failures"),
    ("Failed to store full dump", "dump_failures"),
    ("failed to load full dump", "dump_failures"),
)


class _AlarmFilter(logging.Filter):
    def __init__(self) -> None:
        super().__init__()
        self.by_thread: dict[int, LibraryAlarms] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        alarms = self.by_thread.get(record.thread or 0)
        if alarms is not None and isinstance(record.msg, str):
            for prefix, counter in _ALARM_PREFIXES:
                if record.msg.startswith(prefix):
                    setattr(alarms, counter, getattr(alarms, counter) + 1)
        return True


_ALARM_FILTER = _AlarmFilter()
logging.getLogger("pysyncobj.syncobj").addFilter(_ALARM_FILTER)


# --- the SyncObj side ---------------------------------------------------------------------------


@dataclass(slots=True)
class ReplicationStats:
    trimmed_entries: int = 0
    """Entries not re-sent because this connection already carried them in this term."""
    tracking_resets: int = 0
    """Times a follower's reset, failure or reconnection made us forget what it was sent."""
    acks: int = 0
    ack_batches: int = 0
    """Acks sent, and flushes that sent any (one fdatasync each at most): group commit."""


@dataclass(slots=True)
class _Sent:
    """The last entry sent to one follower over its current connection, in one leader term."""

    term: int
    index: int
    index_term: int


class _SyncingTransport(TCPTransport):  # type: ignore[misc]
    """TCPTransport that (1) makes the journal durable before a message leaves, except a
    leader's `append_entries` (see "Durability points" in the module docstring), with group
    commit for follower acks, and (2) does not re-send entries a connection already carried.

    (1): a follower's acks (`next_node_idx`) are held back and sent together by `flush` — one
    fdatasync, then the acks in order — at the end of the tick, or before any other message so
    that the order of messages on the wire is always the order pysyncobj sent them in (an ack
    overtaken by a vote could otherwise reach a new leader as if it were about its log).

    (2): pysyncobj's leader moves a follower's nextIndex back to each ack's position while later
    entries are still in flight (`next_node_idx` handling in `SyncObj.__onMessageReceived`), so
    every new command re-sends all in-flight entries (up to 64 KiB per message), and the follower
    truncates and re-adds them ("truncating already-applied log entries"). Under pipelined load
    the backlog grows until followers miss heartbeats and elections churn. A leader's log is
    append-only within its term and TCP delivers in order, so we cut the already-sent prefix off
    the message: `prevLogIdx/prevLogTerm` move to the last entry already sent (its term is
    known), and the follower's own consistency check still guards the result — a follower that
    lacks it answers `reset`, and any reset, failure, reconnection, snapshot transmission or
    new term makes us forget what was sent, so pysyncobj's own retransmission takes over. The
    follower's reply (`prevLogIdx + 1 + len(entries)`) is what the untrimmed message would have
    produced, or further along when a heartbeat is re-pointed — and then true, since the
    follower verified that entry.
    """

    def __init__(self, syncObj: Any, selfNode: Any, otherNodes: Any,
                 journal: DurableJournal, on_tick: Callable[[], None]) -> None:
        self._journal = journal
        self._sent: dict[Any, _Sent] = {}
        self._acks: list[tuple[Any, Any]] = []
        self.replication = ReplicationStats()
        super().__init__(syncObj, selfNode, otherNodes)
        syncObj.addOnTickCallback(on_tick)

    def send(self, node: Any, message: Any) -> bool:
        kind = message.get("type") if isinstance(message, dict) else None
        if kind == "next_node_idx":
            self._acks.append((node, message))  # pysyncobj ignores send()'s result here
            return True
        if kind == "append_entries":
            if self._acks:
                self.flush()
            return self._send_now(node, self._trim(node, message))
        self.flush()
        return self._send_now(node, message)

    def flush(self) -> None:
        """Make the journal durable, then send the held-back acks in order."""
        self._journal.sync()
        acks, self._acks = self._acks, []
        for node, message in acks:
            self._send_now(node, message)
        self.replication.ack_batches += bool(acks)
        self.replication.acks += len(acks)

    def _send_now(self, node: Any, message: Any) -> bool:
        sent = bool(super().send(node, message))
        if not sent:
            self._forget(node)
        return sent

    def _trim(self, node: Any, message: dict[str, Any]) -> dict[str, Any]:
        entries = message.get("entries")
        if "prevLogIdx" not in message or "transmission" in message or entries is None:
            self._forget(node)  # snapshot or large-entry transmission: pysyncobj's own path
            return message
        term, previous = message["term"], message["prevLogIdx"]
        sent = self._sent.get(node)
        if sent is not None and sent.term == term and sent.index > previous:
            skip = min(sent.index - previous, len(entries))
            if skip == len(entries):  # nothing new: point it at the last entry already sent
                message = {**message, "prevLogIdx": sent.index, "prevLogTerm": sent.index_term,
                           "entries": []}
            else:
                message = {**message, "prevLogIdx": previous + skip,
                           "prevLogTerm": entries[skip - 1][2], "entries": entries[skip:]}
            self.replication.trimmed_entries += skip
            entries = message["entries"]
        if entries:
            last = entries[-1]
            self._sent[node] = _Sent(term, last[1], last[2])
        return message

    def _forget(self, node: Any) -> None:
        if self._sent.pop(node, None) is not None:
            self.replication.tracking_resets += 1

    def _onMessageReceived(self, node: Any, message: Any) -> None:
        if (isinstance(message, dict) and message.get("type") == "next_node_idx"
                and (message.get("reset") or not message.get("success"))):
            self._forget(node)
        super()._onMessageReceived(node, message)

    def _onNodeConnected(self, node: Any) -> None:
        self._forget(node)
        super()._onNodeConnected(node)

    def _onNodeDisconnected(self, node: Any) -> None:
        self._forget(node)
        super()._onNodeDisconnected(node)


class _ReplicatedLog(SyncObj):  # type: ignore[misc]
    def __init__(self, apply: Callable[[bytes, int], Outcome], self_address: str,
                 peers: list[str], conf: Any, transport_class: Any) -> None:
        self._raftsched_apply = apply
        super().__init__(self_address, peers, conf, transportClass=transport_class)

    @replicated  # type: ignore[untyped-decorator]
    def apply_entry(self, data: bytes) -> Outcome:
        # Inside a replicated method raftLastApplied + 1 is the index being applied.
        return self._raftsched_apply(data, int(self.raftLastApplied) + 1)


class _Replies:
    """Collects pysyncobj callbacks `(result, fail_reason)` for a batch of submissions."""

    _NONE: Any = object()

    def __init__(self, count: int) -> None:
        self.results: list[Any] = [None] * count
        self.reasons: list[Any] = [self._NONE] * count
        self._left = count
        self._lock = threading.Lock()
        self.done = threading.Event()
        if count == 0:
            self.done.set()

    def callback(self, position: int, result: Any, reason: Any) -> None:
        with self._lock:
            if self.reasons[position] is not self._NONE:
                return
            self.results[position] = result
            self.reasons[position] = reason
            self._left -= 1
            if self._left == 0:
                self.done.set()

    def replied(self, position: int) -> bool:
        return self.reasons[position] is not self._NONE


# --- RaftNode -----------------------------------------------------------------------------------


class RaftNode:
    """One Raft replica of the scheduler state.

    `peers` are the other members' `host:port` addresses (self may be included; it is ignored).
    A replica joining a running cluster is started with every current member as a peer and is
    then added with `add_replica` on the leader. Once a snapshot exists, the member list stored
    in it overrides `peers` on restart (pysyncobj issue #133): membership is replicated state.

    Callbacks run on pysyncobj's tick thread and must only signal, never block:
    `on_leader_change(is_leader)` when pysyncobj's own belief flips (confirm with
    `is_leader_confirmed` before acting), `on_applied(index)` after each FSM entry is applied or
    a snapshot is loaded.
    """

    def __init__(self, self_address: str, peers: list[str], data_dir: str, secret: str | None,
                 insecure_dev: bool = False,
                 on_leader_change: Callable[[bool], None] | None = None,
                 *, fsync: bool = True,
                 on_applied: Callable[[int], None] | None = None,
                 compaction_min_entries: int = LOG_COMPACTION_MIN_ENTRIES,
                 compaction_min_time_s: float = LOG_COMPACTION_MIN_TIME_S,
                 applied_log: str | None = None) -> None:
        _check_address(self_address)
        for peer in peers:
            _check_address(peer)
        if not secret and not insecure_dev:
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                "refusing to start a Raft replica without a cluster secret: every Raft frame is "
                "a pickle and only the secret lets a replica reject frames before unpickling "
                "them (anyone reaching the Raft port could run code). Set the secret, or pass "
                "insecure_dev for a throwaway local cluster",
            )
        if not secret:
            logger.warning("event raft_insecure_dev address=%s (Raft frames are unauthenticated)",
                           self_address)
        self._address = self_address
        self._configured_peers = sorted({p for p in peers if p != self_address})
        self._on_leader_change = on_leader_change
        self._on_applied = on_applied
        self._applied_log = AppliedLogWriter(applied_log) if applied_log else None
        self._lock = threading.Lock()
        self._state = State()
        self._state_index = 0
        self._membership_lock = threading.Lock()
        self._membership_pending: str | None = None
        self._tick_tasks: deque[Callable[[], None]] = deque()
        self._alarms = LibraryAlarms()
        self._tick_thread_id: int | None = None
        self._first_tick = threading.Event()
        self._transport: _SyncingTransport | None = None
        self._dumps_written = 0
        self._dumps_loaded = 0
        self._unsynced_applies = 0
        self._fatal: str | None = None
        self._closed = False
        self._data_dir = os.path.abspath(data_dir)
        os.makedirs(self._data_dir, exist_ok=True)
        self._lock_fd = _lock_data_dir(self._data_dir)
        try:
            self._start(secret or None, fsync, compaction_min_entries, compaction_min_time_s)
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _start(self, secret: str | None, fsync: bool, compaction_min_entries: int,
               compaction_min_time_s: float) -> None:
        journal_path = os.path.join(self._data_dir, JOURNAL_FILE_NAME)
        dump_path = os.path.join(self._data_dir, DUMP_FILE_NAME)
        self._journal = DurableJournal(journal_path, dump_path=dump_path, fsync=fsync)
        if self._journal.first_index() > 1 and not os.path.exists(dump_path):
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                f"{journal_path} was compacted but {dump_path} is missing: this replica cannot "
                "rebuild its state; wipe its data dir and re-add it",
            )
        conf = SyncObjConf(
            password=secret,
            bindAddress=self._address,
            appendEntriesUseBatch=False,
            appendEntriesPeriod=APPEND_ENTRIES_PERIOD_S,
            raftMinTimeout=RAFT_MIN_TIMEOUT_S,
            raftMaxTimeout=RAFT_MAX_TIMEOUT_S,
            connectionTimeout=CONNECTION_TIMEOUT_S,
            connectionRetryTime=CONNECTION_RETRY_S,
            leaderFallbackTimeout=LEADER_FALLBACK_TIMEOUT_S,
            bindRetryTime=BIND_RETRY_S,
            maxBindRetries=MAX_BIND_ATTEMPTS,
            commandsQueueSize=COMMANDS_QUEUE_MAX,
            commandsWaitLeader=False,
            dynamicMembershipChange=True,
            journalFile=journal_path,
            fullDumpFile=dump_path,
            serializer=self._write_dump,
            deserializer=self._read_dump,
            logCompactionMinEntries=compaction_min_entries,
            logCompactionMinTime=compaction_min_time_s,
            onStateChanged=self._on_state_changed,
        )

        def transport(sync_obj: Any, self_node: Any, other_nodes: Any) -> _SyncingTransport:
            self._transport = _SyncingTransport(sync_obj, self_node, other_nodes,
                                                journal=self._journal, on_tick=self._on_tick)
            return self._transport

        with _PENDING_JOURNALS_LOCK:
            _PENDING_JOURNALS[journal_path] = self._journal
        try:
            self._obj = _ReplicatedLog(self._apply_committed, self._address,
                                       self._configured_peers, conf, transport)
        finally:
            with _PENDING_JOURNALS_LOCK:
                _PENDING_JOURNALS.pop(journal_path, None)
        if not self._journal.claimed:
            self._obj.destroy()
            raise RuntimeError("pysyncobj did not build its journal through createJournal: "
                               "the adapter no longer matches the library")
        try:
            self._obj.waitBinded()
        except Exception as exc:
            self._obj.destroy()
            raise RaftschedError(Code.UNAVAILABLE,
                                 f"cannot bind the Raft port {self._address}") from exc
        # The first tick loads the dump (if any): wait for it so a replica that cannot rebuild
        # its state fails here, loudly, instead of serving an empty one.
        if not self._first_tick.wait(FIRST_TICK_TIMEOUT_S):
            logger.warning("event raft_slow_start address=%s waited_s=%g", self._address,
                           FIRST_TICK_TIMEOUT_S)
        if self._fatal is not None:
            self._obj.destroy()
            raise RaftschedError(Code.FAILED_PRECONDITION,
                                 f"Raft replica {self._address} cannot start: {self._fatal}")
        logger.info("event raft_started address=%s peers=%s data_dir=%s fsync=%s",
                    self._address, ",".join(self._configured_peers), self._data_dir, fsync)

    # -- tick thread --------------------------------------------------------------------------

    def _apply_committed(self, data: bytes, index: int) -> Outcome:
        if not self._journal.is_durable(index):
            self._journal.sync()
            if self._journal.fsync and not self._journal.is_durable(index):
                self._unsynced_applies += 1
        try:
            with self._lock:
                previous = self._state_index
                outcome = fsm.apply(self._state, data)
                self._state_index = index
        except BaseException as exc:
            # A bug in the FSM (a failed assertion): the state may be half-changed. Stop this
            # replica rather than let pysyncobj retry the entry on every tick.
            self._fail(f"apply of entry {index} raised {exc!r}")
            raise
        if self._applied_log is not None:
            # Indices between the last entry we applied and this one were pysyncobj's own
            # (no-ops of new leaders, membership changes): marked so the audit has no gaps.
            self._applied_log.append_internal(range(previous + 1, index))
            self._applied_log.append(index, data)
        if logger.isEnabledFor(logging.DEBUG):
            logger.debug("event raft_applied index=%d outcome=%r", index, outcome)
        self._notify_applied(index)
        return outcome

    def _notify_applied(self, index: int) -> None:
        """`on_applied(index)` runs on the tick thread: it must only signal, never block."""
        if self._on_applied is None:
            return
        try:
            self._on_applied(index)
        except Exception:
            logger.exception("event raft_applied_callback_failed index=%d", index)

    def _on_tick(self) -> None:
        if self._tick_thread_id is None:
            self._tick_thread_id = threading.get_ident()
            _ALARM_FILTER.by_thread[self._tick_thread_id] = self._alarms
            self._first_tick.set()
        if self._fatal is not None:
            obj = getattr(self, "_obj", None)  # a failure before the constructor returned
            if obj is not None:
                obj.destroy()  # idempotent
            return
        if self._transport is not None:
            self._transport.flush()
        self._journal.sync()
        while self._tick_tasks:
            task = self._tick_tasks.popleft()
            try:
                task()
            except Exception:
                logger.exception("event raft_tick_task_failed")

    def _on_state_changed(self, old: int, new: int) -> None:
        was_leader, is_leader = old == _RAFT_STATE_LEADER, new == _RAFT_STATE_LEADER
        if was_leader == is_leader:
            return
        obj = getattr(self, "_obj", None)  # None while SyncObj.__init__ is still running
        logger.info("event raft_leadership address=%s is_leader=%s term=%s",
                    self._address, is_leader, None if obj is None else obj.raftCurrentTerm)
        if self._on_leader_change is not None:
            try:
                self._on_leader_change(is_leader)
            except Exception:
                logger.exception("event raft_leader_callback_failed")

    def _write_dump(self, file_name: str, data: Any) -> None:
        """pysyncobj's serializer hook: `data` is (last applied entry, the one before, nodes).

        Runs on the tick thread, so the state cannot change under it and readers need not wait.
        """
        started = time.monotonic()
        try:
            last, previous, nodes = data
            last_entry = _entry_out(last)
            members = sorted(str(getattr(n, "id", n)) for n in nodes)
            extra = {"format": EXTRA_FORMAT, "last": last_entry,
                     "previous": _entry_out(previous), "members": members}
            with open(file_name, "wb") as out:
                snapshot.dump_to(out, self._state, extra)
                out.flush()
                if self._journal.fsync:
                    os.fsync(out.fileno())
        except BaseException:
            logger.exception("event raft_dump_write_failed file=%s", file_name)
            raise
        self._dumps_written += 1
        logger.info("event raft_dump_written index=%d members=%s elapsed_ms=%.1f",
                    last_entry[1], ",".join(members),
                    (time.monotonic() - started) * 1000)

    def _read_dump(self, file_name: str) -> tuple[Entry, Entry, set[Any]]:
        """pysyncobj's deserializer hook (startup and snapshot install): replaces the State."""
        try:
            with open(file_name, "rb") as source:
                state, extra = snapshot.load_with_extra(source)
            last, previous, members = _parse_extra(extra)
            self._journal.align_to_dump(previous, last)
        except BaseException as exc:
            # pysyncobj would log and carry on with whatever state it has: stop instead.
            self._fail(f"cannot load the snapshot {file_name}: {exc!r}")
            raise
        with self._lock:
            self._state = state
            self._state_index = last[1]
        self._dumps_loaded += 1
        self._notify_applied(last[1])
        logger.info("event raft_dump_loaded index=%d members=%s", last[1], ",".join(members))
        stored = sorted(m for m in members if m != self._address)
        if stored != self._configured_peers:
            # pysyncobj issue #133: the snapshot's member list replaces the configured peers.
            logger.info("event raft_members_from_dump configured=%s stored=%s",
                        ",".join(self._configured_peers), ",".join(stored))
        return last, previous, {TCPNode(m) for m in members}

    def _fail(self, reason: str) -> None:
        self._fatal = reason
        logger.critical("event raft_replica_stopped address=%s reason=%s", self._address, reason)
        if hasattr(self, "_obj"):
            self._obj.destroy()

    # -- writes -------------------------------------------------------------------------------

    def propose(self, data: bytes, timeout_s: float) -> Outcome:
        """Commit one entry and return its FSM outcome.

        Raises NotLeader (nothing appended; go to `.leader`) or OutcomeUnknown (it may still
        commit: retry with the same request id so the FSM dedupes it).
        """
        (result,) = self.propose_many([data], timeout_s)
        if isinstance(result, RaftschedError):
            raise result
        return result

    def propose_many(self, entries: list[bytes], timeout_s: float,
                     ) -> list[Outcome | RaftschedError]:
        """Submit every entry at once (pipelined) and wait for all, up to `timeout_s` in total.

        Each position holds the entry's outcome, or a NotLeader / OutcomeUnknown for it.
        Raises NotLeader before submitting anything if this replica is not the leader.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if len(entries) > MAX_PIPELINED_PROPOSALS:
            raise RaftschedError(Code.RESOURCE_EXHAUSTED,
                                 f"{len(entries)} entries in one call, over "
                                 f"MAX_PIPELINED_PROPOSALS={MAX_PIPELINED_PROPOSALS}")
        for data in entries:
            if len(data) > limits.MAX_ENTRY_BYTES:
                raise RaftschedError(Code.RESOURCE_EXHAUSTED,
                                     f"entry of {len(data)} bytes is over MAX_ENTRY_BYTES="
                                     f"{limits.MAX_ENTRY_BYTES}")
        self._check_running()
        if not self._obj._isLeader():
            raise NotLeader(self.leader_address())
        replies = _Replies(len(entries))
        for position, data in enumerate(entries):
            self._obj.apply_entry(data, callback=functools.partial(replies.callback, position))
        replies.done.wait(timeout_s)
        return [self._outcome(replies, position, timeout_s) for position in range(len(entries))]

    def _outcome(self, replies: _Replies, position: int,
                 timeout_s: float) -> Outcome | RaftschedError:
        if not replies.replied(position):
            return OutcomeUnknown(f"no commit within {timeout_s:g} s")
        result, reason = replies.results[position], replies.reasons[position]
        if reason == FAIL_REASON.SUCCESS:
            if isinstance(result, Applied | Rejected):
                return result
            return OutcomeUnknown(f"committed entry returned {result!r}, not an outcome")
        if reason in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER):
            return NotLeader(self.leader_address())
        return OutcomeUnknown(f"pysyncobj reported {_FAIL_NAMES.get(reason, reason)}")

    # -- reads --------------------------------------------------------------------------------

    def is_leader_confirmed(self, timeout_s: float) -> bool:
        """True only if a Barrier proposed now commits in this replica's term."""
        if self._fatal is not None or self._closed or not self._obj._isLeader():
            return False
        nonce = uuid.uuid4().hex
        # now_ms=0: the barrier must not move the state machine's clock (max of now_ms seen).
        try:
            outcome = self.propose(encode(Barrier(nonce, 0)), timeout_s)
        except RaftschedError:  # NotLeader, OutcomeUnknown, or stopped meanwhile
            return False
        return isinstance(outcome, Applied) and outcome.result == {"nonce": nonce}

    def read(self, fn: Callable[[State], T]) -> T:
        """`fn(state)` under the apply lock. Keep it short and never mutate the state.

        The state is this replica's: a follower's or a deposed leader's may be stale. For a
        current read, call `is_leader_confirmed` first (a commit after the read began)."""
        with self._lock:
            return fn(self._state)

    def state_time_ms(self) -> int:
        """The replicated time (`State.now_ms`) as applied here. Read without the apply lock
        (one attribute of the current state object): proposers call it while an apply runs."""
        return self._state.now_ms

    def read_indexed(self, fn: Callable[[State], T]) -> tuple[T, int]:
        """`read(fn)` and the index of the last entry the state reflects, taken together."""
        with self._lock:
            return fn(self._state), self._state_index

    def is_leader(self) -> bool:
        """pysyncobj's own belief; an isolated leader keeps it for leaderFallbackTimeout, so
        decide nothing on it alone (commit a barrier: `is_leader_confirmed`)."""
        return self._fatal is None and not self._closed and bool(self._obj._isLeader())

    def term(self) -> int:
        return int(self._obj.raftCurrentTerm)

    def leader_address(self) -> str | None:
        """The last leader this replica heard of (may be stale; may be itself)."""
        leader = self._obj._getLeader()
        return None if leader is None else str(leader.id)

    def members(self) -> list[str]:
        """The voting members in this replica's current configuration, itself included."""
        return sorted({self._address, *(str(n.id) for n in self._obj.otherNodes)})

    def status(self) -> dict[str, Any]:
        """A snapshot of this replica's view. `state_digest` dumps the state under the apply
        lock: it costs O(state)."""
        with self._lock:
            digest = fsm.digest_state(self._state)
            state_index = self._state_index
        journal = self._journal
        return {
            "self": self._address,
            "leader": self.leader_address(),
            "term": int(self._obj.raftCurrentTerm),
            "commit_index": int(self._obj.raftCommitIndex),
            "last_applied": int(self._obj.raftLastApplied),
            "is_leader": bool(self._obj._isLeader()),
            "members": self.members(),
            "state_digest": digest,
            "state_index": state_index,
            "log_first_index": journal.first_index(),
            "log_last_index": journal.last_index(),
            "durability": {
                "fsync": journal.fsync,
                "journal": type(journal).__name__,
                "journal_claimed": journal.claimed,
                "durable_index": journal.durable_index(),
                "unsynced_applies": self._unsynced_applies,
                **asdict(journal.stats),
            },
            "replication": asdict(self._transport.replication) if self._transport else {},
            "dumps_written": self._dumps_written,
            "dumps_loaded": self._dumps_loaded,
            "library_alarms": asdict(self._alarms),
            "membership_change": self._membership_pending,
            "fatal": self._fatal,
        }

    # -- membership ---------------------------------------------------------------------------

    def add_replica(self, address: str, timeout_s: float) -> None:
        """Add a voting member (call on the leader). Start the new replica with every current
        member as its peers. One membership change at a time."""
        _check_address(address)
        with self._membership_change(f"add {address}", timeout_s) as deadline:
            if address in self.members():
                raise RaftschedError(Code.ALREADY_EXISTS, f"{address} is already a member")
            self._change_membership(self._obj.addNodeToCluster, address, deadline)
        logger.info("event raft_member_added address=%s", address)

    def remove_replica(self, address: str, timeout_s: float) -> None:
        """Remove a voting member (call on the leader; the leader cannot remove itself)."""
        _check_address(address)
        with self._membership_change(f"remove {address}", timeout_s) as deadline:
            if address == self._address:
                raise RaftschedError(
                    Code.FAILED_PRECONDITION,
                    f"{address} is the leader and cannot remove itself: call "
                    "transfer_leadership() here, then remove it on the new leader",
                )
            if address not in self.members():
                raise RaftschedError(Code.NOT_FOUND, f"{address} is not a member")
            self._change_membership(self._obj.removeNodeFromCluster, address, deadline)
        logger.info("event raft_member_removed address=%s", address)

    def transfer_leadership(self, timeout_s: float, target: str | None = None) -> str:
        """Hand leadership to `target` (or the most caught-up follower); returns the new leader.

        pysyncobj sends Raft's TimeoutNow; success only means it was sent, so this polls until
        another leader is known.
        """
        deadline = time.monotonic() + timeout_s
        self._check_running()
        if not self._obj._isLeader():
            raise NotLeader(self.leader_address())
        replies = _Replies(1)
        callback = functools.partial(replies.callback, 0)
        # transferLeadership sends on the transport: it must run on the tick thread.
        self._tick_tasks.append(lambda: self._obj.transferLeadership(target, callback))
        replies.done.wait(max(0.0, deadline - time.monotonic()))
        if not replies.replied(0):
            raise OutcomeUnknown(f"leadership transfer not started within {timeout_s:g} s")
        if replies.reasons[0] != FAIL_REASON.SUCCESS:
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                f"pysyncobj refused the transfer ({_FAIL_NAMES.get(replies.reasons[0])}): the "
                "target must be a connected member whose log is fully caught up",
            )
        while time.monotonic() < deadline:
            leader = self.leader_address()
            if leader is not None and leader != self._address:
                return leader
            time.sleep(TRANSFER_POLL_S)
        raise OutcomeUnknown(f"no new leader within {timeout_s:g} s")

    @contextmanager
    def _membership_change(self, what: str, timeout_s: float) -> Iterator[float]:
        if not self._membership_lock.acquire(blocking=False):
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                f"cannot {what}: membership change '{self._membership_pending}' is in progress; "
                "changes are made one at a time",
            )
        try:
            self._membership_pending = what
            deadline = time.monotonic() + timeout_s
            # Also guarantees the leader's first entry of its term is applied, which pysyncobj
            # requires before any membership change.
            if not self.is_leader_confirmed(timeout_s):
                raise NotLeader(self.leader_address())
            yield deadline
        finally:
            self._membership_pending = None
            self._membership_lock.release()

    def _change_membership(self, submit: Callable[..., None], address: str,
                           deadline: float) -> None:
        replies = _Replies(1)
        submit(address, functools.partial(replies.callback, 0))
        replies.done.wait(max(0.0, deadline - time.monotonic()))
        if not replies.replied(0):
            raise OutcomeUnknown("membership change not committed in time (check members())")
        reason = replies.reasons[0]
        if reason == FAIL_REASON.SUCCESS:
            return
        if reason == FAIL_REASON.REQUEST_DENIED:
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                "pysyncobj denied the membership change: an earlier change is not committed yet",
            )
        if reason in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER):
            raise NotLeader(self.leader_address())
        raise OutcomeUnknown(f"membership change: pysyncobj reported {_FAIL_NAMES.get(reason)}")

    # -- admin --------------------------------------------------------------------------------

    def force_compaction(self) -> None:
        """Ask for a snapshot + log compaction at the next tick."""
        self._obj.forceLogCompaction()

    def close(self) -> None:
        """Stop the replica: close its connections and the journal, release the data dir."""
        if self._closed:
            return
        self._closed = True
        self._obj.destroy()
        deadline = time.monotonic() + CLOSE_TIMEOUT_S
        while self._obj.tick_thread_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._obj.tick_thread_alive():
            logger.warning("event raft_close_timeout address=%s", self._address)
        else:
            self._journal._destroy()
            if self._applied_log is not None:
                self._applied_log.close()
        if self._tick_thread_id is not None:
            _ALARM_FILTER.by_thread.pop(self._tick_thread_id, None)
        os.close(self._lock_fd)
        logger.info("event raft_closed address=%s", self._address)

    def _check_running(self) -> None:
        if self._closed:
            raise RaftschedError(Code.UNAVAILABLE, "this Raft replica is closed")
        if self._fatal is not None:
            raise RaftschedError(Code.UNAVAILABLE, f"this Raft replica stopped: {self._fatal}")

    @property
    def address(self) -> str:
        return self._address

    @property
    def journal(self) -> DurableJournal:
        return self._journal


# --- helpers ------------------------------------------------------------------------------------


def _check_address(address: str) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise RaftschedError(Code.INVALID_ARGUMENT, f"not a host:port address: {address!r}")


def _lock_data_dir(data_dir: str) -> int:
    fd = os.open(os.path.join(data_dir, LOCK_FILE_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"{data_dir} is in use by another replica process") from None
    return fd


def _entry_out(entry: Any) -> list[Any]:
    command, index, term = entry
    return [command.encode() if isinstance(command, str) else bytes(command), int(index),
            int(term)]


def _entry_in(value: Any) -> Entry:
    if (not isinstance(value, list) or len(value) != 3 or not isinstance(value[0], bytes)
            or type(value[1]) is not int or type(value[2]) is not int):
        raise snapshot.SnapshotError(f"bad Raft entry in snapshot extra: {value!r:.80}")
    return value[0], value[1], value[2]


def _parse_extra(extra: Any) -> tuple[Entry, Entry, list[str]]:
    if not isinstance(extra, dict) or extra.get("format") != EXTRA_FORMAT:
        raise snapshot.SnapshotError("snapshot has no Raft bookkeeping (not written by a replica)")
    members = extra.get("members")
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        raise snapshot.SnapshotError("snapshot extra: bad member list")
    last, previous = _entry_in(extra.get("last")), _entry_in(extra.get("previous"))
    if previous[1] + 1 != last[1]:
        raise snapshot.SnapshotError("snapshot extra: entries are not consecutive")
    return last, previous, members
