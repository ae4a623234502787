"""Shard moves (docs/scale-out.md §5; `raftsched.state.shards`): SHARD_MAP_SET takes only the
same map again or the next epoch, a shard changes owner only after it was marked moving there,
a moving shard's submits are refused by its owner, a joining group owns nothing until it is
given a map, KEYS_IMPORT takes only keys of shards moving to this group (so a retried submit
cannot become a second job), and snapshots keep the map. Every refusal changes nothing."""

from __future__ import annotations

import io
from typing import Any

import msgpack
import pytest

from raftsched import limits, topology
from raftsched.errors import Code
from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import fsm, invariants, snapshot
from raftsched.state.model import GroupIdentity, IdempotencyRecord, ShardMap, State
from raftsched.state.outcome import Applied, Outcome, Rejected
from raftsched.state.results import (
    GroupSetResult,
    JobSubmitted,
    KeysImported,
    ShardMapSetResult,
)
from raftsched.state.shards import current_map
from tests.support.fsmkit import job_doc, task_doc

SHARDS = limits.VIRTUAL_SHARDS
NOW = 1_000
TENANT = "alpha"

MOVING = tuple(range(0, SHARDS, 4))
"""Half of group 0's shards (of two groups: the even ones), moving to group 2 at epoch 1."""
STAYING = 2
"""A shard of group 0 that does not move."""
OTHERS = 1
"""A shard of group 1."""
TOPOLOGY = (("10.0.0.1:7001",), ("10.0.1.1:7001",), ("10.0.2.1:7001", "10.0.2.2:7001"))


def implicit_owners(groups: int) -> bytes:
    return bytes(shard % groups for shard in range(SHARDS))


def handed_over(owners: bytes, shards: tuple[int, ...], to: int) -> bytes:
    new = bytearray(owners)
    for shard in shards:
        new[shard] = to
    return bytes(new)


def shard_map(epoch: int, owners: bytes, moving: tuple[tuple[int, int], ...] = (),
              formers: tuple[tuple[int, tuple[int, ...]], ...] = (), groups: int = 3,
              schedule_groups: int = 2,
              servers: tuple[tuple[str, ...], ...] = ()) -> c.ShardMapSet:
    return c.ShardMapSet(epoch, groups, owners, moving, formers, schedule_groups, servers, NOW)


EPOCH_1 = shard_map(1, implicit_owners(2), tuple((shard, 2) for shard in MOVING))
"""Step (1): group 0's MOVING shards marked moving to the new group 2."""
EPOCH_2 = shard_map(2, handed_over(implicit_owners(2), MOVING, 2), (),
                    tuple((shard, (0,)) for shard in MOVING))
"""Step (3): the MOVING shards handed to group 2 (their former owner: group 0)."""


# --- helpers ------------------------------------------------------------------------------------


def apply(state: State, cmd: c.Command) -> Outcome:
    outcome = fsm.apply(state, c.encode(cmd))
    invariants.check_invariants(state)
    return outcome


def applied(state: State, cmd: c.Command) -> Any:
    outcome = apply(state, cmd)
    assert isinstance(outcome, Applied), outcome
    return outcome.result


def refused(state: State, cmd: c.Command, code: Code, *words: str) -> Rejected:
    """`cmd` is refused with `code`, its reason naming every one of `words`, and the state's
    snapshot bytes are what they were (every command here carries now_ms=NOW, the state's)."""
    before = snapshot.dump(state)
    outcome = apply(state, cmd)
    assert isinstance(outcome, Rejected), outcome
    assert outcome.code == code, outcome
    for word in words:
        assert word in outcome.reason, outcome.reason
    assert snapshot.dump(state) == before
    return outcome


def group_state(group: int, groups: int, joining: bool = False) -> State:
    state = State(now_ms=NOW)
    assert applied(state, c.GroupSet(group, groups, SHARDS, NOW, (), joining)) == \
        GroupSetResult(group, groups, changed=True)
    return state


