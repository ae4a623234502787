"""Caller checks (raftsched.replica.identity) that need no server: the agent rule, the rule
table of every served method, tokens (the role of a tenant-scoped admin token, no barrier for an
unknown one on the leader; a revoke, a wrong secret and a malformed token refused on the next
call; no wait for the apply lock), the certificate read once per call, and the bounded refusal
log."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NoReturn

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from raftsched import tls, tokens
from raftsched.api import raftsched_pb2 as pb
from raftsched.dev import pki
from raftsched.replica import identity
from raftsched.state import commands, fsm
from raftsched.state.model import ALL_TENANTS, Role, State, TokenRecord
from raftsched.state.outcome import Applied

AGENT = f"{tls.AGENT_PREFIX}east"


def test_check_agent_admits_the_agent_of_the_cluster_the_request_names() -> None:
    identity.check_agent(AGENT, pb.HeartbeatRequest(cluster_id="east"))


@pytest.mark.parametrize("caller", [f"{tls.USER_PREFIX}alice", f"{tls.AGENT_PREFIX}west"])
def test_check_agent_refuses_another_caller(caller: str) -> None:
    with pytest.raises(identity.Refused) as caught:
        identity.check_agent(caller, pb.HeartbeatRequest(cluster_id="east"))
    assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED


def test_check_agent_shows_a_long_cluster_id_truncated() -> None:
    """Found by tests/integration/test_fuzz_rpc.py: a 256 KiB cluster_id was echoed whole, and
    the client saw RESOURCE_EXHAUSTED (metadata over its limit) instead of PERMISSION_DENIED."""
    with pytest.raises(identity.Refused) as caught:
        identity.check_agent(AGENT, pb.HeartbeatRequest(cluster_id="x" * 262_145))
    assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
    assert len(caught.value.message) <= 200 and "'east'" in caught.value.message


# --- the one interceptor ------------------------------------------------------------------------


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


class Context:
    """A call with no certificate and the given metadata."""

    def __init__(self, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        self.metadata = metadata

    def auth_context(self) -> dict[str, list[bytes]]:
        return {}

    def peer(self) -> str:
        return "ipv4:127.0.0.1:1"

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return self.metadata

    def abort(self, code: grpc.StatusCode, details: str) -> NoReturn:
        raise Aborted(code, details)


class Reader:
    """A state holding the given tokens; `current_read` (a barrier) is counted. `apply_lock`
    stands for the Raft node's: `read` refuses to wait for it while a test holds it."""

    def __init__(self, *records: TokenRecord, leads: bool = True) -> None:
        self.state = State()
        for record in records:
            self.state.tokens[record.id] = record
        self._leads = leads
        self.barriers = 0
        self.apply_lock = threading.Lock()

    def read(self, fn: Any) -> Any:
        if not self.apply_lock.acquire(blocking=False):
            raise AssertionError("the check waited for the apply lock")
        try:
            return fn(self.state)
        finally:
            self.apply_lock.release()

    def read_unlocked(self, fn: Any) -> Any:
        return fn(self.state)

    def current_read(self, context: Any, fn: Any) -> Any:
        self.barriers += 1
        return fn(self.state)

    def leads(self) -> bool:
        return self._leads


SERVED = [*(pb.DESCRIPTOR.services_by_name[n] for n in ("Scheduler", "AgentGateway", "Admin")),
          health_pb2.DESCRIPTOR.services_by_name["Health"],
          reflection_pb2.DESCRIPTOR.services_by_name["ServerReflection"]]


def test_every_method_the_replica_serves_has_a_rule_and_health_needs_only_a_certificate() -> None:
    identity.IdentityCheck(SERVED, Reader())  # KeyError for a method without a rule
    for service in SERVED[3:]:
        for method in service.methods:
            assert identity.rule_of(service, method) is identity.Rule.CERTIFICATE


def test_a_service_with_a_method_without_a_rule_cannot_be_checked() -> None:
    admin = SimpleNamespace(full_name="raftsched.v1.Admin", methods=[
        SimpleNamespace(name="NewThing", client_streaming=False)])
    with pytest.raises(KeyError):
        identity.IdentityCheck([admin], Reader())


