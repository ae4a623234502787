"""Browser sessions: a random id (the cookie) mapped, in memory only, to the user's API token,
a per-session CSRF token and the session's client. Bounded (`limits.WEB_MAX_SESSIONS`: the one
idle the longest is ended to make room) and ended after `limits.WEB_SESSION_IDLE_S` unused.
The token is never written anywhere: not to a cookie, a URL or a log."""

from __future__ import annotations

import hmac
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from raftsched import limits

SESSION_ID_BYTES = 32
CSRF_BYTES = 32

C = TypeVar("C")


@dataclass(slots=True)
class Session(Generic[C]):
    session_id: str
    client: C
    role: str
    """"user", "operator" (may read cluster status and tenants) or "admin" (may also act on
    clusters: drain, undrain)."""
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(CSRF_BYTES))
    last_used: float = 0.0

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self.csrf.encode())


class SessionStore(Generic[C]):
    """Thread-safe. `close_client` is called on each client whose session ends."""

    def __init__(self, close_client: Callable[[C], None], *,
                 max_sessions: int = limits.WEB_MAX_SESSIONS,
                 idle_s: float = limits.WEB_SESSION_IDLE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._close = close_client
        self._max = max_sessions
        self._idle_s = idle_s
        self._clock = clock
        self._lock = threading.Lock()
        self._sessions: OrderedDict[str, Session[C]] = OrderedDict()

    def open(self, client: C, role: str) -> Session[C]:
        session = Session(secrets.token_urlsafe(SESSION_ID_BYTES), client, role,
                          last_used=self._clock())
        ended: list[Session[C]] = []
        with self._lock:
            ended += self._expire_locked()
            while len(self._sessions) >= self._max:
                ended.append(self._sessions.popitem(last=False)[1])
            self._sessions[session.session_id] = session
        self._end(ended)
        return session

    def get(self, session_id: str | None) -> Session[C] | None:
        if not session_id:
            return None
        with self._lock:
            ended = self._expire_locked()
            session = self._sessions.get(session_id)
            if session is not None:
                session.last_used = self._clock()
                self._sessions.move_to_end(session_id)
        self._end(ended)
        return session

    def close(self, session_id: str | None) -> None:
        with self._lock:
            session = self._sessions.pop(session_id or "", None)
        self._end([session] if session else [])

    def close_all(self) -> None:
        with self._lock:
            ended = list(self._sessions.values())
            self._sessions.clear()
        self._end(ended)

    def holds(self, session_id: str) -> bool:
        """Whether this session is open (without touching its last use)."""
        with self._lock:
            return session_id in self._sessions

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def _expire_locked(self) -> list[Session[C]]:
        """Sessions idle too long, oldest first (the dict is in order of last use)."""
        ended = []
        cutoff = self._clock() - self._idle_s
        while self._sessions:
            oldest = next(iter(self._sessions.values()))
            if oldest.last_used > cutoff:
                break
            ended.append(self._sessions.popitem(last=False)[1])
        return ended

    def _end(self, sessions: list[Session[C]]) -> None:
        for session in sessions:
            self._close(session.client)
