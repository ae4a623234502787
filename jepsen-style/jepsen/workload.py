"""The workload: concurrent clients submit small DAG jobs (unique idempotency keys; a submit
whose outcome is unknown is retried later with the same key), cancel some, and read job status.
Every call is an invoke and an ok / fail / info in the history.

Some jobs are long: one task that would run for minutes, which its client cancels a second or
two after the submit is acknowledged, so that every run kills running tasks through the
scheduler (the checker's kill_liveness property); the harness cancels the long jobs still
running when the clients stop, after the heal.

Some jobs are fan-outs (issue 26, task data): `ls` outputs a list of items, `map` expands into
one instance per item (`map[0]`, `map[1]`, ...), each outputting its item, and `reduce` sums what
the instances output from `$RAFTSCHED_INPUTS`. Every output carries the fence of the attempt that
wrote it, so the checker can tell which attempt's outputs the state kept.

Tasks are real subprocesses that append `start` and `end` lines keyed by their idempotency key
and fence to the external ledger, so duplicate external effects can be counted; some fail their
first attempt on purpose to exercise retries (per instance, for `map`).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jepsen.history import History
from raftsched.client.client import Client
from raftsched.client.groups import GroupedClient
from raftsched.errors import Code, RaftschedError
from raftsched.tls import TlsFiles
from raftsched.topology import group_of_job_id, group_of_key

CALL_TIMEOUT_S = 2.0
RETRY_BUDGET_S = 2.0
"""The client library's own retries (redirects, elections) within one operation; past it the
operation is info and the workload decides."""
OP_INTERVAL_S = (0.2, 0.6)
MAX_TASKS = 4
TASK_SLEEP_S = (0.1, 0.8)
TASK_TIMEOUT_S = 30
"""Far above any task's run time: a TIMED_OUT attempt means the replicated time ran ahead."""
RECENT_JOBS = 20
MAX_SUBMIT_TRIES = 6
"""A key whose outcome stays unknown is retried at most this many times in all."""
MAX_UNKNOWN_SUBMITS = 50
"""Keys with an unknown outcome a client keeps to retry; past it, new ones are not retried."""
DEFINITE_FAILURES = frozenset({Code.INVALID_ARGUMENT, Code.NOT_FOUND, Code.ALREADY_EXISTS,
                               Code.FAILED_PRECONDITION, Code.RESOURCE_EXHAUSTED})
"""Codes that say the request was refused before anything was proposed; anything else
(UNAVAILABLE after a propose, DEADLINE_EXCEEDED, a lost connection) leaves the outcome unknown."""
SUBMIT_SHARE, READ_SHARE = 0.3, 0.6
"""Share of operations that submit a new job and that read one; the rest cancel. About 2 jobs/s
for 3 clients: well within 2 agents' capacity, so a backlog means something is wrong."""
RETRY_SHARE = 0.3
"""When a submit's outcome is unknown, the chance per operation to retry it now."""
FAILURE_POLICIES = ("skip_downstream", "fail_fast", "continue")
TENANTS = ("alpha", "beta")
LONG_SHARE = 0.3
"""Of the new submits, the share that is a long job (cancelled CANCEL_AFTER_S after its ack)."""
LONG_TASK_S = 300
"""A long job's task runs this long unless it is killed: far past any run and its liveness wait,
so a kill that does not happen shows."""
LONG_TIMEOUT_S = 2 * LONG_TASK_S
CANCEL_AFTER_S = (1.0, 3.0)
"""When a client cancels its long job, after the submit was acknowledged: the task is running."""
RECANCEL_AFTER_S = 0.5
"""A cancel whose outcome is unknown is sent again this much later."""
MAX_CLEANUP_TRIES = 10
"""Tries per long job when the harness cancels what the clients left running."""
FANOUT_SHARE = 0.2
"""Of the new submits, the share that is a fan-out job (ls -> map[i] ->
reduce)."""
FANOUT_ITEMS = (2, 5)
"""How many items a fan-out job's `ls` outputs (its `map` instances)."""
FANOUT_ITEM_VALUES = (1, 99)
"""The items: integers drawn from this range, which `reduce` sums."""
FANOUT_FAIL_SHARE = 0.3
"""The chance that a given `map` instance fails its first attempt (retried per instance)."""


