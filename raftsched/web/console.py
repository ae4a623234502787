"""What every handler of the console shares: its options, the session store, the templates,
the signed-in session of a request, CSRF checks and the clean error pages.

The console is a client like any other: each session holds its own `Client` made with the
console's certificate (its TLS identity) and the user's token (their authority). Blocking gRPC
calls run in Starlette's threadpool (`call`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs

import jinja2
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.templating import Jinja2Templates

from raftsched import limits
from raftsched.client.groups import job_group
from raftsched.errors import Code, RaftschedError
from raftsched.states import PLACED_TASK_STATE_NAMES, TERMINAL_JOB_STATE_NAMES
from raftsched.web.hub import EventHub
from raftsched.web.sessions import Session, SessionStore

COOKIE = "raftsched_session"
HERE = Path(__file__).parent
STATUS_OF_CODE = {
    Code.INVALID_ARGUMENT: 400, Code.NOT_FOUND: 404, Code.PERMISSION_DENIED: 403,
    Code.FAILED_PRECONDITION: 409, Code.ALREADY_EXISTS: 409, Code.RESOURCE_EXHAUSTED: 429,
    Code.UNAVAILABLE: 503, Code.DEADLINE_EXCEEDED: 504, Code.UNAUTHENTICATED: 401,
}


class ConsoleClient(Protocol):
    """What the console asks of `raftsched.client.Client`."""
    def get_job(self, job_id: str) -> Any: ...
    def list_jobs(self, tenant: str = "", state: str = "", limit: int = 0,
                  page_token: str = "", *, query: str = "",
                  newest_first: bool = False) -> Any: ...
    def list_tasks(self, job_id: str, with_spans: bool = False) -> Any: ...
    def cancel(self, job_id: str, reason: str = "") -> Any: ...
    def task_history(self, job_id: str, task_id: str) -> Any: ...
    def explain(self, job_id: str, task_id: str) -> Any: ...
    def watch_events(self, from_index: int = 0, job_id: str = "", tenant: str = "",
                     clusters: bool = False) -> Iterator[Any]: ...
    def task_logs(self, job_id: str, task_id: str, *, attempt: int = 0, stream: str = "stdout",
                  follow: bool = False, tail_bytes: int = 0, offset: int = 0,
                  on_stream: Callable[[Any], None] | None = None) -> Iterator[Any]: ...
    def cluster_status(self, server: str | None = None, *,
                       include_digest: bool = False) -> Any: ...
    def list_tenants(self) -> Any: ...
    def list_tokens(self) -> Any: ...
    def drain_cluster(self, cluster_id: str, drain: bool, reason: str = "") -> Any: ...
    def list_schedules(self, tenant: str = "") -> Any: ...
    def get_schedule(self, schedule_id: str) -> Any: ...
    def set_schedule(self, schedule_id: str, paused: bool, note: str = "") -> Any: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class Options:
    make_client: Callable[[str], ConsoleClient]
    """A client acting with this token (the console's certificate, the configured servers)."""
    read_only: bool = False
    watch_client: ConsoleClient | None = None
    """The console's own client (its watch token, role operator or admin), whose one event
    stream marks every live page of the console; None: one stream per signed-in session, with
    the user's token."""
    secure_cookie: bool = True
    """The cookie's Secure flag (False only for tests over plain HTTP)."""


class Console:
    def __init__(self, options: Options) -> None:
        self.options = options
        self.sessions: SessionStore[ConsoleClient] = SessionStore(lambda c: c.close())
        environment = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                                         autoescape=True, undefined=jinja2.StrictUndefined)
        environment.filters["when"] = when
        environment.globals["placed_task_states"] = PLACED_TASK_STATE_NAMES
        environment.globals["terminal_job_states"] = sorted(TERMINAL_JOB_STATE_NAMES)
        self.templates = Jinja2Templates(env=environment)
        self._hubs: dict[tuple[str, int], EventHub] = {}
        self._hubs_lock = threading.Lock()

    def hub_for(self, session: Session[ConsoleClient], job_id: str = "") -> EventHub:
        """The hub a live page of this session follows for `job_id`: one per scheduler group
        (event indexes are each group's own log's), the console's, or the session's own (made
        at its first live page; those of ended sessions are dropped here)."""
        group = job_group(session.client, job_id)
        shared = self.options.watch_client
        if shared is not None and group < groups_of(shared):
            return self._hub(("", group), lambda: group_client(shared, group),
                             "console")
        with self._hubs_lock:
            for gone in [key for key in self._hubs
                         if key[0] and not self.sessions.holds(key[0])]:
                self._hubs.pop(gone).close()
        return self._hub((session.session_id, group),
                         lambda: group_client(session.client, group), "session")

    def _hub(self, key: tuple[str, int], source: Callable[[], Any], name: str) -> EventHub:
        with self._hubs_lock:
            hub = self._hubs.get(key)
            if hub is None:
                hub = self._hubs[key] = EventHub(source(), name if key[1] == 0
                                                 else f"{name}-group-{key[1]}")
            return hub


