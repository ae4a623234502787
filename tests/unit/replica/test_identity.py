"""Caller checks (raftsched.replica.identity) that need no server: the agent rule, the rule
table of every served method, tokens (the role of a tenant-scoped admin token, no barrier for an
unknown one on the leader) and the bounded refusal log."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any, NoReturn

import grpc
import pytest
from grpc_health.v1 import health_pb2
from grpc_reflection.v1alpha import reflection_pb2

from raftsched import tls, tokens
from raftsched.api import raftsched_pb2 as pb
from raftsched.replica import identity
from raftsched.state.model import Role, State, TokenRecord

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
    """A state holding the given tokens; `current_read` (a barrier) is counted."""

    def __init__(self, *records: TokenRecord, leads: bool = True) -> None:
        self.state = State()
        for record in records:
            self.state.tokens[record.id] = record
        self._leads = leads
        self.barriers = 0

    def read(self, fn: Any) -> Any:
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
