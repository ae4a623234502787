"""Snapshot format: round trips, stable bytes, refusal of foreign or damaged data."""

from __future__ import annotations

import hashlib
import io
import pathlib
import zlib

import msgpack
import pytest

from raftsched.state import commands as c
from raftsched.state import snapshot
from raftsched.state.invariants import check_invariants
from raftsched.state.model import Role, State, TokenRecord
from tests.support.fsmkit import Harness, assert_same_state, job_doc, task_doc


def busy_state() -> Harness:
    h = Harness()
    h.register("east")
    h.register("west", caps=("linux", "gpu"), gpu=1)
    # Documents as they were before the placement fields: their digests stay pinned.
    h.submit("j1", job_doc([task_doc("a"), task_doc("b", ["a"], retry={"max_attempts": 3}),
                            task_doc("c", ["a"], timeout_s=5)], idempotency_key="k",
                           allow_unschedulable=False))
    h.submit("j2", job_doc([task_doc("x", on_lost="wait")], tenant="other", priority=80,
                           allow_unschedulable=False))
    h.run_task("east", "j1", "a")
    h.run_task("west", "j1", "b", exit_code=1)
    fence = h.assign_one("j1", "c", "east")
    h.started("east", "j1", "c", fence)
    h.started("east", "j1", "c", fence)  # a duplicate note
    h.assign_one("j2", "x", "west")
    h.cancel("j2")
    h.tick(100)
    return h


ADMIN_ID, USER_ID, OPERATOR_ID = "a0a0a0a0a0a0a0a0", "b1b1b1b1b1b1b1b1", "c2c2c2c2c2c2c2c2"


def legacy_put(h: Harness, cmd: c.TokenPut) -> None:
    """An operator or admin token of one tenant, as versions before issue 21 made them (the
    replicas now refuse to propose one, `rules.token_scope_problem`; a log or snapshot may still
    hold one, and apply keeps it as it did)."""
    h.ok(cmd)


def with_tokens(h: Harness) -> Harness:
    """Three tokens of every role; the user token was revoked and created again, so it comes
    last in creation order."""
    h.ok(c.TokenPut(ADMIN_ID, bytes(range(32)), "*", "admin", "bootstrap", h.now_ms,
                    bootstrap=True))
    h.ok(c.TokenPut(USER_ID, bytes(32), "other", "user", "ci", h.now_ms))
    h.tick(5)
    legacy_put(h, c.TokenPut(OPERATOR_ID, b"\xff" * 32, "default", "operator", "", h.now_ms))
    h.ok(c.TokenRevoke(USER_ID, h.now_ms))
    h.tick(5)
    h.ok(c.TokenPut(USER_ID, bytes(32), "other", "user", "ci, again", h.now_ms))
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


def test_tokens_round_trip_in_creation_order() -> None:
    h = with_tokens(busy_state())
    data = snapshot.dump(h.state)
    loaded = snapshot.load(data)
    assert_same_state(loaded, h.state)
    assert snapshot.dump(loaded) == data
    assert list(loaded.tokens) == [ADMIN_ID, OPERATOR_ID, USER_ID]
    assert loaded.tokens[USER_ID] == TokenRecord(USER_ID, bytes(32), "other", Role.USER,
                                                 h.now_ms, "ci, again")
    assert type(loaded.tokens[USER_ID].role) is Role


def test_restored_replica_keeps_agreeing_on_tokens() -> None:
    h = with_tokens(busy_state())
    twin = Harness(snapshot.load(snapshot.dump(h.state)))
    twin.now_ms, twin.entropy = h.now_ms, h.entropy
    for harness in (h, twin):
        harness.run(c.TokenRevoke(OPERATOR_ID, harness.now_ms))
        harness.run(c.TokenPut(OPERATOR_ID, b"\x01" * 32, "*", "operator", "", harness.now_ms))
        harness.run(c.TokenRevoke(ADMIN_ID, harness.now_ms))  # the last admin: refused
    assert snapshot.dump(twin.state) == snapshot.dump(h.state)
    assert list(h.state.tokens) == [ADMIN_ID, USER_ID, OPERATOR_ID]


