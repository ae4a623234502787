"""What happened, as the checks need it: committed assignments and results (from the oracle
replica of `log.SimLog`), what each agent ran and saw, and which submissions were acknowledged.

Every `observe_*`/`on_*` method asserts the property it can check at once; `check_replicas`
runs after every step and `check_final` at the end of a run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from raftsched import commands as c
from raftsched import fsm
from raftsched.model import TERMINAL_TASK_STATES, AttemptState, State, TaskState

TaskKey = tuple[str, str]
"""(job id, task id)."""


@dataclass
class History:
    assigned: dict[int, tuple[str, str, str]] = field(default_factory=dict)
    """fence -> (job id, task id, cluster id) of every committed assignment."""
    last_fence: dict[TaskKey, int] = field(default_factory=dict)
    successes: dict[TaskKey, int] = field(default_factory=dict)
    """Accepted successful FINISHED reports per task."""
    runs: dict[int, str] = field(default_factory=dict)
    """fence -> the cluster whose agent started it."""
    seen: dict[tuple[str, str, str], int] = field(default_factory=dict)
    """(cluster, job, task) -> highest fence the agent was handed (ghost of its fence store)."""
    acked_jobs: dict[str, int] = field(default_factory=dict)
    """job id -> log index of a submission the client was told was applied."""
    acked_keys: dict[tuple[str, str], str] = field(default_factory=dict)
    """(tenant, idempotency key) -> the job id every acknowledged submission of it named."""
    counts: dict[str, int] = field(default_factory=dict)

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    # -- the committed log (oracle) -----------------------------------------------------------

    def observe(self, index: int, command: c.Command, outcome: fsm.Outcome,
                oracle: State) -> None:
        if not isinstance(outcome, fsm.Applied):
            self.count(f"rejected_{type(command).__name__}")
            return
        if isinstance(command, c.ClusterStatusChange) and outcome.result["changed"]:
            self.count(f"cluster_{command.status.name}")
            self.count("attempts_lost", outcome.result["lost"])
        elif isinstance(command, c.AssignBatch):
            for job_id, task_id, cluster_id, fence in outcome.result["assigned"]:
                self._observe_assigned(oracle, job_id, task_id, cluster_id, fence)
        elif isinstance(command, c.ReportBatch):
            for report, (job_id, task_id, fence, verdict) in zip(
                    command.items, outcome.result["items"], strict=True):
                self.count(f"verdict_{verdict}")
                if verdict == "accepted" and report.kind == c.ReportKind.FINISHED \
                        and report.exit_code == 0 and not report.timed_out:
                    self._observe_success(oracle, job_id, task_id, fence)

    def _observe_assigned(self, oracle: State, job_id: str, task_id: str, cluster_id: str,
                          fence: int) -> None:
        self.count("assigned")
        assert fence not in self.assigned, f"fence {fence} committed twice"
        self.assigned[fence] = (job_id, task_id, cluster_id)
        last = self.last_fence.get((job_id, task_id), 0)
        assert fence > last, f"{job_id}/{task_id}: fence {fence} after fence {last}"
        self.last_fence[(job_id, task_id)] = fence
        job = oracle.jobs[job_id]
        task = job.tasks[job.index_of[task_id]]
        all_done = task.spec.trigger == "all_done" and job.spec.failure_policy == "continue"
        for dep_id in task.spec.depends_on:
            dep = job.tasks[job.index_of[dep_id]]
            done = dep.state in TERMINAL_TASK_STATES if all_done \
                else dep.state == TaskState.SUCCEEDED
            assert done, f"{job_id}/{task_id} assigned (fence {fence}) while upstream {dep_id} " \
                         f"is {dep.state.name}"

    def _observe_success(self, oracle: State, job_id: str, task_id: str, fence: int) -> None:
        key = (job_id, task_id)
        self.successes[key] = self.successes.get(key, 0) + 1
        assert self.successes[key] == 1, f"{job_id}/{task_id}: a second accepted success " \
                                         f"(fence {fence})"
        job = oracle.jobs[job_id]
        task = job.tasks[job.index_of[task_id]]
        current = task.current
        assert current is not None and current.fence == fence \
            and current.state == AttemptState.SUCCEEDED, \
            f"{job_id}/{task_id}: success of fence {fence} accepted, current attempt {current}"

    # -- agents -----------------------------------------------------------------------------------

    def on_start(self, cluster_id: str, job_id: str, task_id: str, fence: int) -> None:
        """An agent starts an attempt: once per fence ever, only a committed assignment of it to
        this cluster, and only above every fence that agent was handed for the task before."""
        self.count("runs")
        assert fence not in self.runs, f"fence {fence} ran twice (on {self.runs[fence]} and " \
                                       f"{cluster_id})"
        self.runs[fence] = cluster_id
        assert self.assigned.get(fence) == (job_id, task_id, cluster_id), \
            f"{cluster_id} ran fence {fence} of {job_id}/{task_id}, committed as " \
            f"{self.assigned.get(fence)}"
        seen = self.seen.get((cluster_id, job_id, task_id), 0)
        assert fence > seen, f"{cluster_id} ran fence {fence} of {job_id}/{task_id} after " \
                             f"seeing fence {seen}"

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
