"""The console's web application (Starlette): the page, the login, the
live status as server-sent events, the controls and the exports.

Only ``/``, ``/login`` and ``/health`` answer without a session; everything
else is a 401 (JSON). A state-changing request needs the session cookie (HttpOnly,
SameSite=Strict, Secure over TLS) *and* the session's CSRF token in the
``X-CSRF-Token`` header, which only the console page itself can read; a POST
whose ``Origin`` is another site is refused outright.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from salvo.organiser.console.auth import SESSION_TTL_S, LoginLimiter, Password, Session, Sessions
from salvo.organiser.console.pages import Pages, security_headers
from salvo.organiser.console.validate import parse_control
from salvo.organiser.tournament.controls import ControlError, Controls

log = logging.getLogger("salvo.organiser.console")

COOKIE = "salvo_console"
CSRF_HEADER = "x-csrf-token"
POLL_S = 0.5  # how often a stream asks the director for its status
HEARTBEAT_S = 15.0  # an "alive" event this often when nothing changes (the page's watchdog counts on it)
MAX_STREAMS = 32
MAX_BODY = 16 * 1024
BY = "console"  # who the audit says applied a control
EXPORTS = {
    "games.csv": "text/csv; charset=utf-8",
    "teams.csv": "text/csv; charset=utf-8",
    "tournament.json": "application/json",
}

Handler = Callable[[Request], Awaitable[Response]]


def _error(status: int, code: str, reason: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(ControlError(code, reason).as_json(), status, {**security_headers(), **(headers or {})})


async def _body(request: Request) -> bytes | None:
    """The request's body, None once it runs past MAX_BODY (read no further:
    a login form or a control is a few hundred bytes, a flood is not)."""
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return None
    return body


def _json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), default=str)


class _State:
    """What the handlers share."""

    def __init__(self, controls: Controls, password: str, secure: bool, login_delay_s: float, room: bool) -> None:
        self.controls, self.secure, self.login_delay_s = controls, secure, login_delay_s
        self.password = Password(password)
        self.sessions = Sessions()
        self.limiter = LoginLimiter()
        self.pages = Pages(room)
        self.stopping = threading.Event()  # set by Console.close(): streams end
        self.streams = 0
        self.poll_s = POLL_S
        self.heartbeat_s = HEARTBEAT_S

    def session(self, request: Request) -> Session | None:
        return self.sessions.get(request.cookies.get(COOKIE))


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


def _held_off(state: _State, client: str) -> Response:
    """429: ``client`` has used up its password attempts for now."""
    retry = int(state.limiter.wait(client)) + 1
    page = state.pages.login(f"Too many wrong passwords: try again in {retry} s.")
    return HTMLResponse(page.body, 429, {**page.headers, "Retry-After": str(retry)})


def _foreign_origin(request: Request) -> bool:
    """A browser names the page a POST comes from; it must be this site."""
    origin = request.headers.get("origin")
    if origin is None:
        return False
    return origin != f"{request.url.scheme}://{request.url.netloc}"


def _logged_in(state: _State, handler: Callable[[Request, Session], Awaitable[Response]]) -> Handler:
    async def guarded(request: Request) -> Response:
        session = state.session(request)
        if session is None:
            return _error(401, "login_required", "log in to the console first")
        return await handler(request, session)

    return guarded


def _csrf(state: _State, handler: Callable[[Request, Session], Awaitable[Response]]) -> Handler:
    async def checked(request: Request, session: Session) -> Response:
        if _foreign_origin(request) or not session.csrf_matches(request.headers.get(CSRF_HEADER)):
            return _error(403, "csrf", "this request did not come from the console page; reload it")
        return await handler(request, session)

    return _logged_in(state, checked)


def create_app(
    controls: Controls,
    password: str,
    *,
    secure: bool,
    login_delay_s: float = 0.5,
    routes: Sequence[BaseRoute] = (),
    health: Callable[[], dict[str, Any]] | None = None,
) -> Starlette:
    """The console for ``controls``; ``secure``: it is served over TLS (the
    cookie is then ``Secure``). ``login_delay_s``: how long a wrong password
    waits for its answer. ``routes``: public ones served beside it (the
    projector's). ``health``: what ``GET /health`` answers (no login; 200
    when its ``ok`` is true, else 503), for a container's healthcheck.
    Raises ConsoleError for a weak password."""
    state = _State(controls, password, secure, login_delay_s, room=bool(routes))

    async def index(request: Request) -> Response:
        session = state.session(request)
        page = state.pages.console(session.csrf) if session else state.pages.login()
        return HTMLResponse(page.body, headers=page.headers)

    async def login(request: Request) -> Response:
        client = _client(request)
        if _foreign_origin(request):
            return _error(403, "csrf", "log in from the console's own page")
        if state.limiter.wait(client) > 0:  # at once: no need to read the body
            return _held_off(state, client)
        body = await _body(request)
        if body is None:
            return _error(413, "too_large", f"a login is under {MAX_BODY} bytes")
        form = parse_qs(body.decode("utf-8", errors="replace"))
        # The attempt counts before it is judged, with nothing awaited in
        # between: guesses sent at once all passed the check above while
        # their bodies came, and each would have been judged.
        attempt = state.limiter.take(client)
        if attempt is None:
            return _held_off(state, client)
        if not state.password.matches(form.get("password", [""])[0]):
            log.warning("console: a wrong password from %s", client)
            await asyncio.sleep(state.login_delay_s)
            page = state.pages.login("Wrong password.")
            return HTMLResponse(page.body, 401, page.headers)
        state.limiter.succeeded(client, attempt)
        session = state.sessions.open()
        log.info("console: %s logged in", client)
        response = RedirectResponse("/", 303, security_headers())
        # Kept as long as the session lasts (the night), not only until the browser closes.
        lasts = int(SESSION_TTL_S)
        response.set_cookie(
            COOKIE, session.token, max_age=lasts, httponly=True, samesite="strict", secure=state.secure, path="/"
        )
        return response

    async def logout(request: Request, session: Session) -> Response:
        state.sessions.close(session.token)
        response = JSONResponse({"ok": True}, headers=security_headers())
        response.delete_cookie(COOKIE, httponly=True, samesite="strict", secure=state.secure, path="/")
        return response

    async def status(request: Request, session: Session) -> Response:
        return Response(_json(await run_in_threadpool(controls.status)), 200, security_headers(), "application/json")

    async def events(request: Request, session: Session) -> Response:
        if state.streams >= MAX_STREAMS:
            return _error(503, "busy", "too many console pages are open")
        headers = {**security_headers(), "X-Accel-Buffering": "no"}
        return StreamingResponse(_stream(state, session), headers=headers, media_type="text/event-stream")

    async def control(request: Request, session: Session) -> Response:
        try:
            raw = await _body(request)
            if raw is None:
                return _error(413, "too_large", f"a control is under {MAX_BODY} bytes")
            body = json.loads(raw or b"null")
        except ValueError:
            return _error(400, "bad_request", "the body is not JSON")
        try:
            action, args = parse_control(body)
            entry = await run_in_threadpool(controls.apply, action, args, BY)
        except ControlError as refused:
            return JSONResponse(refused.as_json(), 400, security_headers())
        log.info("console: %s %s", action, _json(args))
        return Response(_json(entry), 200, security_headers(), "application/json")

    async def export(request: Request, session: Session) -> Response:
        name = request.path_params["name"]
        if name not in EXPORTS:
            return _error(404, "not_found", f"the exports are {', '.join(EXPORTS)}")
        if name == "tournament.json":
            body = json.dumps(await run_in_threadpool(controls.export_json), indent=2, default=str)
        else:
            body = await run_in_threadpool(controls.export_csv, name.removesuffix(".csv"))
        headers = {**security_headers(), "Content-Disposition": f'attachment; filename="{name}"'}
        return Response(body, 200, headers, EXPORTS[name])

    async def healthy(request: Request) -> Response:
        assert health is not None
        try:
            body = health()  # cheap and lock-free: on the event loop, not behind a stuck status()
        except Exception as exc:  # a bug is an unhealthy answer, not a 500
            log.exception("console: the health check failed")
            body = {"ok": False, "reason": f"the health check failed: {exc!r}"}
        return JSONResponse(body, 200 if body.get("ok") else 503, security_headers())

    async def gone(request: Request, exc: Exception) -> Response:
        # Its connection closed before its body was all there (the web
        # server closes a request that does not come whole in time): there
        # is nobody to answer, and nothing to log (a flood would be logged).
        return Response(b"", 400)

    app = Starlette(
        exception_handlers={ClientDisconnect: gone},
        routes=[
            *([Route("/health", healthy, methods=["GET"])] if health is not None else []),
            Route("/", index, methods=["GET"]),
            Route("/login", login, methods=["POST"]),
            Route("/logout", _csrf(state, logout), methods=["POST"]),
            Route("/api/status", _logged_in(state, status), methods=["GET"]),
            Route("/api/events", _logged_in(state, events), methods=["GET"]),
            Route("/api/control", _csrf(state, control), methods=["POST"]),
            Route("/export/{name}", _logged_in(state, export), methods=["GET"]),
            *routes,
        ],
    )
    app.state.console = state
    return app


def stop_streams(app: Starlette) -> None:
    """End every open event stream (before the server stops)."""
    state: _State = app.state.console
    state.stopping.set()


def _sse(event: str, data: str) -> bytes:
    return f"event: {event}\ndata: {data}\n\n".encode()


async def _stream(state: _State, session: Session) -> AsyncIterator[bytes]:
    """The status whenever it changes (polled); ``event: alive`` (``{"every":
    seconds}``) after the first status and whenever nothing has changed for
    that long, so the page can tell a director that stopped answering from a
    quiet one;
    ``event: logout`` and the end when the session is gone; the last status
    and ``event: closing`` when the server stops (the director exits)."""
    # Counted here, where nothing awaits between the check and the count: the
    # handler's check alone let simultaneous requests all through.
    if state.streams >= MAX_STREAMS:
        yield b"retry: 10000\n\n" + _sse("busy", '"too many console pages are open"')
        return
    state.streams += 1
    try:
        alive = _sse("alive", _json({"every": state.heartbeat_s}))
        yield b"retry: 2000\n\n"
        last, quiet = "", 0.0
        while not state.stopping.is_set():
            if state.sessions.get(session.token) is None:
                yield _sse("logout", "{}")
                return
            now = await _status(state, last)
            if now != last:
                yield _sse("status", now) + (b"" if last else alive)  # the page learns the beat at once
                last, quiet = now, 0.0
            elif quiet >= state.heartbeat_s:
                yield alive
                quiet = 0.0
            await asyncio.sleep(state.poll_s)
            quiet += state.poll_s
        # The director is done (its last game recorded, or stopped): the page
        # gets its final word, not the one from half a second before.
        now = await _status(state, last)
        yield (_sse("status", now) if now != last else b"") + _sse("closing", "{}")
    finally:
        state.streams -= 1


async def _status(state: _State, last: str) -> str:
    try:
        return _json(await run_in_threadpool(state.controls.status))
    except Exception:  # the director's bug must not end the organiser's view
        log.exception("console: the director's status failed")
        return last
