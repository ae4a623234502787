"""Moving shards between groups (docs/scale-out.md §5): the shard map every group holds, the
rules that keep one owner per shard while shards move, and the idempotency keys handed over.

A move is three epochs, each written into every group by `raftsched admin groups add`:
(1) the shards marked moving to their new group (their owner refuses their submits from then
on, at apply, so the refusal is ordered with every submit of that log); (2) the owner's
remembered keys of those shards, read after (1) committed there, imported into the new group
(KEYS_IMPORT takes only keys of shards moving to it); (3) the map with the new owners. Apply
takes a map only at the same epoch (the same map again: a re-run) or the next one, and a shard
changes owner only from a map that marked it moving to that group: no group can skip a step, so
at most one group takes a shard's submits at any time, and the new owner takes them only after
the old owner's keys arrived (a retried submit cannot become a second job).
"""

from __future__ import annotations

import bisect

from raftsched import limits, topology
from raftsched.errors import Code
from raftsched.state.commands import KeysImport, ShardMapSet
from raftsched.state.model import GroupIdentity, ShardMap, State
from raftsched.state.outcome import Applied, Rejected
from raftsched.state.results import KeysImported, ShardMapSetResult
from raftsched.state.retention import remember_key
from raftsched.state.rules import group_servers_problem


def current_map(state: State) -> ShardMap | None:
    """The map this log follows: the one written, else s mod groups (epoch 0); None for a
    deployment of one group that never grew."""
    if state.shard_map is not None:
        return state.shard_map
    if state.group is None:
        return None
    return implicit_map(state.group.groups)


def implicit_map(groups: int) -> ShardMap:
    return ShardMap(0, topology.implicit_owners(groups), schedule_groups=groups)


def shard_problem(state: State, shard: int) -> Rejected | None:
    """Why this group may not take a new job in `shard` now (None: it may): another group owns
    it (FAILED_PRECONDITION naming it), it is moving (UNAVAILABLE: retry), or this group joined
    and has not been given any shard yet (UNAVAILABLE). O(log moving): every submit asks."""
    if state.group is None:
        return None
    me, shard_map = state.group.group, state.shard_map
    if shard_map is None:  # no shard ever moved: the rule
        owner, epoch, moving_to = topology.group_of_shard(shard, state.group.groups), 0, None
    elif not shard_map.owners:
        return Rejected(Code.UNAVAILABLE, f"group {me} joined the deployment and owns no shard "
                        "until `raftsched admin groups add` gives it some: retry")
    else:
        owner, epoch = shard_map.owners[shard], shard_map.epoch
        moving_to = moving_target(shard_map, shard)
    if owner != me:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"shard {shard} is group {owner}'s (shard map epoch {epoch}); "
                        f"this is group {me}: send it there")
    if moving_to is not None:
        return Rejected(Code.UNAVAILABLE,
                        f"shard {shard} is moving from group {me} to group {moving_to} "
                        f"(shard map epoch {epoch}): retry")
    return None


def moving_target(shard_map: ShardMap, shard: int) -> int | None:
    """The group `shard` is moving to, or None (`moving` is in shard order: a binary search)."""
    at = bisect.bisect_left(shard_map.moving, shard, key=lambda move: move[0])
    if at < len(shard_map.moving) and shard_map.moving[at][0] == shard:
        return shard_map.moving[at][1]
    return None


def apply_shard_map_set(state: State, cmd: ShardMapSet) -> Applied[ShardMapSetResult] | Rejected:
    """Take the deployment's map at `cmd.epoch` (see the module docstring); a log of one group
    takes it as group 0; refused, changing nothing, when invalid or out of step."""
    me = state.group.group if state.group is not None else 0
    problem = map_problem(cmd, me)
    if problem:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    new = ShardMap(cmd.epoch, cmd.owners, cmd.moving, cmd.formers, cmd.schedule_groups)
    current = current_map(state)
    if current is not None and state.group is not None and cmd.groups < state.group.groups:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"groups: {cmd.groups}, fewer than this deployment's "
                        f"{state.group.groups} (groups are never removed)")
    if current is not None and current.epoch == cmd.epoch and current.owners:
        assert state.group is not None  # a map is held only with an identity
        if current == new and cmd.groups == state.group.groups:
            servers = cmd.servers or state.group.servers
            changed = servers != state.group.servers  # the same map: only servers may change
            _set_identity(state, me, cmd)
            return Applied(ShardMapSetResult(cmd.epoch, changed=changed))
        return Rejected(Code.FAILED_PRECONDITION,
                        f"shard map epoch {cmd.epoch} is already another map (or another count "
                        f"of groups) in group {me}")
    step = step_problem(current or implicit_map(1), new)
    if not step and current is not None and not current.owners and me in new.owners:
        step = ("a joining group's first shard map may only mark shards moving to it (their "
                "keys follow, then the next epoch hands them over), not give it any")
    if step:
        return Rejected(Code.FAILED_PRECONDITION, f"group {me}: {step}")
    state.shard_map = new
    _set_identity(state, me, cmd)
    return Applied(ShardMapSetResult(cmd.epoch, changed=True))


