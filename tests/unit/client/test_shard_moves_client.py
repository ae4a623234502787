"""Adding a group to a running deployment from the client's side (`raftsched.client.shards.
add_group`, docs/scale-out.md §5), and a `GroupedClient` routing by a shard map that moved.

Each group's `Client` is a fake, but not a loose one: it holds a real `State` and applies what
it is sent with the state machine (`fsm.apply_command` of the replica's own `shard_moves`
commands), answers GetTopology as the service does (`shard_moves.add_map`), exports keys by
`shard_moves.keys_of`/`key_pages` and refuses a submit by `shard_moves.new_job_shard`. So a
step written out of order, a key exported before its shard is marked moving or imported into
the wrong group fails here as it would on a replica."""

from __future__ import annotations

import copy
import itertools
import zlib
from collections.abc import Sequence
from typing import Any, cast

import pytest

from raftsched import limits, topology
from raftsched.api import raftsched_pb2 as pb
from raftsched.client.client import Client, Submitted
from raftsched.client.groups import GroupedClient
from raftsched.client.shards import MapView, MoveReport, add_group, handed_over, marked
from raftsched.errors import Code, RaftschedError
from raftsched.replica import shard_moves
from raftsched.spec.job import parse_spec_text
from raftsched.state.commands import GroupSet
from raftsched.state.fsm import apply_command
from raftsched.state.model import GroupIdentity, IdempotencyRecord, ShardMap, State
from raftsched.state.outcome import Rejected

SHARDS = limits.VIRTUAL_SHARDS
NOW_MS = 1_700_000_000_000
TENANT = "alpha"
SPEC = f"name: etl\ntenant: {TENANT}\ntasks:\n  - {{id: a, command: [mock]}}\n"


def implicit(groups: int) -> bytes:
    return bytes(s % groups for s in range(SHARDS))


def topology_answer(state: State, responder: str) -> Any:
    """GetTopology as `ReplicaService.GetTopology` answers it from a group's state."""
    answer = pb.Topology()
    shard_moves.add_map(answer, state)
    identity = state.group or GroupIdentity(0, 1, SHARDS)
    answer.MergeFrom(pb.Topology(group=identity.group, groups=identity.groups,
                                 shards=identity.shards, responder=responder, recorded=True))
    if not answer.schedule_groups:
        answer.schedule_groups = identity.groups
    if len(identity.servers) == identity.groups:
        answer.members.extend(pb.TopologyGroup(group=i, servers=list(servers))
                              for i, servers in enumerate(identity.servers))
    return answer


def applied(state: State, command: Any) -> Any:
    """The result of applying `command`, or the refusal a replica would answer."""
    outcome = apply_command(state, command)
    if isinstance(outcome, Rejected):
        raise RaftschedError(outcome.code, outcome.reason)
    return outcome.result


# -- add_group ---------------------------------------------------------------------------------


class Outage:
    """The n-th SetShardMap of a run (counted over every group) fails UNAVAILABLE: before its
    group applied it (no quorum), or after (the answer was lost)."""

    def __init__(self, at: int, after_commit: bool = False) -> None:
        self.at, self.after_commit = at, after_commit
        self.seen = 0

    def strikes(self) -> bool:
        self.seen += 1
        return self.seen == self.at


