"""The leader's loop: placement, time, and agent health — the only place that proposes on its
own initiative.

It runs on every replica and acts only while the Raft node leads. On winning an election it first
commits a barrier (which also announces its gRPC address) and gives every cluster a fresh
heartbeat grace period. Then, until it loses leadership, each round it:
- plans placements from the committed state (`placement.plan`, pure) and proposes them as one
  ASSIGN_BATCH; the state machine re-validates every item at apply; agents learn of an
  assignment only from committed state (see `views.deliveries`), never before it commits;
- proposes a TICK when a timer is due (or every TICK_INTERVAL_S for retention);
- fires schedules' due times (`firing.Firing`: SCHEDULE_FIRE, issue 25);
- moves clusters whose agents went quiet to SUSPECT, then LOST (soft heartbeat state lives here,
  in memory only, like Nomad's heartbeat timers).
Time and entropy come from the injected clock and rng, stamped into the commands.
"""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from raftsched import limits
from raftsched.clock import Clock
from raftsched.errors import RaftschedError
from raftsched.eventlog import EventLogger
from raftsched.replica.firing import Firing
from raftsched.replica.proposals import Committed, Proposer, Refused, error_of, for_leader
from raftsched.replica.raft.port import Pending, RaftPort  # noqa: F401  (Pending: kept importable here)
from raftsched.state import commands as c
from raftsched.state import placement
from raftsched.state.placement import Free
from raftsched.state.results import AssignResult, BarrierResult

log = EventLogger("raftsched.leader")

LOOP_INTERVAL_S = 0.05
"""Longest sleep between rounds when nothing wakes the loop."""
TICK_INTERVAL_S = 1.0
"""A TICK is proposed at least this often while leading (timers, retention)."""
SUSPECT_AFTER_S = 5.0
"""A READY cluster whose agent has not heartbeated this long becomes SUSPECT."""
LOST_AFTER_S = 30.0
"""A SUSPECT cluster silent this long (since its last heartbeat) becomes LOST."""
PLACEMENT_BATCH = 2_000
"""Placements proposed per ASSIGN_BATCH."""
UNUSABLE_EVERY_S = 5.0
"""How often the leader looks for free room that fits no waiting task (`placement.unusable`:
O(clusters x task shapes), so not every round)."""
REDELIVER_AFTER_S = 1.0
"""An assignment or kill directive already sent to an agent is sent again only after this long
without the agent's answer being committed (the message or its answer may have been lost)."""


Node = RaftPort
"""What the leader needs of the Raft node: the replica's one port to Raft."""


@dataclass(slots=True)
class AgentHealth:
    last_heartbeat_s: float
    seq: int = 0
    free: tuple[int, int, int] | None = None
    incarnation: int = 0
    sent: dict[tuple[int, int], float] = field(default_factory=dict)
    """(fence, 0 assignment | 1 kill) -> when it was last sent to this incarnation."""


@dataclass
class LeaderConfig:
    raft_address: str
    grpc_address: str
    suspect_after_s: float = SUSPECT_AFTER_S
    lost_after_s: float = LOST_AFTER_S
    tick_interval_s: float = TICK_INTERVAL_S
    loop_interval_s: float = LOOP_INTERVAL_S
    on_office: tuple[Callable[[int], bytes], ...] = ()
    """Commands (encoded, given the proposal time in ms) proposed once each time this replica
    takes office, after its barrier (e.g. the bootstrap admin token: a TOKEN_PUT that changes
    nothing once an admin token exists)."""


@dataclass
class _Term:
    """What the loop knows of the term it leads in."""

    term: int = -1
    confirmed: bool = False
    health: dict[str, AgentHealth] = field(default_factory=dict)
    last_tick_s: float = 0.0
    releasing: dict[str, dict[int, Free]] = field(default_factory=dict)
    """cluster -> fence -> resources that reports proposed but not yet committed will release
    (see `releasing`)."""
    unusable: dict[str, Free] = field(default_factory=dict)
    last_unusable_s: float = float("-inf")
    unrecorded: dict[str, int] = field(default_factory=dict)
    """cluster -> its count of kills not recorded (`Cluster.kills_unrecorded`) last logged."""


