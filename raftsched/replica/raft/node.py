"""The Raft adapter: the only module in raftsched that imports pysyncobj (pinned to 0.3.17).

`RaftNode` runs one replica. Everything about the log except consensus is ours
(docs/architecture.md §2, §4):

- **One replicated method** taking `bytes`: on the tick thread it only hands the entry to the
  applier (applier.py), whose own thread runs `fsm.apply(state, entry)` in log order under
  `self._lock` — so a long apply never silences Raft; readers take the same lock (`read`,
  `status`); proposers get the outcome when the applier has it.
- **Durability.** pysyncobj's FileJournal is an mmap never msynced and its term/vote/commit meta
  is written without fsync. We give SyncObj our own `DurableJournal` (append-only file, CRC per
  record, `fdatasync` before this replica acks or applies an entry; term/vote written tmp + fsync
  + rename + dir fsync before the vote leaves). See "Durability points" below.
- **Snapshots** are `raftsched.state.snapshot` files written through pysyncobj's serializer hooks;
  the
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
(1) in `SyncingTransport` before any message other than a leader's append_entries leaves this
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
  with a dispatcher (`journal._create_journal`) that returns our journal for paths a RaftNode
  registered and delegates to the original otherwise. Likewise `SyncObj.__init__` builds its
  serializer from the module-global `Serializer`, which `dumps.py` replaces with a subclass that
  forks for our serializer; and `transport.py` replaces `TcpConnection` in `pysyncobj.tcp_server`
  and `pysyncobj.transport` (the two places that build connections) with one that bounds frame
  sizes before buffering them. These globals are the adapter's only patches, done at import.
- The serializer hooks (`__tryLogCompaction`, `Serializer.serialize`/`deserialize`, the fork):
  listed in `dumps.py`. `close` reaches the serializer as `SyncObj.__serializer` to wait for
  (or kill) a dump child in progress, and `Serializer.__pid` holds that child's pid.
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
  (docs/architecture.md §4). We avoid and contain it in four layers: `SyncingTransport` cuts the
  already
  carried prefix off re-sent append_entries (followers no longer truncate in steady state);
  `DurableJournal` truncates logically (re-added identical entries stay on disk);
  `DurableJournal.deleteEntriesTo` refuses a cut that would leave fewer than two entries (the
  dump stays valid, the older prefix stays, the next compaction retries); and a filter on
  pysyncobj's logger counts truncations and tick failures per replica
  (`status()["library_alarms"]`). The `next_node_idx` handler does not check the term, which is
  why held-back acks never overtake another message (see `SyncingTransport`).
- Message dicts: `type` ('append_entries', 'next_node_idx', ...), and for append_entries
  `term`, `prevLogIdx`, `prevLogTerm`, `entries` or `transmission` or `serialized`; for
  next_node_idx `reset`, `success`. pysyncobj ignores `Transport.send`'s result for these.
- `TCPTransport` hands every accepted connection to `_onNewIncomingConnection` before setting
  any callback on it, keeps it in `_unknownConnections` until its peer proved the secret and
  named itself (`_onIncomingMessageReceived`), and hears of every close in `_onDisconnected`;
  `_onTick` is its tick callback. `SyncingTransport` caps and times out unauthenticated
  connections there (transport.py, handshakes.py).
- `TCPTransport.send` is the single exit for Raft messages (`transportClass` parameter);
  `addOnTickCallback`; properties `raftLastApplied`, `raftCommitIndex`, `raftCurrentTerm`,
  `otherNodes`; `_isLeader`, `_getLeader`, `transferLeadership`, `addNodeToCluster`,
  `removeNodeFromCluster`, `forceLogCompaction`, `destroy`, `tick_thread_alive`, `waitBinded`.

Threads: pysyncobj's one tick thread runs polling, elections, replication, the serializer (a
fork) and every callback; never block in them. The applier thread applies entries. SyncObj's
tick thread stops when the thread that built it exits: construct RaftNode on a long-lived thread
(the main thread).
"""

from __future__ import annotations

import fcntl
import functools
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from typing import Any, BinaryIO, TypeVar

