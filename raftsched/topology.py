"""Where a job lives when a deployment has several scheduler groups (issue 27,
docs/scale-out.md §1): one rule, used by the replicas (which shards they own), the client
and the CLI (where to send a call) and the agent (which servers are which group).

- A deployment is K groups (1 <= K <= `limits.MAX_GROUPS`), each an independent Raft group of
  replicas. Addresses are written as today's comma-separated list, one list per group, the
  groups separated by ';' (`RAFTSCHED_SERVERS="a:1,b:2,c:3;d:4,e:5,f:6"`): group i is the i-th.
- There are `limits.VIRTUAL_SHARDS` shards, fixed forever; shard s belongs to group s mod K.
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