def groups_of(client: Any) -> int:
    """How many scheduler groups a console client talks to (1: a plain `Client`)."""
    return len(getattr(client, "clients", ())) or 1


def group_client(client: Any, group: int) -> Any:
    """The client of one group (a `GroupedClient`'s member; a plain client is group 0)."""
    members = getattr(client, "clients", None)
    return client if members is None else members[group]


def group_summaries(client: Any) -> list[dict[str, Any]]:
    """Each scheduler group's leader, term and replicas, or why it did not answer."""
    rows: list[dict[str, Any]] = []
    for group, status in enumerate(client.group_statuses()):
        if isinstance(status, RaftschedError):
            rows.append({"group": group, "error": status.message})
        else:
            rows.append({"group": group, "error": "", "leader": status.leader,
                         "term": status.term, "replicas": len(status.replicas),
                         "clusters": len(status.clusters)})
    return rows


def group_param(request: Request, client: Any) -> int:
    """The `?group=N` of an operator's page (default 0); 400 for one the deployment lacks."""
    count = groups_of(client)
    text = request.query_params.get("group", "0")
    if not text.isdigit() or int(text) >= count:
        raise PageError(400, f"group {text[:20]!r}: this deployment has group"
                             f"{'s 0 to ' + str(count - 1) if count > 1 else ' 0 only'}")
    return int(text)


class PageError(Exception):
    """Answered as a clean error page with this HTTP status."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def session_of(request: Request) -> Session[ConsoleClient] | None:
    return console_of(request).sessions.get(request.cookies.get(COOKIE))


def render(request: Request, template: str, http_status: int = 200, **values: Any) -> HTMLResponse:
    console = console_of(request)
    session = session_of(request)
    context = {"session": session, "read_only": console.options.read_only, **values}
    response: HTMLResponse = console.templates.TemplateResponse(request, template, context,
                                                                status_code=http_status)
    return response


def error_page(request: Request, status: int, message: str) -> HTMLResponse:
    return render(request, "error.html", http_status=status, status_code=status, message=message)


async def call(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """A blocking client call in the threadpool; its refusal becomes a PageError."""
    try:
        return await run_in_threadpool(function, *args, **kwargs)
    except RaftschedError as error:
        raise PageError(STATUS_OF_CODE.get(error.code, 502),
                        str(error)) from None


def valid_id(value: str) -> str:
    """A job or task id from a path: too long, or with a slash or control character, is an id
    no job has (404) and is not sent to the replicas."""
    if not value or len(value) > limits.WEB_MAX_ID_CHARS or "/" in value or \
            any(ord(ch) < 32 for ch in value) or value in (".", ".."):
        raise PageError(404, "no such job or task")
    return value


async def form_of(request: Request) -> dict[str, str]:
    """A urlencoded form body, bounded by `limits.WEB_MAX_QUERY_BYTES` (413 above)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > limits.WEB_MAX_QUERY_BYTES:
            raise PageError(413, "the form is too large")
    try:
        fields = parse_qs(body.decode(), keep_blank_values=True, max_num_fields=32)
    except (UnicodeDecodeError, ValueError):
        raise PageError(400, "the form is not a urlencoded form") from None
    return {name: values[0] for name, values in fields.items()}


def require_session(request: Request) -> Session[ConsoleClient]:
    session = session_of(request)
    if session is None:
        raise SignIn()
    return session


class SignIn(Exception):
    """No session: the browser is sent to the sign-in page."""


def to_sign_in() -> Response:
    return RedirectResponse("/login", status_code=303)


async def checked_form(request: Request, session: Session[ConsoleClient]) -> dict[str, str]:
    """The POSTed form, if it carries this session's CSRF token (else 403)."""
    form = await form_of(request)
    if not session.csrf_ok(form.get("csrf")):
        raise PageError(403, "the form's CSRF token is missing or wrong: reload the page")
    return form


def when(ms: int) -> str:
    """Milliseconds since the epoch as UTC text ("" for 0)."""
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
