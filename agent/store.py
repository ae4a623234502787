"""Opening the agent's lmdb environments: every commit is synced before it returns.

`sync=True, metasync=True` make `Transaction.commit()` fsync the data and the meta page, so a
write the agent has committed survives an OS crash, not only a process kill. The agent acts (starts
a task, acknowledges a fence) only after such a commit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb

MAP_SIZE_BYTES = 1 << 30
"""Largest size of one environment (a sparse file: only what is used takes disk)."""
MAX_NAMED_DBS = 4


class StoreError(Exception):
    """The data dir cannot be used (permissions, corruption, full map): fatal for the agent."""


def open_environment(path: Path, *, map_size_bytes: int = MAP_SIZE_BYTES) -> Any:
    """An lmdb environment in directory `path` (created if missing), synced on every commit."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        return lmdb.open(str(path), map_size=map_size_bytes, max_dbs=MAX_NAMED_DBS, subdir=True,
                         sync=True, metasync=True, readahead=False, lock=True)
    except (OSError, lmdb.Error) as error:
        raise StoreError(f"cannot open the store at {path}: {error}") from error
