"""The agent session's logic on the leader, without a transport: it takes and returns the
protocol's values (`raftsched.protocol`), never protobuf.

`service.AgentGatewayService` puts gRPC around it (mapping with `raftsched.rpc`); the seeded
simulation (tests/sim) calls it directly, so both exercise the same checks, commands and
deliveries. Expected failures are raised as `RaftschedError` (UNAVAILABLE when not leading,
DEADLINE_EXCEEDED when a proposal's outcome is unknown, the state machine's code when it refuses).
"""

from __future__ import annotations

import dataclasses
import functools
import random
from collections.abc import Callable, Sequence

from raftsched import limits
from raftsched.clock import Clock
from raftsched.errors import Code, RaftschedError
from raftsched.eventlog import EventLogger
from raftsched.protocol import (
    Assignment,
    Beat,
    Directives,
    KillDirective,
    KnownAttempt,
    LogChunk,
    Observation,
    Registered,
    Registration,
    Report,
    Reported,
    ReportKind,
    Resources,
    Verdict,
    task_key,
)
from raftsched.replica.leader import Leader
from raftsched.replica.logs import LogBroker
from raftsched.replica.proposals import Proposer, result_or_error
from raftsched.replica.raft.port import RaftPort
from raftsched.state import commands as c
from raftsched.state.model import AttemptState, Job, State, Task, TaskState
from raftsched.state.queries import attempt_of_cluster
from raftsched.state.resolve import task_inputs
from raftsched.state.results import ClusterRegistered, ReportResult, Result
from raftsched.state.rules import cluster_register_problem

assert limits.MAX_DELIVERIES_PER_HEARTBEAT <= limits.MAX_BATCH_ITEMS
MAX_INCARNATION_STEP = 1_000
"""How far a Register may move a cluster's incarnation at once (agents add one per start; an
agent that crash-loops before it registers skips a few)."""


log = EventLogger("raftsched.gateway")

def propose(node: RaftPort, leader: Leader, command: c.Command,
            appended: Callable[[], None] | None = None) -> Result:
    """Commit `command` as the leader in office (`proposals.Proposer`, which wakes the leader's
    loop after a commit); its Applied result, or the RaftschedError a client is told
    (`proposals.result_or_error`). `appended` as for `Proposer.propose`."""
    proposer = Proposer(node, leading=leader.leading, committed=leader.wake)
    return result_or_error(proposer.propose(command, appended))


