"""Snapshots written off the tick thread: pysyncobj's own fork path, for our serializer too.

pysyncobj writes a snapshot ("full dump") on its single tick thread, which also does all Raft I/O
and every apply; with a custom serializer it does so synchronously (`Serializer.__init__`:
`useFork = tryUseFork and ... and serializer is None`). A large state then stalls the replica
for longer than an election timeout. Its fork path is exactly what we want: `serialize()` forks,
the child runs the serializer on a copy-on-write image of the state as of that tick, renames the
file into place and `os._exit`s; the parent goes on at once, and `checkSerializing()` reaps the
child on later ticks, compacting the log only after the child succeeded.

`ForkingSerializer` turns that path on for our serializer. `SyncObj.__init__` builds its
serializer with the module-global `Serializer` of `pysyncobj.syncobj`; this module replaces that
global with the subclass at import (the adapter's second patch, next to `journal.createJournal`;
re-check both when changing the pinned version). Only serializers whose owner offers
`dump_finished(ok, index, term, elapsed_s)` (a RaftNode's `Dumps`) fork; any other use keeps
pysyncobj's behaviour.

`Dumps` is the node's side of snapshots: `write` (the serializer hook, run in the forked child),
`dump_finished` (the outcome, in the replica) and `fresh` (a snapshot written now, for
`RaftNode.fresh_dump`). What the child may do: only what `Dumps.write` does — read the state,
write and fsync one file. No logging (another thread may have held the logging lock at fork
time), no locks, no sockets, and it leaves through `os._exit` (pysyncobj's code does that).
Loading a snapshot replaces the node's state wholesale, so that stays in `RaftNode._read_dump`.

pysyncobj internals relied on here (re-check them when changing the pinned version):
- `SyncObj.__tryLogCompaction` passes the serializer `(None, last_applied_entry, previous_entry,
  cluster_nodes)`; `pysyncobj/serializer.py` `Serializer.serialize` calls our serializer with
  `data[1:]` (a 3-tuple: the state element is not passed at all) and the path `fullDumpFile +
  '.tmp'`, then renames it over `fullDumpFile`; `Serializer.deserialize` returns `(None,) +
  deserializer(fullDumpFile)`. pysyncobj forks only for its own serializer; this module makes it
  fork for ours too, and `checkSerializing` reaps the child (waitpid) before the log is compacted.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

import pysyncobj.syncobj as _pysyncobj_syncobj
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.serializer import Serializer

from raftsched.errors import Code, RaftschedError
from raftsched.eventlog import EventLogger
from raftsched.state import snapshot
from raftsched.state.model import State

log = EventLogger("raftsched.replica.raft.node")

DUMP_FILE_NAME = "raft.dump"
DUMP_ERROR_FILE_NAME = "raft.dump.error"
"""What a failed dump child leaves: its traceback (it may not log)."""
MAX_DUMP_ERROR_CHARS = 8_000
DUMP_NICENESS = 19
"""The snapshot writer (a forked child) runs this much nicer than the replica."""
DUMP_RETRY_S = 1.0
"""`Dumps.fresh` asks for a snapshot again this often until one is written."""
EXTRA_FORMAT = snapshot.RAFT_EXTRA_FORMAT
"""Version of the pysyncobj bookkeeping we keep in a snapshot's `extra` record."""
DUMP_LATCH_ENV = "RAFTSCHED_FAILPOINT_DUMP_LATCH"
"""Fault injection: a path. The snapshot writer creates PATH.waiting, then waits until PATH exists
(at most DUMP_LATCH_MAX_WAIT_S) before writing: a test holds a snapshot in progress as long as
it likes and shows that nothing else waits for it. Read once when a RaftNode is built."""
DUMP_LATCH_MAX_WAIT_S = 120.0
DUMP_CHILD_POLL_S = 0.01
"""`ForkingSerializer.stop_child` looks this often whether the dump child has exited."""
DUMP_LATCH_POLL_S = 0.05


class DumpOwner(Protocol):
    def ready_to_dump(self) -> bool: ...
    def dump_finished(self, ok: bool, index: int, term: int, elapsed_s: float) -> None: ...


