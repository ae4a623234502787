"""Where a job lives when a deployment has several scheduler groups (issue 27,
docs/scale-out.md §1): one rule, used by the replicas (which shards they own), the client
and the CLI (where to send a call) and the agent (which servers are which group).

- A deployment is K groups (1 <= K <= `limits.MAX_GROUPS`), each an independent Raft group of
  replicas. Addresses are written as today's comma-separated list, one list per group, the
  groups separated by ';' (`RAFTSCHED_SERVERS="a:1,b:2,c:3;d:4,e:5,f:6"`): group i is the i-th.
- There are `limits.VIRTUAL_SHARDS` shards, fixed forever; shard s belongs to group s mod K
  until shards move (groups added to a running deployment, docs/scale-out.md §5): then every
  group holds an explicit map, which `Routes` reads from a replica's GetTopology answer.
- A job's shard is chosen when it is submitted: with an idempotency key, from the (tenant, key)
  pair, so a retried submit goes to the same group and the group can refuse one that was sent to
  the wrong group; without one, any shard of the group that takes it. The job id carries the
  shard in the first three hex digits of its random part (`name-SSSrrrrrrrrrrrrr`), so any reader
  can route a job id without asking anyone (`shard_of_job_id`).

With one group nothing here changes a job id's shape or any answer: every shard is group 0's.
"""

from __future__ import annotations

import hashlib
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from raftsched import limits
from raftsched.options import parse_address_list

GROUP_SEPARATOR = ";"
_SHARD_DIGITS = 3
assert 16 ** _SHARD_DIGITS == limits.VIRTUAL_SHARDS
_JOB_ID_TAIL = re.compile(r"-([0-9a-f]{16})$")


def parse_groups(text: str, source: str) -> list[list[str]]:
    """The groups' address lists of `text` ('a:1,b:2;c:3,d:4'), each checked by the one
    HOST:PORT rule; ValueError naming `source` and the group for a bad one."""
    parts = text.split(GROUP_SEPARATOR)
    if len(parts) > limits.MAX_GROUPS:
        raise ValueError(f"{source}: {len(parts)} groups; at most {limits.MAX_GROUPS}")
    groups = []
    for index, part in enumerate(parts):
        where = source if len(parts) == 1 else f"{source} (group {index})"
        if not part.strip():
            raise ValueError(f"{where}: no addresses (groups are separated by "
                             f"'{GROUP_SEPARATOR}', each a comma-separated HOST:PORT list)")
        groups.append(parse_address_list(part, where))
    return groups


def group_of_shard(shard: int, groups: int) -> int:
    assert 0 <= shard < limits.VIRTUAL_SHARDS and 1 <= groups <= limits.MAX_GROUPS
    return shard % groups


def implicit_owners(groups: int) -> bytes:
    """Every shard's group before any shard moved (one byte per shard): s mod groups."""
    return bytes(group_of_shard(shard, groups) for shard in range(limits.VIRTUAL_SHARDS))


def shard_of_key(tenant: str, key: str) -> int:
    """The shard of an idempotent submit: a stable hash of (tenant, key) (the same on every
    machine and Python version: not `hash()`)."""
    digest = hashlib.blake2b(f"{tenant}\0{key}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % limits.VIRTUAL_SHARDS


def group_of_key(tenant: str, key: str, groups: int) -> int:
    return group_of_shard(shard_of_key(tenant, key), groups)


def owned_shard(random_bits: int, group: int, groups: int) -> int:
    """A shard of `group`, drawn from `random_bits` (for a submit without a key)."""
    assert 0 <= group < groups
    per_group = len(range(group, limits.VIRTUAL_SHARDS, groups))
    return group + groups * (random_bits % per_group)


def job_id_tail(shard: int, random_bits: int) -> str:
    """The 16 hex digits after a job id's slug: the shard, then 52 random bits."""
    assert 0 <= shard < limits.VIRTUAL_SHARDS
    return f"{shard:0{_SHARD_DIGITS}x}{random_bits % (1 << 52):013x}"


def shard_of_job_id(job_id: str) -> int | None:
    """The shard a job id names, or None for an id without one (a schedule's run, say, whose
    id is the schedule's and its time's: ask every group)."""
    match = _JOB_ID_TAIL.search(job_id)
    return None if match is None else int(match.group(1)[:_SHARD_DIGITS], 16)


def group_of_job_id(job_id: str, groups: int) -> int | None:
    shard = shard_of_job_id(job_id)
    return None if shard is None else group_of_shard(shard, groups)


@dataclass(frozen=True)
class Routes:
    """Where a client sends a call, by the shard map a replica answered (GetTopology): a
    submit to its key's shard's owner; a job id to its shard's owner, then (when that group
    does not know the job) to the shard's former owners, newest first; a schedule to group
    crc32(id) mod `schedule_groups` (the deployment's first group count: schedules never
    move)."""

    groups: int
    owners: bytes = b""
    """One byte per shard; b"": shard s is group s mod groups (no shard has moved)."""
    formers: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    schedule_groups: int = 0
    """0: `groups`."""
    epoch: int = 0

    @classmethod
    def of(cls, answer: Any) -> Routes:
        """The routes of a `Topology` answer."""
        return cls(int(answer.groups), bytes(answer.owners),
                   {int(f.shard): tuple(int(g) for g in f.groups) for f in answer.formers},
                   int(answer.schedule_groups), int(answer.map_epoch))

    def owner(self, shard: int) -> int:
        return self.owners[shard] if self.owners else group_of_shard(shard, self.groups)

    def readers(self, shard: int) -> list[int]:
        """The groups that may hold a job of `shard`: its owner, then its former owners."""
        return list(dict.fromkeys([self.owner(shard), *self.formers.get(shard, ())]))

    def schedule_group(self, schedule_id: str) -> int:
        return zlib.crc32(schedule_id.encode()) % (self.schedule_groups or self.groups)


def balancing_moves(owners: bytes, groups: int) -> list[tuple[int, int]]:
    """The fewest moves that spread `owners` (one byte per shard) evenly over `groups`: each
    group that holds more than its share gives its highest shards to the groups that hold
    fewer, lowest group first. The shares that are one larger go to the groups that hold the
    most already. (shard, to), by shard; deterministic."""
    assert len(owners) == limits.VIRTUAL_SHARDS and groups >= 1 + max(owners)
    held: list[list[int]] = [[] for _ in range(groups)]
    for shard, owner in enumerate(owners):
        held[owner].append(shard)
    base, extra = divmod(limits.VIRTUAL_SHARDS, groups)
    largest = sorted(range(groups), key=lambda g: (-len(held[g]), g))[:extra]
    share = [base + (1 if g in largest else 0) for g in range(groups)]
    given = sorted(s for g in range(groups) for s in held[g][share[g]:])
    moves = []
    for group in range(groups):
        while len(held[group]) < share[group]:
            shard = given.pop(0)
            held[group].append(shard)
            moves.append((shard, group))
    return sorted(moves)
