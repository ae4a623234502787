"""`invariants.check_invariants` holds on a state the FSM built, and catches each kind of
corruption it is meant to: one table row per invariant, each breaking a busy state one way."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from raftsched import limits
from raftsched.state import commands as c
from raftsched.state import invariants
from raftsched.state.model import AttemptState, Role, State, TaskState, TokenRecord
from tests.support.fsmkit import Harness, job_doc, task_doc


def busy() -> Harness:
    h = Harness()
    h.register("east")
    h.register("west", caps=("linux", "gpu"), gpu=1)
    h.submit("j1", job_doc([task_doc("a"), task_doc("b", ["a"]), task_doc("c", ["a"]),
                            task_doc("d", ["b"])]))
    h.run_task("east", "j1", "a")
    fence = h.assign_one("j1", "b", "west")
    h.started("west", "j1", "b", fence)
    h.ok(c.TokenPut(ADMIN, b"\x01" * 32, "*", "admin", "", h.now_ms, bootstrap=True))
    h.tick(5)
    h.ok(c.TokenPut(USER, b"\x02" * 32, "default", "user", "ci", h.now_ms))
    return h


ADMIN, USER = "a000000000000001", "b000000000000001"


def _rekey_token(s: State) -> None:
    s.tokens["c000000000000001"] = s.tokens.pop(USER)


def _too_many_tokens(s: State) -> None:
    for n in range(limits.MAX_TOKENS):
        s.tokens[f"{n:016x}"] = TokenRecord(f"{n:016x}", b"\x03" * 32, "*", Role.USER, s.now_ms, "")


def _token(s: State, **fields: object) -> None:
    for name, value in fields.items():
        setattr(s.tokens[USER], name, value)


def _drift_reservation(s: State) -> None:
    s.clusters["west"].reserved_cpu_milli += 1


def _reuse_fence(s: State) -> None:
    job = s.jobs["j1"]
    b = job.tasks[job.index_of["b"]]
    a = job.tasks[job.index_of["a"]]
    assert b.current is not None and a.current is not None
    b.current.fence = a.current.fence


def _end_live_attempt(s: State) -> None:
    job = s.jobs["j1"]
    attempt = job.tasks[job.index_of["b"]].current
    assert attempt is not None
    attempt.state = AttemptState.FAILED


def _ready_too_early(s: State) -> None:
    job = s.jobs["j1"]
    d = job.tasks[job.index_of["d"]]
    job.counts[d.state] -= 1
    d.state = TaskState.SUCCEEDED
    job.counts[d.state] += 1


CORRUPTIONS: list[tuple[str, Callable[[State], None], str]] = [
    ("live-jobs", lambda s: setattr(s, "live_jobs", s.live_jobs + 1), ""),
    ("task-count", lambda s: setattr(s, "task_count", s.task_count - 1), ""),
    ("counts", lambda s: s.jobs["j1"].counts.__setitem__(TaskState.PENDING, 9), "j1"),
    ("queue-live", lambda s: setattr(s.queues["default"], "live", 5), "default"),
    ("reservations", _drift_reservation, "reservations drifted"),
    ("over-capacity", lambda s: setattr(s.clusters["west"], "cpu_milli", 0), "capacity"),
    ("fence-reuse", _reuse_fence, ""),
    ("fence-counter", lambda s: setattr(s, "fence", 0), ""),
    ("live-attempt-of-ended-task", _end_live_attempt, ""),
    ("ran-before-upstream", _ready_too_early, "before its upstream"),
    ("kill-count", lambda s: setattr(s, "kill_count", 3), ""),
    ("token-bound", _too_many_tokens, ""),
    ("token-key", _rekey_token, ""),
    ("token-id", lambda s: _token(s, id="B000000000000001"), ""),
    ("token-digest", lambda s: _token(s, digest=b"secret"), "digest: must be 32 bytes"),
    ("token-tenant", lambda s: _token(s, tenant="a b"), "tenant:"),
    ("token-role", lambda s: _token(s, role="root"), "role:"),
    ("token-note", lambda s: _token(s, note="x" * 201), "note:"),
    ("token-future", lambda s: _token(s, created_ms=s.now_ms + 1), "out of order"),
    ("token-order", lambda s: _token(s, created_ms=0), "out of order"),
]


def test_a_state_built_by_the_fsm_holds() -> None:
    invariants.check_invariants(busy().state)
    invariants.check_invariants(State())


@pytest.mark.parametrize(("name", "corrupt", "fragment"), CORRUPTIONS,
                         ids=[row[0] for row in CORRUPTIONS])
def test_each_corruption_is_caught(name: str, corrupt: Callable[[State], None],
                                   fragment: str) -> None:
    h = busy()
    corrupt(h.state)
    with pytest.raises(AssertionError) as caught:
        invariants.check_invariants(h.state)
    assert fragment in str(caught.value), (name, str(caught.value))
