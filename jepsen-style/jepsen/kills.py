"""Kill liveness, judged on the replayed log (the checker feeds it every applied command).

A kill is owed when the scheduler ends an attempt its agent may still run — cancelled, timed
out, preempted, lost — other than by that agent's own report. It is settled by the agent's
report ending that fence (KILLED, or FINISHED / REJECTED: the process is gone either way), or by
a registration of that cluster that does not list the fence as running. Time is the replicated
time (`now_ms` of the commands), and it counts only while the cluster is READY: a cluster cut
off (SUSPECT, LOST) cannot hear a kill, and its clock starts again when it is READY again.

- kill_liveness: every kill owed to an honest cluster's agent is settled within
  KILL_LIVENESS_BOUND_S of READY time. (Before issue 21's fix, one agent certificate could fill
  the global bound of kill directives with phantom attempts, after which kills owed to every
  other cluster were silently dropped: the tasks of cancelled jobs ran on.)
- hostile_no_kills: the hostile agent's cluster, where nothing was ever placed, never holds a
  kill directive, whatever attempts its agent claims.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from raftsched.state import commands as c
from raftsched.state.model import LIVE_ATTEMPT_STATES, State

KILL_LIVENESS_BOUND_S = 15.0
"""READY time within which a kill owed to an honest agent must be settled. Above what a fault
can hold a READY cluster's agent off (a leader change is noticed by an agent within its 6 s
heartbeat deadline; a silent cluster goes SUSPECT after 3 s), plus the agent's report backoff
(at most 5 s)."""

Violate = Callable[[str, str, tuple[int, ...], tuple[str, ...]], None]
"""(check, message, log indices, keys): how a finding is reported."""


@dataclass
class Owed:
    fence: int
    cluster_id: str
    task: str
    """job/task"""
    outcome: str
    index: int
    """Log index of the command that ended the attempt."""
    since_ms: int | None
    """Replicated time the clock (re)started; None while the cluster is not READY."""


@dataclass
class KillLiveness:
    honest: frozenset[str] | None
    """Clusters whose agents are honest (None: every cluster but the hostile one)."""
    hostile: str | None
    bound_ms: int = int(KILL_LIVENESS_BOUND_S * 1000)
    owed: dict[int, Owed] = field(default_factory=dict)
    latencies_ms: list[int] = field(default_factory=list)
    """READY time from each settled kill's end to its settling."""
    unjudged: int = 0
    """Owed kills the log ends (or the cluster is removed) before they could be judged."""
    checked: int = 0
    hostile_checked: int = 0
    _live: dict[int, tuple[str, str, int]] = field(default_factory=dict)

    def _watched(self, cluster_id: str) -> bool:
        if cluster_id == self.hostile:
            return False
        return self.honest is None or cluster_id in self.honest

    def before(self, state: State) -> None:
        """Remember the live attempts of watched clusters (fence -> cluster, job, task index)."""
        self._live = {fence: (cluster.id, job_id, index)
                      for cluster in state.clusters.values() if self._watched(cluster.id)
                      for fence, (job_id, index) in cluster.live.items()}

    def after(self, index: int, command: c.Command, state: State, violate: Violate) -> None:
        self._record_ended(index, command, state)
        self._settle(command, state)
        self._tick(state, violate)
        if isinstance(command, c.ClusterRegister) and command.cluster_id == self.hostile:
            self._check_hostile(index, state, violate)

    def finish(self) -> None:
        self.unjudged += len(self.owed)
        self.owed.clear()

    # -- the steps -------------------------------------------------------------------------------

    def _record_ended(self, index: int, command: c.Command, state: State) -> None:
        for fence, (cluster_id, job_id, task_index) in self._live.items():
            job = state.jobs.get(job_id)
            task = None if job is None else job.tasks[task_index]
            attempt = None if task is None else next(
                (a for a in reversed(task.attempts) if a.fence == fence), None)
            if task is None or attempt is None or attempt.state in LIVE_ATTEMPT_STATES:
                continue
            if _own_word(command, cluster_id, fence):
                continue  # the agent itself said it ended, or that it does not hold it
            cluster = state.clusters.get(cluster_id)
            ready = cluster is not None and cluster.status == c.ClusterStatus.READY
            self.owed[fence] = Owed(fence, cluster_id, f"{job_id}/{task.spec.id}",
                                    attempt.state.name, index, state.now_ms if ready else None)

    def _settle(self, command: c.Command, state: State) -> None:
        settled: Iterable[int] = ()
        if isinstance(command, c.ReportBatch):
            settled = [r.fence for r in command.items if r.kind not in _NOT_GONE
                       and r.fence in self.owed
                       and self.owed[r.fence].cluster_id == command.cluster_id]
        elif isinstance(command, c.ClusterRegister):
            running = {k.fence for k in command.known if k.running}
            settled = [fence for fence, owed in self.owed.items()
                       if owed.cluster_id == command.cluster_id and fence not in running]
        elif isinstance(command, c.ClusterRemove):
            gone = [f for f, o in self.owed.items() if o.cluster_id == command.cluster_id]
            self.unjudged += len(gone)
            for fence in gone:
                del self.owed[fence]
        for fence in settled:
            owed = self.owed.pop(fence)
            self.checked += 1
            if owed.since_ms is not None:
                self.latencies_ms.append(max(0, state.now_ms - owed.since_ms))

    def _tick(self, state: State, violate: Violate) -> None:
        """Pause or restart each owed kill's clock by its cluster's status; report the overdue."""
        for fence, owed in list(self.owed.items()):
            cluster = state.clusters.get(owed.cluster_id)
            if cluster is None or cluster.status != c.ClusterStatus.READY:
                owed.since_ms = None
            elif owed.since_ms is None:
                owed.since_ms = state.now_ms
            elif state.now_ms - owed.since_ms > self.bound_ms:
                del self.owed[fence]
                self.checked += 1
                violate("kill_liveness",
                        f"{owed.task} fence {fence} on {owed.cluster_id} ended {owed.outcome} "
                        f"at log index {owed.index}; its agent neither reported it ended nor "
                        f"registered without it within {self.bound_ms / 1000:g} s of "
                        f"replicated time while {owed.cluster_id} was READY",
                        (owed.index,), (owed.task, f"fence={fence}"))

    def _check_hostile(self, index: int, state: State, violate: Violate) -> None:
        self.hostile_checked += 1
        cluster = state.clusters.get(self.hostile or "")
        if cluster is not None and cluster.kills:
            violate("hostile_no_kills",
                    f"after the hostile agent's registration at log index {index}, its cluster "
                    f"{cluster.id} holds {len(cluster.kills)} kill directive(s), though nothing "
                    "was ever placed there", (index,), (cluster.id,))


_NOT_GONE = frozenset({c.ReportKind.STARTED, c.ReportKind.QUEUED})
"""Reports that say the attempt is still there (running, or held in the agent's local queue):
they settle no kill."""


def _own_word(command: c.Command, cluster_id: str, fence: int) -> bool:
    """The command that ended the attempt is its agent's own report of that fence ending, or
    its agent's registration without it."""
    if isinstance(command, c.ReportBatch):
        return command.cluster_id == cluster_id and any(
            r.fence == fence and r.kind not in _NOT_GONE for r in command.items)
    return isinstance(command, c.ClusterRegister) and command.cluster_id == cluster_id