class AgentGateway:
    def __init__(self, node: RaftPort, leader: Leader, clock: Clock, rng: random.Random,
                 changes_wait: Callable[[int, float], int] | None = None,
                 changes_version: Callable[[], int] | None = None,
                 logs: LogBroker | None = None) -> None:
        self.node = node
        self.leader = leader
        self.clock = clock
        self.rng = rng
        self._wait = changes_wait
        self._version = changes_version
        self._logs = logs

    def register(self, registration: Registration) -> Registered:
        """Reconcile the agent's attempts with ours (`leader` of the answer is left empty for
        the transport to fill in). Refused before anything is proposed: a malformed cluster id
        or capability (INVALID_ARGUMENT, the state machine's own rule), more known attempts
        than MAX_REGISTER_KNOWN_ATTEMPTS (RESOURCE_EXHAUSTED), an incarnation more than
        MAX_INCARNATION_STEP ahead of the registered one (FAILED_PRECONDITION: agents add one
        per start, and a jump to 2**64 - 1 would lock every later start of the real agent out
        for good). The entry carries only the attempts the state knows for this cluster; the
        running ones it does not know come back in `stop`: the agent stops them itself."""
        command = _register_command(registration, self.clock.now_ms())
        if not self.leader.leading():  # the split below must read a leader's applied state
            raise RaftschedError(Code.UNAVAILABLE, "not the leader")
        self._check_incarnation(registration.cluster_id, registration.incarnation)
        ours, stop = self._split(registration.cluster_id, registration.known)
        result = propose(self.node, self.leader, dataclasses.replace(command, known=ours))
        assert isinstance(result, ClusterRegistered), result
        self.leader.registered(registration.cluster_id, registration.incarnation)
        return Registered(self.node.term(), "", result.lost, result.kills, stop)

    def _check_incarnation(self, cluster_id: str, incarnation: int) -> None:
        current = self.node.read(lambda s: _incarnation(s, cluster_id))
        if current is not None and incarnation > current + MAX_INCARNATION_STEP:
            raise RaftschedError(
                Code.FAILED_PRECONDITION,
                f"cluster {cluster_id}: incarnation {incarnation} is more than "
                f"{MAX_INCARNATION_STEP:,} ahead of the registered {current} (an agent adds one "
                "per start)")

    def _split(self, cluster_id: str, known: Sequence[KnownAttempt],
               ) -> tuple[tuple[KnownAttempt, ...], tuple[KillDirective, ...]]:
        """`split_known` over the applied state, MAX_BATCH_ITEMS attempts per read, so a long
        list never holds the apply lock for long."""
        ours: list[KnownAttempt] = []
        stop: list[KillDirective] = []
        step = limits.MAX_BATCH_ITEMS
        for start in range(0, len(known), step):
            chunk = known[start:start + step]
            found = self.node.read(
                functools.partial(split_known, cluster_id=cluster_id, known=chunk))
            ours += found[0]
            stop += found[1]
        return tuple(ours), tuple(stop)

    def heartbeat(self, beat: Beat, active: Callable[[], bool] = lambda: True) -> Directives:
        """Record the heartbeat, then answer with what is due for this agent; with
        `beat.wait_ms` (a long poll) wait for something to become due, up to that long."""
        if not self.leader.leading():
            raise RaftschedError(Code.UNAVAILABLE, "not the leader")
        cluster_id, incarnation = beat.cluster_id, beat.incarnation
        if not self.node.read(lambda s: _registered(s, cluster_id, incarnation)):
            return Directives(self.node.term(), reregister=True)
        free = beat.free.as_tuple() if beat.free is not None else None
        self.leader.heartbeat(cluster_id, incarnation, beat.seq, free)
        deadline = self.clock.monotonic_s() + beat.wait_ms / 1000
        seen = self._version() if self._version is not None else 0
        while True:
            assignments, kills = self.node.read(lambda s: deliveries(
                s, cluster_id, lambda items, bound: self.leader.due(cluster_id, items, bound)))
            requests = self._logs.take(cluster_id) if self._logs is not None else ()
            left = deadline - self.clock.monotonic_s()
            if assignments or kills or requests or left <= 0 or self._wait is None \
                    or not active():
                break
            seen = self._wait(seen, left)
            if not self.leader.leading():
                break
        return Directives(self.node.term(), tuple(assignments), tuple(kills),
                          log_requests=requests)

    def send_log(self, cluster_id: str, chunk: LogChunk) -> None:
        """A piece of output an agent read for a LogRequest; handed to the client waiting."""
        if self._logs is not None and not self._logs.deliver(cluster_id, chunk):
            log.debug("log_chunk_unclaimed", cluster=cluster_id, fence=chunk.fence,
                      request=chunk.request_id)

    def report(self, cluster_id: str, incarnation: int, reports: Sequence[Report],
               observed: Observation | None = None) -> Reported:
        """Commit the reports; a final verdict for each, in order.

        The freed slot is refilled in the same round of commits (docs/architecture.md §8): the
        capacity
        the agent `observed` when it sent them (after the attempts they end released theirs) is
        recorded like a heartbeat's, and once the reports are in the log the leader is told the
        room they will release (`Leader.releasing`), so its next ASSIGN_BATCH follows them in
        the log instead of waiting for their commit. Apply re-validates it after them."""
        if observed is not None:
            self.leader.heartbeat(cluster_id, incarnation, observed.seq,
                                  observed.free.as_tuple())
        freed = self.node.read(lambda s: _releases(s, cluster_id, reports))
        try:
            result = propose(self.node, self.leader, c.ReportBatch(
                cluster_id, self.clock.now_ms(), self.rng.getrandbits(64), tuple(reports)),
                appended=lambda: self.leader.releasing(cluster_id, freed))
        finally:
            self.leader.released(cluster_id, freed)
        assert isinstance(result, ReportResult), result
        verdicts = tuple(Verdict(report.fence, verdict, report.kind)
                         for report, verdict in zip(reports, result.verdicts, strict=True))
        return Reported(self.node.term(), verdicts)


