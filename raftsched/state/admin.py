"""Admin records: API tokens, tenants' weights and limits, revoked certificates."""

from __future__ import annotations

from raftsched import limits
from raftsched.errors import Code
from raftsched.spec.issue import show
from raftsched.state.commands import CertRevoke, GroupSet, TenantSet, TokenPut, TokenRevoke
from raftsched.state.model import (
    GroupIdentity,
    RevokedCert,
    Role,
    ShardMap,
    State,
    TenantPolicy,
    TokenRecord,
)
from raftsched.state.outcome import Applied, Rejected
from raftsched.state.queries import honoured_role
from raftsched.state.results import (
    CertRevoked,
    GroupSetResult,
    TenantSetResult,
    TokenPutResult,
    TokenRevokeResult,
)
from raftsched.state.rules import (
    ROLES,
    cert_revoke_problem,
    group_servers_problem,
    tenant_set_problem,
    token_put_problem,
)
from raftsched.state.text import visible


def apply_token_put(state: State, cmd: TokenPut) -> Applied[TokenPutResult] | Rejected:
    """Create a token. The same id again with the same digest, tenant and role is a retry
    (`created=False`); with any of them different it is ALREADY_EXISTS. A bootstrap token
    changes nothing once an admin token exists. An operator or admin token of one tenant is
    kept as older versions kept it (a log written then must replay the same); the replicas
    refuse to propose a new one (`token_scope_problem`) and honour one only as a user."""
    problem = token_put_problem(cmd)
    if problem is not None:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    role = ROLES[cmd.role]
    if cmd.bootstrap and _has_admin(state):
        return Applied(TokenPutResult(cmd.token_id, created=False))
    record = state.tokens.get(cmd.token_id)
    if record is not None:
        differences = _token_differences(record, cmd.digest, cmd.tenant, role)
        if differences:
            return Rejected(Code.ALREADY_EXISTS,
                            f"token {cmd.token_id} already exists with a different "
                            f"{', '.join(differences)}")
        return Applied(TokenPutResult(cmd.token_id, created=False))
    if len(state.tokens) >= limits.MAX_TOKENS:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"{len(state.tokens)} tokens held, the bound MAX_TOKENS="
                        f"{limits.MAX_TOKENS}: revoke one first")
    state.tokens[cmd.token_id] = TokenRecord(cmd.token_id, cmd.digest, cmd.tenant, role,
                                             state.now_ms, cmd.note)
    assert len(state.tokens) <= limits.MAX_TOKENS
    return Applied(TokenPutResult(cmd.token_id, created=True))


def _token_differences(record: TokenRecord, digest: bytes, tenant: str, role: Role) -> list[str]:
    """What makes a TOKEN_PUT differ from the token of its id (the digest itself is not shown)."""
    differences = []
    if record.digest != digest:
        differences.append("digest")
    if record.tenant != tenant:
        differences.append(f"tenant ({show(record.tenant)}, not {show(tenant)})")
    if record.role != role:
        differences.append(f"role ({record.role.value!r}, not {role.value!r})")
    return differences


def apply_token_revoke(state: State, cmd: TokenRevoke) -> Applied[TokenRevokeResult] | Rejected:
    record = state.tokens.get(cmd.token_id)
    if record is None:
        return Rejected(Code.NOT_FOUND, f"token {show(cmd.token_id)} not found")
    if honoured_role(record) == Role.ADMIN and _admin_count(state) == 1:
        return Rejected(Code.FAILED_PRECONDITION,
                        f"token {cmd.token_id} is the last admin token: without one the cluster "
                        f"cannot be managed; create another admin token first")
    del state.tokens[cmd.token_id]
    assert _admin_count(state) > 0 or honoured_role(record) != Role.ADMIN
    return Applied(TokenRevokeResult(cmd.token_id))


def _has_admin(state: State) -> bool:
    return any(honoured_role(token) == Role.ADMIN for token in state.tokens.values())


def _admin_count(state: State) -> int:
    """O(tokens), at most MAX_TOKENS: only token commands ask, and they are rare."""
    return sum(1 for token in state.tokens.values() if honoured_role(token) == Role.ADMIN)


