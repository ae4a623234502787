"""Prometheus metrics of a replica, on an address of the operator's choice (`--metrics-address`).

Two kinds, so that summing over the replicas of one cluster never multiplies a figure:

- **This replica's own** (every replica exports them; `sum()` adds real, separate work):
  `raftsched_replica_leader` (1 on the leader only), `raftsched_raft_term`,
  `raftsched_leader_changes_total` (this replica becoming or ceasing to be leader),
  `raftsched_proposals_total{outcome}` and `raftsched_commit_latency_seconds` (entries this
  replica proposed: append -> applied here, majority commit included),
  `raftsched_raft_connections_closed_total{reason}` (Raft connections closed on a peer that
  broke a bound: `frame_too_large`, `over_cap`, `handshake_timeout`).
- **The replicated state's** (the leader alone exports them, followers omit them: every replica
  holds the same state, so `sum()` over replicas gives the leader's value once, and a query
  keeps working across a failover): tasks by state, jobs, clusters by status, per-cluster
  capacity (total, committed to live attempts, and the free capacity its agent last reported
  to the leader), per-cluster kill directives pending and kills not recorded past the
  cluster's bound, the contention policy's per-tenant and per-cluster figures, and the counts of
  what applying entries did (`model.Stats`: placements and how long tasks waited for them,
  dropped placements, preemptions, retries by class, agents' reports by verdict — late and
  duplicate ones included). Those counts start from zero when the replica starts, like any
  process counter, which `rate()` and `increase()` expect. Stranded tasks (RUNNABLE and not
  placed for 10 minutes, ASSIGNED and not started for 30 s: `model.Aging`, kept on apply; live
  attempts on SUSPECT clusters) and unusable capacity (free room that fits no waiting task, as
  the leader last looked: `placement.unusable`, every few seconds). Schedules (issue 25):
  `raftsched_schedule_fires_total`, `raftsched_schedule_skipped_total{reason}`,
  `raftsched_schedules{paused}` (the state's), and `raftsched_schedule_fire_lag_seconds` (this
  replica's own, as leader: nominal time to proposal).

A scrape never walks jobs or tasks: it reads counters kept on apply, O(clusters + tenants),
under the apply lock (`RaftNode.read`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from raftsched.replica.raft.handshakes import ClosedConnections
from raftsched.replica.raft.port import RaftPort
from raftsched.spec.model import PriorityClass
from raftsched.state import policy
from raftsched.state.commands import ClusterStatus
from raftsched.state.model import (
    ASSIGNED_STRANDED_AFTER_MS,
    PLACEMENT_LATENCY_BUCKETS_MS,
    RUNNABLE_STRANDED_AFTER_MS,
    State,
    TaskState,
)

COMMIT_LATENCY_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                            5.0, 10.0)
"""Sequential commits measure 1.5-3 ms on the development machine; seconds mean trouble."""

FIRE_LAG_BUCKETS_S = (0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0)
"""The leader looks every SCHEDULE_FIRE_PERIOD_S; seconds mean a failover, minutes an outage."""

Free = tuple[int, int, int]


class ReplicaMetrics:
    """The replica's registry: its own counters, and a collector of the replicated state's
    families that the leader alone yields."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.proposals = Counter(
            "raftsched_proposals", "Entries this replica proposed, by how they were answered: "
            "applied, rejected (committed, refused by the state machine), not_leader, unknown.",
            ["outcome"], registry=self.registry)
        self.commit_latency_seconds = Histogram(
            "raftsched_commit_latency_seconds", "Entries this replica proposed: from append to "
            "applied here (a majority's fsync and ack included).",
            buckets=COMMIT_LATENCY_BUCKETS_S, registry=self.registry)
        self.leader_changes = Counter(
            "raftsched_leader_changes", "Times this replica became or ceased to be the leader.",
            registry=self.registry)
        for outcome in ("applied", "rejected", "not_leader", "unknown"):
            self.proposals.labels(outcome)  # present at 0 from the start: rate() sees the first
        self.fire_lag_seconds = Histogram(
            "raftsched_schedule_fire_lag_seconds", "Schedules' fires this replica proposed as "
            "leader: from the nominal time to the proposal (a catch-up after a failover shows "
            "here).", buckets=FIRE_LAG_BUCKETS_S, registry=self.registry)

    def fire_lag(self, seconds: float) -> None:
        """`Leader(fire_lag=...)`: one fired nominal time's lag."""
        self.fire_lag_seconds.observe(seconds)

    def proposal(self, outcome: str, elapsed_s: float) -> None:
        """`RaftNode(on_proposal=...)`: called once per entry this replica proposed."""
        self.proposals.labels(outcome).inc()
        if outcome in ("applied", "rejected"):
            self.commit_latency_seconds.observe(elapsed_s)

    def leadership_changed(self, is_leader: bool) -> None:
        """`RaftNode(on_leader_change=...)`."""
        self.leader_changes.inc()

    def watch(self, node: RaftPort, leading: Callable[[], bool],
              reported_free: Callable[[], dict[str, Free]],
              unusable: Callable[[], dict[str, Free]] = dict) -> None:
        self.registry.register(StateCollector(node, leading, reported_free, unusable))

    def serve(self, host: str, port: int) -> None:
        """Serve /metrics on host:port from a daemon thread (raises OSError if it cannot bind)."""
        start_http_server(port, addr=host, registry=self.registry)