def test_a_method_the_check_was_not_built_for_is_never_served() -> None:
    check = identity.IdentityCheck(SERVED[:1], Reader())
    served = grpc.unary_unary_rpc_method_handler(lambda request, context: "served")
    handler = check.intercept_service(lambda details: served,
                                      SimpleNamespace(method="/raftsched.v1.Other/Call"))
    with pytest.raises(Aborted) as caught:
        handler.unary_unary(pb.ListJobsRequest(), Context())
    assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return ((identity.AUTHORIZATION, f"{identity.BEARER}{token}"),)


USER_CERT = f"{tls.USER_PREFIX}ada"


def test_an_unknown_token_on_the_leader_costs_no_barrier_and_elsewhere_asks_the_leader() -> None:
    unknown = tokens.new_token().token
    for leads, barriers in ((True, 0), (False, 1)):
        reader = Reader(leads=leads)
        with pytest.raises(identity.Refused) as caught:
            identity.check_user(identity.Rule.USER, USER_CERT, _bearer(unknown), reader,
                                Context())
        assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
        assert reader.barriers == barriers


def test_an_admin_token_of_one_tenant_acts_as_a_user_of_it() -> None:
    made = tokens.new_token()
    reader = Reader(TokenRecord(made.token_id, made.digest, "ta", Role.ADMIN, 0, "old"))
    who = identity.check_user(identity.Rule.USER, USER_CERT, _bearer(made.token), reader,
                              Context())
    assert who.role is Role.USER and who.tenant == "ta" and not who.may_act_for("tb")
    for rule in (identity.Rule.OPERATOR, identity.Rule.ADMIN):
        with pytest.raises(identity.Refused) as caught:
            identity.check_user(rule, USER_CERT, _bearer(made.token), reader, Context())
        assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
        assert "acts as a user" in caught.value.message


def _apply(state: State, command: commands.Command) -> None:
    """Apply as a replica does: the encoded entry through the state machine."""
    assert isinstance(fsm.apply(state, commands.encode(command)), Applied)


def _put(state: State, made: tokens.NewToken) -> None:
    _apply(state, commands.TokenPut(made.token_id, made.digest, ALL_TENANTS, Role.USER.value,
                                    "test", state.now_ms))


def _refusal(token: str, reader: Reader) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(identity.Refused) as caught:
        identity.check_user(identity.Rule.USER, USER_CERT, _bearer(token), reader, Context())
    return caught.value.code, caught.value.message


REVOKED = (grpc.StatusCode.UNAUTHENTICATED, "unknown or revoked token")


def _another_secret(made: tokens.NewToken) -> tokens.NewToken:
    """A token of the same id as `made` with another secret."""
    parsed = tokens.parse_token(tokens.new_token().token)
    assert parsed is not None
    secret = parsed[1]
    return tokens.NewToken(made.token_id, f"{tokens.TOKEN_PREFIX}{made.token_id}_{secret}",
                           tokens.secret_digest(secret))


def test_a_revoked_token_is_refused_on_the_first_call_after_its_revoke_is_applied() -> None:
    """And a token put again under the same id with another secret admits the new secret only:
    nothing of the old record outlives its revoke."""
    reader = Reader()
    made = tokens.new_token()
    _put(reader.state, made)
    for _ in range(3):
        identity.check_user(identity.Rule.USER, USER_CERT, _bearer(made.token), reader, Context())
    _apply(reader.state, commands.TokenRevoke(made.token_id, reader.state.now_ms))
    assert _refusal(made.token, reader) == REVOKED
    again = _another_secret(made)
    _put(reader.state, again)
    assert _refusal(made.token, reader) == REVOKED
    who = identity.check_user(identity.Rule.USER, USER_CERT, _bearer(again.token), reader,
                              Context())
    assert who.token.digest == again.digest


def test_the_right_id_with_a_wrong_secret_is_refused_after_the_right_secret_was_admitted() -> None:
    made = tokens.new_token()
    reader = Reader(TokenRecord(made.token_id, made.digest, ALL_TENANTS, Role.ADMIN, 0, ""))
    identity.check_user(identity.Rule.ADMIN, USER_CERT, _bearer(made.token), reader, Context())
    assert _refusal(_another_secret(made).token, reader) == REVOKED
    identity.check_user(identity.Rule.ADMIN, USER_CERT, _bearer(made.token), reader, Context())


@pytest.mark.parametrize("bearer", ["rst_", "rst_0123_abc", "rst_0123456789ABCDEF_" + "a" * 43,
                                    "rst_0123456789abcdef_" + "a" * 19, "sk-" + "a" * 43])
