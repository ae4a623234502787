"""Membership changes: the rules a change must pass before it is proposed (pure functions over
addresses and what the leader knows of each member's progress) and `MembershipChanges`, which
gathers that progress from pysyncobj on the leader and makes the change (and hands leadership
over); `RaftNode` delegates `add_replica`, `remove_replica` and `transfer_leadership` to it.

Raft keeps a configuration safe only while a majority of it is alive. pysyncobj adds a member
the moment its change commits — it has no learner stage — and counts it toward the quorum at
once, whether or not anything listens at its address. Three adds of unreachable addresses took
a 3-replica cluster to 6 members with 3 alive: no majority, no leader, for good, and no way to
remove them (a removal must commit too). So a change is refused when it could leave the new
configuration without a live majority:
- an address must be a plain `host:port` (a DNS name or an IP literal, a port 1-65535);
- an add needs every current member to be live (the leader heard from it about an entry
  committed after the request began), something listening at the new address, and then the new
  member to catch up within a deadline — otherwise the node removes it again (rolls back);
  so at most one member of a configuration is ever not yet caught up;
- a removal needs the live members of the configuration that remains to be a majority of it.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from pysyncobj.config import FAIL_REASON

from raftsched.errors import Code, RaftschedError
from raftsched.eventlog import EventLogger
from raftsched.options import host_port
from raftsched.replica.raft.errors import NotLeader, OutcomeUnknown, fail_name

log = EventLogger("raftsched.replica.raft.node")

MEMBER_ACK_TIMEOUT_S = 2.0
"""How long a current member has to acknowledge a fresh commit to count as live (20 heartbeats)."""
JOIN_PROBE_TIMEOUT_S = 5.0
"""A TCP connect to a new member's address must succeed within this (retried: a replica just
started may not listen yet) before anything is proposed."""
JOIN_CATCH_UP_TIMEOUT_S = 30.0
"""A new member must hold every entry committed before its addition within this, or it is
removed again. Catching up may take a snapshot transfer: 1,000,000 tasks loaded and served in
~8 s in scripts/bench restart."""
MEMBERSHIP_POLL_S = 0.05
"""How often a membership check looks again at the followers' progress."""
TRANSFER_POLL_S = 0.02
"""How often `transfer_leadership` looks for the new leader."""


def check_address(address: str) -> None:
    """Refuse (INVALID_ARGUMENT) anything but `host:port` by the one HOST:PORT rule
    (`raftsched.options.host_port`: a DNS name or an IP literal, IPv6 in brackets, port
    1-65535; no paths, control characters, spaces or empty parts)."""
    try:
        host_port(address)
    except ValueError as problem:
        shown = address if len(address) <= 80 else address[:80] + "..."
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"not a replica address: {shown!r}: {problem}") from None


def check_add(members: Collection[str], lagging: Collection[str], address: str) -> None:
    """Refuse an add while any current member is not live: with one member down, the new
    configuration's majority would need the newcomer before it has caught up."""
    if address in members:
        raise RaftschedError(Code.ALREADY_EXISTS, f"{address} is already a member")
    if lagging:
        raise RaftschedError(
            Code.FAILED_PRECONDITION,
            f"cannot add {address}: member(s) {', '.join(sorted(lagging))} did not acknowledge "
            f"a fresh commit within {MEMBER_ACK_TIMEOUT_S:g} s; adding a member now could leave "
            "the new configuration without a live majority. Repair or remove them first "
            "(README: replacing a dead replica)")


def check_remove(members: Collection[str], lagging: Collection[str], address: str) -> None:
    """Refuse a removal after which the live members would not be a majority of those left."""
    if address not in members:
        raise RaftschedError(Code.NOT_FOUND, f"{address} is not a member")
    remaining = [m for m in members if m != address]
    live = [m for m in remaining if m not in lagging]
    majority = len(remaining) // 2 + 1
    if len(live) < majority:
        raise RaftschedError(
            Code.FAILED_PRECONDITION,
            f"cannot remove {address}: of the {len(remaining)} members left, only {len(live)} "
            f"are live ({', '.join(sorted(live))}) and {majority} are needed for a majority; "
            f"not live: {', '.join(sorted(set(remaining) - set(live)))}. Remove a member that "
            "is not live instead, or repair it first")


