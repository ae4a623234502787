"""Who may call what (`raftsched.tls` says who a caller is): the rule of every RPC, in one table.

`RULES` names a rule for every service the replica serves; `guard` wraps a servicer so that each
of its RPCs checks the caller's certificate before it runs. A service added to the API without a
rule here makes `guard` fail at start-up, and tests enumerate every RPC of every service against
every kind of caller (tests/integration/test_tls.py).

- AGENT: only the agent of the cluster the request names (`cluster_id`): a certificate of
  `raftsched-agent:east` may Register/Heartbeat/Report for `east`, nothing else;
- USER: people and services (`raftsched-user:NAME`); agents may not submit, cancel, read jobs
  (their env) or change membership.
With `--insecure-dev` there is no certificate and no check (plaintext, throwaway clusters only).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable
from typing import Any

import grpc

from raftsched import tls
from raftsched.eventlog import EventLogger

log = EventLogger("raftsched.identity")


class Rule(enum.Enum):
    AGENT = "the agent of the cluster the request names"
    USER = "a user (raftsched-user:NAME certificate)"


RULES: dict[str, Rule] = {
    "raftsched.v1.Scheduler": Rule.USER,
    "raftsched.v1.Admin": Rule.USER,
    "raftsched.v1.AgentGateway": Rule.AGENT,
}
"""Service full name -> who may call its RPCs. Health and reflection are open to any caller
the TLS handshake let in (they reveal nothing of the state)."""


def refusal(rule: Rule, caller: str | None, request: Any) -> tuple[grpc.StatusCode, str] | None:
    """Why `caller` (a certificate's common name; None on a plaintext connection) may not make
    this call, or None when it may."""
    if caller is None:
        return grpc.StatusCode.UNAUTHENTICATED, "no client certificate"
    if rule is Rule.AGENT:
        if not caller.startswith(tls.AGENT_PREFIX):
            return (grpc.StatusCode.PERMISSION_DENIED,
                    f"{caller!r} is not an agent: the AgentGateway is for agents only")
        cluster = caller[len(tls.AGENT_PREFIX):]
        wanted = getattr(request, "cluster_id", None)
        if wanted != cluster:
            return (grpc.StatusCode.PERMISSION_DENIED,
                    f"the certificate of {caller!r} speaks for cluster {cluster!r} only, not "
                    f"{wanted!r}")
        return None
    if not caller.startswith(tls.USER_PREFIX):
        return (grpc.StatusCode.PERMISSION_DENIED,
                f"{caller!r} may not call this service: {rule.value}")
    return None


def guard(servicer: Any, service: Any, *, secure: bool) -> Any:
    """`servicer` with every RPC of `service` (a protobuf ServiceDescriptor) checked against its
    rule first; `servicer` itself when not `secure`."""
    rule = RULES[service.full_name]  # KeyError: a new service needs a rule
    if not secure:
        return servicer
    wrapped = _Guarded(servicer)
    for method in service.methods:
        setattr(wrapped, method.name, _checked(getattr(servicer, method.name), rule,
                                               f"{service.name}.{method.name}"))
    return wrapped


class _Guarded:
    """A servicer whose RPC methods are replaced by checked ones (other attributes pass)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _checked(method: Callable[[Any, grpc.ServicerContext], Any], rule: Rule,
             name: str) -> Callable[[Any, grpc.ServicerContext], Any]:
    @functools.wraps(method)
    def call(request: Any, context: grpc.ServicerContext) -> Any:
        caller = tls.common_name(context)
        refused = refusal(rule, caller, request)
        if refused is not None:
            log.warning("call_refused", rpc=name, caller=caller or "", peer=context.peer(),
                        reason=refused[1])
            context.abort(*refused)
        return method(request, context)
    return call