def apply_tenant_set(state: State, cmd: TenantSet) -> Applied[TenantSetResult] | Rejected:
    """Set a tenant's weight and limits. Lowering a limit below what the tenant holds refuses
    nothing already accepted: queued tasks stay queued and running ones run on; it bounds what
    comes next."""
    problem = tenant_set_problem(cmd)
    if problem is not None:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    record = state.tenants.get(cmd.tenant)
    if record is None and len(state.tenants) >= limits.MAX_TENANTS:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"{len(state.tenants)} tenants configured, the bound "
                        f"MAX_TENANTS={limits.MAX_TENANTS}")
    wanted = (cmd.weight, cmd.max_queued, cmd.max_running)
    if record is not None and (record.weight, record.max_queued, record.max_running) == wanted:
        return Applied(TenantSetResult(cmd.tenant, changed=False))
    state.tenants[cmd.tenant] = TenantPolicy(cmd.tenant, cmd.weight, cmd.max_queued,
                                             cmd.max_running, state.now_ms)
    return Applied(TenantSetResult(cmd.tenant, changed=True))


def apply_group_set(state: State, cmd: GroupSet) -> Applied[GroupSetResult] | Rejected:
    """Record which group of how many this log is (once); the same again changes nothing;
    another answer is refused, naming both (a replica configured as another group). The same
    group with other servers (every group's gRPC addresses) replaces them; none keeps them."""
    if not 0 <= cmd.group < cmd.groups <= limits.MAX_GROUPS:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"group {cmd.group} of {cmd.groups}: need 0 <= group < groups <= "
                        f"MAX_GROUPS={limits.MAX_GROUPS}")
    if cmd.shards != limits.VIRTUAL_SHARDS:
        return Rejected(Code.INVALID_ARGUMENT,
                        f"{cmd.shards} shards: a deployment has VIRTUAL_SHARDS="
                        f"{limits.VIRTUAL_SHARDS}")
    problem = group_servers_problem(cmd.servers, cmd.groups)
    if problem:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    wanted = GroupIdentity(cmd.group, cmd.groups, cmd.shards)
    if state.group is None:
        state.group = GroupIdentity(cmd.group, cmd.groups, cmd.shards, cmd.servers)
        if cmd.joining:  # owns no shard until the deployment's map is written here
            state.shard_map = ShardMap(0, b"")
        return Applied(GroupSetResult(cmd.group, cmd.groups, changed=True))
    current = state.group
    if (current.group, current.groups, current.shards) == \
            (wanted.group, wanted.groups, wanted.shards):
        if not cmd.servers or cmd.servers == current.servers:
            return Applied(GroupSetResult(cmd.group, cmd.groups, changed=False))
        state.group = GroupIdentity(cmd.group, cmd.groups, cmd.shards, cmd.servers)
        return Applied(GroupSetResult(cmd.group, cmd.groups, changed=True))
    return Rejected(Code.FAILED_PRECONDITION,
                    f"this log is group {state.group.group} of {state.group.groups}; a replica "
                    f"configured as group {cmd.group} of {cmd.groups} may not change that (check "
                    "its --group and --groups)")


def apply_cert_revoke(state: State, cmd: CertRevoke) -> Applied[CertRevoked] | Rejected:
    """Remember a revoked client certificate. Revoking one twice is no error (`created=False`,
    the first record stays); there is no un-revoke: issue a new certificate."""
    problem = cert_revoke_problem(cmd)
    if problem is not None:
        return Rejected(Code.INVALID_ARGUMENT, problem)
    if cmd.fingerprint in state.revoked_certs:
        return Applied(CertRevoked(cmd.fingerprint, created=False))
    if len(state.revoked_certs) >= limits.MAX_REVOKED_CERTS:
        return Rejected(Code.RESOURCE_EXHAUSTED,
                        f"{len(state.revoked_certs)} certificates revoked, the bound "
                        f"MAX_REVOKED_CERTS={limits.MAX_REVOKED_CERTS}: rotate the CA")
    state.revoked_certs[cmd.fingerprint] = RevokedCert(
        cmd.fingerprint, visible(cmd.subject)[:limits.MAX_CERT_SUBJECT_CHARS],
        visible(cmd.reason)[:limits.MAX_REASON_CHARS], state.now_ms)
    return Applied(CertRevoked(cmd.fingerprint, created=True))
