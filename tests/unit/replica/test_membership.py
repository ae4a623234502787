"""The rules a membership change must pass (replica/raft/membership.py), without a cluster."""

from __future__ import annotations

import pytest

from raftsched.errors import Code, RaftschedError
from raftsched.replica.raft import membership

GOOD = ["127.0.0.1:7000", "localhost:1", "replica-2.sched.example.com:65535", "[::1]:7000",
        "10.0.0.12:4321", "a:1"]
BAD = ["../../etc:1", "\x00:1", "h" * 300 + ":1", "host:0", "host:65536", "host:", ":1",
       "host", "a b:1", "host:\u0661", "h\u00e9st:1", "-host:1", "host-:1", "a..b:1",
       "1.2.3.999:1", "[127.0.0.1]:1", "[::1:1", "host:+1", "host:1 "]


@pytest.mark.parametrize("address", GOOD)
def test_plain_host_port_addresses_are_accepted(address: str) -> None:
    membership.check_address(address)


@pytest.mark.parametrize("address", BAD)
def test_anything_else_is_refused_as_invalid_argument(address: str) -> None:
    with pytest.raises(RaftschedError) as refused:
        membership.check_address(address)
    assert refused.value.code == Code.INVALID_ARGUMENT
    assert len(str(refused.value)) < 300  # a long address is cut in the message


THREE = ["a:1", "b:1", "c:1"]


def test_an_add_needs_every_member_live() -> None:
    membership.check_add(THREE, set(), "d:1")
    with pytest.raises(RaftschedError) as refused:
        membership.check_add(THREE, {"c:1"}, "d:1")
    assert refused.value.code == Code.FAILED_PRECONDITION and "c:1" in str(refused.value)
    with pytest.raises(RaftschedError) as refused:
        membership.check_add(THREE, set(), "b:1")
    assert refused.value.code == Code.ALREADY_EXISTS


@pytest.mark.parametrize(("members", "lagging", "address", "allowed"), [
    (THREE, set(), "b:1", True),
    (THREE, {"c:1"}, "c:1", True),        # remove the dead one: a, b live of 2
    (THREE, {"c:1"}, "b:1", False),       # a live, c dead: 1 of 2 is no majority
    (["a:1", "b:1", "c:1", "d:1", "e:1"], {"d:1", "e:1"}, "c:1", False),  # 2 of 4 live
    (["a:1", "b:1", "c:1", "d:1", "e:1"], {"e:1"}, "d:1", True),         # 3 of 4 live
    (["a:1", "b:1"], {"b:1"}, "b:1", True),  # down to the leader alone
])
def test_a_removal_must_leave_a_live_majority(members: list[str], lagging: set[str],
                                              address: str, allowed: bool) -> None:
    if allowed:
        membership.check_remove(members, lagging, address)
        return
    with pytest.raises(RaftschedError) as refused:
        membership.check_remove(members, lagging, address)
    assert refused.value.code == Code.FAILED_PRECONDITION and "majority" in str(refused.value)


def test_removing_a_non_member_is_not_found() -> None:
    with pytest.raises(RaftschedError) as refused:
        membership.check_remove(THREE, set(), "z:1")
    assert refused.value.code == Code.NOT_FOUND


def test_connected_match_indexes_leave_out_disconnected_followers() -> None:
    status = {"match_idx_server_a:1": 7, "partner_node_status_server_a:1": 2,
              "match_idx_server_b:2": 9, "partner_node_status_server_b:2": 0,
              "match_idx_count": 2, "commit_idx": 9}
    assert membership.connected_match_indexes(status) == {"a:1": 7}


class FakeObj:
    """The few SyncObj members MembershipChanges reads, answering every change at once."""

    def __init__(self) -> None:
        self.raftCommitIndex = 5
        self.changes: list[tuple[str, str]] = []

    def _isLeader(self) -> bool:
        return True

    def getStatus(self) -> dict[str, int]:
        return {"match_idx_server_b:1": 5, "partner_node_status_server_b:1": 2,
                "match_idx_server_c:1": 5, "partner_node_status_server_c:1": 2}

    def removeNodeFromCluster(self, address: str, callback: object) -> None:
        from pysyncobj.config import FAIL_REASON
        self.changes.append(("remove", address))
        callback(None, FAIL_REASON.SUCCESS)  # type: ignore[operator]


class FakeHost:
    address = "a:1"

    def __init__(self) -> None:
        self.syncobj = FakeObj()
        self.on_tick: list[object] = []

    def members(self) -> list[str]:
        return list(THREE)

    def leader_address(self) -> str | None:
        return self.address

    def is_leader_confirmed(self, timeout_s: float) -> bool:
        return True

    def on_tick_thread(self, task: object) -> None:
        task()  # type: ignore[operator]  (the tick thread, at once)


def test_membership_changes_outside_the_node_one_at_a_time() -> None:
    """The change mechanics moved out of RaftNode (`MembershipChanges`): a removal of a live
    follower commits, the leader cannot remove itself, and a second change while one is in
    progress is refused, naming the one in progress."""
    host = FakeHost()
    changes = membership.MembershipChanges(host)
    changes.remove("c:1", 1.0)
    assert host.syncobj.changes == [("remove", "c:1")] and changes.pending is None
    with pytest.raises(RaftschedError) as itself:
        changes.remove("a:1", 1.0)
    assert itself.value.code == Code.FAILED_PRECONDITION and changes.pending is None
    with changes._change("add d:1", 1.0):
        assert changes.pending == "add d:1"
        with pytest.raises(RaftschedError) as busy:
            changes.remove("b:1", 1.0)
    assert busy.value.code == Code.FAILED_PRECONDITION and "'add d:1' is in progress" in str(
        busy.value)
