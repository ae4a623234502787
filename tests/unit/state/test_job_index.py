"""The job index (raftsched/state/job_index.py) against a plain model under random adds, moves
and removes: every order holds exactly the model's jobs in seq order, both scans agree with
it from any point, and holes are compacted away. A failing seed is printed and replays:
`SIM_SEED=<n> pytest tests/unit/state/test_job_index.py`."""

from __future__ import annotations

import os
import random

import pytest

from raftsched.limits import JOB_INDEX_COMPACT_MIN_HOLES as COMPACT_MIN_DEAD
from raftsched.limits import JOB_INDEX_SCAN_SLICE as SCAN_SLICE
from raftsched.state.job_index import JobIndex, JobOrder

TENANTS = ("a", "b", "c")
SEEDS = [int(os.environ["SIM_SEED"])] if "SIM_SEED" in os.environ else list(range(10))


def expected(model: dict[int, tuple[str, int]], tenant: str | None,
             state: int | None) -> list[tuple[int, str]]:
    return [(seq, f"j{seq}") for seq, (t, s) in sorted(model.items())
            if tenant in (None, t) and state in (None, s)]


def check(index: JobIndex, model: dict[int, tuple[str, int]], rng: random.Random) -> None:
    for tenant in (None, *TENANTS):
        for state in (None, 0, 1, 2):
            want = expected(model, tenant, state)
            order = index.order(tenant, state)
            assert index.count(tenant, state) == len(want) == order.live, (tenant, state)
            assert list(order.oldest_after(0)) == want
            assert list(order.newest_before(None)) == want[::-1]
            pivot = rng.randint(0, max(model, default=0) + 1)
            assert list(order.oldest_after(pivot)) == [e for e in want if e[0] > pivot]
            assert list(order.newest_before(pivot)) == [e for e in want if e[0] < pivot][::-1]
            assert (tenant, state) in index.orders or not want  # no empty order is kept
    assert all(o.live for o in index.orders.values())


def step(index: JobIndex, model: dict[int, tuple[str, int]], rng: random.Random,
         next_seq: int) -> int:
    """One random operation: add a new job, move one to a later state, or remove one."""
    kind = rng.randrange(10)
    if kind < 4 or not model:
        tenant = rng.choice(TENANTS)
        index.add(tenant, 0, next_seq, f"j{next_seq}")
        model[next_seq] = (tenant, 0)
        return next_seq + rng.randint(1, 3)  # seqs need not be contiguous
    seq = rng.choice(list(model))
    tenant, state = model[seq]
    if kind < 7 and state < 2:  # job states only move forward
        new = rng.randint(state + 1, 2)
        index.move(tenant, state, new, seq, f"j{seq}")
        model[seq] = (tenant, new)
    else:
        index.remove(tenant, state, seq)
        del model[seq]
    return next_seq


@pytest.mark.parametrize("seed", SEEDS)
def test_the_index_equals_the_model_under_random_operations(seed: int) -> None:
    rng = random.Random(seed)
    index, next_seq = JobIndex(), 1
    model: dict[int, tuple[str, int]] = {}
    try:
        for n in range(3_000):
            next_seq = step(index, model, rng, next_seq)
            everything = index.orders.get((None, None))
            if everything is not None:
                holes = len(everything.seqs) - everything.live
                assert holes <= max(everything.live, COMPACT_MIN_DEAD - 1), holes
            if n % 97 == 0:
                check(index, model, rng)
        check(index, model, rng)
    except AssertionError as exc:
        raise AssertionError(f"job index diverged; replay with SIM_SEED={seed}: {exc}") from exc


def test_an_order_compacts_when_its_holes_outnumber_its_jobs() -> None:
    order = JobOrder()
    for seq in range(1, 2 * COMPACT_MIN_DEAD + 2):
        order.add(seq, f"j{seq}")
    for seq in range(1, COMPACT_MIN_DEAD + 1):
        order.remove(seq)
    assert len(order.seqs) == 2 * COMPACT_MIN_DEAD + 1  # 64 holes, 65 jobs: kept as holes
    order.remove(COMPACT_MIN_DEAD + 1)  # 65 holes, 64 jobs: compacted
    assert len(order.seqs) == order.live == COMPACT_MIN_DEAD
    assert order.job_ids() == [f"j{s}" for s in range(COMPACT_MIN_DEAD + 2,
                                                       2 * COMPACT_MIN_DEAD + 2)]


def test_a_scan_crosses_slices_in_both_directions() -> None:
    order = JobOrder()
    count = 3 * SCAN_SLICE + 7
    for seq in range(1, count + 1):
        order.add(seq, f"j{seq}")
    assert [s for s, _ in order.oldest_after(5)] == list(range(6, count + 1))
    assert [s for s, _ in order.newest_before(count - 5)] == list(range(count - 6, 0, -1))


def test_a_job_entering_a_state_takes_its_place_by_seq() -> None:
    order = JobOrder()
    for seq in (2, 5, 9):
        order.add(seq, f"j{seq}")
    order.add(7, "j7")
    order.add(1, "j1")
    assert [s for s, _ in order.oldest_after(0)] == [1, 2, 5, 7, 9]