from pysyncobj import SyncObj, SyncObjConf, replicated
from pysyncobj import pickle as _pysyncobj_pickle
from pysyncobj.config import FAIL_REASON
from pysyncobj.node import TCPNode
from pysyncobj.version import VERSION as _PYSYNCOBJ_VERSION

from raftsched import limits
from raftsched.errors import Code, RaftschedError
from raftsched.eventlog import EventLogger
from raftsched.replica import gc_pause
from raftsched.replica.raft import membership
from raftsched.replica.raft.alarms import ALARM_FILTER, LibraryAlarms
from raftsched.replica.raft.applied_log import AppliedLogWriter
from raftsched.replica.raft.applier import Applier, PendingApply
from raftsched.replica.raft.dumps import (  # noqa: F401  (DUMP_LATCH_ENV: tests read it here)
    DUMP_FILE_NAME,
    DUMP_LATCH_ENV,
    Dumps,
    ForkingSerializer,
    wait_for_latch,
)
from raftsched.replica.raft.errors import NotLeader, OutcomeUnknown, fail_name
from raftsched.replica.raft.handshakes import ClosedConnections
from raftsched.replica.raft.journal import DurableJournal, Entry, pending_journal
from raftsched.replica.raft.port import RaftStatus
from raftsched.replica.raft.replies import ProposalObserver, Replies
from raftsched.replica.raft.transport import SyncingTransport
from raftsched.state import fsm, snapshot
from raftsched.state.commands import Barrier, encode
from raftsched.state.model import Change, State
from raftsched.state.outcome import Applied, Outcome, Rejected
from raftsched.state.results import BarrierResult

log = EventLogger(__name__)

PYSYNCOBJ_VERSION = "0.3.17"
"""The only pysyncobj this adapter was read against (see the internals listed above)."""
if _PYSYNCOBJ_VERSION != PYSYNCOBJ_VERSION:
    raise ImportError(
        f"raftsched.raft_node needs pysyncobj=={PYSYNCOBJ_VERSION}, found {_PYSYNCOBJ_VERSION}"
    )

PICKLE_PROTOCOL = 5
"""pysyncobj pickles every entry (`@replicated`) and every message with protocol 2, which
stores bytes as text (`_codecs.encode(str, "latin1")`: each byte over 0x7f becomes two, and
both ends go through a str). Our entries are msgpack, about a quarter such bytes: for a 500 KB
job, protocol 2 gave a 639 KB entry and took 14 ms to send and 5 ms to receive; protocol 5,
509 KB and 1.4 / 0.35 ms. Any Python 3 reads every protocol, so journals written before, and
replicas not yet upgraded, still read and are read."""
setattr(_pysyncobj_pickle, "__protocol", PICKLE_PROTOCOL)  # a module global, not name-mangled