class ShardGroup:
    """One scheduler group as `add_group` reaches it through its `Client`."""

    def __init__(self, group: int, groups: int, log: list[tuple[int, str, int]], *,
                 joining: bool = False, never_grew: bool = False) -> None:
        self.group = group
        self.state = State()
        self.log = log
        """Every group's calls in order: (group, call, epoch)."""
        self.outage: Outage | None = None
        self.import_outage: Outage | None = None
        self.clusters = ["READY"]
        """The statuses of the compute clusters that serve this group."""
        if not never_grew:  # a deployment of one group never records a group
            applied(self.state, GroupSet(group, groups, SHARDS, NOW_MS, joining=joining))
        self.tokens: dict[str, Any] = {}
        self.tenants: dict[str, Any] = {}
        self.certificates: dict[str, Any] = {}
        """What must hold in every group (`copy_policy`; its calls are not in `log`)."""

    def list_tokens(self, with_digests: bool = False) -> Any:
        tokens = [pb.TokenInfo(**{**token, "digest": token["digest"] if with_digests else ""})
                  for token in self.tokens.values()]
        return pb.ListTokensResponse(tokens=tokens)

    def create_token(self, tenant: str, role: str, note: str = "", *, token_id: str = "",
                     digest: str = "") -> Any:
        held = self.tokens.get(token_id)
        if held is not None and held["digest"] != digest:
            raise RaftschedError(Code.ALREADY_EXISTS, f"token {token_id} has another digest")
        self.tokens[token_id] = {"token_id": token_id, "tenant": tenant, "role": role,
                                 "acts_as": role, "note": note, "digest": digest}
        return pb.CreateTokenResponse(token_id=token_id)

    def revoke_token(self, token_id: str) -> Any:
        self.tokens.pop(token_id, None)
        return pb.RevokeTokenResponse()

    def list_tenants(self) -> Any:
        return pb.ListTenantsResponse(tenants=list(self.tenants.values()))

    def set_tenant(self, tenant: str, *, weight: int | None = None,
                   max_queued: int | None = None, max_running: int | None = None) -> Any:
        self.tenants[tenant] = pb.TenantInfo(tenant=tenant, weight=weight or 1,
                                             max_queued=max_queued or 0,
                                             max_running=max_running or 0, configured=True)
        return self.tenants[tenant]

    def list_revoked_certificates(self) -> Any:
        return pb.ListRevokedCertificatesResponse(certificates=list(self.certificates.values()))

    def revoke_certificate(self, fingerprint: str, subject: str = "", reason: str = "") -> Any:
        self.certificates.setdefault(fingerprint, pb.RevokedCertificate(
            fingerprint=fingerprint, subject=subject, reason=reason))
        return pb.RevokeCertificateResponse(fingerprint=fingerprint)

    def topology(self) -> Any:
        self.log.append((self.group, "topology", 0))
        return topology_answer(self.state, f"10.0.{self.group}.1:7100")

    def cluster_status(self, server: str | None = None, *, include_digest: bool = False) -> Any:
        self.log.append((self.group, "cluster_status", 0))
        return pb.ClusterStatusResponse(clusters=[
            pb.ComputeCluster(cluster_id=f"c{self.group}-{n}", status=status)
            for n, status in enumerate(self.clusters)])

    def set_shard_map(self, request: Any) -> Any:
        self.log.append((self.group, "set_shard_map", request.epoch))
        command = shard_moves.map_command(request, NOW_MS)
        if self.outage is not None and self.outage.strikes():
            if self.outage.after_commit:
                applied(self.state, command)
            raise RaftschedError(Code.UNAVAILABLE, "no leader answers (lost quorum)")
        result = applied(self.state, command)
        return pb.SetShardMapResponse(group=self.group, epoch=result.epoch,
                                      changed=result.changed)

    def export_shard_keys(self, epoch: int, shards: Sequence[int]) -> list[Any]:
        self.log.append((self.group, "export", epoch))
        items = shard_moves.keys_of(self.state, epoch, set(shards))
        return list(shard_moves.key_pages(items, set(shards), epoch))

    def import_shard_keys(self, page: Any) -> Any:
        self.log.append((self.group, "import", page.epoch))
        command = shard_moves.import_command(page, NOW_MS)
        if self.import_outage is not None and self.import_outage.strikes():
            raise RaftschedError(Code.UNAVAILABLE, "no leader answers (lost quorum)")
        result = applied(self.state, command)
        return pb.ImportShardKeysResponse(imported=result.imported, kept=result.kept)


def servers_of(groups: int) -> list[list[str]]:
    return [[f"10.0.{g}.{r}:7100" for r in (1, 2, 3)] for g in range(groups)]


