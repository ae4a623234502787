"""Clusters: registration (and reconciling what the agent holds with what the state placed
there), status changes (LOST replaces or waits per `on_lost`), drain, and removal."""

from __future__ import annotations

from raftsched import limits
from raftsched.errors import Code
from raftsched.spec.issue import show
from raftsched.spec.model import OnLost
from raftsched.state.commands import (
    ClusterDrain,
    ClusterRegister,
    ClusterRemove,
    ClusterStatus,
    ClusterStatusChange,
)
from raftsched.state.lifecycle import (
    add_kill,
    end_attempt,
    infra_failure,
    mark_started,
    promote_queued,
    promotes_on_free,
    refresh_overcommit,
)
from raftsched.state.model import AttemptState, Cluster, State
from raftsched.state.outcome import Applied, Rejected
from raftsched.state.queries import attempt_of_cluster
from raftsched.state.queues import note_cluster, release_reservation
from raftsched.state.results import (
    ClusterDrained,
    ClusterRegistered,
    ClusterRemoved,
    ClusterStatusChanged,
)
from raftsched.state.rules import cluster_register_problem
from raftsched.state.text import visible

_NOT_STARTED = frozenset({AttemptState.ASSIGNED, AttemptState.QUEUED})


def apply_cluster_register(state: State,
                           cmd: ClusterRegister) -> Applied[ClusterRegistered] | Rejected:
    problem = cluster_register_problem(cmd)
    if problem is not None:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    cluster = state.clusters.get(cmd.cluster_id)
    created = cluster is None
    if cluster is None:
        if len(state.clusters) >= limits.MAX_CLUSTERS:
            return Rejected(Code.RESOURCE_EXHAUSTED, f"MAX_CLUSTERS={limits.MAX_CLUSTERS} reached")
        cluster = Cluster(
            id=cmd.cluster_id, incarnation=cmd.incarnation,
            capabilities=frozenset(cmd.capabilities), cpu_milli=cmd.cpu_milli,
            memory_mb=cmd.memory_mb, gpu=cmd.gpu, status=ClusterStatus.READY,
            status_since_ms=cmd.now_ms, custom=dict(cmd.custom),
        )
        state.clusters[cluster.id] = cluster
        note_cluster(state, cluster.id, cluster.status.name, "registered")
    elif cmd.incarnation < cluster.incarnation:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"cluster {cluster.id}: incarnation {cmd.incarnation} is older than "
                        f"{cluster.incarnation}")
    cluster.incarnation = cmd.incarnation
    cluster.capabilities = frozenset(cmd.capabilities)
    cluster.cpu_milli, cluster.memory_mb, cluster.gpu = cmd.cpu_milli, cmd.memory_mb, cmd.gpu
    cluster.custom = dict(cmd.custom)
    cluster.queue_depth = cmd.queue_depth
    if cluster.status != ClusterStatus.READY:
        cluster.status, cluster.status_since_ms = ClusterStatus.READY, cmd.now_ms
        note_cluster(state, cluster.id, cluster.status.name, "registered")
    lost, kills = _reconcile(state, cluster, cmd)
    refresh_overcommit(cluster)
    if cluster.queued and promotes_on_free(state):  # the capacity may have grown
        promote_queued(state, cluster)
    return Applied(ClusterRegistered(cluster.id, created=created, lost=lost, kills=kills))


def _reconcile(state: State, cluster: Cluster, cmd: ClusterRegister) -> tuple[int, int]:
    """Match the agent's attempts with ours: current ones resume, unknown ones are lost (the
    agent never admitted them, so nothing runs), and stale ones the agent still runs are killed
    — only those the state placed on this very cluster (`attempt_of_cluster`). What else the
    agent claims (unknown jobs, tasks or fences, another cluster's attempts) is recorded nowhere:
    the gateway tells the agent to stop those itself (`Registered.stop`). The count of kills not
    recorded starts over: this registration re-derives every kill the agent is owed."""
    known = {k.fence: k for k in cmd.known}
    lost = 0
    for fence, (job_id, index) in list(cluster.live.items()):
        job = state.jobs[job_id]
        task = job.tasks[index]
        attempt = task.current
        assert attempt is not None and attempt.fence == fence
        held = known.pop(fence, None)
        if held is None:
            end_attempt(state, job, task, attempt, AttemptState.LOST,
                        "agent re-registered without this attempt", kill=False)
            infra_failure(state, job, task, immediate=True, entropy=0)
            lost += 1
        elif held.running and attempt.state in _NOT_STARTED:
            mark_started(state, job, task, attempt)
    cluster.kills_unrecorded = 0
    kills = 0
    for fence, held in sorted(known.items()):
        # Not running means finished with the result still in the agent's outbox: no kill.
        if held.running and fence not in cluster.kills and attempt_of_cluster(
                state, cluster.id, held.job_id, held.task_id, fence) is not None:
            kills += add_kill(state, cluster, fence, held.job_id, held.task_id)
    return lost, kills


