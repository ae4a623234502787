"""A job with params through the state machine: JOB_SUBMIT of a wire version 4 keeps the
values, the same key with other values is the "different spec" conflict, and a snapshot
round-trips the job (its params included) byte for byte."""

from __future__ import annotations

from typing import Any

from raftsched.errors import Code
from raftsched.state import snapshot
from raftsched.state.outcome import Applied, Rejected
from tests.support.fsmkit import Harness, assert_same_state, job_doc, task_doc


def _doc(date: str) -> dict[str, Any]:
    return {**job_doc([task_doc("a")]), "idempotency_key": "k", "params": {"date": date}}


def test_params_are_kept_and_part_of_the_identity() -> None:
    h = Harness()
    h.register("east")
    assert isinstance(h.submit("j1", _doc("2026-12-05")), Applied)
    assert h.job("j1").spec.params == (("date", "2026-12-05"),)
    same = h.submit("j2", _doc("2026-12-05"))
    assert isinstance(same, Applied) and same.result.job_id == "j1" and not same.result.created
    other = h.submit("j3", _doc("2026-12-06"))
    assert isinstance(other, Rejected) and other.code == Code.ALREADY_EXISTS
    assert "with a different spec" in other.reason

    data = snapshot.dump(h.state)
    loaded = snapshot.load(data)
    assert loaded.jobs["j1"].spec.params == (("date", "2026-12-05"),)
    assert snapshot.dump(loaded) == data
    assert_same_state(loaded, h.state)