class StateCollector(Collector):
    def __init__(self, node: RaftPort, leading: Callable[[], bool],
                 reported_free: Callable[[], dict[str, Free]],
                 unusable: Callable[[], dict[str, Free]] = dict) -> None:
        self._node = node
        self._leading = leading
        self._reported_free = reported_free
        self._unusable = unusable

    def collect(self) -> Iterator[Metric]:
        leader = self._leading()
        yield GaugeMetricFamily("raftsched_replica_leader",
                                "1 on the replica that leads (sum over replicas: 1 when the "
                                "cluster has a leader)", value=1 if leader else 0)
        yield GaugeMetricFamily("raftsched_raft_term", "this replica's current Raft term",
                                value=self._node.term())
        yield closed_connections_family(self._node.closed_connections())
        if not leader:
            return  # the replicated state's figures come from the leader only (see above)
        free = self._reported_free()
        yield from self._node.read(lambda state: state_families(state, free))
        yield unusable_family(self._unusable())


def closed_connections_family(closed: ClosedConnections) -> Metric:
    """`RaftNode.closed_connections()`, by reason."""
    family = CounterMetricFamily(
        "raftsched_raft_connections_closed", "Raft connections this replica closed on a peer "
        "that broke a bound: a frame over its size (frame_too_large), an unauthenticated "
        "connection over the caps per address or in all (over_cap), or one not authenticated "
        "within the handshake timeout (handshake_timeout).", labels=["reason"])
    family.add_metric(["frame_too_large"], closed.frame_too_large)
    family.add_metric(["over_cap"], closed.over_cap)
    family.add_metric(["handshake_timeout"], closed.handshake_timeout)
    return family


def unusable_family(unusable: dict[str, Free]) -> Metric:
    """Per cluster and resource: free yet fitting no RUNNABLE task, as the leader last looked
    (every few seconds); absent for a cluster whose free room some waiting task fits."""
    family = GaugeMetricFamily("raftsched_cluster_unusable",
                               "free room on an open cluster that fits no RUNNABLE task (0 "
                               "series: every free room fits some waiting task, or nothing "
                               "waits)", labels=["cluster", "resource"])
    for cluster_id in sorted(unusable):
        _add_resources(family, cluster_id, unusable[cluster_id])
    return family


def state_families(state: State, reported_free: dict[str, Free]) -> list[Metric]:
    """Every family of the replicated state, read in O(clusters + tenants)."""
    return [*_task_families(state), *_cluster_families(state, reported_free),
            *_kill_families(state), *_policy_families(state), *_stats_families(state),
            *_schedule_families(state)]


def _schedule_families(state: State) -> list[Metric]:
    """Schedules' fires and the nominal times that started no run, by reason, summed over the
    schedules held (O(schedules), at most MAX_SCHEDULES)."""
    fires = CounterMetricFamily("raftsched_schedule_fires", "runs schedules started (each a "
                                "job), summed over the schedules held", value=sum(
                                    s.fired for s in state.schedules.values()))
    skipped = CounterMetricFamily("raftsched_schedule_skipped", "schedules' nominal times that "
                                  "started no run, by reason (catchup_window: missed beyond "
                                  "the catch-up window; overlap; paused; refused; ...)",
                                  labels=["reason"])
    totals: dict[str, int] = {}
    for schedule in state.schedules.values():
        for reason, count in schedule.skipped.items():
            totals[reason] = totals.get(reason, 0) + count
    for reason in sorted(totals):
        skipped.add_metric([reason], totals[reason])
    held = GaugeMetricFamily("raftsched_schedules", "schedules held, by whether paused",
                             labels=["paused"])
    paused = sum(1 for s in state.schedules.values() if s.paused)
    held.add_metric(["true"], paused)
    held.add_metric(["false"], len(state.schedules) - paused)
    return [fires, skipped, held]


