"""The deterministic scheduler state machine.

`apply(state, entry) -> Outcome` is a pure function of the state and the entry bytes: no clock,
no randomness, no environment, no I/O. Time and entropy arrive inside the commands. Two replicas
fed the same log reach byte-identical snapshots (`snapshot.dump`).

One `apply_<command>` handler per command tag. Handlers return `Applied` or `Rejected`; they raise
only for bugs (assertions). Every event costs O(out-degree of the task it touches); nothing scans
a job or the state, except the operations whose inherent cost is the job (cancel, fail_fast) and
`invariants.check_invariants`, which tests and simulations run after each apply.

The handlers live by domain (Nomad splits its state store the same way): `admin` (tokens,
tenants, certificates), `jobs` (submit, cancel), `clusters`, `assign` (the leader's placements),
`reports` (agents' reports, an operator's word), `tick` (timers, retention, aging), above them
`schedules` (which creates its runs through `jobs`); below them
`lifecycle` (an attempt's end and what follows), `retention`, `queues` (a task's state and all
it keeps in step), and, for readers, `queries` and `rules`. Outcomes are `outcome.Applied` and
`outcome.Rejected`."""

from __future__ import annotations

from raftsched import limits
from raftsched.errors import Code
from raftsched.state.admin import (
    apply_cert_revoke,
    apply_group_set,
    apply_tenant_set,
    apply_token_put,
    apply_token_revoke,
)
from raftsched.state.assign import apply_assign_batch
from raftsched.state.clusters import (
    apply_cluster_drain,
    apply_cluster_register,
    apply_cluster_remove,
    apply_cluster_status,
)
from raftsched.state.commands import (
    AssignBatch,
    AttemptMarkLost,
    Barrier,
    CertRevoke,
    ClusterDrain,
    ClusterRegister,
    ClusterRemove,
    ClusterStatusChange,
    Command,
    CommandError,
    GroupSet,
    JobCancel,
    JobSubmit,
    JobSubmitBatch,
    KeysImport,
    ReportBatch,
    ScheduleBackfill,
    ScheduleCreate,
    ScheduleDelete,
    ScheduleFire,
    ScheduleSet,
    ShardMapSet,
    TenantSet,
    Tick,
    TokenPut,
    TokenRevoke,
    decode,
)
from raftsched.state.jobs import apply_job_cancel, apply_job_submit, apply_job_submit_batch
from raftsched.state.model import State
from raftsched.state.outcome import Applied, Outcome, Rejected
from raftsched.state.reports import apply_attempt_mark_lost, apply_report_batch
from raftsched.state.results import BarrierResult
from raftsched.state.schedules import (
    apply_schedule_backfill,
    apply_schedule_create,
    apply_schedule_delete,
    apply_schedule_fire,
    apply_schedule_set,
)
from raftsched.state.shards import apply_keys_import, apply_shard_map_set
from raftsched.state.tick import apply_tick


def apply(state: State, entry: bytes) -> Outcome:
    """Apply one log entry. A malformed entry is rejected, deterministically, on every replica."""
    try:
        cmd = decode(entry)
    except CommandError as exc:
        return Rejected(Code.INVALID_ARGUMENT, str(exc))
    return apply_command(state, cmd)


def apply_command(state: State, cmd: Command) -> Outcome:
    state.now_ms = max(state.now_ms, cmd.now_ms)
    match cmd:
        case JobSubmit():
            return apply_job_submit(state, cmd)
        case JobCancel():
            return apply_job_cancel(state, cmd)
        case ClusterRegister():
            return apply_cluster_register(state, cmd)
        case ClusterStatusChange():
            return apply_cluster_status(state, cmd)
        case AssignBatch():
            return apply_assign_batch(state, cmd)
        case ReportBatch():
            return apply_report_batch(state, cmd)
        case Tick():
            return apply_tick(state, cmd)
        case AttemptMarkLost():
            return apply_attempt_mark_lost(state, cmd)
        case Barrier():
            return apply_barrier(state, cmd)
        case TokenPut():
            return apply_token_put(state, cmd)
        case TokenRevoke():
            return apply_token_revoke(state, cmd)
        case ClusterRemove():
            return apply_cluster_remove(state, cmd)
        case GroupSet():
            return apply_group_set(state, cmd)
        case ShardMapSet():
            return apply_shard_map_set(state, cmd)
        case KeysImport():
            return apply_keys_import(state, cmd)
        case TenantSet():
            return apply_tenant_set(state, cmd)
        case ClusterDrain():
            return apply_cluster_drain(state, cmd)
        case CertRevoke():
            return apply_cert_revoke(state, cmd)
        case JobSubmitBatch():
            return apply_job_submit_batch(state, cmd)
        case ScheduleFire():
            return apply_schedule_fire(state, cmd)
        case ScheduleCreate():
            return apply_schedule_create(state, cmd)
        case ScheduleSet():
            return apply_schedule_set(state, cmd)
        case ScheduleDelete():
            return apply_schedule_delete(state, cmd)
        case ScheduleBackfill():
            return apply_schedule_backfill(state, cmd)
    raise AssertionError(f"unhandled command {cmd!r}")


def apply_barrier(state: State, cmd: Barrier) -> Applied[BarrierResult]:
    if cmd.raft_address and cmd.grpc_address:
        known = state.replica_addresses
        if cmd.raft_address in known or len(known) < limits.MAX_REPLICAS:
            known[cmd.raft_address] = cmd.grpc_address
    return Applied(BarrierResult(cmd.nonce))
