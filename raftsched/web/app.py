"""The console's ASGI application (Starlette): routes, the bounds every request meets before any
work (query string, form size), security headers, and clean error pages for every refusal (no
traceback reaches a browser)."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from raftsched import eventlog, limits
from raftsched.web import live, operators, output, pages, schedules
from raftsched.web.console import HERE, Console, Options, PageError, SignIn, error_page, to_sign_in

LOG = eventlog.EventLogger("web")
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; style-src 'self'; script-src 'self'; "
                               "img-src 'self' data:; frame-ancestors 'none'; form-action 'self'",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}


def build_app(options: Options) -> Starlette:
    routes = [
        Route("/", pages.home),
        Route("/login", pages.login_page, methods=["GET"]),
        Route("/login", pages.login, methods=["POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        Route("/jobs", pages.jobs),
        Route("/jobs/{job_id}", pages.job),
        Route("/jobs/{job_id}/events", live.events),
        Route("/jobs/{job_id}/timeline", pages.job_timeline),
        Route("/jobs/{job_id}/cancel", pages.cancel_page, methods=["GET"]),
        Route("/jobs/{job_id}/cancel", pages.cancel, methods=["POST"]),
        Route("/jobs/{job_id}/tasks/{task_id}", pages.task),
        Route("/jobs/{job_id}/tasks/{task_id}/output", pages.download),
        Route("/jobs/{job_id}/tasks/{task_id}/output/live", output.live),
        Route("/schedules", schedules.schedules),
        Route("/schedules/{schedule_id}", schedules.schedule),
        Route("/schedules/{schedule_id}/pause", schedules.pause, methods=["POST"]),
        Route("/schedules/{schedule_id}/resume", schedules.resume, methods=["POST"]),
        Route("/clusters", operators.clusters),
        Route("/clusters/{cluster_id}/drain", operators.drain_page, methods=["GET"]),
        Route("/clusters/{cluster_id}/drain", operators.drain, methods=["POST"]),
        Route("/clusters/{cluster_id}/undrain", operators.undrain_page, methods=["GET"]),
        Route("/clusters/{cluster_id}/undrain", operators.undrain, methods=["POST"]),
        Route("/replicas", pages.replicas),
        Route("/tenants", operators.tenants),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={
        PageError: _page_error, SignIn: _sign_in, HTTPException: _http_error,
        Exception: _unexpected})
    app.state.console = Console(options)
    app.add_middleware(_Bounds)
    return app


async def _page_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, PageError)
    return error_page(request, error.status, str(error))


async def _sign_in(request: Request, error: Exception) -> Response:
    return to_sign_in()


async def _http_error(request: Request, error: Exception) -> Response:
    assert isinstance(error, HTTPException)
    return error_page(request, error.status_code, error.detail)


async def _unexpected(request: Request, error: Exception) -> Response:
    """A bug: logged (the path, never the query string, a cookie or a form), a clean 500."""
    LOG.error("web_request_failed", method=request.method, path=request.url.path,
              error=f"{type(error).__name__}: {error}")
    return error_page(request, 500, "the console failed to answer this request")


class _Bounds:
    """Refuses an oversized query string (414) before routing; adds the security headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if len(scope.get("query_string", b"")) > limits.WEB_MAX_QUERY_BYTES:
            await _plain(send, 414, b"414: the query string is too long\n")
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, with_headers)


async def _plain(send: Send, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
