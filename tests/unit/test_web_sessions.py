"""The console's session store (raftsched/web/sessions.py): bounded, idle expiry, CSRF."""

from __future__ import annotations

from raftsched.web.sessions import SessionStore


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_count_is_bounded_and_the_longest_idle_session_ends() -> None:
    closed: list[str] = []
    store: SessionStore[str] = SessionStore(closed.append, max_sessions=2, idle_s=100,
                                            clock=_Clock())
    a, b = store.open("a", "user"), store.open("b", "user")
    assert store.get(a.session_id) is a  # a used last: b is the longest idle
    store.open("c", "user")
    assert closed == ["b"] and len(store) == 2
    assert store.get(b.session_id) is None


def test_an_idle_session_expires_and_its_client_is_closed() -> None:
    clock, closed = _Clock(), []
    store: SessionStore[str] = SessionStore(closed.append, idle_s=10, clock=clock)
    session = store.open("a", "operator")
    clock.now = 9
    assert store.get(session.session_id) is session
    clock.now = 20
    assert store.get(session.session_id) is None and closed == ["a"]


def test_csrf_tokens_are_per_session_and_checked_exactly() -> None:
    store: SessionStore[str] = SessionStore(lambda c: None)
    one, two = store.open("a", "user"), store.open("b", "user")
    assert one.csrf != two.csrf and one.session_id != two.session_id
    assert one.csrf_ok(one.csrf)
    assert not one.csrf_ok(two.csrf) and not one.csrf_ok("") and not one.csrf_ok(None)


def test_close_ends_the_session() -> None:
    closed: list[str] = []
    store: SessionStore[str] = SessionStore(closed.append)
    session = store.open("a", "user")
    store.close(session.session_id)
    assert store.get(session.session_id) is None and closed == ["a"]
