"""A client of a deployment of several scheduler groups (issue 27): one `Client` per group, each
following its own group's leader, and the routing rule of `raftsched.topology`.

- A submit goes to the group its idempotency key's shard names (every submit has a key:
  `submit_key`), so a retry reaches the same group and cannot create a second job elsewhere;
  a batch is split by group and answered in order.
- A call about a job goes to the group its id names; an id without a shard (a schedule's run) is
  asked of every group in turn until one knows it.
- Listings are merged: each group's page, newest (or oldest) first by submission time, with the
  state counts summed; the page token holds every group's own token. A group that cannot be
  reached is left out and named (`unanswered`), its jobs asked again with the next page.
- Changes that must hold in every group (a tenant's policy, a token's revocation, a revoked
  certificate, a cluster drained or removed) are made in every group; a group that does not
  answer fails the call naming it (what was done in the others stays done and is idempotent:
  run it again).
- What is one group's alone (membership, snapshots) needs that group's servers (`--servers` of
  one group). A token is made here and created by its id and digest in every group.
- Given one group's servers, `with_topology` learns every group's from a replica.

A group without a quorum fails only the calls that reach it: the error names the group.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from typing import Any, TypeVar

from raftsched import tokens, topology
from raftsched.api import raftsched_pb2 as pb
from raftsched.client.client import Client, Submitted
from raftsched.client.keys import submit_key
from raftsched.errors import Code, RaftschedError
from raftsched.spec.job import parse_spec_text
from raftsched.spec.model import JobSpec

T = TypeVar("T")

PAGE_TOKEN_PREFIX = "groups:"
_DOWN = frozenset({Code.UNAVAILABLE, Code.DEADLINE_EXCEEDED})
"""A group that answers so is left out of a merged listing, named (the others are listed)."""
GROUP_STRAGGLER_S = 5.0
"""A merged listing (jobs, schedules, tenants) waits at most this long for the other groups
once one group has answered: a group without a quorum is then named as not answering, and the
others' items are shown, instead of the listing waiting out that group's whole retry budget
(the console's 10 s, the CLI's --timeout). Longer than an election here takes."""
MAX_LOCATED = 10_000
"""Job ids without a shard whose group a client remembers (it asks every group again past
it)."""


class GroupedClient:
    def __init__(self, clients: Sequence[Client], routes: topology.Routes | None = None) -> None:
        assert len(clients) >= 1
        self.clients = list(clients)
        self._routes = routes
        """The shard map as a replica answered it (`with_topology`); None: asked when first
        needed."""
        self._located: dict[str, int] = {}
        """Job ids without a shard, and the group that knew them."""
        self.unanswered: list[RaftschedError] = []
        """The groups the last listing could not reach (their jobs are missing from it)."""

    @property
    def groups(self) -> int:
        return len(self.clients)

    @property
    def routes(self) -> topology.Routes:
        """The shard map, asked of the first group that answers (s mod groups when none does,
        or it says the deployment has more groups than this client knows: a call to the wrong
        group is then refused by it, never taken). A deployment with fewer groups than listed
        is growing: the last ones joined and own no shard yet."""
        if self._routes is None:
            self._routes = topology.Routes(self.groups)
            for client in self.clients:
                try:
                    answer = client.topology()
                except RaftschedError:
                    continue
                if 1 <= answer.groups <= self.groups:
                    self._routes = topology.Routes.of(answer)
                break
        return self._routes

    def close(self) -> None:
        for client in self.clients:
            client.close()

    def _in(self, group: int, call: Callable[[Client], T]) -> T:
        """`call` on one group's client; an error names the group."""
        try:
            return call(self.clients[group])
        except RaftschedError as error:
            raise _named(error, group) from None

    def _each(self, calls: Mapping[int, Callable[[Client], T]], *,
              straggler_s: float | None = None) -> dict[int, T | RaftschedError]:
        """`calls[g]` on group g's client, every group at once (a listing waits for its
        slowest group, not for the sum: a group without a quorum costs one retry budget);
        each answer, or the error naming its group. With `straggler_s`, a group that has not
        answered that long after the first answer is given up on (UNAVAILABLE naming it; its
        call ends in the background within its own retry budget)."""
        def one(group: int) -> T | RaftschedError:
            try:
                return self._in(group, calls[group])
            except RaftschedError as error:
                return error

        if len(calls) <= 1:
            return {group: one(group) for group in calls}
        pool = ThreadPoolExecutor(max_workers=len(calls), thread_name_prefix="raftsched-groups")
        try:
            futures = {group: pool.submit(one, group) for group in calls}
            if straggler_s is None:
                return {group: future.result() for group, future in futures.items()}
            _, pending = wait(futures.values(), return_when=FIRST_COMPLETED)
            wait(pending, timeout=straggler_s)
            return {group: future.result() if future.done() else _named(RaftschedError(
                Code.UNAVAILABLE, f"no answer within {straggler_s:g} s of the other groups' "
                "(GROUP_STRAGGLER_S)"), group) for group, future in futures.items()}
        finally:
            pool.shutdown(wait=False)

    # -- submits -----------------------------------------------------------------------------

    def group_of_submit(self, spec: JobSpec, key: str) -> int:
        return self.routes.owner(topology.shard_of_key(spec.tenant, key))

    def submit(self, spec_text: str | bytes, idempotency_key: str | None = None,
               params: Mapping[str, str] | None = None) -> Submitted:
        return self.submit_spec(parse_spec_text(spec_text, params=params), idempotency_key)

    def submit_spec(self, spec: JobSpec, idempotency_key: str | None = None,
                    params: Mapping[str, str] | None = None) -> Submitted:
        key = submit_key(idempotency_key, spec)
        group = self.group_of_submit(spec, key)
        try:
            return self._in(group, lambda c: c.submit_spec(spec, key, params))
        except RaftschedError as error:
            if error.code != Code.FAILED_PRECONDITION or not self._rerouted(group):
                raise
        return self._in(self.group_of_submit(spec, key),
                        lambda c: c.submit_spec(spec, key, params))

    def _rerouted(self, group: int) -> bool:
        """After `group` refused a shard as another group's: the map again, from that group
        (True when it moved since this client read it: the caller sends the call again)."""
        try:
            answer = self.clients[group].topology()
        except RaftschedError:
            return False
        routes = topology.Routes.of(answer)
        if routes.epoch <= self.routes.epoch or routes.groups > self.groups:
            return False
        self._routes = routes
        return True

    def submit_jobs(self, specs: Sequence[JobSpec], keys: Sequence[str | None] = (),
                    labels: Sequence[str] = (), params: Mapping[str, str] | None = None,
                    ) -> list[Submitted | RaftschedError]:
        made = [submit_key(keys[i] if i < len(keys) else None, spec)
                for i, spec in enumerate(specs)]
        by_group: dict[int, list[int]] = {}
        for index, spec in enumerate(specs):
            by_group.setdefault(self.group_of_submit(spec, made[index]), []).append(index)
        answers: list[Submitted | RaftschedError | None] = [None] * len(specs)

        def send(groups: dict[int, list[int]]) -> None:
            for group, indexes in sorted(groups.items()):
                replies = self._in(group, lambda c, ix=indexes: c.submit_jobs(  # type: ignore[misc]
                    [specs[i] for i in ix], [made[i] for i in ix],
                    [labels[i] if i < len(labels) else "" for i in ix], params))
                for index, reply in zip(indexes, replies, strict=True):
                    answers[index] = reply

        send(by_group)
        refused = [i for i, answer in enumerate(answers) if isinstance(answer, RaftschedError)
                   and answer.code == Code.FAILED_PRECONDITION]
        asked = sorted({self.group_of_submit(specs[i], made[i]) for i in refused})
        if any([self._rerouted(group) for group in asked]):  # shards moved: once more
            again: dict[int, list[int]] = {}
            for index in refused:
                again.setdefault(self.group_of_submit(specs[index], made[index]),
                                 []).append(index)
            send(again)
        assert all(answer is not None for answer in answers)
        return [answer for answer in answers if answer is not None]

    # -- one job -----------------------------------------------------------------------------

    def group_of_job(self, job_id: str) -> int | None:
        """The group a job id names (or that answered for it); None: not known yet."""
        if job_id in self._located:
            return self._located[job_id]
        shard = topology.shard_of_job_id(job_id)
        return None if shard is None else self.routes.owner(shard)

    def _for_job(self, job_id: str, call: Callable[[Client], T]) -> T:
        shard = topology.shard_of_job_id(job_id)
        if job_id in self._located:
            return self._in(self._located[job_id], call)
        readers = range(self.groups) if shard is None else self.routes.readers(shard)
        if len(readers) == 1:
            return self._in(readers[0], call)
        last: RaftschedError | None = None
        for index in readers:  # no shard in the id, or a shard that moved: whoever knows it
            try:
                answer = self._in(index, call)
            except RaftschedError as error:
                if error.code != Code.NOT_FOUND:
                    raise
                last = error
                continue
            if len(self._located) < MAX_LOCATED:
                self._located[job_id] = index
            return answer
        assert last is not None
        raise last

    def get_job(self, job_id: str) -> Any:
        return self._for_job(job_id, lambda c: c.get_job(job_id))

    def list_tasks(self, job_id: str, with_spans: bool = False) -> Any:
        return self._for_job(job_id, lambda c: c.list_tasks(job_id, with_spans))

    def cancel(self, job_id: str, reason: str = "") -> Any:
        return self._for_job(job_id, lambda c: c.cancel(job_id, reason))

    def task_history(self, job_id: str, task_id: str) -> Any:
        return self._for_job(job_id, lambda c: c.task_history(job_id, task_id))

    def explain(self, job_id: str, task_id: str) -> Any:
        return self._for_job(job_id, lambda c: c.explain(job_id, task_id))

    def watch(self, job_id: str) -> Iterator[Any]:
        return self._for_job(job_id, lambda c: c.watch(job_id))

    def task_logs(self, job_id: str, task_id: str, **kwargs: Any) -> Iterator[Any]:
        return self._for_job(job_id, lambda c: c.task_logs(job_id, task_id, **kwargs))

    def task_outputs(self, job_id: str, task_id: str) -> Any:
        return self.task_history(job_id, task_id)

    # -- listings ----------------------------------------------------------------------------

    def list_jobs(self, tenant: str = "", state: str = "", limit: int = 0,
                  page_token: str = "", **kwargs: Any) -> Any:
        """Every group's page, merged by submission time (newest first with `newest_first`);
        a page holds up to `limit` jobs of each group. The next page token carries each
        group's own ("" once every group is done)."""
        tokens = _split_token(page_token, self.groups)
        newest_first = bool(kwargs.get("newest_first"))
        merged = pb.ListJobsResponse()
        jobs: list[Any] = []
        next_tokens: list[str | None] = []
        answers = self._each({group: (lambda c, t=token: c.list_jobs(  # type: ignore[misc]
            tenant, state, limit, t, **kwargs)) for group, token in enumerate(tokens)
            if token is not None}, straggler_s=GROUP_STRAGGLER_S)
        pages, unanswered = _answered(answers)
        for group, token in enumerate(tokens):
            if token is None:  # this group has no more pages
                next_tokens.append(None)
                continue
            page = pages.get(group)
            if page is None:  # not reached: listed with the others' next page
                next_tokens.append(token)
                continue
            jobs.extend(page.jobs)
            for name, count in page.state_counts.items():
                merged.state_counts[name] = merged.state_counts.get(name, 0) + count
            merged.state_counts_partial |= page.state_counts_partial
            next_tokens.append(page.next_page_token or None)
        self.unanswered = unanswered
        jobs.sort(key=lambda job: (job.submitted_ms, job.job_id), reverse=newest_first)
        merged.jobs.extend(jobs)
        merged.next_page_token = _join_token(next_tokens)
        return merged

    def list_schedules(self, tenant: str = "") -> Any:
        answers = self._each({group: lambda c: c.list_schedules(tenant)
                              for group in range(self.groups)})
        merged = None
        for group in range(self.groups):
            page = answers[group]
            if isinstance(page, RaftschedError):
                raise page
            if merged is None:
                merged = page
            else:
                merged.schedules.extend(page.schedules)
        return merged

    # -- schedules: one group each, by the hash of its id ------------------------------------

    def group_of_schedule(self, schedule_id: str) -> int:
        return self.routes.schedule_group(schedule_id)

    def _for_schedule(self, schedule_id: str, call: Callable[[Client], T]) -> T:
        return self._in(self.group_of_schedule(schedule_id), call)

    def create_schedule(self, schedule_id: str, spec_text: str) -> Any:
        return self._for_schedule(schedule_id, lambda c: c.create_schedule(schedule_id,
                                                                           spec_text))

    def get_schedule(self, schedule_id: str) -> Any:
        return self._for_schedule(schedule_id, lambda c: c.get_schedule(schedule_id))

    def set_schedule(self, schedule_id: str, paused: bool, note: str = "") -> Any:
        return self._for_schedule(schedule_id, lambda c: c.set_schedule(schedule_id, paused,
                                                                        note))

    def trigger_schedule(self, schedule_id: str) -> Any:
        return self._for_schedule(schedule_id, lambda c: c.trigger_schedule(schedule_id))

    def backfill_schedule(self, schedule_id: str, from_ms: int, to_ms: int,
                          max_concurrent: int = 1) -> Any:
        return self._for_schedule(schedule_id, lambda c: c.backfill_schedule(
            schedule_id, from_ms, to_ms, max_concurrent))

    def delete_schedule(self, schedule_id: str) -> Any:
        return self._for_schedule(schedule_id, lambda c: c.delete_schedule(schedule_id))

    # -- operators ---------------------------------------------------------------------------

    def group_statuses(self, include_digest: bool = False) -> list[Any]:
        """Each group's ClusterStatus (its leader's when one answers), or the RaftschedError
        that says why the group did not answer."""
        answers = self._each({group: lambda c: _leader_status(c, include_digest)
                              for group in range(self.groups)})
        return [answers[group] for group in range(self.groups)]

    def cluster_status(self, server: str | None = None, *, include_digest: bool = False) -> Any:
        if server is not None:
            raise _one_group("admin status --server")
        return self._in(0, lambda c: c.cluster_status(include_digest=include_digest))

    def _everywhere(self, call: Callable[[Client], T]) -> T:
        """A change that must hold in every group: made in each, the first answer returned."""
        replies = [self._in(group, call) for group in range(self.groups)]
        return replies[0]

    def set_tenant(self, tenant: str, **kwargs: Any) -> Any:
        return self._everywhere(lambda c: c.set_tenant(tenant, **kwargs))

    def list_tenants(self) -> Any:
        """Every group's tenants with their work summed over the groups: queued, running and
        reserved add up; a dominant share is summed too (each group's is its own attempts'
        share of every cluster, so the sum bounds the deployment's from above); policies are
        set in every group alike. A group that cannot be reached is left out and named
        (`unanswered`), as for `list_jobs`."""
        merged: dict[str, Any] = {}
        answer = pb.ListTenantsResponse()
        answers = self._each({group: lambda c: c.list_tenants() for group in range(self.groups)},
                             straggler_s=GROUP_STRAGGLER_S)
        pages, unanswered = _answered(answers)
        for page in pages.values():
            answer.queued_total += page.queued_total
            answer.max_queued_tasks += page.max_queued_tasks  # the bound is per group
            for tenant in page.tenants:
                have = merged.get(tenant.tenant)
                if have is None:
                    merged[tenant.tenant] = have = pb.TenantInfo()
                    have.CopyFrom(tenant)
                    continue
                have.queued += tenant.queued
                have.running += tenant.running
                have.reserved.cpu_milli += tenant.reserved.cpu_milli
                have.reserved.memory_mb += tenant.reserved.memory_mb
                have.reserved.gpu += tenant.reserved.gpu
                have.dominant_share += tenant.dominant_share
        answer.tenants.extend(merged.values())
        self.unanswered = unanswered
        return answer

    def revoke_token(self, token_id: str) -> Any:
        return self._everywhere(lambda c: c.revoke_token(token_id))

    def list_tokens(self) -> Any:
        return self._in(0, lambda c: c.list_tokens())

    def revoke_certificate(self, fingerprint: str, subject: str = "", reason: str = "") -> Any:
        return self._everywhere(lambda c: c.revoke_certificate(fingerprint, subject, reason))

    def list_revoked_certificates(self) -> Any:
        return self._in(0, lambda c: c.list_revoked_certificates())

    def drain_cluster(self, cluster_id: str, drain: bool, reason: str = "") -> Any:
        return self._everywhere(lambda c: c.drain_cluster(cluster_id, drain, reason))

    def remove_cluster(self, cluster_id: str) -> Any:
        return self._everywhere(lambda c: c.remove_cluster(cluster_id))

    def create_token(self, tenant: str, role: str, note: str = "") -> Any:
        """The same new token in every group: made here (its secret never reaches a replica),
        then created in each group by its id and digest. If a group refuses or does not
        answer, the token is revoked again where it was made (so no group honours a token the
        caller never got) and the error names the group."""
        made = tokens.new_token()
        done: list[int] = []
        for group in range(self.groups):
            try:
                self._in(group, lambda c: c.create_token(
                    tenant, role, note, token_id=made.token_id, digest=made.digest.hex()))
            except RaftschedError as error:
                undone = [g for g in done if _revoked(self.clients[g], made.token_id)]
                left = [g for g in done if g not in undone]
                where = f"; it is still held by group(s) {left}: raftsched admin token " \
                    f"revoke {made.token_id}" if left else ""
                raise RaftschedError(error.code, f"{error.message} (token {made.token_id} not "
                                     f"created{where})") from None
            done.append(group)
        return pb.CreateTokenResponse(token_id=made.token_id, token=made.token)

    def add_replica(self, raft_address: str, grpc_address: str = "") -> Any:
        raise _one_group("admin add")

    def remove_replica(self, raft_address: str) -> Any:
        raise _one_group("admin remove")

    def save_snapshot(self, *args: Any, **kwargs: Any) -> Any:
        raise _one_group("snapshot save")

    def watch_events(self, from_index: int = 0, job_id: str = "", tenant: str = "",
                     clusters: bool = False) -> Iterator[Any]:
        if job_id:
            return self._for_job(job_id, lambda c: c.watch_events(from_index, job_id, tenant,
                                                                  clusters))
        raise _one_group("events without --job")