def deployment(old: int) -> list[ShardGroup]:
    """`old` groups that never moved a shard, and a group started with --joining after them."""
    log: list[tuple[int, str, int]] = []
    groups = [ShardGroup(g, old, log, never_grew=old == 1) for g in range(old)]
    return [*groups, ShardGroup(old, old + 1, log, joining=True)]


def seed_keys(groups: Sequence[ShardGroup], count: int) -> dict[tuple[str, str],
                                                                 IdempotencyRecord]:
    """`count` remembered idempotency keys, each in the old group that owns its shard."""
    made = {}
    for n in range(count):
        tenant, key = f"t{n % 3}", f"key-{n}"
        shard = topology.shard_of_key(tenant, key)
        owner = shard % (len(groups) - 1)  # no shard has moved yet: the rule
        record = IdempotencyRecord(f"job-{topology.job_id_tail(shard, n)}",
                                   bytes([n % 251]) * 32, NOW_MS - 10_000 + n)
        groups[owner].state.idempotency[(tenant, key)] = record
        groups[owner].state.idempotency_order.append((record.created_ms, tenant, key))
        made[(tenant, key)] = record
    return made


def run(groups: Sequence[ShardGroup], said: list[str] | None = None) -> MoveReport:
    """`add_group` over `groups`; `said` gets its lines but the policy's (checked apart)."""
    said = [] if said is None else said
    policy = f"group {len(groups) - 1} holds group 0's "

    def say(line: str) -> None:
        if not line.startswith(policy):
            said.append(line)
    return add_group(cast(list[Client], list(groups)), servers_of(len(groups)), say)


def expected_map(before: bytes, groups: int, epoch: int,
                 formers: dict[int, tuple[int, ...]] | None = None,
                 schedule_groups: int = 0) -> ShardMap:
    """The map every group should hold after the move from `before` to `groups`."""
    moves = topology.balancing_moves(before, groups)
    owners = bytearray(before)
    old_formers = dict(formers or {})
    for shard, to in moves:
        old_formers[shard] = tuple(dict.fromkeys([owners[shard],
                                                  *old_formers.get(shard, ())]))
        owners[shard] = to
    return ShardMap(epoch, bytes(owners), (), tuple(sorted(old_formers.items())),
                    schedule_groups or groups - 1)


def test_a_third_group_takes_its_share_and_the_keys_of_its_shards() -> None:
    groups = deployment(2)
    keys = seed_keys(groups, 600)
    moves = topology.balancing_moves(implicit(2), 3)
    said: list[str] = []

    report = run(groups, said)

    final = expected_map(implicit(2), 3, 2)
    for group in groups:
        assert group.state.shard_map == final
        assert group.state.group == GroupIdentity(group.group, 3, SHARDS,
                                                  tuple(map(tuple, servers_of(3))))
    moved = {shard for shard, _ in moves}
    assert all(to == 2 for _, to in moves)
    coming = {k: r for k, r in keys.items() if topology.shard_of_key(*k) in moved}
    assert 100 < len(coming) < 500  # some, and not all: "only those" means something
    assert groups[2].state.idempotency == coming
    for group in groups[:2]:  # the old owners keep theirs (their readers' retries need them)
        assert set(group.state.idempotency) == {
            k for k in keys if implicit(2)[topology.shard_of_key(*k)] == group.group}
    assert (report.groups, report.epoch, report.moved) == (3, 2, len(moves))
    assert (report.keys_imported, report.keys_kept) == (len(coming), 0)
    assert [line.split(":")[0] for line in said] == ["step 1/3", "step 2/3", "step 3/3"]
    assert "epoch 1" in said[0] and "epoch 2" in said[2] and str(len(moves)) in said[0]
    writes = [(g, epoch) for g, call, epoch in groups[0].log if call == "set_shard_map"]
    # step 3 reaches the new owner first: an old owner that refuses a submit as the new
    # owner's never sends a client to a group that does not take it yet
    assert writes == [(0, 1), (1, 1), (2, 1), (2, 2), (0, 2), (1, 2)]
    handing = [(g, call) for g, call, _ in groups[0].log if call in ("export", "import")]
    assert {g for g, call in handing if call == "export"} == {0, 1}
    assert {g for g, call in handing if call == "import"} == {2}
    assert report.steps == ["group 0: epoch 1", "group 1: epoch 1", "group 2: epoch 1",
                            "group 2: epoch 2", "group 0: epoch 2", "group 1: epoch 2"]