def key_in(shard: int, tenant: str = TENANT, skip: int = 0) -> str:
    """The (skip+1)-th candidate key of `tenant` whose shard is `shard`."""
    for n in range(1_000_000):
        key = f"key-{n}"
        if topology.shard_of_key(tenant, key) == shard:
            if skip == 0:
                return key
            skip -= 1
    raise AssertionError(f"no key in shard {shard}")


def job_id(shard: int, bits: int = 0) -> str:
    return f"j-{topology.job_id_tail(shard, bits)}"


def submit(shard: int, key: str | None = None, bits: int = 0, task: str = "a",
           tenant: str = TENANT) -> c.JobSubmit:
    """A JOB_SUBMIT whose job id is in `shard` (with `key`: the key's shard, as the leader
    picks it)."""
    fields: dict[str, Any] = {"tenant": tenant}
    if key is not None:
        fields["idempotency_key"] = key
        assert topology.shard_of_key(tenant, key) == shard
    return c.JobSubmit(job_id(shard, bits), doc_to_wire(job_doc([task_doc(task)], **fields)), NOW)


def policy_record(data: bytes) -> list[Any]:
    """The policy record of a snapshot (the last but one msgpack object of its body)."""
    body = data[len(snapshot.MAGIC) + 2:-4]
    objects = list(msgpack.Unpacker(io.BytesIO(body), raw=False, strict_map_key=False))
    policy: list[Any] = objects[-2]
    return policy


# --- 1. encoding --------------------------------------------------------------------------------


@pytest.mark.parametrize("cmd", [
    EPOCH_1,
    EPOCH_2,
    shard_map(7, handed_over(implicit_owners(3), (5,), 1), ((8, 0), (4095, 1)),
              ((5, (2, 0)), (9, (1,))), schedule_groups=1, servers=TOPOLOGY),
    c.ShardMapSet(1, 1, b"", (), (), 1, (), 0),
    c.KeysImport(3, (("alpha", "k1", "j-0010000000000000", b"\x01" * 32, 5),
                     ("beta", "k" * limits.MAX_IDEMPOTENCY_KEY_CHARS, "j2", b"", 0)), 9),
    c.KeysImport(0, (), 0),
    c.GroupSet(2, 3, SHARDS, 4, TOPOLOGY, joining=True),
    c.GroupSet(2, 3, SHARDS, 4, (), joining=True),
    c.GroupSet(2, 3, SHARDS, 4, TOPOLOGY),
], ids=lambda cmd: type(cmd).__name__)
def test_round_trip(cmd: c.Command) -> None:
    assert c.decode(c.encode(cmd)) == cmd


def test_a_group_set_is_written_in_six_fields_only_when_joining() -> None:
    plain = msgpack.unpackb(c.encode(c.GroupSet(1, 2, SHARDS, 7))[1:])
    assert plain == [1, 2, SHARDS, 7, []]  # the shape older replicas decode
    joining = msgpack.unpackb(c.encode(c.GroupSet(1, 2, SHARDS, 7, joining=True))[1:])
    assert joining == [1, 2, SHARDS, 7, [], True]
    assert (c.Tag.SHARD_MAP_SET.value, c.Tag.KEYS_IMPORT.value) == (24, 25)


def raw(tag: c.Tag, payload: object) -> bytes:
    packed: bytes = msgpack.packb(payload, use_bin_type=True)
    return bytes([tag]) + packed


def map_payload(**changes: object) -> list[object]:
    fields: dict[str, object] = {
        "epoch": 1, "groups": 3, "owners": implicit_owners(2), "moving": [[0, 2]],
        "formers": [[2, [1]]], "schedule_groups": 2, "servers": [], "now_ms": 1}
    fields.update(changes)
    return list(fields.values())


def keys_payload(records: list[object]) -> list[object]:
    return [1, records, 1]


RECORD = ["alpha", "k", "j-0000000000000000", b"\x00" * 32, 5]


