"""What applying a command returns, one result type per command: `outcome.Applied(result)`.

Results are return values only, for the proposer that waits on its entry (the gRPC service, the
agent gateway, the leader loop) and for observers of the applied log (the auditor, simulations).
They are never written to the log or to a snapshot, and they are deterministic: every replica
applying the same entry returns an equal result.

One frozen slotted dataclass per command. Batches are the apply path's hot spot: apply answers
every item of every batch on every replica, though only the proposer reads the answer. So a
batch result builds no record per item where the batch's own items can serve (measured with
`scripts/bench fsm`, in instructions per task lifecycle: one record per assignment and per
report, as NamedTuples, cost 9% of apply; frozen dataclasses cost more still):
- a report batch answers with its verdicts, `verdicts[i]` for the batch's `items[i]`;
- an assign batch answers `(placement, fence)` pairs, the placement being the batch's own item.
Dropped placements are rare and get a full record.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from raftsched.errors import Code
from raftsched.protocol import ReportVerdict
from raftsched.state.commands import Placement
from raftsched.state.feasibility import Unfit


@dataclass(frozen=True, slots=True)
class JobSubmitted:
    job_id: str
    """The new job, or the job an earlier submit with the same idempotency key created."""
    created: bool


@dataclass(frozen=True, slots=True)
class JobRefused:
    """One job of a JOB_SUBMIT_BATCH refused, exactly as a JOB_SUBMIT of it would be."""

    code: Code
    reason: str
    retry_after_ms: int = 0


@dataclass(frozen=True, slots=True)
class JobsSubmitted:
    """A JOB_SUBMIT_BATCH's answers, one per job in order."""

    answers: tuple[JobSubmitted | JobRefused, ...]


@dataclass(frozen=True, slots=True)
class JobCancelled:
    job_id: str
    cancelled: int
    """Tasks this cancel moved to CANCELLED."""
    changed: bool
    """False when the job was already cancelled (a repeated cancel)."""


@dataclass(frozen=True, slots=True)
class ClusterRegistered:
    cluster_id: str
    created: bool
    """False for a re-registration (a reconnecting or restarted agent)."""
    lost: int
    """Our live attempts the agent did not know of: now LOST."""
    kills: int
    """Attempts the agent runs that are no longer current: kill directives added."""


@dataclass(frozen=True, slots=True)
class ClusterStatusChanged:
    cluster_id: str
    changed: bool
    lost: int
    """Attempts made LOST by a change to LOST (`on_lost: replace` tasks only)."""


Assigned = tuple[Placement, int]
"""A placement of the batch that was applied, and the fence of the attempt it created."""


class DropReason(enum.Enum):
    """Why a placement was dropped before the feasibility rule could be asked."""

    JOB_NOT_FOUND = "job_not_found"
    TASK_NOT_FOUND = "task_not_found"
    TASK_NOT_RUNNABLE = "task_not_runnable"
    CLUSTER_NOT_REGISTERED = "cluster_not_registered"
    CLUSTER_RESERVED = "cluster_reserved"
    """The cluster is kept for another task that waited too long for room."""
    TENANT_AT_LIMIT = "tenant_at_limit"
    """The job's tenant already runs its `max_running` tasks."""


@dataclass(frozen=True, slots=True)
class Dropped:
    placement: Placement
    reason: DropReason | Unfit
    """An `Unfit` member when the feasibility rule refused it (`feasibility.unfit`)."""
    detail: str
    """For people, e.g. `task is ASSIGNED, not RUNNABLE` or `cluster east has no room: …`."""


@dataclass(frozen=True, slots=True)
class AssignResult:
    """An ASSIGN_BATCH, re-validated item by item: what got a fence and what was dropped."""

    assigned: tuple[Assigned, ...]
    """(placement, fence) for each placement applied, in the batch's order."""
    dropped: tuple[Dropped, ...]
    preempted: tuple[int, ...] = ()
    """Fences of the attempts the batch's preemptions stopped (those refused are left out)."""
    withdrawing: tuple[int, ...] = ()
    """Fences of the queued attempts the batch asked their agents to withdraw."""