def test_a_group_that_never_grew_grows_to_two_then_three(monkeypatch: pytest.MonkeyPatch,
                                                          ) -> None:
    monkeypatch.setattr(limits, "MAX_KEYS_PER_IMPORT", 40)  # keys over several pages
    first = deployment(1)
    keys = seed_keys(first, 300)
    report = run(first)
    after_two = expected_map(implicit(1), 2, 2, schedule_groups=1)
    assert [g.state.shard_map for g in first] == [after_two] * 2
    assert report.keys_imported == sum(1 for k in keys
                                       if after_two.owners[topology.shard_of_key(*k)] == 1)
    imports = sum(1 for _, call, _ in first[0].log if call == "import")
    assert imports >= report.keys_imported // 40

    third = ShardGroup(2, 3, first[0].log, joining=True)
    groups = [*first, third]
    report = run(groups)
    final = expected_map(after_two.owners, 3, 4, dict(after_two.formers), schedule_groups=1)
    assert [g.state.shard_map for g in groups] == [final] * 3
    assert report.epoch == 4
    twice = {s: gs for s, gs in final.formers if len(gs) == 2}
    assert twice and all(final.owners[s] == 2 and gs == (1, 0) for s, gs in twice.items())
    assert third.state.idempotency == {
        k: r for k, r in keys.items() if final.owners[topology.shard_of_key(*k)] == 2}
    # schedules stay where the one group put them: every one in group 0
    routes = topology.Routes.of(topology_answer(third.state, "x:1"))
    assert routes.epoch == 4 and routes.schedule_group("nightly") == 0


def uninterrupted() -> list[ShardGroup]:
    groups = deployment(2)
    seed_keys(groups, 400)
    run(groups)
    return groups


def step3_applied(at: int, after_commit: bool) -> int:
    """How many groups took the epoch-2 map before (and at) the failing write."""
    return 0 if at <= 3 else at - 4 + after_commit


@pytest.mark.parametrize("after_commit", [False, True], ids=["refused", "answer-lost"])
@pytest.mark.parametrize("at", range(1, 7))
def test_a_run_that_stopped_is_finished_by_running_it_again(at: int, after_commit: bool) -> None:
    groups = deployment(2)
    seed_keys(groups, 400)
    outage = Outage(at, after_commit)
    for group in groups:
        group.outage = outage

    with pytest.raises(RaftschedError) as stopped:
        run(groups)

    # writes go to groups 0, 1, 2 in step 1, then the new owner (2) first in step 3
    failed_group = [0, 1, 2, 2, 0, 1][at - 1]
    assert stopped.value.code == Code.UNAVAILABLE
    assert stopped.value.message.startswith(f"group {failed_group}: no leader answers")
    assert "run the command again" in stopped.value.message
    epochs = [g.state.shard_map.epoch if g.state.shard_map else 0 for g in groups]
    assert max(epochs) - min(epochs) <= 2

    said: list[str] = []
    report = run(groups, said)  # the outage is over (the n-th call was the only one)

    reference = uninterrupted()
    for group, done in zip(groups, reference, strict=True):
        assert group.state.shard_map == done.state.shard_map
        assert group.state.group == done.state.group
        assert group.state.idempotency == done.state.idempotency
    assert report.epoch == 2
    finished = step3_applied(at, after_commit)
    if finished == 3:
        assert said == [said[0]] and said[0].startswith("nothing to do")
    elif finished:
        assert said == [said[0]] and said[0].startswith("finishing an earlier run")
    else:
        assert [line[:8] for line in said] == ["step 1/3", "step 2/3", "step 3/3"]
        assert report.moved == len(topology.balancing_moves(implicit(2), 3))