@pytest.mark.parametrize(("entry", "fragment"), [
    (raw(c.Tag.SHARD_MAP_SET, map_payload()[:7]), "SHARD_MAP_SET: expected a list of 8 fields"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(owners=bytes(SHARDS + 1))),
     f"owners: longer than {SHARDS} bytes"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(owners="0101")), "owners: expected bytes"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(moving=[[0, 2, 1]])),
     "moving[]: expected a list of 2 fields"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(moving=[0])), "moving[]: expected a list of 2 fields"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(moving=[[SHARDS, 2]])),
     f"moving[].shard: {SHARDS} is outside"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(moving=[[0, limits.MAX_GROUPS]])),
     f"moving[].to: {limits.MAX_GROUPS} is outside"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(moving=[[s, 2] for s in range(SHARDS + 1)])),
     f"moving: {SHARDS + 1} items, over the bound"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(formers=[[2]])),
     "formers[]: expected a list of 2 fields"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(formers=[[2, 1]])), "formers[].groups: expected a list"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(groups=0)), "groups: 0 is outside"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(schedule_groups=0)), "schedule_groups: 0 is outside"),
    (raw(c.Tag.SHARD_MAP_SET, map_payload(servers=[["a:1"]] * (limits.MAX_GROUPS + 1))),
     "servers: 65 items"),
    (raw(c.Tag.KEYS_IMPORT, [1, []]), "KEYS_IMPORT: expected a list of 3 fields"),
    (raw(c.Tag.KEYS_IMPORT, keys_payload([RECORD] * (limits.MAX_KEYS_PER_IMPORT + 1))),
     f"records: {limits.MAX_KEYS_PER_IMPORT + 1} items, over the bound of "
     f"{limits.MAX_KEYS_PER_IMPORT}"),
    (raw(c.Tag.KEYS_IMPORT, keys_payload([RECORD[:4]])), "records[]: expected a list of 5 fields"),
    (raw(c.Tag.KEYS_IMPORT, keys_payload([[*RECORD[:3], "digest", 5]])),
     "records[].digest: expected bytes"),
    (raw(c.Tag.KEYS_IMPORT, keys_payload([[*RECORD[:4], -1]])),
     "records[].created_ms: -1 is outside"),
    (raw(c.Tag.KEYS_IMPORT, keys_payload([[1, *RECORD[1:]]])),
     "records[].tenant: expected a string"),
    (raw(c.Tag.KEYS_IMPORT,
         keys_payload([["alpha", "k" * (limits.MAX_IDEMPOTENCY_KEY_CHARS + 1), *RECORD[2:]]])),
     "records[].key: longer than"),
    (raw(c.Tag.GROUP_SET, [1, 2, SHARDS, 7, [], 1]), "joining: expected a boolean"),
    (raw(c.Tag.GROUP_SET, [1, 2, SHARDS, 7, [], True, 0]), "GROUP_SET: expected a list of 4"),
])
def test_a_malformed_entry_names_the_field_and_changes_nothing(entry: bytes,
                                                              fragment: str) -> None:
    with pytest.raises(c.CommandError) as error:
        c.decode(entry)
    assert fragment in str(error.value), str(error.value)
    state = group_state(0, 2)
    before = snapshot.dump(state)
    outcome = fsm.apply(state, entry)
    assert isinstance(outcome, Rejected) and outcome.code == Code.INVALID_ARGUMENT
    assert fragment in outcome.reason
    assert snapshot.dump(state) == before


# --- 2. the three steps of a move, in the group that gives shards away --------------------------


