"""The client of several scheduler groups (`raftsched.client.groups`, issue 27): routing by
the idempotency key's and the job id's shard, merged listings, changes made in every group,
and errors that name the group. Each group's `Client` is a fake here (the real one is covered
by its own tests and by the integration test of `dev up --groups`)."""

from __future__ import annotations

from typing import Any

import pytest

from raftsched import tokens, topology
from raftsched.api import raftsched_pb2 as pb
from raftsched.client.client import Submitted
from raftsched.client.groups import GroupedClient, with_topology
from raftsched.errors import Code, RaftschedError
from raftsched.spec.job import parse_spec_text

SPEC = "name: etl\ntenant: alpha\ntasks:\n  - {id: a, command: [\"true\"]}\n"


class FakeGroupClient:
    """One group: remembers what it was asked and holds the jobs submitted to it."""

    def __init__(self, group: int, groups: int) -> None:
        self.group, self.groups = group, groups
        self.jobs: dict[str, pb.Job] = {}
        self.calls: list[tuple[str, Any]] = []
        self.down = False
        self.tokens: dict[str, str] = {}
        self.revoke_fails = False

    def _check(self, what: str, detail: Any = None) -> None:
        self.calls.append((what, detail))
        if self.down:
            raise RaftschedError(Code.UNAVAILABLE, "no leader")

    def topology(self) -> Any:
        """No shard has moved (not recorded in `calls`: the client asks it once, for routes)."""
        if self.down:
            raise RaftschedError(Code.UNAVAILABLE, "no leader")
        return pb.Topology(group=self.group, groups=self.groups, recorded=True)

    def submit_spec(self, spec: Any, key: str | None = None, params: Any = None) -> Submitted:
        self._check("submit", key)
        assert key is not None
        shard = topology.shard_of_key(spec.tenant, key)
        assert topology.group_of_shard(shard, self.groups) == self.group, "routed wrongly"
        job_id = f"{spec.name}-{topology.job_id_tail(shard, len(self.jobs))}"
        self.jobs[job_id] = pb.Job(job_id=job_id, submitted_ms=1000 + len(self.jobs) * 10
                                   + self.group)
        return Submitted(job_id, True, key)

    def submit_jobs(self, specs: Any, keys: Any, labels: Any, params: Any = None) -> list[Any]:
        self._check("submit_jobs", list(keys))
        return [self.submit_spec(spec, key) for spec, key in zip(specs, keys, strict=True)]

    def get_job(self, job_id: str) -> Any:
        self._check("get_job", job_id)
        if job_id not in self.jobs:
            raise RaftschedError(Code.NOT_FOUND, f"no job {job_id}")
        return self.jobs[job_id]

    def list_jobs(self, tenant: str = "", state: str = "", limit: int = 0,
                  page_token: str = "", **kwargs: Any) -> Any:
        self._check("list_jobs", page_token)
        page = pb.ListJobsResponse(jobs=list(self.jobs.values()),
                                   next_page_token="" if page_token else f"next-{self.group}")
        page.state_counts["RUNNING"] = len(self.jobs)
        return page

    def cluster_status(self, server: str | None = None, *, include_digest: bool = False) -> Any:
        self._check("cluster_status", server)
        return pb.ClusterStatusResponse(leader="", responder=f"g{self.group}")

    def set_tenant(self, tenant: str, **kwargs: Any) -> Any:
        self._check("set_tenant", tenant)
        return tenant

    def create_token(self, tenant: str, role: str, note: str = "", *, token_id: str = "",
                     digest: str = "") -> Any:
        self._check("create_token", token_id)
        assert token_id and digest, "a grouped client makes the token itself"
        self.tokens[token_id] = digest
        return pb.CreateTokenResponse(token_id=token_id)

    def revoke_token(self, token_id: str) -> Any:
        if self.revoke_fails:
            raise RaftschedError(Code.UNAVAILABLE, "no leader")
        self.tokens.pop(token_id, None)
        return pb.RevokeTokenResponse(token_id=token_id)


def _client(groups: int = 3) -> tuple[GroupedClient, list[FakeGroupClient]]:
    fakes = [FakeGroupClient(g, groups) for g in range(groups)]
    return GroupedClient(fakes), fakes  # type: ignore[arg-type]


def test_a_submit_goes_to_the_group_of_its_key_and_a_retry_to_the_same() -> None:
    client, fakes = _client()
    spec = parse_spec_text(SPEC)
    first = client.submit_spec(spec, "nightly-2026-12-05")
    group = topology.group_of_key("alpha", "nightly-2026-12-05", 3)
    assert [f.group for f in fakes if f.calls] == [group]
    client.submit_spec(spec, "nightly-2026-12-05")
    assert len(fakes[group].calls) == 2
    assert client.group_of_job(first.job_id) == group
    assert client.get_job(first.job_id).job_id == first.job_id


