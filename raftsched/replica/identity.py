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
- Admin: `ClusterStatus` needs `operator`; membership and tokens need `admin`. Operator and
  admin tokens are of tenant `*` (the Admin RPCs act on every tenant); one of another tenant,
  made by an older version or restored from a snapshot, acts as a `user` of its tenant only
  (`queries.honoured_role`).
- Scheduler's `GetTopology` (issue 27: which group, every group's servers), Health and
  Reflection: a client certificate of any kind (agent or user), no token (load
  balancers and grpcurl use them).
- Any call: a client certificate an admin revoked (`raftsched admin cert revoke`, by the sha256
  of its DER bytes, kept in the replicated state) is UNAUTHENTICATED, whatever it presents.
One server interceptor (`IdentityCheck`) checks every method of every service the server
serves; `METHOD_RULES` and `SERVICE_RULES` hold one rule per RPC, the interceptor refuses to be
built for a service with an RPC they do not name, and answers PERMISSION_DENIED for a method it
was not built for, so a new RPC without a rule cannot be served; tests call every RPC as every
kind of caller (tests/integration/test_tls.py, test_tokens.py). With `--insecure-dev` there is
no certificate, no token and no check (plaintext, throwaway clusters only).
"""

from __future__ import annotations

import contextvars
import enum
import hmac
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

import grpc

from raftsched import limits, rpc, tls
from raftsched.environment import TOKEN_ENV
from raftsched.eventlog import EventLogger
from raftsched.replica import views
from raftsched.spec.issue import show
from raftsched.state.model import ALL_TENANTS, Role, State, TokenRecord
from raftsched.state.queries import cert_revoked, honoured_role, token_of
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
    CERTIFICATE = "a client certificate of any kind (agent or user); no token"


SERVICE_RULES: dict[str, Rule] = {
    "raftsched.v1.Scheduler": Rule.USER,
    "raftsched.v1.Schedules": Rule.USER,
    "raftsched.v1.AgentGateway": Rule.AGENT,
    "grpc.health.v1.Health": Rule.CERTIFICATE,
    "grpc.reflection.v1alpha.ServerReflection": Rule.CERTIFICATE,
}
"""Every RPC of these services has the service's rule; Admin's are named one by one."""
METHOD_RULES: dict[str, Rule] = {
    "raftsched.v1.Scheduler/GetTopology": Rule.CERTIFICATE,  # agents learn the groups too
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
    "raftsched.v1.Admin/SetShardMap": Rule.ADMIN,
    "raftsched.v1.Admin/ExportShardKeys": Rule.ADMIN,
    "raftsched.v1.Admin/ImportShardKeys": Rule.ADMIN,
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

    @property
    def role(self) -> Role:
        """The role the token acts with (`queries.honoured_role`)."""
        return honoured_role(self.token)

    def may_act_for(self, tenant: str) -> bool:
        return self.token.tenant in (ALL_TENANTS, tenant)


@dataclass(frozen=True, slots=True)
class Principal:
    """Whoever a checked call is from, as the stream slots count callers."""

    key: str
    """One caller: a token ("token ID"), a compute cluster ("cluster ID"), or a certificate
    ("certificate SHA256") for token-less calls."""
    admin: bool = False
    """An admin-role token: may take the slots kept for admins (ADMIN_STREAM_RESERVE)."""
    user: Caller | None = None


_PRINCIPAL: contextvars.ContextVar[Principal | None] = contextvars.ContextVar("principal",
                                                                               default=None)


def current_principal() -> Principal | None:
    """The checked caller of the RPC running on this thread; None without TLS (--insecure-dev)."""
    return _PRINCIPAL.get()


def current_caller() -> Caller | None:
    """The checked user of the RPC running on this thread; None without TLS (--insecure-dev)
    and for agents and token-less calls."""
    principal = _PRINCIPAL.get()
    return None if principal is None else principal.user


class StateReader(Protocol):
    """What the checks need of the replica: a local read, one without the apply lock (a single
    dict lookup: `RaftNode.read_unlocked`), and a current one (leader, barrier)."""

    def read(self, fn: Callable[[State], T]) -> T: ...
    def read_unlocked(self, fn: Callable[[State], T]) -> T: ...
    def current_read(self, context: grpc.ServicerContext, fn: Callable[[State], T]) -> T: ...
    def leads(self) -> bool:
        """This replica leads and has applied its election barrier: every entry committed
        before it took office is applied here."""
        ...


class Refused(Exception):
    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_not_revoked(fingerprint: str | None, caller: str | None, reader: StateReader) -> None:
    """Refused when the client certificate was revoked. Read on this replica: a follower a
    moment behind the commit may still admit it for that moment (README: Guarantees). One
    lookup, without the apply lock (every call makes it; an apply may hold the lock for ms)."""
    if fingerprint is not None and reader.read_unlocked(lambda s: cert_revoked(s, fingerprint)):
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
    """The caller of a Scheduler or Admin call, or Refused. Every call parses its token,
    hashes the secret and looks the id up in the applied state, without the apply lock (one
    lookup: `RaftNode.read_unlocked`), so a TOKEN_REVOKE refuses the next call once applied
    here. Nothing is kept between calls: a cache of bearer strings would keep usable secrets
    in the replica's memory (docs/security.md), to save ~1 µs of a call (`scripts/bench auth`)."""
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
                      f"${TOKEN_ENV})")
    parsed = parse_token(str(bearer)[len(BEARER):])
    if parsed is None:
        raise Refused(grpc.StatusCode.UNAUTHENTICATED, "malformed token")
    token_id, secret = parsed
    record = reader.read_unlocked(lambda s: token_of(s, token_id))
    if record is None and not reader.leads():
        # Perhaps created a moment ago and not yet applied here: ask the leader (a follower
        # answers UNAVAILABLE naming it, without a barrier). On the leader the applied state
        # is the answer: a token is handed out only once its TOKEN_PUT is applied on the leader
        # that committed it, and every entry an earlier leader committed precedes this
        # leader's election barrier, applied before it leads. So an unknown id costs no
        # committed barrier (a flood of random ids cost one entry each).
        record = reader.current_read(context, lambda s: token_of(s, token_id))
    if record is None or not hmac.compare_digest(record.digest, secret_digest(secret)):
        raise Refused(grpc.StatusCode.UNAUTHENTICATED, "unknown or revoked token")
    who = Caller(caller, record)
    if _RANK[who.role] < _RANK[_NEEDS[rule]]:
        capped = "" if who.role is record.role else \
            f" (a {record.role.value} token of tenant {record.tenant!r} acts as a user: " \
            f"operator and admin tokens must be of tenant {ALL_TENANTS!r})"
        raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                      f"token {token_id} has role {who.role.value}{capped}; this call needs "
                      f"{rule.value}")
    return who


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
    if "tenant" in fields and request.DESCRIPTOR.name in ("ListJobsRequest",
                                                          "WatchEventsRequest"):
        if request.tenant and request.tenant != who.tenant:
            raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                          f"this token lists and watches tenant {who.tenant!r} only")
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