def task_script(fail_attempts: int, sleep_s: float) -> str:
    return (
        'k="$RAFTSCHED_IDEMPOTENCY_KEY $RAFTSCHED_FENCE $RAFTSCHED_JOB_ID $RAFTSCHED_TASK_ID '
        '$RAFTSCHED_ATTEMPT"\n'
        'echo "start $k" >> "$LEDGER"\n'
        f"sleep {sleep_s:.2f}\n"
        f'rc=0; [ "$RAFTSCHED_ATTEMPT" -le {fail_attempts} ] && rc=1\n'
        'echo "end $k $rc" >> "$LEDGER"\n'
        'exit $rc\n')


def _ledger_wrap(body: str, fail_attempts: str) -> str:
    """A fan-out task's script: the ledger lines of `task_script` around `body`, which writes
    $RAFTSCHED_OUTPUT; the attempt fails (after writing) while its number is at most the shell
    expression `fail_attempts`."""
    return (
        'k="$RAFTSCHED_IDEMPOTENCY_KEY $RAFTSCHED_FENCE $RAFTSCHED_JOB_ID $RAFTSCHED_TASK_ID '
        '$RAFTSCHED_ATTEMPT"\n'
        'echo "start $k" >> "$LEDGER"\n'
        f"{body}"
        f'rc=0; [ "$RAFTSCHED_ATTEMPT" -le {fail_attempts} ] && rc=1\n'
        'echo "end $k $rc" >> "$LEDGER"\n'
        'exit $rc\n')


LS_BODY = ('printf \'{"fence": %s, "items": [%s]}\' "$RAFTSCHED_FENCE" "$ITEMS" '
           '> "$RAFTSCHED_OUTPUT"\n')
MAP_BODY = ('printf \'{"fence": %s, "index": %s, "item": "%s", "value": %s}\' '
            '"$RAFTSCHED_FENCE" "$INDEX" "$ITEM" "$ITEM" > "$RAFTSCHED_OUTPUT"\n')
REDUCE_BODY = (  # plain sh: count and sum every "value" of the instances' outputs
    's=$(cat "$RAFTSCHED_INPUTS"); n=0; sum=0\n'
    'while :; do case "$s" in *\'"value":\'*) s=${s#*\'"value":\'}; s=${s# }; '
    'v=${s%%[!0-9]*}; n=$((n + 1)); sum=$((sum + v));; *) break;; esac; done\n'
    'printf \'{"fence": %s, "count": %s, "sum": %s}\' "$RAFTSCHED_FENCE" "$n" "$sum" '
    '> "$RAFTSCHED_OUTPUT"\n')


def make_fanout_job(rng: random.Random, key: str, ledger: Path) -> tuple[str, dict[str, Any]]:
    """A fan-out job: `ls` outputs 2-5 items (drawn here, written into its command), `map`
    expands into one instance per item, some failing their first attempt, `reduce` counts and
    sums the instances' outputs. Its spec text and the history's description of it (`map`
    described once for all its instances, with the indexes that fail first)."""
    tenant = rng.choice(TENANTS)
    items = [rng.randint(*FANOUT_ITEM_VALUES) for _ in range(rng.randint(*FANOUT_ITEMS))]
    failing = [i for i in range(len(items)) if rng.random() < FANOUT_FAIL_SHARE]
    first = "|".join(map(str, failing)) or "-1"
    common = {"resources": {"cpu": 0.5, "memory_mb": 64}, "requires": ["linux"],
              "retry": {"max_attempts": 2, "backoff_s": 0.2}, "timeout_s": TASK_TIMEOUT_S}
    tasks = [
        {"id": "ls", "command": ["sh", "-c", _ledger_wrap(LS_BODY, "0")],
         "env": {"LEDGER": str(ledger), "ITEMS": ", ".join(map(str, items))}, **common},
        {"id": "map", "depends_on": ["ls"], "for_each": "{{ tasks.ls.outputs.items }}",
         "command": ["sh", "-c", _ledger_wrap(
             MAP_BODY, f'$(case "$INDEX" in {first}) echo 1;; *) echo 0;; esac)')],
         "env": {"LEDGER": str(ledger), "ITEM": "{{ item }}", "INDEX": "{{ index }}"}, **common},
        {"id": "reduce", "depends_on": ["map"],
         "command": ["sh", "-c", _ledger_wrap(REDUCE_BODY, "0")],
         "env": {"LEDGER": str(ledger)}, **common}]
    described = {task["id"]: {"depends_on": task.get("depends_on", []), "fail_attempts": 0,
                              "max_attempts": 2, "run_s": 0, "timeout_s": TASK_TIMEOUT_S}
                 for task in tasks}
    described["map"].update(for_each="ls.items", fail_first=failing)
    spec = {"name": f"jepsen-fanout-{key}", "tenant": tenant, "failure_policy": "skip_downstream",
            "tasks": tasks}
    return json.dumps(spec), {"key": key, "tenant": tenant, "failure_policy": "skip_downstream",
                              "fanout": {"items": items}, "tasks": described}