def test_a_move_in_three_epochs_stops_then_hands_over_the_moving_shards_submits() -> None:
    state = group_state(0, 2)
    assert current_map(state) == ShardMap(0, implicit_owners(2), schedule_groups=2)
    assert state.shard_map is None
    assert isinstance(applied(state, submit(MOVING[1])), JobSubmitted)  # group 0's, until (1)

    assert applied(state, EPOCH_1) == ShardMapSetResult(1, changed=True)
    assert state.group == GroupIdentity(0, 3, SHARDS)
    assert state.shard_map == ShardMap(1, implicit_owners(2), EPOCH_1.moving, (), 2)
    moving = MOVING[2]
    refused(state, submit(moving, bits=1), Code.UNAVAILABLE,
            f"shard {moving} is moving from group 0 to group 2", "retry")
    refused(state, submit(moving, key_in(moving)), Code.UNAVAILABLE, f"shard {moving} is moving")
    batch = applied(state, c.JobSubmitBatch(((job_id(moving, 3), submit(moving).spec),
                                             (job_id(STAYING, 3), submit(STAYING).spec)), NOW))
    refusal, accepted = batch.answers
    assert refusal.code == Code.UNAVAILABLE and accepted == JobSubmitted(job_id(STAYING, 3), True)
    assert job_id(moving, 3) not in state.jobs
    assert applied(state, submit(STAYING, key_in(STAYING))) == \
        JobSubmitted(job_id(STAYING), created=True)
    refused(state, submit(OTHERS), Code.FAILED_PRECONDITION,
            f"shard {OTHERS} is group 1's", "this is group 0")

    assert applied(state, EPOCH_2) == ShardMapSetResult(2, changed=True)
    assert state.shard_map == ShardMap(2, EPOCH_2.owners, (), EPOCH_2.formers, 2)
    assert state.group == GroupIdentity(0, 3, SHARDS)
    refused(state, submit(moving, bits=4), Code.FAILED_PRECONDITION,
            f"shard {moving} is group 2's", "epoch 2")
    refused(state, submit(MOVING[1]), Code.FAILED_PRECONDITION, "group 2's")  # even one it had
    assert applied(state, submit(STAYING, bits=5)) == JobSubmitted(job_id(STAYING, 5), True)


def test_a_submit_whose_job_id_names_no_shard_is_not_judged_by_the_map() -> None:
    state = group_state(0, 2)
    applied(state, EPOCH_1)
    assert applied(state, c.JobSubmit("plain-job", submit(0).spec, NOW)) == \
        JobSubmitted("plain-job", True)


# --- 3. out of step -----------------------------------------------------------------------------


def after_epoch_1() -> State:
    state = group_state(0, 2)
    applied(state, EPOCH_1)
    return state


@pytest.mark.parametrize(("make", "cmd", "words"), [
    (lambda: group_state(0, 2), shard_map(2, implicit_owners(2)),
     ("group 0", "at epoch 0; epoch 2 would skip a step")),
    (after_epoch_1, shard_map(3, EPOCH_2.owners), ("at epoch 1; epoch 3 would skip a step",)),
    (after_epoch_1, shard_map(0, implicit_owners(2)), ("at epoch 1; epoch 0 would skip",)),
    (lambda: group_state(0, 2), shard_map(1, handed_over(implicit_owners(2), (6,), 2)),
     ("shard 6 would move from group 0 to group 2 without being marked moving there first",)),
    (after_epoch_1, shard_map(2, handed_over(EPOCH_2.owners, (STAYING,), 2)),
     (f"shard {STAYING} would move from group 0 to group 2",)),
    (after_epoch_1, shard_map(2, handed_over(implicit_owners(2), MOVING, 1)),
     ("shard 0 would move from group 0 to group 1",)),
    (after_epoch_1, shard_map(2, implicit_owners(2), tuple((s, 1) for s in MOVING)),
     ("shard 0 was moving to group 2, not group 1",)),
    (after_epoch_1, shard_map(2, implicit_owners(2), groups=2),
     ("groups: 2, fewer than this deployment's 3",)),
    (after_epoch_1, shard_map(1, implicit_owners(2), EPOCH_1.moving[1:]),
     ("shard map epoch 1 is already another map", "in group 0")),
    (after_epoch_1, shard_map(1, implicit_owners(2), EPOCH_1.moving, schedule_groups=1),
     ("already another map",)),
    (after_epoch_1, shard_map(1, implicit_owners(2), EPOCH_1.moving, ((0, (1,)),)),
     ("already another map",)),
], ids=["skip-from-implicit", "skip", "back", "owner-not-moving", "owner-not-moving-2",
        "moving-elsewhere", "target-changed", "shrink", "same-epoch-other-moving",
        "same-epoch-other-schedule-groups", "same-epoch-other-formers"])
def test_an_out_of_step_map_is_refused_and_changes_nothing(make: Any, cmd: c.ShardMapSet,
                                                           words: tuple[str, ...]) -> None:
    state = make()
    refused(state, cmd, Code.FAILED_PRECONDITION, *words)


