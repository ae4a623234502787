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
`dump_finished(ok, index, term, elapsed_s)` (a RaftNode) fork; any other use keeps pysyncobj's
behaviour.

What the child may do: only what `RaftNode._dump_to_file` does — read the state, write and fsync
one file. No logging (another thread may have held the logging lock at fork time), no locks,
no sockets, and it leaves through `os._exit` (pysyncobj's code does that).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Any, BinaryIO, Protocol

import pysyncobj.syncobj as _pysyncobj_syncobj
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.serializer import Serializer


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
