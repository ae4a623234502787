"""The one admission rule (`policy.admission_refusal`): what JOB_SUBMIT refuses by the state's
bounds and queue limits, which the leader also checks before it proposes
(`policy.refusal_before_proposal`). Both answer alike — same limit, message and retry-after —
except that a known idempotency key is always left to JOB_SUBMIT (it answers the same job, or
ALREADY_EXISTS, whatever the limits)."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched import limits
from raftsched.errors import Code
from raftsched.spec.validation import validate_job_doc
from raftsched.state import commands as c
from raftsched.state import policy
from raftsched.state.outcome import Applied, Outcome, Rejected
from tests.support.fsmkit import Harness, job_doc, task_doc


def tasks(count: int, **fields: Any) -> dict[str, Any]:
    return job_doc([task_doc(f"t{i}") for i in range(count)], **fields)


def both(h: Harness, job_id: str, doc: dict[str, Any]) -> tuple[Any, Outcome]:
    """The leader's answer before proposing, then what applying the submit answers."""
    before = policy.refusal_before_proposal(h.state, validate_job_doc(doc))
    return before, h.submit(job_id, doc)


def assert_same_refusal(before: Any, applied: Outcome, limit: str) -> None:
    assert isinstance(before, policy.Refusal) and before.limit == limit, before
    assert isinstance(applied, Rejected), applied
    assert (applied.code, applied.reason, applied.retry_after_ms) == \
        (Code.RESOURCE_EXHAUSTED, before.reason, before.retry_after_ms)


def test_max_queued_is_refused_alike_before_proposing_and_at_apply() -> None:
    h = Harness()
    h.ok(c.TenantSet("alpha", 1, 3, 0, h.now_ms))
    before, applied = both(h, "a", tasks(2, tenant="alpha"))
    assert before is None and isinstance(applied, Applied)
    before, applied = both(h, "b", tasks(2, tenant="alpha"))
    assert_same_refusal(before, applied, "max_queued")
    assert before.reason == (f"tenant alpha has 2 task(s) queued; 2 more would pass its "
                             f"max_queued=3 (see `raftsched admin tenant list`); retry after "
                             f"{policy.BACKPRESSURE_RETRY_AFTER_MS} ms")
    assert before.retry_after_ms == policy.BACKPRESSURE_RETRY_AFTER_MS


@pytest.mark.parametrize(("bound", "value", "limit", "reason"), [
    ("MAX_QUEUED_TASKS", 2, "MAX_QUEUED_TASKS",
     "2 task(s) are queued over all tenants; 2 more would pass MAX_QUEUED_TASKS=2; retry after "
     f"{policy.BACKPRESSURE_RETRY_AFTER_MS} ms"),
    ("MAX_LIVE_JOBS", 1, "MAX_LIVE_JOBS", "1 jobs are live, the bound MAX_LIVE_JOBS"),
    ("MAX_TASKS_IN_STATE", 3, "MAX_TASKS_IN_STATE",
     "2 tasks held; 2 more would pass MAX_TASKS_IN_STATE=3"),
])
def test_the_state_bounds_are_refused_alike_before_proposing_and_at_apply(
        monkeypatch: pytest.MonkeyPatch, bound: str, value: int, limit: str,
        reason: str) -> None:
    h = Harness()
    monkeypatch.setattr(limits, bound, value)
    assert isinstance(h.submit("a", tasks(2)), Applied)
    before, applied = both(h, "b", tasks(2))
    assert_same_refusal(before, applied, limit)
    assert before.reason == reason


def test_a_new_tenant_past_max_tenants_is_refused_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    h = Harness()
    monkeypatch.setattr(limits, "MAX_TENANTS", 1)
    assert isinstance(h.submit("a", tasks(1)), Applied)
    before, applied = both(h, "b", tasks(1, tenant="other"))
    assert_same_refusal(before, applied, "MAX_TENANTS")
    assert both(h, "c", tasks(1))[0] is None, "a known tenant is not a new one"


def test_a_known_idempotency_key_is_answered_by_apply_whatever_the_limits() -> None:
    h = Harness()
    h.ok(c.TenantSet("alpha", 1, 2, 0, h.now_ms))
    accepted = h.submit("a", tasks(2, tenant="alpha", idempotency_key="k"))
    assert isinstance(accepted, Applied)
    before, applied = both(h, "a-again", tasks(2, tenant="alpha", idempotency_key="k"))
    assert before is None
    assert isinstance(applied, Applied) and applied.result.created is False
    before, applied = both(h, "a-other", tasks(1, tenant="alpha", idempotency_key="k"))
    assert before is None
    assert isinstance(applied, Rejected) and applied.code == Code.ALREADY_EXISTS
    before, _ = both(h, "b", tasks(1, tenant="alpha", idempotency_key="new"))
    assert isinstance(before, policy.Refusal) and before.limit == "max_queued"
