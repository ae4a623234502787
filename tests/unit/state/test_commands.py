"""Encoding of log entries: round trips, tag stability, and precise decode errors."""

from __future__ import annotations

import msgpack
import pytest

from raftsched import limits
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c

EXAMPLES: list[c.Command] = [
    c.JobSubmit("j1", doc_to_wire({"name": "n", "tasks": [{"id": "a", "command": ["true"]}]}), 5),
    c.JobCancel("j1", 6, "why"),
    c.ClusterRegister("east", 3, ("linux", "gpu"), 8000, 1024, 1, 7,
                      (c.KnownAttempt("j1", "a", 4, True),)),
    c.ClusterStatusChange("east", c.ClusterStatus.SUSPECT, 8, "missed heartbeats"),
    c.AssignBatch(9, (c.Placement("j1", "a", "east"), c.Placement("j1", "b", "west"))),
    c.AssignBatch(9, (c.Placement("j1", "a", "east"), c.Placement("j1", "q", "east", True))),
    c.ReportBatch("east", 10, 2**64 - 1, (
        c.Report(c.ReportKind.STARTED, "j1", "a", 4),
        c.Report(c.ReportKind.FINISHED, "j1", "a", 4, -9, True, "timeout"),
    )),
    c.Tick(11, 12345),
    c.AttemptMarkLost("j1", "a", 4, 12, "operator"),
    c.Barrier("leader-7", 13),
    c.Barrier("leader-8", 14, "127.0.0.1:7001", "127.0.0.1:8001"),
    c.TokenPut("0123456789abcdef", bytes(range(32)), "*", "admin", "ops on-call", 15),
    c.TokenPut("fedcba9876543210", b"\x00" * 32, "alpha", "user", "", 16, bootstrap=True),
    c.TokenRevoke("0123456789abcdef", 17),
    c.ClusterRemove("east", 18),
    c.TenantSet("alpha", 3, 1000, 0, 19),
    c.TenantSet("*", 1, 0, 64, 20),
    c.ClusterDrain("east", True, 21, "kernel upgrade"),
    c.ClusterDrain("east", False, 22),
    c.AssignBatch(23, (c.Placement("j1", "a", "east"),), (c.Reservation("j1", "big", "west"),)),
    c.CertRevoke("ab" * 32, "raftsched-agent:east", "key left on a laptop", 24),
    c.ClusterRegister("west", 1, (), 4000, 512, 0, 25, (), (), queue_depth=3),
    c.ClusterRegister("west", 2, (), 4000, 512, 0, 26, (), (("fpga", 2),), queue_depth=1),
    c.AssignBatch(27, (c.Placement("j1", "hi", "east"),), (), (),
                  (c.Withdrawal("j2", "lo", 9, "j1", "hi"),)),
    c.AssignBatch(28, (), (c.Reservation("j1", "big", "west"),),
                  (c.Preemption("j3", "v", 4, "j1", "big"),),
                  (c.Withdrawal("j2", "lo", 9, "j1", "x"),)),
    c.JobSubmitBatch((("j1", [1, "x"]), ("j2", [])), 29),
    c.GroupSet(1, 4, limits.VIRTUAL_SHARDS, 30),
]


@pytest.mark.parametrize("cmd", EXAMPLES, ids=lambda cmd: type(cmd).__name__)
def test_round_trip(cmd: c.Command) -> None:
    assert c.decode(c.encode(cmd)) == cmd


def test_tags_are_append_only() -> None:
    # Renumbering a tag would make old logs decode as other commands: never change these.
    assert {t.name: t.value for t in c.Tag} == {
        "JOB_SUBMIT": 1, "JOB_CANCEL": 2, "CLUSTER_REGISTER": 3, "CLUSTER_STATUS": 4,
        "ASSIGN_BATCH": 5, "REPORT_BATCH": 6, "TICK": 7, "ATTEMPT_MARK_LOST": 8, "BARRIER": 9,
        "TOKEN_PUT": 10, "TOKEN_REVOKE": 11, "CLUSTER_REMOVE": 12, "TENANT_SET": 13,
        "CLUSTER_DRAIN": 14, "CERT_REVOKE": 15, "JOB_SUBMIT_BATCH": 16,
        "SCHEDULE_CREATE": 17, "SCHEDULE_SET": 18, "SCHEDULE_DELETE": 19, "SCHEDULE_FIRE": 20,
        "SCHEDULE_BACKFILL": 21, "GROUP_SET": 23, "SHARD_MAP_SET": 24, "KEYS_IMPORT": 25,
    }


def raw(tag: c.Tag, payload: object) -> bytes:
    return bytes([tag]) + msgpack.packb(payload)