def test_the_same_map_again_is_applied_unchanged() -> None:
    state = after_epoch_1()
    before = snapshot.dump(state)
    assert applied(state, EPOCH_1) == ShardMapSetResult(1, changed=False)
    assert snapshot.dump(state) == before
    applied(state, EPOCH_2)
    before = snapshot.dump(state)
    assert applied(state, EPOCH_2) == ShardMapSetResult(2, changed=False)
    refused(state, EPOCH_1, Code.FAILED_PRECONDITION, "epoch 1 would skip")  # no way back
    assert snapshot.dump(state) == before
    implicit = group_state(0, 2)
    before = snapshot.dump(implicit)
    assert applied(implicit, shard_map(0, implicit_owners(2), groups=2)) == \
        ShardMapSetResult(0, changed=False)
    assert snapshot.dump(implicit) == before and implicit.shard_map is None


def test_the_implicit_map_again_with_more_groups_changes_no_owner() -> None:
    """The same epoch with another count of groups is refused: at epoch 0 the count is what
    decides the owners (s mod groups), so taking it would move shards without a move."""
    state = group_state(0, 2)
    outcome = refused(state, shard_map(0, implicit_owners(2), groups=3),
                      Code.FAILED_PRECONDITION, "another count of groups")
    assert current_map(state) == ShardMap(0, implicit_owners(2), schedule_groups=2), outcome
    assert state.group == GroupIdentity(0, 2, SHARDS)
    refused(state, submit(3), Code.FAILED_PRECONDITION, "group 1's")  # group 1 owns shard 3


# --- 4. invalid maps ----------------------------------------------------------------------------


@pytest.mark.parametrize(("cmd", "words"), [
    (shard_map(1, implicit_owners(2)[:-1]), f"owners: {SHARDS - 1} bytes; need one per shard"),
    (shard_map(1, b""), f"owners: 0 bytes; need one per shard ({SHARDS})"),
    (shard_map(1, handed_over(implicit_owners(2), (5,), 3)),
     "owners: group 3 of a deployment of 3"),
    (shard_map(1, implicit_owners(2), ((0, 0),)), "moving: shard 0 to group 0, which is not"),
    (shard_map(1, implicit_owners(2), ((1, 1),)), "moving: shard 1 to group 1"),
    (shard_map(1, implicit_owners(2), ((0, 3),)), "moving: shard 0 to group 3"),
    (shard_map(1, implicit_owners(2), ((4, 2), (0, 2))), "moving: shards must be unique and in"),
    (shard_map(1, implicit_owners(2), ((0, 2), (0, 2))), "moving: shards must be unique"),
    (shard_map(1, implicit_owners(2), schedule_groups=4), "schedule_groups: 4; need 1 to groups"),
    (shard_map(1, implicit_owners(2), groups=2, schedule_groups=3), "schedule_groups: 3"),
    (shard_map(1, implicit_owners(2), formers=((4, (0,)), (2, (1,)))), "formers: shards must be"),
    (shard_map(1, implicit_owners(2), formers=((4, (0,)), (4, (1,)))), "formers: shards must be"),
    (shard_map(1, implicit_owners(2), formers=((4, ()),)), "formers: shard 4: []"),
    (shard_map(1, implicit_owners(2), formers=((4, (3,)),)), "formers: shard 4: [3] are not"),
    (shard_map(1, implicit_owners(2), servers=TOPOLOGY[:2]), "servers: 2 groups' addresses"),
    (shard_map(1, implicit_owners(2), servers=(("a:1",), ("b:2",), ("nohost",))),
     "servers (group 2): 'nohost' is not HOST:PORT"),
], ids=lambda value: value if isinstance(value, str) else "map")
def test_an_invalid_map_is_refused_by_name_and_changes_nothing(cmd: c.ShardMapSet,
                                                               words: str) -> None:
    refused(group_state(0, 2), cmd, Code.INVALID_ARGUMENT, words)
    refused(after_epoch_1(), cmd, Code.INVALID_ARGUMENT, words)


