"""What `raftsched dev add-group` asks of the running cluster besides probing it (drains, the
group record, an agent's own metrics, the shard move): the port `GroupCalls` and its
implementation over the Python client, `ClientCalls`. (Part of the dev cluster,
`raftsched.dev`.)"""

from __future__ import annotations

import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from raftsched.dev.record import PROBE_TIMEOUT_S, Progress, TlsPaths
from raftsched.dev.status import metrics_url
from raftsched.errors import RaftschedError

if TYPE_CHECKING:  # grpc: loaded only when the cluster is asked
    from raftsched.client.client import Client
    from raftsched.client.shards import MoveReport

DRAIN_REASON = "raftsched dev add-group: restarting its agent to serve every group"
"""The reason of the drains this command makes: a drain with another reason is someone
else's, and stays; one with this reason (left by a run that stopped) is lifted."""
CALL_BUDGET_S = 30.0
"""How long one call of this command (a drain, each call of the move) retries through
elections and lost connections."""
MAX_METRICS_BYTES = 1024 * 1024
"""An agent's /metrics page, read at most this far."""
AGENT_WORK_METRICS = ("raftsched_agent_attempts_running", "raftsched_agent_attempts_queued",
                      "raftsched_agent_reports_pending")
"""The gauges of an agent's /metrics (`agent.metrics`) that say what it still holds."""


@dataclass(frozen=True, slots=True)
class AgentWork:
    """What an agent's own /metrics says it holds."""

    running: int
    queued: int
    reports_pending: int
    """Reports not acked yet: an attempt stays in its data dir until its last one is."""

    @property
    def idle(self) -> bool:
        return not (self.running or self.queued or self.reports_pending)


def agent_work(text: str) -> AgentWork | None:
    """The AGENT_WORK_METRICS of a Prometheus text page; None when one is missing or the page
    cannot be read."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in AGENT_WORK_METRICS and not sample.labels:
                    values[sample.name] = sample.value
    except ValueError:
        return None
    if set(values) != set(AGENT_WORK_METRICS):
        return None
    running, queued, pending = (int(values[name]) for name in AGENT_WORK_METRICS)
    return AgentWork(running, queued, pending)


class GroupCalls(Protocol):
    """The calls `add_group` makes besides probing: `ClientCalls`, or stand-ins for tests.
    Each raises RaftschedError naming what failed, except the looks (None or False)."""

    def recorded(self, servers: Sequence[str]) -> bool:
        """Whether the group of `servers` says its log records which group it is."""

    def drain(self, servers: Sequence[str], cluster: str, drain: bool) -> None:
        """Drain `cluster` (DRAIN_REASON) in the group of `servers`, or undrain it."""

    def agent_work(self, metrics_port: int) -> AgentWork | None:
        """What the agent serving metrics on `metrics_port` holds; None: it does not say."""

    def move(self, groups: Sequence[Sequence[str]], say: Progress,
             allow_no_clusters: bool) -> MoveReport:
        """`raftsched.client.shards.add_group` over every group, the new one last."""


class ClientCalls:
    """`GroupCalls` through the Python client, as the dev cluster's user (`client_tls`)."""

    def __init__(self, tls: TlsPaths | None) -> None:
        self.tls = tls

    def _client(self, servers: Sequence[str], timeout_s: float | None = None,
                budget_s: float = CALL_BUDGET_S) -> Client:
        from raftsched.client.client import DEFAULT_CALL_TIMEOUT_S, Client

        return Client(list(servers), timeout_s=timeout_s or DEFAULT_CALL_TIMEOUT_S,
                      retry_budget_s=budget_s,
                      tls_files=self.tls.files() if self.tls is not None else None,
                      token=self.tls.read_token() if self.tls is not None else None)

    def recorded(self, servers: Sequence[str]) -> bool:
        with self._client(servers, PROBE_TIMEOUT_S, budget_s=0) as client:
            try:
                return bool(client.topology().recorded)
            except RaftschedError:
                return False

    def drain(self, servers: Sequence[str], cluster: str, drain: bool) -> None:
        with self._client(servers) as client:
            client.drain_cluster(cluster, drain, DRAIN_REASON if drain else "")

    def agent_work(self, metrics_port: int) -> AgentWork | None:
        try:
            with urllib.request.urlopen(metrics_url(metrics_port),
                                        timeout=PROBE_TIMEOUT_S) as answer:
                text = answer.read(MAX_METRICS_BYTES).decode("utf-8", "replace")
        except OSError:
            return None
        return agent_work(text)

    def move(self, groups: Sequence[Sequence[str]], say: Progress,
             allow_no_clusters: bool) -> MoveReport:
        from raftsched.client import shards

        clients = [self._client(servers) for servers in groups]
        try:
            return shards.add_group(clients, groups, say, allow_no_clusters=allow_no_clusters)
        finally:
            for client in clients:
                client.close()