def make_long_job(rng: random.Random, key: str, ledger: Path) -> tuple[str, dict[str, Any]]:
    """A job of one task that runs LONG_TASK_S unless killed: its spec text and description."""
    tenant = rng.choice(TENANTS)
    task = {"id": "t0", "command": ["sh", "-c", task_script(0, LONG_TASK_S)],
            "env": {"LEDGER": str(ledger)}, "resources": {"cpu": 0.5, "memory_mb": 64},
            "requires": ["linux"], "retry": {"max_attempts": 1}, "timeout_s": LONG_TIMEOUT_S}
    spec = {"name": f"jepsen-long-{key}", "tenant": tenant, "tasks": [task]}
    return json.dumps(spec), {"key": key, "tenant": tenant, "failure_policy": "skip_downstream",
                              "long": True, "tasks": {"t0": {
                                  "depends_on": [], "fail_attempts": 0, "max_attempts": 1,
                                  "run_s": LONG_TASK_S, "timeout_s": LONG_TIMEOUT_S}}}


def make_job(rng: random.Random, key: str, ledger: Path) -> tuple[str, dict[str, Any]]:
    """A random DAG job: its spec text and the history's description of it."""
    count = rng.randint(1, MAX_TASKS)
    tenant = rng.choice(TENANTS)
    policy = rng.choice(FAILURE_POLICIES)
    tasks: list[dict[str, Any]] = []
    described: dict[str, Any] = {}
    for i in range(count):
        task_id = f"t{i}"
        deps = [f"t{j}" for j in range(i) if rng.random() < 0.5]
        fail_attempts = 1 if rng.random() < 0.2 else 0
        max_attempts = rng.choice((2, 3))
        run_s = round(rng.uniform(*TASK_SLEEP_S), 2)
        tasks.append({
            "id": task_id,
            "command": ["sh", "-c", task_script(fail_attempts, run_s)],
            "env": {"LEDGER": str(ledger)},
            "resources": {"cpu": 0.5, "memory_mb": 64},
            "requires": ["linux"],
            "depends_on": deps,
            "retry": {"max_attempts": max_attempts, "backoff_s": 0.2},
            "timeout_s": TASK_TIMEOUT_S,
        })
        described[task_id] = {"depends_on": deps, "fail_attempts": fail_attempts,
                              "max_attempts": max_attempts, "run_s": run_s,
                              "timeout_s": TASK_TIMEOUT_S}
    spec = {"name": f"jepsen-{key}", "tenant": tenant, "failure_policy": policy,
            "tasks": tasks}
    return json.dumps(spec), {"key": key, "tenant": tenant, "failure_policy": policy,
                              "tasks": described}


@dataclass
class PendingSubmit:
    key: str
    text: str
    value: dict[str, Any]
    tries: int = 0