def test_a_batch_is_split_by_group_and_answered_in_order() -> None:
    client, fakes = _client()
    spec = parse_spec_text(SPEC)
    keys = [f"k{n}" for n in range(12)]
    answers = client.submit_jobs([spec] * 12, keys)
    assert [a.idempotency_key for a in answers] == keys  # type: ignore[union-attr]
    for answer in answers:
        assert isinstance(answer, Submitted)
        expected = topology.group_of_key("alpha", answer.idempotency_key, 3)
        assert client.group_of_job(answer.job_id) == expected
    assert sum(1 for f in fakes for what, _ in f.calls if what == "submit_jobs") == \
        len({topology.group_of_key("alpha", k, 3) for k in keys})


def test_an_id_without_a_shard_is_asked_of_every_group_and_remembered() -> None:
    client, fakes = _client()
    fakes[2].jobs["tick-20261205T100000Z"] = pb.Job(job_id="tick-20261205T100000Z")
    assert client.get_job("tick-20261205T100000Z").job_id == "tick-20261205T100000Z"
    assert client.group_of_job("tick-20261205T100000Z") == 2
    with pytest.raises(RaftschedError) as missing:
        client.get_job("nowhere-at-all")
    assert missing.value.code == Code.NOT_FOUND


def test_listings_merge_every_group_by_submission_time_with_one_token() -> None:
    client, fakes = _client()
    spec = parse_spec_text(SPEC)
    for n in range(9):
        client.submit_spec(spec, f"key-{n}")
    page = client.list_jobs(newest_first=True)
    times = [job.submitted_ms for job in page.jobs]
    assert len(times) == 9 and times == sorted(times, reverse=True)
    assert page.state_counts["RUNNING"] == 9
    assert page.next_page_token.startswith("groups:")
    client.list_jobs(page_token=page.next_page_token)
    assert [f.calls[-1] for f in fakes] == [("list_jobs", f"next-{g}") for g in range(3)]
    with pytest.raises(RaftschedError, match="page token"):
        client.list_jobs(page_token="not-ours")


def test_an_error_names_its_group_and_a_change_is_made_in_every_group() -> None:
    client, fakes = _client()
    assert client.set_tenant("alpha", weight=2) == "alpha"
    assert all(f.calls == [("set_tenant", "alpha")] for f in fakes)
    fakes[1].down = True
    with pytest.raises(RaftschedError, match="group 1: no leader") as down:
        client.set_tenant("beta", weight=1)
    assert down.value.code == Code.UNAVAILABLE
    statuses = client.group_statuses()
    assert isinstance(statuses[1], RaftschedError) and "group 1" in statuses[1].message
    assert [s.responder for s in (statuses[0], statuses[2])] == ["g0", "g2"]


def test_a_token_is_made_once_and_created_by_its_digest_in_every_group() -> None:
    client, fakes = _client(3)
    reply = client.create_token("alpha", "user", "ci")
    parsed = tokens.parse_token(reply.token)
    assert parsed is not None and parsed[0] == reply.token_id
    digest = tokens.secret_digest(parsed[1]).hex()
    assert [f.tokens for f in fakes] == [{reply.token_id: digest}] * 3


def test_a_token_a_group_refuses_is_revoked_where_it_was_made_and_the_error_says_so() -> None:
    client, fakes = _client(3)
    fakes[2].down = True
    with pytest.raises(RaftschedError, match=r"group 2: no leader \(token [0-9a-f]{16} not "
                       r"created\)") as refused:
        client.create_token("alpha", "user")
    assert refused.value.code == Code.UNAVAILABLE
    assert [f.tokens for f in fakes] == [{}, {}, {}]
    fakes[1].revoke_fails = True
    with pytest.raises(RaftschedError, match=r"still held by group\(s\) \[1\]: raftsched "
                       r"admin token revoke") as held:
        client.create_token("alpha", "user")
    assert len(fakes[1].tokens) == 1 and held.value.code == Code.UNAVAILABLE


class FakeTopologyClient:
    def __init__(self, answer: pb.Topology | RaftschedError) -> None:
        self.answer = answer

    def topology(self) -> Any:
        if isinstance(self.answer, RaftschedError):
            raise self.answer
        return self.answer

    def close(self) -> None:
        pass


def test_one_groups_client_learns_every_group_from_a_replica() -> None:
    answer = pb.Topology(group=1, groups=3, members=[
        pb.TopologyGroup(group=g, servers=[f"10.0.{g}.1:7001"]) for g in range(3)])
    given = FakeTopologyClient(answer)
    made: list[list[str]] = []

    def make(servers: list[str]) -> Any:
        made.append(servers)
        return FakeTopologyClient(answer)

    grouped = with_topology(given, make)  # type: ignore[arg-type]
    assert isinstance(grouped, GroupedClient) and grouped.groups == 3
    assert grouped.clients[1] is given  # its own group: the servers it was given
    assert made == [["10.0.0.1:7001"], ["10.0.2.1:7001"]]


