"""The console's EventHub: one event stream marks every page of the job it concerns, ends when
the last page leaves, and survives a broken stream by marking every page and opening again."""

from __future__ import annotations

import asyncio
import queue
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from raftsched.errors import Code, RaftschedError
from raftsched.web.hub import RESTART_BACKOFF, EventHub, Subscription

WAIT_S = 10.0


@dataclass
class Ev:
    index: int
    kind: str
    job_id: str = ""
    state: str = ""


END = object()
"""Put into a Source: its stream ends by itself (as a replica's does at its maximum age)."""


class Source:
    """watch_events() yields what the test puts; an exception put is raised; END ends it."""

    def __init__(self) -> None:
        self.items: queue.Queue[Any] = queue.Queue()
        self.opened = 0
        self.opened_event = threading.Event()

    def watch_events(self, from_index: int = 0, job_id: str = "", tenant: str = "",
                     clusters: bool = False) -> Iterator[Any]:
        assert (from_index, job_id, tenant, clusters) == (0, "", "", False)
        self.opened += 1
        self.opened_event.set()
        while True:
            item = self.items.get(timeout=WAIT_S)
            if isinstance(item, BaseException):
                raise item
            if item is END:
                return
            yield item


async def _marked(page: Subscription) -> bool:
    try:
        await asyncio.wait_for(page.changed.wait(), WAIT_S)
    except TimeoutError:
        return False
    page.changed.clear()
    return True


async def _quiet(page: Subscription, hub_source: Source, index: int) -> bool:
    """Nothing marked `page` once the hub has dispatched a progress event at `index` (sent
    after the events under test, so every one before it was dispatched)."""
    hub_source.items.put(Ev(index, "progress"))
    for _ in range(int(WAIT_S * 100)):
        await asyncio.sleep(0.01)
        if hub_index(page) >= index:
            break
    await asyncio.sleep(0)  # marks are delivered through the loop
    return not page.changed.is_set()


_hubs: dict[int, EventHub] = {}


def hub_index(page: Subscription) -> int:
    return _hubs[id(page)].index


def _subscribe(hub: EventHub, job_id: str) -> Subscription:
    page = hub.subscribe(job_id, asyncio.get_running_loop())
    _hubs[id(page)] = hub
    return page


def test_one_stream_marks_only_the_pages_of_the_job_and_says_when_it_ended() -> None:
    async def main() -> None:
        source = Source()
        hub = EventHub(source, "test")
        pages_a = [_subscribe(hub, "a") for _ in range(50)]
        page_b = _subscribe(hub, "b")
        for page in [*pages_a, page_b]:
            assert await _marked(page)  # the first mark: fetch what changed since drawn
        source.items.put(Ev(5, "task", "a", "SUCCEEDED"))
        for page in pages_a:
            assert await _marked(page) and not page.ended
        assert await _quiet(page_b, source, 6)
        source.items.put(Ev(7, "job", "b", "FAILED"))
        assert await _marked(page_b) and page_b.ended
        assert source.opened == 1  # fifty-one pages, one stream
        assert hub.followed() == 51
        for page in [*pages_a, page_b]:
            hub.unsubscribe(page)
        hub.close()
        source.items.put(Ev(8, "progress"))

    asyncio.run(main())


def test_the_stream_ends_after_the_last_page_left_and_opens_again_for_a_new_one() -> None:
    async def main() -> None:
        source = Source()
        hub = EventHub(source, "test")
        page = _subscribe(hub, "a")
        assert await _marked(page)
        hub.unsubscribe(page)
        source.items.put(Ev(3, "progress"))  # the thread sees nobody is left
        for _ in range(int(WAIT_S * 100)):
            if not hub.running():
                break
            await asyncio.sleep(0.01)
        assert not hub.running()
        again = _subscribe(hub, "a")
        assert await _marked(again)
        assert again.since == 3  # what the hub had dispatched when the page came
        source.items.put(Ev(4, "attempt", "a", "RUNNING"))
        assert await _marked(again)
        assert source.opened == 2
        hub.unsubscribe(again)
        hub.close()
        source.items.put(Ev(5, "progress"))

    asyncio.run(main())


@pytest.mark.parametrize("code", [Code.FAILED_PRECONDITION, Code.UNAVAILABLE])
def test_a_broken_stream_marks_every_page_and_opens_again(code: Code) -> None:
    async def main() -> None:
        source = Source()
        waits: list[float] = []
        hub = EventHub(source, "test", wait=lambda s: waits.append(s) is not None,
                       rng=random.Random(7))
        pages = [_subscribe(hub, "a"), _subscribe(hub, "b")]
        for page in pages:
            assert await _marked(page)
        source.opened_event.clear()
        source.items.put(RaftschedError(code, "too old: list again"))
        for page in pages:
            assert await _marked(page)  # each fetches its state again
        assert await asyncio.to_thread(source.opened_event.wait, WAIT_S)
        assert source.opened == 2 and hub.restarts == 1
        # the first restart waits the jittered first step of the client's backoff
        assert waits == [RESTART_BACKOFF.delay_s(1, random.Random(7))]
        assert (1 - RESTART_BACKOFF.jitter) <= waits[0] <= 1.0
        source.items.put(Ev(9, "task", "b", "RUNNING"))
        assert await _marked(pages[1])
        for page in pages:
            hub.unsubscribe(page)
        hub.close()
        source.items.put(Ev(10, "progress"))

    asyncio.run(main())


def test_a_stream_that_ends_by_itself_opens_again_at_once_and_an_empty_one_backs_off() -> None:
    async def main() -> None:
        source = Source()
        waits: list[float] = []
        hub = EventHub(source, "test", wait=lambda s: waits.append(s) is not None,
                       rng=random.Random(3))
        page = _subscribe(hub, "a")
        assert await _marked(page)
        source.opened_event.clear()
        source.items.put(Ev(4, "task", "a", "RUNNING"))
        source.items.put(END)  # ended after delivering: opened again without a wait
        assert await _marked(page)
        assert await asyncio.to_thread(source.opened_event.wait, WAIT_S)
        assert source.opened == 2 and waits == [0.0]
        source.opened_event.clear()
        source.items.put(END)  # ended with nothing delivered: the backoff's first step
        assert await asyncio.to_thread(source.opened_event.wait, WAIT_S)
        assert source.opened == 3
        assert waits == [0.0, RESTART_BACKOFF.delay_s(1, random.Random(3))]
        assert hub.restarts == 0  # neither was a broken stream
        source.items.put(Ev(6, "task", "a", "SUCCEEDED"))
        assert await _marked(page)
        hub.unsubscribe(page)
        hub.close()
        source.items.put(Ev(7, "progress"))

    asyncio.run(main())