class Leader:
    def __init__(self, node: Node, clock: Clock, rng: random.Random, config: LeaderConfig,
                 version: Callable[[], int] = lambda: -1,
                 fire_lag: Callable[[float], None] = lambda _s: None) -> None:
        """`version` moves whenever the applied state changes (service.ChangeFeed.version);
        planning is skipped while nothing changed since a plan that placed nothing.
        `fire_lag` hears each schedule fire's lag (nominal time to proposal, seconds)."""
        self._node = node
        self._proposer = Proposer(node)
        self._version = version
        self._idle_version: int | None = None
        self._clock = clock
        self._rng = rng
        self._config = config
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._term = _Term()
        self._thread: threading.Thread | None = None
        self.firing = Firing(node, self._proposer, clock, fire_lag)
        """The schedules' timer (issue 25)."""

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="raftsched-leader", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def wake(self) -> None:
        """Something changed (a submit, a report): run a round now."""
        self._wake.set()

    def leading(self) -> bool:
        """Leads and has committed its election barrier in the current term."""
        with self._lock:
            return self._term.confirmed and self._term.term == self._node.term() \
                and self._node.is_leader()

    # -- soft state from agents ------------------------------------------------------------------

    def heartbeat(self, cluster_id: str, incarnation: int, seq: int,
                  free: tuple[int, int, int] | None) -> bool:
        """Record a heartbeat; False if it is older than one already seen (ignore it)."""
        now = self._clock.monotonic_s()
        with self._lock:
            health = self._term.health.get(cluster_id)
            if health is not None and (incarnation, seq) < (health.incarnation, health.seq):
                return False
            if health is None or health.free != free:
                self._idle_version = None  # new room may make a waiting task placeable
            sent = health.sent if health is not None and health.incarnation == incarnation \
                else {}
            self._term.health[cluster_id] = AgentHealth(now, seq, free, incarnation, sent)
        return True

    def due(self, cluster_id: str, items: list[tuple[int, int]],
            limit: int) -> set[tuple[int, int]]:
        """Which of `items` ((fence, 0 assignment | 1 kill) pending for this cluster, in order)
        to send now: those never sent to this agent incarnation in this term, or sent over
        REDELIVER_AFTER_S ago, at most `limit` of each kind. Marks only those sent: an item left
        out by the limit goes with the next heartbeat, not after the redelivery interval (it
        did, and a cluster given 2,000 assignments idled ~0.8 s after running the first 1,000).
        Forgets what is no longer pending, so the memory stays bounded by it."""
        now = self._clock.monotonic_s()
        with self._lock:
            health = self._term.health.get(cluster_id)
            previous = {} if health is None else health.sent
            sent = {item: previous[item] for item in items if item in previous}
            due: set[tuple[int, int]] = set()
            taken = [0, 0]
            for item in items:
                kind = item[1]
                if taken[kind] < limit \
                        and now - sent.get(item, -REDELIVER_AFTER_S) >= REDELIVER_AFTER_S:
                    due.add(item)
                    taken[kind] += 1
                    sent[item] = now
            if health is not None:
                health.sent = sent
            return due

    def registered(self, cluster_id: str, incarnation: int) -> None:
        """A (re-)registration committed: the agent is alive now, whatever its last heartbeat
        sequence was. Its silence timer and redelivery memory start over."""
        now = self._clock.monotonic_s()
        with self._lock:
            self._term.health[cluster_id] = AgentHealth(now, 0, None, incarnation)
            self._idle_version = None

    def heartbeat_age_ms(self, cluster_id: str) -> int:
        with self._lock:
            health = self._term.health.get(cluster_id)
            if health is None or not self._term.confirmed:
                return -1
            return round((self._clock.monotonic_s() - health.last_heartbeat_s) * 1000)

    def unusable(self) -> dict[str, Free]:
        """The free room no RUNNABLE task fits, per cluster (`placement.unusable`), as of the
        last look (every UNUSABLE_EVERY_S while leading; {} before the first)."""
        with self._lock:
            return dict(self._term.unusable)

    def reported_free(self) -> dict[str, tuple[int, int, int]]:
        with self._lock:
            return {cid: h.free for cid, h in self._term.health.items() if h.free is not None}

    def releasing(self, cluster_id: str, freed: dict[int, Free]) -> None:
        """Reports ending these attempts (fence -> their resources) were just appended to the
        log and will commit before anything proposed from now on: plan as if their room were
        free already, so the next ASSIGN_BATCH rides in the same round of commits instead of
        waiting for theirs (apply re-validates it, after them). Wakes the loop."""
        if not freed:
            return
        with self._lock:
            self._term.releasing.setdefault(cluster_id, {}).update(freed)
            self._idle_version = None
        self._wake.set()

    def released(self, cluster_id: str, fences: Iterable[int]) -> None:
        """Those reports' outcome is known (committed or not): the state tells from now on."""
        with self._lock:
            pending = self._term.releasing.get(cluster_id)
            if pending is None:
                return
            for fence in fences:
                pending.pop(fence, None)
            if not pending:
                del self._term.releasing[cluster_id]

    def _releasing(self) -> dict[str, dict[int, Free]]:
        with self._lock:
            return {cid: dict(fences) for cid, fences in self._term.releasing.items()}

    # -- the loop --------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self._config.loop_interval_s)
            self._wake.clear()
            try:
                self._round()
            except RaftschedError as error:  # not leader any more, or an unknown outcome
                log.info("leader_round_interrupted", code=error.code, reason=error.message)
            except Exception:
                log.exception("leader_round_failed")

    def _round(self) -> None:
        if not self._node.is_leader():
            with self._lock:
                self._term.confirmed = False
            return
        term = self._node.term()
        if term != self._term.term or not self._term.confirmed:
            self._take_office(term)
            return
        self._check_health()
        self._warn_unrecorded_kills()
        self.firing.fire_due()  # first: a run fired now is placed in this very round
        self._place()
        self._tick_if_due()
        self._look_for_unusable()

    def _look_for_unusable(self) -> None:
        """Every UNUSABLE_EVERY_S: which free room fits no waiting task (a metric)."""
        now = self._clock.monotonic_s()
        if now - self._term.last_unusable_s < UNUSABLE_EVERY_S:
            return
        free = self.reported_free()
        now_ms = self._clock.now_ms()
        found = self._node.read(lambda s: placement.unusable(s, now_ms=now_ms,
                                                             reported_free=free))
        with self._lock:
            self._term.unusable, self._term.last_unusable_s = found, now

    def _take_office(self, term: int) -> None:
        nonce = uuid.uuid4().hex
        barrier = c.Barrier(nonce, self._clock.now_ms(), self._config.raft_address,
                            self._config.grpc_address)
        if for_leader(self._proposer.propose(barrier), "barrier") != BarrierResult(nonce):
            return
        now = self._clock.monotonic_s()
        clusters = self._node.read(lambda s: list(s.clusters))
        with self._lock:
            # A fresh grace period for every cluster: silence under the old leader is not
            # evidence against an agent that has not yet found us.
            self._term = _Term(term=term, confirmed=True, last_tick_s=now,
                               health={cid: AgentHealth(now) for cid in clusters})
        log.info("leader_elected", term=term, raft=self._config.raft_address,
                 grpc=self._config.grpc_address, clusters=len(clusters))
        for command in self._config.on_office:
            outcome = self._proposer.propose(command(self._clock.now_ms()))
            if isinstance(outcome, Refused):
                log.warning("office_command_rejected", code=outcome.code.value,
                            reason=outcome.reason)
            elif not isinstance(outcome, Committed):
                log.warning("office_command_failed", error=str(error_of(outcome)))

    def _place(self) -> None:
        # Unplaceable tasks stay in the queue; re-planning them every round would cost what is
        # stored, not what is placed. Plan again only once something was applied (a submit, a
        # finished attempt, a cluster change) or an agent reported new free capacity.
        version = self._version()
        if version == self._idle_version and version != -1:
            return
        free = self.reported_free()
        releasing = self._releasing()
        started_s = self._clock.monotonic_s()
        now_ms = self._clock.now_ms()
        planned = self._node.read(lambda s: placement.plan(s, now_ms=now_ms,
                                                           max_items=PLACEMENT_BATCH,
                                                           reported_free=free,
                                                           releasing=releasing))
        planned_s = self._clock.monotonic_s()
        if not planned.placements and not planned.reservations and not planned.preemptions:
            self._idle_version = version
            return
        self._idle_version = None
        if planned.reservations:
            log.info("reserved", clusters=[r.cluster_id for r in planned.reservations],
                     tasks=[f"{r.job_id}/{r.task_id}" for r in planned.reservations])
        if planned.preemptions:
            log.info("preempting", fences=[p.fence for p in planned.preemptions],
                     victims=[f"{p.job_id}/{p.task_id}" for p in planned.preemptions],
                     by=[f"{p.by_job_id}/{p.by_task_id}" for p in planned.preemptions])
        result = for_leader(self._proposer.propose(
            c.AssignBatch(now_ms, tuple(planned.placements), tuple(planned.reservations),
                          tuple(planned.preemptions), tuple(planned.withdrawals))),
            "assign_batch")
        if isinstance(result, AssignResult):
            log.debug("assigned", count=len(result.assigned), dropped=len(result.dropped),
                      plan_ms=round((planned_s - started_s) * 1000, 2),
                      commit_ms=round((self._clock.monotonic_s() - planned_s) * 1000, 2))
            if result.assigned:
                self._wake.set()  # more may be placeable

    def _tick_if_due(self) -> None:
        now = self._clock.monotonic_s()
        now_ms = self._clock.now_ms()
        due = self._node.read(lambda s: bool(s.timers) and s.timers[0][0] <= now_ms)
        if not due and now - self._term.last_tick_s < self._config.tick_interval_s:
            return
        self._term.last_tick_s = now
        for_leader(self._proposer.propose(c.Tick(now_ms, self._rng.getrandbits(64))), "tick")

    def _check_health(self) -> None:
        now = self._clock.monotonic_s()
        statuses = self._node.read(
            lambda s: {cid: cl.status for cid, cl in s.clusters.items()})
        for cluster_id, status in statuses.items():
            with self._lock:
                health = self._term.health.setdefault(cluster_id, AgentHealth(now))
                silent_s = now - health.last_heartbeat_s
            wanted = self._wanted_status(status, silent_s)
            if wanted is not None:
                reason = f"no heartbeat for {silent_s:.1f} s"
                for_leader(self._proposer.propose(c.ClusterStatusChange(
                    cluster_id, wanted, self._clock.now_ms(), reason)), "cluster_status")
                log.info("cluster_status", cluster=cluster_id, status=wanted.name, reason=reason)

    def _warn_unrecorded_kills(self) -> None:
        """A warning each time a cluster's count of kills it could not record grows (its agent
        does not confirm kills: `Cluster.kills_unrecorded`), and a line when it is back to 0."""
        counts = self._node.read(lambda s: {
            cid: (cl.kills_unrecorded, len(cl.kills)) for cid, cl in s.clusters.items()
            if cl.kills_unrecorded or cid in self._term.unrecorded})
        for cluster_id, (count, pending) in sorted(counts.items()):
            logged = self._term.unrecorded.get(cluster_id, 0)
            if count > logged:
                log.warning("kills_unrecorded", cluster=cluster_id, unrecorded=count,
                            pending=pending, bound=limits.MAX_KILL_DIRECTIVES_PER_CLUSTER,
                            effect="no new work there until its agent confirms kills and "
                                   "registers again")
            elif count == 0:
                log.info("kills_recorded_again", cluster=cluster_id, pending=pending)
            if count:
                self._term.unrecorded[cluster_id] = count
            else:
                self._term.unrecorded.pop(cluster_id, None)

    def _wanted_status(self, status: c.ClusterStatus, silent_s: float) -> c.ClusterStatus | None:
        if status == c.ClusterStatus.READY and silent_s >= self._config.suspect_after_s:
            return c.ClusterStatus.SUSPECT
        if status == c.ClusterStatus.SUSPECT:
            if silent_s >= self._config.lost_after_s:
                return c.ClusterStatus.LOST
            if silent_s < self._config.suspect_after_s:
                return c.ClusterStatus.READY  # it came back before it was lost
        return None
