"""Slot turnaround (agent/slots.py): freed slots are filled oldest first; idle ones drop out."""

from __future__ import annotations

import pytest

from agent.slots import SlotTurnaround
from raftsched import limits


def test_starts_fill_the_oldest_freed_slots_first() -> None:
    slots = SlotTurnaround(idle_after_s=30.0)
    slots.freed(2, now_s=10.0)
    slots.freed(1, now_s=10.5)
    assert slots.started(2, now_s=10.75) == [pytest.approx(0.75), pytest.approx(0.75)]
    assert slots.started(3, now_s=11.0) == [pytest.approx(0.5)]  # only one freed slot left
    assert slots.started(1, now_s=12.0) == []  # nothing freed: a start into spare room
    assert slots.idle == 0


def test_a_slot_nobody_needed_is_idle_not_slow() -> None:
    slots = SlotTurnaround(idle_after_s=5.0)
    slots.freed(1, now_s=0.0)
    slots.freed(1, now_s=4.0)
    assert slots.started(1, now_s=7.0) == [pytest.approx(3.0)]
    assert slots.idle == 1


def test_the_memory_is_bounded() -> None:
    slots = SlotTurnaround(idle_after_s=1e9)
    slots.freed(limits.MAX_TRACKED_FREED_SLOTS + 5, now_s=0.0)
    assert slots.idle == 5
    assert len(slots.started(limits.MAX_TRACKED_FREED_SLOTS + 5, now_s=1.0)) == \
        limits.MAX_TRACKED_FREED_SLOTS