def _records(body: bytes) -> list[tuple[int, int]]:
    """(start, end) of each msgpack record of a snapshot's body."""
    unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
    unpacker.feed(body)
    bounds, start = [], 0
    for _ in unpacker:
        bounds.append((start, unpacker.tell()))
        start = unpacker.tell()
    return bounds


DATA = pathlib.Path(__file__).parent / "data"
FORMAT_3_BUSY = (DATA / "busy-format-3.snapshot").read_bytes()
"""`busy_state()` with extra {"k": [1, 2]}, written by format 3 (the build before the contention
policy), no tokens."""
FORMAT_3_BUSY_TOKENS = (DATA / "busy-tokens-format-3.snapshot").read_bytes()
"""`with_tokens(busy_state())`, written by format 3."""


def assert_loaded_as_it_was(state: State, h: Harness) -> None:
    """An older format's busy state, loaded: the same jobs, task states, attempts, clusters
    and ready tasks as the busy state built now; ready times default to the submission; the
    invariants hold; written back as format 4, it round-trips."""
    assert list(state.jobs) == list(h.state.jobs)
    for job_id, job in state.jobs.items():
        now = h.job(job_id)
        assert [(t.state, [a.fence for a in t.attempts]) for t in job.tasks] == \
            [(t.state, [a.fence for a in t.attempts]) for t in now.tasks]
        assert all(t.ready_ms == job.submitted_ms for t in job.tasks)
    assert set(state.clusters) == set(h.state.clusters)
    assert {t: q.live for t, q in state.queues.items()} == \
        {t: q.live for t, q in h.state.queues.items()}
    assert state.tenants == {} and state.usage == h.state.usage
    check_invariants(state)
    data = snapshot.dump(state)
    assert data[len(snapshot.MAGIC):len(snapshot.MAGIC) + 2] == (4).to_bytes(2, "big")
    assert snapshot.dump(snapshot.load(data)) == data


def test_a_format_3_snapshot_still_loads() -> None:
    state, extra = snapshot.load_with_extra(io.BytesIO(FORMAT_3_BUSY))
    assert extra == {"k": [1, 2]}
    assert_loaded_as_it_was(state, busy_state())
    with_tokens_state = snapshot.load(FORMAT_3_BUSY_TOKENS)
    assert with_tokens_state.tokens == with_tokens(busy_state()).state.tokens


def as_format_2(data: bytes) -> bytes:
    """Format 3 bytes of a state without tokens as format 2 wrote them: the same records but
    the (empty) tokens record, the one before `extra`; a checksum of their own."""
    head = len(snapshot.MAGIC)
    body = data[head + 2:-4]
    start, end = _records(body)[-2]
    assert body[start:end] == msgpack.packb([]), "format 2 cannot hold tokens"
    older = data[:head] + (2).to_bytes(2, "big") + body[:start] + body[end:]
    return older + zlib.crc32(older).to_bytes(4, "big")


def as_format_1(data: bytes) -> bytes:
    """Format 3 bytes of a state without tokens as format 1 wrote them: the records of format
    2, no checksum."""
    head = len(snapshot.MAGIC)
    older = as_format_2(data)
    return older[:head] + (1).to_bytes(2, "big") + older[head + 2:-4]


def test_a_format_2_snapshot_still_loads_with_no_tokens() -> None:
    state, extra = snapshot.load_with_extra(io.BytesIO(as_format_2(FORMAT_3_BUSY)))
    assert extra == {"k": [1, 2]} and state.tokens == {}
    assert_loaded_as_it_was(state, busy_state())


def test_a_format_1_snapshot_still_loads_through_the_validating_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    validated: list[str] = []
    real = snapshot.validate_wire

    def validate(wire: object) -> object:
        validated.append(str(wire)[:20])
        return real(wire)

    monkeypatch.setattr(snapshot, "validate_wire", validate)
    state, extra = snapshot.load_with_extra(io.BytesIO(as_format_1(FORMAT_3_BUSY)))
    assert extra == {"k": [1, 2]} and len(validated) == 2
    assert_loaded_as_it_was(state, busy_state())
    validated.clear()
    h = busy_state()
    assert_same_state(snapshot.load(snapshot.dump(h.state)), h.state)
    assert validated == []  # format 4 is trusted


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
    (as_format_1(FORMAT_3_BUSY)[:-3], "corrupt"),
])
def test_foreign_or_damaged_data_is_refused(data: bytes, fragment: str) -> None:
    with pytest.raises(snapshot.SnapshotError, match=fragment):
        snapshot.load(data)