def test_a_map_of_too_few_groups_for_this_group_is_refused_by_name() -> None:
    state = group_state(2, 3)
    refused(state, shard_map(1, implicit_owners(2), groups=2), Code.INVALID_ARGUMENT,
            "groups: 2; this is group 2")
    joining = group_state(2, 3, joining=True)
    refused(joining, shard_map(1, implicit_owners(2), groups=2), Code.INVALID_ARGUMENT,
            "groups: 2; this is group 2")
    one = State(now_ms=NOW)  # a log of one group is group 0: any 1 <= groups fits
    refused(one, shard_map(1, implicit_owners(2), groups=1, schedule_groups=1),
            Code.INVALID_ARGUMENT, "owners: group 1 of a deployment of 1")


# --- 5. a deployment of one group that grows ----------------------------------------------------


def test_a_log_of_one_group_takes_its_first_map_as_group_0() -> None:
    state = State(now_ms=NOW)
    assert applied(state, submit(OTHERS)) == JobSubmitted(job_id(OTHERS), True)  # all its own
    refused(state, shard_map(1, implicit_owners(2), groups=2, schedule_groups=1),
            Code.FAILED_PRECONDITION, "shard 1 would move from group 0 to group 1 without")
    refused(state, shard_map(2, bytes(SHARDS), groups=2, schedule_groups=1),
            Code.FAILED_PRECONDITION, "at epoch 0; epoch 2 would skip")
    odd = tuple((shard, 1) for shard in range(1, SHARDS, 2))
    first = shard_map(1, bytes(SHARDS), odd, groups=2, schedule_groups=1,
                      servers=TOPOLOGY[:2])
    assert applied(state, first) == ShardMapSetResult(1, changed=True)
    assert state.group == GroupIdentity(0, 2, SHARDS, TOPOLOGY[:2])
    assert state.shard_map == ShardMap(1, bytes(SHARDS), odd, (), 1)
    refused(state, submit(OTHERS, bits=1), Code.UNAVAILABLE,
            "shard 1 is moving from group 0 to group 1")
    assert applied(state, submit(STAYING)) == JobSubmitted(job_id(STAYING), True)
    second = shard_map(2, implicit_owners(2), (), tuple((s, (0,)) for s, _ in odd), groups=2,
                       schedule_groups=1)
    assert applied(state, second) == ShardMapSetResult(2, changed=True)
    assert state.group == GroupIdentity(0, 2, SHARDS, TOPOLOGY[:2])  # none: kept
    refused(state, submit(OTHERS, bits=2), Code.FAILED_PRECONDITION, "shard 1 is group 1's")


# --- 6. a group that joins ----------------------------------------------------------------------


def test_a_joining_group_owns_nothing_until_its_first_map_at_any_epoch() -> None:
    state = group_state(2, 3, joining=True)
    assert state.shard_map == ShardMap(0, b"")
    assert state.group == GroupIdentity(2, 3, SHARDS)
    for shard in (0, 1, 2, SHARDS - 1):
        refused(state, submit(shard), Code.UNAVAILABLE,
                "group 2 joined the deployment and owns no shard", "retry")
    refused(state, submit(5, key_in(5)), Code.UNAVAILABLE, "owns no shard")
    refused(state, shard_map(0, implicit_owners(3)), Code.FAILED_PRECONDITION,
            "a joining group's first shard map needs epoch >= 1")
    refused(state, shard_map(5, implicit_owners(2), groups=2), Code.INVALID_ARGUMENT,
            "groups: 2; this is group 2")
    refused(state, shard_map(5, implicit_owners(2), groups=4, servers=TOPOLOGY),
            Code.INVALID_ARGUMENT, "servers: 3 groups' addresses for a deployment of 4")
    refused(state, shard_map(5, handed_over(implicit_owners(2), MOVING, 2)),
            Code.FAILED_PRECONDITION, "a joining group's first shard map may only mark shards "
            "moving to it")  # owning shards at once would skip their keys' hand-over
    # the same GROUP_SET again (a replica restarting with --joining) changes nothing
    assert applied(state, c.GroupSet(2, 3, SHARDS, NOW, (), True)) == \
        GroupSetResult(2, 3, changed=False)
    assert state.shard_map == ShardMap(0, b"")

    fifth = shard_map(5, implicit_owners(2), tuple((shard, 2) for shard in MOVING))
    assert applied(state, fifth) == ShardMapSetResult(5, changed=True)
    assert state.shard_map == ShardMap(5, fifth.owners, fifth.moving, (), 2)
    refused(state, submit(MOVING[0]), Code.FAILED_PRECONDITION, "shard 0 is group 0's",
            "this is group 2")  # still moving here: group 0 owns it until the hand-over
    assert applied(state, fifth) == ShardMapSetResult(5, changed=False)
    for epoch in (4, 5, 7, 1):
        refused(state, shard_map(epoch, fifth.owners), Code.FAILED_PRECONDITION, f"epoch {epoch}")
    sixth = shard_map(6, handed_over(fifth.owners, MOVING, 2), (),
                      tuple((shard, (0,)) for shard in MOVING))
    assert applied(state, sixth) == ShardMapSetResult(6, changed=True)
    assert applied(state, submit(MOVING[0])) == JobSubmitted(job_id(MOVING[0]), True)
    refused(state, submit(STAYING), Code.FAILED_PRECONDITION, "group 0's")