def _register_command(registration: Registration, now_ms: int) -> c.ClusterRegister:
    """The CLUSTER_REGISTER a registration asks for, without its known attempts (the gateway
    adds those the state knows); RaftschedError when the state machine would refuse it as
    malformed or the agent lists more attempts than one registration may."""
    if len(registration.known) > limits.MAX_REGISTER_KNOWN_ATTEMPTS:
        raise RaftschedError(Code.RESOURCE_EXHAUSTED,
                             f"known: {len(registration.known):,} attempts, over "
                             f"MAX_REGISTER_KNOWN_ATTEMPTS={limits.MAX_REGISTER_KNOWN_ATTEMPTS:,}")
    capacity = registration.capacity
    command = c.ClusterRegister(
        registration.cluster_id, registration.incarnation, registration.capabilities,
        capacity.cpu_milli, capacity.memory_mb, capacity.gpu, now_ms, (), registration.custom,
        registration.queue_depth)
    problem = cluster_register_problem(command)
    if problem is not None:
        raise RaftschedError(Code.INVALID_ARGUMENT, problem)
    return command


def split_known(state: State, cluster_id: str, known: Sequence[KnownAttempt],
                ) -> tuple[list[KnownAttempt], list[KillDirective]]:
    """The agent's attempts that reconciliation acts on — live here, or placed here, ended and
    still running (`queries.attempt_of_cluster`, the rule apply re-checks) — and, apart, the running
    ones the state does not know as this cluster's (an unknown job, task or fence, or another
    cluster's attempt): not ours, to be stopped by the agent with nothing recorded. A finished
    attempt the state does not know needs nothing: its report is answered not_found. O(known)."""
    cluster = state.clusters.get(cluster_id)
    live = cluster.live if cluster is not None else {}
    ours: list[KnownAttempt] = []
    stop: list[KillDirective] = []
    for held in known:
        if held.fence in live:
            ours.append(held)
        elif not held.running:
            continue
        elif attempt_of_cluster(state, cluster_id, held.job_id, held.task_id,
                                    held.fence) is not None:
            ours.append(held)
        else:
            stop.append(KillDirective(held.job_id, held.task_id, held.fence))
    return ours, stop


def _releases(state: State, cluster_id: str, reports: Sequence[Report],
              ) -> dict[int, tuple[int, int, int]]:
    """fence -> resources of the live attempts on this cluster that these reports end."""
    cluster = state.clusters.get(cluster_id)
    if cluster is None:
        return {}
    freed = {}
    for report in reports:
        if report.kind == ReportKind.STARTED or report.fence not in cluster.live:
            continue
        job_id, index = cluster.live[report.fence]
        task = state.jobs[job_id].tasks[index]
        if (job_id, task.spec.id) != (report.job_id, report.task_id):
            continue
        if report.kind == ReportKind.REJECTED and task.state != TaskState.ASSIGNED:
            continue  # a rejection of a running attempt is late: it releases nothing
        spec = task.spec
        freed[report.fence] = (spec.cpu_milli, spec.memory_mb, spec.gpu)
    return freed


