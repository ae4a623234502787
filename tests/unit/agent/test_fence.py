"""admit() as a table; FenceStore: fences never decrease, survive reopen, term and incarnation
stored, bounded with a floor."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.fence import Admission, FenceStore, admit


@pytest.mark.parametrize(("stored_fence", "fence", "stored_term", "term", "expected"), [
    (None, 1, 0, 0, Admission.RUN),            # first fence ever
    (None, 7, 3, 3, Admission.RUN),
    (5, 6, 1, 1, Admission.RUN),               # higher fence
    (5, 6, 1, 2, Admission.RUN),               # ... from a newer leader
    (5, 5, 1, 1, Admission.REDELIVERY),        # same fence: acknowledge again, never run twice
    (5, 5, 1, 9, Admission.REDELIVERY),
    (5, 4, 1, 1, Admission.STALE_FENCE),       # lower fence: reject
    (5, 1, 2, 3, Admission.STALE_FENCE),
    (5, 6, 2, 1, Admission.STALE_TERM),        # a deposed leader: ignored whatever the fence
    (5, 5, 2, 1, Admission.STALE_TERM),
    (None, 1, 2, 1, Admission.STALE_TERM),
    (5, 4, 2, 1, Admission.STALE_TERM),
])
def test_admit_table(stored_fence: int | None, fence: int, stored_term: int, term: int,
                     expected: Admission) -> None:
    assert admit(stored_fence, fence, stored_term, term) == expected


def test_admit_refuses_a_zero_fence() -> None:
    with pytest.raises(AssertionError):
        admit(None, 0, 0, 0)


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
        assert admit(store.fence("job/t2"), 20, 0, 0) == Admission.REDELIVERY
        assert admit(store.fence("job/t1"), 10, 0, 0) == Admission.STALE_FENCE
        assert admit(store.fence("job/new"), 60, 0, 0) == Admission.RUN
        assert store.fence("job/t5") == 50        # kept entries are untouched
    with FenceStore(tmp_path / "f") as store:
        assert store.floor() == 20
