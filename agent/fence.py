"""Fences: the pure admission and term rules, and the two stores behind them
(docs/architecture.md §3).

`admit()` and `term_is_stale()` decide; a fence store remembers the highest fence seen per task
(`job_id/task_id`), the highest leader term seen, and the agent's incarnation counter.
`FenceStore` keeps them in lmdb, every write one transaction committed with fsync before the
caller acts on it or acknowledges it; `MemoryFenceStore` keeps them in dicts (the simulation's
disk). Both follow the same rules, written once below (`_raised`, `_read_fence`, `_prune_floor`);
they differ only in storage.

Bound: at most `limits.MAX_FENCE_ENTRIES` task entries are kept. Past it the entries with the lowest
fences are dropped and the highest dropped fence becomes a *floor*: a task with no entry is
treated as if its stored fence were the floor. Fences only grow across the whole scheduler, so
this errs on the side of refusing: an assignment can be wrongly refused only if it waited
undelivered while `limits.MAX_FENCE_ENTRIES` later fences reached this agent, far longer than the
scheduler's assignment timeout lets an assignment wait.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import lmdb

from agent.store import StoreError, open_environment
from raftsched import limits

FENCE_PRUNE_BATCH = 10_000
"""Entries dropped at once when the bound is crossed (so pruning is rare)."""

_FENCES_DB = b"fences"      # task key -> fence (>Q)
_BY_FENCE_DB = b"by_fence"  # fence (>Q) -> task key, to find the lowest fences
_META_DB = b"meta"
_TERM_KEY = b"term"
_INCARNATION_KEY = b"incarnation"
_FLOOR_KEY = b"floor"
_U64 = struct.Struct(">Q")


class Admission(enum.Enum):
    RUN = "run"
    """A fence higher than any seen for the task: store it, then run."""
    REDELIVERY = "redelivery"
    """The stored fence again: acknowledge again, never run twice."""
    STALE_FENCE = "stale_fence"
    """Lower than the stored fence: reject."""


def term_is_stale(stored_term: int, term: int) -> bool:
    """The term rule, the only one: a directive from a leader of a lower term than one already
    seen is ignored whatever it says (checked once per heartbeat answer, before any fence)."""
    assert term >= 0 and stored_term >= 0, f"terms {term}, {stored_term}"
    return term < stored_term


def admit(stored_fence: int | None, fence: int) -> Admission:
    """The admission rule for a directive whose term is not stale (`term_is_stale`)."""
    assert fence >= 1, f"fence {fence} is not a valid fence"
    assert stored_fence is None or stored_fence >= 1, f"stored fence {stored_fence}"
    if stored_fence is None or fence > stored_fence:
        return Admission.RUN
    if fence == stored_fence:
        return Admission.REDELIVERY
    return Admission.STALE_FENCE


def _raised(stored: int | None, value: int) -> bool:
    """A stored fence or term is replaced only by a higher value: it never decreases."""
    return stored is None or value > stored


def _read_fence(entry: int | None, floor: int) -> int | None:
    """A task's stored fence: its entry, else the floor of the pruned entries, else None."""
    return entry if entry is not None else (floor or None)


def _prune_floor(floor: int, dropped_fences: list[int]) -> int:
    """The floor after dropping entries: the highest fence dropped (it never decreases)."""
    return max([floor, *dropped_fences])


