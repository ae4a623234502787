"""Who may call what: the rule of every RPC, in one table, checked before the RPC runs.

A caller is known by two things. Its TLS certificate (`raftsched.tls`) says what it is: the agent
of one compute cluster (`raftsched-agent:CLUSTER`) or a user (`raftsched-user:NAME`). A user's
bearer token (`authorization: Bearer rst_...` metadata) says what it may do: the token's role and
tenant live in the replicated state (`State.tokens`, created by `raftsched admin token create`
or, for the first admin, from `--bootstrap-token-file`); the state keeps only the sha256 of its
secret.

- AgentGateway: only the agent of the cluster the request names; no token.
- Scheduler: role `user` or above. A token of one tenant submits only jobs of that tenant, lists
  only them, and every call naming a job of another tenant answers NOT_FOUND, exactly as for a
  job that does not exist (no oracle). A token of tenant `*` acts for every tenant.
- Admin: `ClusterStatus` needs `operator`; membership and tokens need `admin`.
- Any call: a client certificate an admin revoked (`raftsched admin cert revoke`, by the sha256
  of its DER bytes, kept in the replicated state) is UNAUTHENTICATED, whatever it presents.
`METHOD_RULES` holds one rule per RPC; `guard` refuses to wrap a service with an RPC it does not
name, so a new RPC without a rule cannot be served, and tests call every RPC as every kind of
caller (tests/integration/test_tls.py, test_tokens.py). With `--insecure-dev` there is no
certificate, no token and no check (plaintext, throwaway clusters only).
"""

from __future__ import annotations

import contextvars
import enum
import functools
import hmac
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc

from raftsched import tls
from raftsched.eventlog import EventLogger
from raftsched.replica import views
from raftsched.spec.issue import show
from raftsched.state.fsm import cert_revoked, token_of
from raftsched.state.model import ALL_TENANTS, Role, State, TokenRecord
from raftsched.tokens import parse_token, secret_digest

log = EventLogger("raftsched.identity")
T = TypeVar("T")

AUTHORIZATION = "authorization"
BEARER = "Bearer "
_RANK = {Role.USER: 0, Role.OPERATOR: 1, Role.ADMIN: 2}


class Rule(enum.Enum):
    AGENT = "the agent of the cluster the request names"
    USER = "a token of role user or above"
    OPERATOR = "a token of role operator or admin"
    ADMIN = "a token of role admin"


SERVICE_RULES: dict[str, Rule] = {
    "raftsched.v1.Scheduler": Rule.USER,
    "raftsched.v1.AgentGateway": Rule.AGENT,
}
"""Every RPC of these services has the service's rule; Admin's are named one by one."""
METHOD_RULES: dict[str, Rule] = {
    "raftsched.v1.Admin/ClusterStatus": Rule.OPERATOR,
    "raftsched.v1.Admin/AddReplica": Rule.ADMIN,
    "raftsched.v1.Admin/RemoveReplica": Rule.ADMIN,
    "raftsched.v1.Admin/CreateToken": Rule.ADMIN,
    "raftsched.v1.Admin/RevokeToken": Rule.ADMIN,
    "raftsched.v1.Admin/ListTokens": Rule.ADMIN,
    "raftsched.v1.Admin/RemoveCluster": Rule.ADMIN,
    "raftsched.v1.Admin/DrainCluster": Rule.ADMIN,
    "raftsched.v1.Admin/SetTenant": Rule.ADMIN,
    "raftsched.v1.Admin/ListTenants": Rule.OPERATOR,
    "raftsched.v1.Admin/SaveSnapshot": Rule.ADMIN,
    "raftsched.v1.Admin/RevokeCertificate": Rule.ADMIN,
    "raftsched.v1.Admin/ListRevokedCertificates": Rule.OPERATOR,
}
_NEEDS = {Rule.USER: Role.USER, Rule.OPERATOR: Role.OPERATOR, Rule.ADMIN: Role.ADMIN}


def rule_of(service: Any, method: Any) -> Rule:
    """The rule of one RPC; KeyError for an RPC no table names."""
    return METHOD_RULES.get(f"{service.full_name}/{method.name}") \
        or SERVICE_RULES[service.full_name]


# --- callers ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Caller:
    """A user's call, once its token checked out."""

    name: str
    """The certificate's common name."""
    token: TokenRecord

    @property
    def tenant(self) -> str:
        return self.token.tenant

    def may_act_for(self, tenant: str) -> bool:
        return self.token.tenant in (ALL_TENANTS, tenant)


_CALLER: contextvars.ContextVar[Caller | None] = contextvars.ContextVar("caller", default=None)


def current_caller() -> Caller | None:
    """The checked caller of the RPC running on this thread; None without TLS (--insecure-dev)
    and for agents."""
    return _CALLER.get()


class StateReader(Protocol):
    """What the checks need of the replica: a local read, and a current one (leader, barrier)."""

    def read(self, fn: Callable[[State], T]) -> T: ...
    def current_read(self, context: grpc.ServicerContext, fn: Callable[[State], T]) -> T: ...


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_not_revoked(fingerprint: str | None, caller: str | None, reader: StateReader) -> None:
    """Refused when the client certificate was revoked. Read on this replica: a follower a
    moment behind the commit may still admit it for that moment (README: Guarantees)."""
    if fingerprint is not None and reader.read(lambda s: cert_revoked(s, fingerprint)):
        raise Refused(grpc.StatusCode.UNAUTHENTICATED,
                      f"the certificate of {caller or 'this caller'!r} (sha256 {fingerprint}) "
                      "was revoked: ask an admin for a new one")