def _task_families(state: State) -> list[Metric]:
    jobs = GaugeMetricFamily("raftsched_jobs", "jobs held in state (terminal ones until "
                             "retention forgets them)", value=len(state.jobs))
    live = GaugeMetricFamily("raftsched_live_jobs", "jobs not yet terminal", value=state.live_jobs)
    fence = GaugeMetricFamily("raftsched_fence", "last fence issued", value=state.fence)
    by_state = GaugeMetricFamily("raftsched_live_tasks", "tasks of live jobs by state",
                                 labels=["state"])
    for state_value, count in enumerate(state.live_task_counts):
        by_state.add_metric([TaskState(state_value).name], count)
    return [jobs, live, fence, by_state]


def _cluster_families(state: State, reported_free: dict[str, Free]) -> list[Metric]:
    statuses: dict[str, int] = {}
    for cluster in state.clusters.values():
        statuses[cluster.status.name] = statuses.get(cluster.status.name, 0) + 1
    by_status = GaugeMetricFamily("raftsched_clusters", "compute clusters by status",
                                  labels=["status"])
    for status, count in sorted(statuses.items()):
        by_status.add_metric([status], count)
    total = GaugeMetricFamily("raftsched_cluster_capacity",
                              "what a cluster's agent registered (cpu in cores, memory in "
                              "bytes, gpu in devices, custom.NAME in its own units)",
                              labels=["cluster", "resource"])
    committed = GaugeMetricFamily("raftsched_cluster_committed",
                                  "what the live attempts placed on a cluster hold",
                                  labels=["cluster", "resource"])
    reported = GaugeMetricFamily("raftsched_cluster_reported_free",
                                 "the free capacity a cluster's agent last reported to this "
                                 "leader (an observation; absent until one arrives)",
                                 labels=["cluster", "resource"])
    live = GaugeMetricFamily("raftsched_cluster_live_attempts",
                             "attempts placed on a cluster and not yet ended", labels=["cluster"])
    queued = GaugeMetricFamily("raftsched_cluster_queued_attempts",
                               "attempts committed to a cluster beyond its room, held in its "
                               "agent's local queue until a slot frees (late binding)",
                               labels=["cluster"])
    for cluster in sorted(state.clusters.values(), key=lambda c: c.id):
        for family, values in (
                (total, (cluster.cpu_milli, cluster.memory_mb, cluster.gpu)),
                (committed, (cluster.reserved_cpu_milli, cluster.reserved_memory_mb,
                             cluster.reserved_gpu)),
                (reported, reported_free.get(cluster.id))):
            if values is not None:
                _add_resources(family, cluster.id, values)
        for name, count in cluster.custom.items():  # resource="custom.NAME"
            total.add_metric([cluster.id, f"custom.{name}"], count)
            committed.add_metric([cluster.id, f"custom.{name}"],
                                 cluster.reserved_custom.get(name, 0))
        live.add_metric([cluster.id], len(cluster.live))
        queued.add_metric([cluster.id], len(cluster.queued))
    stranded = GaugeMetricFamily(
        "raftsched_stranded_tasks",
        "tasks that should be moving and are not: runnable_unplaced (RUNNABLE for over "
        f"{RUNNABLE_STRANDED_AFTER_MS // 60_000} min), assigned_not_started (ASSIGNED for over "
        f"{ASSIGNED_STRANDED_AFTER_MS // 1000} s), placed_on_suspect (a live attempt on a "
        "SUSPECT cluster)", labels=["reason"])
    stranded.add_metric(["runnable_unplaced"], state.aged_runnable.count)
    stranded.add_metric(["assigned_not_started"], state.aged_assigned.count)
    stranded.add_metric(["placed_on_suspect"], sum(
        len(cluster.live) for cluster in state.clusters.values()
        if cluster.status == ClusterStatus.SUSPECT))
    return [by_status, total, committed, reported, live, queued, stranded]


def _kill_families(state: State) -> list[Metric]:
    pending = GaugeMetricFamily("raftsched_cluster_pending_kills",
                                "kill directives a cluster's agent has not yet confirmed",
                                labels=["cluster"])
    unrecorded = GaugeMetricFamily(
        "raftsched_cluster_kills_unrecorded",
        "kills owed to a cluster that MAX_KILL_DIRECTIVES_PER_CLUSTER kept out (its agent does "
        "not confirm kills): above 0, no new work there until its agent registers again",
        labels=["cluster"])
    for cluster in sorted(state.clusters.values(), key=lambda c: c.id):
        pending.add_metric([cluster.id], len(cluster.kills))
        unrecorded.add_metric([cluster.id], cluster.kills_unrecorded)
    return [pending, unrecorded]


