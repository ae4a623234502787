"""The rules a membership change must pass before it is proposed: pure functions over addresses
and what the leader knows of each member's progress (the node gathers that, `RaftNode`).

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

from collections.abc import Collection, Mapping
from typing import Any

from raftsched.errors import Code, RaftschedError
from raftsched.options import host_port

MEMBER_ACK_TIMEOUT_S = 2.0
"""How long a current member has to acknowledge a fresh commit to count as live (20 heartbeats)."""
JOIN_PROBE_TIMEOUT_S = 5.0
"""A TCP connect to a new member's address must succeed within this (retried: a replica just
started may not listen yet) before anything is proposed."""
JOIN_CATCH_UP_TIMEOUT_S = 30.0
"""A new member must hold every entry committed before its addition within this, or it is
removed again. Catching up may take a snapshot transfer: 1,000,000 tasks loaded and served in
~8 s in scripts/bench restart."""


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