def test_digest_covers_tokens() -> None:
    h = busy_state()
    digests = {snapshot.digest(h.state)}
    h.ok(c.TokenPut(USER_ID, bytes(32), "other", "user", "ci", h.now_ms))
    digests.add(snapshot.digest(h.state))
    legacy_put(h, c.TokenPut(OPERATOR_ID, bytes(32), "other", "operator", "ci", h.now_ms))
    digests.add(snapshot.digest(h.state))
    h.state.tokens[USER_ID].note = "edited"  # any field of a token shows (not via the FSM)
    digests.add(snapshot.digest(h.state))
    h.state.tokens[USER_ID].digest = b"\x01" * 32
    digests.add(snapshot.digest(h.state))
    h.ok(c.TokenRevoke(USER_ID, h.now_ms))
    digests.add(snapshot.digest(h.state))
    assert len(digests) == 6


def test_digest_names_the_snapshot_bytes() -> None:
    h = busy_state()
    digest = snapshot.digest(h.state)
    assert digest == hashlib.sha256(snapshot.dump(h.state)).hexdigest()[:16]
    assert snapshot.digest(snapshot.load(snapshot.dump(h.state))) == digest
    h.tick(1)
    assert snapshot.digest(h.state) != digest


PINNED_BUSY_SNAPSHOT_SHA256 = "8e4c515a380369d415138d88ed984598d13386239b21461befc5623a67386f5a"
"""Format 4, of `with_policy(with_tokens(busy_state()))`: format 4 added the tenant policies
record, clusters' drain, degradation, failure memory and reservation, jobs' retries used, tasks'
ready times, and ready-queue entries ranked with aging. Format 3 was 3e1db4dd... (the same state
without the policy commands; `FORMAT_3_BUSY_TOKENS` holds those bytes); format 2 was a3ad5e36...,
format 1 fead73c0... ."""
PINNED_J1_SPEC_DIGEST = "2dc75c554dce7cb6b1a98299472ddbce80bc06c12e86b8c4022dae22118e76aa"
"""Unchanged by the placement fields: a spec that leaves them at their defaults digests as it
did before they existed."""


def with_policy(h: Harness) -> Harness:
    """Tenant policies, a drained cluster and a reservation: every record format 4 added."""
    h.ok(c.TenantSet("other", 3, 100, 10, h.now_ms))
    h.ok(c.TenantSet("*", 1, 0, 64, h.now_ms))
    h.ok(c.ClusterDrain("west", True, h.now_ms, "disk swap"))
    h.submit("j3", job_doc([task_doc("huge", resources={"cpu": 8})], tenant="other"))
    h.ok(c.AssignBatch(h.now_ms, (), (c.Reservation("j3", "huge", "east"),)))
    return h


def test_snapshot_and_spec_digest_bytes_are_pinned() -> None:
    """The bytes of a snapshot (FORMAT_VERSION 4) and of a spec's idempotency digest never
    change under a refactoring: replicas of different builds must agree byte for byte. A change
    here is a format change: bump FORMAT_VERSION (or the spec's digest) on purpose."""
    assert snapshot.FORMAT_VERSION == 4
    h = busy_state()
    assert h.job("j1").spec.digest().hex() == PINNED_J1_SPEC_DIGEST
    with_policy(with_tokens(h))
    assert h.state.clusters["east"].reserved_for == ("j3", 0)
    assert hashlib.sha256(snapshot.dump(h.state)).hexdigest() == PINNED_BUSY_SNAPSHOT_SHA256


def test_policy_records_round_trip() -> None:
    h = with_policy(with_tokens(busy_state()))
    data = snapshot.dump(h.state)
    loaded = snapshot.load(data)
    assert_same_state(loaded, h.state)
    assert snapshot.dump(loaded) == data
    assert loaded.jobs["j3"].tasks[0].reserved_on == "east"
    assert loaded.clusters["west"].draining and loaded.clusters["west"].drain_reason == "disk swap"
    assert list(loaded.tenants) == ["other", "*"]