def test_joining_is_recorded_only_by_the_first_group_set() -> None:
    state = group_state(2, 3)
    assert state.shard_map is None
    assert applied(state, c.GroupSet(2, 3, SHARDS, NOW, (), True)) == \
        GroupSetResult(2, 3, changed=False)
    assert state.shard_map is None  # a group of the first deployment: s mod 3 is its
    assert applied(state, submit(5)) == JobSubmitted(job_id(5), True)


# --- 7. KEYS_IMPORT -----------------------------------------------------------------------------


def record(key: str, job: str, created_ms: int = 123,
           tenant: str = TENANT) -> tuple[str, str, str, bytes, int]:
    return (tenant, key, job, b"\x07" * 32, created_ms)


def test_keys_of_moving_shards_are_imported_and_a_retried_submit_answers_the_first_job() -> None:
    source, target = group_state(0, 2), group_state(2, 3, joining=True)
    moving = MOVING[3]
    key = key_in(moving)
    first = applied(source, submit(moving, key))
    assert first == JobSubmitted(job_id(moving), created=True)
    refused(target, c.KeysImport(1, (), NOW), Code.FAILED_PRECONDITION,
            "keys for shard map epoch 1; group 2 is at epoch 0")

    applied(source, EPOCH_1)
    applied(target, EPOCH_1)
    refused(source, submit(moving, key, bits=9), Code.UNAVAILABLE, "moving")  # the retry waits
    held = source.idempotency[(TENANT, key)]
    assert held == IdempotencyRecord(job_id(moving), held.digest, NOW) and held.digest
    exported = (TENANT, key, held.job_id, held.digest, held.created_ms)

    other_key = key_in(MOVING[5])
    bad_key = key_in(STAYING)
    refused(target, c.KeysImport(2, (exported,), NOW), Code.FAILED_PRECONDITION,
            "keys for shard map epoch 2; group 2 is at epoch 1")
    refused(target, c.KeysImport(0, (exported,), NOW), Code.FAILED_PRECONDITION, "epoch 0")
    refused(target, c.KeysImport(1, (exported, record(bad_key, "j-x"), record(other_key, "j-y")),
                                 NOW), Code.FAILED_PRECONDITION,
            f"records[1]: key {bad_key!r} of tenant {TENANT!r} is in shard {STAYING}, which is "
            "not moving to group 2")
    refused(target, c.KeysImport(1, (record(key_in(OTHERS), "j-z"), exported), NOW),
            Code.FAILED_PRECONDITION, "records[0]", f"shard {OTHERS}")
    refused(source, c.KeysImport(1, (exported,), NOW), Code.FAILED_PRECONDITION,
            "records[0]", "not moving to group 0")  # the giving group takes none of them

    assert applied(target, c.KeysImport(1, (exported, record(other_key, "j-y")), NOW)) == \
        KeysImported(imported=2, kept=0)
    assert target.idempotency[(TENANT, key)] == held
    assert target.idempotency[(TENANT, other_key)] == \
        IdempotencyRecord("j-y", b"\x07" * 32, 123)  # its creation time, not this log's now
    third_key = key_in(MOVING[5], skip=1)
    again = c.KeysImport(1, (record(key, "j-changed", 55), (TENANT, other_key, "j-y",
                                                           b"\x07" * 32, 123),
                             record(third_key, "j-w", 456)), NOW)
    assert applied(target, again) == KeysImported(imported=1, kept=2)
    assert target.idempotency[(TENANT, key)] == held  # a held key stays as it was
    assert target.idempotency[(TENANT, third_key)] == \
        IdempotencyRecord("j-w", b"\x07" * 32, 456)
    assert list(target.idempotency_order) == [(NOW, TENANT, key), (123, TENANT, other_key),
                                              (456, TENANT, third_key)]
    before = snapshot.dump(target)
    assert applied(target, again) == KeysImported(imported=0, kept=3)
    assert snapshot.dump(target) == before
    refused(target, submit(moving, key, bits=9), Code.FAILED_PRECONDITION,
            f"shard {moving} is group 0's")  # not before the hand-over

    applied(source, EPOCH_2)
    applied(target, EPOCH_2)
    refused(target, c.KeysImport(2, (exported,), NOW), Code.FAILED_PRECONDITION,
            "records[0]")  # nothing moves at epoch 2
    refused(source, submit(moving, key, bits=9), Code.FAILED_PRECONDITION,
            f"shard {moving} is group 2's")
    jobs_before = dict(target.jobs)
    assert applied(target, submit(moving, key, bits=9)) == \
        JobSubmitted(job_id(moving), created=False)  # the first job, not a second one
    assert target.jobs == jobs_before
    refused(target, submit(moving, key, bits=9, task="other"), Code.ALREADY_EXISTS,
            f"was used for job {job_id(moving)} with a different spec")
    fresh = key_in(moving, skip=1)
    assert applied(target, submit(moving, fresh, bits=10)) == \
        JobSubmitted(job_id(moving, 10), created=True)


