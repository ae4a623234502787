"""The state a stopped replica holds, as a saved snapshot (`raftsched admin snapshot export`).

For the case the API cannot help with: a majority of the replicas is gone for good, so nothing
can commit and `admin snapshot save` (which needs a leader) cannot run. A survivor's data dir
still holds its last snapshot (`raft.dump`, if it compacted) and its journal, the entries after
it. `export_state` loads the snapshot, applies every state-machine entry of the journal after
it, in log order, exactly as the replica's applier would (pysyncobj's own entries — no-ops,
membership changes, version bumps — are followed or skipped as pysyncobj does), and writes the
result in the saved-snapshot format, which `raftsched replica --restore-from` starts a new
cluster from.

What that state is: everything this replica had in its log. That includes entries it held but
that were never committed (a client was told "unknown outcome" for them; its idempotency key
makes a retry safe) and lacks entries only the lost replicas had acknowledged: that data is
lost. The data dir is read only, under the replica's own lock (refused while it runs).
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from typing import Any

from raftsched.errors import Code, RaftschedError
from raftsched.replica.raft.dumps import DUMP_FILE_NAME, EXTRA_FORMAT, entry_out
from raftsched.replica.raft.journal import DurableJournal
from raftsched.replica.raft.node import JOURNAL_FILE_NAME, _lock_data_dir
from raftsched.replica.raft.restore import write_snapshot_file
from raftsched.state import fsm, snapshot
from raftsched.state.model import State

_REGULAR, _NO_OP, _MEMBERSHIP, _VERSION = 0, 1, 2, 3
"""pysyncobj's entry kinds (`syncobj._COMMAND_TYPE`), the first byte of each journal entry."""


@dataclass(frozen=True, slots=True)
class Exported:
    index: int
    term: int
    replayed: int
    """State-machine entries applied from the journal, after the snapshot."""
    members: tuple[str, ...]


def export_state(data_dir: str, out_path: str) -> Exported:
    """Write the state of the stopped replica in `data_dir` to `out_path` (a saved snapshot).
    FAILED_PRECONDITION while a replica runs on it or when it holds no Raft state."""
    journal_path = os.path.join(data_dir, JOURNAL_FILE_NAME)
    dump_path = os.path.join(data_dir, DUMP_FILE_NAME)
    if not os.path.exists(journal_path) and not os.path.exists(dump_path):
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"{data_dir} holds no replica state ({JOURNAL_FILE_NAME} or "
                             f"{DUMP_FILE_NAME})")
    lock = _lock_data_dir(data_dir)  # FAILED_PRECONDITION "in use" while the replica runs
    try:
        state, last, previous, members = _load_dump(dump_path)
        journal = DurableJournal(journal_path, dump_path=dump_path, fsync=False)
        try:
            entries = [journal[i] for i in range(len(journal))]
        finally:
            journal._destroy()
        replayed = 0
        for entry in entries:
            command, index, _term = entry
            if index <= last[1]:
                continue
            replayed += _replay(state, bytes(command), members)
            previous, last = last, (bytes(command), int(index), int(_term))
        if last[1] == 0:
            raise RaftschedError(Code.FAILED_PRECONDITION,
                                 f"{data_dir} holds no log entry yet: nothing to export")
        write_snapshot_file(out_path, state, {
            "format": EXTRA_FORMAT, "last": entry_out(last), "previous": entry_out(previous),
            "members": sorted(members)})
    finally:
        os.close(lock)
    return Exported(last[1], last[2], replayed, tuple(sorted(members)))


def _load_dump(dump_path: str) -> tuple[State, Any, Any, set[str]]:
    if not os.path.exists(dump_path):
        empty = (b"", 0, 0)
        return State(), empty, empty, set()
    try:
        with open(dump_path, "rb") as source:
            state, extra = snapshot.load_with_extra(source)
        last, previous, members = snapshot.parse_raft_extra(extra)
    except (OSError, snapshot.SnapshotError) as error:
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"cannot read {dump_path}: {error}") from None
    return state, last, previous, set(members)


def _replay(state: State, command: bytes, members: set[str]) -> int:
    """Apply one journal entry as the replica would; 1 if it was a state-machine entry."""
    kind = command[0] if command else _NO_OP
    if kind == _MEMBERSHIP:
        change = pickle.loads(command[1:])  # written by this replica's own pysyncobj
        if isinstance(change, list) and len(change) >= 2:
            if change[0] == "add":
                members.add(str(change[1]))
            elif change[0] == "rem":
                members.discard(str(change[1]))
        return 0
    if kind != _REGULAR:
        return 0
    call = pickle.loads(command[1:])
    args = call[1] if isinstance(call, tuple) and len(call) >= 2 else ()
    if not args or not isinstance(args[0], bytes):
        return 0
    outcome = fsm.apply(state, args[0])  # a refused entry changes nothing, as on the replica
    del outcome
    return 1
