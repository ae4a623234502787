"""Operator pages and admin actions: /clusters (capacity, committed, reported free and unusable
capacity per resource; drain and undrain for admins), /tenants (fair share), and the drain /
undrain confirmation (GET) and action (POST).

Roles are the session's (found at sign-in by `pages._role_of`): operators and admins read these
pages; only an admin may drain or undrain, as the API says (Admin.DrainCluster is admin only).
A `--read-only` console neither offers nor accepts an action. Each action asks for confirmation
naming the cluster and what it affects, and its POST must carry the session's CSRF token."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from raftsched import limits
from raftsched.errors import RaftschedError
from raftsched.web import capacity
from raftsched.web.console import (
    ConsoleClient,
    PageError,
    call,
    checked_form,
    console_of,
    group_client,
    group_param,
    group_summaries,
    groups_of,
    render,
    require_session,
    valid_id,
)
from raftsched.web.sessions import Session

OPERATOR_ROLES = frozenset({"operator", "admin"})
DEFAULT_DRAIN_REASON = "drained from the web console"


def require_operator(request: Request) -> Session[ConsoleClient]:
    session = require_session(request)
    if session.role not in OPERATOR_ROLES:
        raise PageError(403, "this page is for operators and admins: your token's role is user")
    return session


def may_act(request: Request, session: Session[ConsoleClient]) -> bool:
    """Drain and undrain: an admin's session on a console that is not read-only."""
    return session.role == "admin" and not console_of(request).options.read_only


def _require_admin_action(request: Request, session: Session[ConsoleClient]) -> None:
    if console_of(request).options.read_only:
        raise PageError(403, "this console is read-only")
    if session.role != "admin":
        raise PageError(403, f"draining a cluster is for admins: your token's role is "
                             f"{session.role}")


# --- pages --------------------------------------------------------------------------------------


async def clusters(request: Request) -> Response:
    """The compute clusters as one scheduler group's leader sees them (`?group=N`, default 0:
    each group commits its own attempts on every cluster), and with several groups a line per
    group: its leader and term, or why it does not answer."""
    session = require_operator(request)
    group = group_param(request, session.client)
    summaries = await call(group_summaries, session.client) \
        if groups_of(session.client) > 1 else []
    status = await call(leaders_status, group_client(session.client, group))
    return render(request, "clusters.html", status=status, group=group, groups=summaries,
                  page="/clusters",
                  rows=capacity.cluster_rows(status.clusters, status.now_ms),
                  bar_px=capacity.BAR_PX, can_act=may_act(request, session),
                  from_leader=bool(status.leader) and status.leader == status.responder)


def _tenants_listed(client: ConsoleClient) -> tuple[Any, list[str]]:
    """Every tenant (with several groups: their work summed over the groups that answered)
    and why each group that did not answer is missing."""
    answer = client.list_tenants()
    return answer, [error.message for error in getattr(client, "unanswered", [])]


def leaders_status(client: ConsoleClient) -> Any:
    """ClusterStatus from the leader when it answers (only the leader knows the free capacity
    agents report), else from the first replica that does (its clusters' reported free unset)."""
    status = client.cluster_status()
    if status.leader and status.leader != status.responder:
        try:
            return client.cluster_status(server=status.leader)
        except RaftschedError:
            return status
    return status


async def tenants(request: Request) -> Response:
    session = require_operator(request)
    answer, missing = await call(_tenants_listed, session.client)
    return render(request, "tenants.html", answer=answer, missing=missing,
                  rows=capacity.tenant_rows(answer.tenants),
                  tolerance=capacity.STANDING_TOLERANCE)


# --- drain and undrain --------------------------------------------------------------------------


async def drain_page(request: Request) -> Response:
    return await _confirm(request, drain=True)


async def undrain_page(request: Request) -> Response:
    return await _confirm(request, drain=False)


async def drain(request: Request) -> Response:
    return await _act(request, drain=True)


async def undrain(request: Request) -> Response:
    return await _act(request, drain=False)


async def _confirm(request: Request, *, drain: bool) -> Response:
    session = require_operator(request)
    _require_admin_action(request, session)
    cluster_id = valid_id(request.path_params["cluster_id"])
    status = await call(leaders_status, group_client(session.client, 0))
    found = next((c for c in status.clusters if c.cluster_id == cluster_id), None)
    if found is None:
        raise PageError(404, f"no compute cluster {cluster_id!r}")
    if found.draining == drain:
        raise PageError(409, f"cluster {cluster_id} is {'already' if drain else 'not'} "
                             f"draining")
    return render(request, "drain.html", cluster=found, drain=drain,
                  reason=DEFAULT_DRAIN_REASON, max_reason=limits.MAX_REASON_CHARS)


async def _act(request: Request, *, drain: bool) -> Response:
    session = require_session(request)
    cluster_id = valid_id(request.path_params["cluster_id"])
    form = await checked_form(request, session)
    _require_admin_action(request, session)
    reason = form.get("reason", "")[:limits.MAX_REASON_CHARS] if drain else ""
    await call(session.client.drain_cluster, cluster_id, drain,
               reason or (DEFAULT_DRAIN_REASON if drain else ""))
    return RedirectResponse("/clusters", status_code=303)