class FenceStore:
    """Highest fence per task, highest term, incarnation counter; all synced before returning."""

    def __init__(self, path: Path, *, max_entries: int = limits.MAX_FENCE_ENTRIES,
                 prune_batch: int = FENCE_PRUNE_BATCH) -> None:
        assert max_entries >= 1 and prune_batch >= 1
        self._max_entries = max_entries
        self._prune_batch = prune_batch
        self._env = open_environment(path)
        try:
            self._fences = self._env.open_db(_FENCES_DB)
            self._by_fence = self._env.open_db(_BY_FENCE_DB)
            self._meta = self._env.open_db(_META_DB)
        except lmdb.Error as error:
            self._env.close()
            raise StoreError(f"cannot open the fence store at {path}: {error}") from error

    # -- reads ---------------------------------------------------------------------------------

    def fence(self, task_key: str) -> int | None:
        """The highest fence seen for the task, else the floor, else None."""
        with self._env.begin() as txn:
            raw = txn.get(task_key.encode(), db=self._fences)
            floor = _meta_int(txn, self._meta, _FLOOR_KEY)
        return _read_fence(None if raw is None else int(_U64.unpack(raw)[0]), floor)

    def term(self) -> int:
        with self._env.begin() as txn:
            return _meta_int(txn, self._meta, _TERM_KEY)

    def incarnation(self) -> int:
        with self._env.begin() as txn:
            return _meta_int(txn, self._meta, _INCARNATION_KEY)

    def floor(self) -> int:
        with self._env.begin() as txn:
            return _meta_int(txn, self._meta, _FLOOR_KEY)

    def entries(self) -> int:
        with self._env.begin() as txn:
            return int(txn.stat(self._fences)["entries"])

    # -- synced writes -------------------------------------------------------------------------

    def bump_incarnation(self) -> int:
        """The next incarnation, durable before it is returned (one per agent start)."""
        with self._env.begin(write=True) as txn:
            incarnation = _meta_int(txn, self._meta, _INCARNATION_KEY) + 1
            txn.put(_INCARNATION_KEY, _U64.pack(incarnation), db=self._meta)
        return incarnation

    def raise_term(self, term: int) -> bool:
        """Stores `term` if it is higher than the stored one; True when it was."""
        assert term >= 0
        if not _raised(self.term(), term):
            return False
        with self._env.begin(write=True) as txn:
            if not _raised(_meta_int(txn, self._meta, _TERM_KEY), term):
                return False
            txn.put(_TERM_KEY, _U64.pack(term), db=self._meta)
        after = self.term()
        assert after >= term, f"term went from {term} to {after}"
        return True

    def raise_fences(self, fences: Mapping[str, int]) -> None:
        """Stores each task's fence if it is higher than the stored one, in one synced
        transaction. A stored fence never decreases."""
        if not fences:
            return
        with self._env.begin(write=True) as txn:
            for key, fence in fences.items():
                assert fence >= 1, f"fence {fence} for {key}"
                self._raise_one(txn, key.encode(), fence)
            if int(txn.stat(self._fences)["entries"]) > self._max_entries:
                self._prune(txn)
        for key, fence in fences.items():
            stored = self.fence(key)
            assert stored is not None and stored >= fence, f"{key}: stored {stored} < {fence}"

    def _raise_one(self, txn: Any, key: bytes, fence: int) -> None:
        raw = txn.get(key, db=self._fences)
        old = None if raw is None else int(_U64.unpack(raw)[0])
        if not _raised(old, fence):
            return
        if old is not None:
            txn.delete(_U64.pack(old), db=self._by_fence)
        txn.put(key, _U64.pack(fence), db=self._fences)
        txn.put(_U64.pack(fence), key, db=self._by_fence)

    def _prune(self, txn: Any) -> None:
        """Drops the entries with the lowest fences and raises the floor to the highest of them."""
        floor = _meta_int(txn, self._meta, _FLOOR_KEY)
        cursor = txn.cursor(db=self._by_fence)
        dropped: list[tuple[bytes, bytes]] = []
        if cursor.first():
            for fence_raw, key in cursor.iternext():
                dropped.append((fence_raw, key))
                if len(dropped) >= self._prune_batch:
                    break
        for fence_raw, key in dropped:
            txn.delete(fence_raw, db=self._by_fence)
            txn.delete(key, db=self._fences)
        floor = _prune_floor(floor, [int(_U64.unpack(raw)[0]) for raw, _ in dropped])
        txn.put(_FLOOR_KEY, _U64.pack(floor), db=self._meta)

    # -- lifecycle -----------------------------------------------------------------------------

    def close(self) -> None:
        self._env.close()

    def __enter__(self) -> FenceStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.close()


class MemoryFenceStore:
    """`FenceStore`'s rules over dicts: what the simulation keeps on an agent's disk (it
    survives the agent's crash because the simulation keeps the object)."""

    def __init__(self, *, max_entries: int = limits.MAX_FENCE_ENTRIES,
                 prune_batch: int = FENCE_PRUNE_BATCH) -> None:
        assert max_entries >= 1 and prune_batch >= 1
        self._max_entries = max_entries
        self._prune_batch = prune_batch
        self._fences: dict[str, int] = {}
        self._term = 0
        self._incarnation = 0
        self._floor = 0

    def fence(self, task_key: str) -> int | None:
        return _read_fence(self._fences.get(task_key), self._floor)

    def term(self) -> int:
        return self._term

    def incarnation(self) -> int:
        return self._incarnation

    def floor(self) -> int:
        return self._floor

    def entries(self) -> int:
        return len(self._fences)

    def bump_incarnation(self) -> int:
        self._incarnation += 1
        return self._incarnation

    def raise_term(self, term: int) -> bool:
        assert term >= 0
        if not _raised(self._term, term):
            return False
        self._term = term
        return True

    def raise_fences(self, fences: Mapping[str, int]) -> None:
        for key, fence in fences.items():
            assert fence >= 1, f"fence {fence} for {key}"
            if _raised(self._fences.get(key), fence):
                self._fences[key] = fence
        if len(self._fences) > self._max_entries:
            lowest = sorted(self._fences.items(), key=lambda item: item[1])[:self._prune_batch]
            for key, _ in lowest:
                del self._fences[key]
            self._floor = _prune_floor(self._floor, [fence for _, fence in lowest])


def _meta_int(txn: Any, db: Any, key: bytes) -> int:
    raw = txn.get(key, db=db)
    return 0 if raw is None else int(_U64.unpack(raw)[0])
