"""What an admin or cluster command must satisfy, as pure checks that name the bad field: the gRPC
side asks before proposing, apply asks again (a replicated command is not trusted because a
proposer sent it). One deliberate exception, a job spec: the leader validates it before
proposing and apply decodes it with `spec.wire.decode_trusted`, which still refuses any shape
that could crash apply or break an invariant, not the user-facing rules (docs/security.md)."""

from __future__ import annotations

from raftsched import limits
from raftsched.options import host_port
from raftsched.protocol import id_problem
from raftsched.protocol import id_problem as tenant_name_problem  # the one id rule
from raftsched.spec.issue import show
from raftsched.state.commands import CertRevoke, ClusterRegister, TenantSet, TokenPut
from raftsched.state.model import ALL_TENANTS, TOKEN_DIGEST_BYTES, TOKEN_ID_CHARS, Role
from raftsched.state.text import text_problem

HEX_DIGITS = frozenset("0123456789abcdef")


ROLES = {role.value: role for role in Role}


def token_put_problem(cmd: TokenPut) -> str | None:
    """Why a TOKEN_PUT is malformed (INVALID_ARGUMENT), naming the field, or None. Pure: the
    gRPC side may ask before proposing."""
    if not is_token_id(cmd.token_id):
        return (f"token_id: must be {TOKEN_ID_CHARS} lowercase hex characters, "
                f"got {show(cmd.token_id)}")
    if len(cmd.digest) != TOKEN_DIGEST_BYTES:
        return (f"digest: must be {TOKEN_DIGEST_BYTES} bytes (the sha256 of the secret), "
                f"got {len(cmd.digest)}")
    if cmd.tenant != ALL_TENANTS:
        problem = tenant_name_problem(cmd.tenant)
        if problem is not None:
            return f"tenant: a tenant name (or {ALL_TENANTS!r} for every tenant) {problem}"
    if cmd.role not in ROLES:
        roles = ", ".join(repr(role) for role in ROLES)
        return f"role: must be one of {roles}, got {show(cmd.role)}"
    if len(cmd.note) > limits.MAX_TOKEN_NOTE_CHARS:
        return (f"note: must be at most MAX_TOKEN_NOTE_CHARS={limits.MAX_TOKEN_NOTE_CHARS} "
                f"characters, got {len(cmd.note)}")
    if (problem := text_problem("note", cmd.note)) is not None:
        return problem
    if cmd.bootstrap and cmd.role != Role.ADMIN:
        return f"bootstrap: the bootstrap token must have role 'admin', got {show(cmd.role)}"
    return None


def token_scope_problem(cmd: TokenPut) -> str | None:
    """Why a new token's role does not fit its tenant (INVALID_ARGUMENT), or None: an operator
    or admin token is of every tenant, since the Admin RPCs act on every tenant. Older versions
    made such tokens of one tenant, and a state may hold one (it is well formed, and honoured as
    a user: `honoured_role`); the replicas refuse to propose a new one."""
    if cmd.role != Role.USER and cmd.tenant != ALL_TENANTS:
        return (f"role: an {cmd.role} token acts for every tenant, so its tenant must be "
                f"{ALL_TENANTS!r}, got tenant {show(cmd.tenant)}: give --tenant '{ALL_TENANTS}', "
                f"or --role user for a token of tenant {show(cmd.tenant)}")
    return None


def is_token_id(value: str) -> bool:
    """Exactly TOKEN_ID_CHARS lowercase hex characters."""
    return len(value) == TOKEN_ID_CHARS and HEX_DIGITS.issuperset(value)


def tenant_set_problem(cmd: TenantSet) -> str | None:
    """Why a TENANT_SET is malformed (INVALID_ARGUMENT), naming the field, or None."""
    if cmd.tenant != ALL_TENANTS:
        problem = tenant_name_problem(cmd.tenant)
        if problem is not None:
            return f"tenant: a tenant name (or {ALL_TENANTS!r} for the defaults) {problem}"
    if not 1 <= cmd.weight <= limits.MAX_TENANT_WEIGHT:
        return f"weight: must be in 1..{limits.MAX_TENANT_WEIGHT}, got {cmd.weight}"
    for name, value in (("max_queued", cmd.max_queued), ("max_running", cmd.max_running)):
        if value > limits.MAX_TASKS_IN_STATE:
            return (f"{name}: must be in 0..{limits.MAX_TASKS_IN_STATE} (0: no limit), "
                    f"got {value}")
    return None


