"""admit() as a table; FenceStore: fences never decrease, survive reopen, term and incarnation
stored, bounded with a floor."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agent.fence import Admission, FenceStore, MemoryFenceStore, admit, term_is_stale


@pytest.mark.parametrize(("stored_fence", "fence", "expected"), [
    (None, 1, Admission.RUN),            # first fence ever
    (None, 7, Admission.RUN),
    (5, 6, Admission.RUN),               # higher fence
    (5, 5, Admission.REDELIVERY),        # same fence: acknowledge again, never run twice
    (5, 4, Admission.STALE_FENCE),       # lower fence: reject
    (5, 1, Admission.STALE_FENCE),
])
def test_admit_table(stored_fence: int | None, fence: int, expected: Admission) -> None:
    assert admit(stored_fence, fence) == expected


@pytest.mark.parametrize(("stored_term", "term", "stale"), [
    (0, 0, False), (3, 3, False), (3, 4, False),   # the same or a newer leader
    (2, 1, True), (9, 0, True),                    # a deposed leader: ignored whatever it says
])
def test_the_term_rule(stored_term: int, term: int, stale: bool) -> None:
    assert term_is_stale(stored_term, term) is stale


def test_admit_refuses_a_zero_fence() -> None:
    with pytest.raises(AssertionError):
        admit(None, 0)


def test_fences_never_decrease_and_survive_reopen(tmp_path: Path) -> None:
    with FenceStore(tmp_path / "f") as store:
        assert store.fence("job/a") is None
        store.raise_fences({"job/a": 5, "job/b": 2})
        store.raise_fences({"job/a": 3})          # lower: ignored
        store.raise_fences({"job/a": 5})          # same: unchanged
        store.raise_fences({"job/b": 9})
        assert (store.fence("job/a"), store.fence("job/b")) == (5, 9)
    with FenceStore(tmp_path / "f") as store:
        assert (store.fence("job/a"), store.fence("job/b")) == (5, 9)
        assert store.fence("job/c") is None
        assert store.entries() == 2


def test_term_only_grows_and_survives_reopen(tmp_path: Path) -> None:
    with FenceStore(tmp_path / "f") as store:
        assert store.term() == 0
        assert store.raise_term(4) is True
        assert store.raise_term(2) is False
        assert store.raise_term(4) is False
        assert store.term() == 4
    with FenceStore(tmp_path / "f") as store:
        assert store.term() == 4


def test_incarnation_grows_per_bump_across_reopen(tmp_path: Path) -> None:
    with FenceStore(tmp_path / "f") as store:
        assert store.incarnation() == 0
        assert store.bump_incarnation() == 1
        assert store.bump_incarnation() == 2
    with FenceStore(tmp_path / "f") as store:
        assert store.bump_incarnation() == 3


def test_bound_folds_the_lowest_fences_into_a_floor(tmp_path: Path) -> None:
    with FenceStore(tmp_path / "f", max_entries=4, prune_batch=2) as store:
        for fence in range(1, 6):                 # 5 entries > 4: fences 1 and 2 are folded
            store.raise_fences({f"job/t{fence}": fence * 10})
        assert store.entries() == 3
        assert store.floor() == 20
        # A dropped task reads as the floor: its old fence is a redelivery, lower ones stale.
        assert store.fence("job/t1") == 20
        assert admit(store.fence("job/t2"), 20) == Admission.REDELIVERY
        assert admit(store.fence("job/t1"), 10) == Admission.STALE_FENCE
        assert admit(store.fence("job/new"), 60) == Admission.RUN
        assert store.fence("job/t5") == 50        # kept entries are untouched
    with FenceStore(tmp_path / "f") as store:
        assert store.floor() == 20


@pytest.mark.parametrize("seed", range(5))
def test_the_memory_store_answers_as_the_lmdb_store(tmp_path: Path, seed: int) -> None:
    """The simulation's store and the real one share the rules: the same writes give the same
    reads (fences, floor after pruning, term, incarnation)."""
    rng = random.Random(seed)
    memory = MemoryFenceStore(max_entries=6, prune_batch=3)
    keys = [f"job/t{i}" for i in range(12)]
    with FenceStore(tmp_path / "f", max_entries=6, prune_batch=3) as lmdb_store:
        for _ in range(200):
            roll = rng.random()
            if roll < 0.6:
                picked = rng.sample(range(len(keys)), rng.randint(1, 3))
                # A fence is unique across the scheduler: one fence never names two tasks.
                fences = {keys[i]: rng.randint(0, 60) * len(keys) + i + 1 for i in picked}
                lmdb_store.raise_fences(fences)
                memory.raise_fences(fences)
            elif roll < 0.9:
                term = rng.randint(0, 20)
                assert lmdb_store.raise_term(term) == memory.raise_term(term)
            else:
                assert lmdb_store.bump_incarnation() == memory.bump_incarnation()
            assert [lmdb_store.fence(k) for k in keys] == [memory.fence(k) for k in keys]
            assert (lmdb_store.floor(), lmdb_store.entries(), lmdb_store.term()) \
                == (memory.floor(), memory.entries(), memory.term())