def test_a_malformed_token_is_refused_even_after_a_good_one_was_admitted(bearer: str) -> None:
    made = tokens.new_token()
    reader = Reader(TokenRecord(made.token_id, made.digest, ALL_TENANTS, Role.USER, 0, ""))
    identity.check_user(identity.Rule.USER, USER_CERT, _bearer(made.token), reader, Context())
    assert _refusal(bearer, reader) == (grpc.StatusCode.UNAUTHENTICATED, "malformed token")
    assert _refusal(made.token + "!", reader) == (grpc.StatusCode.UNAUTHENTICATED,
                                                  "malformed token")


def test_a_call_does_not_wait_for_the_apply_lock_to_check_its_certificate_and_token() -> None:
    """An apply holds the Raft node's lock for as long as it runs (ms for a large entry): every
    call's check would wait behind it (`scripts/bench auth`: p99 2.1 ms beside 2 ms applies)."""
    made = tokens.new_token()
    reader = Reader(TokenRecord(made.token_id, made.digest, ALL_TENANTS, Role.USER, 0, ""))
    with reader.apply_lock:  # an apply is running
        identity.check_not_revoked("ab" * 32, USER_CERT, reader)
        identity.check_user(identity.Rule.USER, USER_CERT, _bearer(made.token), reader, Context())


class CertContext(Context):
    """A call over mutual TLS with the certificate `cert_path`; auth_context reads counted."""

    def __init__(self, cert_path: Path, metadata: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(metadata)
        self._pem = cert_path.read_bytes()
        self.auth_reads = 0

    def auth_context(self) -> dict[str, list[bytes]]:
        self.auth_reads += 1
        return {"x509_common_name": [USER_CERT.encode()], "x509_pem_cert": [self._pem]}


def test_a_call_reads_its_certificate_once_and_a_revoked_one_is_refused_on_the_next_call(
        tmp_path: Path) -> None:
    user = pki.issue_user(pki.create_authority(tmp_path), "ada")
    fingerprint = tls.certificate_identity(user.cert).fingerprint
    made = tokens.new_token()
    reader = Reader(TokenRecord(made.token_id, made.digest, ALL_TENANTS, Role.USER, 0, ""))
    check = identity.IdentityCheck(SERVED[:1], reader)
    context = CertContext(user.cert, _bearer(made.token))
    assert tls.peer_certificate(context) == tls.PeerCertificate(USER_CERT, fingerprint)
    context.auth_reads = 0
    principal = check.admit(identity.Rule.USER, "Scheduler.ListJobs", pb.ListJobsRequest(),
                            context)
    assert principal.key == f"token {made.token_id}" and context.auth_reads == 1
    _apply(reader.state, commands.CertRevoke(fingerprint, USER_CERT, "stolen", 0))
    with pytest.raises(Aborted) as caught:
        check.admit(identity.Rule.USER, "Scheduler.ListJobs", pb.ListJobsRequest(), context)
    assert caught.value.code == grpc.StatusCode.UNAUTHENTICATED
    assert f"(sha256 {fingerprint}) was revoked" in str(caught.value)


def test_a_plaintext_call_has_no_certificate() -> None:
    assert tls.peer_certificate(Context()) == tls.PeerCertificate(None, None)


def test_refusal_lines_are_bounded_the_first_of_each_kind_shown_the_rest_counted(
        caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    later: list[tuple[float, Any]] = []
    refusals = identity.RefusalLog(lines=3, window_s=10.0, monotonic=lambda: now[0],
                                   later=lambda delay, fn: later.append((delay, fn)))
    with caplog.at_level(logging.WARNING, logger="raftsched.identity"):
        for _ in range(10):
            refusals.refused("Scheduler.ListJobs", grpc.StatusCode.UNAUTHENTICATED)
        refusals.refused("Admin.ListTokens", grpc.StatusCode.PERMISSION_DENIED)  # a new kind
        assert [delay for delay, _ in later] == [10.0]  # one flush scheduled, at the window end
        now[0] = 10.0
        later[0][1]()
        refusals.refused("Scheduler.ListJobs", grpc.StatusCode.UNAUTHENTICATED)  # a new window
    events = [(r.event, r.fields) for r in caplog.records]  # type: ignore[attr-defined]
    assert [e for e, _ in events].count("call_refused") == 5
    assert ("call_refused_suppressed", {"count": 7, "window_s": 10.0,
                                        "bound": "REFUSED_CALL_LOG_LINES"}) in events