@dataclass
class ClientWorker:
    process: int
    servers: list[str]
    history: History
    ledger: Path
    seed: int
    stop: threading.Event
    tls_files: TlsFiles | None
    """The harness's user certificate (None: plaintext, a cluster run with --insecure-dev)."""
    token: str | None = None
    """The API token its calls carry (the harness's admin token)."""
    jobs: deque[str] = field(default_factory=lambda: deque(maxlen=RECENT_JOBS))
    """This client's latest jobs: the ones it reads and cancels."""
    unknown: list[PendingSubmit] = field(default_factory=list)
    acked: dict[str, str] = field(default_factory=dict)
    """idempotency key -> job id."""
    long_jobs: dict[str, float] = field(default_factory=dict)
    """Long jobs acknowledged and not yet cancelled -> when to cancel (monotonic s)."""
    error: BaseException | None = None
    groups: list[list[str]] = field(default_factory=list)
    """With several scheduler groups (issue 27): each group's servers (`servers` is then
    unused); the client is a GroupedClient and every op records its "group"."""
    grow: bool = False
    """Shards move during the run (`run --grow`): a submit's or a job's group is not known in
    advance, so no op records one (the checker finds where each job lives)."""

    def __post_init__(self) -> None:
        self._rng = random.Random(self.seed * 1_000_003 + self.process)
        self._thread = threading.Thread(target=self._run, name=f"client-{self.process}",
                                        daemon=True)
        self._submitted = 0

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        client = self._client()
        try:
            while not self.stop.wait(self._rng.uniform(*OP_INTERVAL_S)):
                self._one(client)
        except BaseException as error:  # the runner reports it; the run then fails
            self.error = error
        finally:
            client.close()

    def _client(self) -> Client | GroupedClient:
        return connect(self.groups or [self.servers], timeout_s=CALL_TIMEOUT_S,
                       retry_budget_s=RETRY_BUDGET_S, tls_files=self.tls_files, token=self.token)

    def _group(self, job_id: str) -> dict[str, Any]:
        """{"group": the job's group} with several groups, else nothing (the history of one
        group is unchanged)."""
        if len(self.groups) < 2 or self.grow:
            return {}
        return {"group": group_of_job_id(job_id, len(self.groups))}

    def _one(self, client: Client | GroupedClient) -> None:
        due = [job_id for job_id, at in self.long_jobs.items() if at <= time.monotonic()]
        if due:
            self._cancel_long(client, due[0])
            return
        if self.unknown and self._rng.random() < RETRY_SHARE:
            self._submit(client, self.unknown.pop(0))
            return
        roll = self._rng.random()
        if roll < SUBMIT_SHARE or not self.jobs:
            self._submitted += 1
            key = f"c{self.process}-{self.seed}-{self._submitted}"
            kind = self._rng.random()
            make = make_long_job if kind < LONG_SHARE else \
                make_fanout_job if kind < LONG_SHARE + FANOUT_SHARE else make_job
            text, value = make(self._rng, key, self.ledger)
            self._submit(client, PendingSubmit(key, text, value))
        elif roll < SUBMIT_SHARE + READ_SHARE:
            self._read(client, self._rng.choice(self.jobs))
        else:
            self._cancel(client, self._rng.choice(self.jobs))

    def _submit(self, client: Client | GroupedClient, pending: PendingSubmit) -> None:
        pending.tries += 1
        where = {"group": group_of_key(pending.value["tenant"], pending.key, len(self.groups))} \
            if len(self.groups) > 1 and not self.grow else {}
        op = self.history.invoke(self.process, "submit", {**pending.value, "try": pending.tries,
                                                          **where})
        try:
            submitted = client.submit(pending.text, idempotency_key=pending.key)
        except RaftschedError as error:
            kind = _kind(error)
            self.history.complete(self.process, op, kind, "submit", {
                "key": pending.key, "error": error.code.value, "message": error.message})
            if kind == "info" and pending.tries < MAX_SUBMIT_TRIES \
                    and len(self.unknown) < MAX_UNKNOWN_SUBMITS:
                self.unknown.append(pending)  # else it stays info in the history: that is fine
            return
        self.history.complete(self.process, op, "ok", "submit", {
            "key": pending.key, "job_id": submitted.job_id, "created": submitted.created})
        self.acked[pending.key] = submitted.job_id
        if submitted.job_id not in self.jobs:
            self.jobs.append(submitted.job_id)
        if pending.value.get("long") and submitted.job_id not in self.long_jobs:
            self.long_jobs[submitted.job_id] = time.monotonic() + self._rng.uniform(
                *CANCEL_AFTER_S)

    def _read(self, client: Client | GroupedClient, job_id: str) -> None:
        op = self.history.invoke(self.process, "read", {"job_id": job_id, **self._group(job_id)})
        try:
            job = client.get_job(job_id)
        except RaftschedError as error:
            self.history.complete(self.process, op, _kind(error), "read", {
                "job_id": job_id, "error": error.code.value, "message": error.message})
            return
        self.history.complete(self.process, op, "ok", "read", {
            "job_id": job_id, "state": job.state, "tasks": dict(job.tasks),
            "applied_index": job.applied_index})

    def _cancel(self, client: Client | GroupedClient, job_id: str) -> str:
        """One cancel operation; its outcome (ok, fail or info)."""
        op = self.history.invoke(self.process, "cancel", {"job_id": job_id,
                                                          **self._group(job_id)})
        try:
            reply = client.cancel(job_id, reason="jepsen-style workload")
        except RaftschedError as error:
            kind = _kind(error)
            self.history.complete(self.process, op, kind, "cancel", {
                "job_id": job_id, "error": error.code.value, "message": error.message})
            return kind
        self.history.complete(self.process, op, "ok", "cancel", {
            "job_id": job_id, "cancelled": reply.changed})
        return "ok"

    def _cancel_long(self, client: Client | GroupedClient, job_id: str) -> None:
        """Cancel a long job; one whose outcome is unknown is tried again a little later."""
        if self._cancel(client, job_id) == "info":
            self.long_jobs[job_id] = time.monotonic() + RECANCEL_AFTER_S
        else:
            del self.long_jobs[job_id]

    def cancel_outstanding(self) -> list[str]:
        """After the run (the client thread has stopped): cancel the long jobs still running,
        each tried up to MAX_CLEANUP_TRIES times; returns those that could not be cancelled."""
        client = self._client()
        try:
            for job_id in sorted(self.long_jobs):
                for _ in range(MAX_CLEANUP_TRIES):
                    if self._cancel(client, job_id) != "info":
                        del self.long_jobs[job_id]
                        break
        finally:
            client.close()
        return sorted(self.long_jobs)