# --- tuning (loopback / small clusters; see docs/architecture.md §4) --------------------------
RAFT_MIN_TIMEOUT_S = 0.4
RAFT_MAX_TIMEOUT_S = 1.0
"""Election timeout range. pysyncobj requires min > 3 x APPEND_ENTRIES_PERIOD_S."""
APPEND_ENTRIES_PERIOD_S = 0.1
"""Leader heartbeat period; with appendEntriesUseBatch=False new entries go out at once."""
CONNECTION_TIMEOUT_S = 60.0
"""A link with no traffic this long is dropped. Follower<->follower links are idle; a short value
made the first election after a leader crash fail (docs/architecture.md §4)."""
CONNECTION_RETRY_S = 0.5
"""Reconnect attempts to an unreachable peer (pysyncobj default 5 s slows restarts)."""
LEADER_FALLBACK_TIMEOUT_S = 5.0
"""A leader without a majority's responses this long steps down (pysyncobj default 30 s)."""
BIND_RETRY_S = 0.5
MAX_BIND_ATTEMPTS = 6
"""The Raft port must bind within about MAX_BIND_ATTEMPTS x BIND_RETRY_S or start-up fails."""
APPEND_BATCH_BYTES = 2 * limits.MAX_ENTRY_BYTES + 64 * 1024
"""pysyncobj's appendEntriesBatchSizeBytes, set above the largest log entry there can be: a
proposal of MAX_ENTRY_BYTES pickled by `@replicated` with its call's framing (twice that under
pysyncobj's own protocol 2, which PICKLE_PROTOCOL replaces; the margin stays). pysyncobj sends
an entry over this size in chunks and marks the last chunk by the entry's length rather than by
the (larger) pickle it cuts up, so followers unpickled truncated data, failed their tick and
left the connection's other messages until the next heartbeat - 0.8 s for a 640 KB job, and a
stream of them stalled commits for good. Above every entry, that path never runs
(`ReplicationStats.chunked_appends` would count it). The cost: a follower catching up gets its
backlog in messages of up to this size."""
LOG_COMPACTION_MIN_ENTRIES = 20_000
LOG_COMPACTION_MIN_TIME_S = 600.0
"""A snapshot is written when the log holds more entries than this, or this long after the last
one. A forked child writes it (dumps.py): the tick thread pays only for the fork."""
FIRST_TICK_TIMEOUT_S = 120.0
"""Start-up waits this long for the first tick, which loads the dump (seconds for big states)."""
CLOSE_TIMEOUT_S = 10.0
"""How long `close` waits for the tick thread to exit, and then for a dump child in progress
(killed after that: the data dir is free only once no process of ours writes in it)."""

GC_FREEZE_ENTRY_BYTES = 64 * 1024
"""An entry this large (a job of a thousand tasks or more) is applied with the cyclic GC quiet
and its objects frozen afterwards (`gc_pause.frozen_after`). Measured with 4 clients submitting
40 jobs of 10,000 tasks: frozen from 1 MiB up, 18 leader changes (full collections walking the
growing state); from 64 KiB up, none."""

APPLY_LATCH_ENV = "RAFTSCHED_FAILPOINT_APPLY_LATCH"
"""Fault injection: a path. The applier creates PATH.waiting, then applies nothing until PATH
exists (at most dumps.DUMP_LATCH_MAX_WAIT_S): a test holds applies back and shows Raft goes on."""

BARRIER_TIMEOUT_S = 5.0
"""`fresh_dump` first proves leadership with a committed no-op within this long."""
JOURNAL_FILE_NAME = "raft.journal"
LOCK_FILE_NAME = "raft.lock"
_RAFT_STATE_LEADER = 2
"""pysyncobj `_RAFT_STATE.LEADER`, as passed to `onStateChanged`."""

T = TypeVar("T")


class _ReplicatedLog(SyncObj):  # type: ignore[misc]
    def __init__(self, apply: Callable[[bytes, int], PendingApply], self_address: str,
                 peers: list[str], conf: Any, transport_class: Any,
                 transport: Callable[[], SyncingTransport | None]) -> None:
        self._raftsched_apply = apply
        self._raftsched_transport = transport
        super().__init__(self_address, peers, conf, transportClass=transport_class)

    def _checkCommandsToApply(self) -> None:
        # The leader drains its command queue here, sending one append_entries per command
        # and follower; the transport merges them into one message per follower (group commit).
        transport = self._raftsched_transport()
        if transport is None:
            super()._checkCommandsToApply()
            return
        transport.hold_appends()
        try:
            super()._checkCommandsToApply()
        finally:
            transport.release_appends()

    def dump_serializer(self) -> ForkingSerializer:
        serializer: ForkingSerializer = self._SyncObj__serializer
        return serializer

    @replicated  # type: ignore[untyped-decorator]
    def apply_entry(self, data: bytes) -> PendingApply:
        # Inside a replicated method raftLastApplied + 1 is the index being applied.
        return self._raftsched_apply(data, int(self.raftLastApplied) + 1)