def _set_identity(state: State, me: int, cmd: ShardMapSet) -> None:
    servers = cmd.servers or (state.group.servers if state.group is not None else ())
    state.group = GroupIdentity(me, cmd.groups, limits.VIRTUAL_SHARDS, servers)


def map_problem(cmd: ShardMapSet, me: int) -> str:
    """Why a SHARD_MAP_SET is malformed for group `me` ("" when it is not)."""
    if not me < cmd.groups:
        return f"groups: {cmd.groups}; this is group {me}"
    if len(cmd.owners) != limits.VIRTUAL_SHARDS:
        return f"owners: {len(cmd.owners)} bytes; need one per shard ({limits.VIRTUAL_SHARDS})"
    if max(cmd.owners) >= cmd.groups:
        return f"owners: group {max(cmd.owners)} of a deployment of {cmd.groups}"
    if not 1 <= cmd.schedule_groups <= cmd.groups:
        return f"schedule_groups: {cmd.schedule_groups}; need 1 to groups ({cmd.groups})"
    shards = [shard for shard, _ in cmd.moving]
    if shards != sorted(set(shards)):
        return "moving: shards must be unique and in order"
    for shard, to in cmd.moving:
        if not to < cmd.groups or to == cmd.owners[shard]:
            return f"moving: shard {shard} to group {to}, which is not another group"
    formers = [shard for shard, _ in cmd.formers]
    if formers != sorted(set(formers)):
        return "formers: shards must be unique and in order"
    for shard, groups in cmd.formers:
        if not groups or max(groups) >= cmd.groups:
            return f"formers: shard {shard}: {list(groups)} are not groups of {cmd.groups}"
    return group_servers_problem(cmd.servers, cmd.groups)


def step_problem(current: ShardMap, new: ShardMap) -> str:
    """Why `new` may not follow `current` ("" when it may): only the next epoch (a group that
    joined takes its first map at any), and a shard changes owner only to the group the
    current map marked it moving to."""
    if not current.owners:
        return "" if new.epoch >= 1 else "a joining group's first shard map needs epoch >= 1"
    if new.epoch != current.epoch + 1:
        return (f"its shard map is at epoch {current.epoch}; epoch {new.epoch} would skip a "
                "step: run `raftsched admin groups add` again to finish the move")
    moving = dict(current.moving)
    for shard in range(limits.VIRTUAL_SHARDS):
        owner = new.owners[shard]
        if owner != current.owners[shard] and moving.get(shard) != owner:
            return (f"shard {shard} would move from group {current.owners[shard]} to group "
                    f"{owner} without being marked moving there first")
    for shard, to in new.moving:
        if moving.get(shard, to) != to:
            return f"shard {shard} was moving to group {moving[shard]}, not group {to}"
    return ""


def apply_keys_import(state: State, cmd: KeysImport) -> Applied[KeysImported] | Rejected:
    """Remember keys of shards moving to this group, with their creation time (they join the
    end of the expiry order, so they live at least as long as where they were made); keys held
    already stay. Refused as a whole,
    changing nothing, at another epoch or with a key of a shard not moving here."""
    shard_map = state.shard_map
    me = state.group.group if state.group is not None else 0
    if shard_map is None or shard_map.epoch != cmd.epoch:
        held = 0 if shard_map is None else shard_map.epoch
        return Rejected(Code.FAILED_PRECONDITION,
                        f"keys for shard map epoch {cmd.epoch}; group {me} is at epoch {held}")
    coming = {shard for shard, to in shard_map.moving if to == me}
    for index, (tenant, key, _job_id, _digest, _created_ms) in enumerate(cmd.records):
        shard = topology.shard_of_key(tenant, key)
        if shard not in coming:
            return Rejected(Code.FAILED_PRECONDITION,
                            f"records[{index}]: key {key!r} of tenant {tenant!r} is in shard "
                            f"{shard}, which is not moving to group {me}")
    imported = 0
    for tenant, key, job_id, digest, created_ms in cmd.records:
        if (tenant, key) in state.idempotency:
            continue
        remember_key(state, tenant, key, job_id, digest, created_ms)
        imported += 1
    return Applied(KeysImported(imported, len(cmd.records) - imported))