def _kind(error: RaftschedError) -> str:
    return "fail" if error.code in DEFINITE_FAILURES else "info"


# --- schedules (issue 25) -------------------------------------------------------------------------

SCHEDULES = (("jepsen-every2s", "2s", "allow"), ("jepsen-every3s", "3s", "skip"))
"""(id, every, overlap) of the schedules a run creates at its start: the leader fires them
through every fault; the checker's schedule_every_time property finds each nominal time fired
once or skipped for a reason its policy names."""
SCHEDULE_WINDOW_S = 3_600
"""Their catch-up window: longer than any run and its liveness wait, so no nominal time may be
skipped for age (a catchup_window skip is a violation)."""
SCHEDULE_CREATE_TRIES = 20
SCHEDULE_CREATE_PAUSE_S = 0.5


def schedule_text(every: str, overlap: str) -> str:
    """A schedule file: one short task (a real subprocess) of tenant alpha."""
    return json.dumps({
        "name": f"every {every}", "tenant": "alpha",
        "tasks": [{"id": "tick", "command": ["/bin/true"], "resources": {"cpu": 0.1,
                                                                          "memory_mb": 16}}],
        "schedule": {"every": every, "overlap": overlap,
                     "catchup_window_s": SCHEDULE_WINDOW_S}})


def create_schedules(servers: list[str], history: History, tls_files: TlsFiles | None,
                     token: str | None, groups: list[list[str]] | None = None) -> list[str]:
    """Create the run's schedules (each retried SCHEDULE_CREATE_TRIES times: creating one twice
    is answered "exists"); the ids created, each also a `schedule` event in the history."""
    created = []
    client = connect(groups or [servers], timeout_s=CALL_TIMEOUT_S,
                     retry_budget_s=RETRY_BUDGET_S, tls_files=tls_files, token=token)
    try:
        for schedule_id, every, overlap in SCHEDULES:
            for _ in range(SCHEDULE_CREATE_TRIES):
                try:
                    client.create_schedule(schedule_id, schedule_text(every, overlap))
                except RaftschedError as error:
                    if error.code == Code.ALREADY_EXISTS:
                        break
                    time.sleep(SCHEDULE_CREATE_PAUSE_S)
                    continue
                break
            else:
                continue
            where = {"group": client.group_of_schedule(schedule_id)} \
                if isinstance(client, GroupedClient) else {}
            history.event("harness", "schedule", {"schedule_id": schedule_id, "every": every,
                                                  "overlap": overlap, **where})
            created.append(schedule_id)
    finally:
        client.close()
    return created


def connect(groups: list[list[str]], **kwargs: Any) -> Client | GroupedClient:
    """A Client of the only group's servers, or a GroupedClient with one Client per group."""
    if len(groups) == 1:
        return Client(groups[0], **kwargs)
    return GroupedClient([Client(servers, **kwargs) for servers in groups])
