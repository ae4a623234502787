"""One event stream shared by many live job pages.

A replica serves few long streams (`limits.MAX_STREAMS`, `MAX_STREAMS_PER_CALLER` of them to one
token), so a page must not hold one of its own: fifty open job pages would be fifty streams. An
`EventHub` follows `Client.watch_events()` (every change its token may see) on one thread and
*marks* the pages that follow a job when an event of that job comes; a page then fetches what it
shows with the signed-in user's own token. Nothing of an event is forwarded to a browser, so a
hub may follow with a token that sees more than a page's user (the console's own watch token):
a page subscribes only after the user's `GetJob` of that job succeeded.

The thread runs while some page follows and ends at the first event after the last one left
(the stream's "progress" events come every few seconds, so an idle hub ends soon). A broken
stream (too old, no replica answered within the client's retry budget) marks every page (each
fetches its state again) and is opened again from now, after the client's jittered backoff
(doubling up to `limits.WEB_HUB_MAX_BACKOFF_S`, so the hubs of many sessions that lost one leader
do not all come back in the same instant); a stream that ended by itself after delivering
events (its maximum age) is opened again at once, one that ended without any is backed off like a
broken one; a page never waits on a stream that is not there: it
is marked."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from raftsched import eventlog, limits
from raftsched.client.retry import Backoff
from raftsched.errors import RaftschedError
from raftsched.states import TERMINAL_JOB_STATE_NAMES

LOG = eventlog.EventLogger("web")
PROGRESS = "progress"
TERMINAL_JOB_STATES = TERMINAL_JOB_STATE_NAMES
RESTART_BACKOFF = Backoff(initial_s=1.0, max_s=limits.WEB_HUB_MAX_BACKOFF_S)


class EventSource(Protocol):
    def watch_events(self, from_index: int = 0, job_id: str = "", tenant: str = "",
                     clusters: bool = False) -> Iterator[Any]: ...


class Subscription:
    """One page's interest in one job; `changed` is set (on the page's event loop) when the job
    changed or the hub lost its stream, `ended` once the job's own event said it ended."""

    def __init__(self, job_id: str, loop: asyncio.AbstractEventLoop, since: int) -> None:
        self.job_id = job_id
        self.changed = asyncio.Event()
        self.ended = False
        self.since = since
        """The hub's last index when the page subscribed: a page whose first fetch reflects
        less (a lagging replica answered) fetches again."""
        self._loop = loop

    def mark(self, ended: bool = False) -> None:
        self.ended = self.ended or ended
        self._loop.call_soon_threadsafe(self.changed.set)


class EventHub:
    def __init__(self, source: EventSource, name: str,
                 wait: Callable[[float], bool] | None = None,
                 rng: random.Random | None = None) -> None:
        """`wait(seconds)`: sleeps between restarts and answers True if the hub is closing;
        `rng` draws the backoff's jitter (tests pass a seeded one)."""
        self._source = source
        self._name = name
        self._lock = threading.Lock()
        self._pages: dict[str, set[Subscription]] = {}
        self._thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._wait = wait or self._closing.wait
        self._rng = rng or random.Random()
        self.index = 0
        """The last index whose events this hub dispatched."""
        self.restarts = 0

    def subscribe(self, job_id: str, loop: asyncio.AbstractEventLoop) -> Subscription:
        with self._lock:
            page = Subscription(job_id, loop, self.index)
            self._pages.setdefault(job_id, set()).add(page)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name=f"web-hub-{self._name}")
                self._thread.start()
        page.mark()  # whatever changed since the page was drawn is fetched at once
        return page

    def unsubscribe(self, page: Subscription) -> None:
        with self._lock:
            pages = self._pages.get(page.job_id)
            if pages is not None:
                pages.discard(page)
                if not pages:
                    del self._pages[page.job_id]

    def followed(self) -> int:
        """Pages following through this hub."""
        with self._lock:
            return sum(len(pages) for pages in self._pages.values())

    def running(self) -> bool:
        with self._lock:
            return self._thread is not None

    def close(self) -> None:
        self._closing.set()
        self._mark_all()

    def _run(self) -> None:
        failures = 0
        while not self._closing.is_set():
            delivered = False
            try:
                for event in self._source.watch_events():
                    failures, delivered = 0, True
                    if not self._dispatch(event):
                        return
                if not delivered:
                    failures += 1  # a stream that ends at once, again and again, is backed off
            except RaftschedError as error:
                failures += 1
                self.restarts += 1
                LOG.warning("web_events_restarted", hub=self._name, failures=failures,
                            error=str(error))
            except BaseException:
                self._end_thread()
                self._mark_all()
                raise
            self._mark_all()
            # a stream that ended after delivering (its maximum age) is opened again at once
            delay_s = RESTART_BACKOFF.delay_s(failures, self._rng) if failures else 0.0
            if self._idle_end() or self._wait(delay_s):
                return
        self._end_thread()

    def _dispatch(self, event: Any) -> bool:
        """Marks the pages of the event's job; False (and the thread is done) when no page is
        left."""
        with self._lock:
            self.index = max(self.index, int(event.index))
            if not self._pages:
                self._thread = None
                return False
            pages = list(self._pages.get(event.job_id, ())) if event.kind != PROGRESS else []
        ended = event.kind == "job" and event.state in TERMINAL_JOB_STATES
        for page in pages:
            page.mark(ended)
        return True

    def _idle_end(self) -> bool:
        with self._lock:
            if self._pages and not self._closing.is_set():
                return False
            self._thread = None
            return True

    def _end_thread(self) -> None:
        with self._lock:
            self._thread = None

    def _mark_all(self) -> None:
        with self._lock:
            pages = [page for pages in self._pages.values() for page in pages]
        for page in pages:
            page.mark()