@pytest.mark.parametrize("answer", [
    pb.Topology(group=0, groups=1, members=[pb.TopologyGroup(group=0, servers=["a:1"])]),
    pb.Topology(group=0, groups=2),  # several, but never told where the others are
    RaftschedError(Code.UNAVAILABLE, "no replica answers"),
    RaftschedError(Code.INTERNAL, "an older replica: method not implemented"),
])
def test_without_a_full_topology_the_given_client_is_used_as_it_is(answer: Any) -> None:
    given = FakeTopologyClient(answer)
    assert with_topology(given, lambda servers: pytest.fail("no other group")) is given  # type: ignore[arg-type]


def test_tenants_are_merged_with_their_work_summed_and_a_down_group_named() -> None:
    client, fakes = _client(3)

    def tenants(group: int) -> Any:
        return pb.ListTenantsResponse(queued_total=10 * (group + 1), max_queued_tasks=100,
                                      tenants=[pb.TenantInfo(
                                          tenant="alpha", weight=2, queued=group, running=1,
                                          reserved=pb.Resources(cpu_milli=500, gpu=group),
                                          dominant_share=0.1)])

    for fake in fakes:
        fake.list_tenants = lambda g=fake.group: tenants(g)  # type: ignore[method-assign]
    answer = client.list_tenants()
    (alpha,) = answer.tenants
    assert (alpha.weight, alpha.queued, alpha.running) == (2, 3, 3)
    assert (alpha.reserved.cpu_milli, alpha.reserved.gpu) == (1500, 3)
    assert alpha.dominant_share == pytest.approx(0.3)
    assert (answer.queued_total, answer.max_queued_tasks) == (60, 300)

    def down() -> Any:
        raise RaftschedError(Code.UNAVAILABLE, "no leader")

    fakes[1].list_tenants = down  # type: ignore[method-assign]
    answer = client.list_tenants()
    assert answer.tenants[0].queued == 2 and answer.queued_total == 40
    assert [e.message for e in client.unanswered] == ["group 1: no leader"]


def test_a_listing_asks_every_group_at_once_so_a_slow_group_delays_it_once() -> None:
    """Each group's answer waits until every group was asked: asked one after another, the
    first would wait in vain (the barrier breaks, and the listing fails)."""
    import threading

    client, fakes = _client(3)
    barrier = threading.Barrier(3, timeout=10)
    asked: list[int] = []
    for fake in fakes:
        listing = fake.list_jobs

        def together(*args: Any, listing: Any = listing, group: int = fake.group,
                     **kwargs: Any) -> Any:
            asked.append(group)
            barrier.wait()
            return listing(*args, **kwargs)

        fake.list_jobs = together  # type: ignore[method-assign]
    page = client.list_jobs()
    assert sorted(asked) == [0, 1, 2] and page.next_page_token.startswith("groups:")
    statuses = client.group_statuses()
    assert [s.responder for s in statuses] == ["g0", "g1", "g2"]


def test_a_listing_gives_up_on_a_group_that_has_not_answered_soon_after_the_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A group without a quorum is named and left out once GROUP_STRAGGLER_S has passed since
    the first answer, instead of the listing waiting out that group's retry budget; its call
    goes on in the background."""
    import threading

    from raftsched.client import groups

    monkeypatch.setattr(groups, "GROUP_STRAGGLER_S", 0.05)
    client, fakes = _client(3)
    for fake in fakes:
        fake.submit_spec(parse_spec_text(SPEC), next(
            f"k{n}" for n in range(1000)
            if topology.group_of_key("alpha", f"k{n}", 3) == fake.group))
    released = threading.Event()
    stuck = fakes[1].list_jobs

    def hangs(*args: Any, **kwargs: Any) -> Any:
        released.wait(timeout=60)
        return stuck(*args, **kwargs)

    fakes[1].list_jobs = hangs  # type: ignore[method-assign]
    try:
        page = client.list_jobs()
        assert not released.is_set()  # it answered while group 1 still had not
        assert len(page.jobs) == 2 and {j.job_id for j in page.jobs} == {
            job for g in (0, 2) for job in fakes[g].jobs}
        assert [e.message for e in client.unanswered] == [
            "group 1: no answer within 0.05 s of the other groups' (GROUP_STRAGGLER_S)"]
        assert [e.code for e in client.unanswered] == [Code.UNAVAILABLE]
        groups_token = page.next_page_token
        assert groups_token.startswith("groups:")  # group 1 is asked again with the next page
        status = fakes[1].cluster_status

        def status_hangs(*args: Any, **kwargs: Any) -> Any:
            released.wait(timeout=60)
            return status(*args, **kwargs)

        fakes[1].cluster_status = status_hangs  # type: ignore[method-assign]
        statuses: list[Any] = []
        asked = threading.Thread(target=lambda: statuses.extend(client.group_statuses()),
                                 daemon=True)
        asked.start()  # `admin status` waits for every group: no cutoff there
        asked.join(timeout=0.5)
        assert asked.is_alive()
        released.set()
        asked.join(timeout=60)
        assert [s.responder for s in statuses] == ["g0", "g1", "g2"]
    finally:
        released.set()
