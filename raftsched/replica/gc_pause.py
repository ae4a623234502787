"""The cyclic garbage collector, paused around work that builds many objects at once.

A full collection walks every tracked object and holds the interpreter lock while it does, so
collections set off while a large job spec is decoded (millions of young lists) or a large entry
is applied hold the Raft thread back for as long as the heap is large. Two threads do such work
(the applier and the SubmitJob handler); `paused` composes across them, so that one ending its
block never turns the collector back on under the other.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_holders = 0
"""Blocks inside `paused` now, over every thread."""
_was_enabled = False
"""Whether the collector was on when the first of them began."""


@contextmanager
def paused() -> Iterator[None]:
    """No cyclic GC while any thread is inside such a block; when the last one ends, the
    collector is on again if it was on before the first began. Reference counting goes on
    freeing what is dropped."""
    global _holders, _was_enabled
    with _lock:
        if _holders == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and _was_enabled:
                gc.enable()


@contextmanager
def frozen_after(big: bool) -> Iterator[None]:
    """Around building a large part of the state (a snapshot load, a big JOB_SUBMIT): no cyclic
    GC while it runs, then its objects move to the permanent generation (`gc.freeze`).

    The state is millions of long-lived, acyclic objects (freed by reference counting, which
    freezing does not stop). Left in the collected generations, every full collection walks all
    of them — seconds on the tick thread at a million tasks, long enough to lose leadership —
    and collections triggered while a big entry is built run again and again as it grows. The
    young generations are collected first, so no young cyclic garbage is frozen."""
    if not big:
        yield
        return
    with paused():
        try:
            yield
        finally:
            gc.collect(1)
            gc.freeze()