def test_keys_import_in_a_log_without_a_map_is_refused() -> None:
    for state in (State(now_ms=NOW), group_state(0, 2)):
        refused(state, c.KeysImport(0, (record(key_in(0), "j"),), NOW),
                Code.FAILED_PRECONDITION, "group 0 is at epoch 0")


# --- 8. snapshots -------------------------------------------------------------------------------


def test_a_snapshot_keeps_the_map_byte_for_byte() -> None:
    states = [group_state(2, 3, joining=True), after_epoch_1()]
    done = after_epoch_1()
    applied(done, shard_map(2, EPOCH_2.owners, ((STAYING, 1),), (*EPOCH_2.formers, (4094, (1,))),
                            servers=TOPOLOGY))
    states.append(done)
    one = State(now_ms=NOW)
    applied(one, shard_map(1, bytes(SHARDS), ((7, 1),), ((9, (1, 0)),), groups=2,
                           schedule_groups=1))
    states.append(one)
    for state in states:
        data = snapshot.dump(state)
        loaded = snapshot.load(data)
        assert loaded.shard_map == state.shard_map and loaded.group == state.group
        assert snapshot.dump(loaded) == data
        assert state.shard_map is not None
        *_, last = policy_record(data)
        assert last[4] == [state.shard_map.epoch, state.shard_map.owners,
                           [list(m) for m in state.shard_map.moving],
                           [[s, list(g)] for s, g in state.shard_map.formers],
                           state.shard_map.schedule_groups]
    assert snapshot.load(snapshot.dump(done)).shard_map == ShardMap(
        2, EPOCH_2.owners, ((STAYING, 1),), (*EPOCH_2.formers, (4094, (1,))), 2)


def test_a_state_without_a_map_writes_no_map_record() -> None:
    state = group_state(0, 2)
    applied(state, submit(STAYING))
    data = snapshot.dump(state)
    *_, last = policy_record(data)
    assert last == [0, 2, SHARDS, []]  # the four fields written before shards could move
    loaded = snapshot.load(data)
    assert loaded.shard_map is None and snapshot.dump(loaded) == data
    assert len(policy_record(snapshot.dump(State()))) == 2  # one group: no group record at all
