"""Seeding a fresh replica's data dir from a saved snapshot (`raftsched replica --restore-from`).

A saved snapshot (`raftsched admin snapshot save`) is the file a replica writes when it compacts
its log: the state, then the Raft bookkeeping (the last two entries it covers, with their index
and term, and the members). To start a new cluster from it, every new replica's empty data dir
gets:
- that file as its snapshot (`raft.dump`), its member list replaced by the new cluster's
  addresses (this replica and its `--peers`): pysyncobj takes the members from the snapshot;
- a journal whose term is the snapshot's last term and whose commit index is its last index.
  Without the term, a new leader would win term 1 and append entries of a lower term after
  entries of term T, and a replica holding only the snapshot (last term T) would then look more
  up to date than the ones holding the new, committed entries — and could win an election and
  erase them.
Every replica of the new cluster is seeded from the same file, so they all start from one
state at one index; the first leader's no-op then moves them on together.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from raftsched import files
from raftsched.errors import Code, RaftschedError
from raftsched.replica.raft.dumps import DUMP_FILE_NAME
from raftsched.replica.raft.journal import DurableJournal
from raftsched.replica.raft.membership import check_address
from raftsched.replica.raft.node import JOURNAL_FILE_NAME
from raftsched.state import snapshot
from raftsched.state.model import State


@dataclass(frozen=True, slots=True)
class Seeded:
    index: int
    term: int
    members: tuple[str, ...]


def seed_data_dir(data_dir: str, source: str, self_address: str, peers: list[str]) -> Seeded:
    """Make `data_dir` (absent or empty of Raft files) start from the snapshot file `source`
    as a member of the cluster `self_address` + `peers`. Refuses (FAILED_PRECONDITION) a data
    dir that already holds a replica's journal or snapshot, and (INVALID_ARGUMENT) a file that
    is not a snapshot a replica wrote; changes nothing then."""
    for address in (self_address, *peers):
        check_address(address)
    journal_path = os.path.join(data_dir, JOURNAL_FILE_NAME)
    dump_path = os.path.join(data_dir, DUMP_FILE_NAME)
    for path in (journal_path, dump_path, journal_path + ".meta"):
        if os.path.exists(path):
            raise RaftschedError(Code.FAILED_PRECONDITION,
                                 f"{data_dir} already holds a replica's state ({path}): "
                                 "--restore-from only seeds an empty data dir")
    try:
        with open(source, "rb") as file:
            state, extra = snapshot.load_with_extra(file)
        last, _previous, _members = snapshot.parse_raft_extra(extra)
    except OSError as error:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"cannot read --restore-from {source}: {error.strerror}") from None
    except snapshot.SnapshotError as error:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"--restore-from {source} is not a saved snapshot: {error}") from None
    members = tuple(sorted({self_address, *peers}))
    os.makedirs(data_dir, exist_ok=True)
    write_snapshot_file(dump_path, state, {**extra, "members": list(members)})
    journal = DurableJournal(journal_path, dump_path=dump_path)
    try:
        journal.setRaftCommitIndex(last[1])
        journal.setCurrentTerm(last[2], None)  # written durably (tmp + fsync + rename)
    finally:
        journal._destroy()
    return Seeded(last[1], last[2], members)


def write_snapshot_file(path: str, state: State, extra: Any) -> None:
    """`state` and its Raft bookkeeping as a snapshot file at `path`, whole or not at all and
    readable by its owner only (`files.written_whole`: PATH.partial made new with mode 0600,
    fsync'd, renamed into place, the directory fsync'd). FAILED_PRECONDITION when PATH.partial
    exists already (nothing is written through it)."""
    try:
        with files.written_whole(path) as out:
            snapshot.dump_to(out, state, extra)
    except files.InTheWay as error:
        raise RaftschedError(Code.FAILED_PRECONDITION, str(error)) from None