class ForkingSerializer(Serializer):  # type: ignore[misc]
    """pysyncobj's Serializer, forking for our custom serializer as it does for its own."""

    def __init__(self, fileName: Any, transmissionBatchSize: Any, tryUseFork: Any,
                 serializer: Callable[..., Any] | None, deserializer: Any,
                 serializeChecker: Any) -> None:
        super().__init__(fileName, transmissionBatchSize, tryUseFork, serializer, deserializer,
                         serializeChecker)
        owner = getattr(serializer, "__self__", None)
        self._owner: DumpOwner | None = owner if hasattr(owner, "dump_finished") else None
        self._started_s = 0.0
        self._index = 0
        self._term = 0
        if self._owner is not None and fileName and tryUseFork and hasattr(os, "fork"):
            self._Serializer__useFork = True

    def serialize(self, data: Any, id: Any) -> None:
        # data: (None, last applied entry, the entry before it, cluster nodes)
        if self._owner is not None and not self._owner.ready_to_dump():
            return  # not now: pysyncobj sees no dump in progress and asks again next tick
        self._started_s = time.monotonic()
        self._index, self._term = int(data[1][1]), int(data[1][2])
        super().serialize(data, id)

    def stop_child(self, timeout_s: float) -> str:
        """Wait (at most `timeout_s`) for a dump child in progress to exit, then kill it; reap
        it either way. Only when the tick thread has stopped (it reaps the child otherwise).
        Returns "none", "exited" or "killed". A killed child leaves only its `.tmp` file, which
        the next dump overwrites; the snapshot in place stays the last one written."""
        pid = int(getattr(self, "_Serializer__pid", 0))
        if pid <= 0:
            return "none"
        self._Serializer__pid = 0
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return "exited"
            time.sleep(DUMP_CHILD_POLL_S)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return "killed"

    def checkSerializing(self) -> Any:
        state, serialize_id = super().checkSerializing()
        if self._owner is not None and state in (SERIALIZER_STATE.SUCCESS,
                                                 SERIALIZER_STATE.FAILED):
            self._owner.dump_finished(state == SERIALIZER_STATE.SUCCESS, self._index, self._term,
                                      time.monotonic() - self._started_s)
        return state, serialize_id


_pysyncobj_syncobj.Serializer = ForkingSerializer