def connected_match_indexes(status: Mapping[str, Any]) -> dict[str, int]:
    """The leader's match index of each connected follower, from pysyncobj's `getStatus()`
    (a follower whose partner status is not 2, connected, is left out)."""
    result: dict[str, int] = {}
    for key, value in status.items():
        if key.startswith("match_idx_server_"):
            node = key[len("match_idx_server_"):]
            if status.get(f"partner_node_status_server_{node}") == 2:
                result[node] = int(value)
    return result


class MembershipHost(Protocol):
    """What `MembershipChanges` needs of the Raft node (`RaftNode`)."""

    @property
    def address(self) -> str: ...
    @property
    def syncobj(self) -> Any: ...
    def members(self) -> list[str]: ...
    def leader_address(self) -> str | None: ...
    def is_leader_confirmed(self, timeout_s: float) -> bool: ...
    def on_tick_thread(self, task: Callable[[], None]) -> None: ...


class _Reply:
    """The answer pysyncobj gives a membership change or a transfer, through its callback."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.reason: Any = None

    def callback(self, result: Any, reason: Any) -> None:
        self.reason = reason
        self.done.set()


class MembershipChanges:
    """One membership change at a time on the leader, each refused when it could leave the
    configuration without a live majority (the rules above). `pending` names the change in
    progress (`RaftStatus.membership_change`)."""

    def __init__(self, host: MembershipHost) -> None:
        self._host = host
        self._lock = threading.Lock()
        self.pending: str | None = None

    def add(self, address: str, timeout_s: float,
            catch_up_s: float = JOIN_CATCH_UP_TIMEOUT_S) -> None:
        """Add a voting member (call on the leader). Start the new replica with every current
        member as its peers. Every current member live, the address reachable, and the
        newcomer caught up within `catch_up_s` (or it is removed again and FAILED_PRECONDITION
        says why). `timeout_s` bounds each proposal."""
        check_address(address)
        obj = self._host.syncobj
        with self._change(f"add {address}", timeout_s) as deadline:
            members = self._host.members()
            check_add(members, self._lagging(members), address)
            _probe(address, min(JOIN_PROBE_TIMEOUT_S, max(0.1, deadline - time.monotonic())))
            since = int(obj.raftCommitIndex)
            self._commit(obj.addNodeToCluster, address, deadline)
            log.info("raft_member_added", address=address)
            if not self._caught_up(address, since, catch_up_s):
                self._commit(obj.removeNodeFromCluster, address, time.monotonic() + timeout_s)
                log.warning("raft_member_rolled_back", address=address)
                raise RaftschedError(
                    Code.FAILED_PRECONDITION,
                    f"{address} was added but did not catch up within "
                    f"{catch_up_s:g} s (not a replica of this cluster, "
                    "a different secret, or not started with every current member as its "
                    "peers?); it was removed again",
                )

    def remove(self, address: str, timeout_s: float) -> None:
        """Remove a voting member (call on the leader; the leader cannot remove itself), unless
        the live members left would not be a majority of the new configuration."""
        check_address(address)
        with self._change(f"remove {address}", timeout_s) as deadline:
            if address == self._host.address:
                raise RaftschedError(
                    Code.FAILED_PRECONDITION,
                    f"{address} is the leader, and the leader cannot remove itself: stop "
                    f"the replica at {address} (another one is elected leader), then run "
                    f"`raftsched admin remove-replica {address}` again to remove it as a dead "
                    "member",
                )
            members = self._host.members()
            check_remove(members, self._lagging(members), address)
            self._commit(self._host.syncobj.removeNodeFromCluster, address, deadline)
        log.info("raft_member_removed", address=address)

    def transfer_leadership(self, timeout_s: float, target: str | None = None) -> str:
        """Hand leadership to `target` (or the most caught-up follower); returns the new leader.

        pysyncobj sends Raft's TimeoutNow; success only means it was sent, so this polls until
        another leader is known.
        """
        deadline = time.monotonic() + timeout_s
        obj = self._host.syncobj
        if not obj._isLeader():
            raise NotLeader(self._host.leader_address())
        reply = _Reply()
        # transferLeadership sends on the transport: it must run on the tick thread.
        self._host.on_tick_thread(lambda: obj.transferLeadership(target, reply.callback))
        if not reply.done.wait(max(0.0, deadline - time.monotonic())):
            raise OutcomeUnknown(f"leadership transfer not started within {timeout_s:g} s")
        if reply.reason != FAIL_REASON.SUCCESS:
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                f"pysyncobj refused the transfer ({fail_name(reply.reason)}): the "
                "target must be a connected member whose log is fully caught up",
            )
        while time.monotonic() < deadline:
            leader = self._host.leader_address()
            if leader is not None and leader != self._host.address:
                return leader
            time.sleep(TRANSFER_POLL_S)
        raise OutcomeUnknown(f"no new leader within {timeout_s:g} s")

    def _match_indexes(self, timeout_s: float) -> dict[str, int]:
        """The leader's match index of each connected follower (pysyncobj's getStatus, read on
        the tick thread that owns those maps). A disconnected follower is left out."""
        result: dict[str, int] = {}
        done = threading.Event()

        def gather() -> None:
            try:
                result.update(connected_match_indexes(self._host.syncobj.getStatus()))
            finally:
                done.set()

        self._host.on_tick_thread(gather)
        if not done.wait(timeout_s):
            raise OutcomeUnknown(f"the tick thread did not answer within {timeout_s:g} s")
        return result

    def _lagging(self, members: list[str]) -> set[str]:
        """Members (never this leader) that have not acknowledged the entry committed last,
        waiting up to MEMBER_ACK_TIMEOUT_S for them. The caller just committed a barrier
        (`_change`), so a live follower has it or gets it with the next heartbeat."""
        target = int(self._host.syncobj.raftCommitIndex)
        others = [m for m in members if m != self._host.address]
        deadline = time.monotonic() + MEMBER_ACK_TIMEOUT_S
        while True:
            matched = self._match_indexes(MEMBER_ACK_TIMEOUT_S)
            lagging = {m for m in others if matched.get(m, -1) < target}
            if not lagging or time.monotonic() >= deadline:
                return lagging
            time.sleep(MEMBERSHIP_POLL_S)

    def _caught_up(self, address: str, since: int, timeout_s: float) -> bool:
        """Whether the new member acknowledged every entry committed before it was added,
        within `timeout_s` (so it can serve as one of a majority)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._match_indexes(timeout_s).get(address, -1) >= since:
                return True
            if not self._host.syncobj._isLeader():
                raise NotLeader(self._host.leader_address())
            time.sleep(MEMBERSHIP_POLL_S)
        return False

    @contextmanager
    def _change(self, what: str, timeout_s: float) -> Iterator[float]:
        if not self._lock.acquire(blocking=False):
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                f"cannot {what}: membership change '{self.pending}' is in progress; "
                "changes are made one at a time",
            )
        try:
            self.pending = what
            deadline = time.monotonic() + timeout_s
            # Also guarantees the leader's first entry of its term is applied, which pysyncobj
            # requires before any membership change.
            if not self._host.is_leader_confirmed(timeout_s):
                raise NotLeader(self._host.leader_address())
            yield deadline
        finally:
            self.pending = None
            self._lock.release()

    def _commit(self, submit: Callable[..., None], address: str, deadline: float) -> None:
        reply = _Reply()
        submit(address, reply.callback)
        if not reply.done.wait(max(0.0, deadline - time.monotonic())):
            raise OutcomeUnknown("membership change not committed in time (check members())")
        if reply.reason == FAIL_REASON.SUCCESS:
            return
        if reply.reason == FAIL_REASON.REQUEST_DENIED:
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                "pysyncobj denied the membership change: an earlier change is not committed yet",
            )
        if reply.reason in (FAIL_REASON.NOT_LEADER, FAIL_REASON.MISSING_LEADER):
            raise NotLeader(self._host.leader_address())
        raise OutcomeUnknown(f"membership change: pysyncobj reported {fail_name(reply.reason)}")


def _probe(address: str, timeout_s: float) -> None:
    """Refuse (FAILED_PRECONDITION) an address where nothing accepts a TCP connection within
    `timeout_s` (tried again every MEMBERSHIP_POLL_S: a replica just started may not listen
    yet)."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host.strip("[]"), int(port)),
                                          timeout=max(0.05, left)):
                return
        except OSError as error:
            if time.monotonic() + MEMBERSHIP_POLL_S < deadline:
                time.sleep(MEMBERSHIP_POLL_S)
                continue
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                f"cannot add {address}: nothing accepted connections there within "
                f"{timeout_s:g} s ({error.strerror or type(error).__name__}); start the new "
                "replica first, with every current member as its peers",
            ) from None