def _add_resources(family: GaugeMetricFamily, cluster_id: str, values: Free) -> None:
    cpu_milli, memory_mb, gpu = values
    family.add_metric([cluster_id, "cpu"], cpu_milli / 1000)
    family.add_metric([cluster_id, "memory"], memory_mb * 1024 * 1024)
    family.add_metric([cluster_id, "gpu"], gpu)


def _policy_families(state: State) -> list[Metric]:
    queued = GaugeMetricFamily("raftsched_tenant_queued_tasks",
                               "tasks of a tenant's live jobs PENDING, RUNNABLE or RETRY_WAIT, by "
                               "the jobs' priority class", labels=["tenant", "priority_class"])
    running = GaugeMetricFamily("raftsched_tenant_running_tasks",
                                "tasks of a tenant ASSIGNED or RUNNING", labels=["tenant"])
    share = GaugeMetricFamily("raftsched_tenant_dominant_share",
                              "a tenant's largest share of the ready clusters' cpu, memory or gpu "
                              "held by its live attempts, divided by its weight",
                              labels=["tenant"])
    weight = GaugeMetricFamily("raftsched_tenant_weight", "a tenant's fair-share weight",
                               labels=["tenant"])
    total = policy.totals(state.clusters.values())
    for tenant in sorted(state.usage):
        usage = state.usage[tenant]
        chosen = policy.policy_of(state, tenant)
        for priority_class in PriorityClass:
            queued.add_metric([tenant, priority_class.value],
                              usage.queued_by_class[priority_class.rank])
        running.add_metric([tenant], usage.running)
        share.add_metric([tenant], policy.dominant_share(usage, chosen.weight, total))
        weight.add_metric([tenant], chosen.weight)
    draining = GaugeMetricFamily("raftsched_cluster_draining",
                                 "1 while an admin has drained the cluster", labels=["cluster"])
    degraded = GaugeMetricFamily("raftsched_cluster_degraded",
                                 "1 while the cluster is degraded (attempts of many tasks failed "
                                 "there): no new work", labels=["cluster"])
    reserved = GaugeMetricFamily("raftsched_cluster_reserved",
                                 "1 while the cluster is kept for one large task",
                                 labels=["cluster"])
    for cluster in sorted(state.clusters.values(), key=lambda c: c.id):
        draining.add_metric([cluster.id], int(cluster.draining))
        degraded.add_metric([cluster.id], int(cluster.degraded_until_ms > state.now_ms))
        reserved.add_metric([cluster.id], int(cluster.reserved_for is not None))
    return [queued, running, share, weight, draining, degraded, reserved]


def _stats_families(state: State) -> list[Metric]:
    stats = state.stats
    placements = CounterMetricFamily("raftsched_placements",
                                     "tasks given an attempt (a fence) by an applied ASSIGN_BATCH",
                                     value=stats.placements)
    wait = HistogramMetricFamily("raftsched_placement_wait_seconds",
                                 "how long a placed task waited RUNNABLE: ready -> assigned, in "
                                 "the state machine's time")
    cumulative, buckets = 0, []
    for bound_ms, count in zip(PLACEMENT_LATENCY_BUCKETS_MS, stats.placement_ms_buckets,
                               strict=False):
        cumulative += count
        buckets.append((_le(bound_ms / 1000), cumulative))
    buckets.append(("+Inf", stats.placements))
    wait.add_metric([], buckets, sum_value=stats.placement_ms_sum / 1000)
    dropped = CounterMetricFamily("raftsched_placements_dropped",
                                  "planned placements the state machine refused at apply (a "
                                  "plan made on a state that moved on), by reason",
                                  labels=["reason"])
    for reason, count in sorted(stats.dropped.items()):
        dropped.add_metric([reason], count)
    preemptions = CounterMetricFamily("raftsched_preemptions",
                                      "running attempts stopped to make room for a task of a "
                                      "higher priority class", value=stats.preemptions)
    retries = CounterMetricFamily("raftsched_retries",
                                  "attempts that ended and whose task was tried again, by class: "
                                  "application (the task failed) or infra (rejected, lost, "
                                  "expired)", labels=["class"])
    for kind in ("application", "infra"):
        retries.add_metric([kind], stats.retries.get(kind, 0))
    reports = CounterMetricFamily("raftsched_reports",
                                  "agents' reports applied, by verdict (late: about an attempt "
                                  "no longer current; duplicate: already applied)",
                                  labels=["verdict"])
    for verdict in ("accepted", "duplicate", "late", "not_found", "wrong_cluster"):
        reports.add_metric([verdict], stats.reports.get(verdict, 0))
    return [placements, wait, dropped, preemptions, retries, reports]


def _le(seconds: float) -> str:
    return repr(float(seconds))