def job_group(client: object, job_id: str) -> int:
    """Which scheduler group holds the job, as `client` routes it: the one its id names (or
    that answered for it) with several groups; 0 with one, or while it is not known."""
    group_of = getattr(client, "group_of_job", None)
    group = group_of(job_id) if group_of is not None and job_id else 0
    return group if isinstance(group, int) else 0


def _answered(answers: Mapping[int, T | RaftschedError]) -> tuple[dict[int, T],
                                                                 list[RaftschedError]]:
    """The groups' answers to a listing and the errors of those that could not be reached
    (left out, named); any other error, or none answering, is raised."""
    pages = {g: a for g, a in answers.items() if not isinstance(a, RaftschedError)}
    down = [a for a in answers.values() if isinstance(a, RaftschedError)]
    for error in down:
        if error.code not in _DOWN:
            raise error
    if not pages and down:
        raise down[-1]
    return pages, down


def with_topology(client: Client, make_client: Callable[[list[str]], Client]) -> Client | Any:
    """`client` (one group's servers) as a `GroupedClient` of every group when a replica of
    them says the deployment has several and where each is (GetTopology); else `client` itself
    (one group, a replica that does not know the others' addresses, or none answering: the
    call that follows then says what is wrong)."""
    try:
        answer = client.topology()
    except RaftschedError:
        return client
    if answer.groups <= 1 or len(answer.members) != answer.groups:
        return client
    return GroupedClient([client if member.group == answer.group
                          else make_client(list(member.servers)) for member in answer.members],
                         topology.Routes.of(answer))


