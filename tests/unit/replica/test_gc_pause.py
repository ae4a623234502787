"""`gc_pause.paused`: blocks of two threads (the SubmitJob handler and the applier) overlapping
in any order leave the collector off while either is inside, and as it was once both are out."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from raftsched.replica import gc_pause


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def test_overlapping_blocks_ending_in_either_order() -> None:
    first, second = gc_pause.paused(), gc_pause.paused()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert not gc.isenabled(), "the second block is still inside"
    second.__exit__(None, None, None)
    assert gc.isenabled()


def test_nested_blocks_and_an_exception() -> None:
    with pytest.raises(RuntimeError), gc_pause.paused():
        with gc_pause.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
        raise RuntimeError
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with gc_pause.paused():
        pass
    assert not gc.isenabled()