CERT_FINGERPRINT_CHARS = 64
"""A certificate fingerprint: the sha256 of its DER bytes, in lowercase hex."""


def cert_revoke_problem(cmd: CertRevoke) -> str | None:
    """Why a CERT_REVOKE is malformed (INVALID_ARGUMENT), naming the field, or None."""
    if len(cmd.fingerprint) != CERT_FINGERPRINT_CHARS \
            or not HEX_DIGITS.issuperset(cmd.fingerprint):
        return (f"fingerprint: must be the sha256 of the certificate, "
                f"{CERT_FINGERPRINT_CHARS} lowercase hex characters, got {show(cmd.fingerprint)}")
    if len(cmd.subject) > limits.MAX_CERT_SUBJECT_CHARS:
        return (f"subject: must be at most MAX_CERT_SUBJECT_CHARS="
                f"{limits.MAX_CERT_SUBJECT_CHARS} characters, got {len(cmd.subject)}")
    if len(cmd.reason) > limits.MAX_REASON_CHARS:
        return (f"reason: must be at most MAX_REASON_CHARS={limits.MAX_REASON_CHARS} "
                f"characters, got {len(cmd.reason)}")
    return None


def cluster_register_problem(cmd: ClusterRegister) -> str | None:
    """Why a CLUSTER_REGISTER is malformed (INVALID_ARGUMENT), naming the field, or None: the
    cluster id and every capability follow the spec's id rule (so no empty id, no control
    characters for `admin status` to print). Pure: the gateway asks before proposing, apply
    asks again (a replicated command is not trusted because a proposer sent it)."""
    problem = id_problem(cmd.cluster_id)
    if problem is not None:
        return f"cluster_id: {problem}"
    if len(cmd.capabilities) > limits.MAX_CAPABILITIES_PER_CLUSTER:
        return (f"capabilities: at most MAX_CAPABILITIES_PER_CLUSTER="
                f"{limits.MAX_CAPABILITIES_PER_CLUSTER}, got {len(cmd.capabilities)}")
    for position, capability in enumerate(cmd.capabilities):
        problem = id_problem(capability)
        if problem is not None:
            return f"capabilities[{position}]: {problem}"
    for name, count in cmd.custom:
        problem = id_problem(name)
        if problem is not None:
            return f"custom: a resource name {problem}"
        if not 1 <= count <= limits.MAX_CUSTOM_RESOURCE_COUNT:
            return (f"custom[{name}]: must be in 1..{limits.MAX_CUSTOM_RESOURCE_COUNT}, "
                    f"got {count}")
    for name, value, most in (("cpu_milli", cmd.cpu_milli, limits.MAX_CPU_MILLI),
                              ("memory_mb", cmd.memory_mb, limits.MAX_MEMORY_MB),
                              ("gpu", cmd.gpu, limits.MAX_GPU)):
        if not 0 <= value <= most:
            return f"capacity.{name}: must be in 0..{most}, got {value}"
    if not 0 <= cmd.queue_depth <= limits.MAX_AGENT_QUEUE_DEPTH:
        return (f"queue_depth: must be in 0..{limits.MAX_AGENT_QUEUE_DEPTH} "
                f"(MAX_AGENT_QUEUE_DEPTH), got {cmd.queue_depth}")
    return None


def group_servers_problem(servers: tuple[tuple[str, ...], ...], groups: int) -> str:
    """Why a GROUP_SET's servers are refused ("" when they are none, or one list of 1 to
    MAX_REPLICAS HOST:PORT addresses per group)."""
    if not servers:
        return ""
    if len(servers) != groups:
        return f"servers: {len(servers)} groups' addresses for a deployment of {groups}"
    for index, members in enumerate(servers):
        if not 1 <= len(members) <= limits.MAX_REPLICAS:
            return (f"servers (group {index}): {len(members)} addresses; need 1 to "
                    f"MAX_REPLICAS={limits.MAX_REPLICAS}")
        for address in members:
            try:
                host_port(address)
            except ValueError as error:
                return f"servers (group {index}): {address!r} is not HOST:PORT ({error})"
    return ""
