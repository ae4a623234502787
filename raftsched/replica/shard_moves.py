"""The replica's side of shard moves (docs/scale-out.md §5): the shard map in GetTopology, the
admin RPCs that write a map, export and import idempotency keys, and which shard a new job
takes. The rules themselves are the state's (`raftsched.state.shards`); what is checked here is
checked again at apply, ordered with every submit."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from raftsched import limits, topology
from raftsched.api import raftsched_pb2 as pb
from raftsched.environment import SERVERS_ENV
from raftsched.errors import Code, RaftschedError
from raftsched.state import commands as c
from raftsched.state.model import IdempotencyRecord, ShardMap, State
from raftsched.state.shards import shard_problem


def add_map(answer: Any, state: State) -> None:
    """The shard map's fields of a Topology answer (none while no shard has moved)."""
    shard_map = state.shard_map
    if shard_map is None:
        return
    answer.map_epoch = shard_map.epoch
    answer.owners = shard_map.owners
    answer.joining = not shard_map.owners
    answer.schedule_groups = shard_map.schedule_groups
    answer.moving.extend(pb.TopologyMove(shard=s, to=to) for s, to in shard_map.moving)
    answer.formers.extend(pb.TopologyFormers(shard=s, groups=groups)
                          for s, groups in shard_map.formers)


def map_command(request: Any, now_ms: int) -> c.ShardMapSet:
    """The SHARD_MAP_SET of a SetShardMap request (apply judges it)."""
    return c.ShardMapSet(
        request.epoch, request.groups, bytes(request.owners),
        tuple((m.shard, m.to) for m in request.moving),
        tuple((f.shard, tuple(f.groups)) for f in request.formers), request.schedule_groups,
        tuple(tuple(g.servers) for g in request.servers), now_ms)


def keys_of(state: State, epoch: int, shards: set[int]) -> list[tuple[tuple[str, str],
                                                                     IdempotencyRecord]]:
    """Every remembered key of this log (the caller filters them by shard outside the apply
    lock), once its map is at `epoch` and marks every one of `shards` moving away: from then
    on no key of theirs can be made here. Raises FAILED_PRECONDITION otherwise."""
    shard_map = state.shard_map
    moving = {shard for shard, _ in shard_map.moving} if shard_map is not None else set()
    if shard_map is None or shard_map.epoch != epoch or not shards <= moving:
        held = 0 if shard_map is None else shard_map.epoch
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"keys of shards moving at shard map epoch {epoch} were asked; this "
                             f"group is at epoch {held}"
                             + ("" if shard_map is None or shard_map.epoch != epoch else
                                f", where shards {sorted(shards - moving)[:5]} are not moving"))
    return list(state.idempotency.items())


def key_pages(items: list[tuple[tuple[str, str], IdempotencyRecord]], shards: set[int],
              epoch: int) -> Iterator[Any]:
    """The keys of `shards` among `items`, in pages of MAX_KEYS_PER_IMPORT (one import each);
    at least one page, so the caller always hears the epoch back."""
    page = pb.ShardKeys(epoch=epoch)
    for (tenant, key), record in items:
        if topology.shard_of_key(tenant, key) not in shards:
            continue
        page.keys.add(tenant=tenant, key=key, job_id=record.job_id, digest=record.digest,
                      created_ms=record.created_ms)
        if len(page.keys) == limits.MAX_KEYS_PER_IMPORT:
            yield page
            page = pb.ShardKeys(epoch=epoch)
    yield page


def import_command(request: Any, now_ms: int) -> c.KeysImport:
    if len(request.keys) > limits.MAX_KEYS_PER_IMPORT:
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"keys: {len(request.keys)}, over MAX_KEYS_PER_IMPORT="
                             f"{limits.MAX_KEYS_PER_IMPORT} per call")
    return c.KeysImport(request.epoch, tuple(
        (k.tenant, k.key, k.job_id, bytes(k.digest), k.created_ms) for k in request.keys), now_ms)


def new_job_shard(state: State, tenant: str, key: str | None, bits: int) -> int:
    """The shard of a job submitted here: its key's (FAILED_PRECONDITION naming the owner when
    it is another group's, UNAVAILABLE while it moves), else one of this group's shards that is
    not moving (UNAVAILABLE when there is none: a group that joined and was given none yet)."""
    if key:
        shard = topology.shard_of_key(tenant, key)
        refused = shard_problem(state, shard)
        if refused is not None:
            raise RaftschedError(refused.code, refused.reason + (
                f" (clients route it by the groups in ${SERVERS_ENV})"
                if refused.code == Code.FAILED_PRECONDITION else ""),
                retry_after_ms=200 if refused.code == Code.UNAVAILABLE else 0)
        return shard
    if state.group is None:  # one group (a map is held only with an identity)
        return (bits >> 52) % limits.VIRTUAL_SHARDS
    if state.shard_map is None:  # no shard ever moved: the rule, without a scan
        return topology.owned_shard(bits >> 12, state.group.group, state.group.groups)
    return _free_shard(state.shard_map, state.group.group, bits)


def _free_shard(shard_map: ShardMap, me: int, bits: int) -> int:
    moving = {shard for shard, _ in shard_map.moving}
    mine = [s for s, owner in enumerate(shard_map.owners) if owner == me and s not in moving]
    if not mine:
        raise RaftschedError(Code.UNAVAILABLE, f"group {me} owns no shard it may take new jobs "
                             "in now (it joined and was given none yet, or all of its shards "
                             "are moving): retry", retry_after_ms=200)
    return mine[(bits >> 12) % len(mine)]