class Proposal:
    """An entry appended by `RaftNode.submit`, not yet waited for."""

    def __init__(self, node: RaftNode, replies: Replies) -> None:
        self._node = node
        self._replies = replies

    def outcome(self, timeout_s: float) -> Outcome:
        """Its FSM outcome once committed; raises NotLeader (it was not appended or was lost
        with a leadership change) or OutcomeUnknown (it may still commit)."""
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self._replies.done.wait(timeout_s)
        result = self._node._outcome(self._replies, 0, timeout_s)
        if isinstance(result, RaftschedError):
            raise result
        return result


# --- RaftNode -----------------------------------------------------------------------------------


class RaftNode:
    """One Raft replica of the scheduler state.

    `peers` are the other members' `host:port` addresses (self may be included; it is ignored).
    A replica joining a running cluster is started with every current member as a peer and is
    then added with `add_replica` on the leader. Once a snapshot exists, the member list stored
    in it overrides `peers` on restart (pysyncobj issue #133): membership is replicated state.

    Callbacks must only signal, never block (they run on the tick or the applier thread):
    `on_leader_change(is_leader)` when pysyncobj's own belief flips (confirm with
    `is_leader_confirmed` before acting), `on_applied(index)` after each FSM entry is applied or
    a snapshot is loaded, `on_changes(index, changes)` before it with what the entry changed
    (`State.changes`; None for a snapshot loaded at `index`), `on_proposal(outcome, seconds)`
    when an entry this replica proposed is answered (`ProposalObserver`).
    """

    def __init__(self, self_address: str, peers: list[str], data_dir: str, secret: str | None,
                 insecure_dev: bool = False,
                 on_leader_change: Callable[[bool], None] | None = None,
                 *, fsync: bool = True,
                 on_applied: Callable[[int], None] | None = None,
                 compaction_min_entries: int = LOG_COMPACTION_MIN_ENTRIES,
                 compaction_min_time_s: float = LOG_COMPACTION_MIN_TIME_S,
                 applied_log: str | None = None,
                 on_proposal: ProposalObserver | None = None,
                 on_changes: Callable[[int, list[Change] | None], None] | None = None,
                 handshake_timeout_s: float = limits.HANDSHAKE_TIMEOUT_S) -> None:
        membership.check_address(self_address)
        for peer in peers:
            membership.check_address(peer)
        if not secret and not insecure_dev:
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                "refusing to start a Raft replica without a cluster secret: every Raft frame is "
                "a pickle and only the secret lets a replica reject frames before unpickling "
                "them (anyone reaching the Raft port could run code). Set the secret, or pass "
                "insecure_dev for a throwaway local cluster",
            )
        if not secret:
            log.warning("raft_insecure_dev", address=self_address,
                        detail="Raft frames are unauthenticated")
        self._address = self_address
        self._configured_peers = sorted({p for p in peers if p != self_address})
        self._on_leader_change = on_leader_change
        self._on_applied = on_applied
        self._on_proposal = on_proposal
        self._on_changes = on_changes
        self._applied_log = AppliedLogWriter(applied_log) if applied_log else None
        self._lock = threading.Lock()
        self._applier = Applier(self._apply_now, f"raft-apply-{self_address}")
        self._state = State()
        self._state_index = 0
        self._membership = membership.MembershipChanges(self)
        self._tick_tasks: deque[Callable[[], None]] = deque()
        self._alarms = LibraryAlarms()
        self._tick_thread_id: int | None = None
        self._first_tick = threading.Event()
        self._transport: SyncingTransport | None = None
        self._handshake_timeout_s = handshake_timeout_s
        """An incoming Raft connection not authenticated this long is closed (transport.py)."""
        self._dumps_loaded = 0
        self._unsynced_applies = 0
        self._fatal: str | None = None
        self._closed = False
        self._apply_latch = os.environ.get(APPLY_LATCH_ENV, "")
        self._data_dir = os.path.abspath(data_dir)
        os.makedirs(self._data_dir, exist_ok=True)
        self._lock_fd = _lock_data_dir(self._data_dir)
        try:
            self._start(secret or None, fsync, compaction_min_entries, compaction_min_time_s)
        except BaseException:
            os.close(self._lock_fd)
            raise

    def _conf(self, secret: str | None, journal_path: str, dump_path: str,
              compaction_min_entries: int, compaction_min_time_s: float) -> SyncObjConf:
        """pysyncobj's configuration: our tuning, journal, snapshot hooks and callbacks."""
        return SyncObjConf(
            password=secret,
            bindAddress=self._address,
            appendEntriesUseBatch=False,
            appendEntriesBatchSizeBytes=APPEND_BATCH_BYTES,
            appendEntriesPeriod=APPEND_ENTRIES_PERIOD_S,
            raftMinTimeout=RAFT_MIN_TIMEOUT_S,
            raftMaxTimeout=RAFT_MAX_TIMEOUT_S,
            connectionTimeout=CONNECTION_TIMEOUT_S,
            connectionRetryTime=CONNECTION_RETRY_S,
            leaderFallbackTimeout=LEADER_FALLBACK_TIMEOUT_S,
            bindRetryTime=BIND_RETRY_S,
            maxBindRetries=MAX_BIND_ATTEMPTS,
            commandsQueueSize=limits.COMMANDS_QUEUE_MAX,
            commandsWaitLeader=False,
            dynamicMembershipChange=True,
            journalFile=journal_path,
            fullDumpFile=dump_path,
            serializer=self._dumps.write,
            deserializer=self._read_dump,
            logCompactionMinEntries=compaction_min_entries,
            logCompactionMinTime=compaction_min_time_s,
            onStateChanged=self._on_state_changed,
        )

    def _start(self, secret: str | None, fsync: bool, compaction_min_entries: int,
               compaction_min_time_s: float) -> None:
        journal_path = os.path.join(self._data_dir, JOURNAL_FILE_NAME)
        dump_path = os.path.join(self._data_dir, DUMP_FILE_NAME)
        self._journal = DurableJournal(journal_path, dump_path=dump_path, fsync=fsync)
        self._dumps = Dumps(self._data_dir, fsync, lambda: self._state, self._applier.idle)
        if self._journal.first_index() > 1 and not os.path.exists(dump_path):
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                f"{journal_path} was compacted but {dump_path} is missing: this replica cannot "
                "rebuild its state; wipe its data dir and re-add it",
            )
        conf = self._conf(secret, journal_path, dump_path, compaction_min_entries,
                          compaction_min_time_s)

        def transport(sync_obj: Any, self_node: Any, other_nodes: Any) -> SyncingTransport:
            self._transport = SyncingTransport(sync_obj, self_node, other_nodes,
                                                journal=self._journal, on_tick=self._on_tick,
                                                handshake_timeout_s=self._handshake_timeout_s)
            return self._transport

        with pending_journal(self._journal):
            self._obj = _ReplicatedLog(self._apply_committed, self._address,
                                       self._configured_peers, conf, transport,
                                       lambda: self._transport)
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
            log.warning("raft_slow_start", address=self._address, waited_s=FIRST_TICK_TIMEOUT_S)
        if self._fatal is not None:
            self._obj.destroy()
            raise RaftschedError(Code.FAILED_PRECONDITION,
                                 f"Raft replica {self._address} cannot start: {self._fatal}")
        log.info("raft_started", address=self._address, peers=",".join(self._configured_peers),
                 data_dir=self._data_dir, fsync=fsync)

    # -- tick thread --------------------------------------------------------------------------

    def _apply_committed(self, data: bytes, index: int) -> PendingApply:
        """The replicated method's body, on the tick thread: make the entry durable here, then
        hand it to the applier (applier.py); pysyncobj passes the PendingApply to the
        proposer's callback."""
        if not self._journal.is_durable(index):
            self._journal.sync()
            if self._journal.fsync and not self._journal.is_durable(index):
                self._unsynced_applies += 1
        return self._applier.submit(index, data)

    def _apply_now(self, data: bytes, index: int) -> Outcome:
        """Apply one committed entry, on the applier thread, in log order."""
        if self._apply_latch and not os.path.exists(self._apply_latch):
            wait_for_latch(self._apply_latch)
        try:
            with self._lock, gc_pause.frozen_after(len(data) >= GC_FREEZE_ENTRY_BYTES):
                previous = self._state_index
                collected: list[Change] | None = [] if self._on_changes is not None else None
                self._state.changes = collected
                try:
                    outcome = fsm.apply(self._state, data)
                finally:
                    self._state.changes = None
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
        log.debug("raft_applied", index=index, outcome=outcome)
        if self._on_changes is not None:
            self._on_changes(index, collected)
        self._notify_applied(index)
        return outcome

    def _notify_applied(self, index: int) -> None:
        """`on_applied(index)` runs on the applier thread (or the tick thread, for a snapshot
        load): it must only signal, never block."""
        if self._on_applied is None:
            return
        try:
            self._on_applied(index)
        except Exception:
            log.exception("raft_applied_callback_failed", index=index)

    def _on_tick(self) -> None:
        if self._tick_thread_id is None:
            self._tick_thread_id = threading.get_ident()
            ALARM_FILTER.by_thread[self._tick_thread_id] = self._alarms
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
                log.exception("raft_tick_task_failed")

    def _on_state_changed(self, old: int, new: int) -> None:
        was_leader, is_leader = old == _RAFT_STATE_LEADER, new == _RAFT_STATE_LEADER
        if was_leader == is_leader:
            return
        obj = getattr(self, "_obj", None)  # None while SyncObj.__init__ is still running
        log.info("raft_leadership", address=self._address, is_leader=is_leader,
                 term=None if obj is None else obj.raftCurrentTerm)
        if self._on_leader_change is not None:
            try:
                self._on_leader_change(is_leader)
            except Exception:
                log.exception("raft_leader_callback_failed")

    def fresh_dump(self, timeout_s: float) -> tuple[BinaryIO, int, int]:
        """A snapshot of the whole state written now (the forked dump child, as for log
        compaction), opened for reading: (file, index, term). The caller closes the file; a
        later snapshot renames a new file into place and leaves this one readable. A no-op
        entry is committed first, so there is something new to write even on an idle replica
        (`dumps.Dumps.fresh`). Raises RaftschedError (UNAVAILABLE: not the leader or stopped;
        DEADLINE_EXCEEDED)."""
        self._check_running()
        if not self.is_leader_confirmed(min(timeout_s, BARRIER_TIMEOUT_S)):
            raise NotLeader(self.leader_address())

        def ask() -> None:
            self._check_running()
            self._obj.forceLogCompaction()  # sets a flag the tick thread reads

        return self._dumps.fresh(timeout_s, ask)

    def _read_dump(self, file_name: str) -> tuple[Entry, Entry, set[Any]]:
        """pysyncobj's deserializer hook (startup and snapshot install): replaces the State."""
        self._applier.discard()  # superseded: pysyncobj hands over the entries after it again
        try:
            with open(file_name, "rb") as source, gc_pause.frozen_after(True):
                state, extra = snapshot.load_with_extra(source)
            last, previous, members = snapshot.parse_raft_extra(extra)
            self._journal.align_to_dump(previous, last)
        except BaseException as exc:
            # pysyncobj would log and carry on with whatever state it has: stop instead.
            self._fail(f"cannot load the snapshot {file_name}: {exc!r}")
            raise
        with self._lock:
            self._state = state
            self._state_index = last[1]
        self._dumps_loaded += 1
        if self._on_changes is not None:
            self._on_changes(last[1], None)
        self._notify_applied(last[1])
        log.info("raft_dump_loaded", index=last[1], members=",".join(members))
        stored = sorted(m for m in members if m != self._address)
        if stored != self._configured_peers:
            # pysyncobj issue #133: the snapshot's member list replaces the configured peers.
            log.info("raft_members_from_dump", configured=",".join(self._configured_peers),
                     stored=",".join(stored))
        return last, previous, {TCPNode(m) for m in members}

    def _fail(self, reason: str) -> None:
        self._fatal = reason
        log.critical("raft_replica_stopped", address=self._address, reason=reason)
        if hasattr(self, "_obj"):
            self._obj.destroy()

    # -- writes -------------------------------------------------------------------------------

    def propose(self, data: bytes, timeout_s: float) -> Outcome:
        """Commit one entry and return its FSM outcome.

        Raises NotLeader (nothing appended; go to `.leader`) or OutcomeUnknown (it may still
        commit: retry with the same request id so the FSM dedupes it).
        """
        return self.submit(data).outcome(timeout_s)

    def submit(self, data: bytes) -> Proposal:
        """Append one entry without waiting; `outcome()` of the answer waits for its commit.
        Entries submitted one after another from one thread are applied in that order (they
        queue in order for the tick thread), so a later proposal can build on an earlier one
        that has not committed yet. Raises NotLeader before appending anything."""
        replies = self._submit([data])
        return Proposal(self, replies)

    def propose_many(self, entries: list[bytes], timeout_s: float,
                     ) -> list[Outcome | RaftschedError]:
        """Submit every entry at once (pipelined) and wait for all, up to `timeout_s` in total.

        Each position holds the entry's outcome, or a NotLeader / OutcomeUnknown for it.
        Raises NotLeader before submitting anything if this replica is not the leader.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if len(entries) > limits.MAX_PIPELINED_PROPOSALS:
            raise RaftschedError(Code.RESOURCE_EXHAUSTED,
                                 f"{len(entries)} entries in one call, over "
                                 f"MAX_PIPELINED_PROPOSALS={limits.MAX_PIPELINED_PROPOSALS}")
        replies = self._submit(entries)
        replies.done.wait(timeout_s)
        return [self._outcome(replies, position, timeout_s) for position in range(len(entries))]

    def _submit(self, entries: list[bytes]) -> Replies:
        for data in entries:
            if len(data) > limits.MAX_ENTRY_BYTES:
                raise RaftschedError(Code.RESOURCE_EXHAUSTED,
                                     f"entry of {len(data)} bytes is over MAX_ENTRY_BYTES="
                                     f"{limits.MAX_ENTRY_BYTES}")
        self._check_running()
        if not self._obj._isLeader():
            raise NotLeader(self.leader_address())
        replies = Replies(len(entries), self._on_proposal)
        for position, data in enumerate(entries):
            self._obj.apply_entry(data, callback=functools.partial(replies.callback, position))
        return replies

    def _outcome(self, replies: Replies, position: int,
                 timeout_s: float) -> Outcome | RaftschedError:
        if not replies.replied(position):
            return OutcomeUnknown(f"no commit within {timeout_s:g} s")
        result, reason = replies.results[position], replies.reasons[position]
        if reason == FAIL_REASON.SUCCESS:
            if isinstance(result, Applied | Rejected):
                return result
            if result is None:
                return OutcomeUnknown("committed, but a snapshot install or a stop came first")
            return OutcomeUnknown(f"committed entry returned {result!r}, not an outcome")
        if reason in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER):
            return NotLeader(self.leader_address())
        return OutcomeUnknown(f"pysyncobj reported {fail_name(reason)}")

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
        return isinstance(outcome, Applied) and outcome.result == BarrierResult(nonce)

    def read(self, fn: Callable[[State], T]) -> T:
        """`fn(state)` under the apply lock. Keep it short and never mutate the state.

        The state is this replica's: a follower's or a deposed leader's may be stale. For a
        current read, call `is_leader_confirmed` first (a commit after the read began)."""
        with self._lock:
            return fn(self._state)

    def read_unlocked(self, fn: Callable[[State], T]) -> T:
        """`fn(state)` without the apply lock, for a caller that must not wait behind an apply
        (the identity check of every call: `replica.identity`). `fn` may make one lookup of
        one dict only (`state.tokens.get(id)`): under the interpreter lock that sees the dict
        before or after the apply that changes it, never in between, and a lookup made after
        an apply returned sees what it did. Anything that reads two things uses `read`."""
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

    def closed_connections(self) -> ClosedConnections:
        """Raft connections closed on a peer that broke a bound, since the start (metrics)."""
        if self._transport is None:
            return ClosedConnections(0, 0, 0)
        return self._transport.closed_connections()

    def _unauthenticated_connections(self) -> dict[str, int]:
        """Incoming connections waiting for their handshake now, and those closed so far."""
        transport = self._transport
        if transport is None:
            return {}
        return {"pending": transport.handshakes.pending, **asdict(transport.handshakes.totals)}

    def leader_address(self) -> str | None:
        """The last leader this replica heard of (may be stale; may be itself)."""
        leader = self._obj._getLeader()
        return None if leader is None else str(leader.id)

    def members(self) -> list[str]:
        """The voting members in this replica's current configuration, itself included."""
        return sorted({self._address, *(str(n.id) for n in self._obj.otherNodes)})

    def status(self, include_digest: bool = False) -> RaftStatus:
        """A snapshot of this replica's view. With `include_digest`, `state_digest` dumps the
        state under the apply lock: it costs O(state) and stalls apply meanwhile, so only audits
        and tests ask for it; otherwise it is ""."""
        with self._lock:
            digest = snapshot.digest(self._state) if include_digest else ""
            state_index = self._state_index
        journal = self._journal
        return RaftStatus(
            address=self._address,
            leader=self.leader_address(),
            term=int(self._obj.raftCurrentTerm),
            commit_index=int(self._obj.raftCommitIndex),
            last_applied=int(self._obj.raftLastApplied),
            is_leader=bool(self._obj._isLeader()),
            members=self.members(),
            state_digest=digest,
            state_index=state_index,
            log_first_index=journal.first_index(),
            log_last_index=journal.last_index(),
            durability={
                "fsync": journal.fsync,
                "journal": type(journal).__name__,
                "journal_claimed": journal.claimed,
                "durable_index": journal.durable_index(),
                "unsynced_applies": self._unsynced_applies,
                **asdict(journal.stats),
            },
            replication=asdict(self._transport.replication) if self._transport else {},
            unauthenticated_connections=self._unauthenticated_connections(),
            apply_backlog=self._applier.backlog,
            dumps_written=self._dumps.written,
            dumps_loaded=self._dumps_loaded,
            library_alarms=asdict(self._alarms),
            membership_change=self._membership.pending,
            fatal=self._fatal,
        )

    # -- membership (membership.MembershipChanges) -------------------------------------------

    def add_replica(self, address: str, timeout_s: float,
                    catch_up_s: float = membership.JOIN_CATCH_UP_TIMEOUT_S) -> None:
        """Add a voting member (call on the leader; `MembershipChanges.add`)."""
        self._membership.add(address, timeout_s, catch_up_s)

    def remove_replica(self, address: str, timeout_s: float) -> None:
        """Remove a voting member (call on the leader; `MembershipChanges.remove`)."""
        self._membership.remove(address, timeout_s)

    def transfer_leadership(self, timeout_s: float, target: str | None = None) -> str:
        """Hand leadership to `target` (or the most caught-up follower); the new leader."""
        self._check_running()
        return self._membership.transfer_leadership(timeout_s, target)

    @property
    def syncobj(self) -> Any:
        """pysyncobj's SyncObj (for membership.py and dumps.py, inside the adapter only)."""
        return self._obj

    def on_tick_thread(self, task: Callable[[], None]) -> None:
        """Run `task` on the tick thread at the end of its next tick (it owns pysyncobj's maps
        and the transport); never block in it."""
        self._tick_tasks.append(task)

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
            log.warning("raft_close_timeout", address=self._address)
        else:
            child = self._obj.dump_serializer().stop_child(CLOSE_TIMEOUT_S)
            if child == "killed":
                log.warning("raft_close_killed_dump_child", address=self._address)
            self._applier.stop()
            self._journal._destroy()
            if self._applied_log is not None:
                self._applied_log.close()
        if self._tick_thread_id is not None:
            ALARM_FILTER.by_thread.pop(self._tick_thread_id, None)
        os.close(self._lock_fd)
        log.info("raft_closed", address=self._address)

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


def _lock_data_dir(data_dir: str) -> int:
    fd = os.open(os.path.join(data_dir, LOCK_FILE_NAME), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"{data_dir} is in use by another replica process") from None
    return fd