def test_keys_handed_over_in_part_are_kept_and_the_rest_imported_again(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "MAX_KEYS_PER_IMPORT", 20)
    groups = deployment(2)
    keys = seed_keys(groups, 400)
    groups[2].import_outage = Outage(4)
    with pytest.raises(RaftschedError) as stopped:
        run(groups)
    assert stopped.value.message.startswith("group 2: ")
    assert "run the command again" in stopped.value.message
    assert all(g.state.shard_map is not None and g.state.shard_map.epoch == 1 for g in groups)
    assert len(groups[2].state.idempotency) == 3 * 20
    report = run(groups)
    final = expected_map(implicit(2), 3, 2)
    assert [g.state.shard_map for g in groups] == [final] * 3
    coming = {k: r for k, r in keys.items() if final.owners[topology.shard_of_key(*k)] == 2}
    assert groups[2].state.idempotency == coming
    assert (report.keys_kept, report.keys_imported) == (3 * 20, len(coming) - 3 * 20)


def test_a_run_after_the_move_is_done_changes_nothing() -> None:
    groups = deployment(2)
    seed_keys(groups, 200)
    run(groups)
    before = [copy.deepcopy((g.state.shard_map, g.state.group, g.state.idempotency))
              for g in groups]
    calls = len(groups[0].log)
    said: list[str] = []
    report = run(groups, said)
    assert said == [said[0]] and "nothing to do" in said[0] and "epoch 2" in said[0]
    assert (report.epoch, report.moved, report.keys_imported, report.steps) == (2, 0, 0, [])
    assert {call for _, call, _ in groups[0].log[calls:]} == {"topology"}
    assert [(g.state.shard_map, g.state.group, g.state.idempotency) for g in groups] == before


def test_no_move_starts_while_the_new_group_has_no_ready_cluster() -> None:
    groups = deployment(2)
    groups[2].clusters = ["SUSPECT", "DRAINING"]
    with pytest.raises(RaftschedError) as refused:
        run(groups)
    assert refused.value.code == Code.FAILED_PRECONDITION
    assert "group 2 has no READY compute cluster" in refused.value.message
    assert all(call in ("topology", "cluster_status") for _, call, _ in groups[0].log)
    assert all(g.state.shard_map is None for g in groups[:2])
    report = add_group(cast(list[Client], groups), servers_of(3), lambda line: None,
                       allow_no_clusters=True)
    assert report.epoch == 2
    assert [g.state.shard_map for g in groups] == [expected_map(implicit(2), 3, 2)] * 3


def test_groups_listed_out_of_order_are_refused_before_anything_is_written() -> None:
    groups = deployment(2)
    with pytest.raises(RaftschedError) as refused:
        run([groups[1], groups[0], groups[2]])
    assert refused.value.code == Code.FAILED_PRECONDITION
    assert "group 0 say they are group 1" in refused.value.message
    assert {call for _, call, _ in groups[0].log} == {"topology"}


# -- GroupedClient over a map that moved -------------------------------------------------------


def as_map(view: MapView) -> ShardMap:
    return ShardMap(view.epoch, view.owners, view.moving, view.formers, view.schedule_groups)


def as_routes(view: MapView) -> topology.Routes:
    return topology.Routes(view.groups, view.owners, dict(view.formers), view.schedule_groups,
                           view.epoch)


STEP1 = marked(MapView(0, 2, 0, implicit(2), schedule_groups=2), 3)
STEP3 = handed_over(STEP1)
FROM_0 = sorted(s for s, to in STEP1.moving if implicit(2)[s] == 0 and to == 2)
STAYS_1 = next(s for s in range(SHARDS) if STEP3.owners[s] == 1 and implicit(2)[s] == 1)


def key_in(shards: Sequence[int]) -> str:
    wanted = set(shards)
    return next(key for key in (f"key-{n}" for n in itertools.count())
                if topology.shard_of_key(TENANT, key) in wanted)