def _revoked(client: Client, token_id: str) -> bool:
    try:
        client.revoke_token(token_id)
    except RaftschedError:
        return False
    return True


def _leader_status(client: Client, include_digest: bool) -> Any:
    """The group's status as its leader sees it; RaftschedError when no replica answers, or
    when the leader a replica names does not (a group without a quorum: a follower may go on
    naming its last leader)."""
    status = client.cluster_status(include_digest=include_digest)
    if not status.leader or status.leader == status.responder:
        return status
    try:
        return client.cluster_status(server=status.leader, include_digest=include_digest)
    except RaftschedError as error:
        raise RaftschedError(
            Code.UNAVAILABLE,
            f"no leader answers: {status.responder} names {status.leader}, which does not "
            f"answer ({error.message}); without a quorum the group's jobs wait") from None


def _named(error: RaftschedError, group: int) -> RaftschedError:
    if f"group {group}:" in error.message:
        return error
    named = RaftschedError(error.code, f"group {group}: {error.message}",
                           retry_after_ms=error.retry_after_ms)
    named.leader_hint = error.leader_hint
    return named


def _one_group(what: str) -> RaftschedError:
    return RaftschedError(Code.INVALID_ARGUMENT,
                          f"{what} acts on one group: pass --servers with that group's "
                          "replicas only (no ';')")


def _split_token(token: str, groups: int) -> list[str | None]:
    """Each group's page token ("" for its first page, None when it has no more)."""
    if not token:
        return [""] * groups
    if not token.startswith(PAGE_TOKEN_PREFIX):
        raise RaftschedError(Code.INVALID_ARGUMENT, "page token: not one of a grouped listing")
    try:
        parts = json.loads(base64.urlsafe_b64decode(token[len(PAGE_TOKEN_PREFIX):]))
    except (ValueError, TypeError):
        raise RaftschedError(Code.INVALID_ARGUMENT, "page token: malformed") from None
    if not isinstance(parts, list) or len(parts) != groups or \
            not all(p is None or isinstance(p, str) for p in parts):
        raise RaftschedError(Code.INVALID_ARGUMENT,
                             f"page token: not one of a listing over {groups} groups")
    return parts


def _join_token(tokens: list[str | None]) -> str:
    if all(token is None for token in tokens):
        return ""
    return PAGE_TOKEN_PREFIX + base64.urlsafe_b64encode(json.dumps(tokens).encode()).decode()
