"""What happened, as the checks need it: committed assignments and results (from the oracle
replica of `log.SimLog`), what each agent ran and saw, and which submissions were acknowledged.

The committed log's properties (fences, DAG order, retry budgets, accepted reports, capacity,
idempotency keys) are `raftsched.state.audit.LogAuditor`'s, shared with the jepsen-style checker;
`observe` feeds it and asserts it found nothing. Every `on_*` method asserts the property it can
check at once; `check_replicas` runs after every step and `check_final` at the end of a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftsched.state import commands as c
from raftsched.state.audit import LogAuditor
from raftsched.state.model import State
from raftsched.state.outcome import Applied, Outcome
from raftsched.state.results import AssignResult, ClusterStatusChanged, ReportResult


@dataclass
class History:
    auditor: LogAuditor = field(default_factory=lambda: LogAuditor(invariants_every=0))
    """The committed log's safety checks (raftsched.state.audit, shared with the jepsen-style
    checker);
    the oracle already runs `invariants.check_invariants` after every commit."""
    runs: dict[int, str] = field(default_factory=dict)
    """fence -> the cluster whose agent started it."""
    seen: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """(cluster, job, task) -> highest fence the agent was handed (ghost of its fence store)."""
    queued: dict[str, set[int]] = field(default_factory=dict)
    """cluster -> the fences its agent holds in its local queue (as of its last call): the
    only fences it may start after being handed them (they start the moment a slot frees)."""
    refused: set[int] = field(default_factory=set)
    """Fences an agent answered REJECTED or KILLED: none of them may start afterwards."""
    acked_jobs: dict[str, int] = field(default_factory=dict)
    """job id -> log index of a submission the client was told was applied."""
    acked_keys: dict[tuple[str, str], str] = field(default_factory=dict)
    """(tenant, idempotency key) -> the job id every acknowledged submission of it named."""
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    # -- the committed log (oracle) -----------------------------------------------------------

    def observe(self, index: int, command: c.Command, outcome: Outcome,
                oracle: State) -> None:
        self.auditor.observe(index, command, outcome, oracle)
        assert not self.auditor.violations, "\n".join(
            f"{v.check}: {v.message}" for v in self.auditor.violations)
        if not isinstance(outcome, Applied):
            self.count(f"rejected_{type(command).__name__}")
            return
        result = outcome.result
        if isinstance(result, ClusterStatusChanged) and result.changed:
            assert isinstance(command, c.ClusterStatusChange)
            self.count(f"cluster_{command.status.name}")
            self.count("attempts_lost", result.lost)
        elif isinstance(result, AssignResult) and result.assigned:
            self.count("assigned", len(result.assigned))
        elif isinstance(result, ReportResult):
            for verdict in result.verdicts:
                self.count(f"verdict_{verdict}")

    # -- agents -----------------------------------------------------------------------------------

    def on_start(self, cluster_id: str, job_id: str, task_id: str, fence: int) -> None:
        """An agent starts an attempt: once per fence ever, only a committed assignment of it to
        this cluster, and only above every fence that agent was handed for the task before."""
        self.count("runs")
        assert fence not in self.runs, f"fence {fence} ran twice (on {self.runs[fence]} and " \
                                       f"{cluster_id})"
        self.runs[fence] = cluster_id
        committed = self.auditor.assigned.get(fence)
        assert committed is not None \
            and (committed.job_id, committed.task_id, committed.cluster_id) \
            == (job_id, task_id, cluster_id), \
            f"{cluster_id} ran fence {fence} of {job_id}/{task_id}, committed as {committed}"
        seen = self.seen.get((cluster_id, job_id, task_id), 0)
        assert fence not in self.refused, \
            f"{cluster_id} ran fence {fence} of {job_id}/{task_id} after answering it REJECTED " \
            "or KILLED"
        assert fence > seen or fence in self.queued.get(cluster_id, ()), \
            f"{cluster_id} ran fence {fence} of {job_id}/{task_id} after seeing fence {seen} " \
            "(and not from its queue)"

    def on_seen(self, cluster_id: str, job_id: str, task_id: str, fence: int) -> None:
        key = (cluster_id, job_id, task_id)
        self.seen[key] = max(self.seen.get(key, 0), fence)

    # -- clients --------------------------------------------------------------------------------

    def on_submit_acked(self, job_id: str, index: int, tenant: str, key: str | None) -> None:
        self.count("submits_acked")
        self.acked_jobs.setdefault(job_id, index)
        if key is not None:
            first = self.acked_keys.setdefault((tenant, key), job_id)
            assert first == job_id, f"idempotency key {key!r} acknowledged as {first} and " \
                                    f"{job_id}"

    # -- replicas -------------------------------------------------------------------------------

    def check_acked_present(self, state: State, applied: int, who: str) -> None:
        for job_id, index in self.acked_jobs.items():
            if index <= applied:
                assert job_id in state.jobs, f"{who} applied {applied} entries but lacks " \
                                             f"acknowledged job {job_id} (entry {index})"