@dataclass(frozen=True, slots=True)
class ReportResult:
    """A REPORT_BATCH: the state machine's verdict on each report, in the batch's order."""

    verdicts: tuple[ReportVerdict, ...]
    """`verdicts[i]` answers the batch's `items[i]`."""


@dataclass(frozen=True, slots=True)
class TickResult:
    fired: int
    """Timers that changed something (backoffs ended, assignment or run timeouts)."""
    expired_keys: int
    forgotten_jobs: int


@dataclass(frozen=True, slots=True)
class MarkedLost:
    job_id: str
    task_id: str
    fence: int


@dataclass(frozen=True, slots=True)
class BarrierResult:
    nonce: str
    """The proposer's nonce: a leader recognises its own barrier by it."""


@dataclass(frozen=True, slots=True)
class TokenPutResult:
    token_id: str
    created: bool
    """False when nothing changed: an identical retry of the same id, or a bootstrap token
    proposed while an admin token already exists."""


@dataclass(frozen=True, slots=True)
class TokenRevokeResult:
    token_id: str


@dataclass(frozen=True, slots=True)
class ClusterRemoved:
    cluster_id: str


@dataclass(frozen=True, slots=True)
class GroupSetResult:
    group: int
    groups: int
    changed: bool
    """False when the log already said exactly this."""


@dataclass(frozen=True, slots=True)
class ShardMapSetResult:
    epoch: int
    changed: bool
    """False when the log already held exactly this map at this epoch."""


@dataclass(frozen=True, slots=True)
class KeysImported:
    imported: int
    kept: int
    """Keys this group held already (they stay as they were)."""


@dataclass(frozen=True, slots=True)
class TenantSetResult:
    tenant: str
    changed: bool
    """False when the tenant already had exactly this weight and these limits."""


@dataclass(frozen=True, slots=True)
class ClusterDrained:
    cluster_id: str
    draining: bool
    changed: bool


@dataclass(frozen=True, slots=True)
class CertRevoked:
    fingerprint: str
    created: bool
    """False: it was revoked already (the first revocation's subject and reason stay)."""


@dataclass(frozen=True, slots=True)
class ScheduleCreated:
    schedule_id: str
    created: bool
    """False for a repeated create of the same schedule (same spec and rule)."""


@dataclass(frozen=True, slots=True)
class ScheduleSetResult:
    schedule_id: str
    paused: bool
    changed: bool


@dataclass(frozen=True, slots=True)
class ScheduleDeleted:
    schedule_id: str


@dataclass(frozen=True, slots=True)
class ScheduleFired:
    schedule_id: str
    job_ids: tuple[str, ...]
    """The runs this entry started (a buffered time and backfill runs included)."""
    skipped: int
    """Nominal times this entry passed over without a run (missed, overlap, paused, refused)."""


@dataclass(frozen=True, slots=True)
class ScheduleBackfilled:
    schedule_id: str
    queued: int
    """Nominal times queued for a run (some may have started in this entry: `job_ids`)."""
    skipped: int
    """Nominal times that already had their run."""
    job_ids: tuple[str, ...]


Result = (
    JobSubmitted
    | JobCancelled
    | ClusterRegistered
    | ClusterStatusChanged
    | AssignResult
    | ReportResult
    | TickResult
    | MarkedLost
    | BarrierResult
    | TokenPutResult
    | TokenRevokeResult
    | ClusterRemoved
    | TenantSetResult
    | GroupSetResult
    | ShardMapSetResult
    | KeysImported
    | ClusterDrained
    | CertRevoked
    | JobsSubmitted
    | ScheduleCreated
    | ScheduleSetResult
    | ScheduleDeleted
    | ScheduleFired
    | ScheduleBackfilled
)
"""What `outcome.Applied.result` holds: one type per command."""
