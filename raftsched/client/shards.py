"""Adding a group to a running deployment: the shard moves of docs/scale-out.md §5, run by
`raftsched admin groups add` against every group (the rules are the state's:
`raftsched.state.shards`).

First the new group is given what must hold in every group (`copy_policy`: API tokens, tenant
policies, revoked certificates), then three steps, each written into every group, the new one
included:
1. the map at the next epoch with the shards that move marked moving (to the groups that hold
   fewer than their share: `topology.balancing_moves`); from then on their owner refuses their
   submits, which clients retry;
2. each old owner's remembered idempotency keys of those shards, read by its leader once (1)
   committed there, imported into the new owner;
3. the map at the epoch after, with the new owners (and the old ones as former owners, where
   readers look for the shards' older jobs).
Every step is idempotent and apply refuses one out of order, so a run that stopped (a group
without a quorum, a lost connection) is finished by running the command again: it reads each
group's map and goes on from the newest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

from raftsched import topology
from raftsched.api import raftsched_pb2 as pb
from raftsched.client.client import Client
from raftsched.errors import Code, RaftschedError

T = TypeVar("T")


@dataclass(frozen=True)
class MapView:
    """One group's shard map as its GetTopology answered."""

    group: int
    groups: int
    epoch: int
    owners: bytes
    """Explicit, or s mod groups at epoch 0; b"": a joining group told nothing yet."""
    moving: tuple[tuple[int, int], ...] = ()
    formers: tuple[tuple[int, tuple[int, ...]], ...] = ()
    schedule_groups: int = 1
    servers: tuple[tuple[str, ...], ...] = field(default=(), compare=False)

    @classmethod
    def of(cls, answer: Any) -> MapView:
        groups = int(answer.groups)
        owners = bytes(answer.owners)
        if not owners and not answer.joining:
            owners = topology.implicit_owners(groups)
        return cls(int(answer.group), groups, int(answer.map_epoch), owners,
                   tuple((int(m.shard), int(m.to)) for m in answer.moving),
                   tuple((int(f.shard), tuple(int(g) for g in f.groups))
                         for f in answer.formers),
                   int(answer.schedule_groups) or groups,
                   tuple(tuple(m.servers) for m in answer.members))

    def request(self, servers: Sequence[Sequence[str]]) -> Any:
        return pb.SetShardMapRequest(
            epoch=self.epoch, groups=self.groups, owners=self.owners,
            moving=[pb.TopologyMove(shard=s, to=to) for s, to in self.moving],
            formers=[pb.TopologyFormers(shard=s, groups=g) for s, g in self.formers],
            schedule_groups=self.schedule_groups,
            servers=[pb.TopologyGroup(group=i, servers=list(g)) for i, g in enumerate(servers)])


@dataclass
class MoveReport:
    """What a run did: the epoch every group ends at, shards moved, keys handed over, and what
    of group 0's policy the new group was given first (`copy_policy`)."""

    groups: int = 0
    epoch: int = 0
    moved: int = 0
    keys_imported: int = 0
    keys_kept: int = 0
    steps: list[str] = field(default_factory=list)
    policy: dict[str, int] = field(default_factory=dict)
    """tokens, tokens_revoked, tenants, certificates: copied into the new group."""
    skipped: list[str] = field(default_factory=list)
    """What could not be copied, and why."""


def copy_policy(source: Client, target: Client, report: MoveReport) -> None:
    """Give `target` (a group joining the deployment) what must hold in every group, as
    `source` (group 0) holds it: the same API tokens (by id and digest; a token `target` holds
    that `source` does not, such as a bootstrap token revoked since, is revoked there), the
    tenants' policies and the revoked certificates. Idempotent: run again, it changes nothing."""
    tokens = source.list_tokens(with_digests=True).tokens
    known = {token.token_id for token in tokens}
    copied = revoked = 0
    for token in tokens:
        if token.acts_as != token.role:  # an old one-tenant operator token: no longer made
            report.skipped.append(f"token {token.token_id}: role {token.role} of one tenant "
                                  "cannot be created any more (revoke it, or make a new one)")
            continue
        target.create_token(token.tenant, token.role, token.note, token_id=token.token_id,
                            digest=token.digest)
        copied += 1
    tenants = [t for t in source.list_tenants().tenants if t.configured]
    for tenant in tenants:
        target.set_tenant(tenant.tenant, weight=tenant.weight, max_queued=tenant.max_queued,
                          max_running=tenant.max_running)
    certificates = source.list_revoked_certificates().certificates
    for cert in certificates:
        target.revoke_certificate(cert.fingerprint, cert.subject, cert.reason)
    for token in target.list_tokens().tokens:  # last: it may be the one `target` is called with
        if token.token_id not in known:
            target.revoke_token(token.token_id)
            revoked += 1
    report.policy = {"tokens": copied, "tokens_revoked": revoked, "tenants": len(tenants),
                     "certificates": len(certificates)}


def marked(current: MapView, groups: int) -> MapView:
    """Step 1 after `current` (a map with nothing moving): the balancing moves marked."""
    moves = topology.balancing_moves(current.owners, groups)
    return replace(current, groups=groups, epoch=current.epoch + 1, moving=tuple(moves))


def handed_over(step1: MapView) -> MapView:
    """Step 3 after `step1`: the marked shards owned by their new groups, their old owners
    first among their former owners."""
    owners = bytearray(step1.owners)
    formers = dict(step1.formers)
    for shard, to in step1.moving:
        formers[shard] = tuple(dict.fromkeys([owners[shard], *formers.get(shard, ())]))
        owners[shard] = to
    return replace(step1, epoch=step1.epoch + 1, owners=bytes(owners), moving=(),
                   formers=tuple(sorted(formers.items())))