# --- the one check of every call ----------------------------------------------------------------


class RefusalLog:
    """`call_refused` warning lines, bounded: the first refusal of each kind (RPC and status
    code) is always written, others up to REFUSED_CALL_LOG_LINES per REFUSED_CALL_LOG_WINDOW_S;
    the rest are counted, and a `call_refused_suppressed` line at the end of the window says how
    many (a flood of random tokens wrote one line each)."""

    def __init__(self, lines: int = limits.REFUSED_CALL_LOG_LINES,
                 window_s: float = limits.REFUSED_CALL_LOG_WINDOW_S,
                 monotonic: Callable[[], float] = time.monotonic,
                 later: Callable[[float, Callable[[], None]], None] | None = None) -> None:
        self._lines = lines
        self._window_s = window_s
        self._monotonic = monotonic
        self._later = later or _later
        self._lock = threading.Lock()
        self._kinds: set[tuple[str, str]] = set()
        """Kinds seen: at most (RPCs x status codes)."""
        self._window_started_s = monotonic()
        self._written = 0
        self._suppressed = 0
        self._flush_pending = False

    def refused(self, rpc_name: str, code: grpc.StatusCode, **fields: object) -> None:
        kind = (rpc_name, code.name)
        with self._lock:
            now_s = self._monotonic()
            if now_s - self._window_started_s >= self._window_s:
                self._window_started_s, self._written = now_s, 0
            write = kind not in self._kinds or self._written < self._lines
            if write:
                self._kinds.add(kind)
                self._written += 1
            else:
                self._suppressed += 1
                if not self._flush_pending:
                    self._flush_pending = True
                    self._later(self._window_started_s + self._window_s - now_s, self.flush)
        if write:
            log.warning("call_refused", rpc=rpc_name, code=code.name, **fields)

    def flush(self) -> None:
        """Write how many lines were left out since the last flush (if any)."""
        with self._lock:
            count, self._suppressed, self._flush_pending = self._suppressed, 0, False
        if count:
            log.warning("call_refused_suppressed", count=count, window_s=self._window_s,
                        bound="REFUSED_CALL_LOG_LINES")