class RoutedGroup:
    """One group of a deployment of three that took `shard_map`; its jobs by id."""

    def __init__(self, group: int, shard_map: ShardMap, log: list[tuple[int, str]]) -> None:
        self.group = group
        self.log = log
        """Every group's calls in order: (group, call)."""
        self.state = State()
        self.state.group = GroupIdentity(group, 3, SHARDS)
        self.state.shard_map = shard_map
        self.jobs: dict[str, pb.Job] = {}
        self.calls: list[tuple[str, Any]] = []
        self.down = False

    def topology(self) -> Any:
        self.calls.append(("topology", None))
        self.log.append((self.group, "topology"))
        if self.down:
            raise RaftschedError(Code.UNAVAILABLE, "no replica answers")
        return topology_answer(self.state, f"10.0.{self.group}.1:7100")

    def submit_spec(self, spec: Any, key: str | None = None, params: Any = None) -> Submitted:
        self.calls.append(("submit", key))
        self.log.append((self.group, "submit"))
        assert key is not None
        shard = shard_moves.new_job_shard(self.state, spec.tenant, key, len(self.jobs))
        job_id = f"{spec.name}-{topology.job_id_tail(shard, 7 + len(self.jobs))}"
        self.jobs[job_id] = pb.Job(job_id=job_id)
        return Submitted(job_id, True, key)

    def get_job(self, job_id: str) -> Any:
        self.calls.append(("get_job", job_id))
        self.log.append((self.group, "get_job"))
        if self.down:
            raise RaftschedError(Code.UNAVAILABLE, "no leader")
        if job_id not in self.jobs:
            raise RaftschedError(Code.NOT_FOUND, f"no job {job_id}")
        return self.jobs[job_id]

    def get_schedule(self, schedule_id: str) -> Any:
        self.calls.append(("get_schedule", schedule_id))
        return schedule_id


def moved_deployment(held: ShardMap | None = None) -> list[RoutedGroup]:
    log: list[tuple[int, str]] = []
    return [RoutedGroup(g, held or as_map(STEP3), log) for g in range(3)]


def grouped(fakes: Sequence[RoutedGroup], routes: topology.Routes | None) -> GroupedClient:
    return GroupedClient(cast(list[Client], list(fakes)), routes)


def asked(fakes: Sequence[RoutedGroup]) -> list[tuple[int, str]]:
    """What each group was asked, in the order asked."""
    return list(fakes[0].log)


def test_a_submit_refused_by_the_old_owner_is_sent_once_to_the_new_one() -> None:
    fakes = moved_deployment()
    client = grouped(fakes, as_routes(STEP1))  # read while the shards were marked moving
    key = key_in(FROM_0)
    spec = parse_spec_text(SPEC)

    answer = client.submit_spec(spec, key)

    assert fakes[0].calls == [("submit", key), ("topology", None)]
    assert fakes[2].calls == [("submit", key)]
    assert not fakes[1].calls
    assert answer.job_id in fakes[2].jobs and not fakes[0].jobs
    assert topology.shard_of_job_id(answer.job_id) == topology.shard_of_key(TENANT, key)
    assert client.routes.epoch == 2
    # the map it learned sends the next one straight there
    client.submit_spec(spec, key_in(FROM_0[1:]))
    assert [what for what, _ in fakes[0].calls] == ["submit", "topology"]
    assert len(fakes[2].jobs) == 2


def test_a_client_without_a_map_asks_the_first_group_for_it() -> None:
    fakes = moved_deployment()
    fakes[0].down = True
    client = grouped(fakes, None)
    key = key_in(FROM_0)
    client.submit_spec(parse_spec_text(SPEC), key)
    assert asked(fakes) == [(0, "topology"), (1, "topology"), (2, "submit")]
    assert client.routes.epoch == 2