class DumpWaiter:
    """One `fresh_dump` call waiting for the next snapshot the dump child writes."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.file: BinaryIO | None = None
        self.index = 0
        self.term = 0
        self.error = ""
        self._lock = threading.Lock()
        self._discarded = False

    def finish(self, file: BinaryIO | None, index: int, term: int, error: str) -> None:
        with self._lock:
            if self._discarded:
                if file is not None:
                    file.close()
                return
            self.file, self.index, self.term, self.error = file, index, term, error
        self.done.set()

    def discard(self) -> None:
        """The caller gave up: a file opened for it later is closed at once."""
        with self._lock:
            self._discarded = True
            if self.file is not None:
                self.file.close()
                self.file = None


class Dumps:
    """A RaftNode's snapshots. `state` gives the node's state as of now (in the child: as of the
    fork), `idle` says whether the applier has applied everything handed over."""

    def __init__(self, data_dir: str, fsync: bool, state: Callable[[], State],
                 idle: Callable[[], bool]) -> None:
        self._data_dir = data_dir
        self._fsync = fsync
        self._state = state
        self._idle = idle
        self._latch = os.environ.get(DUMP_LATCH_ENV, "")
        self._waiters: list[DumpWaiter] = []
        self._waiters_lock = threading.Lock()
        self.written = 0

    def ready_to_dump(self) -> bool:
        """A snapshot may be written now (ForkingSerializer asks, on the tick thread): the
        applier has applied every entry handed over, so the state is exactly as of the entry
        pysyncobj will record in the snapshot."""
        return self._idle()

    def write(self, file_name: str, data: Any) -> None:
        """pysyncobj's serializer hook: `data` is (last applied entry, the one before, nodes).

        Runs in a child forked from the tick thread (`ForkingSerializer`): the state is a
        copy-on-write image as of that tick, and the replica goes on meanwhile. So it does
        nothing but write and fsync the file: no logging, no locks (see above);
        `dump_finished` reports the outcome in the replica.
        """
        # Every fd this child inherited is a copy of one the replica process holds: the data-dir
        # lock (a flock belongs to the open file), listening and peer sockets, journals. Kept,
        # they would outlive a close of their owner: a replica of this process could then not
        # start again on its data dir or port while the child writes. The child needs none.
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        # No cyclic garbage collection in this child: a collection would finalize objects of
        # the parent's other threads (gRPC calls in flight), whose library state the fork left
        # behind; it crashed children with SIGSEGV after they had written the file.
        gc.disable()
        # A crash of this child (a signal) leaves its Python stack in the report too.
        crash_report = open(os.path.join(self._data_dir, DUMP_ERROR_FILE_NAME), "w")  # noqa: SIM115
        faulthandler.enable(file=crash_report, all_threads=False)
        os.nice(DUMP_NICENESS)  # this child only: the replica itself keeps the CPU first
        if self._latch:
            wait_for_latch(self._latch)
        last, previous, nodes = data
        members = sorted(str(getattr(n, "id", n)) for n in nodes)
        extra = {"format": EXTRA_FORMAT, "last": entry_out(last),
                 "previous": entry_out(previous), "members": members}
        try:
            with open(file_name, "wb") as out:
                snapshot.dump_to(out, self._state(), extra)
                out.flush()
                if self._fsync:
                    os.fsync(out.fileno())
        except BaseException:
            # No logging here (see above): the replica reads this file in `dump_finished`.
            traceback.print_exc(file=crash_report)
            crash_report.flush()
            raise

    def dump_finished(self, ok: bool, index: int, term: int, elapsed_s: float) -> None:
        """A snapshot at `index` was written (or failed) by the dump child; on the tick thread.
        On success pysyncobj compacts the log up to it next. A `fresh` call waiting for one
        gets the file opened here, before any later dump can replace it."""
        if ok:
            self.written += 1
            log.info("raft_dump_written", index=index, elapsed_ms=round(elapsed_s * 1000, 1))
        else:
            log.error("raft_dump_write_failed", index=index,
                      elapsed_ms=round(elapsed_s * 1000, 1), error=self._child_error())
        with self._waiters_lock:
            waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not ok:
                waiter.finish(None, index, term,
                              "the replica could not write its snapshot (see its log)")
                continue
            try:
                dump = open(os.path.join(self._data_dir, DUMP_FILE_NAME), "rb")  # noqa: SIM115
                waiter.finish(dump, index, term, "")  # the caller of fresh closes it
            except OSError as error:
                waiter.finish(None, index, term, f"cannot open the snapshot: {error}")

    def _child_error(self) -> str:
        report = os.path.join(self._data_dir, DUMP_ERROR_FILE_NAME)
        try:
            with open(report) as file:
                error = file.read(MAX_DUMP_ERROR_CHARS)
            os.unlink(report)
        except OSError:
            error = "(the dump child left no report: it was killed, or failed in pysyncobj)"
        return error

    def fresh(self, timeout_s: float, ask: Callable[[], None]) -> tuple[BinaryIO, int, int]:
        """The next snapshot written, opened for reading: (file, index, term). `ask` requests
        one (a forced compaction; raises if the replica stopped); it is repeated each
        DUMP_RETRY_S (pysyncobj drops a forced compaction it could not start at once). Raises
        RaftschedError (DEADLINE_EXCEEDED, INTERNAL)."""
        waiter = DumpWaiter()
        with self._waiters_lock:
            self._waiters.append(waiter)
        deadline = time.monotonic() + timeout_s
        while not waiter.done.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                with self._waiters_lock:
                    if waiter in self._waiters:
                        self._waiters.remove(waiter)
                waiter.discard()
                raise RaftschedError(Code.DEADLINE_EXCEEDED,
                                     f"no snapshot was written within {timeout_s:g} s")
            ask()
            waiter.done.wait(min(left, DUMP_RETRY_S))
        if waiter.file is None:
            raise RaftschedError(Code.INTERNAL, waiter.error)
        return waiter.file, waiter.index, waiter.term


def wait_for_latch(path: str) -> None:
    """A failpoint (DUMP_LATCH_ENV in the dump child, the applier's APPLY_LATCH_ENV): say it
    waits, then wait (bounded)."""
    with open(path + ".waiting", "a", encoding="utf-8") as marker:
        marker.write(f"{os.getpid()}\n")
    deadline = time.monotonic() + DUMP_LATCH_MAX_WAIT_S
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(DUMP_LATCH_POLL_S)


def entry_out(entry: Any) -> list[Any]:
    command, index, term = entry
    return [command.encode() if isinstance(command, str) else bytes(command), int(index),
            int(term)]