def _registered(state: State, cluster_id: str, incarnation: int) -> bool:
    """The leader knows this incarnation and has nothing for it that needs a registration. A
    cluster owed kills it could not record (`Cluster.kills_unrecorded`) is asked to register
    again once its agent has confirmed enough of them that fewer than half the bound
    (MAX_KILL_DIRECTIVES_PER_CLUSTER) are pending: the registration re-derives each kill still
    owed, and the cluster takes new work again."""
    cluster = state.clusters.get(cluster_id)
    if cluster is None or cluster.incarnation != incarnation \
            or cluster.status == c.ClusterStatus.LOST:
        return False
    return (not cluster.kills_unrecorded
            or 2 * len(cluster.kills) >= limits.MAX_KILL_DIRECTIVES_PER_CLUSTER)


# --- what an agent must hear now ------------------------------------------------------------------


def _incarnation(state: State, cluster_id: str) -> int | None:
    cluster = state.clusters.get(cluster_id)
    return None if cluster is None else cluster.incarnation


def deliveries(state: State, cluster_id: str,
               due: Callable[[list[tuple[int, int]], int], set[tuple[int, int]]] | None = None,
               ) -> tuple[list[Assignment], list[KillDirective]]:
    """What a cluster's agent must hear now: committed attempts still ASSIGNED to it and
    pending kill directives, as (fence, 0) and (fence, 1) items; `due` picks which of them to
    send now (the leader's redelivery timer), given the bound: at most
    limits.MAX_DELIVERIES_PER_HEARTBEAT of each kind, in the order they were committed.
    Runs under the apply lock: O(live attempts and kills of this cluster)."""
    cluster = state.clusters[cluster_id]
    pending = [(fence, 0) for fence, (job_id, index) in cluster.live.items()
               if _current_state(state, job_id, index, fence) == AttemptState.ASSIGNED]
    pending += [(fence, 1) for fence in cluster.kills]
    pending += [(fence, 1) for fence in cluster.withdrawing if fence not in cluster.kills]
    bound = limits.MAX_DELIVERIES_PER_HEARTBEAT
    chosen = set(pending) if due is None else due(pending, bound)
    assignments: list[Assignment] = []
    kills: list[KillDirective] = []
    inputs_bytes = 0
    for fence, kind in pending:
        if (fence, kind) not in chosen:
            continue
        if kind == 0 and len(assignments) < bound \
                and inputs_bytes <= limits.MAX_DELIVERED_INPUTS_BYTES:
            job_id, index = cluster.live[fence]
            job = state.jobs[job_id]
            task = job.tasks[index]
            assert task.current is not None
            assignments.append(_assignment(job, task, task.current.number, fence))
            inputs_bytes += len(assignments[-1].inputs)
        elif kind == 1 and len(kills) < bound:
            if fence in cluster.kills:
                job_id, task_id = cluster.kills[fence]
                kills.append(KillDirective(job_id, task_id, fence))
            else:  # late binding: take it back from the local queue unless it started
                job_id, task_id = cluster.withdrawing[fence]
                kills.append(KillDirective(job_id, task_id, fence, withdraw=True))
    return assignments, kills


def _current_state(state: State, job_id: str, index: int, fence: int) -> AttemptState:
    attempt = state.jobs[job_id].tasks[index].current
    assert attempt is not None and attempt.fence == fence
    return attempt.state


def _assignment(job: Job, task: Task, number: int, fence: int) -> Assignment:
    spec = task.spec
    # a task with templates runs what they resolved to when its upstream tasks were done
    command, env, cwd = (spec.command, spec.env, spec.cwd) if task.resolved is None else (
        task.resolved.command, task.resolved.env, task.resolved.cwd)
    return Assignment(
        job_id=job.id, task_id=spec.id, fence=fence, attempt=number, command=tuple(command),
        env=dict(env), cwd=cwd or "",
        resources=Resources(spec.cpu_milli, spec.memory_mb, spec.gpu),
        # Stable across a task's attempts (the fence tells attempts apart): external effects
        # keyed by it happen once per task.
        timeout_ms=spec.timeout_ms or 0, idempotency_key=task_key(job.id, spec.id),
        kill_grace_ms=spec.grace_ms or 0, checkpoint=spec.checkpoint, tenant=job.spec.tenant,
        inputs=task_inputs(job, task),
    )