def add_group(clients: Sequence[Client], servers: Sequence[Sequence[str]],
              say: Callable[[str], None], *, allow_no_clusters: bool = False,
              joining: Client | None = None) -> MoveReport:
    """Move shards so that the last of `clients` (a group started with `replica --joining`)
    holds its share; `servers` are every group's gRPC addresses, in group order. Goes on from
    wherever a run that stopped left the maps. A new move is refused while a group that would
    take shards has no READY compute cluster (its new jobs would be refused as unschedulable),
    unless `allow_no_clusters`. `joining`: the new group's client for `copy_policy`, when the
    caller's token is not yet one it knows (its bootstrap token's client)."""
    views = [_view(client, index) for index, client in enumerate(clients)]
    groups = len(clients)
    told = [v for v in views if v.owners]
    newest = max(told, key=lambda v: v.epoch)
    report = MoveReport(groups=groups)
    try:
        copy_policy(clients[0], joining or clients[-1], report)
    except RaftschedError as error:
        raise RaftschedError(error.code, f"giving group {groups - 1} group 0's tokens, tenants "
                             f"and revoked certificates: {error.message} (run the command "
                             "again)") from None
    say(f"group {groups - 1} holds group 0's {report.policy['tokens']} tokens, "
        f"{report.policy['tenants']} tenant policies and {report.policy['certificates']} "
        "revoked certificates" + (f" ({report.policy['tokens_revoked']} token(s) revoked "
                                  "there that group 0 no longer holds)"
                                  if report.policy["tokens_revoked"] else ""))
    if newest.moving:
        step1 = newest
    elif all(v.epoch == newest.epoch for v in views) and newest.groups == groups \
            and not topology.balancing_moves(newest.owners, groups):
        report.epoch = newest.epoch
        say(f"nothing to do: every group is at shard map epoch {newest.epoch}, and the "
            f"{groups} groups hold even shares")
        return report
    elif newest.groups == groups and any(v.epoch < newest.epoch for v in views):
        say(f"finishing an earlier run: shard map epoch {newest.epoch} into every group")
        _write(clients, views, newest, servers, report)
        report.epoch = newest.epoch
        return report
    else:
        step1 = marked(newest, groups)
        if not allow_no_clusters:
            _require_clusters(clients, {to for _, to in step1.moving})
    report.moved = len(step1.moving)
    say(f"step 1/3: {len(step1.moving)} shards marked moving (epoch {step1.epoch}); their "
        "submits wait until step 3")
    _write(clients, views, step1, servers, report)
    say("step 2/3: their idempotency keys handed to their new groups")
    _hand_keys(clients, step1, report)
    step3 = handed_over(step1)
    say(f"step 3/3: the new owners take them (epoch {step3.epoch})")
    _write(clients, views, step3, servers, report, first=sorted({to for _, to in step1.moving}))
    report.epoch = step3.epoch
    return report


def _require_clusters(clients: Sequence[Client], groups: set[int]) -> None:
    for group in sorted(groups):
        status = clients[group].cluster_status()
        if not any(cluster.status == "READY" for cluster in status.clusters):
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                f"group {group} has no READY compute cluster: the new jobs of the shards it "
                "would take would be refused as unschedulable. Restart the agents with "
                "--servers listing every group's replicas (groups separated by ';') first, or "
                "give --allow-no-clusters")


def _view(client: Client, index: int) -> MapView:
    try:
        answer = client.topology()
    except RaftschedError as error:
        raise RaftschedError(error.code, f"group {index}: {error.message}") from None
    view = MapView.of(answer)
    if view.group != index:
        raise RaftschedError(Code.FAILED_PRECONDITION,
                             f"the servers given as group {index} say they are group "
                             f"{view.group}: list the groups in order, the new one last")
    if not answer.recorded:
        raise RaftschedError(Code.UNAVAILABLE, f"group {index} has not recorded which group it "
                             "is yet (its first leader does that): retry")
    return view


def _write(clients: Sequence[Client], views: Sequence[MapView], target: MapView,
           servers: Sequence[Sequence[str]], report: MoveReport,
           first: Sequence[int] = ()) -> None:
    order = [*first, *(g for g in range(len(clients)) if g not in first)]
    for group in order:
        if views[group].epoch > target.epoch and views[group].owners:
            continue  # already past it (an earlier run went further there)
        reply = _in_group(group, clients[group].set_shard_map, target.request(servers))
        report.steps.append(f"group {group}: epoch {target.epoch}"
                            + ("" if reply.changed else " (already)"))


def _hand_keys(clients: Sequence[Client], step1: MapView, report: MoveReport) -> None:
    to_of = dict(step1.moving)
    sources: dict[int, list[int]] = {}
    for shard, _ in step1.moving:
        sources.setdefault(step1.owners[shard], []).append(shard)
    for source, shards in sorted(sources.items()):
        pages = _in_group(source, clients[source].export_shard_keys, step1.epoch, shards)
        for page in pages:
            by_target: dict[int, list[Any]] = {}
            for key in page.keys:
                target = to_of[topology.shard_of_key(key.tenant, key.key)]
                by_target.setdefault(target, []).append(key)
            for target, keys in sorted(by_target.items()):
                reply = _in_group(target, clients[target].import_shard_keys,
                                  pb.ShardKeys(epoch=step1.epoch, keys=keys))
                report.keys_imported += reply.imported
                report.keys_kept += reply.kept


def _in_group(group: int, call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` on group `group`; its error names the group and says a re-run finishes."""
    try:
        return call(*args)
    except RaftschedError as error:
        raise RaftschedError(error.code, f"group {group}: {error.message} (run the command "
                             "again to finish the move)") from None
