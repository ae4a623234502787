"""Random command streams for property tests and seeded simulations of the state machine.

`next_command(chooser, harness)` draws one command of any kind, valid or not: submits of random
DAGs (with reused idempotency keys), plans from the real planner and random placements, reports
with current, stale, duplicate and made-up fences from the right and wrong clusters, cancels,
cluster status changes and re-registrations, operator mark-lost, API token puts (retries,
conflicts, bootstraps, malformed ones) and revokes (of the last admin too), and ticks. A
`Chooser` hides where the choices come from: Hypothesis (shrinkable) or a seeded `random.Random`
(replayable).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st

from raftsched.spec.wire import doc_to_wire
from raftsched.state import commands as c
from raftsched.state import placement
from raftsched.state.model import LIVE_ATTEMPT_STATES, Attempt
from tests.support.fsmkit import Harness

T = TypeVar("T")

CLUSTERS = ("east", "west", "gpu")
CAPS = {"east": ("linux",), "west": ("linux", "ssd"), "gpu": ("linux", "gpu")}
TENANTS = ("alpha", "beta")
KEYS = ("k1", "k2", "k3")
TOKEN_IDS = ("a000000000000001", "a000000000000002", "b000000000000001", "b000000000000002")
TOKEN_DIGESTS = (b"\x01" * 32, b"\x02" * 32)
TOKEN_TENANTS = ("*", "alpha", "beta")
TOKEN_ROLES = ("user", "operator", "admin")


class Chooser(Protocol):
    def int(self, low: int, high: int) -> int: ...
    def choice(self, options: Sequence[T]) -> T: ...


class RandomChooser:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def int(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)

    def choice(self, options: Sequence[T]) -> T:
        return options[self.rng.randrange(len(options))]


class DataChooser:
    def __init__(self, data: st.DataObject) -> None:
        self.data = data

    def int(self, low: int, high: int) -> int:
        return self.data.draw(st.integers(low, high))

    def choice(self, options: Sequence[T]) -> T:
        return options[self.data.draw(st.integers(0, len(options) - 1))]


def setup(h: Harness) -> None:
    for cluster in CLUSTERS:
        h.register(cluster, caps=CAPS[cluster], cpu=4, memory_mb=4096,
                   gpu=2 if cluster == "gpu" else 0)


def random_job(ch: Chooser) -> dict[str, Any]:
    count = ch.int(1, 7)
    tasks = []
    for i in range(count):
        deps = sorted({f"t{ch.int(0, i - 1)}" for _ in range(ch.int(0, min(i, 3)))}) if i else []
        task: dict[str, Any] = {
            "id": f"t{i}", "command": ["true"], "depends_on": deps,
            "resources": {"cpu": ch.choice([0.5, 1, 2, 3]), "memory_mb": ch.choice([64, 512]),
                          "gpu": ch.choice([0, 0, 0, 1])},
            "retry": {"max_attempts": ch.int(1, 3), "backoff_s": ch.choice([0, 1, 5]),
                      "jitter": ch.choice([0, 0.5]), "non_retryable_exit_codes": [2]},
            "on_lost": ch.choice(["replace", "wait"]),
            "trigger": ch.choice(["all_success", "all_success", "all_done"]),
        }
        if ch.int(0, 4) == 0:
            task["timeout_s"] = ch.choice([1, 30])
        if ch.int(0, 6) == 0:
            task["requires"] = [ch.choice(["ssd", "gpu"])]
        if ch.int(0, 8) == 0:
            task["cluster"] = ch.choice(CLUSTERS)
        if ch.int(0, 5) == 0:
            task["checkpoint"] = True
            task["grace_s"] = ch.choice([0.5, 30])
        tasks.append(task)
    doc: dict[str, Any] = {
        "name": "gen", "tenant": ch.choice(TENANTS), "priority": ch.int(0, 100),
        "failure_policy": ch.choice(["fail_fast", "skip_downstream", "continue"]),
        "allow_unschedulable": ch.int(0, 3) > 0, "scoring": ch.choice(["binpack", "spread"]),
        "priority_class": ch.choice(["low", "normal", "high"]), "preemptible": ch.int(0, 1) == 1,
        "tasks": tasks,
    }
    if ch.int(0, 4) == 0:
        doc["retry_budget"] = ch.int(0, 3)
    if ch.int(0, 3) == 0:
        doc["idempotency_key"] = ch.choice(KEYS)
    return doc


def _attempts(h: Harness) -> list[tuple[str, str, Attempt]]:
    return [(job.id, task.spec.id, attempt) for job in h.state.jobs.values()
            for task in job.tasks for attempt in task.attempts]


def _report(ch: Chooser, h: Harness) -> c.Command:
    attempts = _attempts(h)
    items = []
    cluster = ch.choice(CLUSTERS)
    for _ in range(ch.int(1, 3)):
        if attempts and ch.int(0, 5) > 0:
            live = [a for a in attempts if a[2].state in LIVE_ATTEMPT_STATES]
            job_id, task_id, attempt = ch.choice(live if live and ch.int(0, 3) else attempts)
            fence = attempt.fence
            if ch.int(0, 5) > 0:
                cluster = attempt.cluster_id
        else:
            job_id, task_id, fence = "j0", "t0", ch.int(0, h.state.fence + 2)
        kind = ch.choice([c.ReportKind.STARTED, c.ReportKind.FINISHED, c.ReportKind.FINISHED,
                          c.ReportKind.REJECTED, c.ReportKind.KILLED])
        exit_code = ch.choice([0, 0, 1, 2]) if kind == c.ReportKind.FINISHED else None
        timed_out = kind == c.ReportKind.FINISHED and ch.int(0, 9) == 0
        items.append(c.Report(kind, job_id, task_id, fence, exit_code, timed_out))
    return c.ReportBatch(cluster, h.now_ms, ch.int(0, 2**64 - 1), tuple(items))


def _assign(ch: Chooser, h: Harness) -> c.Command:
    if ch.int(0, 2):
        planned = placement.plan(h.state, now_ms=h.now_ms, max_items=ch.int(1, 6))
        return c.AssignBatch(h.now_ms, tuple(planned.placements), tuple(planned.reservations),
                             tuple(planned.preemptions))
    tasks = [(j.id, t.spec.id) for j in h.state.jobs.values() for t in j.tasks] or [("j", "t")]
    items = tuple(c.Placement(*ch.choice(tasks), ch.choice(CLUSTERS))
                  for _ in range(ch.int(1, 3)))
    reservations = tuple(c.Reservation(*ch.choice(tasks), ch.choice(CLUSTERS))
                         for _ in range(ch.int(0, 1)))
    return c.AssignBatch(h.now_ms, items, reservations)


def _register(ch: Chooser, h: Harness) -> c.Command:
    cluster_id = ch.choice(CLUSTERS)
    cluster = h.state.clusters.get(cluster_id)
    if cluster is None:  # removed (CLUSTER_REMOVE): its agent registers it again
        return c.ClusterRegister(cluster_id, 1, CAPS[cluster_id], ch.choice([2000, 4000, 8000]),
                                 4096, 0, h.now_ms, ())
    known = [c.KnownAttempt(h.state.jobs[j].id, h.state.jobs[j].tasks[i].spec.id, f,
                            bool(ch.int(0, 1)))
             for f, (j, i) in cluster.live.items() if ch.int(0, 3)]
    if ch.int(0, 3) == 0:
        known.append(c.KnownAttempt("ghost", "t0", ch.int(1, h.state.fence + 1), True))
    attempts = _attempts(h)
    if attempts and ch.int(0, 2) == 0:  # a stale attempt of its own (killed) or another's
        job_id, task_id, attempt = ch.choice(attempts)
        known.append(c.KnownAttempt(job_id, task_id, attempt.fence, bool(ch.int(0, 3))))
    cpu = ch.choice([2000, 4000, 8000])
    return c.ClusterRegister(cluster_id, cluster.incarnation + ch.int(0, 1), CAPS[cluster_id],
                             cpu, 4096, cluster.gpu, h.now_ms, tuple(known))


def _mark_lost(ch: Chooser, h: Harness) -> c.Command:
    attempts = _attempts(h)
    if not attempts:
        return c.AttemptMarkLost("j0", "t0", 1, h.now_ms, "gen")
    job_id, task_id, attempt = ch.choice(attempts)
    return c.AttemptMarkLost(job_id, task_id, attempt.fence, h.now_ms, "gen")


def _token_put(ch: Chooser, h: Harness) -> c.Command:
    """From small pools, so that ids collide: identical retries, conflicts, bootstraps once an
    admin exists; now and then a malformed field (a short digest, a bad tenant or role)."""
    tokens = list(h.state.tokens.values())
    if tokens and ch.int(0, 3) == 0:
        token = ch.choice(tokens)
        return c.TokenPut(token.id, token.digest, token.tenant, token.role.value, "retry",
                          h.now_ms, bootstrap=ch.int(0, 3) == 0)
    bootstrap = ch.int(0, 3) == 0
    digest, tenant = ch.choice(TOKEN_DIGESTS), ch.choice(TOKEN_TENANTS)
    role = "admin" if bootstrap and ch.int(0, 5) else ch.choice(TOKEN_ROLES)
    malformed = ch.int(0, 11)
    if malformed == 0:
        digest = digest[:-1]
    elif malformed == 1:
        tenant = "not a name"
    elif malformed == 2:
        role = "root"
    return c.TokenPut(ch.choice(TOKEN_IDS), digest, tenant, role, ch.choice(["", "gen"]),
                      h.now_ms, bootstrap=bootstrap)


def _token_revoke(ch: Chooser, h: Harness) -> c.Command:
    tokens = list(h.state.tokens)
    return c.TokenRevoke(ch.choice(tokens if tokens and ch.int(0, 3) else TOKEN_IDS), h.now_ms)


CERT_FINGERPRINTS = ("0" * 64, "ab" * 32, "0123456789abcdef" * 4, "not-a-fingerprint")


def next_command(ch: Chooser, h: Harness, job_counter: list[int]) -> c.Command:
    kind = ch.int(0, 25)
    if kind <= 2:
        job_counter[0] += 1
        wire = doc_to_wire(random_job(ch))
        if ch.int(0, 9) == 0:
            wire[3] = 101  # an out-of-range priority: apply must refuse it and change nothing
        return c.JobSubmit(f"j{job_counter[0]}", wire, h.now_ms)
    if kind <= 7:
        return _assign(ch, h)
    if kind <= 13:
        return _report(ch, h)
    if kind == 14 and h.state.jobs:
        return c.JobCancel(ch.choice(list(h.state.jobs)), h.now_ms, "gen")
    if kind == 15:
        status = ch.choice(list(c.ClusterStatus))
        return c.ClusterStatusChange(ch.choice(CLUSTERS), status, h.now_ms, "gen")
    if kind == 16:
        return _register(ch, h)
    if kind == 17:
        return _mark_lost(ch, h)
    if kind == 20:
        return _token_put(ch, h)
    if kind == 21:
        return _token_revoke(ch, h)
    if kind == 22:
        return c.ClusterRemove(ch.choice(CLUSTERS), h.now_ms)
    if kind == 23:  # now and then a malformed one (weight 0): refused, changing nothing
        return c.TenantSet(ch.choice([*TENANTS, "*"]), ch.int(0, 4), ch.choice([0, 0, 2, 10]),
                           ch.choice([0, 0, 1, 3]), h.now_ms)
    if kind == 24:
        return c.ClusterDrain(ch.choice(CLUSTERS), bool(ch.int(0, 1)), h.now_ms, "gen")
    if kind == 25:  # a few fingerprints, so that some are revoked twice; now and then malformed
        return c.CertRevoke(ch.choice(CERT_FINGERPRINTS), "raftsched-agent:gen", "gen",
                            h.now_ms)
    h.now_ms += ch.choice([0, 100, 1_000, 5_000, 40_000, 70_000])
    return c.Tick(h.now_ms, ch.int(0, 2**64 - 1))
