"""Apply's trusted decode of a job spec (issue 24 item 2): JOB_SUBMIT's apply decodes the wire
form the leader validated without proving the user-facing rules again (`wire.decode_trusted`),
yet a malformed entry — any field replaced, dropped or added, garbage bytes — is a deterministic
rejection: never an exception, the same outcome on every replica, the state's invariants intact.
For every spec the full validator accepts, the trusted decode gives an equal spec (same digest)."""

from __future__ import annotations

import copy
import math
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftsched.spec.model import SpecError
from raftsched.spec.wire import decode_trusted, doc_to_wire, validate_wire
from raftsched.state import commands as c
from raftsched.state import fsm, invariants, snapshot
from raftsched.state.outcome import Applied, Outcome, Rejected
from tests.support.fsmkit import Harness, job_doc, task_doc

DOCS = [
    job_doc([task_doc("a"), task_doc("b", ["a"]), task_doc("c", ["a", "b"])],
            idempotency_key="k", priority=5),
    job_doc([task_doc("a", env={"X": "1", "Y": "2"}, cwd="/tmp", timeout_s=5,
                      resources={"cpu": 0.5, "memory_mb": 64, "custom": {"lic": 2}},
                      retry={"max_attempts": 3, "backoff_s": 1, "non_retryable_exit_codes": [2]},
                      checkpoint=True, grace_s=3, requires=["linux"], on_lost="wait"),
             task_doc("b", ["a"], trigger="all_done")],
            failure_policy="fail_fast", scoring="spread", retry_budget=4,
            priority_class="high", preemptible=True),
]
WIRES = [doc_to_wire(doc) for doc in DOCS]
ODD_VALUES: list[Any] = [None, True, False, 0, -1, 1, 2**63 - 1, -(2**63), 1.5, math.nan,
                         math.inf, "", "a", "x" * 300, "\x00", "é", b"\xff", [], ["a"], [[]],
                         {"k": 1}, [1, 2, 3]]


def paths_of(value: Any, prefix: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    """Every position inside a wire form (a list of lists)."""
    found = [prefix] if prefix else []
    if isinstance(value, list):
        for index, item in enumerate(value):
            found += paths_of(item, (*prefix, index))
    return found


def mutated(wire: list[Any], path: tuple[int, ...], how: int, value: Any) -> list[Any]:
    wire = copy.deepcopy(wire)
    parent: Any = wire
    for index in path[:-1]:
        parent = parent[index]
    if how == 0:
        parent[path[-1]] = value
    elif how == 1:
        del parent[path[-1]]
    else:
        parent.insert(path[-1], value)
    return wire


def applied(wire: Any) -> tuple[Outcome, bytes]:
    """The outcome of a JOB_SUBMIT of `wire` on a fresh state with one cluster, and the state's
    snapshot after it; the state's invariants checked."""
    harness = Harness()
    harness.register("east")
    entry = bytes((c.Tag.JOB_SUBMIT,)) + msgpack.packb(["j1", wire, harness.now_ms],
                                                       use_bin_type=True)
    outcome = fsm.apply(harness.state, entry)
    invariants.check_invariants(harness.state)
    return outcome, snapshot.dump(harness.state)


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(which=st.integers(0, len(WIRES) - 1), pick=st.integers(0, 10_000),
       how=st.integers(0, 2), value=st.sampled_from(ODD_VALUES))
def test_a_mutated_wire_form_is_a_deterministic_outcome_never_an_exception(
        which: int, pick: int, how: int, value: Any) -> None:
    paths = paths_of(WIRES[which])
    wire = mutated(WIRES[which], paths[pick % len(paths)], how, value)
    first, state_after = applied(wire)
    again, state_again = applied(copy.deepcopy(wire))
    assert (first, state_after) == (again, state_again)
    assert isinstance(first, Applied | Rejected)
    if isinstance(first, Rejected):
        assert first.code.value == "INVALID_ARGUMENT" and first.reason
        assert state_after == applied(["not", "a", "spec"])[1]  # nothing of it was kept


@pytest.mark.parametrize("garbage", [b"", b"\x00", b"\xc1", b"\x93\x01\x02", b"\x91" * 1000,
                                     bytes(range(256)),
                                     msgpack.packb(["j1", [3] * 13, 1])])
def test_garbage_bytes_are_a_rejection(garbage: bytes) -> None:
    harness = Harness()
    outcome = fsm.apply(harness.state, bytes((c.Tag.JOB_SUBMIT,)) + garbage)
    assert isinstance(outcome, Rejected) and outcome.code.value == "INVALID_ARGUMENT", outcome
    assert harness.state.jobs == {}


@pytest.mark.parametrize("wire", WIRES, ids=["plain", "every-field"])
def test_a_validated_spec_decodes_to_the_same_spec_and_digest(wire: list[Any]) -> None:
    trusted, validated = decode_trusted(copy.deepcopy(wire)), validate_wire(copy.deepcopy(wire))
    assert trusted == validated and trusted.digest() == validated.digest()


def test_a_refusal_names_the_field_like_the_full_validator() -> None:
    wire = copy.deepcopy(WIRES[0])
    wire[7][1][4] = -5  # cpu_milli
    with pytest.raises(SpecError, match="cpu"):
        decode_trusted(wire)
    wire = copy.deepcopy(WIRES[0])
    wire[7][0][9] = ["c"]  # a -> c -> a
    with pytest.raises(SpecError, match="cycle"):
        decode_trusted(wire)