def check_agent(caller: str | None, request: Any) -> None:
    if caller is None:
        raise Refused(grpc.StatusCode.UNAUTHENTICATED, "no client certificate")
    if not caller.startswith(tls.AGENT_PREFIX):
        raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                      f"{caller!r} is not an agent: the AgentGateway is for agents only")
    cluster = caller[len(tls.AGENT_PREFIX):]
    wanted = getattr(request, "cluster_id", None)
    if wanted != cluster:
        raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                      f"the certificate of {caller!r} speaks for cluster {cluster!r} only, not "
                      f"{show(wanted)}")


def check_user(rule: Rule, caller: str | None, metadata: Any, reader: StateReader,
               context: grpc.ServicerContext) -> Caller:
    """The caller of a Scheduler or Admin call, or Refused."""
    if caller is None:
        raise Refused(grpc.StatusCode.UNAUTHENTICATED, "no client certificate")
    if not caller.startswith(tls.USER_PREFIX):
        raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                      f"{caller!r} may not call this service: it is for users "
                      "(raftsched-user:NAME certificates)")
    bearer = next((value for key, value in metadata or () if key == AUTHORIZATION), None)
    if not bearer or not str(bearer).startswith(BEARER):
        raise Refused(grpc.StatusCode.UNAUTHENTICATED,
                      "no token: send 'authorization: Bearer TOKEN' (the CLI: --token or "
                      "$RAFTSCHED_TOKEN)")
    parsed = parse_token(str(bearer)[len(BEARER):])
    if parsed is None:
        raise Refused(grpc.StatusCode.UNAUTHENTICATED, "malformed token")
    token_id, secret = parsed
    record = reader.read(lambda s: token_of(s, token_id))
    if record is None:  # created a moment ago, not yet applied here: look again, current
        record = reader.current_read(context, lambda s: token_of(s, token_id))
    if record is None or not hmac.compare_digest(record.digest, secret_digest(secret)):
        raise Refused(grpc.StatusCode.UNAUTHENTICATED, "unknown or revoked token")
    if _RANK[record.role] < _RANK[_NEEDS[rule]]:
        raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                      f"token {token_id} has role {record.role.value}; this call needs "
                      f"{rule.value}")
    return Caller(caller, record)


def scope_request(who: Caller, request: Any, reader: StateReader,
                  context: grpc.ServicerContext) -> None:
    """Keep a tenant's token inside its tenant: ListJobs lists only its jobs; a call naming a job
    of another tenant is NOT_FOUND, as for a job that does not exist. (SubmitJob checks the
    spec's tenant once it is parsed: `require_tenant`.)"""
    if who.tenant == ALL_TENANTS:
        return
    fields = request.DESCRIPTOR.fields_by_name
    if "job_id" in fields and request.job_id:
        job_id = request.job_id
        tenant = reader.read(lambda s: _tenant_of(s, job_id))
        if tenant is None:  # not applied here yet (or no such job): ask the leader, current
            tenant = reader.current_read(context, lambda s: _tenant_of(s, job_id))
        if tenant is not None and not who.may_act_for(tenant):
            raise Refused(grpc.StatusCode.NOT_FOUND, views.job_not_found_message(job_id))
    elif "tenant" in fields and request.DESCRIPTOR.name == "ListJobsRequest":
        if request.tenant and request.tenant != who.tenant:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                          f"this token lists tenant {who.tenant!r} only")
        request.tenant = who.tenant


def require_tenant(tenant: str) -> None:
    """Raise Refused unless the current caller may act for `tenant` (no caller: insecure-dev)."""
    who = current_caller()
    if who is not None and not who.may_act_for(tenant):
        raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                      f"this token acts for tenant {who.tenant!r}, not {tenant!r}: set "
                      f"'tenant: {who.tenant}' in the spec")


def _tenant_of(state: State, job_id: str) -> str | None:
    job = state.jobs.get(job_id)
    return None if job is None else job.spec.tenant


# --- wrapping servicers -------------------------------------------------------------------------


def guard(servicer: Any, service: Any, *, secure: bool, reader: StateReader) -> Any:
    """`servicer` with every RPC of `service` (a protobuf ServiceDescriptor) checked against its
    rule first; `servicer` itself when not `secure`. KeyError: an RPC without a rule."""
    rules = {method.name: rule_of(service, method) for method in service.methods}
    if not secure:
        return servicer
    wrapped = _Guarded(servicer)
    for method in service.methods:
        setattr(wrapped, method.name, _checked(getattr(servicer, method.name), rules[method.name],
                                               f"{service.name}.{method.name}", reader,
                                               method.server_streaming))
    return wrapped


class _Guarded:
    """A servicer whose RPC methods are replaced by checked ones (other attributes pass)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _checked(method: Callable[[Any, grpc.ServicerContext], Any], rule: Rule, name: str,
             reader: StateReader, streaming: bool) -> Callable[[Any, grpc.ServicerContext], Any]:
    def admit(request: Any, context: grpc.ServicerContext) -> Caller | None:
        caller = tls.common_name(context)
        try:
            check_not_revoked(tls.peer_fingerprint(context), caller, reader)
            if rule is Rule.AGENT:
                check_agent(caller, request)
                return None
            who = check_user(rule, caller, context.invocation_metadata(), reader, context)
            scope_request(who, request, reader, context)
            return who
        except Refused as refused:
            log.warning("call_refused", rpc=name, caller=caller or "", peer=context.peer(),
                        reason=refused.message)
            context.abort(refused.code, refused.message)
            raise  # abort raises; never reached

    if streaming:
        @functools.wraps(method)
        def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            token = _CALLER.set(admit(request, context))
            try:
                yield from method(request, context)
            finally:
                _CALLER.reset(token)
        return stream

    @functools.wraps(method)
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        token = _CALLER.set(admit(request, context))
        try:
            return method(request, context)
        finally:
            _CALLER.reset(token)
    return call
