"""The agent's Prometheus metrics, in a registry of its own (several agents may share a
process in tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

SLOT_TURNAROUND_BUCKETS_S = (0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.075,
                             0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Targets: p50 <= 15 ms, p99 <= 50 ms (docs/architecture.md §8)."""
HEARTBEAT_LATENCY_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
"""Heartbeats long-poll, so their latency includes the wait when there is nothing to do."""


class AgentMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.attempts_started = Counter(
            "raftsched_agent_attempts_started", "Attempts admitted and started.",
            registry=self.registry)
        self.attempts_finished = Counter(
            "raftsched_agent_attempts_finished", "Attempts that ended, by report kind.",
            ["kind"], registry=self.registry)
        self.attempts_rejected = Counter(
            "raftsched_agent_attempts_rejected", "Assignments refused by admission.",
            registry=self.registry)
        self.attempts_running = Gauge(
            "raftsched_agent_attempts_running", "Attempts running now.", registry=self.registry)
        self.attempts_queued = Gauge(
            "raftsched_agent_attempts_queued", "Attempts held in the local queue, not started "
            "(late binding: they start the moment a slot frees).", registry=self.registry)
        self.reports_pending = Gauge(
            "raftsched_agent_reports_pending", "Reports in the outbox waiting for an ack.",
            registry=self.registry)
        self.reports_acked = Counter(
            "raftsched_agent_reports_acked", "Reports acked by the leader.",
            registry=self.registry)
        self.heartbeat_latency_seconds = Histogram(
            "raftsched_agent_heartbeat_latency_seconds", "Heartbeat round trips (long poll).",
            buckets=HEARTBEAT_LATENCY_BUCKETS_S, registry=self.registry)
        self.session_errors = Counter(
            "raftsched_agent_session_errors", "Failed calls to the leader, by error.",
            ["error"], registry=self.registry)
        self.slot_turnaround_seconds = Histogram(
            "raftsched_agent_slot_turnaround_seconds",
            "From an attempt's end noticed here to the next attempt started here, while work "
            "was waiting (agent/slots.py).", buckets=SLOT_TURNAROUND_BUCKETS_S,
            registry=self.registry)
        self.slots_idle = Counter(
            "raftsched_agent_slots_idle", "Freed slots that no work filled within "
            "IDLE_AFTER_S (idle capacity, not a slow scheduler).", registry=self.registry)
        self.task_containment = Gauge(
            "raftsched_agent_task_containment", "1 for the way this agent ends every process "
            "of an attempt (mode: cgroup or session; agent/containment.py).", ["mode"],
            registry=self.registry)
        self.stale_directives = Counter(
            "raftsched_agent_stale_directives", "Heartbeat answers ignored for a lower term.",
            registry=self.registry)

    def serve(self, host: str, port: int) -> None:
        """Serves /metrics on host:port from a daemon thread (OSError if it cannot bind)."""
        start_http_server(port, addr=host, registry=self.registry)
