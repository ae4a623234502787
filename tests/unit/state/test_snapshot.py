"""Snapshot format: round trips, stable bytes, refusal of foreign or damaged data."""

from __future__ import annotations

import hashlib
import io

import pytest

from raftsched.state import commands as c
from raftsched.state import snapshot
from raftsched.state.model import State
from tests.support.fsmkit import Harness, assert_same_state, job_doc, task_doc


def busy_state() -> Harness:
    h = Harness()
    h.register("east")
    h.register("west", caps=("linux", "gpu"), gpu=1)
    h.submit("j1", job_doc([task_doc("a"), task_doc("b", ["a"], retry={"max_attempts": 3}),
                            task_doc("c", ["a"], timeout_s=5)], idempotency_key="k"))
    h.submit("j2", job_doc([task_doc("x", on_lost="wait")], tenant="other", priority=80))
    h.run_task("east", "j1", "a")
    h.run_task("west", "j1", "b", exit_code=1)
    fence = h.assign_one("j1", "c", "east")
    h.started("east", "j1", "c", fence)
    h.started("east", "j1", "c", fence)  # a duplicate note
    h.assign_one("j2", "x", "west")
    h.cancel("j2")
    h.tick(100)
    return h


def test_empty_state_round_trips() -> None:
    assert snapshot.load(snapshot.dump(State())) == State()


def test_busy_state_round_trips_with_identical_bytes() -> None:
    h = busy_state()
    data = snapshot.dump(h.state)
    loaded = snapshot.load(data)
    assert_same_state(loaded, h.state)
    assert snapshot.dump(loaded) == data


def test_restored_replica_keeps_agreeing() -> None:
    h = busy_state()
    twin = Harness(snapshot.load(snapshot.dump(h.state)))
    twin.now_ms, twin.entropy = h.now_ms, h.entropy
    for harness in (h, twin):
        harness.tick(60_000)
        harness.submit("j3", job_doc([task_doc("z")]))
        harness.run(c.ClusterStatusChange("east", c.ClusterStatus.LOST, harness.now_ms, "x"))
    assert snapshot.dump(twin.state) == snapshot.dump(h.state)


def test_extra_record_is_carried() -> None:
    state, extra = snapshot.load_with_extra(
        io.BytesIO(snapshot.dump(State(), extra=[1, "raft", None]))
    )
    assert extra == [1, "raft", None] and state == State()


def as_format_1(data: bytes) -> bytes:
    """Format 2 bytes as format 1 wrote them: the same records, no checksum."""
    head = len(snapshot.MAGIC)
    return data[:head] + (1).to_bytes(2, "big") + data[head + 2:-4]


def test_a_format_1_snapshot_still_loads_through_the_validating_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    h = busy_state()
    validated: list[str] = []
    real = snapshot.validate_wire

    def validate(wire: object) -> object:
        validated.append(str(wire)[:20])
        return real(wire)

    monkeypatch.setattr(snapshot, "validate_wire", validate)
    state, extra = snapshot.load_with_extra(
        io.BytesIO(as_format_1(snapshot.dump(h.state, extra={"k": [1, 2]}))))
    assert_same_state(state, h.state)
    assert extra == {"k": [1, 2]} and len(validated) == 2
    validated.clear()
    assert_same_state(snapshot.load(snapshot.dump(h.state)), h.state)
    assert validated == []  # format 2


def test_a_damaged_byte_anywhere_is_caught_by_the_checksum() -> None:
    data = bytearray(snapshot.dump(busy_state().state))
    for position in range(len(snapshot.MAGIC) + 2, len(data), max(1, len(data) // 40)):
        damaged = bytearray(data)
        damaged[position] ^= 0x10
        with pytest.raises(snapshot.SnapshotError, match="checksum"):
            snapshot.load(bytes(damaged))


@pytest.mark.parametrize(("data", "fragment"), [
    (b"PICKLE", "bad magic"),
    (snapshot.MAGIC + (99).to_bytes(2, "big"), "format 99"),
    (snapshot.dump(State())[:-3], "corrupt"),
    (as_format_1(snapshot.dump(State()))[:-3], "corrupt"),
])
def test_foreign_or_damaged_data_is_refused(data: bytes, fragment: str) -> None:
    with pytest.raises(snapshot.SnapshotError, match=fragment):
        snapshot.load(data)


def test_digest_names_the_snapshot_bytes() -> None:
    h = busy_state()
    digest = snapshot.digest(h.state)
    assert digest == hashlib.sha256(snapshot.dump(h.state)).hexdigest()[:16]
    assert snapshot.digest(snapshot.load(snapshot.dump(h.state))) == digest
    h.tick(1)
    assert snapshot.digest(h.state) != digest


PINNED_BUSY_SNAPSHOT_SHA256 = "a3ad5e3640a4e61e42a1f0122ee9cb05088a261d71bdd946d3ca771870b9b13c"
"""Format 2 (format 1 was fead73c0...: the same records, without the checksum trailer). Was
9654d2d8... until apply began dropping stale ready-queue entries (`fsm._tidy`): the same format
and the same logical state, a heap without the garbage of lazy deletion."""
PINNED_J1_SPEC_DIGEST = "2dc75c554dce7cb6b1a98299472ddbce80bc06c12e86b8c4022dae22118e76aa"


def test_snapshot_and_spec_digest_bytes_are_pinned() -> None:
    """The bytes of a snapshot (FORMAT_VERSION 2) and of a spec's idempotency digest never
    change under a refactoring: replicas of different builds must agree byte for byte. A change
    here is a format change: bump FORMAT_VERSION (or the spec's digest) on purpose."""
    h = busy_state()
    assert hashlib.sha256(snapshot.dump(h.state)).hexdigest() == PINNED_BUSY_SNAPSHOT_SHA256
    assert h.job("j1").spec.digest().hex() == PINNED_J1_SPEC_DIGEST