def _later(delay_s: float, fn: Callable[[], None]) -> None:
    timer = threading.Timer(max(0.0, delay_s), fn)
    timer.daemon = True
    timer.start()


class IdentityCheck(grpc.ServerInterceptor):  # type: ignore[misc]
    """The server interceptor that checks every call against its rule before anything else of
    the replica sees it, for every service: `services` (protobuf ServiceDescriptors) must be
    every service the server serves. KeyError on building it: an RPC without a rule. A method
    it was not built for is PERMISSION_DENIED, never served."""

    def __init__(self, services: Any, reader: StateReader,
                 refusals: RefusalLog | None = None) -> None:
        self._rules: dict[str, Rule] = {}
        for service in services:
            for method in service.methods:
                rule = rule_of(service, method)
                if method.client_streaming and rule is not Rule.CERTIFICATE:
                    raise ValueError(f"{service.full_name}/{method.name}: a request stream "
                                     "can only be checked by its certificate")
                self._rules[f"/{service.full_name}/{method.name}"] = rule
        self._reader = reader
        self._refusals = refusals or RefusalLog()
        self._checked: dict[str, tuple[Any, Any]] = {}
        """method -> (gRPC's handler, the checked one): wrapped once, not per call (a race at
        worst wraps the same handler twice)."""

    def intercept_service(self, continuation: Callable[[Any], Any],
                          handler_call_details: Any) -> Any:
        handler = continuation(handler_call_details)
        if handler is None:
            return None  # no such method: gRPC answers UNIMPLEMENTED
        method: str = handler_call_details.method
        cached = self._checked.get(method)
        if cached is not None and cached[0] is handler:
            return cached[1]
        checked = _checked_handler(handler, method, self._rules.get(method), self)
        self._checked[method] = (handler, checked)
        return checked

    def admit(self, rule: Rule | None, name: str, request: Any,
              context: grpc.ServicerContext) -> Principal:
        """The caller of this call, or abort with why not (logged, bounded: `RefusalLog`)."""
        peer = tls.peer_certificate(context)
        caller = peer.common_name
        try:
            if rule is None:
                raise Refused(grpc.StatusCode.PERMISSION_DENIED,
                              f"{name} has no rule of who may call it, so it is not served")
            check_not_revoked(peer.fingerprint, caller, self._reader)
            return _principal(rule, caller, peer.fingerprint, request, self._reader, context)
        except Refused as refused:
            self._refusals.refused(name, refused.code, caller=caller or "",
                                   peer=context.peer(), reason=refused.message)
            context.abort(refused.code, refused.message)
            raise  # abort raises; never reached


def _principal(rule: Rule, caller: str | None, fingerprint: str | None, request: Any,
               reader: StateReader, context: grpc.ServicerContext) -> Principal:
    if rule is Rule.CERTIFICATE:
        if caller is None or fingerprint is None:
            raise Refused(grpc.StatusCode.UNAUTHENTICATED, "no client certificate")
        return Principal(f"certificate {fingerprint}")
    if rule is Rule.AGENT:
        check_agent(caller, request)
        return Principal(f"cluster {request.cluster_id}")
    who = check_user(rule, caller, context.invocation_metadata(), reader, context)
    scope_request(who, request, reader, context)
    return Principal(f"token {who.token.id}", admin=who.role is Role.ADMIN, user=who)


def _checked_handler(handler: Any, name: str, rule: Rule | None, check: IdentityCheck) -> Any:
    """`handler` whose behaviour first admits the caller (`IdentityCheck.admit`) and runs with
    it as `current_principal()`; a request stream is admitted by its certificate alone."""
    behavior, factory = rpc.handler_parts(handler)
    request_streaming = bool(handler.request_streaming)

    def admitted(request: Any, context: grpc.ServicerContext) -> Principal:
        return check.admit(rule, name, None if request_streaming else request, context)

    def stream(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        token = _PRINCIPAL.set(admitted(request, context))
        try:
            yield from behavior(request, context)
        finally:
            _PRINCIPAL.reset(token)

    def call(request: Any, context: grpc.ServicerContext) -> Any:
        token = _PRINCIPAL.set(admitted(request, context))
        try:
            return behavior(request, context)
        finally:
            _PRINCIPAL.reset(token)

    return factory(stream if handler.response_streaming else call,
                   request_deserializer=handler.request_deserializer,
                   response_serializer=handler.response_serializer)
