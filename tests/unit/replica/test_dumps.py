"""`dumps.Dumps` (the snapshot side moved out of RaftNode), without pysyncobj: `fresh` waits for
the next written dump and gets it opened, or a precise error."""

from __future__ import annotations

from pathlib import Path

import pytest

from raftsched.errors import Code, RaftschedError
from raftsched.replica.raft.dumps import DUMP_FILE_NAME, Dumps
from raftsched.state.model import State


def make(tmp_path: Path) -> Dumps:
    return Dumps(str(tmp_path), False, State, lambda: True)


def test_fresh_gets_the_dump_written_after_it_asked(tmp_path: Path) -> None:
    dumps = make(tmp_path)
    (tmp_path / DUMP_FILE_NAME).write_bytes(b"snapshot")
    asked: list[int] = []

    def ask() -> None:  # the tick thread writes one and reports it
        asked.append(1)
        dumps.dump_finished(True, 12, 3, 0.01)

    file, index, term = dumps.fresh(5.0, ask)
    with file:
        assert (file.read(), index, term) == (b"snapshot", 12, 3)
    assert asked == [1] and dumps.written == 1 and dumps.ready_to_dump()


def test_a_failed_dump_and_no_dump_in_time_are_precise_errors(tmp_path: Path) -> None:
    dumps = make(tmp_path)
    with pytest.raises(RaftschedError) as failed:
        dumps.fresh(5.0, lambda: dumps.dump_finished(False, 1, 1, 0.0))
    assert failed.value.code == Code.INTERNAL and "could not write" in failed.value.message
    with pytest.raises(RaftschedError) as late:
        dumps.fresh(0.05, lambda: None)
    assert late.value.code == Code.DEADLINE_EXCEEDED and dumps.written == 0