def test_a_refusal_at_the_map_the_client_holds_is_raised_as_it_is() -> None:
    fakes = moved_deployment()
    wrong = bytearray(STEP3.owners)
    shard = FROM_0[0]
    wrong[shard] = 1  # this client's map is the same epoch, but it sends the shard to group 1
    client = grouped(fakes, topology.Routes(3, bytes(wrong), dict(STEP3.formers), 2, 2))
    key = key_in([shard])
    with pytest.raises(RaftschedError) as refused:
        client.submit_spec(parse_spec_text(SPEC), key)
    assert refused.value.code == Code.FAILED_PRECONDITION
    assert f"shard {shard} is group 2's (shard map epoch 2); this is group 1: send it there" \
        in refused.value.message
    assert asked(fakes) == [(1, "submit"), (1, "topology")]


def test_a_second_refusal_after_rerouting_is_raised_without_a_third_try() -> None:
    confused = bytearray(STEP3.owners)
    shard = FROM_0[0]
    confused[shard] = 1
    fakes = moved_deployment()
    # group 2 holds another map at epoch 2 (it says the shard is group 1's)
    fakes[2].state.shard_map = ShardMap(2, bytes(confused), (), STEP3.formers, 2)
    client = grouped(fakes, as_routes(STEP1))
    with pytest.raises(RaftschedError) as refused:
        client.submit_spec(parse_spec_text(SPEC), key_in([shard]))
    assert refused.value.code == Code.FAILED_PRECONDITION
    assert f"shard {shard} is group 1's (shard map epoch 2); this is group 2: send it there" \
        in refused.value.message
    assert asked(fakes) == [(0, "submit"), (0, "topology"), (2, "submit")]


def test_a_shard_still_moving_is_refused_unavailable_and_not_rerouted() -> None:
    fakes = moved_deployment(as_map(STEP1))
    client = grouped(fakes, as_routes(STEP1))
    with pytest.raises(RaftschedError) as waiting:
        client.submit_spec(parse_spec_text(SPEC), key_in(FROM_0))
    assert waiting.value.code == Code.UNAVAILABLE
    assert "is moving from group 0 to group 2" in waiting.value.message
    assert asked(fakes) == [(0, "submit")]


def test_a_job_of_a_moved_shard_is_read_from_its_new_owner_then_its_former_one() -> None:
    fakes = moved_deployment()
    shard = FROM_0[0]
    older = f"etl-{topology.job_id_tail(shard, 11)}"  # submitted before the move, in group 0
    newer = f"etl-{topology.job_id_tail(shard, 12)}"  # submitted after it, in group 2
    stayed = f"etl-{topology.job_id_tail(STAYS_1, 13)}"
    fakes[0].jobs[older] = pb.Job(job_id=older, name="older")
    fakes[2].jobs[newer] = pb.Job(job_id=newer, name="newer")
    fakes[1].jobs[stayed] = pb.Job(job_id=stayed)
    client = grouped(fakes, as_routes(STEP3))

    assert client.get_job(older).name == "older"
    assert asked(fakes) == [(2, "get_job"), (0, "get_job")]
    assert client.group_of_job(older) == 0
    client.get_job(older)  # remembered: straight to the group that knew it
    assert asked(fakes)[2:] == [(0, "get_job")]

    fakes[0].log.clear()
    assert client.get_job(newer).name == "newer"
    assert client.get_job(stayed).job_id == stayed
    assert asked(fakes) == [(2, "get_job"), (1, "get_job")]  # the new owner knew it

    fakes[0].log.clear()
    nowhere = f"etl-{topology.job_id_tail(shard, 99)}"
    with pytest.raises(RaftschedError) as missing:
        client.get_job(nowhere)
    assert missing.value.code == Code.NOT_FOUND
    assert missing.value.message.startswith("group 0: ")
    assert asked(fakes) == [(2, "get_job"), (0, "get_job")]


def test_a_new_owner_that_does_not_answer_is_not_taken_for_not_knowing_the_job() -> None:
    fakes = moved_deployment()
    older = f"etl-{topology.job_id_tail(FROM_0[0], 11)}"
    fakes[0].jobs[older] = pb.Job(job_id=older)
    fakes[2].down = True
    client = grouped(fakes, as_routes(STEP3))
    with pytest.raises(RaftschedError) as down:
        client.get_job(older)
    assert down.value.code == Code.UNAVAILABLE and down.value.message.startswith("group 2: ")
    assert asked(fakes) == [(2, "get_job")]