def apply_cluster_status(state: State,
                         cmd: ClusterStatusChange) -> Applied[ClusterStatusChanged] | Rejected:
    cluster = state.clusters.get(cmd.cluster_id)
    if cluster is None:
        return Rejected(Code.NOT_FOUND, f"cluster {cmd.cluster_id} not registered")
    if cluster.status == cmd.status:
        return Applied(ClusterStatusChanged(cluster.id, changed=False, lost=0))
    cluster.status, cluster.status_since_ms = cmd.status, cmd.now_ms
    note_cluster(state, cluster.id, cluster.status.name, cmd.reason)
    lost = 0
    if cmd.status == ClusterStatus.LOST:
        lost = _lose_cluster_attempts(state, cluster, cmd.reason or "cluster lost")
        drop_kills(state, cluster)
    return Applied(ClusterStatusChanged(cluster.id, changed=True, lost=lost))


def _lose_cluster_attempts(state: State, cluster: Cluster, reason: str) -> int:
    """`on_lost: replace` attempts become LOST and their tasks go back to the queue with a new
    fence to come; `on_lost: wait` attempts stay as they are (unknown), never run twice. No
    kill is recorded for them: the agent hears nothing until it registers again, and that
    registration's reconcile kills each one it still runs."""
    lost = 0
    for _fence, (job_id, index) in sorted(cluster.live.items()):
        job = state.jobs[job_id]
        task = job.tasks[index]
        if task.spec.on_lost != OnLost.REPLACE:
            continue
        attempt = task.current
        assert attempt is not None
        end_attempt(state, job, task, attempt, AttemptState.LOST, reason, kill=False)
        infra_failure(state, job, task, immediate=True, entropy=0)
        lost += 1
    return lost


def drop_kills(state: State, cluster: Cluster) -> None:
    """Forget the cluster's kill directives (LOST, removed): its agent cannot hear them until it
    registers again, and that registration re-derives each one it is still owed."""
    state.kill_count -= len(cluster.kills)
    cluster.kills.clear()
    cluster.kills_unrecorded = 0


def apply_cluster_remove(state: State, cmd: ClusterRemove) -> Applied[ClusterRemoved] | Rejected:
    """Forget a cluster an admin decommissions. Refused while anything still runs or may run
    there (live attempts): first cancel or wait, or let the cluster go LOST so its attempts are
    replaced or confirmed dead. Its unconfirmed kill directives go with it: an agent that
    registers again under that id brings the cluster back, and its registration re-derives a
    kill for every stale attempt it still runs. Finished attempts keep its id in their history;
    tasks pinned to it wait (explain says why)."""
    cluster = state.clusters.get(cmd.cluster_id)
    if cluster is None:
        return Rejected(Code.NOT_FOUND, f"cluster {show(cmd.cluster_id)} not found")
    if cluster.live:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"cluster {cmd.cluster_id} still has {len(cluster.live)} live "
                        "attempt(s): stop its agent and wait until it is LOST and its attempts "
                        "are replaced or confirmed dead, or cancel their jobs, then remove it")
    assert not (cluster.reserved_cpu_milli or cluster.reserved_memory_mb or cluster.reserved_gpu)
    drop_kills(state, cluster)
    if cluster.reserved_for is not None:
        job_id, index = cluster.reserved_for
        release_reservation(state, state.jobs[job_id].tasks[index])
    del state.clusters[cmd.cluster_id]
    note_cluster(state, cmd.cluster_id, "REMOVED", "removed by an admin")
    return Applied(ClusterRemoved(cmd.cluster_id))


def apply_cluster_drain(state: State, cmd: ClusterDrain) -> Applied[ClusterDrained] | Rejected:
    cluster = state.clusters.get(cmd.cluster_id)
    if cluster is None:
        return Rejected(Code.NOT_FOUND, f"cluster {show(cmd.cluster_id)} not found")
    changed = cluster.draining != cmd.drain
    cluster.draining = cmd.drain
    cluster.drain_reason = visible(cmd.reason)[:limits.MAX_REASON_CHARS] if cmd.drain else ""
    if changed:  # the event's state: DRAINING, or the status it is back to
        note_cluster(state, cluster.id, "DRAINING" if cmd.drain else cluster.status.name,
                     cluster.drain_reason or "undrained")
    return Applied(ClusterDrained(cluster.id, cmd.drain, changed))