@pytest.mark.parametrize(("entry", "fragment"), [
    (b"", "empty"),
    (b"\x63", "unknown command tag 99"),
    (raw(c.Tag.TICK, [1]), "TICK: expected a list of 2 fields"),
    (raw(c.Tag.TICK, [-1, 0]), "now_ms: -1 is outside"),
    (raw(c.Tag.TICK, [True, 0]), "now_ms: expected an integer"),
    (raw(c.Tag.JOB_CANCEL, ["j", 1, "x" * (limits.MAX_REASON_CHARS + 1)]), "reason: longer"),
    (raw(c.Tag.JOB_SUBMIT, ["j", {}, 1]), "spec: expected a list"),
    (raw(c.Tag.CLUSTER_STATUS, ["e", 9, 1, ""]), "unknown cluster status 9"),
    (raw(c.Tag.REPORT_BATCH, ["e", 1, 0, [[7, "j", "t", 1, None, False, ""]]]),
     "unknown report kind 7"),
    (raw(c.Tag.ASSIGN_BATCH, [1, [["j", "t", "c"]] * (limits.MAX_BATCH_ITEMS + 1)]),
     "over the bound"),
    (raw(c.Tag.TOKEN_PUT, ["0" * 16, b"d" * 32, "*", "admin", "", 1]),
     "TOKEN_PUT: expected a list of 7 fields"),
    (raw(c.Tag.TOKEN_PUT, ["0" * 16, "d" * 32, "*", "admin", "", 1, False]),
     "digest: expected bytes, got str"),
    (raw(c.Tag.TOKEN_PUT, ["0" * 16, b"d" * 65, "*", "admin", "", 1, False]),
     "digest: longer than 64 bytes"),
    (raw(c.Tag.TOKEN_PUT, [16, b"d" * 32, "*", "admin", "", 1, False]),
     "token_id: expected a string, got int"),
    (raw(c.Tag.TOKEN_PUT, ["0" * 16, b"d" * 32, "t" * (limits.MAX_ID_CHARS + 1), "admin", "", 1,
                           False]), "tenant: longer than"),
    (raw(c.Tag.TOKEN_PUT, ["0" * 16, b"d" * 32, "*", 3, "", 1, False]),
     "role: expected a string, got int"),
    (raw(c.Tag.TOKEN_PUT, ["0" * 16, b"d" * 32, "*", "admin",
                           "n" * (limits.MAX_TOKEN_NOTE_CHARS + 1), 1, False]),
     f"note: longer than {limits.MAX_TOKEN_NOTE_CHARS} characters"),
    (raw(c.Tag.TOKEN_PUT, ["0" * 16, b"d" * 32, "*", "admin", "", 1, 1]),
     "bootstrap: expected a boolean"),
    (raw(c.Tag.TOKEN_REVOKE, ["0" * 16]), "TOKEN_REVOKE: expected a list of 2 fields"),
    (raw(c.Tag.TOKEN_REVOKE, ["0" * 16, -1]), "now_ms: -1 is outside"),
    (bytes([c.Tag.TICK]) + b"\xc1", "malformed msgpack"),
    (raw(c.Tag.TICK, [1, 2]) + b"\x00", "malformed msgpack"),
])
def test_decode_errors_name_the_field(entry: bytes, fragment: str) -> None:
    with pytest.raises(c.CommandError, match=None) as info:
        c.decode(entry)
    assert fragment in str(info.value)


def test_encode_refuses_oversized_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_ENTRY_BYTES", 64)
    with pytest.raises(c.CommandError, match="MAX_ENTRY_BYTES"):
        c.encode(c.JobCancel("j" * 40, 1, "r" * 40))


def test_a_registration_from_before_queue_depth_decodes_with_none() -> None:
    """Entries of agents before late binding (8 or 9 fields) decode with queue_depth 0; an
    entry with it has 10 fields, and one past MAX_AGENT_QUEUE_DEPTH is refused by name."""
    for fields in ([["east", 1, [], 1000, 64, 0, 5, []]],
                   [["east", 1, [], 1000, 64, 0, 5, [], [["fpga", 1]]]]):
        entry = bytes((c.Tag.CLUSTER_REGISTER,)) + msgpack.packb(fields[0])
        decoded = c.decode(entry)
        assert isinstance(decoded, c.ClusterRegister) and decoded.queue_depth == 0
        assert c.encode(decoded) == entry  # an old entry re-encodes byte for byte
    too_deep = bytes((c.Tag.CLUSTER_REGISTER,)) + msgpack.packb(
        ["east", 1, [], 1000, 64, 0, 5, [], [], limits.MAX_AGENT_QUEUE_DEPTH + 1])
    with pytest.raises(c.CommandError, match="queue_depth"):
        c.decode(too_deep)