def test_schedules_stay_in_the_groups_of_the_first_count() -> None:
    fakes = moved_deployment()
    client = grouped(fakes, as_routes(STEP3))
    ids = [f"nightly-{n}" for n in range(40)]
    for schedule_id in ids:
        client.get_schedule(schedule_id)
    where = {schedule_id: f.group for f in fakes for what, schedule_id in f.calls
             if what == "get_schedule"}
    assert where == {i: zlib.crc32(i.encode()) % 2 for i in ids}
    assert any(zlib.crc32(i.encode()) % 3 == 2 for i in ids)  # a rule of 3 would differ


# --- what must hold in every group, given to the new one first ----------------------------------


def _policy(group: ShardGroup) -> tuple[Any, ...]:
    return (sorted((t["token_id"], t["digest"], t["tenant"], t["role"])
                   for t in group.tokens.values()),
            sorted((n, t.weight, t.max_queued, t.max_running) for n, t in group.tenants.items()),
            sorted(group.certificates))


def test_the_new_group_is_given_group_0s_tokens_tenants_and_revocations_first() -> None:
    log: list[tuple[int, str, int]] = []
    old, new = ShardGroup(0, 1, log, never_grew=True), ShardGroup(1, 2, log, joining=True)
    old.create_token("*", "admin", "ops", token_id="a" * 16, digest="1" * 64)
    old.create_token("alpha", "user", "ci", token_id="b" * 16, digest="2" * 64)
    old.tokens["c" * 16] = {"token_id": "c" * 16, "tenant": "beta", "role": "operator",
                            "acts_as": "user", "note": "old", "digest": "3" * 64}
    new.create_token("*", "admin", "bootstrap", token_id="d" * 16, digest="4" * 64)
    old.set_tenant("alpha", weight=3, max_queued=100, max_running=10)
    old.revoke_certificate("ab" * 32, "raftsched-agent:east", "stolen")
    said: list[str] = []
    report = add_group([old, new], servers_of(2), said.append)  # type: ignore[list-item]
    assert "d" * 16 not in new.tokens  # the bootstrap token group 0 no longer holds: revoked
    assert _policy(new)[0] == sorted([("a" * 16, "1" * 64, "*", "admin"),
                                      ("b" * 16, "2" * 64, "alpha", "user")])
    assert _policy(new)[1:] == _policy(old)[1:]
    assert report.policy == {"tokens": 2, "tokens_revoked": 1, "tenants": 1, "certificates": 1}
    assert len(report.skipped) == 1 and "token " + "c" * 16 in report.skipped[0]
    assert said[0].startswith("group 1 holds group 0's 2 tokens, 1 tenant policies and 1 "
                              "revoked certificates (1 token(s) revoked there")
    again = add_group([old, new], servers_of(2), said.append)  # type: ignore[list-item]
    assert again.policy["tokens_revoked"] == 0 and _policy(new)[0] == _policy(old)[0][:2]


def test_a_group_that_cannot_be_given_the_policy_moves_nothing() -> None:
    log: list[tuple[int, str, int]] = []
    old, new = ShardGroup(0, 1, log, never_grew=True), ShardGroup(1, 2, log, joining=True)
    old.create_token("*", "admin", "ops", token_id="a" * 16, digest="1" * 64)
    new.create_token("*", "admin", "clash", token_id="a" * 16, digest="9" * 64)
    with pytest.raises(RaftschedError) as refused:
        add_group([old, new], servers_of(2), lambda line: None)  # type: ignore[list-item]
    assert refused.value.code == Code.ALREADY_EXISTS
    assert "giving group 1 group 0's tokens" in refused.value.message
    assert not [call for call in log if call[1] == "set_shard_map"]
